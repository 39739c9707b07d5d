//! Pending `*WithAck` requests of one hub container: ids counted from 1, answered by the
//! service's Ack (spec §1.5), 10 s timeout as in the SDK.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::oneshot;

use super::error::AckError;

/// The SDK's ack timeout.
pub const ACK_TIMEOUT: Duration = Duration::from_secs(10);

/// Ack status codes (SDK `AckStatus`).
pub mod status {
    pub const OK: i32 = 1;
    pub const NOT_FOUND: i32 = 2;
}

#[derive(Debug)]
struct Outcome {
    status: i32,
    message: String,
}

#[derive(Default)]
pub struct Acks {
    next: AtomicI32,
    pending: Mutex<HashMap<i32, oneshot::Sender<Outcome>>>,
}

/// A registered ack id and the receiver of its answer.
pub struct PendingAck {
    pub id: i32,
    rx: oneshot::Receiver<Outcome>,
}

impl Acks {
    pub fn new() -> Self {
        Acks::default()
    }

    /// Allocates the next id (1, 2, …; wraps past `i32::MAX` back to 1).
    pub fn register(&self) -> PendingAck {
        let id = loop {
            let id = self.next.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
            if id > 0 {
                break id;
            }
            self.next.store(0, Ordering::Relaxed);
        };
        let (tx, rx) = oneshot::channel();
        self.pending.lock().insert(id, tx);
        PendingAck { id, rx }
    }

    /// Delivers an Ack; unknown ids (late or duplicate) are ignored.
    pub fn resolve(&self, id: i32, status: i32, message: String) {
        if let Some(tx) = self.pending.lock().remove(&id) {
            let _ = tx.send(Outcome { status, message });
        }
    }

    pub fn forget(&self, id: i32) {
        self.pending.lock().remove(&id);
    }

    /// Drops every pending ack (the waiters see [`AckError::Stopped`]).
    pub fn clear(&self) {
        self.pending.lock().clear();
    }

    /// Waits for the answer: Ok → `true`, NotFound → `false`, else an error.
    pub async fn wait(&self, pending: PendingAck) -> Result<bool, AckError> {
        let id = pending.id;
        match tokio::time::timeout(ACK_TIMEOUT, pending.rx).await {
            Err(_) => {
                self.forget(id);
                Err(AckError::Timeout(id))
            }
            Ok(Err(_)) => Err(AckError::Stopped),
            Ok(Ok(Outcome { status, message })) => match status {
                status::OK => Ok(true),
                status::NOT_FOUND => Ok(false),
                _ => Err(AckError::Failed { status, message }),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn ids_start_at_one_and_statuses_map() {
        let acks = Acks::new();
        let a = acks.register();
        let b = acks.register();
        let c = acks.register();
        assert_eq!((a.id, b.id, c.id), (1, 2, 3));
        acks.resolve(1, 1, String::new());
        acks.resolve(2, 2, String::new());
        acks.resolve(3, 4, "boom".into());
        assert_eq!(acks.wait(a).await, Ok(true));
        assert_eq!(acks.wait(b).await, Ok(false));
        assert_eq!(
            acks.wait(c).await,
            Err(AckError::Failed {
                status: 4,
                message: "boom".into()
            })
        );
    }

    #[tokio::test(start_paused = true)]
    async fn times_out() {
        let acks = Acks::new();
        let a = acks.register();
        assert_eq!(acks.wait(a).await, Err(AckError::Timeout(1)));
        assert!(acks.pending.lock().is_empty());
    }
}
