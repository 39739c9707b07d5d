//! One app-server connection: handshake, then one task that reads messages and acts on them
//! in arrival order (so what one connection sends reaches each client in order) and, beside
//! that and never waiting on it, writes what is queued for the app server and pings it when
//! quiet.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{Message as WsMessage, WebSocket};
use bytes::{Bytes, BytesMut};
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use switchyard_core::HubName;
use switchyard_router::Batch;
use switchyard_service_protocol::{
    decode, encoded, Extensions, FrameReader, HandshakeRequest, HandshakeResponse, Ping,
    ServiceError, ServiceMessage, VERSION,
};
use tokio::time::{timeout, Instant};
use tracing::Instrument;

use super::error::LinkError;
use super::{commands, AppServers};
use crate::app_server::{ConnectionKind, ServerConnection};
use crate::budget::Slot;
use crate::config::ServiceMode;
use crate::metrics::ReasonLabel;

/// Bounds the handshake's answer and the goodbye (a running connection's writes are bounded
/// by its queue's budget and `timeouts.server_timeout` instead).
const SEND_TIMEOUT: Duration = Duration::from_secs(10);

/// Why no server connection came of a handshake.
enum Refusal {
    /// Tell the app server why, then close.
    Refused(String),
    /// The socket went away first.
    Gone,
}

/// What the connection's URL said about the service instance it is for.
pub(super) enum Aim {
    /// No instance, or this node's.
    Here,
    /// Another node's instance `target`, kept here because this node lacks a direct
    /// connection from the app server too (`DefaultMode::start_adopting`): the handshake may
    /// name that instance. Held until the connection is registered, so that a second one
    /// arriving meanwhile is passed on.
    Adopted {
        target: String,
        _adopting: super::nodes::Adopting,
    },
    /// Why the URL already rules the connection out (it names an instance not in the
    /// cluster): told in the handshake response, where the SDK expects it.
    Refused(String),
}

#[allow(clippy::too_many_arguments)]
pub(super) async fn run(
    app: Arc<AppServers>,
    socket: WebSocket,
    hub: HubName,
    server_id: Arc<str>,
    cid: String,
    aim: Aim,
    through: Option<Box<str>>,
    // Held while the connection lives: its place under `limits.max_server_connections*`.
    _slot: Slot<HubName>,
) {
    let span = tracing::info_span!("app_server", hub = %hub, server = %server_id, cid = %cid);
    serve_connection(app, socket, hub, server_id, cid, aim, through)
        .instrument(span)
        .await
}

async fn serve_connection(
    app: Arc<AppServers>,
    mut socket: WebSocket,
    hub: HubName,
    server_id: Arc<str>,
    cid: String,
    aim: Aim,
    through: Option<Box<str>>,
) {
    let config = &app.shared.config;
    let reader = FrameReader::new(config.limits.max_server_message_size);
    let mut buffer = BytesMut::new();
    let mut stateful = false;
    let handshake = read_handshake(&app, &mut socket, &reader, &mut buffer).await;
    let accepted = match (handshake, &aim) {
        (Ok(_), Aim::Refused(why)) => Err(Refusal::Refused(why.clone())),
        (Ok(request), aim) => {
            let adopted_for = match aim {
                Aim::Adopted { target, .. } => Some(target.as_str()),
                _ => None,
            };
            accept(&app, &request, adopted_for).and_then(|accepted| {
                stateful = request.allow_stateful_reconnects == Some(true);
                let passed_on = through.is_some() && accepted.0 == ConnectionKind::OnDemand;
                match passed_on.then(|| app.default_mode.refuse_passed_on(&hub, &server_id)) {
                    Some(Some(why)) => {
                        ask_for_direct(&app, &hub, &server_id);
                        Err(Refusal::Refused(why))
                    }
                    _ => Ok(accepted),
                }
            })
        }
        (Err(refusal), _) => Err(refusal),
    };
    let (kind, migrate) = match accepted {
        Ok(accepted) => accepted,
        Err(Refusal::Refused(error)) => {
            if let Some(suppressed) = app.shared.refusals.admit() {
                tracing::info!(%error, suppressed, "app server handshake refused");
            }
            refuse(&mut socket, &error).await;
            return;
        }
        Err(Refusal::Gone) => return,
    };
    let connection = Arc::new(ServerConnection::new(
        cid.into_boxed_str(),
        server_id,
        hub,
        kind,
        migrate,
        app.default_mode.max_pending_bytes_per_server_connection(),
        through,
    ));
    if stateful {
        connection.allow_stateful_reconnects();
    }
    // Written here, not queued: a session that fails on the app server's first message
    // returns before its queue is written, and the SDK must read the handshake response
    // before anything else (the ServiceError included).
    let response = encoded(&ServiceMessage::HandshakeResponse(HandshakeResponse {
        error_message: String::new(),
        ext: Extensions::default(),
        connection_id: Some(connection.id.to_string()),
    }));
    if progress(socket.send(WsMessage::Binary(response)), SEND_TIMEOUT)
        .await
        .is_err()
    {
        return;
    }
    opened(&app, &connection);
    drop(aim);
    let outcome = serve(&app, &connection, &mut socket, &reader, buffer).await;
    closed(&app, &connection, &outcome);
    match outcome {
        // Dropping the socket ends it; a goodbye would only wait on it.
        Err(error) if !error.can_tell_peer() => return,
        Err(error) => {
            let frame = encoded(&ServiceMessage::ServiceError(ServiceError {
                error_message: error.to_string(),
            }));
            let _ = timeout(SEND_TIMEOUT, socket.send(WsMessage::Binary(frame))).await;
        }
        Ok(()) => {}
    }
    let _ = timeout(SEND_TIMEOUT, socket.close()).await;
}

