//! Default mode across nodes, the way the Azure SDK expects of a service with several
//! instances (its `target` and `offline` pings, and ServiceMapping for client results):
//! - every node should hold connections from every app server of a hub, so its clients are
//!   served where they are: a node that has an app server asks it, by a `["target",
//!   instance]` ping, to open an OnDemand connection to each node lacking one;
//! - when a node is gone, app servers hear `["offline", instance]` and fail the client
//!   invocations mapped to it (the SDK also drops the clients that instance announced over
//!   the connection the ping came on: none here, each node's clients are on its own);
//! - a client invocation for a connection on another node is passed to that node, which runs
//!   it as if the caller had sent it there, on the caller's connection to that node.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use switchyard_core::{ConnectionId, HubName};
use switchyard_service_protocol::{ClientInvocation, Extensions, Ping, ServiceMessage};

use super::DefaultMode;
use crate::cluster::members::Member;
use crate::cluster::{Cluster, Invocation, RemoteInvocations};
use crate::metrics::KindLabel;

/// How long a node first waits before asking an app server again to connect to the same
/// node: the app server may decline (its OnDemand connections are capped), or its connection
/// may have reached the node only through another (a balancer in front, or a connection
/// string naming one node), when a direct one is wanted. The wait doubles with each ask, up
/// to [`MAX_RETARGET`] after the first [`STEADY_ASKS`].
pub(super) const RETARGET: Duration = Duration::from_secs(3);
const MAX_RETARGET: Duration = Duration::from_secs(60);
const STEADY_ASKS: u32 = 5;

/// When each (hub, app server, instance) was last asked for, and how many asks so far.
pub(super) type Targeted = HashMap<(HubName, Arc<str>, String), (Instant, u32)>;

/// How many times in a row a node asks an app server for a direct connection itself, over
/// one that reached it through another node (see [`DefaultMode::ask_for_direct`]).
const SELF_ASKS: u32 = 10;

/// Per (hub, app server): this node's asks for itself since its last direct connection.
pub(super) type SelfAsked = HashMap<(HubName, Arc<str>), u32>;

/// The (hub, app server) pairs with an OnDemand connection being kept here, not yet registered.
pub(super) type AdoptingSet = Arc<Mutex<HashSet<(HubName, Arc<str>)>>>;

/// An OnDemand connection for another node being kept here (see
/// [`DefaultMode::start_adopting`]) until dropped, once the connection is registered or gone.
pub(crate) struct Adopting {
    set: AdoptingSet,
    key: (HubName, Arc<str>),
}

impl Drop for Adopting {
    fn drop(&mut self) {
        self.set.lock().remove(&self.key);
    }
}

/// How long after ask number `asks` (1 = the first) the next may follow.
fn retarget_after(asks: u32) -> Duration {
    let doublings = asks.saturating_sub(STEADY_ASKS).min(5);
    (RETARGET * 2u32.pow(doublings)).min(MAX_RETARGET)
}

impl DefaultMode {
    /// This node's instance id (`Asrs-Instance-Id`, `target`, ServiceMapping).
    pub(crate) fn instance_id(&self) -> &str {
        &self.instance_id
    }

    /// The app servers with direct connections that carry clients here, per hub, ordered:
    /// what this node's presence tells the others. A connection passed on by another node
    /// does not count: the others keep asking for a direct one.
    pub(crate) fn server_list(&self) -> Vec<(HubName, Vec<String>)> {
        let mut list: Vec<(HubName, Vec<String>)> = self
            .servers
            .all()
            .into_iter()
            .filter(|c| c.carries_clients() && c.through.is_none())
            .fold(
                HashMap::<HubName, Vec<String>>::new(),
                |mut by_hub, connection| {
                    by_hub
                        .entry(connection.hub.clone())
                        .or_default()
                        .push(connection.server_id.to_string());
                    by_hub
                },
            )
            .into_iter()
            .map(|(hub, mut ids)| {
                ids.sort();
                ids.dedup();
                (hub, ids)
            })
            .collect();
        list.sort_by(|a, b| a.0.cmp(&b.0));
        list
    }

