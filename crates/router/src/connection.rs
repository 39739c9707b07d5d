//! One client connection as the router sees it, and its outbound queue.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use bytes::Bytes;
use parking_lot::{Mutex, MutexGuard};
use switchyard_core::{CloseReason, ConnectionId, GroupName, Protocol, UserId};
use tokio::sync::Notify;

use crate::Traffic;

pub struct Connection {
    id: ConnectionId,
    user: Option<UserId>,
    /// Set once the handshake succeeded; only then is the connection in its hub's indices.
    protocol: OnceLock<Protocol>,
    outbound: Outbound,
    /// Groups this connection is in, so removal does not scan every group.
    /// `None` once the connection left its hub: late joins are refused.
    pub(crate) groups: Mutex<Option<Vec<GroupName>>>,
    /// This connection's hub messages in and out (its own cache lines, not the hub's).
    traffic: Traffic,
}

impl Connection {
    pub fn new(id: ConnectionId, user: Option<UserId>, max_pending_bytes: usize) -> Self {
        Connection {
            id,
            user,
            protocol: OnceLock::new(),
            outbound: Outbound::new(max_pending_bytes),
            groups: Mutex::new(Some(Vec::new())),
            traffic: Traffic::default(),
        }
    }

    pub fn id(&self) -> &ConnectionId {
        &self.id
    }

    pub fn user(&self) -> Option<&UserId> {
        self.user.as_ref()
    }

    /// The hub protocol, once the handshake chose it.
    pub fn protocol(&self) -> Option<&Protocol> {
        self.protocol.get()
    }

    /// Records the handshake's protocol. Returns false if one was already set.
    pub fn set_protocol(&self, protocol: Protocol) -> bool {
        self.protocol.set(protocol).is_ok()
    }

    pub fn outbound(&self) -> &Outbound {
        &self.outbound
    }

    /// Hub messages this connection sent and was sent (see [`crate::Hub::deliver`]).
    pub fn traffic(&self) -> &Traffic {
        &self.traffic
    }

    /// Outbound bytes queued and not yet taken by the writer.
    pub fn queued_bytes(&self) -> usize {
        self.outbound.pending_bytes()
    }

    pub fn groups(&self) -> Vec<GroupName> {
        self.groups.lock().clone().unwrap_or_default()
    }

    /// How many groups the connection is in.
    pub fn group_count(&self) -> usize {
        self.groups.lock().as_ref().map_or(0, Vec::len)
    }

    pub fn in_group(&self, group: &GroupName) -> bool {
        self.groups
            .lock()
            .as_ref()
            .is_some_and(|groups| groups.contains(group))
    }

    /// Asks the connection to end: queued frames are still written, then a Close.
    pub fn close(&self, reason: CloseReason) {
        self.outbound.close(reason);
    }
}

/// What a writer gets from [`Outbound::next_batch`].
#[derive(Debug, PartialEq, Eq)]
pub enum Batch {
    /// Frames were appended to the caller's buffer.
    Frames,
    /// Nothing is left to write and the connection must close for this reason.
    Close(CloseReason),
    /// [`Outbound::interrupt`] was called: the writer is asked to look at its connection's
    /// state (a new transport is taking the connection over).
    Interrupted,
}

/// A byte-budgeted queue of framed messages. Publishers push without waiting; a push that
/// would pass the budget closes the connection as a slow consumer and drops its backlog,
/// so one slow reader never holds memory or time from anyone else.
pub struct Outbound {
    state: Mutex<QueueState>,
    ready: Notify,
    max_pending_bytes: usize,
    dropped_frames: AtomicU64,
}

#[derive(Default)]
struct QueueState {
    /// Handed over whole to the writer by [`Outbound::try_drain`], so an idle connection's
    /// queue holds no allocation (one is made per batch instead).
    frames: Vec<Bytes>,
    pending_bytes: usize,
    closing: Option<CloseReason>,
    /// Frames queue but are not handed to the writer (see [`Outbound::hold`]).
    held: bool,
    /// The next drain reports [`Batch::Interrupted`] (see [`Outbound::interrupt`]).
    interrupted: bool,
}

