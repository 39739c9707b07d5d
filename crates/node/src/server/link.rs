//! The client side of Default mode: a client is announced to one server connection with
//! OpenConnection, its bytes go there as ConnectionData, and what the app server writes back
//! as ConnectionData is relayed to it on whole-message boundaries.

use std::sync::Arc;

use axum::http::{HeaderMap, Uri};
use bytes::{Bytes, BytesMut};
use switchyard_auth::VerifiedToken;
use switchyard_core::CloseReason;
use switchyard_hub_protocol::{handshake, msgpack::read_varint, Format, RECORD_SEPARATOR};
use switchyard_service_protocol::{
    CloseConnection, ConnectionData, Extensions, Headers, OpenConnection, ServiceEvent,
    ServiceMessage,
};

use super::ServerConnection;
use crate::client::ClientConnection;
use crate::node::Node;

/// The SDK reads these headers of OpenConnection / CloseConnection.
const MIGRATE_FROM: &str = "Asrs-Migrate-From";
const MIGRATE_TO: &str = "Asrs-Migrate-To";

/// Request headers never forwarded to the app server: credentials and connection plumbing.
const HIDDEN_HEADERS: &[&str] = &[
    "authorization",
    "connection",
    "upgrade",
    "sec-websocket-key",
    "sec-websocket-version",
    "sec-websocket-extensions",
    "sec-websocket-protocol",
    "content-length",
    "transfer-encoding",
];

/// Query parameters never forwarded: the secret ones.
const HIDDEN_QUERY: &[&str] = &["access_token", "id"];

/// JWT claim names as .NET's token handler maps them on the way in; the SDK rebuilds the
/// user from these long types (e.g. `ClaimTypes.NameIdentifier`).
const INBOUND_CLAIM_TYPES: &[(&str, &str)] = &[
    (
        "nameid",
        "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/nameidentifier",
    ),
    (
        "sub",
        "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/nameidentifier",
    ),
    (
        "unique_name",
        "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/name",
    ),
    (
        "role",
        "http://schemas.microsoft.com/ws/2008/06/identity/claims/role",
    ),
    (
        "roles",
        "http://schemas.microsoft.com/ws/2008/06/identity/claims/role",
    ),
    (
        "email",
        "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/emailaddress",
    ),
    (
        "given_name",
        "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/givenname",
    ),
    (
        "family_name",
        "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/surname",
    ),
    (
        "upn",
        "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/upn",
    ),
];

/// What the client's connect request looked like, for OpenConnection.
pub(crate) struct ConnectInfo {
    headers: Headers,
    query: String,
}

impl ConnectInfo {
    pub(crate) fn capture(
        headers: &HeaderMap,
        uri: &Uri,
        peer: Option<std::net::SocketAddr>,
    ) -> ConnectInfo {
        let mut forwarded: Headers = Vec::new();
        for (name, value) in headers {
            let name = name.as_str();
            if HIDDEN_HEADERS.contains(&name) {
                continue;
            }
            let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
            match forwarded.iter_mut().find(|(n, _)| n == name) {
                Some((_, values)) => values.push(value),
                None => forwarded.push((name.to_string(), vec![value])),
            }
        }
        // The SDK takes the first X-Forwarded-For address as the client's address.
        if let Some(peer) = peer {
            match forwarded
                .iter_mut()
                .find(|(n, _)| n.eq_ignore_ascii_case("x-forwarded-for"))
            {
                Some((_, values)) => {
                    if let Some(last) = values.last_mut() {
                        last.push_str(&format!(", {}", peer.ip()));
                    }
                }
                None => {
                    forwarded.push(("X-Forwarded-For".to_string(), vec![peer.ip().to_string()]))
                }
            }
        }
        let query = uri
            .query()
            .unwrap_or("")
            .split('&')
            .filter(|pair| {
                let key = pair.split('=').next().unwrap_or("");
                !pair.is_empty() && !HIDDEN_QUERY.contains(&key)
            })
            .collect::<Vec<_>>()
            .join("&");
        ConnectInfo {
            headers: forwarded,
            query: if query.is_empty() {
                String::new()
            } else {
                format!("?{query}")
            },
        }
    }
}

/// A Default-mode client's way to its app server. Boxed and only present for clients of hubs
/// that may be served in Default mode, so serverless clients pay one pointer.
pub(crate) struct DefaultLink {
    /// OpenConnection as first sent (claims, headers, query), kept to announce the client
    /// again when it migrates.
    open: OpenConnection,
    /// `None` until the client's handshake chose a server connection (or after serverless
    /// was chosen).
    pub(crate) server: Option<Arc<ServerConnection>>,
    /// Bytes from the app server that do not yet form a whole message.
    relay: BytesMut,
    awaiting_handshake_response: bool,
    /// `asrs.s.sn`: the app server that issued the client's token.
    pub(crate) sticky_server: Option<String>,
    /// `asrs.s.ssticky=Required`: only that app server may take the client.
    pub(crate) sticky_required: bool,
}

