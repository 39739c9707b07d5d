//! The client endpoint's state: the table of this node's client connections, what serving
//! them needs (the cluster, Default mode, the upstream), their timers and their ends.

use std::borrow::Borrow;
use std::collections::hash_map::RandomState;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, Hash, Hasher};
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use parking_lot::{Mutex, RwLock};
use switchyard_auth::VerifiedToken;
use switchyard_core::{clock::unix_now, CloseReason, HubName};

use super::{ClientConnection, Expiry, Transport};
use crate::app_server::DefaultMode;
use crate::cluster::Cluster;
use crate::config::{ServiceMode, ValidConfig};
use crate::http::TextError;
use crate::metrics::{Metrics, ReasonLabel, TransportLabel};
use crate::shared::Shared;
use crate::upstream::Upstream;

pub(crate) struct Clients {
    pub(crate) shared: Arc<Shared>,
    pub(crate) cluster: Arc<Cluster>,
    pub(crate) default_mode: Arc<DefaultMode>,
    /// Serverless upstream webhooks; `None` without templates.
    pub(crate) upstream: Option<Arc<Upstream>>,
    /// Client connections by the value clients put in `id=` (token for negotiate v1,
    /// connection id for v0 and for connections made without negotiate).
    table: RwLock<HashSet<ClientEntry>>,
    started: Instant,
    /// Keys the identity fingerprints that bind a connection to whoever negotiated it.
    owners: RandomState,
    /// Connections whose transport started and that have not finished.
    connected: AtomicUsize,
    /// Connections made by negotiate that have no transport yet, in all and per waiter.
    pending: Mutex<Pending>,
    /// Connected clients by user (`owner_of`), with `limits.max_connections_per_user` only.
    users: Mutex<HashMap<u64, usize>>,
    /// User agents, kept once for all the connections that send the same one.
    user_agents: Mutex<HashSet<Arc<str>>>,
}

/// Distinct user agents kept shared; past it each connection keeps its own copy.
const USER_AGENTS: usize = 1_000;
/// Longest user agent kept (the rest is cut).
const USER_AGENT_LENGTH: usize = 256;

#[derive(Default)]
struct Pending {
    total: usize,
    /// By `ClientConnection::pending_key` (the owner, or for anonymous tokens the address)
    /// and by `ClientConnection::pending_address` (the address, whoever the owner is).
    by_key: HashMap<u64, usize>,
}

/// Why a connection could not be made.
pub(crate) enum Refusal {
    /// `limits.max_client_connections` connected clients.
    Full,
    /// Too many negotiated connections wait for their transport (node-wide, this waiter's or
    /// this address's).
    TooManyPending,
    /// `limits.max_connections_per_user` connected clients of this user.
    UserFull,
}

impl Refusal {
    pub(crate) fn into_error(self) -> TextError {
        TextError::new(
            StatusCode::TOO_MANY_REQUESTS,
            match self {
                Refusal::Full => "the service has reached its maximum number of client connections",
                Refusal::TooManyPending => {
                    "too many negotiated connections are waiting to connect; connect the ones \
                     you have or try again later"
                }
                Refusal::UserFull => {
                    "this user has reached its maximum number of client connections on this \
                     node (limits.max_connections_per_user); close one or try again later"
                }
            },
        )
    }
}

/// An entry of the client table, found by its connection's `key`: the key is not copied into
/// the table, and an entry is one pointer (not a `String` and an `Arc`).
struct ClientEntry(Arc<ClientConnection>);

impl Borrow<str> for ClientEntry {
    fn borrow(&self) -> &str {
        &self.0.key
    }
}

// Hash and Eq agree with `str`'s, as `Borrow<str>` requires.
impl Hash for ClientEntry {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.key.hash(state);
    }
}

impl PartialEq for ClientEntry {
    fn eq(&self, other: &Self) -> bool {
        self.0.key == other.0.key
    }
}

impl Eq for ClientEntry {}

impl Clients {
    pub(crate) fn new(
        shared: Arc<Shared>,
        cluster: Arc<Cluster>,
        default_mode: Arc<DefaultMode>,
        upstream: Option<Arc<Upstream>>,
    ) -> Clients {
        Clients {
            shared,
            cluster,
            default_mode,
            upstream,
            table: RwLock::new(HashSet::new()),
            started: Instant::now(),
            owners: RandomState::new(),
            connected: AtomicUsize::new(0),
            pending: Mutex::new(Pending::default()),
            users: Mutex::new(HashMap::new()),
            user_agents: Mutex::new(HashSet::new()),
        }
    }