/// A connection whose handshake succeeded: registered, counted, logged, and in a cluster
/// announced at once.
fn opened(app: &AppServers, connection: &Arc<ServerConnection>) {
    let metrics = &app.shared.metrics;
    app.default_mode.servers.add(connection.clone());
    metrics.server_connections.inc();
    if connection.through.is_some() {
        metrics.server_connections_passed_on.inc();
    }
    crate::logs::server_connected(
        connection.hub.as_str(),
        &connection.server_id,
        &connection.id,
        &format!("{:?}", connection.kind),
        connection.through.as_deref(),
    );
    if !app.cluster.in_cluster() || connection.kind == ConnectionKind::Weak {
        return;
    }
    if connection.through.is_none() {
        app.default_mode
            .forget_self_asks(&connection.hub, &connection.server_id);
        app.default_mode
            .announce(&app.cluster, std::time::Instant::now());
    } else if connection.kind == ConnectionKind::OnDemand {
        ask_for_direct(app, &connection.hub, &connection.server_id);
    }
}

/// See [`DefaultMode::ask_for_direct`]; never by a node that is leaving.
fn ask_for_direct(app: &AppServers, hub: &HubName, server_id: &str) {
    if !app.cluster.members().is_leaving() {
        app.default_mode.ask_for_direct(hub, server_id);
    }
}

/// A connection that ended: unregistered, counted and logged with its reason; its clients
/// move to another connection of their app server or close.
fn closed(app: &AppServers, connection: &Arc<ServerConnection>, outcome: &Result<(), LinkError>) {
    let metrics = &app.shared.metrics;
    connection.mark_closed();
    app.default_mode.servers.remove(connection);
    app.default_mode
        .server_left(&connection.hub, &connection.server_id);
    metrics.server_connections.dec();
    if connection.through.is_some() {
        metrics.server_connections_passed_on.dec();
    }
    let reason = match outcome {
        Ok(()) => "closed",
        Err(error) => error.code(),
    };
    metrics
        .server_connections_closed
        .get_or_create(&ReasonLabel { reason })
        .inc();
    crate::logs::server_disconnected(
        connection.hub.as_str(),
        &connection.server_id,
        &connection.id,
        reason,
        outcome
            .as_ref()
            .err()
            .map(|error| (error.fault().name(), error.to_string())),
    );
    app.default_mode.relocate_clients(connection, true);
}

/// Checks a handshake request: the connection's kind and whether it takes part in client
/// migration, or why it is refused.
fn accept(
    app: &AppServers,
    request: &HandshakeRequest,
    adopted_for: Option<&str>,
) -> Result<(ConnectionKind, bool), Refusal> {
    let kind = ConnectionKind::from_wire(request.connection_type);
    // Weak connections carry no clients (the Management SDK's persistent transport, used by
    // serverless apps): serverless mode accepts them.
    if app.shared.config.mode == ServiceMode::Serverless && kind != Some(ConnectionKind::Weak) {
        return Err(Refusal::Refused(
            "This service is in serverless mode: app server connections are not accepted.".into(),
        ));
    }
    if request.version != VERSION {
        return Err(Refusal::Refused(format!(
            "Service protocol version {} is not supported; this service speaks version {VERSION}.",
            request.version
        )));
    }
    let kind = kind.ok_or_else(|| {
        Refusal::Refused(format!(
            "Unknown connection type {}.",
            request.connection_type
        ))
    })?;
    // One node is the only instance there is: any target means it.
    let instance = app.cluster.members().instance();
    if app.cluster.in_cluster()
        && !request.target.is_empty()
        && request.target != instance
        && Some(request.target.as_str()) != adopted_for
    {
        return Err(Refusal::Refused(format!(
            "Service instance '{}' is not in this cluster (this is '{instance}').",
            request.target
        )));
    }
    Ok((kind, request.migration_level >= 1))
}

