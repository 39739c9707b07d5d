//! One live, handshaken server connection as the rest of the peer sees it: a queue to
//! its writer, plus the few flags the keep-alive and shutdown logic need.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use bytes::Bytes;
use switchyard_service_protocol::{self as sp, ServiceMessage};
use tokio::sync::{mpsc, watch, Notify};

/// What the writer task is asked to do.
pub enum Out {
    /// Encoded service messages (VarInt-prefixed), written back to back.
    Data(Bytes),
    /// Send a WebSocket Close frame and stop.
    Close,
}

static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

/// Milliseconds on a process-wide monotonic clock.
pub fn now_ms() -> u64 {
    EPOCH.elapsed().as_millis() as u64
}

pub struct Link {
    /// Process-unique, to tell sessions of the same slot apart.
    pub id: u64,
    /// The `cid` this connection was dialled with.
    pub cid: String,
    tx: mpsc::UnboundedSender<Out>,
    /// False after a ServiceError: the SDK stops writing to such a connection.
    writable: AtomicBool,
    /// Written by the writer after each socket write.
    pub last_write_ms: AtomicU64,
    /// Clients pinned to this connection (the `#client` keep-alive value).
    pub clients: AtomicUsize,
    /// Wakes the reader to end the session (ServiceError, stop).
    pub kill: Notify,
    finack: watch::Sender<bool>,
    /// Bytes queued for the writer and not yet written to the socket.
    queued: AtomicUsize,
    /// Notified after each socket write.
    drained: Notify,
}

impl Link {
    pub fn new(id: u64, cid: String, tx: mpsc::UnboundedSender<Out>) -> Self {
        Link {
            id,
            cid,
            tx,
            writable: AtomicBool::new(true),
            last_write_ms: AtomicU64::new(now_ms()),
            clients: AtomicUsize::new(0),
            kill: Notify::new(),
            finack: watch::Sender::new(false),
            queued: AtomicUsize::new(0),
            drained: Notify::new(),
        }
    }

    pub fn is_writable(&self) -> bool {
        self.writable.load(Ordering::Relaxed) && !self.tx.is_closed()
    }

    /// Encodes and queues one message; `false` if this connection takes no more writes.
    pub fn send(&self, message: impl Into<ServiceMessage>) -> bool {
        if !self.is_writable() {
            return false;
        }
        let bytes = sp::encoded(&message.into());
        let len = bytes.len();
        self.queued.fetch_add(len, Ordering::Relaxed);
        if self.tx.send(Out::Data(bytes)).is_err() {
            self.queued.fetch_sub(len, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// The writer put `len` queued bytes on the socket.
    pub fn wrote(&self, len: usize) {
        self.queued.fetch_sub(len, Ordering::Relaxed);
        self.drained.notify_waiters();
    }

    /// Waits while more than `limit` bytes are queued (back-pressure for producers such as
    /// streams, which would otherwise queue without bound); returns at once once the
    /// connection takes no more writes.
    pub async fn wait_room(&self, limit: usize) {
        loop {
            let drained = self.drained.notified();
            tokio::pin!(drained);
            // Registered before the check, so a write in between is not missed.
            drained.as_mut().enable();
            if self.queued.load(Ordering::Relaxed) <= limit || !self.is_writable() {
                return;
            }
            // Bounded: a writer that died notifies nobody.
            let _ = tokio::time::timeout(Duration::from_millis(100), drained).await;
        }
    }

    /// Stops all further writes and ends the session (the slot then reconnects).
    pub fn fail(&self) {
        self.writable.store(false, Ordering::Relaxed);
        self.kill.notify_one();
    }

    /// Queues a WebSocket Close after everything already queued.
    pub fn close(&self) {
        self.writable.store(false, Ordering::Relaxed);
        let _ = self.tx.send(Out::Close);
    }

    pub fn set_finack(&self) {
        self.finack.send_replace(true);
    }

    pub async fn wait_finack(&self) {
        let mut rx = self.finack.subscribe();
        let _ = rx.wait_for(|acked| *acked).await;
    }
}
