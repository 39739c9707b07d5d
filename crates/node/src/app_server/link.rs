//! The client side of Default mode: a client is announced to one server connection with
//! OpenConnection, its bytes go there as ConnectionData, and what the app server writes back
//! as ConnectionData is relayed to it on whole-message boundaries.

use std::sync::Arc;

use axum::http::{HeaderMap, Uri};
use bytes::{Bytes, BytesMut};
use switchyard_auth::VerifiedToken;
use switchyard_core::CloseReason;
use switchyard_hub_protocol::{
    for_each_trackable, handshake, Format, FrameError, FrameSplitter, RECORD_SEPARATOR,
};
use switchyard_router::{Join, TrafficTotals};
use switchyard_service_protocol::{
    CloseConnection, ConnectionData, ConnectionFlowControl, Extensions, Headers, OpenConnection,
    ServiceEvent, ServiceMessage,
};

use super::{DefaultMode, Forwarded, LinkedClient, ServerConnection};
use crate::budget::{ByteBudget, Charge};
use crate::http::ClientOrigin;
use crate::live_trace::{bodies, is_chatter, TraceEvent};

/// The SDK reads these headers of OpenConnection / CloseConnection.
const MIGRATE_FROM: &str = "Asrs-Migrate-From";
const MIGRATE_TO: &str = "Asrs-Migrate-To";
/// The service instance holding the client: an `offline` ping naming it drops the client.
const INSTANCE_ID: &str = "Asrs-Instance-Id";
/// Set from the token's `asrs.s.dc` claim (the SDK's diagnostic-client filter signs it in).
const DIAGNOSTIC_CLIENT: &str = "Asrs-Is-Diagnostic-Client";

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

/// Headers that say where the client is and how it came: never taken from the request, even a
/// trusted proxy's (a client's forged first `X-Forwarded-For` entry would survive its proxy,
/// and the SDK takes that one as the client's address); the service writes its own.
const FORWARDING_HEADERS: &[&str] = &[
    "x-forwarded-for",
    "x-forwarded-host",
    "x-forwarded-proto",
    "x-forwarded-port",
    "forwarded",
    "x-real-ip",
];

