//! The service's settings: one documented tree, every field with its default, unknown keys
//! rejected, validated once at start into a [`ValidConfig`] that also holds what validation
//! parsed (the upstream templates), so nothing parses a setting twice.
//!
//! # Layout
//! - here: [`Config`] and its sections, [`ValidConfig`], [`ConfigError`].
//! - `template`: `[[upstream.templates]]` entries parsed into name patterns and URL templates.

mod template;

pub(crate) use template::Templates;

use std::net::{IpAddr, SocketAddr};
use std::ops::Deref;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

/// Settings of one Switchyard node. The TOML file, `SWITCHYARD_*` variables and flags all fill
/// this same tree (see the table in docs/configuration.md).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default, rename_all = "snake_case")]
pub struct Config {
    /// Address to listen on. Default `127.0.0.1:8888`.
    pub listen: SocketAddr,
    /// Primary access key: signs and verifies tokens. Unset = development mode with the
    /// Azure Emulator's well-known key (loopback addresses only).
    pub access_key: Option<String>,
    /// Secondary access key, accepted for verification too (key rotation).
    pub secondary_access_key: Option<String>,
    /// URL clients and REST callers use to reach this node, printed in the connection string.
    /// Tokens must name it (or the listen address) as their audience. Default:
    /// `http://{listen}`; required when `listen` is an unspecified address (`0.0.0.0`, `[::]`).
    pub public_endpoint: Option<String>,
    /// Reverse proxies (IP addresses or CIDR ranges) whose `X-Forwarded-For` the service
    /// believes: a request from one of them is taken to come from the address it names. From
    /// anyone else, `X-Forwarded-*` headers are dropped. Default: none.
    pub trusted_proxies: Vec<String>,
    /// A second listener that serves only `/metrics` and health, for operators; with it set,
    /// `/metrics` is no longer served on `listen`. Default: unset (`/metrics` on `listen`).
    pub admin_listen: Option<SocketAddr>,
    /// How clients are served: `auto` (default), `default` or `serverless`. See [`ServiceMode`].
    pub mode: ServiceMode,
    pub limits: Limits,
    pub timeouts: Timeouts,
    /// Which browser origins may call the service (CORS). See [`Cors`].
    pub cors: Cors,
    /// Serverless upstream webhooks (only in the file: `[[upstream.templates]]`).
    pub upstream: Upstream,
    /// Several nodes sharing routing through Redis. See [`Cluster`].
    pub cluster: Cluster,
    /// Clients that drop their WebSocket come back to the same connection. See
    /// [`StatefulReconnect`].
    pub stateful_reconnect: StatefulReconnect,
    /// https and wss on `listen` itself. See [`Tls`].
    pub tls: Tls,
    /// How fast clients may connect and REST callers call, and how many negotiates and
    /// client handshakes may be in progress. See [`Throttling`].
    pub throttling: Throttling,
    /// What `/metrics` exports. See [`MetricsSettings`].
    pub metrics: MetricsSettings,
    /// The operator's view at `/dashboard` and its live trace. See [`Dashboard`].
    pub dashboard: Dashboard,
    /// What is logged and how. See [`Log`].
    pub log: Log,
}

/// `/metrics` settings.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default, rename_all = "snake_case")]
pub struct MetricsSettings {
    /// Hubs with their own `hub` label on the per-hub series (`switchyard_hub_*`); the first
    /// this many hubs seen keep theirs, later ones are summed under `hub="_other"`, so a
    /// deployment with many hub names cannot flood Prometheus. 0 puts every hub in `_other`.
    /// Default 100.
    pub max_hub_series: usize,
}

impl Default for MetricsSettings {
    fn default() -> Self {
        MetricsSettings {
            max_hub_series: 100,
        }
    }
}

/// The dashboard at `/dashboard`: a page embedded in the binary that gets live data over
/// SignalR from the service's own admin hub (`/dashboard/hub`), and the live trace. Only
/// operators get in: a token whose audience is `{endpoint}/dashboard`, signed with an access
/// key and carrying the claim `role=admin` (`switchyard token --admin`), or signed with
/// `key`. In development mode (no access key, loopback only) it is open.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default, rename_all = "snake_case")]
pub struct Dashboard {
    /// Serve the dashboard and the admin hub. Default true.
    pub enabled: bool,
    /// A key that signs dashboard tokens only (for operators who must not hold the access
    /// key); its tokens need no role claim. Default: unset.
    pub key: Option<String>,
    /// Live trace events carry the first `trace_preview_bytes` of each message's payload.
    /// Default false: payloads are the users' data.
    pub trace_payloads: bool,
    /// How much of a payload a trace event shows, when `trace_payloads` is on. Default 256.
    pub trace_preview_bytes: usize,
    /// Longest a live trace runs before it switches itself off; the page may ask for less.
    /// Default 10m, at most 24h.
    #[serde(with = "humantime_serde")]
    pub max_trace_duration: Duration,
}

impl Default for Dashboard {
    fn default() -> Self {
        Dashboard {
            enabled: true,
            key: None,
            trace_payloads: false,
            trace_preview_bytes: 256,
            max_trace_duration: Duration::from_secs(600),
        }
    }
}

