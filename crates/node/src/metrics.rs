//! Every metric the node exports, declared in one place. Labels are bounded sets (transport,
//! close reason, status class); never ids.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::azure_metrics::AzureMetrics;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TransportLabel {
    pub transport: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StatusLabel {
    /// `2xx`, `4xx`, `5xx`.
    pub status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpstreamLabel {
    /// `connections` or `messages`.
    pub category: &'static str,
    /// `ok`, `error_status`, `timeout`, `unreachable`, `too_large`, `invalid_response`,
    /// `rejected` (the connection's queue was full; nothing was sent).
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    /// `ok` or `error`.
    pub result: &'static str,
}

pub struct Metrics {
    registry: Registry,
    /// Client connections with a transport, by transport.
    pub client_connections: Family<TransportLabel, Gauge>,
    pub connections_opened: Counter,
    pub connections_closed: Family<ReasonLabel, Counter>,
    /// Hub messages received from clients (after the handshake).
    pub messages_received: Counter,
    /// Frames queued to client connections (one per recipient of each message).
    pub frames_delivered: Counter,
    pub rest_requests: Family<StatusLabel, Counter>,
    /// App-server (service protocol) connections after their handshake.
    pub server_connections: Gauge,
    /// App-server connections ended, by reason (`closed` when the app server closed it).
    pub server_connections_closed: Family<ReasonLabel, Counter>,
    /// Service-protocol messages received from app servers.
    pub server_messages_received: Counter,
    /// Upstream webhook requests, by category and outcome.
    pub upstream_requests: Family<UpstreamLabel, Counter>,
    /// Open HTTP sockets (before any upgrade: WebSockets count until they are upgraded).
    pub http_connections: Gauge,
    /// Sockets not served, by reason: `full` (limits.max_http_connections), `per_address`
    /// (limits.max_connections_per_address), `reserved` (a request in the reserve that is
    /// not health, metrics or an app server); `evicted`: a socket doing nothing closed at the
    /// cap to make room for a new one.
    pub http_connections_refused: Family<ReasonLabel, Counter>,
    /// Questions to other nodes that not every node answered within `cluster.ask_timeout`.
    pub cluster_asks_incomplete: Counter,
    /// Client transport requests passed on to the node that holds the connection, by outcome
    /// (`ok`: the owner answered; `unreachable`: no answer from it or no such node).
    pub cluster_requests_forwarded: Family<ReasonLabel, Counter>,
    /// Answers to "where is node X" that were not a node's origin (`http(s)://host:port`):
    /// refused, nothing was passed on to them.
    pub cluster_addresses_refused: Counter,
    /// The backplane's traffic between processes, by kind (`published`, `publish_errors`,
    /// `received`, `decode_errors`, `unauthenticated`, `subscribe_errors`); copied from the backplane each second.
    pub backplane_messages: Family<KindLabel, Counter>,
    /// App-server connections that reached this node through another node (their `target`
    /// named this node; the balancer sent them elsewhere). Counted in `server_connections` too.
    pub server_connections_passed_on: Gauge,
    /// Live nodes of the cluster as this node sees them, itself included.
    pub cluster_nodes: Gauge,
    /// 1 while this node's backplane answers, 0 while it does not (Redis unreachable).
    pub cluster_backplane_up: Gauge,
    /// Nodes found gone (silent past `cluster.node_timeout`, restarted, or shut down).
    pub cluster_nodes_lost: Counter,
    /// Cluster pings sent to app servers, by kind (`target`: connect to that node too;
    /// `offline`: that node is gone).
    pub cluster_server_pings: Family<KindLabel, Counter>,
    /// Stateful reconnects, by outcome: `resumed` (the client came back and carried on),
    /// `window` (it did not come back within `stateful_reconnect.window`), `buffer` (what it
    /// missed outgrew its queue while it was away), `closed` (closed meanwhile by the app
    /// server, REST or shutdown).
    pub stateful_reconnects: Family<KindLabel, Counter>,
    /// Bytes kept for replay to stateful-reconnect clients, not yet acknowledged by them.
    pub stateful_buffered_bytes: Gauge,
    /// Reloads of the TLS certificate files, by result (`ok`, `error`: the old one stays).
    pub tls_reloads: Family<ResultLabel, Counter>,
    /// TLS handshakes that did not complete, by reason (`timeout`: not done within
    /// `timeouts.request_header_timeout`; `error`: not TLS, or refused by either side).
    pub tls_handshake_failures: Family<ReasonLabel, Counter>,
    /// Requests refused by the `[throttling]` settings, by kind: `connect_node`,
    /// `connect_address`, `rest` (rates, 429), `negotiations`, `handshakes` (work in
    /// progress, 503).
    pub throttled: Family<KindLabel, Counter>,
    /// What a limit in `[limits]` refused, by limit: `server_connections`,
    /// `server_connections_per_hub`, `relay_buffer`, `pending_invocations`,
    /// `groups_per_connection`, `groups_per_user`.
    pub limit_refusals: Family<LimitLabel, Counter>,
    /// Bytes of app servers' half-received messages held for their clients.
    pub relay_buffered_bytes: Gauge,
    /// Per-hub connections and traffic, server load: read at scrape time (see
    /// [`crate::azure_metrics`]).
    pub azure: Arc<AzureMetrics>,
    /// Client connects (negotiate or transport) refused for their token, by reason:
    /// `token_invalid`, `token_expired`, `wrong_audience`. (Throttling refusals are in
    /// `throttled`.)
    pub client_connections_refused: Family<ReasonLabel, Counter>,
    /// Control messages from other nodes that did not decode, dropped.
    pub cluster_control_errors: Counter,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LimitLabel {
    pub limit: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: &'static str,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut metrics = Metrics {
            registry: Registry::with_prefix("switchyard"),
            azure: Arc::new(AzureMetrics::default()),
            client_connections: Default::default(),
            connections_opened: Default::default(),
            connections_closed: Default::default(),
            messages_received: Default::default(),
            frames_delivered: Default::default(),
            rest_requests: Default::default(),
            server_connections: Default::default(),
            server_connections_closed: Default::default(),
            server_messages_received: Default::default(),
            upstream_requests: Default::default(),
            http_connections: Default::default(),
            http_connections_refused: Default::default(),
            cluster_asks_incomplete: Default::default(),
            cluster_requests_forwarded: Default::default(),
            cluster_addresses_refused: Default::default(),
            backplane_messages: Default::default(),
            server_connections_passed_on: Default::default(),
            cluster_nodes: Default::default(),
            cluster_backplane_up: Default::default(),
            cluster_nodes_lost: Default::default(),
            cluster_server_pings: Default::default(),
            stateful_reconnects: Default::default(),
            stateful_buffered_bytes: Default::default(),
            tls_reloads: Default::default(),
            tls_handshake_failures: Default::default(),
            throttled: Default::default(),
            limit_refusals: Default::default(),
            relay_buffered_bytes: Default::default(),
            client_connections_refused: Default::default(),
            cluster_control_errors: Default::default(),
        };
        metrics.register_all();
        metrics
    }
}