/// Headers only the service sets (`Asrs-Migrate-From`, `Asrs-Is-Diagnostic-Client`, …): a
/// client's own would mislead the SDK; `X-Switchyard-*` pass between nodes only. Header
/// names arrive lower-case.
fn service_only(name: &str) -> bool {
    ["asrs-", "x-asrs-", "x-switchyard-"]
        .iter()
        .any(|prefix| name.starts_with(prefix))
}

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
    /// The client's headers but credentials, plumbing and what only the service or the
    /// service's view of the client (`origin`) may say; then `X-Forwarded-For`, `-Host` and
    /// `-Proto` from `origin`.
    pub(crate) fn capture(headers: &HeaderMap, uri: &Uri, origin: ClientOrigin) -> ConnectInfo {
        let mut forwarded: Headers = Vec::new();
        for (name, value) in headers {
            let name = name.as_str();
            if HIDDEN_HEADERS.contains(&name)
                || FORWARDING_HEADERS.contains(&name)
                || service_only(name)
            {
                continue;
            }
            let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
            match forwarded.iter_mut().find(|(n, _)| n == name) {
                Some((_, values)) => values.push(value),
                None => forwarded.push((name.to_string(), vec![value])),
            }
        }
        // The SDK takes the first X-Forwarded-For address as the client's address.
        if let Some(address) = origin.address {
            forwarded.push(("X-Forwarded-For".to_string(), vec![address.to_string()]));
        }
        if let Some(host) = origin.host {
            forwarded.push(("X-Forwarded-Host".to_string(), vec![host]));
        }
        forwarded.push((
            "X-Forwarded-Proto".to_string(),
            vec![origin.proto.to_string()],
        ));
        let query = crate::http::scrub_query(uri.query().unwrap_or(""));
        ConnectInfo {
            headers: forwarded,
            query,
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
    /// `relay`'s share of the node's `limits.max_relay_buffered_bytes`, once it held any.
    relay_charge: Option<Charge>,
    awaiting_handshake_response: bool,
    /// `asrs.s.sn`: the app server that issued the client's token.
    pub(crate) sticky_server: Option<String>,
    /// `asrs.s.ssticky=Required`: only that app server may take the client.
    pub(crate) sticky_required: bool,
    /// The app server was asked to pause sending to the client and not yet to resume.
    flow_paused: bool,
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
        // The service's own word, in place of any the client sent (those are dropped).
        let diagnostic = token
            .claim("asrs.s.dc")
            .is_some_and(|dc| dc.eq_ignore_ascii_case("true"))
            .then(|| (DIAGNOSTIC_CLIENT.to_string(), vec!["true".to_string()]));
        Box::new(DefaultLink {
            open: OpenConnection {
                connection_id: String::new(),
                claims,
                headers: diagnostic.into_iter().collect(),
                query_string: None,
                ext: Extensions::default(),
            },
            server: None,
            relay: BytesMut::new(),
            relay_charge: None,
            awaiting_handshake_response: false,
            flow_paused: false,
            sticky_server: token.claim("asrs.s.sn").map(str::to_string),
            sticky_required: token
                .claim("asrs.s.ssticky")
                .is_some_and(|mode| mode.eq_ignore_ascii_case("required")),
        })
    }

    pub(crate) fn set_connect_info(&mut self, info: ConnectInfo) {
        if self.open.query_string.is_none() {
            let service = std::mem::replace(&mut self.open.headers, info.headers);
            self.open.headers.extend(service);
            self.open.query_string = Some(info.query);
        }
    }

    /// Announces the client to `server` and hands it the client's handshake request;
    /// `instance` is this node's (a client's own `Asrs-Instance-Id` header is replaced).
    pub(crate) fn open(
        &mut self,
        client: Arc<dyn LinkedClient>,
        server: Arc<ServerConnection>,
        protocol: &str,
        handshake_request: Bytes,
        instance: &str,
    ) -> bool {
        let headers = &mut self.open.headers;
        headers.retain(|(name, _)| !name.eq_ignore_ascii_case(INSTANCE_ID));
        headers.push((INSTANCE_ID.to_string(), vec![instance.to_string()]));
        let id = client.connection().id().as_str().to_string();
        self.open.connection_id = id.clone();
        self.open.ext.protocol = Some(protocol.to_string());
        self.awaiting_handshake_response = true;
        server.attach(client);
        let sent = server.send(&ServiceMessage::OpenConnection(self.open.clone()))
            && server.send(&ServiceMessage::ConnectionData(ConnectionData {
                connection_id: id,
                payload: handshake_request,
                ext: Extensions::default(),
            }));
        self.server = Some(server);
        sent
    }

    /// Sends client bytes (whole hub messages) to the app server.
    pub(crate) fn forward(&self, client: &dyn LinkedClient, payload: Bytes) -> Forwarded {
        let Some(server) = &self.server else {
            return Forwarded::Gone;
        };
        server.send_client_data(&ServiceMessage::ConnectionData(ConnectionData {
            connection_id: client.connection().id().as_str().to_string(),
            payload,
            ext: Extensions::default(),
        }))
    }

    /// The server connection this client is pinned to, if any.
    pub(crate) fn server(&self) -> Option<&Arc<ServerConnection>> {
        self.server.as_ref()
    }

    /// Takes ConnectionData from the app server: the handshake response first (always JSON
    /// text), then messages in the client's protocol. Only whole messages are queued, so a
    /// transport never writes half a message, and a run of whole messages is queued as one
    /// shared slice without copying. With `traced`, also gives back the whole messages it
    /// queued (and their protocol), for the live trace.
    fn relay(
        &mut self,
        max: usize,
        client: &dyn LinkedClient,
        payload: Bytes,
        traced: bool,
    ) -> Result<Option<(Format, Bytes)>, CloseReason> {
        // A held tail contains no message boundary (else it would have gone out): only the new
        // bytes are searched, and a message arriving in many pieces is not rescanned or
        // recopied per piece.
        let mut searched = self.relay.len();
        let held = searched > 0;
        let mut data = if held {
            self.relay.extend_from_slice(&payload);
            self.relay.split().freeze()
        } else {
            payload
        };
        if self.awaiting_handshake_response {
            let Some(end) = data[searched..]
                .iter()
                .position(|&b| b == RECORD_SEPARATOR)
                .map(|p| searched + p)
            else {
                if data.len() > max {
                    return Err(CloseReason::ProtocolError(
                        "the app server's handshake response is too large".into(),
                    ));
                }
                self.keep(data, held);
                return Ok(None);
            };
            let response = data.split_to(end + 1);
            searched = 0;
            let refused = matches!(handshake::parse_response(&response), Ok(Some((Some(_), _))));
            if refused {
                // The client reads the error and closes; nothing more goes to it.
                client.connection().outbound().push(response);
                self.awaiting_handshake_response = false;
                self.relay = BytesMut::new();
                return Ok(None);
            }
            // Only now does the client join its hub: nothing the router sends (broadcasts,
            // groups, REST) may reach it before its handshake response.
            match client.hub().admit(client.connection(), response) {
                Join::Joined => {}
                Join::Closing => {
                    // Its close path answers the handshake with the reason.
                    self.relay = BytesMut::new();
                    return Ok(None);
                }
                Join::IdTaken => {
                    return Err(CloseReason::ProtocolError(
                        "connection id already in use".into(),
                    ))
                }
            }
            self.awaiting_handshake_response = false;
            client.mark_handshake_done();
            // Finishing removes the client from the hub only if it was already added.
            if client.is_finished() {
                client.hub().remove_connection(client.connection().id());
            }
        }
        if data.is_empty() {
            self.relay = BytesMut::new();
            return Ok(None);
        }
        let format = client
            .connection()
            .protocol()
            .and_then(Format::for_relay)
            .unwrap_or(Format::Json);
        let whole = FrameSplitter::new(format, max)
            .whole_prefix_len(&data, searched)
            .map_err(|e| relay_error(e, max))?;
        let mut shown = None;
        if whole > 0 {
            // Counted per hub message, as Azure bills them: pings (which ASP.NET app servers
            // send every client through here) are not.
            let frames = data.split_to(whole);
            let mut totals = TrafficTotals::default();
            for_each_trackable(format, &frames, |len| totals.add_out(len));
            shown = traced.then(|| (format, frames.clone()));
            client.hub().deliver(client.connection(), frames, &totals);
            self.pause_if_backed_up(client);
        }
        self.keep(data, held);
        Ok(shown)
    }

    /// The client reads slower than its app server writes to it (a fast stream, a slow
    /// network): past a quarter of its queue's budget the app server is asked to stop sending
    /// to it (ConnectionFlowControl Pause), so the writer waits instead of overflowing the
    /// queue, which would close the client as a slow consumer. Peers that do not know the
    /// message ignore it, as the SDK ignores unknown types.
    fn pause_if_backed_up(&mut self, client: &dyn LinkedClient) {
        let Some(server) = &self.server else {
            return;
        };
        let outbound = client.connection().outbound();
        let backed_up = || outbound.pending_bytes() * 4 >= outbound.max_pending_bytes();
        if self.flow_paused || !backed_up() {
            return;
        }
        // Noted before the queue is looked at again: a writer that empties it from now on
        // finds the note and waits for this lock, so a pause is never left without its resume.
        client.note_flow_paused(true);
        if !backed_up() {
            client.note_flow_paused(false);
            return;
        }
        server.send(&flow_control(client, ConnectionFlowControl::PAUSE));
        self.flow_paused = true;
    }

    /// The client's transport wrote the backlog: the app server may send to it again.
    pub(crate) fn resume_flow(&mut self, client: &dyn LinkedClient) {
        if !std::mem::take(&mut self.flow_paused) {
            return;
        }
        if let Some(server) = &self.server {
            server.send(&flow_control(client, ConnectionFlowControl::RESUME));
        }
    }

    /// Holds an incomplete tail for the next ConnectionData. The relay's own buffer is taken
    /// back without a copy when nothing else shares it; a tail of the app server's read buffer
    /// is copied, so it does not keep that (possibly large) buffer alive.
    fn keep(&mut self, tail: Bytes, held: bool) {
        self.relay = if tail.is_empty() {
            BytesMut::new()
        } else if held {
            tail.try_into_mut()
                .unwrap_or_else(|shared| BytesMut::from(&shared[..]))
        } else {
            BytesMut::from(&tail[..])
        };
    }

    /// Brings the held tail's charge up to date; false if the node's budget cannot hold it,
    /// and then the tail is dropped.
    fn charge_relay(&mut self, budget: &Arc<ByteBudget>) -> bool {
        let held = self.relay.len();
        if held == 0 && self.relay_charge.is_none() {
            return true;
        }
        let charge = self.relay_charge.get_or_insert_with(|| budget.charge());
        if charge.resize(held) {
            return true;
        }
        self.relay = BytesMut::new();
        charge.resize(0);
        false
    }

    /// The client's handshake request went to the app server and no answer was relayed yet.
    pub(crate) fn awaiting_handshake_response(&self) -> bool {
        self.awaiting_handshake_response
    }
}