impl Outbound {
    pub fn new(max_pending_bytes: usize) -> Self {
        Outbound {
            state: Mutex::new(QueueState::default()),
            ready: Notify::new(),
            max_pending_bytes,
            dropped_frames: AtomicU64::new(0),
        }
    }

    /// Queues one frame. Returns false if the connection is closing (the frame is dropped,
    /// which is only ever the case for a connection that is going away).
    pub fn push(&self, frame: Bytes) -> bool {
        let mut state = self.state.lock();
        if state.closing.is_some() {
            self.dropped_frames.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let pending = state.pending_bytes + frame.len();
        // A single frame larger than the budget still goes out on an empty queue: the budget
        // bounds the backlog, not the message size.
        if pending > self.max_pending_bytes && !state.frames.is_empty() {
            let dropped = state.frames.len() as u64 + 1;
            state.frames = Vec::new();
            state.pending_bytes = 0;
            state.closing = Some(CloseReason::SlowConsumer {
                pending_bytes: pending,
                budget: self.max_pending_bytes,
            });
            drop(state);
            self.dropped_frames.fetch_add(dropped, Ordering::Relaxed);
            self.ready.notify_one();
            return false;
        }
        self.enqueue(state, frame, pending);
        true
    }

    /// Queues one frame if it fits the budget (a frame larger than the budget still goes on an
    /// empty queue). Unlike [`Outbound::push`], a frame that does not fit is refused and the
    /// queue stays open: the caller decides what to do with the sender instead.
    pub fn try_push(&self, frame: Bytes) -> bool {
        let state = self.state.lock();
        if state.closing.is_some() {
            return false;
        }
        let pending = state.pending_bytes + frame.len();
        if pending > self.max_pending_bytes && !state.frames.is_empty() {
            return false;
        }
        self.enqueue(state, frame, pending);
        true
    }

    /// Appends a frame that fits (or goes on an empty queue) and wakes the writer if it was idle.
    #[inline]
    fn enqueue(&self, mut state: MutexGuard<'_, QueueState>, frame: Bytes, pending: usize) {
        let was_empty = state.frames.is_empty();
        state.frames.push(frame);
        state.pending_bytes = pending;
        drop(state);
        if was_empty {
            self.ready.notify_one();
        }
    }

    /// Keeps queued frames from the writer until [`Outbound::release`]: a connection that
    /// has just joined a cluster-wide channel is held until its subscription is live, so the
    /// client hears its handshake response only once messages sent to it from any node reach
    /// it. A close is not held.
    pub fn hold(&self) {
        self.state.lock().held = true;
    }

    /// Whether frames are being held back (see [`Outbound::hold`]).
    pub fn is_held(&self) -> bool {
        self.state.lock().held
    }

    /// Hands what was held to the writer.
    pub fn release(&self) {
        let mut state = self.state.lock();
        state.held = false;
        let waiting = !state.frames.is_empty();
        drop(state);
        if waiting {
            self.ready.notify_one();
        }
    }

    /// Makes the writer's next [`Outbound::next_batch`] return [`Batch::Interrupted`] once,
    /// before any frames: how a writer blocked waiting for frames is told to stop.
    pub fn interrupt(&self) {
        self.state.lock().interrupted = true;
        self.ready.notify_one();
    }

    /// The byte budget.
    pub fn max_pending_bytes(&self) -> usize {
        self.max_pending_bytes
    }

    /// Asks the writer to finish: frames already queued are still delivered, then the reason.
    /// The first reason wins.
    pub fn close(&self, reason: CloseReason) {
        let mut state = self.state.lock();
        if state.closing.is_none() {
            state.closing = Some(reason);
        }
        drop(state);
        self.ready.notify_one();
    }

    pub fn is_closing(&self) -> bool {
        self.state.lock().closing.is_some()
    }

    /// Why the connection is closing, once it is.
    pub fn close_reason(&self) -> Option<CloseReason> {
        self.state.lock().closing.clone()
    }

    pub fn pending_bytes(&self) -> usize {
        self.state.lock().pending_bytes
    }

    /// Frames dropped because the connection was closing or cut off as a slow consumer.
    pub fn dropped_frames(&self) -> u64 {
        self.dropped_frames.load(Ordering::Relaxed)
    }

    /// Moves every queued frame into `out` without waiting. Returns the close reason when the
    /// queue is empty and the connection is closing.
    ///
    /// An empty `out` receives the queue's own buffer (its allocation moves to the caller, and
    /// whatever `out` held is freed), so a writer that drops the frames once written leaves
    /// nothing allocated on either side while idle.
    pub fn try_drain(&self, out: &mut Vec<Bytes>) -> Option<Batch> {
        self.try_drain_gated(out, true)
    }

    /// [`Outbound::try_drain`]; with `take_frames` false, frames stay queued and only an
    /// interrupt or a close is reported (a close at once, dropping what is queued).
    fn try_drain_gated(&self, out: &mut Vec<Bytes>, take_frames: bool) -> Option<Batch> {
        let mut state = self.state.lock();
        if std::mem::take(&mut state.interrupted) {
            return Some(Batch::Interrupted);
        }
        if !take_frames {
            return state.closing.clone().map(Batch::Close);
        }
        if state.held && state.closing.is_none() {
            return None;
        }
        if !state.frames.is_empty() {
            let frames = std::mem::take(&mut state.frames);
            state.pending_bytes = 0;
            drop(state);
            if out.is_empty() {
                *out = frames;
            } else {
                out.extend(frames);
            }
            return Some(Batch::Frames);
        }
        state.closing.clone().map(Batch::Close)
    }

    /// Resolves once a push past the budget has cut the queue off (its backlog is dropped):
    /// how a writer that is blocked in a socket write, and so not draining, learns of it.
    /// The writer must not wait in this and [`Outbound::next_batch`] at once: both take the
    /// queue's one wake-up (each re-checks the state after it, so neither loses frames).
    pub async fn cut_off(&self) -> CloseReason {
        loop {
            let notified = self.ready.notified();
            if let Some(reason @ CloseReason::SlowConsumer { .. }) = &self.state.lock().closing {
                return reason.clone();
            }
            notified.await;
        }
    }

    /// Waits until there is something to write, then moves every queued frame into `out`.
    pub async fn next_batch(&self, out: &mut Vec<Bytes>) -> Batch {
        self.next_batch_gated(out, true).await
    }

    /// [`Outbound::next_batch`] for a writer that may not take frames now (`take_frames`
    /// false: its peer has not acknowledged enough): it still hears of an interrupt or a
    /// close.
    pub async fn next_batch_gated(&self, out: &mut Vec<Bytes>, take_frames: bool) -> Batch {
        loop {
            if let Some(batch) = self.try_drain_gated(out, take_frames) {
                return batch;
            }
            self.ready.notified().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn cut_off_waits_for_a_push_past_the_budget_only() {
        let q = std::sync::Arc::new(Outbound::new(4));
        assert!(q.push(Bytes::from_static(b"abc")));
        let waiter = tokio::spawn({
            let q = q.clone();
            async move { q.cut_off().await }
        });
        tokio::task::yield_now().await;
        // Frames that fit and a graceful close are not a cut.
        assert!(q.push(Bytes::from_static(b"d")));
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        assert!(!q.push(Bytes::from_static(b"ef")));
        assert_eq!(
            waiter.await.unwrap(),
            CloseReason::SlowConsumer {
                pending_bytes: 6,
                budget: 4
            }
        );
        let closed = Outbound::new(4);
        closed.close(CloseReason::ClosedByApi(None));
        let waited =
            tokio::time::timeout(std::time::Duration::from_millis(20), closed.cut_off()).await;
        assert!(waited.is_err(), "a close is not a cut");
    }

    #[tokio::test]
    async fn drains_in_order_then_closes() {
        let q = Outbound::new(100);
        assert!(q.push(Bytes::from_static(b"a")));
        assert!(q.push(Bytes::from_static(b"b")));
        q.close(CloseReason::ClosedByApi(None));
        assert!(!q.push(Bytes::from_static(b"c")));
        let mut out = Vec::new();
        assert_eq!(q.next_batch(&mut out).await, Batch::Frames);
        assert_eq!(
            out,
            vec![Bytes::from_static(b"a"), Bytes::from_static(b"b")]
        );
        out.clear();
        assert_eq!(
            q.next_batch(&mut out).await,
            Batch::Close(CloseReason::ClosedByApi(None))
        );
    }

    #[tokio::test]
    async fn held_frames_wait_for_the_release() {
        let q = std::sync::Arc::new(Outbound::new(100));
        q.hold();
        assert!(q.push(Bytes::from_static(b"a")));
        let mut out = Vec::new();
        assert_eq!(q.try_drain(&mut out), None);
        let writer = tokio::spawn({
            let q = q.clone();
            async move {
                let mut out = Vec::new();
                q.next_batch(&mut out).await;
                out
            }
        });
        tokio::task::yield_now().await;
        assert!(!writer.is_finished());
        q.release();
        assert_eq!(writer.await.unwrap(), vec![Bytes::from_static(b"a")]);
        // A close is never held.
        q.hold();
        q.close(CloseReason::ClosedByApi(None));
        assert_eq!(
            q.try_drain(&mut out),
            Some(Batch::Close(CloseReason::ClosedByApi(None)))
        );
    }

    #[tokio::test]
    async fn slow_consumer_is_cut_off() {
        let q = Outbound::new(10);
        assert!(q.push(Bytes::from(vec![0; 8])));
        assert!(!q.push(Bytes::from(vec![0; 8])));
        let mut out = Vec::new();
        match q.next_batch(&mut out).await {
            Batch::Close(CloseReason::SlowConsumer { budget: 10, .. }) => {}
            other => panic!("unexpected {other:?}"),
        }
        assert!(out.is_empty());
        assert_eq!(q.dropped_frames(), 2);
    }

    #[test]
    fn try_push_refuses_without_closing() {
        let q = Outbound::new(10);
        assert!(q.try_push(Bytes::from(vec![0; 8])));
        assert!(!q.try_push(Bytes::from(vec![0; 8])));
        assert!(!q.is_closing());
        assert!(q.try_push(Bytes::from(vec![0; 2])));
        assert_eq!(q.pending_bytes(), 10);
    }

    #[tokio::test]
    async fn oversize_frame_on_empty_queue_is_allowed() {
        let q = Outbound::new(10);
        assert!(q.push(Bytes::from(vec![0; 50])));
        let mut out = Vec::new();
        assert_eq!(q.next_batch(&mut out).await, Batch::Frames);
    }

    #[tokio::test]
    async fn waiter_is_woken_by_push() {
        let q = std::sync::Arc::new(Outbound::new(100));
        let q2 = q.clone();
        let waiter = tokio::spawn(async move {
            let mut out = Vec::new();
            q2.next_batch(&mut out).await;
            out
        });
        tokio::task::yield_now().await;
        q.push(Bytes::from_static(b"x"));
        assert_eq!(waiter.await.unwrap(), vec![Bytes::from_static(b"x")]);
    }

    #[tokio::test]
    async fn an_interrupt_wakes_a_waiting_writer_once() {
        let q = std::sync::Arc::new(Outbound::new(100));
        let writer = tokio::spawn({
            let q = q.clone();
            async move {
                let mut out = Vec::new();
                q.next_batch(&mut out).await
            }
        });
        tokio::task::yield_now().await;
        q.interrupt();
        assert_eq!(writer.await.unwrap(), Batch::Interrupted);
        // Reported once, and ahead of frames queued meanwhile.
        q.push(Bytes::from_static(b"a"));
        q.interrupt();
        let mut out = Vec::new();
        assert_eq!(q.try_drain(&mut out), Some(Batch::Interrupted));
        assert_eq!(q.try_drain(&mut out), Some(Batch::Frames));
        assert_eq!(out, vec![Bytes::from_static(b"a")]);
    }

    #[tokio::test]
    async fn a_gated_writer_takes_no_frames_but_hears_a_close() {
        let q = std::sync::Arc::new(Outbound::new(100));
        q.push(Bytes::from_static(b"a"));
        let mut out = Vec::new();
        assert_eq!(q.try_drain_gated(&mut out, false), None);
        let writer = tokio::spawn({
            let q = q.clone();
            async move { q.next_batch_gated(&mut Vec::new(), false).await }
        });
        tokio::task::yield_now().await;
        assert!(!writer.is_finished());
        q.close(CloseReason::ClientTimeout);
        assert_eq!(
            writer.await.unwrap(),
            Batch::Close(CloseReason::ClientTimeout)
        );
        assert!(out.is_empty());
    }
}
