//! The hub-protocol side of a client connection, fed by any transport: the handshake, then
//! messages split on frame boundaries. Only what the service itself acts on is looked at
//! (ping, close, invocations); everything is counted as client activity.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt, Limited};
use parking_lot::Mutex;
use switchyard_core::{CloseReason, Protocol};
use switchyard_hub_protocol::{
    encode_close, handshake, is_trackable_type, message_type, peek, Format, Frame, FrameError,
    FrameSplitter, HandshakeError, Peek, RECORD_SEPARATOR,
};
use switchyard_router::{Join, TrafficTotals};

use super::resume::{Incoming, Resume};
use super::{ClientConnection, Clients, Transport};
use crate::app_server::{Forwarded, LinkedClient};
use crate::http::text_error;
use crate::live_trace::TraceEvent;

/// Parse state of what the client sent so far.
pub(crate) struct Inbound {
    buffer: BytesMut,
    /// Leading bytes of `buffer` already searched for a record separator, so a message sent
    /// in many small pieces is scanned once, not once per piece.
    scanned: usize,
    /// `None` until the handshake succeeded.
    splitter: Option<FrameSplitter>,
    /// Default mode: messages go to the app server instead of being acted on here.
    forward: bool,
}

impl Inbound {
    pub(crate) fn new() -> Self {
        Inbound {
            buffer: BytesMut::new(),
            scanned: 0,
            splitter: None,
            forward: false,
        }
    }

    /// Stateful reconnect: a new socket starts at a message boundary, so a message cut off
    /// with the old one is dropped (the client replays it).
    pub(crate) fn drop_partial(&mut self) {
        self.buffer = BytesMut::new();
        self.scanned = 0;
    }
}

/// Hub messages of one read, added to the connection's and its hub's traffic at once when
/// dropped (however the read ends), so the hub's shared counters see one add per read.
struct Received<'a> {
    client: &'a ClientConnection,
    totals: TrafficTotals,
}

impl<'a> Received<'a> {
    fn new(client: &'a ClientConnection) -> Self {
        Received {
            client,
            totals: TrafficTotals::default(),
        }
    }

    /// Counts a message unless it is one of the protocol's own (ping, close, ack, sequence):
    /// Azure does not count pings as messages.
    fn message(&mut self, message_type: u8, framed_len: usize) {
        if is_trackable_type(i32::from(message_type)) {
            self.totals.add_in(framed_len);
        }
    }
}

impl Drop for Received<'_> {
    fn drop(&mut self) {
        self.client
            .hub
            .received(&self.client.connection, &self.totals);
    }
}

