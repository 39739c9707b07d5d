//! Default mode: the app-server endpoint `/server/?hub=` speaking Azure's service protocol.
//!
//! # Layout
//! - here: [`ServerConnection`] (one physical app-server WebSocket), the [`Servers`] registry
//!   that pins clients to server connections, and the HTTP route.
//! - `session`: one server connection's task — handshake, reading and acting on messages,
//!   writing, keep-alive.
//! - `link`: the client side of Default mode — what a client keeps to reach its app server,
//!   and the relay of the app server's bytes back to it.
//! - `invocations`: client results (`ClientInvocation` and its completions) between servers.

mod invocations;
pub(crate) mod link;
mod session;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use axum::extract::{FromRequestParts, Request, State};
use axum::http::{header, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use bytes::Bytes;
use parking_lot::{Mutex, RwLock};
use switchyard_core::{ConnectionId, HubName};
use switchyard_router::Outbound;
use switchyard_service_protocol::{encoded, ServiceMessage};

pub(crate) use invocations::Invocations;

use crate::client::ClientConnection;
use crate::http::{authenticate, bearer_token, text_error, Query};
use crate::node::Node;

/// The handshake's `connectionType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ConnectionKind {
    /// Carries clients; the SDK keeps a fixed number per hub.
    Default,
    /// An extra connection the service asked for; carries clients.
    OnDemand,
    /// Sends only (secondary endpoints, Management SDK): never carries clients.
    Weak,
}

impl ConnectionKind {
    fn from_wire(value: i32) -> Option<Self> {
        match value {
            0 => Some(ConnectionKind::Default),
            1 => Some(ConnectionKind::OnDemand),
            2 => Some(ConnectionKind::Weak),
            _ => None,
        }
    }
}

/// One physical WebSocket from an app server, after its handshake.
pub(crate) struct ServerConnection {
    /// The `cid` the SDK chose for this socket (or one we generated).
    pub(crate) id: Box<str>,
    /// The app server's id (`X-ASRS-Server-Id`): all its connections share it.
    pub(crate) server_id: Arc<str>,
    pub(crate) hub: HubName,
    pub(crate) kind: ConnectionKind,
    /// The handshake asked for MigrateClients: clients of a lost connection move to another
    /// connection instead of being closed.
    pub(crate) migrate: bool,
    pub(crate) outbound: Outbound,
    /// Clients pinned to this connection, by connection id.
    clients: Mutex<HashMap<ConnectionId, Arc<ClientConnection>>>,
    /// The app server announced a graceful shutdown: no new clients.
    draining: AtomicBool,
    closed: AtomicBool,
}

impl ServerConnection {
    /// Queues one message; false if the connection is going away.
    pub(crate) fn send(&self, message: &ServiceMessage) -> bool {
        self.send_bytes(encoded(message))
    }

    pub(crate) fn send_bytes(&self, frame: Bytes) -> bool {
        !self.closed.load(Ordering::Acquire) && self.outbound.push(frame)
    }

    fn carries_clients(&self) -> bool {
        self.kind != ConnectionKind::Weak
            && !self.draining.load(Ordering::Acquire)
            && !self.closed.load(Ordering::Acquire)
    }

    pub(crate) fn client_count(&self) -> usize {
        self.clients.lock().len()
    }

    pub(crate) fn attach(&self, client: Arc<ClientConnection>) {
        self.clients
            .lock()
            .insert(client.connection.id().clone(), client);
    }

    pub(crate) fn detach(&self, id: &ConnectionId) -> Option<Arc<ClientConnection>> {
        self.clients.lock().remove(id)
    }

    pub(crate) fn client(&self, id: &ConnectionId) -> Option<Arc<ClientConnection>> {
        self.clients.lock().get(id).cloned()
    }

    fn take_clients(&self) -> Vec<Arc<ClientConnection>> {
        self.clients.lock().drain().map(|(_, c)| c).collect()
    }

    fn clients_snapshot(&self) -> Vec<Arc<ClientConnection>> {
        self.clients.lock().values().cloned().collect()
    }

    /// A client-carrying connection of app server `server_id` for `hub` with no socket behind
    /// it, registered like a connected one: what the service sends it stays in `outbound`.
    /// For `crate::fuzzing` only.
    pub(crate) fn register_detached(
        node: &Node,
        hub: HubName,
        server_id: &str,
    ) -> Arc<ServerConnection> {
        let connection = Arc::new(ServerConnection {
            id: format!("{server_id}-detached").into_boxed_str(),
            server_id: server_id.into(),
            hub,
            kind: ConnectionKind::Default,
            migrate: false,
            outbound: Outbound::new(node.config.limits.max_pending_bytes_per_server_connection),
            clients: Default::default(),
            draining: Default::default(),
            closed: Default::default(),
        });
        node.servers.add(connection.clone());
        connection
    }
}