impl Metrics {
    /// Registers every metric; the exposition lists them in this order. One line each.
    #[rustfmt::skip]
    fn register_all(&mut self) {
        let r = &mut self.registry;
        r.register("client_connections", "Client connections with an open transport", self.client_connections.clone());
        r.register("client_connections_opened", "Client connections created (negotiate or direct WebSocket)", self.connections_opened.clone());
        r.register("client_connections_closed", "Client connections ended, by close reason (client_closed, socket_error, client_timeout, slow_consumer, protocol_error, app_server_gone, ...)", self.connections_closed.clone());
        r.register("client_messages_received", "Hub messages received from clients", self.messages_received.clone());
        r.register("frames_delivered", "Frames queued to client connections", self.frames_delivered.clone());
        r.register("rest_requests", "REST API requests, by status class", self.rest_requests.clone());
        r.register("server_connections", "App-server connections (Default mode) after their handshake", self.server_connections.clone());
        r.register("server_connections_closed", "App-server connections ended, by reason (closed, protocol_error, server_timeout, write_stalled, socket_error, slow_consumer)", self.server_connections_closed.clone());
        r.register("server_messages_received", "Service-protocol messages received from app servers", self.server_messages_received.clone());
        r.register("upstream_requests", "Upstream webhook requests, by category and outcome", self.upstream_requests.clone());
        r.register("http_connections", "Open HTTP sockets", self.http_connections.clone());
        r.register("http_connections_refused", "Sockets or requests refused at the socket limits, by reason (full, per_address, reserved; evicted: an idle socket closed at the cap for a new one)", self.http_connections_refused.clone());
        r.register("cluster_asks_incomplete", "Questions to other nodes that not every node answered within cluster.ask_timeout", self.cluster_asks_incomplete.clone());
        r.register("cluster_requests_forwarded", "Client transport requests passed on to the node holding the connection, by outcome (ok, unreachable)", self.cluster_requests_forwarded.clone());
        r.register("cluster_addresses_refused", "Answers to where a node is that were not a node's origin (http(s)://host:port, no path): refused, nothing passed on to them", self.cluster_addresses_refused.clone());
        r.register("backplane_messages", "Messages between processes through the backplane, by kind (published, publish_errors, received, decode_errors, unauthenticated: not sealed with the cluster's secret and dropped, subscribe_errors)", self.backplane_messages.clone());
        r.register("server_connections_passed_on", "App-server connections that reached this node through another node (also in server_connections)", self.server_connections_passed_on.clone());
        r.register("cluster_nodes", "Live nodes of the cluster as this node sees them, itself included", self.cluster_nodes.clone());
        r.register("cluster_backplane_up", "1 while this node's backplane answers, 0 while it does not", self.cluster_backplane_up.clone());
        r.register("stateful_reconnects", "Client connections that dropped with stateful reconnect on, by outcome (resumed, window, buffer, closed)", self.stateful_reconnects.clone());
        r.register("limit_refusals", "Requests, connections and joins refused because a configured limit was reached, by limit", self.limit_refusals.clone());
        r.register("relay_buffered_bytes", "Bytes of app servers' half-received messages held for their clients", self.relay_buffered_bytes.clone());
        r.register("stateful_buffered_bytes", "Bytes kept for replay to stateful-reconnect clients, not yet acknowledged", self.stateful_buffered_bytes.clone());
        r.register("cluster_nodes_lost", "Nodes found gone (silent past cluster.node_timeout, restarted, or shut down)", self.cluster_nodes_lost.clone());
        r.register("cluster_server_pings", "Cluster pings sent to app servers, by kind (target, offline)", self.cluster_server_pings.clone());
        r.register("throttled", "Requests refused by the throttling settings, by kind (connect_node, connect_address, rest, negotiations, handshakes)", self.throttled.clone());
        r.register("tls_reloads", "Reloads of the TLS certificate files, by result (ok, error: the previous certificate stays in use)", self.tls_reloads.clone());
        r.register("tls_handshake_failures", "TLS handshakes that did not complete, by reason (timeout, error)", self.tls_handshake_failures.clone());
        r.register_collector(self.azure.collector());
        r.register("client_connections_refused", "Client connects refused for their access token, by reason (token_invalid, token_expired, wrong_audience)", self.client_connections_refused.clone());
        r.register("cluster_control_errors", "Control messages from other nodes that did not decode (a node of another version, or a bug), dropped", self.cluster_control_errors.clone());
    }