impl Dashboard {
    fn validate(&self) -> Result<(), String> {
        if self.max_trace_duration < Duration::from_secs(1)
            || self.max_trace_duration > Duration::from_secs(86_400)
        {
            return Err(format!(
                "dashboard.max_trace_duration must be between 1s and 24h (got {:?})",
                self.max_trace_duration
            ));
        }
        if self.trace_preview_bytes > 64 * 1024 {
            return Err("dashboard.trace_preview_bytes must be at most 65536".into());
        }
        if self.key.as_ref().is_some_and(|key| key.len() < 32) {
            return Err("dashboard.key must be at least 32 characters".into());
        }
        Ok(())
    }
}

/// Logging (docs/operations.md, "Logs"). The filter is `SWITCHYARD_LOG` (default `info`).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default, rename_all = "snake_case")]
pub struct Log {
    /// `text` (default; colours only on a terminal) or `json` (one object a line).
    pub format: LogFormat,
    /// One info line per hub message, each way (`switchyard::messages`: hub, connection,
    /// direction, type, method, size; never the payload). Off by default: a broadcast to
    /// thousands of connections is thousands of lines.
    pub messages: bool,
}

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// Human-readable lines; ANSI colours only when the stream is a terminal.
    #[default]
    Text,
    /// One JSON object a line: `timestamp`, `level`, `target` and the event's fields.
    Json,
}

/// Rates (token buckets: `rate` per second on average, up to `burst` at once) and bounds on
/// work in progress. A rate of 0 is off; a burst of 0 is one second's worth (the rate).
/// Refusals: 429 (rates) or 503 (work in progress), both with `Retry-After`, counted in
/// `switchyard_throttled_total{kind}`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default, rename_all = "snake_case")]
pub struct Throttling {
    /// New client connections per second, node-wide: negotiates, and WebSocket connects that
    /// skip negotiation. Default 0 (off): the right figure depends on the machine, and after
    /// an outage every client comes back at once.
    pub connect_rate: u32,
    pub connect_burst: u32,
    /// The same per source address (after `trusted_proxies`; IPv6 per /64). Default 0 (off):
    /// NATs and corporate proxies put many users behind one address.
    pub connect_rate_per_address: u32,
    pub connect_burst_per_address: u32,
    /// REST requests per second per access key (primary, secondary); health and the OpenAPI
    /// document are exempt. Default 0 (off): a key is usually a whole application.
    pub rest_rate_per_key: u32,
    pub rest_burst_per_key: u32,
    /// Negotiate requests being answered at once (in a cluster, passing one on to another
    /// node takes a while); over it 503. 0 = unlimited. Default 1,000.
    pub max_negotiations_in_progress: usize,
    /// Client connections whose transport is open but whose SignalR handshake has not
    /// arrived yet; over it a transport connect gets 503. 0 = unlimited. Default 10,000.
    pub max_handshakes_in_progress: usize,
}

impl Default for Throttling {
    fn default() -> Self {
        Throttling {
            connect_rate: 0,
            connect_burst: 0,
            connect_rate_per_address: 0,
            connect_burst_per_address: 0,
            rest_rate_per_key: 0,
            rest_burst_per_key: 0,
            max_negotiations_in_progress: 1_000,
            max_handshakes_in_progress: 10_000,
        }
    }
}

/// TLS on the main listener (not `admin_listen`): PEM files, reloaded in place when they
/// change or on SIGHUP. Both files or neither; without them the listener speaks plain HTTP
/// (right behind a proxy that terminates TLS).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default, rename_all = "snake_case")]
pub struct Tls {
    /// The certificate chain, leaf first (PEM).
    pub cert: Option<PathBuf>,
    /// The leaf's private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: Option<PathBuf>,
    /// How often the files are checked for a change (modification time and size).
    /// Default 5s.
    #[serde(with = "humantime_serde")]
    pub reload_interval: Duration,
}

impl Default for Tls {
    fn default() -> Self {
        Tls {
            cert: None,
            key: None,
            reload_interval: Duration::from_secs(5),
        }
    }
}

impl Throttling {
    /// Largest rate or burst accepted: above it the bucket's arithmetic loses its meaning
    /// (a nanosecond per token) long before a node could take that many.
    const MAX_RATE: u32 = 1_000_000;

    fn validate(&self) -> Result<(), String> {
        for (rate_key, rate, burst_key, burst) in [
            (
                "connect_rate",
                self.connect_rate,
                "connect_burst",
                self.connect_burst,
            ),
            (
                "connect_rate_per_address",
                self.connect_rate_per_address,
                "connect_burst_per_address",
                self.connect_burst_per_address,
            ),
            (
                "rest_rate_per_key",
                self.rest_rate_per_key,
                "rest_burst_per_key",
                self.rest_burst_per_key,
            ),
        ] {
            if rate > Self::MAX_RATE || burst > Self::MAX_RATE {
                return Err(format!(
                    "throttling.{rate_key} and throttling.{burst_key} must be at most {}",
                    Self::MAX_RATE
                ));
            }
            if rate == 0 && burst != 0 {
                return Err(format!(
                    "throttling.{burst_key} is set but throttling.{rate_key} is 0 (off); set \
                     the rate too, or leave the burst out"
                ));
            }
        }
        Ok(())
    }
}