impl DefaultLink {
    pub(crate) fn new(token: &VerifiedToken) -> Box<DefaultLink> {
        let claims = token
            .claims
            .iter()
            .map(|(name, value)| {
                let mapped = INBOUND_CLAIM_TYPES
                    .iter()
                    .find(|(short, _)| short == name)
                    .map_or(name.as_str(), |(_, long)| long);
                (mapped.to_string(), value.clone())
            })
            .collect();
        Box::new(DefaultLink {
            open: OpenConnection {
                connection_id: String::new(),
                claims,
                headers: Vec::new(),
                query_string: None,
                ext: Extensions::default(),
            },
            server: None,
            relay: BytesMut::new(),
            awaiting_handshake_response: false,
            sticky_server: token.claim("asrs.s.sn").map(str::to_string),
            sticky_required: token
                .claim("asrs.s.ssticky")
                .is_some_and(|mode| mode.eq_ignore_ascii_case("required")),
        })
    }

    pub(crate) fn set_connect_info(&mut self, info: ConnectInfo) {
        if self.open.query_string.is_none() {
            self.open.headers = info.headers;
            self.open.query_string = Some(info.query);
        }
    }

    /// Announces the client to `server` and hands it the client's handshake request.
    pub(crate) fn open(
        &mut self,
        client: &Arc<ClientConnection>,
        server: Arc<ServerConnection>,
        protocol: &str,
        handshake_request: Bytes,
    ) -> bool {
        let id = client.connection.id().as_str().to_string();
        self.open.connection_id = id.clone();
        self.open.ext.protocol = Some(protocol.to_string());
        self.awaiting_handshake_response = true;
        server.attach(client.clone());
        let sent = server.send(&ServiceMessage::OpenConnection(self.open.clone()))
            && server.send(&ServiceMessage::ConnectionData(ConnectionData {
                connection_id: id,
                payload: handshake_request,
                ext: Extensions::default(),
            }));
        self.server = Some(server);
        sent
    }

    /// Sends client bytes (whole hub messages) to the app server. False if it is gone.
    pub(crate) fn forward(&self, client: &ClientConnection, payload: Bytes) -> bool {
        let Some(server) = &self.server else {
            return false;
        };
        server.send(&ServiceMessage::ConnectionData(ConnectionData {
            connection_id: client.connection.id().as_str().to_string(),
            payload,
            ext: Extensions::default(),
        }))
    }

    /// Takes ConnectionData from the app server: the handshake response first (always JSON
    /// text), then messages in the client's protocol. Only whole messages are queued, so a
    /// transport never writes half a message, and a run of whole messages is queued as one
    /// shared slice without copying.
    fn relay(
        &mut self,
        node: &Node,
        client: &ClientConnection,
        payload: Bytes,
    ) -> Result<(), CloseReason> {
        let max = node.config.limits.max_server_message_size;
        let mut data = if self.relay.is_empty() {
            payload
        } else {
            self.relay.extend_from_slice(&payload);
            self.relay.split().freeze()
        };
        if self.awaiting_handshake_response {
            let Some(end) = data.iter().position(|&b| b == RECORD_SEPARATOR) else {
                if data.len() > max {
                    return Err(CloseReason::ProtocolError(
                        "the app server's handshake response is too large".into(),
                    ));
                }
                self.relay.extend_from_slice(&data);
                return Ok(());
            };
            let response = data.split_to(end + 1);
            self.awaiting_handshake_response = false;
            let refused = matches!(handshake::parse_response(&response), Ok(Some((Some(_), _))));
            client.connection.outbound().push(response);
            if refused {
                // The client reads the error and closes; nothing more goes to it.
                self.relay = BytesMut::new();
                return Ok(());
            }
            client.mark_handshake_done();
        }
        if data.is_empty() {
            return Ok(());
        }
        let format = client
            .connection
            .protocol()
            .and_then(framing)
            .unwrap_or(Format::Json);
        let whole = whole_messages(format, &data, max).map_err(CloseReason::ProtocolError)?;
        if whole > 0 {
            client.connection.outbound().push(data.split_to(whole));
        }
        if !data.is_empty() {
            self.relay.extend_from_slice(&data);
        } else if self.relay.capacity() > 0 {
            self.relay = BytesMut::new();
        }
        Ok(())
    }
}