/// A ConnectionFlowControl for `client` (Pause or Resume).
fn flow_control(client: &dyn LinkedClient, operation: i32) -> ServiceMessage {
    ServiceMessage::ConnectionFlowControl(ConnectionFlowControl {
        connection_id: client.connection().id().to_string(),
        connection_type: ConnectionFlowControl::CLIENT,
        operation,
        ext: Extensions::default(),
    })
}

/// The close reason for an app server's bytes that cannot be relayed.
fn relay_error(error: FrameError, max: usize) -> CloseReason {
    CloseReason::ProtocolError(match error {
        FrameError::TooLarge { .. } => {
            format!("the app server sent a message over the maximum of {max} bytes")
        }
        other => format!("the app server sent a malformed message: {other}"),
    })
}

impl DefaultMode {
    /// ConnectionData from an app server for one of its clients.
    pub(crate) fn relay(&self, client: &dyn LinkedClient, payload: Bytes) {
        let traced = self.tracer.on();
        let mut shown = None;
        let result = match client.link().lock().as_mut() {
            Some(link) => link
                .relay(self.max_server_message_size, client, payload, traced)
                .and_then(|whole| {
                    shown = whole;
                    if link.charge_relay(&self.relay_budget) {
                        return Ok(());
                    }
                    self.metrics.refused("relay_buffer");
                    Err(CloseReason::ProtocolError(format!(
                        "the service holds its maximum of {} bytes of partial messages from app servers (limits.max_relay_buffered_bytes)",
                        self.relay_budget.max()
                    )))
                }),
            None => Ok(()),
        };
        if let Some((format, frames)) = shown {
            self.trace_relay(client, format, &frames);
        }
        if let Err(reason) = result {
            client.connection().close(reason);
        }
    }