impl ClientConnection {
    /// Processes bytes from the client. An error means the connection must close for that
    /// reason; the caller closes it.
    pub(crate) fn receive(
        self: &Arc<Self>,
        clients: &Clients,
        inbound: &mut Inbound,
        data: &[u8],
    ) -> Result<(), CloseReason> {
        // A closing connection takes nothing more: a transport may still hand over bytes it
        // had already read (a WebSocket frame, a POST), and a refused or timed-out handshake
        // must not be followed by an accepted one.
        if self.connection.outbound().is_closing() {
            return Ok(());
        }
        self.last_received_ms
            .store(clients.now_ms(), Ordering::Relaxed);
        inbound.buffer.extend_from_slice(data);
        if inbound.splitter.is_none() {
            let max = clients.config().limits.max_client_message_size;
            // The handshake ends at the first separator: parse only once one has arrived.
            if !data.contains(&RECORD_SEPARATOR) && inbound.buffer.len() <= max {
                return Ok(());
            }
            match self.handshake(clients, &mut inbound.buffer)? {
                Some((splitter, forward)) => {
                    clients.handshake_arrived(self);
                    if clients.shared.tracer.on() {
                        self.trace(clients, "connected", |event| {
                            event.protocol = Some(splitter.format().name());
                        });
                    }
                    inbound.splitter = Some(splitter);
                    inbound.forward = forward;
                    if let (false, Some(upstream)) = (forward, &clients.upstream) {
                        upstream.client_opened(self);
                    }
                }
                None => return Ok(()),
            }
        }
        if inbound.forward {
            return self.forward(clients, inbound);
        }
        let format = inbound.splitter.as_ref().expect("handshake done").format();
        let mut traffic = Received::new(self);
        while let Some((message, frame)) = self.next_message(clients, inbound, &mut traffic)? {
            match message.message_type {
                message_type::CLOSE => return Err(CloseReason::ClientClosed),
                // To the upstream, if one takes it; else the client is closed.
                message_type::INVOCATION | message_type::STREAM_INVOCATION => {
                    let Some(upstream) = &clients.upstream else {
                        return Err(CloseReason::InvocationNotSupported);
                    };
                    if upstream.client_invoked(self, format, &message, frame.body_bytes())? {
                        // Its transport stops reading until the upstream catches up.
                        self.hold_reading.store(true, Ordering::Release);
                    }
                }
                // Pings, completions, stream items, cancels, acks: nothing to act on in
                // serverless mode.
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

    /// The next whole message to act on, `None` when no whole one is left. Each is counted,
    /// traced and logged here, and stateful reconnect takes its Acks and Sequences and skips
    /// what it processed before a reconnect: `receive` and `forward` only act.
    #[inline]
    fn next_message(
        &self,
        clients: &Clients,
        inbound: &mut Inbound,
        traffic: &mut Received<'_>,
    ) -> Result<Option<(Peek, Frame)>, CloseReason> {
        let splitter = inbound.splitter.as_ref().expect("handshake done");
        let format = splitter.format();
        loop {
            let frame = splitter
                .next_frame_resuming(&mut inbound.buffer, &mut inbound.scanned)
                .map_err(frame_error)?;
            let Some(frame) = frame else {
                return Ok(None);
            };
            clients.metrics().messages_received.inc();
            let message = peek(format, frame.body())
                .map_err(|e| CloseReason::ProtocolError(e.to_string()))?;
            if clients.shared.tracer.on() {
                self.trace_inbound(clients, format, message.message_type, frame.body());
            }
            if clients.config().log.messages {
                self.log_inbound(&message, frame.framed.len());
            }
            if self.sequence(clients, &message)? == Incoming::Skip {
                continue;
            }
            traffic.message(message.message_type, frame.framed.len());
            if message.message_type == message_type::PING {
                self.client_pings.store(true, Ordering::Relaxed);
            }
            return Ok(Some((message, frame)));
        }
    }

    /// Default mode: sends every whole message to the app server (one ConnectionData per read,
    /// so the app server sees the client's messages in order and batched as they came).
    fn forward(&self, clients: &Clients, inbound: &mut Inbound) -> Result<(), CloseReason> {
        let mut frames: Vec<Bytes> = Vec::new();
        let mut closing = false;
        let mut traffic = Received::new(self);
        // A bad message ends the connection, but the good ones before it still go to the app
        // server, as they would have had they arrived in an earlier read.
        let mut failure = None;
        loop {
            match self.next_message(clients, inbound, &mut traffic) {
                Ok(Some((message, frame))) => {
                    frames.push(frame.framed);
                    if message.message_type == message_type::CLOSE {
                        closing = true;
                        break;
                    }
                }
                Ok(None) => break,
                Err(reason) => {
                    failure = Some(reason);
                    break;
                }
            }
        }
        if inbound.buffer.is_empty() {
            inbound.buffer = BytesMut::new();
            inbound.scanned = 0;
        }
        if !frames.is_empty() {
            let payload = if frames.len() == 1 {
                frames.pop().expect("one frame")
            } else {
                let mut joined = BytesMut::with_capacity(frames.iter().map(Bytes::len).sum());
                for frame in &frames {
                    joined.extend_from_slice(frame);
                }
                joined.freeze()
            };
            let forwarded = self
                .link
                .lock()
                .as_ref()
                .map_or(Forwarded::Gone, |link| link.forward(self, payload));
            match forwarded {
                Forwarded::Sent => {}
                // Its transport stops reading from it until the app server catches up.
                Forwarded::Congested => self.hold_reading.store(true, Ordering::Release),
                Forwarded::Refused => return Err(CloseReason::AppServerBusy),
                Forwarded::Gone => return Err(CloseReason::AppServerGone),
            }
        }
        if let Some(reason) = failure {
            return Err(reason);
        }
        if closing {
            return Err(CloseReason::ClientClosed);
        }
        Ok(())
    }

    /// Stateful reconnect: Acks and Sequences are taken here, and what was processed before
    /// a reconnect is skipped. Everything is processed on connections without it.
    fn sequence(&self, clients: &Clients, message: &Peek) -> Result<Incoming, CloseReason> {
        let Some(resume) = self.resume() else {
            return Ok(Incoming::Process);
        };
        let (verdict, freed) = resume
            .lock()
            .incoming(message.message_type, message.sequence_id)
            .map_err(CloseReason::ProtocolError)?;
        if freed > 0 {
            clients
                .metrics()
                .stateful_buffered_bytes
                .dec_by(freed as i64);
        }
        Ok(verdict)
    }

    /// Reads the handshake request. `Ok(None)`: need more bytes. On success the connection
    /// joins its hub and either the response is queued (serverless) or the request goes to the
    /// client's app server, which answers it (Default mode; the `bool` is then true).
    fn handshake(
        self: &Arc<Self>,
        clients: &Clients,
        buffer: &mut BytesMut,
    ) -> Result<Option<(FrameSplitter, bool)>, CloseReason> {
        let max = clients.config().limits.max_client_message_size;
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
        let raw_request = buffer.split_to(consumed).freeze();
        let protocol = Protocol::from_name(&request.protocol);
        // Default mode relays bytes only, so it also carries protocols it cannot encode.
        let format = if self.link.lock().is_some() {
            Format::for_relay(&protocol)
        } else {
            Format::from_protocol(&protocol)
        };
        let Some(format) = format else {
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
        // Stateful reconnect only if negotiate offered it, over WebSockets, and the client
        // speaks version 2; otherwise it is off without a word, as in ASP.NET.
        let stateful = request.version >= 2
            && self.transport() == Some(Transport::WebSockets)
            && self.stateful_offered();
        if stateful {
            let limit = clients.config().stateful_reconnect.buffer_size;
            let _ = self
                .resume
                .set(Box::new(Mutex::new(Resume::new(format, limit))));
        }
        if self.link.lock().is_some() {
            // The service ends the stateful protocol itself: the app server is asked for
            // version 1, so it neither numbers nor acknowledges.
            let raw_request = match stateful {
                true => Bytes::from(handshake::encode_request(&request.protocol, 1)),
                false => raw_request,
            };
            return self
                .open_default(clients, protocol, &request.protocol, raw_request)
                .map(|()| Some((FrameSplitter::new(format, max), true)));
        }
        self.connection.set_protocol(protocol);
        match self
            .hub
            .admit(&self.connection, Bytes::from_static(handshake::RESPONSE_OK))
        {
            Join::Joined => {}
            Join::Closing => return Err(CloseReason::ClientClosed),
            Join::IdTaken => {
                return Err(CloseReason::ProtocolError(
                    "connection id already in use".into(),
                ))
            }
        }
        // The connection may have been finished (stream dropped, DELETE, timeout) while this
        // handshake ran; finishing removes it from the hub only if it was already added.
        if self.is_finished() {
            self.hub.remove_connection(self.connection.id());
            return Err(CloseReason::ClientClosed);
        }
        self.handshake_done.store(true, Ordering::Relaxed);
        self.log_connected();
        Ok(Some((FrameSplitter::new(format, max), false)))
    }

    /// Default mode: pins the client to a server connection, announces it and hands over its
    /// handshake request. The app server's answer is relayed when it comes.
    fn open_default(
        self: &Arc<Self>,
        clients: &Clients,
        protocol: Protocol,
        protocol_name: &str,
        raw_request: Bytes,
    ) -> Result<(), CloseReason> {
        let mut guard = self.link.lock();
        let link = guard.as_mut().expect("checked by the caller");
        let server = clients
            .default_mode
            .servers
            .pick(
                self.hub.name(),
                link.sticky_server.as_deref(),
                link.sticky_required,
            )
            .map_err(|e| self.refuse_handshake(&e.client_error()))?;
        self.connection.set_protocol(protocol);
        // The client joins its hub when the app server's handshake response is relayed
        // (`link::relay`), so nothing reaches it before that response.
        if self.is_finished() {
            return Err(CloseReason::ClientClosed);
        }
        let me: Arc<dyn LinkedClient> = self.clone();
        let instance = clients.default_mode.instance_id();
        if !link.open(me, server, protocol_name, raw_request, instance) {
            return Err(CloseReason::AppServerGone);
        }
        Ok(())
    }

    /// An event of this connection, in the live trace of its hub.
    #[cold]
    pub(crate) fn trace(
        &self,
        clients: &Clients,
        kind: &'static str,
        fill: impl FnOnce(&mut TraceEvent),
    ) {
        clients.shared.tracer.emit(self.hub.name(), || {
            let mut event = TraceEvent::new(kind);
            event.connection_id = Some(self.connection.id().to_string());
            event.user_id = self.connection.user().map(|user| user.to_string());
            event.transport = self.transport().map(Transport::name);
            fill(&mut event);
            event
        });
    }

    /// A message from the client, in the live trace (not its pings, acks and sequences).
    #[cold]
    fn trace_inbound(&self, clients: &Clients, format: Format, message_type: u8, body: &[u8]) {
        if crate::live_trace::is_chatter_type(message_type) {
            return;
        }
        self.trace(clients, "message", |event| {
            event.direction = Some("in");
            clients.shared.tracer.describe(event, format, body);
        });
    }

    /// Default mode: the app server's handshake response went out to the client.
    pub(crate) fn mark_handshake_done(&self) {
        self.handshake_done.store(true, Ordering::Relaxed);
        self.log_connected();
    }

    /// Message logs (`log.messages`): one line for a message from the client (not pings).
    #[cold]
    fn log_inbound(&self, message: &Peek, size: usize) {
        if message.message_type != message_type::PING {
            crate::logs::message_in(
                self.hub.name().as_str(),
                self.connection.id().as_str(),
                message.message_type,
                message.target.as_deref(),
                size,
            );
        }
    }

    /// Message logs (`log.messages`): lines for the frames a transport is about to write,
    /// one per hub message (one per delivery: a broadcast is logged once per recipient).
    /// A single load when they are off.
    #[inline]
    pub(crate) fn log_outbound(&self, clients: &Clients, batch: &[Bytes]) {
        if clients.config().log.messages {
            self.log_outbound_lines(batch);
        }
    }

    #[cold]
    fn log_outbound_lines(&self, batch: &[Bytes]) {
        let format = self.connection.protocol().and_then(Format::for_relay);
        for frame in batch {
            crate::logs::messages_out(
                self.hub.name().as_str(),
                self.connection.id().as_str(),
                format,
                frame,
            );
        }
    }

    /// The connectivity line of a connection whose handshake succeeded.
    fn log_connected(&self) {
        let connection = &self.connection;
        crate::logs::client_connected(
            self.hub.name().as_str(),
            connection.id().as_str(),
            connection.user().map(|user| user.as_str()),
            self.transport().map_or("", Transport::name),
            connection.protocol().map_or("", |protocol| protocol.name()),
        );
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
        // Default mode: the app server's response is relayed (and the handshake marked done)
        // under the link lock, so the response and this refusal never both go out.
        let _link = self.link.lock();
        if !self.handshake_done() {
            self.connection
                .close(self.refuse_handshake("Handshake was canceled."));
        }
    }

    pub(crate) fn handshake_done(&self) -> bool {
        self.handshake_done.load(Ordering::Relaxed)
    }

    /// Whether a keep-alive ping may be written: the handshake is done and its response is
    /// not held back (a ping must never reach the client before that response).
    pub(crate) fn may_ping(&self) -> bool {
        self.handshake_done() && !self.connection.outbound().is_held()
    }

    /// The Close message to send before ending, if the client completed its handshake.
    pub(crate) fn close_frame(&self, reason: &CloseReason) -> Option<Bytes> {
        // Default mode, the app server has not answered the handshake yet: a Close message
        // would be read as a malformed handshake response, so the reason goes out as a
        // handshake error (a timed-out handshake was already answered).
        if self
            .link
            .lock()
            .as_ref()
            .is_some_and(|link| link.awaiting_handshake_response())
        {
            return match reason {
                CloseReason::HandshakeTimeout | CloseReason::ClientClosed => None,
                other => Some(Bytes::from(handshake::encode_error_response(
                    &other.close_error().unwrap_or_else(|| other.to_string()),
                ))),
            };
        }
        let format = Format::for_relay(self.connection.protocol()?)?;
        Some(encode_close(
            format,
            reason.close_error().as_deref(),
            reason.allow_reconnect(),
        ))
    }
}

/// `POST {base}?id=` for SSE and long polling: the body is hub-protocol bytes.
pub(super) async fn send(
    clients: Arc<Clients>,
    client: Arc<ClientConnection>,
    body: Body,
) -> Response {
    if client.transport() == Some(Transport::WebSockets) {
        return text_error(
            StatusCode::METHOD_NOT_ALLOWED,
            "POST requests are not allowed for WebSocket connections.",
        );
    }
    let limit = clients.config().limits.max_request_body_size;
    let waited = clients.config().timeouts.request_body_timeout;
    let Ok(collected) = tokio::time::timeout(waited, Limited::new(body, limit).collect()).await
    else {
        return text_error(
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "the request body did not arrive within {}",
                humantime::format_duration(waited)
            ),
        );
    };
    let data = match collected {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            return text_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the request body exceeds the maximum of {limit} bytes"),
            )
        }
        Err(_) => return text_error(StatusCode::BAD_REQUEST, "failed to read the request body"),
    };
    // An app server or upstream that does not keep up holds the client's sends back, not the
    // other way.
    if tokio::time::timeout(waited, client.room_for_sends())
        .await
        .is_err()
    {
        return text_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the app server or upstream is not taking this connection's messages; try again later",
        );
    }
    // One send at a time per connection, like ASP.NET, so bytes stay in order.
    let mut inbound = client.inbound.lock();
    if client.is_finished() {
        return text_error(StatusCode::NOT_FOUND, "No Connection with that ID");
    }
    if let Err(reason) = client.receive(&clients, &mut inbound, &data) {
        client.connection.close(reason);
    }
    StatusCode::OK.into_response()
}