impl Tls {
    /// Whether the listener speaks TLS.
    pub fn enabled(&self) -> bool {
        self.cert.is_some()
    }

    /// Both files read and checked (the key must be the certificate's), or none configured.
    fn load(&self) -> Result<Option<Arc<rustls::sign::CertifiedKey>>, ConfigError> {
        match (&self.cert, &self.key) {
            (None, None) => Ok(None),
            (Some(cert), Some(key)) => {
                if self.reload_interval < Duration::from_millis(100) {
                    return Err(ConfigError::Invalid(format!(
                        "tls.reload_interval must be at least 100ms (got {:?})",
                        self.reload_interval
                    )));
                }
                crate::tls::load_certified_key(cert, key)
                    .map(|key| Some(Arc::new(key)))
                    .map_err(ConfigError::Invalid)
            }
            _ => Err(ConfigError::Invalid(
                "tls.cert and tls.key (--tls-cert, --tls-key) go together: set both or neither"
                    .into(),
            )),
        }
    }
}

/// Stateful reconnect (ASP.NET Core 8+ clients' `withStatefulReconnect()`): a WebSocket client
/// whose socket drops reconnects to the same connection within `window`, and both sides
/// replay what the other had not acknowledged. Clients ask for it at negotiate; in Default
/// mode an app server must allow it too (`allowStatefulReconnects` in its handshake).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default, rename_all = "snake_case")]
pub struct StatefulReconnect {
    /// Offer it to clients that ask. Default true.
    pub enabled: bool,
    /// Bytes the service keeps per connection for replay; while the client has not
    /// acknowledged more than this, nothing more is written to it (ASP.NET's
    /// `StatefulReconnectBufferSize`). Default 100,000.
    pub buffer_size: usize,
    /// How long a dropped connection waits for its client to come back before it closes
    /// (ASP.NET's disconnect timeout). Default 15s, at most 5 minutes.
    #[serde(with = "humantime_serde")]
    pub window: Duration,
}

impl Default for StatefulReconnect {
    fn default() -> Self {
        StatefulReconnect {
            enabled: true,
            buffer_size: 100_000,
            window: Duration::from_secs(15),
        }
    }
}

impl StatefulReconnect {
    fn validate(&self) -> Result<(), String> {
        if self.enabled && self.buffer_size == 0 {
            return Err("stateful_reconnect.buffer_size must be at least 1".into());
        }
        if self.window < Duration::from_secs(1) || self.window > Duration::from_secs(300) {
            return Err(format!(
                "stateful_reconnect.window must be between 1s and 300s (got {})",
                humantime::format_duration(self.window)
            ));
        }
        Ok(())
    }
}

/// A cluster of equal nodes that share routing through a backplane. Without `backplane` the
/// node is alone (the in-memory backplane) and the other settings are ignored.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default, rename_all = "snake_case")]
pub struct Cluster {
    /// The backplane's URL; its scheme picks the backend, which the binary knows (the node
    /// names none). Redis: `redis://[user:password@]host:port[/db]`, or `rediss://` for TLS;
    /// a Redis Cluster (sharded pub/sub) as `redis-cluster://[user:password@]host:port,…`
    /// (seed nodes), or `rediss-cluster://` for TLS. `redis` is its earlier name, still read.
    /// Unset: one node.
    #[serde(alias = "redis")]
    pub backplane: Option<String>,
    /// This node's name in the cluster: letters, digits, `-`, `_`, `.`; at most 64.
    /// Default: generated at start.
    pub node_id: Option<String>,
    /// Prefix of every Redis channel name, so several clusters can share one Redis.
    pub prefix: String,
    /// How long a node waits for other nodes' answers (membership changes and checks of
    /// connections held elsewhere, group listings). A node that does not answer in time
    /// counts as "not there". Default 2s.
    #[serde(with = "humantime_serde")]
    pub ask_timeout: Duration,
    /// How long a node may stay silent (nodes say they are alive every second) before the
    /// others count it gone: they tell app servers it is `offline` and stop asking app servers
    /// to connect to it. Default 5s.
    #[serde(with = "humantime_serde")]
    pub node_timeout: Duration,
    /// Where the other nodes reach this node over HTTP (`http://host:port`), to pass on
    /// transport requests that a load balancer sent to the wrong node. Default: the bound
    /// address, or, when bound to all interfaces, the address this host uses to reach Redis.
    pub internal_url: Option<String>,
}

impl Default for Cluster {
    fn default() -> Self {
        Cluster {
            backplane: None,
            node_id: None,
            prefix: "sy".into(),
            ask_timeout: Duration::from_secs(2),
            node_timeout: Duration::from_secs(5),
            internal_url: None,
        }
    }
}

