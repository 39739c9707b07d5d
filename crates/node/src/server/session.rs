//! One app-server connection: handshake, then a single task that reads messages and acts on
//! them in arrival order (so what one connection sends reaches each client in order), writes
//! what is queued for the app server, and pings it when quiet.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{Message as WsMessage, WebSocket};
use bytes::{Bytes, BytesMut};
use futures_util::SinkExt;
use switchyard_core::{ConnectionId, GroupName, HubName, Target, UserId};
use switchyard_router::{Batch, Outbound};
use switchyard_service_protocol::{
    decode, encoded, AccessKeyResponse, Ack, AckStatus, Extensions, FrameReader, HandshakeResponse,
    Payloads, Ping, ServiceError, ServiceMessage, VERSION,
};
use tokio::time::{timeout, Instant};

use super::{link, relocate_clients, ConnectionKind, ServerConnection};
use crate::config::ServiceMode;
use crate::node::Node;

/// A single write that takes longer than this drops the app-server connection.
const SEND_TIMEOUT: Duration = Duration::from_secs(10);

pub(super) async fn run(
    node: Arc<Node>,
    mut socket: WebSocket,
    hub: HubName,
    server_id: Arc<str>,
    cid: String,
) {
    let reader = FrameReader::new(node.config.limits.max_server_message_size);
    let mut buffer = BytesMut::new();
    let request = match read_handshake(&node, &mut socket, &reader, &mut buffer).await {
        Ok(request) => request,
        Err(Some(error)) => {
            tracing::info!(hub = %hub, server = %server_id, %error, "app server handshake refused");
            refuse(&mut socket, &error).await;
            return;
        }
        Err(None) => return,
    };
    // Weak connections carry no clients (the Management SDK's persistent transport, used by
    // serverless apps): serverless mode accepts them.
    let weak = ConnectionKind::from_wire(request.connection_type) == Some(ConnectionKind::Weak);
    let refusal = if node.config.mode == ServiceMode::Serverless && !weak {
        Some("This service is in serverless mode: app server connections are not accepted.".into())
    } else if request.version != VERSION {
        Some(format!(
            "Service protocol version {} is not supported; this service speaks version {VERSION}.",
            request.version
        ))
    } else {
        None
    };
    let kind = ConnectionKind::from_wire(request.connection_type);
    let (kind, refusal) = match (kind, refusal) {
        (_, Some(refusal)) => (ConnectionKind::Weak, Some(refusal)),
        (None, None) => (
            ConnectionKind::Weak,
            Some(format!(
                "Unknown connection type {}.",
                request.connection_type
            )),
        ),
        (Some(kind), None) => (kind, None),
    };
    if let Some(error) = refusal {
        tracing::info!(hub = %hub, server = %server_id, %error, "app server handshake refused");
        refuse(&mut socket, &error).await;
        return;
    }
    let connection = Arc::new(ServerConnection {
        id: cid.into_boxed_str(),
        server_id,
        hub,
        kind,
        migrate: request.migration_level >= 1,
        outbound: Outbound::new(node.config.limits.max_pending_bytes_per_server_connection),
        clients: Default::default(),
        draining: Default::default(),
        closed: Default::default(),
    });
    connection.send(&ServiceMessage::HandshakeResponse(HandshakeResponse {
        error_message: String::new(),
        ext: Extensions::default(),
        connection_id: Some(connection.id.to_string()),
    }));
    node.servers.add(connection.clone());
    node.metrics.server_connections.inc();
    tracing::info!(hub = %connection.hub, server = %connection.server_id, cid = %connection.id, kind = ?connection.kind, "app server connected");
    let outcome = serve(&node, &connection, &mut socket, &reader, buffer).await;
    connection.closed.store(true, Ordering::Release);
    node.servers.remove(&connection);
    node.metrics.server_connections.dec();
    match &outcome {
        Ok(()) => {
            tracing::info!(hub = %connection.hub, server = %connection.server_id, cid = %connection.id, "app server disconnected")
        }
        Err(error) => {
            tracing::warn!(hub = %connection.hub, server = %connection.server_id, cid = %connection.id, %error, "app server connection closed")
        }
    }
    relocate_clients(&node, &connection, true);
    if let Err(error) = outcome {
        let frame = encoded(&ServiceMessage::ServiceError(ServiceError {
            error_message: error,
        }));
        let _ = timeout(SEND_TIMEOUT, socket.send(WsMessage::Binary(frame))).await;
    }
    let _ = timeout(SEND_TIMEOUT, socket.close()).await;
}