/// Why a client's bytes could not be split into messages: one too large, or a length the
/// protocol does not allow.
fn frame_error(error: FrameError) -> CloseReason {
    match error {
        FrameError::TooLarge { limit } => CloseReason::MessageTooLarge { limit },
        other => CloseReason::ProtocolError(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use switchyard_auth::VerifiedToken;
    use switchyard_core::HubName;

    use crate::client::create_client;
    use crate::config::Config;
    use crate::Node;

    /// Found by the `client_session` fuzz target: after a refused handshake, a second one in
    /// a later read (a WebSocket frame read before the close, another POST) was accepted and
    /// joined the hub, on a connection that was closing.
    #[test]
    fn a_closing_connection_takes_no_more_bytes() {
        let node = Node::new(Config::default().validate().unwrap());
        let hub = HubName::new("chat", None).unwrap();
        let token = VerifiedToken {
            claims: Vec::new(),
            expires_at: i64::MAX,
            audiences: Vec::new(),
            signed_with: Default::default(),
        };
        let clients = node.clients();
        let client = create_client(clients, &hub, token, false, None).unwrap();
        let mut inbound = client.inbound.lock();
        let refused = b"{\"protocol\":\"nope\",\"version\":1}\x1e";
        let reason = client
            .receive(clients, &mut inbound, refused)
            .expect_err("an unknown protocol is refused");
        client.connection.close(reason);
        let valid = b"{\"protocol\":\"json\",\"version\":1}\x1e";
        assert_eq!(client.receive(clients, &mut inbound, valid), Ok(()));
        assert!(!client.handshake_done());
        let exists = crate::command::Check::connection(client.connection.id().as_str()).unwrap();
        assert!(
            futures_util::FutureExt::now_or_never(node.executor().execute(&hub, exists))
                .expect("a local check does not wait")
                .is_err()
        );
        drop(inbound);
        clients.finish(&client);
    }
}