    /// What an app server sends one client, in the live trace: the whole messages the relay
    /// queued for it (a message that came in pieces shows once, when whole), without the
    /// pings app servers send every client.
    #[cold]
    fn trace_relay(&self, client: &dyn LinkedClient, format: Format, frames: &[u8]) {
        let connection = client.connection();
        for body in bodies(format, frames) {
            if is_chatter(format, body) {
                continue;
            }
            self.tracer.emit(client.hub().name(), || {
                let mut event = TraceEvent::new("message");
                event.direction = Some("out");
                event.connection_id = Some(connection.id().to_string());
                event.to = Some(format!("connection:{}", connection.id()));
                self.tracer.describe(&mut event, format, body);
                event
            });
        }
    }

    /// Tells the client's app server that the client is gone (once), when it ends.
    pub(crate) fn client_finished(&self, client: &dyn LinkedClient, reason: &CloseReason) {
        client_finished(self, client, reason);
    }
}

fn client_finished(default_mode: &DefaultMode, client: &dyn LinkedClient, reason: &CloseReason) {
    let server = match client.link().lock().as_mut() {
        Some(link) => link.server.take(),
        None => None,
    };
    let Some(server) = server else {
        return;
    };
    let id = client.connection().id();
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
    default_mode.client_gone(client.hub().name(), id);
}

/// Moves a client from one server connection to another: the new one learns of it with
/// `Asrs-Migrate-From` (and skips its handshake), the old one, if still there, with
/// CloseConnection carrying `Asrs-Migrate-To`.
pub(crate) fn migrate(
    client: &Arc<dyn LinkedClient>,
    from: &Arc<ServerConnection>,
    to: &Arc<ServerConnection>,
    tell_old: bool,
) {
    let mut guard = client.link().lock();
    let Some(link) = guard.as_mut() else {
        return;
    };
    if client.is_finished() {
        return;
    }
    // Another relocation may have moved the client already: the SDK sends its `fin` on every
    // connection, and each connection's task relocates the clients of all of them.
    if !link.server.as_ref().is_some_and(|s| Arc::ptr_eq(s, from)) {
        return;
    }
    from.detach(client.connection().id());
    if link.awaiting_handshake_response {
        // The new app server would skip the handshake response this client still waits for.
        drop(guard);
        client.connection().close(CloseReason::AppServerGone);
        return;
    }
    let id = client.connection().id().as_str().to_string();
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
    link.relay_charge = None;
    link.awaiting_handshake_response = false;
    to.attach(client.clone());
    link.server = Some(to.clone());
    if !to.send(&ServiceMessage::OpenConnection(open)) {
        drop(guard);
        client.connection().close(CloseReason::AppServerGone);
    }
}

