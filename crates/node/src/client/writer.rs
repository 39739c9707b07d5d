//! The step every transport's writer takes with a batch it drained from the client's queue,
//! whatever it writes the batch as (WebSocket frames, an event-stream event, a poll's body).

use bytes::Bytes;

use super::{ClientConnection, Clients};

impl ClientConnection {
    /// A batch taken from the queue, about to go out: stateful reconnect numbers it and keeps
    /// it for replay, and the message logs see it.
    pub(super) fn batch_taken(&self, clients: &Clients, batch: &[Bytes]) {
        if let Some(resume) = self.resume() {
            let kept: usize = {
                let mut resume = resume.lock();
                batch.iter().map(|frame| resume.track(frame)).sum()
            };
            if kept > 0 {
                clients
                    .metrics()
                    .stateful_buffered_bytes
                    .inc_by(kept as i64);
            }
        }
        self.log_outbound(clients, batch);
    }

    /// The batch is out and the queue it came from is empty: an app server paused for this
    /// client (ConnectionFlowControl) may go on.
    pub(super) fn batch_written(&self) {
        self.backlog_written();
    }
}