/// Reads until the first whole message, which must be a HandshakeRequest.
async fn read_handshake(
    app: &AppServers,
    socket: &mut WebSocket,
    reader: &FrameReader,
    buffer: &mut BytesMut,
) -> Result<HandshakeRequest, Refusal> {
    let deadline = Instant::now() + app.shared.config.timeouts.server_handshake_timeout;
    loop {
        match reader.next_body(buffer) {
            Ok(Some(body)) => {
                return match decode(&body) {
                    Ok(ServiceMessage::HandshakeRequest(request)) => Ok(request),
                    Ok(other) => Err(Refusal::Refused(format!(
                        "Expected a handshake request as the first message, got {}.",
                        other.name()
                    ))),
                    Err(e) => Err(Refusal::Refused(format!("Invalid handshake request: {e}"))),
                };
            }
            Ok(None) => {}
            Err(e) => return Err(Refusal::Refused(format!("Invalid handshake request: {e}"))),
        }
        match tokio::time::timeout_at(deadline, socket.recv()).await {
            Err(_) => {
                return Err(Refusal::Refused(
                    "No handshake request was received in time.".to_string(),
                ))
            }
            Ok(Some(Ok(WsMessage::Binary(data)))) => buffer.extend_from_slice(&data),
            Ok(Some(Ok(WsMessage::Text(_)))) => {
                return Err(Refusal::Refused(
                    "The service protocol uses binary WebSocket messages.".to_string(),
                ))
            }
            Ok(Some(Ok(WsMessage::Close(_)))) | Ok(None) | Ok(Some(Err(_))) => {
                return Err(Refusal::Gone)
            }
            Ok(Some(Ok(_))) => {}
        }
    }
}

/// Answers the handshake with an error, then closes.
async fn refuse(socket: &mut WebSocket, error: &str) {
    let frame = encoded(&ServiceMessage::HandshakeResponse(HandshakeResponse {
        error_message: error.to_string(),
        ext: Extensions::default(),
        connection_id: None,
    }));
    let _ = timeout(SEND_TIMEOUT, socket.send(WsMessage::Binary(frame))).await;
    let _ = timeout(SEND_TIMEOUT, socket.close()).await;
}

/// The connection's life after the handshake; `Ok` when the app server closed it. Reading
/// and writing go on side by side: an app server slow to read what the service sends still
/// has its own messages (to clients, acks, completions, pings) read, so neither side waits on
/// the other.
async fn serve(
    app: &AppServers,
    connection: &Arc<ServerConnection>,
    socket: &mut WebSocket,
    reader: &FrameReader,
    mut buffer: BytesMut,
) -> Result<(), LinkError> {
    // Bytes that came with the handshake may already hold messages.
    drain(app, connection, reader, &mut buffer).await?;
    let (sink, stream) = socket.split();
    // One task for both halves: no spawn per connection, and whichever ends first ends both
    // (a reader cut mid-way drops messages it read but did not act on: the connection is
    // going, and their acks could not reach the app server anyway).
    tokio::select! {
        result = read_messages(app, connection, stream, reader, buffer) => result,
        result = write_queue(app, connection, sink) => result,
    }
}