    /// The shared copy of a user agent (cut to [`USER_AGENT_LENGTH`]).
    pub(crate) fn user_agent(&self, agent: &str) -> Arc<str> {
        let mut end = agent.len().min(USER_AGENT_LENGTH);
        while !agent.is_char_boundary(end) {
            end -= 1;
        }
        let agent = &agent[..end];
        let mut known = self.user_agents.lock();
        if let Some(shared) = known.get(agent) {
            return shared.clone();
        }
        let new: Arc<str> = agent.into();
        if known.len() < USER_AGENTS {
            known.insert(new.clone());
        }
        new
    }

    pub(crate) fn config(&self) -> &ValidConfig {
        &self.shared.config
    }

    pub(crate) fn metrics(&self) -> &Metrics {
        &self.shared.metrics
    }

    /// Milliseconds since the node started: the clock of per-connection timers.
    pub(crate) fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Whether a client of `hub` with this token is carried to an app server (Default mode)
    /// rather than served here. Decided when the client connects.
    pub(crate) fn serves_default_mode(&self, hub: &HubName, token: &VerifiedToken) -> bool {
        match self.config().mode {
            ServiceMode::Serverless => false,
            ServiceMode::Default => true,
            // A token naming an app server (`asrs.s.sn`) was issued by an app server's SDK. In a
            // cluster, an app server on another node makes the hub a Default-mode hub here too.
            ServiceMode::Auto => {
                self.default_mode.servers.seen(hub)
                    || token.claim("asrs.s.sn").is_some()
                    || self.cluster.members().serve_hub(hub)
            }
        }
    }

    /// A fingerprint of who a token speaks for: its user id, or for an anonymous token its
    /// claims but the times (`exp`, `iat`, `nbf`), so a client whose token factory signs a
    /// fresh token per request stays the same owner. Later requests of a connection must come
    /// from the same owner. (Anonymous tokens with equal claims are indistinguishable: for
    /// them negotiate v1's secret connection token keeps sessions apart, and sessions found
    /// by their public id are also bound to an address, see [`Clients::bound_owner`].)
    pub(crate) fn owner_of(&self, token: &VerifiedToken) -> u64 {
        let mut hasher = self.owners.build_hasher();
        match token.user_id() {
            Some(user) => ("user", user).hash(&mut hasher),
            None => {
                "claims".hash(&mut hasher);
                for (name, value) in &token.claims {
                    if !matches!(name.as_str(), "exp" | "iat" | "nbf") {
                        (name, value).hash(&mut hasher);
                    }
                }
            }
        }
        hasher.finish()
    }

    /// An anonymous owner tied to the client address it came from: for sessions found by
    /// their connection id (negotiate v0, WebSockets without negotiate), which other clients
    /// can learn, the address is what tells two anonymous visitors apart.
    pub(crate) fn bound_owner(&self, owner: u64, source: Option<IpAddr>) -> u64 {
        self.owners.hash_one(("bound", owner, source))
    }

    /// The connection `key` names, if it belongs to `hub` and to the token's owner (and, for
    /// an anonymous session found by its id, comes from its address: `source`, the request's
    /// client address). Anything else looks like an unknown id, so ids cannot be probed with
    /// another user's token.
    pub(crate) fn get_owned(
        &self,
        key: &str,
        hub: &HubName,
        token: &VerifiedToken,
        source: Option<IpAddr>,
    ) -> Option<Arc<ClientConnection>> {
        let client = self.get(key)?;
        let mut owner = self.owner_of(token);
        if client.bound_to_address {
            owner = self.bound_owner(owner, source);
        }
        let owned = !client.is_finished() && client.hub.name() == hub && client.owner == owner;
        owned.then_some(client)
    }

    pub(crate) fn count(&self) -> usize {
        self.table.read().len()
    }

    /// Who waits for a negotiated connection, for the per-waiter cap: the token's owner, or
    /// for an anonymous token the source address (anonymous owners all look alike).
    pub(crate) fn pending_key(&self, token: &VerifiedToken, source: Option<IpAddr>) -> u64 {
        match (token.user_id(), source) {
            (None, Some(ip)) => self.owners.hash_one(("address", ip)),
            _ => self.owner_of(token),
        }
    }