impl Cluster {
    fn validate(&self) -> Result<(), String> {
        let name_ok = |name: &str| {
            !name.is_empty()
                && name.len() <= 64
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        };
        if let Some(id) = &self.node_id {
            if !name_ok(id) {
                return Err(format!(
                    "cluster.node_id {id:?} must be 1 to 64 letters, digits, '-', '_' or '.'"
                ));
            }
        }
        if !name_ok(&self.prefix) {
            return Err(format!(
                "cluster.prefix {:?} must be 1 to 64 letters, digits, '-', '_' or '.'",
                self.prefix
            ));
        }
        if self.ask_timeout < Duration::from_millis(10)
            || self.ask_timeout > Duration::from_secs(60)
        {
            return Err(format!(
                "cluster.ask_timeout must be between 10ms and 60s (got {})",
                humantime::format_duration(self.ask_timeout)
            ));
        }
        if self.node_timeout < Duration::from_secs(2)
            || self.node_timeout > Duration::from_secs(300)
        {
            return Err(format!(
                "cluster.node_timeout must be between 2s and 300s (got {})",
                humantime::format_duration(self.node_timeout)
            ));
        }
        if let Some(url) = &self.internal_url {
            let parsed = url::Url::parse(url).ok();
            let plain = parsed.as_ref().is_some_and(|u| {
                u.scheme() == "http"
                    && u.host_str().is_some()
                    && u.path() == "/"
                    && u.query().is_none()
                    && u.username().is_empty()
            });
            if !plain {
                return Err(format!(
                    "cluster.internal_url {url:?} must be http://host[:port] with no path"
                ));
            }
        }
        if let Some(url) = &self.backplane {
            // Only the shape: which schemes exist is the binary's to say. The URL itself is
            // not echoed, as it may carry a password.
            let scheme_ok = url.split_once("://").is_some_and(|(scheme, rest)| {
                scheme
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_alphabetic())
                    && scheme
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
                    && !rest.is_empty()
            });
            if !scheme_ok {
                return Err(
                    "cluster.backplane must be a URL whose scheme names the backplane, \
                     e.g. redis://host:6379"
                        .to_string(),
                );
            }
        }
        Ok(())
    }
}

/// Whether client traffic goes to app servers (Azure's Default mode) or stays in the service
/// (Serverless mode: REST and upstream webhooks).
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ServiceMode {
    /// Per hub: a hub that has (or had, since the service started) an app server connected is
    /// served in Default mode, any other hub serverless. One service then carries both kinds
    /// of application without configuration; clients of a Default-mode hub whose app servers
    /// are all gone get Default mode's "app servers are not connected" error.
    #[default]
    Auto,
    /// Every client is carried to an app server; with none connected the handshake fails.
    Default,
    /// Clients are never carried to app servers; app servers may only connect with Weak
    /// (send-only) connections, as the Management SDK's persistent mode does.
    Serverless,
}

impl std::str::FromStr for ServiceMode {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.to_ascii_lowercase().as_str() {
            "auto" => Ok(ServiceMode::Auto),
            "default" => Ok(ServiceMode::Default),
            "serverless" => Ok(ServiceMode::Serverless),
            _ => Err(format!(
                "'{text}' is not a service mode (expected auto, default or serverless)"
            )),
        }
    }
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default, rename_all = "snake_case")]
pub struct Limits {
    /// Largest hub message a client may send on any transport, in bytes. Default 1 MiB.
    pub max_client_message_size: usize,
    /// Largest SSE/long-polling send body and REST request body, in bytes. Default 1 MiB.
    pub max_request_body_size: usize,
    /// Outbound bytes queued for one client before it is closed as a slow consumer. Default 1 MiB.
    pub max_pending_bytes_per_connection: usize,
    /// Concurrent client connections this node accepts; 0 = unlimited. Over it: HTTP 429.
    pub max_client_connections: usize,
    /// Largest service-protocol message an app server may send, in bytes. Default 16 MiB
    /// (Azure's recommended maximum).
    pub max_server_message_size: usize,
    /// Outbound bytes queued for one app-server connection before it is closed as a slow
    /// consumer (its clients are then closed or migrated). Default 64 MiB.
    pub max_pending_bytes_per_server_connection: usize,
    /// Client connections negotiated but not yet connected, node-wide; 0 = unlimited. Over it
    /// negotiate answers 429. Default 10,000.
    pub max_pending_negotiations: usize,
    /// Negotiated-but-unconnected connections of one user id (or, for anonymous tokens, of
    /// one source address), so one peer cannot take the whole node-wide allowance; 0 =
    /// unlimited. Over it negotiate answers 429. Default 1,000.
    pub max_pending_negotiations_per_user: usize,
    /// Open HTTP sockets (clients, REST callers, app servers) this node accepts; 0 = automatic
    /// (the process's open-files limit minus 64). Default 0.
    pub max_http_connections: usize,
    /// Of `max_http_connections`, the last this many sockets serve only health, metrics and
    /// app servers (`/server`): a flood of clients cannot lock operators and app servers out.
    /// Default 64.
    pub reserved_http_connections: usize,
    /// Open sockets from one source address; 0 = unlimited. Default 0.
    pub max_connections_per_address: usize,
    /// Longest lifetime (`exp` − `iat`, or `exp` − now without `iat`) a token may have; 0 =
    /// no cap. Default 0.
    #[serde(with = "humantime_serde")]
    pub max_token_lifetime: Duration,
    /// App-server connections this node holds, every hub together; 0 = unlimited. Over it the
    /// connect answers 429 (the SDK retries). Default 10,000.
    pub max_server_connections: usize,
    /// App-server connections of one hub on this node; 0 = unlimited. Default 1,000.
    pub max_server_connections_per_hub: usize,
    /// Bytes of app servers' half-received messages held for their clients, node-wide (each
    /// client's share is also bounded by `max_server_message_size`); a client whose tail would
    /// pass it is closed. Default 256 MiB.
    pub max_relay_buffered_bytes: usize,
    /// Client invocations (client results) waiting for their answer, node-wide; over it the
    /// app server gets an error completion at once. Default 100,000.
    pub max_pending_invocations: usize,
    /// Groups one connection may be in; 0 = unlimited. Over it a join is refused. Default 1,000.
    pub max_groups_per_connection: usize,
    /// User-group memberships one user may have in a hub, with or without ttl; 0 =
    /// unlimited. Over it a join is refused. Default 1,000.
    pub max_groups_per_user: usize,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default, rename_all = "snake_case")]
