//! App-server connections of this node: one [`ServerConnection`] per app-server WebSocket
//! after its handshake, and the [`Servers`] registry that pins clients to them.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};
use switchyard_core::{ConnectionId, HubName};
use switchyard_router::Outbound;
use switchyard_service_protocol::{encoded, ServiceMessage};
use tokio::sync::Notify;

use super::LinkedClient;

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
    pub(crate) fn from_wire(value: i32) -> Option<Self> {
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
    /// The node that passed this connection on (its `target` named this node, and the load
    /// balancer sent it elsewhere): it lasts only as long as that node does, so clients go to
    /// direct connections first.
    pub(crate) through: Option<Box<str>>,
    /// Clients pinned to this connection, by connection id.
    clients: Mutex<HashMap<ConnectionId, Arc<dyn LinkedClient>>>,
    /// The app server announced a graceful shutdown: no new clients.
    draining: AtomicBool,
    /// Its handshake allowed stateful reconnect for its clients.
    stateful_reconnects: AtomicBool,
    closed: AtomicBool,
    /// Woken when the queue was taken by the writer (or the connection closed), for clients
    /// that stopped reading while the queue was congested.
    room: Notify,
}

/// What became of client bytes for the app server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Forwarded {
    Sent,
    /// Sent, but the connection's queue is past its high-water mark: the client should stop
    /// reading until there is room again.
    Congested,
    /// Not sent: they would have overflowed the queue (the app server does not read).
    Refused,
    /// Not sent: the connection is gone.
    Gone,
}

impl ServerConnection {
    pub(crate) fn new(
        id: Box<str>,
        server_id: Arc<str>,
        hub: HubName,
        kind: ConnectionKind,
        migrate: bool,
        max_pending_bytes: usize,
        through: Option<Box<str>>,
    ) -> ServerConnection {
        ServerConnection {
            id,
            server_id,
            hub,
            kind,
            migrate,
            outbound: Outbound::new(max_pending_bytes),
            through,
            clients: Default::default(),
            draining: Default::default(),
            stateful_reconnects: Default::default(),
            closed: Default::default(),
            room: Notify::new(),
        }
    }

    /// Queues bytes a client sent. Client traffic never overflows the queue (which would drop
    /// the connection and every client on it): past half the budget the client is told to
    /// pause, and a message that does not fit is refused.
    pub(crate) fn send_client_data(&self, message: &ServiceMessage) -> Forwarded {
        if self.closed.load(Ordering::Acquire) {
            return Forwarded::Gone;
        }
        if !self.outbound.try_push(encoded(message)) {
            return if self.outbound.is_closing() {
                Forwarded::Gone
            } else {
                Forwarded::Refused
            };
        }
        if self.congested() {
            Forwarded::Congested
        } else {
            Forwarded::Sent
        }
    }

    /// Whether the queue is past its high-water mark (half the budget).
    pub(crate) fn congested(&self) -> bool {
        self.outbound.pending_bytes() >= self.outbound.max_pending_bytes() / 2
            && !self.closed.load(Ordering::Acquire)
    }

    /// Resolves once the queue is below its high-water mark or the connection is gone.
    pub(crate) async fn room(&self) {
        loop {
            let notified = self.room.notified();
            if !self.congested() {
                return;
            }
            notified.await;
        }
    }

    /// The writer took the queue: paused clients may go on.
    pub(crate) fn drained(&self) {
        self.room.notify_waiters();
    }

    /// The connection ended: it takes no more clients and no more messages.
    /// Its handshake said `allowStatefulReconnects`.
    pub(crate) fn allow_stateful_reconnects(&self) {
        self.stateful_reconnects.store(true, Ordering::Release);
    }

    pub(crate) fn mark_closed(&self) {
        self.closed.store(true, Ordering::Release);
        self.room.notify_waiters();
    }

    /// The app server began a graceful shutdown: no new clients.
    pub(crate) fn mark_draining(&self) {
        self.draining.store(true, Ordering::Release);
    }