    /// Who else waits from the same client address, for the per-address cap (0: not
    /// counted: no address, an exempt one, or no cap), so that rotating user ids does not
    /// pass the per-user cap.
    pub(crate) fn pending_address(&self, source: Option<IpAddr>) -> u64 {
        match source {
            Some(ip)
                if self.config().limits.max_pending_negotiations_per_address != 0
                    && !self.config().is_exempt_address(ip) =>
            {
                self.owners.hash_one(("negotiating from", ip)).max(1)
            }
            _ => 0,
        }
    }

    /// Registers a connection that waits for its transport, within the pending caps.
    pub(crate) fn insert(&self, client: Arc<ClientConnection>) -> Result<(), Refusal> {
        let limits = &self.config().limits;
        {
            let mut pending = self.pending.lock();
            let waiting = |key: u64| pending.by_key.get(&key).copied().unwrap_or(0);
            let over_total = limits.max_pending_negotiations != 0
                && pending.total >= limits.max_pending_negotiations;
            let over_own = limits.max_pending_negotiations_per_user != 0
                && waiting(client.pending_key) >= limits.max_pending_negotiations_per_user;
            let over_address = client.pending_address != 0
                && waiting(client.pending_address) >= limits.max_pending_negotiations_per_address;
            if over_total || over_own || over_address {
                return Err(Refusal::TooManyPending);
            }
            pending.total += 1;
            *pending.by_key.entry(client.pending_key).or_insert(0) += 1;
            if client.pending_address != 0 {
                *pending.by_key.entry(client.pending_address).or_insert(0) += 1;
            }
        }
        self.table.write().replace(ClientEntry(client));
        self.metrics().connections_opened.inc();
        Ok(())
    }

    /// A pending connection stops waiting (its transport started, or it ended). Once.
    fn release_pending(&self, client: &ClientConnection) {
        if !client.take_pending() {
            return;
        }
        let mut pending = self.pending.lock();
        pending.total = pending.total.saturating_sub(1);
        for key in [client.pending_key, client.pending_address] {
            if key == 0 {
                continue;
            }
            if let Some(count) = pending.by_key.get_mut(&key) {
                *count -= 1;
                if *count == 0 {
                    pending.by_key.remove(&key);
                }
            }
        }
    }

    /// The user a connection counts for under `limits.max_connections_per_user`, if any.
    fn counted_user(&self, client: &ClientConnection) -> Option<u64> {
        let counted = self.config().limits.max_connections_per_user != 0
            && client.connection.user().is_some();
        counted.then_some(client.owner)
    }

    /// Whether the token's user has `limits.max_connections_per_user` clients connected here
    /// (checked at negotiate, so the refusal comes before any work).
    pub(crate) fn user_at_limit(&self, token: &VerifiedToken) -> bool {
        let limit = self.config().limits.max_connections_per_user;
        if limit == 0 || token.user_id().is_none() {
            return false;
        }
        let owner = self.owner_of(token);
        self.users.lock().get(&owner).is_some_and(|n| *n >= limit)
    }

    /// Counts a connecting client for its user, within `limits.max_connections_per_user`.
    fn count_user(&self, client: &ClientConnection) -> Result<(), Refusal> {
        let Some(user) = self.counted_user(client) else {
            return Ok(());
        };
        let mut users = self.users.lock();
        let count = users.entry(user).or_insert(0);
        if *count >= self.config().limits.max_connections_per_user {
            return Err(Refusal::UserFull);
        }
        *count += 1;
        Ok(())
    }

    fn uncount_user(&self, client: &ClientConnection) {
        let Some(user) = self.counted_user(client) else {
            return;
        };
        let mut users = self.users.lock();
        if let Some(count) = users.get_mut(&user) {
            *count -= 1;
            if *count == 0 {
                users.remove(&user);
            }
        }
    }