pub struct Timeouts {
    /// Ping a client after this long without writing to it (not on long polling). Default 15s.
    #[serde(with = "humantime_serde")]
    pub keep_alive_interval: Duration,
    /// Close a client that pings but sent nothing for this long. Default 30s.
    #[serde(with = "humantime_serde")]
    pub client_timeout: Duration,
    /// Time a client has to complete the SignalR handshake (`asrs.s.cht` overrides). Default 15s.
    #[serde(with = "humantime_serde")]
    pub handshake_timeout: Duration,
    /// Time between negotiate and the first transport request; a connection not started by
    /// then is forgotten (Azure's limit is about 5 s). Default 5s.
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// How long a long poll waits for data before answering empty. Default 90s.
    #[serde(with = "humantime_serde")]
    pub long_poll_timeout: Duration,
    /// A long-polling client without a poll for this long is dropped (`asrs.s.ttl` overrides).
    /// Default 15s.
    #[serde(with = "humantime_serde")]
    pub long_poll_inactivity: Duration,
    /// Ping an app-server connection after this long without writing to it. The SDK gives up
    /// on a service that is silent for 30 s and only pings when pinged. Default 5s.
    #[serde(with = "humantime_serde")]
    pub server_keep_alive_interval: Duration,
    /// Close an app-server connection that sent nothing for this long. Default 30s.
    #[serde(with = "humantime_serde")]
    pub server_timeout: Duration,
    /// Time an app server has to send its handshake request (the SDK's own limit). Default 15s.
    #[serde(with = "humantime_serde")]
    pub server_handshake_timeout: Duration,
    /// Time a client has to send a request's headers, and the longest an idle keep-alive
    /// socket stays open between requests. Default 10s.
    #[serde(with = "humantime_serde")]
    pub request_header_timeout: Duration,
    /// Time a client has to send a request body (REST calls, SSE and long-polling sends).
    /// Default 30s.
    #[serde(with = "humantime_serde")]
    pub request_body_timeout: Duration,
}

/// Where serverless clients' events and invocations are POSTed (Azure's upstream settings).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default, rename_all = "snake_case")]
pub struct Upstream {
    /// Ordered; the first template matching an event's hub, category and event is used.
    /// Empty (the default): no upstream, and a serverless client that invokes is closed.
    pub templates: Vec<UpstreamTemplate>,
    /// Time one upstream request may take, waiting for a free slot included; past it an
    /// invocation is answered with an error completion. Default 30s: long enough for a cold
    /// Azure Functions host, short enough that a hung upstream is noticed (only the client
    /// whose invocation hangs waits; see `upstream` in the node crate).
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// Requests in flight to one upstream origin (scheme, host, port) at a time; more wait
    /// their turn. Default 64.
    pub max_concurrency: usize,
    /// Largest upstream response body read, in bytes. Default 16 MiB (the Emulator's limit).
    pub max_response_size: usize,
    /// PEM bundle of certificate authorities trusted for https upstreams in addition to the
    /// public roots (a private CA of on-premises back ends). Default: unset.
    pub ca_file: Option<PathBuf>,
}

/// One `[[upstream.templates]]` entry. A pattern is `*`, a name, or comma-separated names
/// (trimmed, matched case-insensitively).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub struct UpstreamTemplate {
    /// http(s) URL; `{hub}`, `{category}` and `{event}` are replaced, URI-escaped.
    pub url_template: String,
    #[serde(default = "any_pattern")]
    pub hub_pattern: String,
    #[serde(default = "any_pattern")]
    pub event_pattern: String,
    #[serde(default = "any_pattern")]
    pub category_pattern: String,
}

fn any_pattern() -> String {
    "*".to_string()
}

impl UpstreamTemplate {
    /// A template matching everything.
    pub fn new(url_template: impl Into<String>) -> Self {
        UpstreamTemplate {
            url_template: url_template.into(),
            hub_pattern: any_pattern(),
            event_pattern: any_pattern(),
            category_pattern: any_pattern(),
        }
    }
}

