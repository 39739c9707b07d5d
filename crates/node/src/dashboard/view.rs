//! What the dashboard shows, read from the node: a snapshot of every hub (sent each second)
//! and a filtered page of the connection list.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};
use switchyard_backplane::NodeId;
use switchyard_core::clock::unix_now_ms;
use switchyard_router::TrafficTotals;

use super::Dashboard;
use crate::client::ClientConnection;

/// Most rows one connection list carries (the page narrows with the filter).
pub(crate) const MAX_ROWS: usize = 500;
/// Most group names (and user ids) of a hub a node passes on, for exact counts in a cluster.
pub(crate) const NAMES: usize = 1_000;

/// What one node asks the others for ([`crate::cluster::Views`]).
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub(super) enum Request {
    Snapshot,
    Connections {
        filter: Filter,
    },
    /// Trace `hub` for `seconds` and pass the events to node `to` (see `relay`).
    Trace {
        hub: String,
        seconds: u64,
        to: String,
    },
    StopTrace {
        hub: String,
    },
}

/// How a [`TrafficTotals`] reads in the dashboard's JSON.
#[derive(Serialize, Deserialize)]
#[serde(remote = "TrafficTotals", rename_all = "camelCase")]
struct TrafficJson {
    messages_in: u64,
    bytes_in: u64,
    messages_out: u64,
    bytes_out: u64,
    units_in: u64,
    units_out: u64,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Snapshot {
    pub(crate) time: i64,
    /// The node the page is connected to.
    pub(crate) node: NodeView,
    /// Every node that answered (in a cluster), this one first.
    pub(crate) nodes: Vec<NodeView>,
    /// Every hub, summed over the nodes.
    pub(crate) hubs: Vec<HubView>,
}

#[derive(Serialize, Deserialize, Clone)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NodeView {
    pub(crate) id: String,
    pub(crate) uptime_seconds: u64,
    /// Percent of all the cores the process may use (100 = every core busy).
    pub(crate) cpu_percent: f64,
    pub(crate) memory_bytes: u64,
    pub(crate) client_connections: usize,
    pub(crate) server_connections: usize,
    /// Live nodes of the cluster, this one included (1 on its own).
    pub(crate) cluster_nodes: usize,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(crate) struct HubView {
    pub(crate) name: String,
    pub(crate) connections: usize,
    pub(crate) transports: BTreeMap<String, usize>,
    pub(crate) protocols: BTreeMap<String, usize>,
    pub(crate) groups: usize,
    pub(crate) users: usize,
    /// In a cluster the group and user counts are a sum over the nodes: a group with
    /// members on two nodes counts twice (exact while every node has few, see [`NAMES`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) approximate: bool,
    /// Between nodes only: the names behind `groups` and `users` when a node has at most
    /// [`NAMES`] of each, so that the nodes' answers unite exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) group_names: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) user_names: Option<Vec<String>>,
    pub(crate) servers: Vec<ServerView>,
    #[serde(with = "TrafficJson")]
    pub(crate) traffic: TrafficTotals,
    /// When this hub's live trace ends (unix ms), while one runs on this node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) trace_until: Option<i64>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ServerView {
    pub(crate) server_id: String,
    /// The service-protocol connections this app server holds to the hub on this node.
    pub(crate) connections: usize,
    /// Clients pinned to them.
    pub(crate) clients: usize,
}

/// What the page asks the connection list to show.
#[derive(Serialize, Deserialize, Default, Clone, Debug)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct Filter {
    /// Only this hub (empty: all).
    pub(crate) hub: String,
    /// Part of the connection id, user id, address or user agent (case-insensitive).
    pub(crate) search: String,
    /// Only this transport / protocol (empty: any).
    pub(crate) transport: String,
    pub(crate) protocol: String,
    /// At most this many rows (and [`MAX_ROWS`]).
    pub(crate) limit: usize,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ConnectionList {
    /// Connections that match, all of them (the rows are the first `limit`).
    pub(crate) matched: usize,
    pub(crate) rows: Vec<ConnectionRow>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ConnectionRow {
    pub(crate) hub: String,
    pub(crate) connection_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) user_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) transport: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) protocol: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) address: Option<IpAddr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) user_agent: Option<String>,
    /// Unix ms.
    pub(crate) connected_since: i64,
    #[serde(with = "TrafficJson")]
    pub(crate) traffic: TrafficTotals,
    /// Outbound bytes queued, not yet written to the client.
    pub(crate) queued_bytes: usize,
    /// The node that holds it.
    pub(crate) node: String,
}

fn protocol_name(client: &ClientConnection) -> Option<&'static str> {
    client.connection.protocol().map(|p| match p {
        switchyard_core::Protocol::Json => "json",
        switchyard_core::Protocol::MessagePack => "messagepack",
        _ => "other",
    })
}

