//! The hub-protocol side of a client connection, fed by any transport: the handshake, then
//! messages split on frame boundaries. Only what the service itself acts on is looked at
//! (ping, close, invocations); everything is counted as client activity.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::{Buf, Bytes, BytesMut};
use http_body_util::{BodyExt, Limited};
use switchyard_core::{CloseReason, Protocol};
use switchyard_hub_protocol::{
    encode_close, handshake, peek, Format, FrameSplitter, HandshakeError, RECORD_SEPARATOR,
};

use super::{ClientConnection, Transport};
use crate::http::text_error;
use crate::node::Node;

/// Parse state of what the client sent so far.
pub(crate) struct Inbound {
    buffer: BytesMut,
    /// Leading bytes of `buffer` already searched for a record separator, so a message sent
    /// in many small pieces is scanned once, not once per piece.
    scanned: usize,
    /// `None` until the handshake succeeded.
    splitter: Option<FrameSplitter>,
}

impl Inbound {
    pub(crate) fn new() -> Self {
        Inbound {
            buffer: BytesMut::new(),
            scanned: 0,
            splitter: None,
        }
    }
}

const TYPE_INVOCATION: u8 = 1;
const TYPE_STREAM_INVOCATION: u8 = 4;
const TYPE_PING: u8 = 6;
const TYPE_CLOSE: u8 = 7;

impl ClientConnection {
    /// Processes bytes from the client. An error means the connection must close for that
    /// reason; the caller closes it.
    pub(crate) fn receive(
        &self,
        node: &Node,
        inbound: &mut Inbound,
        data: &[u8],
    ) -> Result<(), CloseReason> {
        self.last_received_ms
            .store(node.now_ms(), Ordering::Relaxed);
        inbound.buffer.extend_from_slice(data);
        if inbound.splitter.is_none() {
            let max = node.config.limits.max_client_message_size;
            // The handshake ends at the first separator: parse only once one has arrived.
            if !data.contains(&RECORD_SEPARATOR) && inbound.buffer.len() <= max {
                return Ok(());
            }
            match self.handshake(node, &mut inbound.buffer)? {
                Some(splitter) => inbound.splitter = Some(splitter),
                None => return Ok(()),
            }
        }
        let splitter = inbound.splitter.as_ref().expect("handshake done");
        let format = splitter.format();
        loop {
            let frame = splitter
                .next_frame_resuming(&mut inbound.buffer, &mut inbound.scanned)
                .map_err(|e| CloseReason::ProtocolError(e.to_string()))?;
            let Some(frame) = frame else {
                break;
            };
            node.metrics.messages_received.inc();
            let message = peek(format, frame.body())
                .map_err(|e| CloseReason::ProtocolError(e.to_string()))?;
            match message.message_type {
                TYPE_PING => self.client_pings.store(true, Ordering::Relaxed),
                TYPE_CLOSE => return Err(CloseReason::ClientClosed),
                TYPE_INVOCATION | TYPE_STREAM_INVOCATION => {
                    return Err(CloseReason::InvocationNotSupported)
                }
                // Completions, stream items, cancels, acks: nothing to act on in serverless mode.
                _ => {}
            }
        }
        // Keep no buffer between messages: an idle connection would otherwise hold the
        // handshake request's (or its largest message's) allocation for its whole life.
        if inbound.buffer.is_empty() {
            inbound.buffer = BytesMut::new();
            inbound.scanned = 0;
        }
        Ok(())
    }