    /// Asks app servers to connect to the live nodes that lack them. Of the nodes holding an
    /// app server, only the first by node id asks, so a node gets one OnDemand connection per
    /// request rather than one from every node. Returns how many pings went out.
    pub(crate) fn ask_for_connections(&self, me: &str, others: &[Member], now: Instant) -> usize {
        let mut targeted = self.targeted.lock();
        // Forgotten once twice its wait has passed: the node got its connection meanwhile.
        targeted
            .retain(|_, (at, asks)| now.saturating_duration_since(*at) < retarget_after(*asks) * 2);
        let mut sent = 0;
        for (hub, servers) in self.server_list() {
            for server in servers {
                let first_holder = others
                    .iter()
                    .filter(|m| m.has_server(&hub, &server))
                    .all(|m| m.node.as_str() > me);
                if !first_holder {
                    continue;
                }
                let server: Arc<str> = Arc::from(server);
                for member in others.iter().filter(|m| !m.has_server(&hub, &server)) {
                    let key = (hub.clone(), server.clone(), member.instance.clone());
                    let asks = match targeted.get(&key) {
                        Some((at, asks))
                            if now.saturating_duration_since(*at) < retarget_after(*asks) =>
                        {
                            continue
                        }
                        Some((_, asks)) => asks + 1,
                        None => 1,
                    };
                    let connection = self.servers.connections(&hub).into_iter().find(|c| {
                        c.server_id == server && c.carries_clients() && c.through.is_none()
                    });
                    if let Some(connection) = connection {
                        let ping = Ping::new(&[("target", member.instance.as_str())]);
                        if connection.send(&ServiceMessage::Ping(ping)) {
                            sent += 1;
                        }
                    }
                    targeted.insert(key, (now, asks));
                }
            }
        }
        sent
    }

    /// Tells the other nodes which app servers this node holds (or that it is leaving), and
    /// asks app servers to connect to the nodes lacking them. Once a second, and at once when
    /// an app server connects, so the others need not wait a second to steer clients here.
    pub(crate) fn announce(&self, cluster: &Cluster, now: Instant) {
        let members = cluster.members();
        cluster.publish_presence(self.server_list());
        if members.is_leaving() {
            return;
        }
        let asked = self.ask_for_connections(members.node(), &members.others(), now);
        self.metrics
            .cluster_server_pings
            .get_or_create(&KindLabel { kind: "target" })
            .inc_by(asked as u64);
    }

    /// Tells every app server connected here that `instance` is gone: the SDK drops the
    /// clients it announced and fails the client invocations mapped to it. Returns how many
    /// connections were told.
    pub(crate) fn announce_offline(&self, instance: &str) -> usize {
        let ping = ServiceMessage::Ping(Ping::new(&[("offline", instance)]));
        self.servers
            .all()
            .into_iter()
            .filter(|connection| connection.send(&ping))
            .count()
    }
}

impl RemoteInvocations for DefaultMode {
    fn take(&self, hub: &HubName, invocation: &Invocation) -> bool {
        let Invocation {
            connection,
            invocation_id,
            caller_server_id,
            payloads,
        } = invocation;
        if !self.holds_client(hub, connection) {
            return false;
        }
        // Answers (ServiceMapping, the routed completion, errors) go to the caller on its own
        // connection to this node: the SDK keeps one table of its invocations per process.
        let Some(caller) = self.servers.of_server(hub, caller_server_id, None) else {
            return false;
        };
        let call = ClientInvocation {
            invocation_id: invocation_id.clone(),
            connection_id: connection.as_str().to_string(),
            caller_server_id: caller_server_id.clone(),
            payloads: payloads
                .iter()
                .map(|(protocol, bytes)| (protocol.name().to_string(), bytes.clone()))
                .collect(),
            ext: Extensions::default(),
        };
        self.invoke(&caller, call);
        true
    }
}

impl DefaultMode {
    /// Marks an OnDemand connection of `server_id` for another node, which the balancer sent
    /// here, as kept as this node's own, if this node holds no direct connection from that
    /// app server for `hub` either (so it is being asked for one too) and is not keeping
    /// another already. Behind a round-robin balancer each ask lands on the named node by
    /// chance; kept, one that lands on a node lacking a connection serves that node at once,
    /// where passed on it would leave this node to be asked for again. `None`: pass it on.
    pub(crate) fn start_adopting(&self, hub: &HubName, server_id: &Arc<str>) -> Option<Adopting> {
        if self.has_direct(hub, server_id) {
            return None;
        }
        // A leaf lock, taken after the check (not around it): a direct connection registered
        // in between costs one spare connection, no harm.
        let key = (hub.clone(), server_id.clone());
        self.adopting.lock().insert(key.clone()).then(|| Adopting {
            set: self.adopting.clone(),
            key,
        })
    }