impl Default for Upstream {
    fn default() -> Self {
        Upstream {
            templates: Vec::new(),
            timeout: Duration::from_secs(30),
            max_concurrency: 64,
            max_response_size: 16 * 1024 * 1024,
            ca_file: None,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: "127.0.0.1:8888".parse().expect("valid default address"),
            access_key: None,
            secondary_access_key: None,
            public_endpoint: None,
            trusted_proxies: Vec::new(),
            admin_listen: None,
            mode: ServiceMode::Auto,
            limits: Limits::default(),
            timeouts: Timeouts::default(),
            cors: Cors::default(),
            upstream: Upstream::default(),
            cluster: Cluster::default(),
            stateful_reconnect: StatefulReconnect::default(),
            throttling: Throttling::default(),
            dashboard: Dashboard::default(),
            tls: Tls::default(),
            metrics: MetricsSettings::default(),
            log: Log::default(),
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_client_message_size: 1024 * 1024,
            max_request_body_size: 1024 * 1024,
            max_pending_bytes_per_connection: 1024 * 1024,
            max_client_connections: 0,
            max_server_message_size: 16 * 1024 * 1024,
            max_pending_bytes_per_server_connection: 64 * 1024 * 1024,
            max_pending_negotiations: 10_000,
            max_pending_negotiations_per_user: 1_000,
            max_http_connections: 0,
            reserved_http_connections: 64,
            max_connections_per_address: 0,
            max_token_lifetime: Duration::ZERO,
            max_server_connections: 10_000,
            max_server_connections_per_hub: 1_000,
            max_relay_buffered_bytes: 256 * 1024 * 1024,
            max_pending_invocations: 100_000,
            max_groups_per_connection: 1_000,
            max_groups_per_user: 1_000,
        }
    }
}

/// Cross-origin access for browser clients (the middleware is in `cors.rs`).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default, rename_all = "snake_case")]
pub struct Cors {
    /// Origins (`scheme://host[:port]`) whose pages may call the service; `"*"` = any origin,
    /// `"null"` = pages without an origin (file:, sandboxed frames); empty = none. An allowed
    /// origin is echoed in `Access-Control-Allow-Origin` with `Access-Control-Allow-Credentials:
    /// true`, never `*`. Default `["*"]`, like Azure's default and the Emulator.
    pub allowed_origins: Option<Vec<String>>,
    /// How long browsers may cache a preflight answer (`Access-Control-Max-Age`). Default 10m.
    #[serde(with = "humantime_serde")]
    pub max_age: Duration,
}

impl Default for Cors {
    fn default() -> Self {
        Cors {
            allowed_origins: None,
            max_age: Duration::from_secs(600),
        }
    }
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            keep_alive_interval: Duration::from_secs(15),
            client_timeout: Duration::from_secs(30),
            handshake_timeout: Duration::from_secs(15),
            connect_timeout: Duration::from_secs(5),
            long_poll_timeout: Duration::from_secs(90),
            long_poll_inactivity: Duration::from_secs(15),
            server_keep_alive_interval: Duration::from_secs(5),
            server_timeout: Duration::from_secs(30),
            server_handshake_timeout: Duration::from_secs(15),
            request_header_timeout: Duration::from_secs(10),
            request_body_timeout: Duration::from_secs(30),
        }
    }
}

/// A setting that cannot work, found at start.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{0}")]
    Invalid(String),
}

impl Config {
    /// Whether no key is configured: the Emulator's well-known key is used.
    pub fn development_mode(&self) -> bool {
        self.access_key.is_none()
    }

    /// Checks every setting and keeps what the checks parsed.
    pub fn validate(self) -> Result<ValidConfig, ConfigError> {
        let templates = self.check()?;
        let trusted_proxies = parse_proxies(&self.trusted_proxies)?;
        let tls_key = self.tls.load()?;
        let upstream_roots = match &self.upstream.ca_file {
            Some(path) => crate::tls::load_roots(path)
                .map_err(|e| ConfigError::Invalid(format!("upstream.ca_file: {e}")))?,
            None => Vec::new(),
        };
        Ok(ValidConfig {
            config: self,
            templates,
            trusted_proxies,
            tls_key,
            upstream_roots,
        })
    }