    /// Counts one refusal by the limit named `limit` (a `[limits]` setting, short name).
    pub fn refused(&self, limit: &'static str) {
        self.limit_refusals
            .get_or_create(&LimitLabel { limit })
            .inc();
    }

    /// Brings the backplane counters up to `traffic` (the backplane keeps the totals).
    pub fn record_backplane(&self, traffic: &switchyard_backplane::Traffic) {
        for (kind, total) in [
            ("published", traffic.published),
            ("publish_errors", traffic.publish_errors),
            ("received", traffic.received),
            ("decode_errors", traffic.decode_errors),
            ("unauthenticated", traffic.unauthenticated),
            ("subscribe_errors", traffic.subscribe_errors),
        ] {
            let counter = self.backplane_messages.get_or_create(&KindLabel { kind });
            counter.inc_by(total.saturating_sub(counter.get()));
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("writing to a String cannot fail");
        text
    }

    /// All REST requests so far, whatever their status.
    pub fn rest_request_count(&self) -> u64 {
        ["2xx", "3xx", "4xx", "5xx"]
            .into_iter()
            .map(|status| {
                self.rest_requests
                    .get_or_create(&StatusLabel { status })
                    .get()
            })
            .sum()
    }
}

pub fn status_class(status: u16) -> &'static str {
    match status {
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    }
}