/// Closes a client of a lost server connection, unless it was moved elsewhere meanwhile.
pub(crate) fn close_if_pinned(client: &dyn LinkedClient, from: &Arc<ServerConnection>) {
    let guard = client.link().lock();
    let pinned = guard
        .as_ref()
        .and_then(|link| link.server.as_ref())
        .is_some_and(|s| Arc::ptr_eq(s, from));
    drop(guard);
    if pinned {
        client.connection().close(CloseReason::AppServerGone);
    }
}

#[cfg(test)]
mod tests {
    use crate::live_trace::Tracer;
    use std::sync::atomic::{AtomicBool, Ordering};

    use parking_lot::Mutex;
    use switchyard_auth::VerifiedToken;
    use switchyard_core::{ConnectionId, HubName};
    use switchyard_hub_protocol::handshake;
    use switchyard_router::{Connection, Hub, NoInterest, Router};

    use super::*;
    use crate::config::Config;

    /// A client as Default mode sees it, without any transport or node behind it.
    struct TestClient {
        connection: Arc<Connection>,
        hub: Arc<Hub>,
        link: Mutex<Option<Box<DefaultLink>>>,
        handshake_done: AtomicBool,
    }

    impl LinkedClient for TestClient {
        fn connection(&self) -> &Arc<Connection> {
            &self.connection
        }
        fn hub(&self) -> &Arc<Hub> {
            &self.hub
        }
        fn link(&self) -> &Mutex<Option<Box<DefaultLink>>> {
            &self.link
        }
        fn is_finished(&self) -> bool {
            false
        }
        fn handshake_done(&self) -> bool {
            self.handshake_done.load(Ordering::Relaxed)
        }
        fn mark_handshake_done(&self) {
            self.handshake_done.store(true, Ordering::Relaxed);
        }
    }

    /// Client `c1` of hub `chat` with a queue budget of `budget` bytes, announced on `server`
    /// with its handshake answered.
    fn opened_client(
        default_mode: &DefaultMode,
        server: &Arc<ServerConnection>,
        budget: usize,
    ) -> Arc<TestClient> {
        let hub = HubName::new("chat", None).unwrap();
        let token = VerifiedToken {
            claims: Vec::new(),
            expires_at: i64::MAX,
            audiences: Vec::new(),
            signed_with: Default::default(),
        };
        let client = Arc::new(TestClient {
            connection: Arc::new(Connection::new(
                ConnectionId::new("c1").unwrap(),
                None,
                budget,
            )),
            hub: Router::new(Arc::new(NoInterest)).hub(&hub),
            link: Mutex::new(Some(DefaultLink::new(&token))),
            handshake_done: AtomicBool::new(false),
        });
        let as_linked: Arc<dyn LinkedClient> = client.clone();
        client
            .connection
            .set_protocol(switchyard_core::Protocol::Json);
        let request = Bytes::from(handshake::encode_request("json", 1));
        let opened = client.link.lock().as_mut().unwrap().open(
            as_linked,
            server.clone(),
            "json",
            request,
            "n1~test",
        );
        assert!(opened);
        default_mode.relay(&*client, Bytes::from_static(handshake::RESPONSE_OK));
        assert!(client.handshake_done());
        client
    }

    /// Two relocations of one client working from the same snapshot (two `fin:1` pings read by
    /// two connection tasks at once): the second must not pin the client a second time.
    #[test]
    fn a_stale_second_migration_leaves_the_client_on_one_connection() {
        let default_mode = DefaultMode::new(
            &Config::default(),
            "n1".into(),
            &Default::default(),
            Arc::new(Tracer::new(&Default::default())),
        );
        let hub = HubName::new("chat", None).unwrap();
        let register = |server_id| {
            ServerConnection::register_detached(
                &default_mode.servers,
                hub.clone(),
                server_id,
                1 << 20,
            )
        };
        let from = register("A");
        let client = opened_client(&default_mode, &from, 1 << 20);
        let as_linked: Arc<dyn LinkedClient> = client.clone();
        assert_eq!(from.client_count(), 1);
        let first = register("B");
        let second = register("C");

        migrate(&as_linked, &from, &first, true);
        migrate(&as_linked, &from, &second, true);

        assert_eq!(from.client_count(), 0);
        assert_eq!(first.client_count(), 1);
        assert_eq!(second.client_count(), 0, "pinned twice");
        let server = client.link.lock().as_ref().unwrap().server.clone().unwrap();
        assert!(Arc::ptr_eq(&server, &first));
        // A lost connection the client already left does not close it.
        close_if_pinned(&*client, &from);
        assert!(!client.connection.outbound().is_closing());
        default_mode.client_finished(&*client, &CloseReason::ClientClosed);
        assert_eq!(first.client_count(), 0);
    }