impl Dashboard {
    /// The snapshot the page gets: this node's, and in a cluster every node's, summed.
    pub(crate) async fn snapshot(&self) -> Snapshot {
        let mut snapshot = self.local_snapshot(false);
        let request = serde_json::to_string(&Request::Snapshot).expect("serialises");
        let mine = snapshot.node.id.clone();
        let others: Vec<Snapshot> = self
            .cluster
            .views(request)
            .await
            .iter()
            .filter_map(|json| serde_json::from_str::<Snapshot>(json).ok())
            .filter(|other| other.node.id != mine)
            .collect();
        if others.is_empty() {
            return snapshot;
        }
        // Group and user names come from every node, this one included.
        let mut hubs: BTreeMap<String, HubView> = BTreeMap::new();
        // Per hub: its groups' and users' names from every node, while each sent them.
        let mut names: BTreeMap<String, (Names, Names)> = BTreeMap::new();
        let local = self.local_snapshot(true);
        for other in std::iter::once(local).chain(others) {
            if other.node.id != mine {
                snapshot.nodes.push(other.node.clone());
            }
            for hub in other.hubs {
                let (groups, users) = names
                    .entry(hub.name.clone())
                    .or_insert_with(|| (Some(Vec::new()), Some(Vec::new())));
                unite(groups, hub.group_names.as_deref());
                unite(users, hub.user_names.as_deref());
                let into = hubs.entry(hub.name.clone()).or_default();
                into.merge(hub);
            }
        }
        for (name, hub) in hubs.iter_mut() {
            let (groups, users) = &names[name];
            match (groups, users) {
                (Some(groups), Some(users)) => {
                    hub.groups = distinct(groups);
                    hub.users = distinct(users);
                }
                _ => hub.approximate = true,
            }
        }
        snapshot.hubs = hubs.into_values().collect();
        snapshot
    }

    /// This node and every hub it knows, now; with `names`, the group and user names too
    /// (for another node's sum).
    pub(crate) fn local_snapshot(&self, names: bool) -> Snapshot {
        let cluster = &self.cluster;
        let mut hubs: BTreeMap<String, HubView> = BTreeMap::new();
        let traced: BTreeMap<String, i64> = self
            .shared
            .tracer
            .traced()
            .into_iter()
            .map(|(hub, until)| (hub.as_str().to_string(), until))
            .collect();
        for hub in cluster.router().hubs() {
            let view = hubs.entry(hub.name().as_str().to_string()).or_default();
            view.groups = hub.group_count();
            view.users = hub.user_count();
            view.traffic = hub.traffic().snapshot();
            if names {
                view.group_names = hub
                    .group_names(NAMES)
                    .map(|all| all.iter().map(|g| g.as_str().to_string()).collect());
                view.user_names = hub
                    .user_ids(NAMES)
                    .map(|all| all.iter().map(|u| u.as_str().to_string()).collect());
            }
        }
        let clients = self.clients.all();
        let mut connected = 0;
        for client in &clients {
            // Only connections with a transport and a handshake count as connected.
            if !client.handshake_done() {
                continue;
            }
            connected += 1;
            let view = hubs
                .entry(client.hub.name().as_str().to_string())
                .or_default();
            view.connections += 1;
            if let Some(transport) = client.transport() {
                *view
                    .transports
                    .entry(transport.name().to_string())
                    .or_default() += 1;
            }
            if let Some(protocol) = protocol_name(client) {
                *view.protocols.entry(protocol.to_string()).or_default() += 1;
            }
        }
        let servers = &self.app_servers.default_mode.servers;
        for connection in servers.all() {
            let view = hubs.entry(connection.hub.as_str().to_string()).or_default();
            view.add_server(ServerView {
                server_id: connection.server_id.to_string(),
                connections: 1,
                clients: connection.client_count(),
            });
        }
        for (name, view) in hubs.iter_mut() {
            view.name = name.clone();
            view.trace_until = traced.get(name).copied();
        }
        let process = crate::process::sample();
        let node = NodeView {
            id: cluster.node_id().to_string(),
            uptime_seconds: self.started.elapsed().as_secs(),
            cpu_percent: process.cpu_percent,
            memory_bytes: process.rss_bytes,
            client_connections: connected,
            server_connections: servers.count(),
            cluster_nodes: cluster.members().count().max(1),
        };
        Snapshot {
            time: unix_now_ms(),
            nodes: vec![node.clone()],
            node,
            hubs: hubs.into_values().collect(),
        }
    }

    /// The connections that match `filter` on every node, oldest first.
    pub(crate) async fn connections(&self, filter: &Filter) -> ConnectionList {
        let limit = row_limit(filter);
        let mut list = self.local_connections(filter);
        let request = serde_json::to_string(&Request::Connections {
            filter: filter.clone(),
        })
        .expect("serialises");
        let mine = self.cluster.node_id().to_string();
        for json in self.cluster.views(request).await {
            let Ok(other) = serde_json::from_str::<ConnectionList>(&json) else {
                continue;
            };
            if other.rows.first().is_some_and(|row| row.node == mine) {
                continue;
            }
            list.matched += other.matched;
            list.rows.extend(other.rows);
        }
        list.rows.sort_by_key(|row| row.connected_since);
        list.rows.truncate(limit);
        list
    }