/// Why no server connection could take a client.
#[derive(Debug)]
pub(crate) enum PickError {
    /// No app server is connected for the hub.
    NoServer,
    /// The token requires a server (`asrs.s.ssticky=Required`) that is not connected.
    StickyServerMissing(String),
}

impl PickError {
    /// The handshake error the client sees.
    pub(crate) fn client_error(&self) -> String {
        match self {
            // The wording real clients see from Azure in Default mode without app servers.
            PickError::NoServer => "SignalR Service is now in 'Default' service mode. Current mode works as a proxy \
                 that routes client traffic to the connected app servers. However app servers are not connected."
                .to_string(),
            PickError::StickyServerMissing(server) => format!(
                "The app server '{server}' this client is required to stick to (asrs.s.ssticky) is not connected."
            ),
        }
    }
}

/// Every server connection of this node, by hub.
#[derive(Default)]
pub(crate) struct Servers {
    hubs: RwLock<HashMap<HubName, Vec<Arc<ServerConnection>>>>,
    /// Hubs that have had an app server since the node started (for `mode = auto`).
    seen: RwLock<HashSet<HubName>>,
    /// Rotates ties between equally loaded connections.
    turn: AtomicUsize,
}

impl Servers {
    fn add(&self, connection: Arc<ServerConnection>) {
        // A Weak connection (Management SDK) cannot take clients: it does not make the hub a
        // Default-mode hub.
        if connection.kind != ConnectionKind::Weak && !self.seen.read().contains(&connection.hub) {
            self.seen.write().insert(connection.hub.clone());
        }
        self.hubs
            .write()
            .entry(connection.hub.clone())
            .or_default()
            .push(connection);
    }

    fn remove(&self, connection: &Arc<ServerConnection>) {
        let mut hubs = self.hubs.write();
        if let Some(list) = hubs.get_mut(&connection.hub) {
            list.retain(|c| !Arc::ptr_eq(c, connection));
            if list.is_empty() {
                hubs.remove(&connection.hub);
            }
        }
    }

    pub(crate) fn seen(&self, hub: &HubName) -> bool {
        self.seen.read().contains(hub)
    }

    pub(crate) fn connections(&self, hub: &HubName) -> Vec<Arc<ServerConnection>> {
        self.hubs.read().get(hub).cloned().unwrap_or_default()
    }

    pub(crate) fn count(&self) -> usize {
        self.hubs.read().values().map(Vec::len).sum()
    }

    /// A live connection of app server `server_id` for the hub, preferring `preferred`.
    pub(crate) fn of_server(
        &self,
        hub: &HubName,
        server_id: &str,
        preferred: Option<&Arc<ServerConnection>>,
    ) -> Option<Arc<ServerConnection>> {
        if let Some(p) = preferred {
            if !p.closed.load(Ordering::Acquire) && &*p.server_id == server_id {
                return Some(p.clone());
            }
        }
        let hubs = self.hubs.read();
        hubs.get(hub)?
            .iter()
            .find(|c| &*c.server_id == server_id && !c.closed.load(Ordering::Acquire))
            .cloned()
    }

    /// The connection a new client of `hub` goes to: the least loaded one that carries clients,
    /// among those of `sticky` server if given (required or preferred).
    pub(crate) fn pick(
        &self,
        hub: &HubName,
        sticky: Option<&str>,
        required: bool,
    ) -> Result<Arc<ServerConnection>, PickError> {
        let hubs = self.hubs.read();
        let all: Vec<&Arc<ServerConnection>> = hubs
            .get(hub)
            .map(|list| list.iter().filter(|c| c.carries_clients()).collect())
            .unwrap_or_default();
        let mut candidates = all.clone();
        if let Some(server) = sticky {
            let own: Vec<_> = all
                .iter()
                .copied()
                .filter(|c| &*c.server_id == server)
                .collect();
            if !own.is_empty() {
                candidates = own;
            } else if required {
                return Err(PickError::StickyServerMissing(server.to_string()));
            }
        }
        self.least_loaded(&candidates).ok_or(PickError::NoServer)
    }

    /// Where a client of a lost (or draining) connection goes: a connection of the same app
    /// server if `same_server_first`, else of another app server.
    fn pick_migration_target(
        &self,
        from: &Arc<ServerConnection>,
        other_server_only: bool,
    ) -> Option<Arc<ServerConnection>> {
        let hubs = self.hubs.read();
        let all: Vec<&Arc<ServerConnection>> = hubs
            .get(&from.hub)?
            .iter()
            .filter(|c| c.carries_clients() && !Arc::ptr_eq(c, from))
            .collect();
        let same: Vec<_> = all
            .iter()
            .copied()
            .filter(|c| c.server_id == from.server_id)
            .collect();
        let others: Vec<_> = all
            .iter()
            .copied()
            .filter(|c| c.server_id != from.server_id)
            .collect();
        if other_server_only {
            self.least_loaded(&others)
        } else {
            self.least_loaded(&same)
                .or_else(|| self.least_loaded(&others))
        }
    }

