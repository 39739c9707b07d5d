//! Every metric the node exports, declared in one place. Labels are bounded sets (transport,
//! close reason, status class); never ids.

use std::sync::atomic::AtomicU64;
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
    /// not health, metrics or an app server).
    pub http_connections_refused: Family<ReasonLabel, Counter>,
    /// Questions to other nodes that not every node answered within `cluster.ask_timeout`.
    pub cluster_asks_incomplete: Counter,
    /// Client transport requests passed on to the node that holds the connection, by outcome
    /// (`ok`: the owner answered; `unreachable`: no answer from it or no such node).
    pub cluster_requests_forwarded: Family<ReasonLabel, Counter>,
    /// The backplane's traffic between processes, by kind (`published`, `publish_errors`,
    /// `received`, `decode_errors`, `subscribe_errors`); copied from the backplane each second.
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
        let mut registry = Registry::with_prefix("switchyard");
        let client_connections = Family::<TransportLabel, Gauge>::default();
        let connections_opened = Counter::<u64, AtomicU64>::default();
        let connections_closed = Family::<ReasonLabel, Counter>::default();
        let messages_received = Counter::<u64, AtomicU64>::default();
        let frames_delivered = Counter::<u64, AtomicU64>::default();
        let rest_requests = Family::<StatusLabel, Counter>::default();
        let server_connections = Gauge::default();
        let server_connections_closed = Family::<ReasonLabel, Counter>::default();
        let server_messages_received = Counter::<u64, AtomicU64>::default();
        let upstream_requests = Family::<UpstreamLabel, Counter>::default();
        let http_connections = Gauge::default();
        let http_connections_refused = Family::<ReasonLabel, Counter>::default();
        registry.register(
            "client_connections",
            "Client connections with an open transport",
            client_connections.clone(),
        );
        registry.register(
            "client_connections_opened",
            "Client connections created (negotiate or direct WebSocket)",
            connections_opened.clone(),
        );
        registry.register(
            "client_connections_closed",
            "Client connections ended, by close reason (client_closed, socket_error, client_timeout, slow_consumer, protocol_error, app_server_gone, ...)",
            connections_closed.clone(),
        );
        registry.register(
            "client_messages_received",
            "Hub messages received from clients",
            messages_received.clone(),
        );
        registry.register(
            "frames_delivered",
            "Frames queued to client connections",
            frames_delivered.clone(),
        );
        registry.register(
            "rest_requests",
            "REST API requests, by status class",
            rest_requests.clone(),
        );
        registry.register(
            "server_connections",
            "App-server connections (Default mode) after their handshake",
            server_connections.clone(),
        );
        registry.register(
            "server_connections_closed",
            "App-server connections ended, by reason (closed, protocol_error, server_timeout, socket_error, slow_consumer)",
            server_connections_closed.clone(),
        );
        registry.register(
            "server_messages_received",
            "Service-protocol messages received from app servers",
            server_messages_received.clone(),
        );
        registry.register(
            "upstream_requests",
            "Upstream webhook requests, by category and outcome",
            upstream_requests.clone(),
        );
        registry.register(
            "http_connections",
            "Open HTTP sockets",
            http_connections.clone(),
        );
        registry.register(
            "http_connections_refused",
            "Sockets or requests refused at the socket limits, by reason (full, per_address, reserved)",
            http_connections_refused.clone(),
        );
        let cluster_asks_incomplete = Counter::<u64, AtomicU64>::default();
        registry.register(
            "cluster_asks_incomplete",
            "Questions to other nodes that not every node answered within cluster.ask_timeout",
            cluster_asks_incomplete.clone(),
        );
        let cluster_requests_forwarded = Family::<ReasonLabel, Counter>::default();
        registry.register(
            "cluster_requests_forwarded",
            "Client transport requests passed on to the node holding the connection, by outcome (ok, unreachable)",
            cluster_requests_forwarded.clone(),
        );
        let backplane_messages = Family::<KindLabel, Counter>::default();
        registry.register(
            "backplane_messages",
            "Messages between processes through the backplane, by kind (published, publish_errors, received, decode_errors, subscribe_errors)",
            backplane_messages.clone(),
        );
        let server_connections_passed_on = Gauge::default();
        registry.register(
            "server_connections_passed_on",
            "App-server connections that reached this node through another node (also in server_connections)",
            server_connections_passed_on.clone(),
        );
        let cluster_nodes = Gauge::default();
        registry.register(
            "cluster_nodes",
            "Live nodes of the cluster as this node sees them, itself included",
            cluster_nodes.clone(),
        );
        let cluster_backplane_up = Gauge::default();
        registry.register(
            "cluster_backplane_up",
            "1 while this node's backplane answers, 0 while it does not",
            cluster_backplane_up.clone(),
        );
        let stateful_reconnects = Family::<KindLabel, Counter>::default();
        registry.register(
            "stateful_reconnects",
            "Client connections that dropped with stateful reconnect on, by outcome (resumed, window, buffer, closed)",
            stateful_reconnects.clone(),
        );
        let stateful_buffered_bytes = Gauge::default();
        let limit_refusals = Family::<LimitLabel, Counter>::default();
        let relay_buffered_bytes = Gauge::default();
        registry.register(
            "limit_refusals",
            "Requests, connections and joins refused because a configured limit was reached, by limit",
            limit_refusals.clone(),
        );
        registry.register(
            "relay_buffered_bytes",
            "Bytes of app servers' half-received messages held for their clients",
            relay_buffered_bytes.clone(),
        );
        registry.register(
            "stateful_buffered_bytes",
            "Bytes kept for replay to stateful-reconnect clients, not yet acknowledged",
            stateful_buffered_bytes.clone(),
        );
        let cluster_nodes_lost = Counter::<u64, AtomicU64>::default();
        registry.register(
            "cluster_nodes_lost",
            "Nodes found gone (silent past cluster.node_timeout, restarted, or shut down)",
            cluster_nodes_lost.clone(),
        );
        let cluster_server_pings = Family::<KindLabel, Counter>::default();
        registry.register(
            "cluster_server_pings",
            "Cluster pings sent to app servers, by kind (target, offline)",
            cluster_server_pings.clone(),
        );
        let throttled = Family::<KindLabel, Counter>::default();
        registry.register(
            "throttled",
            "Requests refused by the throttling settings, by kind (connect_node, connect_address, rest, negotiations, handshakes)",
            throttled.clone(),
        );
        let tls_reloads = Family::<ResultLabel, Counter>::default();
        registry.register(
            "tls_reloads",
            "Reloads of the TLS certificate files, by result (ok, error: the previous certificate stays in use)",
            tls_reloads.clone(),
        );
        let tls_handshake_failures = Family::<ReasonLabel, Counter>::default();
        registry.register(
            "tls_handshake_failures",
            "TLS handshakes that did not complete, by reason (timeout, error)",
            tls_handshake_failures.clone(),
        );
        let azure = Arc::new(AzureMetrics::default());
        registry.register_collector(azure.collector());
        let client_connections_refused = Family::<ReasonLabel, Counter>::default();
        registry.register(
            "client_connections_refused",
            "Client connects refused for their access token, by reason (token_invalid, token_expired, wrong_audience)",
            client_connections_refused.clone(),
        );
        Metrics {
            azure,
            registry,
            client_connections_refused,
            throttled,
            tls_reloads,
            tls_handshake_failures,
            backplane_messages,
            server_connections_passed_on,
            cluster_nodes,
            cluster_backplane_up,
            cluster_nodes_lost,
            cluster_server_pings,
            cluster_asks_incomplete,
            cluster_requests_forwarded,
            http_connections,
            http_connections_refused,
            client_connections,
            connections_opened,
            connections_closed,
            messages_received,
            frames_delivered,
            rest_requests,
            server_connections,
            server_connections_closed,
            server_messages_received,
            upstream_requests,
            stateful_reconnects,
            stateful_buffered_bytes,
            limit_refusals,
            relay_buffered_bytes,
        }
    }
}

impl Metrics {
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