    fn check(&self) -> Result<Templates, ConfigError> {
        self.cluster.validate().map_err(ConfigError::Invalid)?;
        self.stateful_reconnect
            .validate()
            .map_err(ConfigError::Invalid)?;
        self.throttling.validate().map_err(ConfigError::Invalid)?;
        self.dashboard.validate().map_err(ConfigError::Invalid)?;
        if self.development_mode() && !self.listen.ip().is_loopback() {
            return Err(ConfigError::Invalid(format!(
                "refusing to listen on non-loopback address {} in development mode (no access key \
                 configured, so the publicly known Emulator key would be accepted); set an access key \
                 with --access-key / SWITCHYARD_ACCESS_KEY / access_key, or listen on 127.0.0.1",
                self.listen
            )));
        }
        for (name, key) in [
            ("access_key", &self.access_key),
            ("secondary_access_key", &self.secondary_access_key),
        ] {
            if let Some(key) = key {
                if key == switchyard_auth::EMULATOR_ACCESS_KEY && !self.listen.ip().is_loopback() {
                    return Err(ConfigError::Invalid(format!(
                        "{name} is the Azure SignalR Emulator's publicly known key; refusing to \
                         listen on non-loopback address {} with it: set a secret key of your own",
                        self.listen
                    )));
                }
                if key.len() < 32 {
                    return Err(ConfigError::Invalid(format!(
                        "{name} must be at least 32 characters (HMAC-SHA256 keys shorter than that are guessable)"
                    )));
                }
            }
        }
        if self.secondary_access_key.is_some() && self.access_key.is_none() {
            return Err(ConfigError::Invalid(
                "secondary_access_key is set but access_key is not".into(),
            ));
        }
        if self.public_endpoint.is_none() && self.listen.ip().is_unspecified() {
            return Err(ConfigError::Invalid(format!(
                "public_endpoint is required when listening on {} (an unspecified address): set \
                 the URL clients reach this service at, e.g. --public-endpoint \
                 https://signalr.example.com; tokens name it as their audience",
                self.listen
            )));
        }
        if let Some(endpoint) = &self.public_endpoint {
            let url = url::Url::parse(endpoint).map_err(|e| {
                ConfigError::Invalid(format!("public_endpoint '{endpoint}' is not a URL: {e}"))
            })?;
            if !matches!(url.scheme(), "http" | "https") {
                return Err(ConfigError::Invalid(format!(
                    "public_endpoint '{endpoint}' must be http or https"
                )));
            }
        }
        let limits = &self.limits;
        for (name, value) in [
            (
                "limits.max_client_message_size",
                limits.max_client_message_size,
            ),
            ("limits.max_request_body_size", limits.max_request_body_size),
            (
                "limits.max_pending_bytes_per_connection",
                limits.max_pending_bytes_per_connection,
            ),
            (
                "limits.max_server_message_size",
                limits.max_server_message_size,
            ),
            (
                "limits.max_pending_bytes_per_server_connection",
                limits.max_pending_bytes_per_server_connection,
            ),
            (
                "limits.max_relay_buffered_bytes",
                limits.max_relay_buffered_bytes,
            ),
        ] {
            if value < 1024 {
                return Err(ConfigError::Invalid(format!(
                    "{name} must be at least 1024 bytes (got {value})"
                )));
            }
        }
        if limits.max_pending_invocations == 0 {
            return Err(ConfigError::Invalid(
                "limits.max_pending_invocations must be at least 1".into(),
            ));
        }
        self.cors.validate()?;
        let t = &self.timeouts;
        for (name, value) in [
            ("timeouts.keep_alive_interval", t.keep_alive_interval),
            ("timeouts.client_timeout", t.client_timeout),
            ("timeouts.handshake_timeout", t.handshake_timeout),
            ("timeouts.connect_timeout", t.connect_timeout),
            ("timeouts.long_poll_timeout", t.long_poll_timeout),
            ("timeouts.long_poll_inactivity", t.long_poll_inactivity),
            (
                "timeouts.server_keep_alive_interval",
                t.server_keep_alive_interval,
            ),
            ("timeouts.server_timeout", t.server_timeout),
            (
                "timeouts.server_handshake_timeout",
                t.server_handshake_timeout,
            ),
            ("timeouts.request_header_timeout", t.request_header_timeout),
            ("timeouts.request_body_timeout", t.request_body_timeout),
        ] {
            if value < Duration::from_millis(100) {
                return Err(ConfigError::Invalid(format!(
                    "{name} must be at least 100ms (got {value:?})"
                )));
            }
        }
        if t.keep_alive_interval >= t.client_timeout {
            return Err(ConfigError::Invalid(
                "timeouts.keep_alive_interval must be shorter than timeouts.client_timeout".into(),
            ));
        }
        if t.server_keep_alive_interval >= t.server_timeout {
            return Err(ConfigError::Invalid(
                "timeouts.server_keep_alive_interval must be shorter than timeouts.server_timeout"
                    .into(),
            ));
        }
        self.validate_upstream()
    }

    fn validate_upstream(&self) -> Result<Templates, ConfigError> {
        let upstream = &self.upstream;
        if upstream.timeout < Duration::from_millis(100) {
            return Err(ConfigError::Invalid(format!(
                "upstream.timeout must be at least 100ms (got {:?})",
                upstream.timeout
            )));
        }
        if upstream.max_concurrency == 0 {
            return Err(ConfigError::Invalid(
                "upstream.max_concurrency must be at least 1".into(),
            ));
        }
        if upstream.max_response_size < 1024 {
            return Err(ConfigError::Invalid(format!(
                "upstream.max_response_size must be at least 1024 bytes (got {})",
                upstream.max_response_size
            )));
        }
        Templates::parse(&upstream.templates).map_err(ConfigError::Invalid)
    }

    /// The URL clients and REST callers use, without trailing slash.
    pub fn endpoint(&self, bound: SocketAddr) -> String {
        match &self.public_endpoint {
            Some(endpoint) => endpoint.trim_end_matches('/').to_string(),
            None => format!("{}://{bound}", self.listen_scheme()),
        }
    }