    /// The flow-control messages queued for an app server connection.
    fn flow_controls(server: &ServerConnection) -> Vec<i32> {
        let mut frames = Vec::new();
        server.outbound.try_drain(&mut frames);
        let mut stream = BytesMut::new();
        for frame in frames {
            stream.extend_from_slice(&frame);
        }
        let reader = switchyard_service_protocol::FrameReader::new(usize::MAX);
        let mut operations = Vec::new();
        while let Some(body) = reader.next_body(&mut stream).unwrap() {
            if let ServiceMessage::ConnectionFlowControl(flow) =
                switchyard_service_protocol::decode(&body).unwrap()
            {
                assert_eq!(flow.connection_id, "c1");
                assert_eq!(flow.connection_type, ConnectionFlowControl::CLIENT);
                operations.push(flow.operation);
            }
        }
        operations
    }

    /// A client whose queue backs up past a quarter of its budget: its app server is asked to
    /// pause once, and to resume once the transport wrote the backlog.
    #[test]
    fn a_backed_up_client_pauses_its_app_server_until_the_backlog_is_written() {
        let default_mode = DefaultMode::new(
            &Config::default(),
            "n1".into(),
            &Default::default(),
            Arc::new(Tracer::new(&Default::default())),
        );
        let hub = HubName::new("chat", None).unwrap();
        let server = ServerConnection::register_detached(&default_mode.servers, hub, "A", 1 << 20);
        let client = opened_client(&default_mode, &server, 1000);
        let message = |n: usize| {
            Bytes::from(format!(
                "{{\"type\":1,\"target\":\"{}\",\"arguments\":[]}}\u{1e}",
                "x".repeat(n)
            ))
        };
        // 100 bytes queued: under a quarter of 1,000.
        default_mode.relay(&*client, message(60));
        assert_eq!(flow_controls(&server), Vec::<i32>::new());
        // Past a quarter: one Pause, and no second one while paused.
        default_mode.relay(&*client, message(200));
        default_mode.relay(&*client, message(10));
        assert_eq!(flow_controls(&server), vec![ConnectionFlowControl::PAUSE]);
        // The transport takes and writes the backlog: one Resume.
        let mut frames = Vec::new();
        client.connection.outbound().try_drain(&mut frames);
        client.link.lock().as_mut().unwrap().resume_flow(&*client);
        client.link.lock().as_mut().unwrap().resume_flow(&*client);
        assert_eq!(flow_controls(&server), vec![ConnectionFlowControl::RESUME]);
    }

    /// A message an app server sends a client in pieces shows in the live trace once, when
    /// it is whole; its pings do not show.
    #[tokio::test]
    async fn a_relayed_message_in_pieces_is_traced_once_whole() {
        let tracer = Arc::new(Tracer::new(&Default::default()));
        let default_mode = DefaultMode::new(
            &Config::default(),
            "n1".into(),
            &Default::default(),
            tracer.clone(),
        );
        let hub = HubName::new("chat", None).unwrap();
        let mut watch = tracer.start(&hub, std::time::Duration::from_secs(60));
        let server = ServerConnection::register_detached(&default_mode.servers, hub, "A", 1 << 20);
        let client = opened_client(&default_mode, &server, 1 << 20);
        let message = b"{\"type\":1,\"target\":\"news\",\"arguments\":[1]}\x1e{\"type\":6}\x1e";
        let (first, rest) = message.split_at(20);
        default_mode.relay(&*client, Bytes::copy_from_slice(first));
        assert!(watch.news().events.is_empty(), "half a message is no event");
        default_mode.relay(&*client, Bytes::copy_from_slice(rest));
        let news = watch.news();
        let shown: Vec<serde_json::Value> = news
            .events
            .iter()
            .map(|event| {
                serde_json::to_value(crate::live_trace::Shown { node: "n1", event }).unwrap()
            })
            .collect();
        assert_eq!(shown.len(), 1, "the ping is left out: {shown:?}");
        assert_eq!(shown[0]["target"], "news");
        assert_eq!(shown[0]["direction"], "out");
        assert_eq!(shown[0]["to"], "connection:c1");
    }
}