    /// Queues one message; false if the connection is going away.
    pub(crate) fn send(&self, message: &ServiceMessage) -> bool {
        self.send_bytes(encoded(message))
    }

    pub(crate) fn send_bytes(&self, frame: Bytes) -> bool {
        !self.closed.load(Ordering::Acquire) && self.outbound.push(frame)
    }

    pub(super) fn carries_clients(&self) -> bool {
        self.kind != ConnectionKind::Weak
            && !self.draining.load(Ordering::Acquire)
            && !self.closed.load(Ordering::Acquire)
    }

    pub(crate) fn client_count(&self) -> usize {
        self.clients.lock().len()
    }

    pub(crate) fn attach(&self, client: Arc<dyn LinkedClient>) {
        self.clients
            .lock()
            .insert(client.connection().id().clone(), client);
    }

    pub(crate) fn detach(&self, id: &ConnectionId) -> Option<Arc<dyn LinkedClient>> {
        self.clients.lock().remove(id)
    }

    pub(crate) fn client(&self, id: &ConnectionId) -> Option<Arc<dyn LinkedClient>> {
        self.clients.lock().get(id).cloned()
    }

    pub(super) fn take_clients(&self) -> Vec<Arc<dyn LinkedClient>> {
        self.clients.lock().drain().map(|(_, c)| c).collect()
    }

    pub(super) fn clients_snapshot(&self) -> Vec<Arc<dyn LinkedClient>> {
        self.clients.lock().values().cloned().collect()
    }

    /// A client-carrying connection of app server `server_id` for `hub` with no socket behind
    /// it, registered like a connected one: what the service sends it stays in `outbound`.
    /// For tests and the fuzz targets.
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn register_detached(
        servers: &Servers,
        hub: HubName,
        server_id: &str,
        max_pending_bytes: usize,
    ) -> Arc<ServerConnection> {
        let connection = Arc::new(ServerConnection::new(
            format!("{server_id}-detached").into_boxed_str(),
            server_id.into(),
            hub,
            ConnectionKind::Default,
            false,
            max_pending_bytes,
            None,
        ));
        servers.add(connection.clone());
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
    pub(crate) fn add(&self, connection: Arc<ServerConnection>) {
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

    pub(crate) fn remove(&self, connection: &Arc<ServerConnection>) {
        let mut hubs = self.hubs.write();
        if let Some(list) = hubs.get_mut(&connection.hub) {
            list.retain(|c| !Arc::ptr_eq(c, connection));
            if list.is_empty() {
                hubs.remove(&connection.hub);
            }
        }
    }

    /// Whether an app server of the hub connected here allows stateful reconnect.
    pub(crate) fn allow_stateful_reconnects(&self, hub: &HubName) -> bool {
        self.hubs.read().get(hub).is_some_and(|list| {
            list.iter()
                .any(|c| c.stateful_reconnects.load(Ordering::Acquire))
        })
    }

    pub(crate) fn seen(&self, hub: &HubName) -> bool {
        self.seen.read().contains(hub)
    }

    pub(crate) fn connections(&self, hub: &HubName) -> Vec<Arc<ServerConnection>> {
        self.hubs.read().get(hub).cloned().unwrap_or_default()
    }

    /// Every connection, all hubs.
    pub(crate) fn all(&self) -> Vec<Arc<ServerConnection>> {
        self.hubs.read().values().flatten().cloned().collect()
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
        // Connections passed on by another node break when it goes: use them only when there
        // is no direct one.
        let direct: Vec<&Arc<ServerConnection>> = candidates
            .iter()
            .copied()
            .filter(|c| c.through.is_none())
            .collect();
        if !direct.is_empty() {
            candidates = direct;
        }
        self.least_loaded(&candidates).ok_or(PickError::NoServer)
    }

    /// Where a client of a lost (or draining) connection goes: a connection of the same app
    /// server if `same_server_first`, else of another app server.
    pub(super) fn pick_migration_target(
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
    ) -> Option<Arc<dyn LinkedClient>> {
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