    /// Reads the handshake request. `Ok(None)`: need more bytes. On success the response is
    /// queued and the connection joins its hub.
    fn handshake(
        &self,
        node: &Node,
        buffer: &mut BytesMut,
    ) -> Result<Option<FrameSplitter>, CloseReason> {
        let max = node.config.limits.max_client_message_size;
        let (request, consumed) = match handshake::parse_request(buffer, max) {
            Ok(Some(parsed)) => parsed,
            Ok(None) => return Ok(None),
            Err(HandshakeError::TooLarge) => {
                return Err(self.refuse_handshake("Handshake was canceled."));
            }
            Err(e) => {
                return Err(self.refuse_handshake(&format!(
                    "An unexpected error occurred during connection handshake. {e}"
                )));
            }
        };
        buffer.advance(consumed);
        let protocol = Protocol::from_name(&request.protocol);
        let Some(format) = Format::from_protocol(&protocol) else {
            return Err(self.refuse_handshake(&format!(
                "The protocol '{}' is not supported.",
                request.protocol
            )));
        };
        if request.version > 2 {
            return Err(self.refuse_handshake(&format!(
                "The server does not support version {} of the '{}' protocol.",
                request.version, request.protocol
            )));
        }
        if format == Format::MessagePack && self.transport() == Some(Transport::ServerSentEvents) {
            return Err(self.refuse_handshake(&format!(
                "Cannot use the '{}' protocol on the current transport. The transport does not support 'Binary' transfer format.",
                request.protocol
            )));
        }
        self.connection.set_protocol(protocol);
        self.connection
            .outbound()
            .push(Bytes::from_static(handshake::RESPONSE_OK));
        if !self.hub.add_connection(self.connection.clone()) {
            return Err(CloseReason::ProtocolError(
                "connection id already in use".into(),
            ));
        }
        // The connection may have been finished (stream dropped, DELETE, timeout) while this
        // handshake ran; finishing removes it from the hub only if it was already added.
        if self.is_finished() {
            self.hub.remove_connection(self.connection.id());
            return Err(CloseReason::ClientClosed);
        }
        self.handshake_done.store(true, Ordering::Relaxed);
        Ok(Some(FrameSplitter::new(format, max)))
    }

    fn refuse_handshake(&self, error: &str) -> CloseReason {
        self.connection
            .outbound()
            .push(Bytes::from(handshake::encode_error_response(error)));
        if error == "Handshake was canceled." {
            CloseReason::HandshakeTimeout
        } else {
            CloseReason::ProtocolError(error.to_string())
        }
    }

    /// The handshake timed out: answer it as ASP.NET does, then close. Skipped if a
    /// handshake is being processed right now (it decides; the next tick checks again).
    pub(crate) fn refuse_late_handshake(&self) {
        let Some(_inbound) = self.inbound.try_lock() else {
            return;
        };
        if !self.handshake_done() {
            self.connection
                .close(self.refuse_handshake("Handshake was canceled."));
        }
    }

    pub(crate) fn handshake_done(&self) -> bool {
        self.handshake_done.load(Ordering::Relaxed)
    }

    /// The Close message to send before ending, if the client completed its handshake.
    pub(crate) fn close_frame(&self, reason: &CloseReason) -> Option<Bytes> {
        let format = Format::from_protocol(self.connection.protocol()?)?;
        Some(encode_close(
            format,
            reason.close_error().as_deref(),
            reason.allow_reconnect(),
        ))
    }
}

/// `POST {base}?id=` for SSE and long polling: the body is hub-protocol bytes.
pub(super) async fn send(node: Arc<Node>, client: Arc<ClientConnection>, body: Body) -> Response {
    if client.transport() == Some(Transport::WebSockets) {
        return text_error(
            StatusCode::METHOD_NOT_ALLOWED,
            "POST requests are not allowed for WebSocket connections.",
        );
    }
    let limit = node.config.limits.max_request_body_size;
    let data = match Limited::new(body, limit).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            return text_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the request body exceeds the maximum of {limit} bytes"),
            )
        }
        Err(_) => return text_error(StatusCode::BAD_REQUEST, "failed to read the request body"),
    };
    // One send at a time per connection, like ASP.NET, so bytes stay in order.
    let mut inbound = client.inbound.lock();
    if client.is_finished() {
        return text_error(StatusCode::NOT_FOUND, "No Connection with that ID");
    }
    if let Err(reason) = client.receive(&node, &mut inbound, &data) {
        client.connection.close(reason);
    }
    StatusCode::OK.into_response()
}