    /// `https` when the listener speaks TLS, else `http`.
    pub fn listen_scheme(&self) -> &'static str {
        if self.tls.enabled() {
            "https"
        } else {
            "http"
        }
    }
}

/// A [`Config`] that passed [`Config::validate`], with what validation parsed. The node is
/// built from one, so a setting that cannot work never reaches it.
#[derive(Clone, Debug)]
pub struct ValidConfig {
    config: Config,
    templates: Templates,
    trusted_proxies: Vec<IpNet>,
    /// The listener's certificate as loaded at start (reloads replace it in the listener).
    tls_key: Option<Arc<rustls::sign::CertifiedKey>>,
    /// `upstream.ca_file`'s certificates.
    upstream_roots: Vec<rustls_pki_types::CertificateDer<'static>>,
}

impl ValidConfig {
    /// Settings that skip the range checks (the templates are still parsed): the fuzz
    /// targets use limits below the minimum, so that small inputs reach the size checks.
    #[cfg(feature = "fuzzing")]
    pub(crate) fn unchecked(config: Config) -> Result<ValidConfig, ConfigError> {
        let templates =
            Templates::parse(&config.upstream.templates).map_err(ConfigError::Invalid)?;
        let trusted_proxies = parse_proxies(&config.trusted_proxies)?;
        Ok(ValidConfig {
            config,
            templates,
            trusted_proxies,
            tls_key: None,
            upstream_roots: Vec::new(),
        })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The upstream templates in order (empty: no upstream).
    pub(crate) fn templates(&self) -> &Templates {
        &self.templates
    }

    /// The listener's certificate and key at start; `None` without TLS.
    pub(crate) fn tls_key(&self) -> Option<&Arc<rustls::sign::CertifiedKey>> {
        self.tls_key.as_ref()
    }

    /// Extra roots trusted for https upstreams (`upstream.ca_file`).
    pub(crate) fn upstream_roots(&self) -> &[rustls_pki_types::CertificateDer<'static>] {
        &self.upstream_roots
    }

    /// Whether a peer is one of `trusted_proxies`.
    pub fn is_trusted_proxy(&self, peer: IpAddr) -> bool {
        let peer = canonical_ip(peer);
        self.trusted_proxies.iter().any(|net| net.contains(&peer))
    }
}

impl Deref for ValidConfig {
    type Target = Config;

    fn deref(&self) -> &Config {
        &self.config
    }
}

/// `trusted_proxies` entries: an IP address or a CIDR range.
fn parse_proxies(entries: &[String]) -> Result<Vec<IpNet>, ConfigError> {
    entries
        .iter()
        .map(|entry| {
            let text = entry.trim();
            text.parse::<IpNet>()
                .or_else(|_| text.parse::<IpAddr>().map(IpNet::from))
                .map_err(|_| {
                    ConfigError::Invalid(format!(
                        "trusted_proxies: '{entry}' is not an IP address or a CIDR range like 10.0.0.0/8"
                    ))
                })
        })
        .collect()
}

/// IPv4 addresses as they are, whether a socket reports them plain or IPv4-mapped.
pub(crate) fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Durations in the file are human-readable: `"15s"`, `"500ms"`, `"2m"`.
mod humantime_serde {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&humantime::format_duration(*value).to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(deserializer)?;
        humantime::parse_duration(&text).map_err(|e| {
            serde::de::Error::custom(format!("'{text}' is not a duration like \"15s\": {e}"))
        })
    }
}

#[cfg(test)]
mod cluster_config_tests {
    use super::Cluster;

    fn with_backplane(url: &str) -> Result<(), String> {
        Cluster {
            backplane: Some(url.to_string()),
            ..Cluster::default()
        }
        .validate()
    }

    /// The node checks the URL's shape only; which schemes exist is the binary's to say
    /// (crates/switchyard/src/backplane.rs), so a new backend needs no change here.
    #[test]
    fn any_scheme_is_the_binarys_to_judge_but_the_shape_is_checked() {
        for url in [
            "redis://127.0.0.1:6379",
            "rediss://h:6380",
            "redis-cluster://127.0.0.1:7000,127.0.0.1:7001",
            "rediss-cluster://u:p@h1:7000,h2:7000",
            "nats://h:4222",
        ] {
            assert_eq!(with_backplane(url), Ok(()), "{url}");
        }
        for url in [
            "127.0.0.1:6379",
            "://h:1",
            "redis://",
            "1redis://h",
            "re dis://h",
        ] {
            let error = with_backplane(url).unwrap_err();
            assert!(error.contains("cluster.backplane"), "{url}: {error}");
        }
        let error = with_backplane("redis//:secret@h").unwrap_err();
        assert!(!error.contains("secret"), "{error}");
    }

    /// `redis` is the setting's earlier name, and files written for it still load.
    #[test]
    fn the_earlier_name_still_reads() {
        let cluster: Cluster = serde_json::from_str(r#"{"redis": "redis://h:6379"}"#).unwrap();
        assert_eq!(cluster.backplane.as_deref(), Some("redis://h:6379"));
    }
}
