//! The smaller sections of [`Config`](super::Config): metrics, dashboard, logs, throttling,
//! TLS, stateful reconnect, cluster, service mode and CORS, each with its own checks.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{humantime_serde, size_serde, ConfigError};

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
    #[serde(with = "size_serde")]
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
    pub(super) fn validate(&self) -> Result<(), String> {
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

    pub(super) fn validate(&self) -> Result<(), String> {
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
    pub(super) fn load(&self) -> Result<Option<Arc<rustls::sign::CertifiedKey>>, ConfigError> {
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
    #[serde(with = "size_serde")]
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
    pub(super) fn validate(&self) -> Result<(), String> {
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
    /// Where the other nodes reach this node (`http://host:port`, or `https://host:port` when
    /// the node serves TLS), to pass on transport requests that a load balancer sent to the
    /// wrong node. Default: the bound address (https when TLS is on), or, when bound to all
    /// interfaces, the address this host uses to reach Redis.
    pub internal_url: Option<String>,
    /// PEM bundle of the certificate authorities trusted for other nodes' https internal URLs.
    /// Default: the certificates of this node's own `tls.cert` file.
    pub ca_file: Option<PathBuf>,
    /// The secret every backplane message and every request passed between nodes is
    /// authenticated with (an HMAC-SHA256 key derived from it); the same on every node, at
    /// least 32 characters. Default: derived from `access_key`.
    pub secret: Option<String>,
    /// A second secret accepted (not used to seal), for rotating `secret` one node at a time.
    pub secondary_secret: Option<String>,
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
            ca_file: None,
            secret: None,
            secondary_secret: None,
        }
    }
}

impl Cluster {
    pub(super) fn validate(&self) -> Result<(), String> {
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
                matches!(u.scheme(), "http" | "https")
                    && u.host_str().is_some()
                    && u.path() == "/"
                    && u.query().is_none()
                    && u.username().is_empty()
            });
            if !plain {
                return Err(format!(
                    "cluster.internal_url {url:?} must be http(s)://host[:port] with no path"
                ));
            }
        }
        for (name, secret) in [
            ("cluster.secret", &self.secret),
            ("cluster.secondary_secret", &self.secondary_secret),
        ] {
            if secret.as_ref().is_some_and(|s| s.len() < 32) {
                return Err(format!(
                    "{name} must be at least 32 characters (a shorter secret is guessable)"
                ));
            }
        }
        if self.secondary_secret.is_some() && self.secret.is_none() {
            return Err("cluster.secondary_secret is set but cluster.secret is not".into());
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