/// Reads until the first whole message, which must be a HandshakeRequest. `Err(None)`: the
/// socket went away.
async fn read_handshake(
    node: &Node,
    socket: &mut WebSocket,
    reader: &FrameReader,
    buffer: &mut BytesMut,
) -> Result<switchyard_service_protocol::HandshakeRequest, Option<String>> {
    let deadline = Instant::now() + node.config.timeouts.server_handshake_timeout;
    loop {
        match reader.next_body(buffer) {
            Ok(Some(body)) => {
                return match decode(&body) {
                    Ok(ServiceMessage::HandshakeRequest(request)) => Ok(request),
                    Ok(other) => Err(Some(format!(
                        "Expected a handshake request as the first message, got {}.",
                        other.name()
                    ))),
                    Err(e) => Err(Some(format!("Invalid handshake request: {e}"))),
                };
            }
            Ok(None) => {}
            Err(e) => return Err(Some(format!("Invalid handshake request: {e}"))),
        }
        match tokio::time::timeout_at(deadline, socket.recv()).await {
            Err(_) => {
                return Err(Some(
                    "No handshake request was received in time.".to_string(),
                ))
            }
            Ok(Some(Ok(WsMessage::Binary(data)))) => buffer.extend_from_slice(&data),
            Ok(Some(Ok(WsMessage::Text(_)))) => {
                return Err(Some(
                    "The service protocol uses binary WebSocket messages.".to_string(),
                ))
            }
            Ok(Some(Ok(WsMessage::Close(_)))) | Ok(None) | Ok(Some(Err(_))) => return Err(None),
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

/// The connection's life after the handshake. `Err(text)`: it broke the protocol or went
/// silent; the text is sent to it as a ServiceError.
async fn serve(
    node: &Arc<Node>,
    connection: &Arc<ServerConnection>,
    socket: &mut WebSocket,
    reader: &FrameReader,
    mut buffer: BytesMut,
) -> Result<(), String> {
    let keep_alive = node.config.timeouts.server_keep_alive_interval;
    let silence_limit = node.config.timeouts.server_timeout;
    let mut batch: Vec<Bytes> = Vec::new();
    let mut last_write = Instant::now();
    let mut last_read = Instant::now();
    // Bytes that came with the handshake may already hold messages.
    drain(node, connection, reader, &mut buffer)?;
    loop {
        let ping_due = last_write + keep_alive;
        let silent_due = last_read + silence_limit;
        tokio::select! {
            incoming = socket.recv() => match incoming {
                Some(Ok(WsMessage::Binary(data))) => {
                    last_read = Instant::now();
                    if buffer.is_empty() {
                        // The frame's own allocation becomes the buffer when nothing else holds
                        // it (the usual case): payloads are then sliced from it without a copy.
                        buffer = data.try_into_mut().unwrap_or_else(|data| BytesMut::from(&data[..]));
                    } else {
                        buffer.extend_from_slice(&data);
                    }
                    drain(node, connection, reader, &mut buffer)?;
                }
                Some(Ok(WsMessage::Text(_))) => {
                    return Err("The service protocol uses binary WebSocket messages.".into());
                }
                Some(Ok(WsMessage::Ping(_) | WsMessage::Pong(_))) => last_read = Instant::now(),
                Some(Ok(WsMessage::Close(_))) | None => return Ok(()),
                Some(Err(error)) => return Err(format!("WebSocket error: {error}")),
            },
            next = connection.outbound.next_batch(&mut batch) => match next {
                Batch::Frames => {
                    for frame in batch.drain(..) {
                        match timeout(SEND_TIMEOUT, socket.feed(WsMessage::Binary(frame))).await {
                            Ok(Ok(())) => {}
                            _ => return Ok(()),
                        }
                    }
                    if !matches!(timeout(SEND_TIMEOUT, socket.flush()).await, Ok(Ok(()))) {
                        return Ok(());
                    }
                    last_write = Instant::now();
                }
                Batch::Close(reason) => return Err(reason.to_string()),
            },
            _ = tokio::time::sleep_until(ping_due) => {
                connection.send(&ServiceMessage::Ping(Ping::keep_alive()));
                last_write = Instant::now();
            },
            _ = tokio::time::sleep_until(silent_due) => {
                return Err(format!(
                    "Nothing was received from the app server for {}.",
                    humantime::format_duration(silence_limit)
                ));
            }
        }
    }
}

/// Acts on every whole message in `buffer`.
fn drain(
    node: &Arc<Node>,
    connection: &Arc<ServerConnection>,
    reader: &FrameReader,
    buffer: &mut BytesMut,
) -> Result<(), String> {
    loop {
        let body = match reader.next_body(buffer) {
            Ok(Some(body)) => body,
            Ok(None) => break,
            Err(e) => return Err(format!("Invalid message framing: {e}")),
        };
        node.metrics.server_messages_received.inc();
        let message = decode(&body).map_err(|e| format!("Invalid message: {e}"))?;
        handle(node, connection, message);
    }
    if buffer.is_empty() && buffer.capacity() > 0 {
        *buffer = BytesMut::new();
    }
    Ok(())
}

fn ack(
    connection: &ServerConnection,
    ack_id: i32,
    found: bool,
    not_found: impl FnOnce() -> String,
) {
    let message = if found {
        Ack::new(ack_id, AckStatus::Ok, "")
    } else {
        Ack::new(ack_id, AckStatus::NotFound, not_found())
    };
    connection.send(&ServiceMessage::Ack(message));
}

fn connection_ids(list: &[String]) -> Vec<ConnectionId> {
    list.iter()
        .filter_map(|id| ConnectionId::new(id).ok())
        .collect()
}

fn user_ids(list: &[String]) -> Vec<UserId> {
    list.iter().filter_map(|u| UserId::new(u).ok()).collect()
}

fn send(node: &Node, connection: &ServerConnection, target: Target, payloads: Payloads) {
    node.send_payloads(&connection.hub, target, payloads);
}

/// One message from the app server.
fn handle(node: &Arc<Node>, connection: &Arc<ServerConnection>, message: ServiceMessage) {
    let hub = &connection.hub;
    match message {
        ServiceMessage::Ping(ping) => handle_ping(node, connection, ping),
        ServiceMessage::ConnectionData(data) => {
            let client = ConnectionId::new(&data.connection_id).ok().and_then(|id| {
                // Only the app server the client is pinned to may write to it: another
                // server's half messages would corrupt its stream.
                connection.client(&id).or_else(|| {
                    node.servers.find_client(hub, &id).filter(|client| {
                        client
                            .link
                            .lock()
                            .as_ref()
                            .and_then(|link| link.server.as_ref())
                            .is_some_and(|server| server.server_id == connection.server_id)
                    })
                })
            });
            match client {
                Some(client) => link::relay(node, &client, data.payload),
                None => {
                    tracing::debug!(connection = %data.connection_id, "data for a client that is gone")
                }
            }
        }
        ServiceMessage::CloseConnection(close) => {
            if let Ok(id) = ConnectionId::new(&close.connection_id) {
                let reason = (!close.error_message.is_empty()).then_some(close.error_message);
                // Found through the server connections: a client still waiting for its
                // handshake response is not in the hub yet.
                match connection
                    .client(&id)
                    .or_else(|| node.servers.find_client(hub, &id))
                {
                    Some(client) => client
                        .connection
                        .close(switchyard_core::CloseReason::ClosedByApi(reason)),
                    None => node.close(hub, Target::Connection(id), Vec::new(), reason),
                }
            }
        }
        ServiceMessage::MultiConnectionData(m) => send(
            node,
            connection,
            Target::Connections(connection_ids(&m.connection_list)),
            m.payloads,
        ),
        ServiceMessage::UserData(m) => {
            if let Ok(user) = UserId::new(&m.user_id) {
                send(node, connection, Target::User(user), m.payloads);
            }
        }
        ServiceMessage::MultiUserData(m) => send(
            node,
            connection,
            Target::Users(user_ids(&m.user_list)),
            m.payloads,
        ),
        ServiceMessage::BroadcastData(m) => send(
            node,
            connection,
            Target::All {
                excluded: connection_ids(&m.excluded_list),
            },
            m.payloads,
        ),
        ServiceMessage::GroupBroadcastData(m) => {
            if let Ok(group) = GroupName::new(&m.group_name) {
                send(
                    node,
                    connection,
                    Target::Group {
                        group,
                        excluded: connection_ids(&m.excluded_list),
                        excluded_users: user_ids(&m.excluded_user_list),
                    },
                    m.payloads,
                );
            }
        }
        ServiceMessage::MultiGroupBroadcastData(m) => {
            let groups = m
                .group_list
                .iter()
                .filter_map(|g| GroupName::new(g).ok())
                .collect();
            send(node, connection, Target::Groups(groups), m.payloads);
        }
        ServiceMessage::JoinGroup(m) => {
            join_group(node, hub, &m.connection_id, &m.group_name);
        }
        ServiceMessage::LeaveGroup(m) => {
            leave_group(node, hub, &m.connection_id, m.group_name.as_deref());
        }
        ServiceMessage::JoinGroupWithAck(m) => {
            let done = join_group(node, hub, &m.connection_id, &m.group_name);
            ack(connection, m.ack_id, done, || {
                format!("Connection '{}' does not exist.", m.connection_id)
            });
        }
        ServiceMessage::LeaveGroupWithAck(m) => {
            let done = leave_group(node, hub, &m.connection_id, m.group_name.as_deref());
            ack(connection, m.ack_id, done, || {
                format!("Connection '{}' does not exist.", m.connection_id)
            });
        }
        ServiceMessage::UserJoinGroup(m) => {
            user_join_group(node, hub, &m.user_id, &m.group_name, m.ext.ttl);
        }
        ServiceMessage::UserLeaveGroup(m) => {
            user_leave_group(node, hub, &m.user_id, m.group_name.as_deref());
        }
        ServiceMessage::UserJoinGroupWithAck(m) => {
            let done = user_join_group(node, hub, &m.user_id, &m.group_name, m.ext.ttl);
            ack(connection, m.ack_id, done, || {
                "Invalid user or group name.".into()
            });
        }
        ServiceMessage::UserLeaveGroupWithAck(m) => {
            let done = user_leave_group(node, hub, &m.user_id, m.group_name.as_deref());
            ack(connection, m.ack_id, done, || {
                "Invalid user or group name.".into()
            });
        }
        ServiceMessage::CheckUserInGroupWithAck(m) => {
            let found = match (UserId::new(&m.user_id), GroupName::new(&m.group_name)) {
                (Ok(user), Ok(group)) => node.user_in_group(hub, &user, &group),
                _ => false,
            };
            ack(connection, m.ack_id, found, || {
                format!("User '{}' is not in group '{}'.", m.user_id, m.group_name)
            });
        }
        ServiceMessage::CheckGroupExistenceWithAck(m) => {
            let found = GroupName::new(&m.group_name).is_ok_and(|g| node.group_exists(hub, &g));
            ack(connection, m.ack_id, found, || {
                format!("Group '{}' has no connections.", m.group_name)
            });
        }
        ServiceMessage::CheckConnectionExistenceWithAck(m) => {
            let found =
                ConnectionId::new(&m.connection_id).is_ok_and(|c| node.connection_exists(hub, &c));
            ack(connection, m.ack_id, found, || {
                format!("Connection '{}' does not exist.", m.connection_id)
            });
        }
        ServiceMessage::CheckUserExistenceWithAck(m) => {
            let found = UserId::new(&m.user_id).is_ok_and(|u| node.user_exists(hub, &u));
            ack(connection, m.ack_id, found, || {
                format!("User '{}' has no connections.", m.user_id)
            });
        }
        ServiceMessage::CloseConnectionWithAck(m) => {
            let found = ConnectionId::new(&m.connection_id)
                .ok()
                .filter(|c| node.connection_exists(hub, c));
            let done = found.is_some();
            if let Some(id) = found {
                node.close(hub, Target::Connection(id), Vec::new(), m.reason);
            }
            ack(connection, m.ack_id, done, || {
                format!("Connection '{}' does not exist.", m.connection_id)
            });
        }
        ServiceMessage::CloseConnectionsWithAck(m) => {
            node.close(
                hub,
                Target::All {
                    excluded: Vec::new(),
                },
                connection_ids(&m.excluded_list),
                m.reason,
            );
            ack(connection, m.ack_id, true, String::new);
        }
        ServiceMessage::CloseUserConnectionsWithAck(m) => {
            let valid = UserId::new(&m.user_id).ok();
            let done = valid.is_some();
            if let Some(user) = valid {
                node.close(
                    hub,
                    Target::User(user),
                    connection_ids(&m.excluded_list),
                    m.reason,
                );
            }
            ack(connection, m.ack_id, done, || "Invalid user id.".into());
        }
        ServiceMessage::CloseGroupConnectionsWithAck(m) => {
            let valid = GroupName::new(&m.group_name).ok();
            let done = valid.is_some();
            if let Some(group) = valid {
                node.close(
                    hub,
                    Target::Group {
                        group,
                        excluded: Vec::new(),
                        excluded_users: Vec::new(),
                    },
                    connection_ids(&m.excluded_list),
                    m.reason,
                );
            }
            ack(connection, m.ack_id, done, || "Invalid group name.".into());
        }
        ServiceMessage::GroupMemberQuery(m) => {
            let payload = GroupName::new(&m.group_name).ok().map(|group| {
                let max = usize::try_from(m.max).unwrap_or(0).clamp(1, 1000);
                let members =
                    node.group_members(hub, &group, m.continuation_token.as_deref(), max + 1);
                encode_members(&members, max)
            });
            let mut answer = Ack::new(m.ack_id, AckStatus::Ok, "");
            answer.payload = Some(payload.unwrap_or_else(|| encode_members(&[], 0)));
            connection.send(&ServiceMessage::Ack(answer));
        }
        ServiceMessage::ClientInvocation(call) => {
            node.invocations.invoke(node, connection, call);
        }
        ServiceMessage::ClientCompletion(ref done) => {
            let id = done.invocation_id.clone();
            node.invocations.complete(node, connection, &id, message);
        }
        ServiceMessage::ErrorCompletion(ref failed) => {
            let id = failed.invocation_id.clone();
            node.invocations.complete(node, connection, &id, message);
        }
        ServiceMessage::AccessKeyRequest(request) => {
            connection.send(&ServiceMessage::AccessKeyResponse(AccessKeyResponse {
                kid: request.kid,
                access_key: None,
                error_type: Some("NotSupported".into()),
                error_message: Some(
                    "Microsoft Entra ID (AAD) access keys are not supported by this service; \
                     use an access key in the connection string."
                        .into(),
                ),
                ext: Extensions::default(),
            }));
        }
        ServiceMessage::ConnectionFlowControl(_) | ServiceMessage::ConnectionReconnect(_) => {}
        ServiceMessage::Unknown { type_id } => {
            // Newer SDKs may send types this service does not know; ignoring keeps them working.
            tracing::debug!(type_id, "ignoring an unknown service message type");
        }
        other => {
            tracing::warn!(
                hub = %hub,
                server = %connection.server_id,
                message = other.name(),
                "ignoring a message an app server does not send"
            );
        }
    }
}

fn join_group(node: &Node, hub: &HubName, connection: &str, group: &str) -> bool {
    match (ConnectionId::new(connection), GroupName::new(group)) {
        (Ok(connection), Ok(group)) => node.add_to_group(hub, &connection, &group),
        _ => false,
    }
}

fn leave_group(node: &Node, hub: &HubName, connection: &str, group: Option<&str>) -> bool {
    let Ok(connection) = ConnectionId::new(connection) else {
        return false;
    };
    match group.map(GroupName::new) {
        None => node.remove_from_group(hub, &connection, None),
        Some(Ok(group)) => node.remove_from_group(hub, &connection, Some(&group)),
        Some(Err(_)) => false,
    }
}

fn user_join_group(node: &Node, hub: &HubName, user: &str, group: &str, ttl: Option<i32>) -> bool {
    match (UserId::new(user), GroupName::new(group)) {
        (Ok(user), Ok(group)) => {
            let ttl = ttl
                .filter(|t| *t > 0)
                .map(|t| Duration::from_secs(t as u64));
            node.user_join_group(hub, &user, &group, ttl);
            true
        }
        _ => false,
    }
}

fn user_leave_group(node: &Node, hub: &HubName, user: &str, group: Option<&str>) -> bool {
    let Ok(user) = UserId::new(user) else {
        return false;
    };
    match group.map(GroupName::new) {
        None => {
            node.user_leave_group(hub, &user, None);
            true
        }
        Some(Ok(group)) => {
            node.user_leave_group(hub, &user, Some(&group));
            true
        }
        Some(Err(_)) => false,
    }
}

/// The GroupMemberQuery ack payload: `[[[connectionId, userId|nil], …], continuationToken|nil]`.
fn encode_members(members: &[switchyard_router::GroupMember], max: usize) -> Bytes {
    let page = &members[..members.len().min(max)];
    let mut out = Vec::new();
    rmp::encode::write_array_len(&mut out, 2).expect("vec write");
    rmp::encode::write_array_len(&mut out, page.len() as u32).expect("vec write");
    for member in page {
        rmp::encode::write_array_len(&mut out, 2).expect("vec write");
        rmp::encode::write_str(&mut out, member.connection.as_str()).expect("vec write");
        match &member.user {
            Some(user) => rmp::encode::write_str(&mut out, user.as_str()).expect("vec write"),
            None => rmp::encode::write_nil(&mut out).expect("vec write"),
        }
    }
    match (members.len() > max, page.last()) {
        (true, Some(last)) => {
            rmp::encode::write_str(&mut out, last.connection.as_str()).expect("vec write")
        }
        _ => rmp::encode::write_nil(&mut out).expect("vec write"),
    }
    Bytes::from(out)
}

fn handle_ping(node: &Arc<Node>, connection: &Arc<ServerConnection>, ping: Ping) {
    if ping.get("echo").is_some() {
        connection.send(&ServiceMessage::Ping(ping));
        return;
    }
    if ping.get("status").is_some() {
        // Always "has clients": an endpoint answered "0" long enough is set inactive by the
        // SDK and would stop getting negotiations.
        connection.send(&ServiceMessage::Ping(Ping::new(&[("status", "1")])));
        return;
    }
    if ping.get("servers").is_some() {
        let ids = node.servers.server_ids(&connection.hub);
        let list = ids.iter().map(|s| &**s).collect::<Vec<_>>().join(";");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        connection.send(&ServiceMessage::Ping(Ping::new(&[(
            "servers",
            &format!("{now}:{list}"),
        )])));
        return;
    }
    if let Some(fin) = ping.get("shutdown") {
        if !fin.starts_with("fin:") {
            return;
        }
        // Every connection of this app server stops taking new clients.
        for sibling in node.servers.connections(&connection.hub) {
            if sibling.server_id == connection.server_id {
                sibling.draining.store(true, Ordering::Release);
            }
        }
        connection.send(&ServiceMessage::Ping(Ping::new(&[("shutdown", "finack")])));
        if fin == "fin:1" {
            for sibling in node.servers.connections(&connection.hub) {
                if sibling.server_id == connection.server_id {
                    relocate_clients(node, &sibling, false);
                }
            }
        }
    }
    // Keep-alives (`[3]`, `#clientInHub`…) need no answer: receiving them is the point.
}
