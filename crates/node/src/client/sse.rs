//! Server-Sent Events: `GET {base}?id=` with `Accept: text/event-stream`. Each drained batch of
//! frames becomes one event; sends arrive by POST.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::{BufMut, Bytes, BytesMut};
use futures_util::stream;
use switchyard_hub_protocol::{ping, Format};
use switchyard_router::Batch;
use tokio::time::{sleep_until, Instant};

use super::{ClientConnection, Clients, Transport};

pub(super) fn stream(clients: Arc<Clients>, client: Arc<ClientConnection>) -> Response {
    if client
        .poll
        .stream_active
        .swap(true, std::sync::atomic::Ordering::AcqRel)
    {
        return crate::http::text_error(
            StatusCode::CONFLICT,
            "An event stream is already open for this ID",
        );
    }
    if let Err(error) = client.start_transport(&clients, Transport::ServerSentEvents) {
        return error.into_response();
    }
    let keep_alive = clients.config().timeouts.keep_alive_interval;
    let state = StreamState {
        guard: FinishOnDrop { clients, client },
        batch: Vec::new(),
        last_write: Instant::now(),
        preamble_sent: false,
        done: false,
    };
    let body = stream::unfold(state, move |mut state| async move {
        let event = state.next_event(keep_alive).await?;
        Some((Ok::<Bytes, Infallible>(event), state))
    });
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache,no-store"),
            (header::PRAGMA, "no-cache"),
            (header::CONTENT_ENCODING, "identity"),
        ],
        Body::from_stream(body),
    )
        .into_response()
}

/// Ends the connection when the response stream is dropped (client gone or stream over).
struct FinishOnDrop {
    clients: Arc<Clients>,
    client: Arc<ClientConnection>,
}

impl Drop for FinishOnDrop {
    fn drop(&mut self) {
        self.clients.finish(&self.client);
    }
}

struct StreamState {
    guard: FinishOnDrop,
    batch: Vec<Bytes>,
    last_write: Instant,
    preamble_sent: bool,
    done: bool,
}

impl StreamState {
    async fn next_event(&mut self, keep_alive: Duration) -> Option<Bytes> {
        if !self.preamble_sent {
            self.preamble_sent = true;
            return Some(Bytes::from_static(b":\r\n"));
        }
        if self.done {
            return None;
        }
        let client = &self.guard.client;
        let outbound = client.connection.outbound();
        let event = tokio::select! {
            next = outbound.next_batch(&mut self.batch) => match next {
                Batch::Frames => {
                    // Taken whole and written as one event.
                    client.batch_taken(&self.guard.clients, &self.batch);
                    client.batch_written();
                    format_event(std::mem::take(&mut self.batch).into_iter())
                }
                Batch::Close(reason) => {
                    self.done = true;
                    format_event(client.close_frame(&reason).into_iter())
                }
                // Only WebSocket writers are interrupted; a comment line is harmless.
                Batch::Interrupted => Bytes::from_static(b":\r\n"),
            },
            _ = sleep_until(self.last_write + keep_alive), if client.may_ping() => {
                format_event(std::iter::once(ping(Format::Json)))
            }
        };
        self.last_write = Instant::now();
        Some(event)
    }
}

/// One SSE event: the payload cut at each `\n` (a `\r` before it dropped), each piece as a
/// `data: ` line, then a blank line.
fn format_event(frames: impl Iterator<Item = Bytes>) -> Bytes {
    let mut payload = BytesMut::new();
    for frame in frames {
        payload.extend_from_slice(&frame);
    }
    let mut event = BytesMut::with_capacity(payload.len() + 16);
    if !payload.is_empty() {
        for line in payload[..].split(|b| *b == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            event.put_slice(b"data: ");
            event.put_slice(line);
            event.put_slice(b"\r\n");
        }
    }
    event.put_slice(b"\r\n");
    event.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_format() {
        let e = format_event([Bytes::from_static(b"{\"type\":6}\x1e")].into_iter());
        assert_eq!(&e[..], b"data: {\"type\":6}\x1e\r\n\r\n");
        let e = format_event([Bytes::from_static(b"a\r\nb\nc")].into_iter());
        assert_eq!(&e[..], b"data: a\r\ndata: b\r\ndata: c\r\n\r\n");
        let e = format_event(std::iter::empty());
        assert_eq!(&e[..], b"\r\n");
    }
}