    /// A transport starts on a connection: it counts as connected if there is room, and as
    /// waiting for its handshake if there is room for that (`throttling.max_handshakes_in_progress`).
    pub(crate) fn admit(&self, client: &ClientConnection) -> Result<(), TextError> {
        let limit = self.config().limits.max_client_connections;
        let admitted = self
            .connected
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (limit == 0 || n < limit).then_some(n + 1)
            })
            .is_ok();
        if !admitted {
            return Err(Refusal::Full.into_error());
        }
        if let Err(refusal) = self.count_user(client) {
            self.connected.fetch_sub(1, Ordering::AcqRel);
            return Err(refusal.into_error());
        }
        let throttle = &self.shared.throttle;
        if let Err(refusal) = throttle.handshake_begins(self.metrics()) {
            self.connected.fetch_sub(1, Ordering::AcqRel);
            self.uncount_user(client);
            return Err(TextError::throttled(refusal));
        }
        client.handshaking.store(true, Ordering::Release);
        self.release_pending(client);
        Ok(())
    }

    /// The client's handshake request arrived (or the connection ended before it): it no
    /// longer counts as waiting for one. Once.
    pub(crate) fn handshake_arrived(&self, client: &ClientConnection) {
        if client.handshaking.swap(false, Ordering::AcqRel) {
            self.shared.throttle.handshake_ended();
        }
    }

    pub(crate) fn get(&self, key: &str) -> Option<Arc<ClientConnection>> {
        self.table.read().get(key).map(|entry| entry.0.clone())
    }

    /// Whether `limits.max_client_connections` clients are connected.
    pub(crate) fn at_connection_limit(&self) -> bool {
        let limit = self.config().limits.max_client_connections;
        limit != 0 && self.connected.load(Ordering::Acquire) >= limit
    }

    /// Removes a client from every index and tells whoever follows it (its app server, the
    /// upstream). Safe to call more than once.
    pub(crate) fn finish(&self, client: &Arc<ClientConnection>) {
        if !client.mark_finished() {
            return;
        }
        // The first reason given wins; a connection that just went away closed itself.
        let reason = client
            .connection
            .outbound()
            .close_reason()
            .unwrap_or(CloseReason::ClientClosed);
        client.connection.close(CloseReason::ClientClosed);
        if let Some(resume) = client.resume() {
            let freed = resume.lock().end();
            self.metrics().stateful_buffered_bytes.dec_by(freed as i64);
            // A writer waiting for Acks takes no frames, so it would not see the close.
            client.connection.outbound().interrupt();
        }
        client.hub.remove_connection(client.connection.id());
        self.default_mode.client_finished(&**client, &reason);
        if let Some(upstream) = &self.upstream {
            upstream.client_finished(client, &reason);
        }
        self.table.write().remove(&*client.key);
        self.release_pending(client);
        self.handshake_arrived(client);
        if client.admitted() {
            self.connected.fetch_sub(1, Ordering::AcqRel);
            self.uncount_user(client);
        }
        let metrics = self.metrics();
        if let Some(transport) = client.transport() {
            metrics
                .client_connections
                .get_or_create(&TransportLabel {
                    transport: transport.name(),
                })
                .dec();
        }
        metrics
            .connections_closed
            .get_or_create(&ReasonLabel {
                reason: reason.code(),
            })
            .inc();
        crate::logs::client_disconnected(
            client.hub.name().as_str(),
            client.connection.id().as_str(),
            client.transport().map(Transport::name),
            &reason,
        );
        if self.shared.tracer.on() {
            client.trace(self, "disconnected", |event| {
                event.reason = Some(reason.code());
                event.detail = reason.close_error();
            });
        }
    }

    /// Every connection of this node (the dashboard's list).
    pub(crate) fn all(&self) -> Vec<Arc<ClientConnection>> {
        self.table
            .read()
            .iter()
            .map(|entry| entry.0.clone())
            .collect()
    }

    /// Timeouts, inactivity, expired tokens: run every second.
    pub(crate) fn check_timers(&self) {
        let now_ms = self.now_ms();
        let now_unix = unix_now();
        for client in self.all() {
            if let Some(expired) = client.check_timers(self, now_ms, now_unix) {
                match expired {
                    Expiry::Close(CloseReason::HandshakeTimeout) => {
                        client.refuse_late_handshake();
                    }
                    Expiry::Close(reason) => client.connection.close(reason),
                    Expiry::Discard => self.finish(&client),
                }
            }
        }
    }

    /// Closes every client (allow-reconnect) and waits up to `drain` for them to go.
    pub(crate) async fn close_all(&self, drain: Duration) {
        for client in self.all() {
            if client.transport().is_none() {
                self.finish(&client); // negotiated but never connected: nobody to tell
            } else {
                client.connection.close(CloseReason::ServiceShutdown);
            }
        }
        let deadline = Instant::now() + drain;
        while self.count() > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