    /// The connections of this node that match `filter`, oldest first.
    pub(crate) fn local_connections(&self, filter: &Filter) -> ConnectionList {
        let limit = row_limit(filter);
        let search = filter.search.to_lowercase();
        let node: NodeId = self.cluster.node_id().clone();
        let mut clients = self.clients.all();
        clients.retain(|client| {
            client.handshake_done()
                && (filter.hub.is_empty() || client.hub.name().as_str() == filter.hub)
                && (filter.transport.is_empty()
                    || client.transport().map(|t| t.name()) == Some(filter.transport.as_str()))
                && (filter.protocol.is_empty()
                    || protocol_name(client) == Some(filter.protocol.as_str()))
                && (search.is_empty() || matches_search(client, &search))
        });
        clients.sort_by_key(|client| client.created_ms());
        let matched = clients.len();
        let rows = clients
            .iter()
            .take(limit)
            .map(|client| {
                let peer = client.peer();
                ConnectionRow {
                    hub: client.hub.name().as_str().to_string(),
                    connection_id: client.connection.id().to_string(),
                    user_id: client.connection.user().map(|u| u.to_string()),
                    transport: client.transport().map(|t| t.name().to_string()),
                    protocol: protocol_name(client).map(str::to_string),
                    address: peer.and_then(|p| p.address),
                    user_agent: peer.and_then(|p| p.user_agent.as_deref().map(str::to_string)),
                    connected_since: client.created_unix_ms(&self.clients),
                    traffic: client.connection.traffic().snapshot(),
                    queued_bytes: client.connection.queued_bytes(),
                    node: node.to_string(),
                }
            })
            .collect();
        ConnectionList { matched, rows }
    }
}

/// Answers the dashboards of other nodes; held weakly by the executor (the dashboard holds
/// the executor).
pub(crate) struct RemoteViews(pub(crate) std::sync::Weak<Dashboard>);

impl crate::cluster::Views for RemoteViews {
    fn view(&self, request: &str) -> String {
        let Some(dashboard) = self.0.upgrade() else {
            return "null".into();
        };
        let answer = match serde_json::from_str::<Request>(request) {
            Ok(Request::Snapshot) => serde_json::to_string(&dashboard.local_snapshot(true)),
            Ok(Request::Connections { filter }) => {
                serde_json::to_string(&dashboard.local_connections(&filter))
            }
            Ok(Request::Trace { hub, seconds, to }) => {
                serde_json::to_string(&dashboard.trace_for(&hub, seconds, to))
            }
            Ok(Request::StopTrace { hub }) => {
                serde_json::to_string(&dashboard.stop_trace_here(&hub))
            }
            Err(_) => return "null".into(),
        };
        answer.expect("serialises")
    }
}

impl HubView {
    fn add_server(&mut self, server: ServerView) {
        match self
            .servers
            .iter_mut()
            .find(|s| s.server_id == server.server_id)
        {
            Some(known) => {
                known.connections += server.connections;
                known.clients += server.clients;
            }
            None => {
                self.servers.push(server);
                self.servers.sort_by(|a, b| a.server_id.cmp(&b.server_id));
            }
        }
    }

    /// Adds another node's view of the same hub (counts summed).
    fn merge(&mut self, other: HubView) {
        self.name = other.name;
        self.connections += other.connections;
        for (transport, count) in other.transports {
            *self.transports.entry(transport).or_default() += count;
        }
        for (protocol, count) in other.protocols {
            *self.protocols.entry(protocol).or_default() += count;
        }
        self.groups += other.groups;
        self.users += other.users;
        self.traffic += other.traffic;
        for server in other.servers {
            self.add_server(server);
        }
        self.trace_until = self.trace_until.max(other.trace_until);
    }
}

/// The union of the nodes' names, `None` once a node had too many to send.
type Names = Option<Vec<String>>;

fn row_limit(filter: &Filter) -> usize {
    match filter.limit {
        0 => 100,
        n => n.min(MAX_ROWS),
    }
}

/// Adds a node's names to the union; a node that sent none (too many) spoils it.
fn unite(union: &mut Names, names: Option<&[String]>) {
    match (union.as_mut(), names) {
        (Some(all), Some(names)) => all.extend_from_slice(names),
        _ => *union = None,
    }
}

fn distinct(names: &[String]) -> usize {
    names
        .iter()
        .collect::<std::collections::BTreeSet<_>>()
        .len()
}

fn matches_search(client: &ClientConnection, search: &str) -> bool {
    let contains = |text: &str| text.to_lowercase().contains(search);
    if contains(client.connection.id().as_str()) {
        return true;
    }
    if client
        .connection
        .user()
        .is_some_and(|u| contains(u.as_str()))
    {
        return true;
    }
    let Some(peer) = client.peer() else {
        return false;
    };
    peer.address.is_some_and(|a| contains(&a.to_string()))
        || peer.user_agent.as_deref().is_some_and(contains)
}