    fn least_loaded(&self, candidates: &[&Arc<ServerConnection>]) -> Option<Arc<ServerConnection>> {
        if candidates.is_empty() {
            return None;
        }
        let start = self.turn.fetch_add(1, Ordering::Relaxed) % candidates.len();
        let mut best: Option<(&Arc<ServerConnection>, usize)> = None;
        for i in 0..candidates.len() {
            let candidate = candidates[(start + i) % candidates.len()];
            let load = candidate.client_count();
            if best.is_none_or(|(_, l)| load < l) {
                best = Some((candidate, load));
            }
        }
        best.map(|(c, _)| c.clone())
    }

    /// Finds a client pinned to any connection of the hub on this node.
    pub(crate) fn find_client(
        &self,
        hub: &HubName,
        id: &ConnectionId,
    ) -> Option<Arc<ClientConnection>> {
        let hubs = self.hubs.read();
        hubs.get(hub)?.iter().find_map(|c| c.client(id))
    }

    /// Every app server id connected for the hub.
    pub(crate) fn server_ids(&self, hub: &HubName) -> Vec<Arc<str>> {
        let mut ids: Vec<Arc<str>> = self
            .connections(hub)
            .iter()
            .map(|c| c.server_id.clone())
            .collect();
        ids.sort();
        ids.dedup();
        ids
    }
}

pub(crate) fn routes() -> axum::Router<Arc<Node>> {
    axum::Router::new()
        .route("/server", any(connect))
        .route("/server/", any(connect))
}

/// `GET /server/?hub=&cid=` with a WebSocket upgrade and a server token.
async fn connect(State(node): State<Arc<Node>>, request: Request) -> Response {
    let (mut parts, _body) = request.into_parts();
    let query = Query::parse(&parts.uri);
    if query.count("hub") != 1 {
        return text_error(
            StatusCode::BAD_REQUEST,
            "exactly one 'hub' query parameter is required",
        );
    }
    let hub = match HubName::new(query.get("hub").unwrap_or_default(), None) {
        Ok(hub) => hub,
        Err(e) => return text_error(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let audience_query = format!("hub={}", hub.as_str());
    let token = match authenticate(
        &node,
        bearer_token(&parts.headers, &query),
        &parts.headers,
        &parts.uri,
        "/server/",
        Some(&audience_query),
    ) {
        Ok(token) => token,
        // The SDK recognises only a 401 on the upgrade as an auth failure.
        Err(e) => return text_error(StatusCode::UNAUTHORIZED, e.to_string()),
    };
    let is_upgrade = parts
        .headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    if parts.method != Method::GET || !is_upgrade {
        return text_error(
            StatusCode::BAD_REQUEST,
            "app servers connect with a WebSocket upgrade (GET /server/?hub=…)",
        );
    }
    let server_id: Arc<str> = parts
        .headers
        .get("x-asrs-server-id")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .or_else(|| token.claim("nameid"))
        .map(Arc::from)
        .unwrap_or_else(|| Arc::from(switchyard_auth::generate_connection_token()));
    let cid = query
        .get("cid")
        .filter(|c| !c.is_empty() && c.len() <= 128)
        .map(str::to_string)
        .unwrap_or_else(switchyard_auth::generate_connection_token);
    let upgrade = match axum::extract::WebSocketUpgrade::from_request_parts(&mut parts, &node).await
    {
        Ok(upgrade) => upgrade,
        Err(rejection) => return rejection.into_response(),
    };
    let max = node.config.limits.max_server_message_size;
    upgrade
        .read_buffer_size(SERVER_READ_BUFFER)
        .max_message_size(max.saturating_mul(2))
        .max_frame_size(max.saturating_mul(2))
        .on_upgrade(move |socket| session::run(node, socket, hub, server_id, cid))
}

/// Read buffer of a server connection. tungstenite zero-fills the free part of its read
/// buffer before every read: at its 128 KiB default that memset was 6–7 % of the service's
/// CPU in Default-mode echo (mostly small reads); 16 KiB still takes a burst of 2 KB
/// messages in one read.
const SERVER_READ_BUFFER: usize = 16 * 1024;

/// Moves or closes every client of a server connection that is gone or draining.
///
/// `lost`: the connection itself is gone (its clients cannot stay). Otherwise the app server
/// asked to migrate its clients away (graceful shutdown with MigrateClients).
pub(crate) fn relocate_clients(node: &Node, from: &Arc<ServerConnection>, lost: bool) {
    let clients = if lost {
        from.take_clients()
    } else {
        from.clients_snapshot()
    };
    for client in clients {
        let target = if lost && !from.migrate {
            None
        } else {
            node.servers.pick_migration_target(from, !lost)
        };
        match target {
            // Detaches the client from `from` if it is still pinned there.
            Some(target) => link::migrate(&client, from, &target, !lost),
            None if lost => link::close_if_pinned(&client, from),
            // Draining with nowhere to go: the client stays until its connection ends.
            None => {}
        }
    }
}