/// Reads and acts on messages in arrival order, until the app server closes or is silent
/// for `timeouts.server_timeout`.
async fn read_messages(
    app: &AppServers,
    connection: &Arc<ServerConnection>,
    mut stream: SplitStream<&mut WebSocket>,
    reader: &FrameReader,
    mut buffer: BytesMut,
) -> Result<(), LinkError> {
    let silence_limit = app.shared.config.timeouts.server_timeout;
    let mut last_read = Instant::now();
    // Re-armed only when it fires, not per message.
    let silence = tokio::time::sleep_until(last_read + silence_limit);
    tokio::pin!(silence);
    loop {
        let incoming = tokio::select! {
            incoming = stream.next() => incoming,
            () = &mut silence => {
                let due = last_read + silence_limit;
                if due <= Instant::now() {
                    return Err(LinkError::Silent(silence_limit));
                }
                silence.as_mut().reset(due);
                continue;
            }
        };
        last_read = Instant::now();
        match incoming {
            Some(Ok(WsMessage::Binary(data))) => {
                if buffer.is_empty() {
                    // The frame's own allocation becomes the buffer when nothing else holds
                    // it (the usual case): payloads are then sliced from it without a copy.
                    buffer = data
                        .try_into_mut()
                        .unwrap_or_else(|data| BytesMut::from(&data[..]));
                } else {
                    buffer.extend_from_slice(&data);
                }
                drain(app, connection, reader, &mut buffer).await?;
            }
            Some(Ok(WsMessage::Text(_))) => {
                return Err(LinkError::Protocol(
                    "The service protocol uses binary WebSocket messages.".into(),
                ));
            }
            Some(Ok(WsMessage::Ping(_) | WsMessage::Pong(_))) => {}
            Some(Ok(WsMessage::Close(_))) | None => return Ok(()),
            Some(Err(error)) => return Err(LinkError::Socket(format!("WebSocket error: {error}"))),
        }
    }
}

/// Writes what is queued for the app server, all of a batch in one flush, and pings it when
/// nothing was written for `timeouts.server_keep_alive_interval`. A backlog that outgrows
/// the queue's budget while a write waits cuts the connection at once; so does a write that
/// makes no progress for `timeouts.server_timeout` (the app server reads nothing).
async fn write_queue(
    app: &AppServers,
    connection: &Arc<ServerConnection>,
    mut sink: SplitSink<&mut WebSocket, WsMessage>,
) -> Result<(), LinkError> {
    let timeouts = &app.shared.config.timeouts;
    let keep_alive = timeouts.server_keep_alive_interval;
    let stall_limit = timeouts.server_timeout;
    let mut batch: Vec<Bytes> = Vec::new();
    let mut last_write = Instant::now();
    let ping = tokio::time::sleep_until(last_write + keep_alive);
    tokio::pin!(ping);
    loop {
        tokio::select! {
            next = connection.outbound.next_batch(&mut batch) => match next {
                Batch::Frames => {
                    connection.drained();
                    let written = write_batch(&mut sink, &mut batch, stall_limit);
                    tokio::select! {
                        biased;
                        result = written => result?,
                        reason = connection.outbound.cut_off() => {
                            return Err(LinkError::CutOff(reason));
                        }
                    }
                    last_write = Instant::now();
                }
                Batch::Close(reason) => return Err(LinkError::Queue(reason)),
                // Only client writers are interrupted.
                Batch::Interrupted => {}
            },
            () = &mut ping => {
                if last_write + keep_alive <= Instant::now() {
                    connection.send(&ServiceMessage::Ping(Ping::keep_alive()));
                    last_write = Instant::now();
                }
                ping.as_mut().reset(last_write + keep_alive);
            },
        }
    }
}

/// Feeds every frame of `batch` to the socket, then flushes once.
async fn write_batch(
    sink: &mut SplitSink<&mut WebSocket, WsMessage>,
    batch: &mut Vec<Bytes>,
    stall_limit: Duration,
) -> Result<(), LinkError> {
    for frame in batch.drain(..) {
        progress(sink.feed(WsMessage::Binary(frame)), stall_limit).await?;
    }
    progress(sink.flush(), stall_limit).await
}

/// One step of a write (or the handshake's answer), which the app server must let through
/// within `stall_limit`.
async fn progress<E: std::fmt::Display>(
    operation: impl std::future::Future<Output = Result<(), E>>,
    stall_limit: Duration,
) -> Result<(), LinkError> {
    match timeout(stall_limit, operation).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(error)) => Err(LinkError::Socket(format!(
            "WebSocket write failed: {error}"
        ))),
        Err(_) => Err(LinkError::Stalled(stall_limit)),
    }
}

/// Acts on every whole message in `buffer`.
async fn drain(
    app: &AppServers,
    connection: &Arc<ServerConnection>,
    reader: &FrameReader,
    buffer: &mut BytesMut,
) -> Result<(), LinkError> {
    let metrics = &app.shared.metrics;
    loop {
        let body = match reader.next_body(buffer) {
            Ok(Some(body)) => body,
            Ok(None) => break,
            Err(e) => return Err(LinkError::Protocol(format!("Invalid message framing: {e}"))),
        };
        metrics.server_messages_received.inc();
        let message =
            decode(&body).map_err(|e| LinkError::Protocol(format!("Invalid message: {e}")))?;
        commands::handle(app, connection, message).await;
    }
    if buffer.is_empty() && buffer.capacity() > 0 {
        *buffer = BytesMut::new();
    }
    Ok(())
}
