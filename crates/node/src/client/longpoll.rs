//! Long polling: `GET {base}?id=` returns what is queued (or empty after the poll timeout);
//! `DELETE` ends the connection. The first poll answers at once to mark the start.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use switchyard_core::CloseReason;
use switchyard_router::Batch;
use tokio::sync::oneshot;

use super::{ClientConnection, Clients, Transport};
use crate::http::text_error;

/// Transport flags and long-polling bookkeeping of one connection.
#[derive(Default)]
pub(crate) struct PollState {
    pub(crate) websocket_active: AtomicBool,
    pub(crate) stream_active: AtomicBool,
    started: AtomicBool,
    active: AtomicBool,
    /// Numbers polls so that only the newest one marks the end of polling.
    generation: AtomicU64,
    last_poll_end_ms: AtomicU64,
    /// Completes the poll in progress when a newer one arrives.
    cancel: Mutex<Option<oneshot::Sender<()>>>,
    close_delivered: AtomicBool,
}

impl PollState {
    /// How long the client has been without a poll in progress (0 while one is pending).
    pub(crate) fn idle_for(&self, now_ms: u64) -> u64 {
        if self.active.load(Ordering::Relaxed) {
            0
        } else {
            now_ms.saturating_sub(self.last_poll_end_ms.load(Ordering::Relaxed))
        }
    }
}

fn no_cache(status: StatusCode, content_type: &'static str, body: Bytes) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache, no-store"),
            (header::PRAGMA, "no-cache"),
            (header::EXPIRES, "Thu, 01 Jan 1970 00:00:00 GMT"),
        ],
        body,
    )
        .into_response()
}

pub(super) async fn poll(clients: Arc<Clients>, client: Arc<ClientConnection>) -> Response {
    if let Err(error) = client.start_transport(&clients, Transport::LongPolling) {
        return error.into_response();
    }
    let state = &client.poll;
    if !state.started.swap(true, Ordering::AcqRel) {
        state
            .last_poll_end_ms
            .store(clients.now_ms(), Ordering::Relaxed);
        return no_cache(StatusCode::OK, "application/octet-stream", Bytes::new());
    }
    let (cancel_tx, cancel_rx) = oneshot::channel();
    let generation = {
        let mut cancel = state.cancel.lock();
        if let Some(previous) = cancel.replace(cancel_tx) {
            let _ = previous.send(());
        }
        state.active.store(true, Ordering::Relaxed);
        state.generation.fetch_add(1, Ordering::AcqRel) + 1
    };
    // Runs when the poll answers or when the client abandons it (the future is dropped).
    let _end = PollEnd {
        clients: &clients,
        state,
        generation,
    };
    wait_for_data(&clients, &client, cancel_rx).await
}

/// Marks the end of the newest poll: an older poll that a newer one superseded leaves the
/// newer one's state alone.
struct PollEnd<'a> {
    clients: &'a Clients,
    state: &'a PollState,
    generation: u64,
}

impl Drop for PollEnd<'_> {
    fn drop(&mut self) {
        let _cancel = self.state.cancel.lock();
        if self.state.generation.load(Ordering::Acquire) == self.generation {
            self.state
                .last_poll_end_ms
                .store(self.clients.now_ms(), Ordering::Relaxed);
            self.state.active.store(false, Ordering::Relaxed);
        }
    }
}

async fn wait_for_data(
    clients: &Clients,
    client: &Arc<ClientConnection>,
    cancelled: oneshot::Receiver<()>,
) -> Response {
    let outbound = client.connection.outbound();
    let mut batch = Vec::new();
    let next = tokio::select! {
        // A superseded poll must not take data its client will never read.
        biased;
        _ = cancelled => return no_cache(StatusCode::NO_CONTENT, "text/plain", Bytes::new()),
        next = outbound.next_batch(&mut batch) => next,
        _ = tokio::time::sleep(clients.config().timeouts.long_poll_timeout) => {
            return no_cache(StatusCode::OK, "text/plain", Bytes::new());
        }
    };
    match next {
        Batch::Frames => {
            // Taken whole and answered as the poll's body.
            client.batch_taken(clients, &batch);
            client.batch_written();
            let body = if batch.len() == 1 {
                batch.pop().expect("one frame")
            } else {
                let mut body = BytesMut::with_capacity(batch.iter().map(Bytes::len).sum());
                for frame in batch {
                    body.extend_from_slice(&frame);
                }
                body.freeze()
            };
            no_cache(StatusCode::OK, "application/octet-stream", body)
        }
        // Only WebSocket writers are interrupted: answer as a poll that timed out.
        Batch::Interrupted => no_cache(StatusCode::OK, "text/plain", Bytes::new()),
        Batch::Close(reason) => {
            let close = (reason != CloseReason::ClientClosed
                && !client.poll.close_delivered.swap(true, Ordering::AcqRel))
            .then(|| client.close_frame(&reason))
            .flatten();
            match close {
                Some(frame) => no_cache(StatusCode::OK, "application/octet-stream", frame),
                None => {
                    clients.finish(client);
                    no_cache(StatusCode::NO_CONTENT, "text/plain", Bytes::new())
                }
            }
        }
    }
}

pub(super) fn delete(clients: Arc<Clients>, client: Arc<ClientConnection>) -> Response {
    if client.transport() != Some(Transport::LongPolling) {
        return text_error(
            StatusCode::BAD_REQUEST,
            "Cannot terminate this connection using the DELETE endpoint.",
        );
    }
    // A pending poll sees the close and answers 204.
    clients.finish(&client);
    (
        StatusCode::ACCEPTED,
        [(header::CONTENT_TYPE, "text/plain")],
        "",
    )
        .into_response()
}
