//! One service node's shared state, and the executor every API calls.
//!
//! Mutations and sends are published on the backplane (even on one node), so a cluster
//! backplane changes where messages go without changing any caller.

use std::borrow::Borrow;
use std::collections::{BTreeSet, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::RwLock;
use switchyard_auth::AccessKeys;
use switchyard_backplane::{Backplane, MemoryBackplane, NodeId, Sink};
use switchyard_core::{
    Channel, CloseReason, ConnectionId, GroupName, HubName, Message, Payloads, Protocol, Target,
    UserId,
};
use switchyard_hub_protocol::{encode_invocation, Format};
use switchyard_router::{GroupMember, Interest, Router};

use crate::client::ClientConnection;
use crate::config::{Config, ServiceMode};
use crate::metrics::{Metrics, ReasonLabel, TransportLabel};
use crate::server::{Invocations, Servers};

pub struct Node {
    pub(crate) config: Config,
    pub(crate) keys: AccessKeys,
    pub(crate) node_id: NodeId,
    pub(crate) router: Arc<Router>,
    pub(crate) backplane: Arc<dyn Backplane>,
    /// Client connections by the value clients put in `id=` (token for negotiate v1,
    /// connection id for v0 and for connections made without negotiate).
    clients: RwLock<HashSet<ClientEntry>>,
    /// App-server connections (Default mode), by hub.
    pub(crate) servers: Servers,
    /// Client results routed between app servers.
    pub(crate) invocations: Invocations,
    /// Serverless upstream webhooks; `None` without templates.
    pub(crate) upstream: Option<Arc<crate::upstream::Upstream>>,
    started: Instant,
    pub metrics: Arc<Metrics>,
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

/// Subscribes this node to a channel while it has a local member.
struct BackplaneInterest {
    backplane: Arc<dyn Backplane>,
    node_id: NodeId,
}

impl Interest for BackplaneInterest {
    fn changed(&self, channel: Channel, interested: bool) {
        if interested {
            self.backplane.subscribe(&self.node_id, &channel);
        } else {
            self.backplane.unsubscribe(&self.node_id, &channel);
        }
    }
}

/// Applies what the backplane delivers to this node's router.
struct RouterSink {
    router: Arc<Router>,
    metrics: Arc<Metrics>,
}

impl Sink for RouterSink {
    fn receive(&self, message: &Arc<Message>) {
        let delivered = self.router.apply(message);
        self.metrics.frames_delivered.inc_by(delivered as u64);
    }
}

// The backplane holds the node's sink (and so its router), and the router holds the
// backplane: without this a dropped node would never be freed.
impl Drop for Node {
    fn drop(&mut self) {
        self.backplane.detach(&self.node_id);
    }
}

impl Node {
    /// A node on the in-memory backplane (a single-node deployment).
    pub fn new(config: Config) -> Arc<Node> {
        Node::with_backplane(config, Arc::new(MemoryBackplane::new()), "node-1".into())
    }

    /// A node on the given backplane; several nodes may share one.
    pub fn with_backplane(
        config: Config,
        backplane: Arc<dyn Backplane>,
        node_id: NodeId,
    ) -> Arc<Node> {
        let keys = AccessKeys::new(
            config
                .access_key
                .clone()
                .unwrap_or_else(|| switchyard_auth::EMULATOR_ACCESS_KEY.to_string()),
            config.secondary_access_key.clone(),
        );
        let router = Arc::new(Router::new(Arc::new(BackplaneInterest {
            backplane: backplane.clone(),
            node_id: node_id.clone(),
        })));
        let metrics = Arc::new(Metrics::default());
        backplane.attach(
            &node_id,
            Arc::new(RouterSink {
                router: router.clone(),
                metrics: metrics.clone(),
            }),
        );
        let upstream =
            crate::upstream::Upstream::new(&config.upstream, keys.clone(), metrics.clone());
        Arc::new(Node {
            config,
            keys,
            upstream,
            node_id,
            router,
            backplane,
            clients: RwLock::new(HashSet::new()),
            servers: Servers::default(),
            invocations: Invocations::default(),
            started: Instant::now(),
            metrics,
        })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn keys(&self) -> &AccessKeys {
        &self.keys
    }

    /// Milliseconds since the node started: the clock of per-connection timers.
    pub(crate) fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// App-server connections on this node, all hubs.
    pub fn server_connection_count(&self) -> usize {
        self.servers.count()
    }

    /// Whether a client of `hub` with this token is carried to an app server (Default mode)
    /// rather than served here. Decided when the client connects.
    pub(crate) fn serves_default_mode(
        &self,
        hub: &HubName,
        token: &switchyard_auth::VerifiedToken,
    ) -> bool {
        match self.config.mode {
            ServiceMode::Serverless => false,
            ServiceMode::Default => true,
            // A token naming an app server (`asrs.s.sn`) was issued by an app server's SDK.
            ServiceMode::Auto => self.servers.seen(hub) || token.claim("asrs.s.sn").is_some(),
        }
    }

    pub fn client_connection_count(&self) -> usize {
        self.clients.read().len()
    }

    // ---- client table ----

    pub(crate) fn insert_client(&self, client: Arc<ClientConnection>) -> bool {
        let mut clients = self.clients.write();
        let limit = self.config.limits.max_client_connections;
        if limit != 0 && clients.len() >= limit {
            return false;
        }
        clients.replace(ClientEntry(client));
        self.metrics.connections_opened.inc();
        true
    }

    pub(crate) fn client(&self, key: &str) -> Option<Arc<ClientConnection>> {
        self.clients.read().get(key).map(|entry| entry.0.clone())
    }

    pub(crate) fn at_connection_limit(&self) -> bool {
        let limit = self.config.limits.max_client_connections;
        limit != 0 && self.clients.read().len() >= limit
    }

    /// Removes a client from every index. Safe to call more than once.
    pub(crate) fn finish(&self, client: &ClientConnection) {
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
        client.hub.remove_connection(client.connection.id());
        crate::server::link::client_finished(self, client, &reason);
        // Before the client leaves the table: the upstream's task is given it from there.
        crate::upstream::client_finished(self, client, &reason);
        let reason = reason.code();
        self.clients.write().remove(&*client.key);
        if let Some(transport) = client.transport() {
            self.metrics
                .client_connections
                .get_or_create(&TransportLabel {
                    transport: transport.name(),
                })
                .dec();
        }
        self.metrics
            .connections_closed
            .get_or_create(&ReasonLabel { reason })
            .inc();
    }

    fn all_clients(&self) -> Vec<Arc<ClientConnection>> {
        self.clients
            .read()
            .iter()
            .map(|entry| entry.0.clone())
            .collect()
    }

    /// Every second: timeouts, inactivity, expired tokens, expired user-group memberships.
    pub(crate) async fn heartbeat(self: Arc<Self>) {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.check_clients();
            self.router.sweep(Instant::now());
            self.invocations.sweep(&self, Instant::now());
        }
    }

    pub(crate) fn check_clients(&self) {
        let now_ms = self.now_ms();
        let now_unix = unix_now();
        for client in self.all_clients() {
            if let Some(expired) = client.check_timers(self, now_ms, now_unix) {
                match expired {
                    crate::client::Expiry::Close(CloseReason::HandshakeTimeout) => {
                        client.refuse_late_handshake();
                    }
                    crate::client::Expiry::Close(reason) => client.connection.close(reason),
                    crate::client::Expiry::Discard => self.finish(&client),
                }
            }
        }
    }

    /// Closes every client (allow-reconnect) and waits up to `drain` for them to go.
    pub async fn close_all_clients(&self, drain: Duration) {
        for client in self.all_clients() {
            if client.transport().is_none() {
                self.finish(&client); // negotiated but never connected: nobody to tell
            } else {
                client.connection.close(CloseReason::ServiceShutdown);
            }
        }
        let deadline = Instant::now() + drain;
        while self.client_connection_count() > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    // ---- executor: what REST (and later app servers) can ask of the service ----

    fn publish(&self, channels: Vec<Channel>, message: Message) {
        self.backplane.publish(&channels, Arc::new(message));
    }

    /// The node that owns a connection. One node today; a cluster will encode it in the id.
    fn owner_of(&self, _connection: &ConnectionId) -> Channel {
        Channel::Node(self.node_id.clone())
    }

    fn channels_for(&self, hub: &HubName, target: &Target) -> Vec<Channel> {
        let unique = |channels: Vec<Channel>| -> Vec<Channel> {
            channels
                .into_iter()
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect()
        };
        match target {
            Target::All { .. } => vec![Channel::Hub(hub.clone())],
            Target::Connection(id) => vec![self.owner_of(id)],
            Target::Connections(ids) => unique(ids.iter().map(|id| self.owner_of(id)).collect()),
            Target::User(user) => vec![Channel::User(hub.clone(), user.clone())],
            Target::Users(users) => unique(
                users
                    .iter()
                    .map(|u| Channel::User(hub.clone(), u.clone()))
                    .collect(),
            ),
            Target::Group { group, .. } => vec![Channel::Group(hub.clone(), group.clone())],
            Target::Groups(groups) => unique(
                groups
                    .iter()
                    .map(|g| Channel::Group(hub.clone(), g.clone()))
                    .collect(),
            ),
        }
    }

    /// Encodes a non-blocking invocation once for each service-encoded protocol that the hub's
    /// connections use.
    pub fn encode_invocation(
        &self,
        hub: &HubName,
        method: &str,
        arguments: &[serde_json::Value],
    ) -> Payloads {
        let (json, messagepack) = self
            .router
            .find_hub(hub)
            .map_or((false, false), |h| h.protocols_in_use());
        let mut payloads = Payloads::new();
        if json {
            payloads.insert(
                Protocol::Json,
                encode_invocation(Format::Json, method, arguments),
            );
        }
        if messagepack {
            payloads.insert(
                Protocol::MessagePack,
                encode_invocation(Format::MessagePack, method, arguments),
            );
        }
        payloads
    }

    /// Sends pre-encoded payloads to the target.
    pub fn send(&self, hub: &HubName, target: Target, payloads: Payloads) {
        if payloads.is_empty() {
            return;
        }
        let channels = self.channels_for(hub, &target);
        self.publish(
            channels,
            Message::Send {
                hub: hub.clone(),
                target,
                payloads,
            },
        );
    }

    /// Sends raw framed bytes per protocol (the msgpack REST body's payloads map).
    pub fn send_payloads(&self, hub: &HubName, target: Target, payloads: Vec<(String, Bytes)>) {
        let mut encoded = Payloads::new();
        for (protocol, bytes) in payloads {
            encoded.insert(Protocol::from_name(&protocol), bytes);
        }
        self.send(hub, target, encoded);
    }

    /// Adds a connection to a group. Returns false if the connection does not exist.
    pub fn add_to_group(
        &self,
        hub: &HubName,
        connection: &ConnectionId,
        group: &GroupName,
    ) -> bool {
        if !self.connection_exists(hub, connection) {
            return false;
        }
        self.publish(
            vec![self.owner_of(connection)],
            Message::AddToGroup {
                hub: hub.clone(),
                connection: connection.clone(),
                group: group.clone(),
            },
        );
        true
    }

    /// Removes a connection from one group, or all (`None`). False if it does not exist.
    pub fn remove_from_group(
        &self,
        hub: &HubName,
        connection: &ConnectionId,
        group: Option<&GroupName>,
    ) -> bool {
        if !self.connection_exists(hub, connection) {
            return false;
        }
        self.publish(
            vec![self.owner_of(connection)],
            Message::RemoveFromGroup {
                hub: hub.clone(),
                connection: connection.clone(),
                group: group.cloned(),
            },
        );
        true
    }

    pub fn user_join_group(
        &self,
        hub: &HubName,
        user: &UserId,
        group: &GroupName,
        ttl: Option<Duration>,
    ) {
        self.publish(
            vec![Channel::All],
            Message::UserJoinGroup {
                hub: hub.clone(),
                user: user.clone(),
                group: group.clone(),
                ttl,
            },
        );
    }

    pub fn user_leave_group(&self, hub: &HubName, user: &UserId, group: Option<&GroupName>) {
        self.publish(
            vec![Channel::All],
            Message::UserLeaveGroup {
                hub: hub.clone(),
                user: user.clone(),
                group: group.cloned(),
            },
        );
    }

    /// Closes the target's connections, except `excluded`, with a Close carrying `reason`
    /// and allowReconnect.
    pub fn close(
        &self,
        hub: &HubName,
        target: Target,
        excluded: Vec<ConnectionId>,
        reason: Option<String>,
    ) {
        let channels = self.channels_for(hub, &target);
        self.publish(
            channels,
            Message::Close {
                hub: hub.clone(),
                target,
                excluded,
                reason: CloseReason::ClosedByApi(reason),
            },
        );
    }

    pub fn connection_exists(&self, hub: &HubName, connection: &ConnectionId) -> bool {
        self.router
            .find_hub(hub)
            .is_some_and(|h| h.connection_exists(connection))
    }

    pub fn user_exists(&self, hub: &HubName, user: &UserId) -> bool {
        self.router
            .find_hub(hub)
            .is_some_and(|h| h.user_exists(user))
    }

    pub fn group_exists(&self, hub: &HubName, group: &GroupName) -> bool {
        self.router
            .find_hub(hub)
            .is_some_and(|h| h.group_exists(group))
    }

    pub fn user_in_group(&self, hub: &HubName, user: &UserId, group: &GroupName) -> bool {
        self.router
            .find_hub(hub)
            .is_some_and(|h| h.user_in_group(user, group, Instant::now()))
    }

    /// A page of group members ordered by connection id, after the continuation point.
    pub fn group_members(
        &self,
        hub: &HubName,
        group: &GroupName,
        after: Option<&str>,
        max: usize,
    ) -> Vec<GroupMember> {
        self.router
            .find_hub(hub)
            .map(|h| h.group_members(group, after, max))
            .unwrap_or_default()
    }
}

pub(crate) fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The router and the backplane refer to each other; dropping the node must free both
    /// (found by the fuzz targets, which make a node per input).
    #[test]
    fn a_dropped_node_is_freed() {
        let backplane: Arc<dyn Backplane> = Arc::new(MemoryBackplane::new());
        let node = Node::with_backplane(Config::default(), backplane.clone(), "n1".into());
        let router = Arc::downgrade(&node.router);
        drop(node);
        assert!(router.upgrade().is_none(), "the router outlived its node");
        drop(backplane);
    }
}