    /// Whether this node holds a direct connection of `server_id` for `hub` that carries
    /// clients (what its presence tells the others it has).
    fn has_direct(&self, hub: &HubName, server_id: &str) -> bool {
        self.servers
            .connections(hub)
            .iter()
            .any(|c| &*c.server_id == server_id && c.carries_clients() && c.through.is_none())
    }

    /// Asks app server `server_id` for a direct connection to this node over one of its
    /// connections that reached this node through another, after such a connection arrived
    /// (accepted, or refused as a second one). The balancer sent it elsewhere by chance and the
    /// app server plainly answers, so this node need not wait for the next ask (seconds,
    /// backing off to a minute): each miss is retried at once. At most [`SELF_ASKS`] in a
    /// row, since with a connection string that names one node every connection arrives
    /// through that node; a direct connection starts the count again. Returns whether it
    /// asked.
    pub(crate) fn ask_for_direct(&self, hub: &HubName, server_id: &str) -> bool {
        if self.has_direct(hub, server_id) {
            return false;
        }
        let connections = self.servers.connections(hub);
        let Some(via) = connections
            .iter()
            .find(|c| &*c.server_id == server_id && c.carries_clients())
        else {
            return false;
        };
        {
            let mut asked = self.self_asked.lock();
            let count = asked
                .entry((hub.clone(), via.server_id.clone()))
                .or_insert(0);
            if *count >= SELF_ASKS {
                return false;
            }
            *count += 1;
        }
        let ping = Ping::new(&[("target", self.instance_id.as_str())]);
        let sent = via.send(&ServiceMessage::Ping(ping));
        if sent {
            self.metrics
                .cluster_server_pings
                .get_or_create(&KindLabel { kind: "target" })
                .inc();
        }
        sent
    }

    /// A connection of `server_id` for `hub` closed: once none is left, its asks are
    /// forgotten (the SDK names a new server id on every start; one keeping its id starts
    /// afresh).
    pub(crate) fn server_left(&self, hub: &HubName, server_id: &Arc<str>) {
        let gone = !self
            .servers
            .connections(hub)
            .iter()
            .any(|c| c.server_id == *server_id);
        if gone {
            self.forget_self_asks(hub, server_id);
        }
    }

    /// Starts the count of [`Self::ask_for_direct`] again (a direct connection opened, or
    /// the app server's last connection closed).
    pub(crate) fn forget_self_asks(&self, hub: &HubName, server_id: &Arc<str>) {
        self.self_asked
            .lock()
            .remove(&(hub.clone(), server_id.clone()));
    }

    /// Why an OnDemand connection that another node passed on is not wanted: this node
    /// already has a connection from that app server for the hub, and one more through a
    /// node would not make it any less dependent on other nodes (the app server is asked
    /// again until one arrives directly).
    pub(crate) fn refuse_passed_on(&self, hub: &HubName, server_id: &str) -> Option<String> {
        self.servers
            .connections(hub)
            .iter()
            .any(|c| &*c.server_id == server_id && c.carries_clients())
            .then(|| {
                "This app server already has a connection to this service instance; only a \
                 direct one is wanted."
                    .to_string()
            })
    }
}

impl DefaultMode {
    /// Whether this node has a connection a new client of `hub` could be pinned to.
    pub(crate) fn can_serve(&self, hub: &HubName, sticky: Option<&str>, required: bool) -> bool {
        self.servers.pick(hub, sticky, required).is_ok()
    }

    /// Whether a client of this node is pinned to one of its app-server connections, its
    /// handshake done.
    pub(crate) fn holds_client(&self, hub: &HubName, connection: &ConnectionId) -> bool {
        self.servers
            .find_client(hub, connection)
            .is_some_and(|client| client.handshake_done())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asks_are_steady_then_back_off_to_a_minute() {
        let waits: Vec<u64> = (1..=12).map(|n| retarget_after(n).as_secs()).collect();
        assert_eq!(waits, [3, 3, 3, 3, 3, 6, 12, 24, 48, 60, 60, 60]);
    }
}