/// The framing of a client's hub protocol: JSON and MessagePack, plus, in Default mode,
/// `blazorpack` (Blazor Server: the MessagePack protocol under another name), whose bytes
/// the service only relays and never encodes itself.
pub(crate) fn framing(protocol: &switchyard_core::Protocol) -> Option<Format> {
    match protocol {
        switchyard_core::Protocol::Other(name) if name.eq_ignore_ascii_case("blazorpack") => {
            Some(Format::MessagePack)
        }
        other => Format::from_protocol(other),
    }
}

/// The length of the longest prefix of `data` made of whole hub messages.
fn whole_messages(format: Format, data: &[u8], max: usize) -> Result<usize, String> {
    match format {
        Format::Json => {
            let end = data
                .iter()
                .rposition(|&b| b == RECORD_SEPARATOR)
                .map_or(0, |p| p + 1);
            if data.len() - end > max {
                return Err(format!(
                    "the app server sent a message over the maximum of {max} bytes"
                ));
            }
            Ok(end)
        }
        Format::MessagePack => {
            let mut at = 0;
            while at < data.len() {
                let (length, prefix) = match read_varint(&data[at..]) {
                    Ok(Some(found)) => found,
                    Ok(None) => break,
                    Err(e) => return Err(format!("the app server sent a malformed message: {e}")),
                };
                let length = length as usize;
                if length > max {
                    return Err(format!(
                        "the app server sent a message over the maximum of {max} bytes"
                    ));
                }
                if data.len() - at - prefix < length {
                    break;
                }
                at += prefix + length;
            }
            Ok(at)
        }
    }
}

/// ConnectionData from an app server for one of its clients.
pub(crate) fn relay(node: &Node, client: &ClientConnection, payload: Bytes) {
    let result = match client.link.lock().as_mut() {
        Some(link) => link.relay(node, client, payload),
        None => Ok(()),
    };
    if let Err(reason) = result {
        client.connection.close(reason);
    }
}

/// Tells the client's app server that the client is gone (once), when it ends.
pub(crate) fn client_finished(node: &Node, client: &ClientConnection, reason: &CloseReason) {
    let server = match client.link.lock().as_mut() {
        Some(link) => link.server.take(),
        None => None,
    };
    let Some(server) = server else {
        return;
    };
    let id = client.connection.id();
    server.detach(id);
    if let CloseReason::SlowConsumer { .. } = reason {
        // The SDK's back-pressure warning: what it sent this client could not be delivered.
        server.send(&ServiceMessage::ServiceEvent(ServiceEvent {
            object_type: ServiceEvent::OBJECT_CONNECTION,
            id: id.as_str().to_string(),
            kind: ServiceEvent::KIND_BUFFER_FULL,
            message: reason.to_string(),
            ext: Extensions::default(),
        }));
    }
    let error_message = match reason {
        CloseReason::ClientClosed | CloseReason::ClosedByApi(_) | CloseReason::AppServerGone => {
            String::new()
        }
        other => other.to_string(),
    };
    server.send(&ServiceMessage::CloseConnection(CloseConnection {
        connection_id: id.as_str().to_string(),
        error_message,
        headers: Vec::new(),
        ext: Extensions::default(),
    }));
    node.invocations.client_gone(node, client.hub.name(), id);
}

/// Moves a client from one server connection to another: the new one learns of it with
/// `Asrs-Migrate-From` (and skips its handshake), the old one, if still there, with
/// CloseConnection carrying `Asrs-Migrate-To`.
pub(crate) fn migrate(
    _node: &Node,
    client: &Arc<ClientConnection>,
    from: &Arc<ServerConnection>,
    to: &Arc<ServerConnection>,
    tell_old: bool,
) {
    let mut guard = client.link.lock();
    let Some(link) = guard.as_mut() else {
        return;
    };
    if client.is_finished() {
        return;
    }
    if link.awaiting_handshake_response {
        // The new app server would skip the handshake response this client still waits for.
        drop(guard);
        client.connection.close(CloseReason::AppServerGone);
        return;
    }
    let id = client.connection.id().as_str().to_string();
    if tell_old {
        from.send(&ServiceMessage::CloseConnection(CloseConnection {
            connection_id: id.clone(),
            error_message: String::new(),
            headers: vec![(MIGRATE_TO.to_string(), vec![to.server_id.to_string()])],
            ext: Extensions::default(),
        }));
    }
    let mut open = link.open.clone();
    open.headers
        .retain(|(name, _)| !name.eq_ignore_ascii_case(MIGRATE_FROM));
    open.headers
        .push((MIGRATE_FROM.to_string(), vec![from.server_id.to_string()]));
    // Bytes the old server left half-written cannot be completed by the new one.
    link.relay = BytesMut::new();
    link.awaiting_handshake_response = false;
    to.attach(client.clone());
    link.server = Some(to.clone());
    if !to.send(&ServiceMessage::OpenConnection(open)) {
        drop(guard);
        client.connection.close(CloseReason::AppServerGone);
    }
}
