//! The service's settings: one documented tree, every field with its default, unknown keys
//! rejected, validated once at start into a [`ValidConfig`] that also holds what validation
//! parsed (the upstream templates), so nothing parses a setting twice.
//!
//! # Layout
//! - here: [`Config`], [`ValidConfig`], [`ConfigError`], the serde forms of durations and sizes.
//! - `sections`, `limits`: the sections of the tree, with their defaults and own checks.
//! - `check`: the checks across sections that need no file (TLS and CA files are read here).
//! - [`layers`]: the tree assembled from defaults, the file, variables and flags, with where
//!   each value came from; `render`: the effective settings printed with their sources.
//! - `file_lines`: the line of every value in the file (toml_edit's spans), for `file:line`.
//! - `template`: `[[upstream.templates]]` entries parsed into name patterns and URL templates.

mod check;
mod file_lines;
pub mod layers;
mod limits;
mod render;
mod sections;
mod template;

pub use layers::{
    assemble, assemble_unvalidated, env_name, known_keys, FlagSetting, Loaded, Source, Sources,
};
pub use render::render;
pub use template::hide_url;

pub use limits::{Limits, Timeouts, Upstream, UpstreamTemplate};
pub use sections::{
    Cluster, Cors, Dashboard, Log, LogFormat, MetricsSettings, ServiceMode, StatefulReconnect,
    Throttling, Tls,
};
pub(crate) use template::Templates;

use std::net::{IpAddr, SocketAddr};
use std::ops::Deref;
use std::sync::Arc;

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

    /// The keys of the cluster: `cluster.secret` (and `cluster.secondary_secret`) when set,
    /// else the access keys, so rotating those rotates these; in development mode the
    /// Emulator's public key, which authenticates nothing (such a node listens on loopback
    /// only). Senders seal with the first; receivers accept all.
    pub fn cluster_seal(&self) -> switchyard_backplane::envelope::Seal {
        use switchyard_backplane::envelope::Seal;
        let (primary, secondary) = match &self.cluster.secret {
            Some(secret) => (secret, &self.cluster.secondary_secret),
            None => match &self.access_key {
                Some(key) => (key, &self.secondary_access_key),
                None => return Seal::development(),
            },
        };
        let also: Vec<&[u8]> = secondary.iter().map(|s| s.as_bytes()).collect();
        Seal::from_secrets(primary.as_bytes(), &also)
    }

    /// Checks every setting and keeps what the checks parsed.
    pub fn validate(self) -> Result<ValidConfig, ConfigError> {
        let templates = self.check()?;
        let trusted_proxies = parse_proxies(&self.trusted_proxies)?;
        let exempt_addresses =
            parse_networks("limits.exempt_addresses", &self.limits.exempt_addresses)?;
        let tls_key = self.tls.load()?;
        let upstream_roots = match &self.upstream.ca_file {
            Some(path) => crate::tls::load_roots(path)
                .map_err(|e| ConfigError::Invalid(format!("upstream.ca_file: {e}")))?,
            None => Vec::new(),
        };
        let cluster_roots = match &self.cluster.ca_file {
            Some(path) => crate::tls::load_roots(path)
                .map_err(|e| ConfigError::Invalid(format!("cluster.ca_file: {e}")))?,
            None => Vec::new(),
        };
        Ok(ValidConfig {
            config: self,
            templates,
            trusted_proxies,
            exempt_addresses,
            tls_key,
            upstream_roots,
            cluster_roots,
        })
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
    /// `limits.exempt_addresses`, parsed.
    exempt_addresses: Vec<IpNet>,
    /// The listener's certificate as loaded at start (reloads replace it in the listener).
    tls_key: Option<Arc<rustls::sign::CertifiedKey>>,
    /// `upstream.ca_file`'s certificates.
    upstream_roots: Vec<rustls_pki_types::CertificateDer<'static>>,
    /// `cluster.ca_file`'s certificates (empty: other nodes are trusted by `tls.cert`).
    cluster_roots: Vec<rustls_pki_types::CertificateDer<'static>>,
}

impl ValidConfig {
    /// Settings that skip the range checks (the templates are still parsed): the fuzz
    /// targets use limits below the minimum, so that small inputs reach the size checks.
    #[cfg(feature = "fuzzing")]
    pub(crate) fn unchecked(config: Config) -> Result<ValidConfig, ConfigError> {
        let templates =
            Templates::parse(&config.upstream.templates).map_err(ConfigError::Invalid)?;
        let trusted_proxies = parse_proxies(&config.trusted_proxies)?;
        let exempt_addresses =
            parse_networks("limits.exempt_addresses", &config.limits.exempt_addresses)?;
        Ok(ValidConfig {
            config,
            templates,
            trusted_proxies,
            exempt_addresses,
            tls_key: None,
            upstream_roots: Vec::new(),
            cluster_roots: Vec::new(),
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

    /// The roots other nodes' https internal URLs are checked against (`cluster.ca_file`).
    pub(crate) fn cluster_roots(&self) -> &[rustls_pki_types::CertificateDer<'static>] {
        &self.cluster_roots
    }

    /// Whether a peer is one of `trusted_proxies`.
    pub fn is_trusted_proxy(&self, peer: IpAddr) -> bool {
        let peer = canonical_ip(peer);
        self.trusted_proxies.iter().any(|net| net.contains(&peer))
    }

    /// Whether the per-address caps pass over an address: a trusted proxy (many clients
    /// behind it) or one of `limits.exempt_addresses`.
    pub(crate) fn is_exempt_address(&self, address: IpAddr) -> bool {
        let address = canonical_ip(address);
        self.is_trusted_proxy(address)
            || self
                .exempt_addresses
                .iter()
                .any(|net| net.contains(&address))
    }
}

impl Deref for ValidConfig {
    type Target = Config;

    fn deref(&self) -> &Config {
        &self.config
    }
}

/// `trusted_proxies` entries: an IP address or a CIDR range.
pub(crate) fn parse_proxies(entries: &[String]) -> Result<Vec<IpNet>, ConfigError> {
    parse_networks("trusted_proxies", entries)
}

/// A list setting of IP addresses and CIDR ranges.
fn parse_networks(setting: &str, entries: &[String]) -> Result<Vec<IpNet>, ConfigError> {
    entries
        .iter()
        .map(|entry| {
            let text = entry.trim();
            text.parse::<IpNet>()
                .or_else(|_| text.parse::<IpAddr>().map(IpNet::from))
                .map_err(|_| {
                    ConfigError::Invalid(format!(
                        "{setting}: '{entry}' is not an IP address or a CIDR range like 10.0.0.0/8"
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

/// The settings that are byte sizes: a whole number of bytes, or text with a unit (`"64KiB"`,
/// `"1MB"`; binary units, see `switchyard_core::size`), in the file, variables and flags.
pub const SIZE_KEYS: &[&str] = &[
    "limits.max_client_message_size",
    "limits.max_request_body_size",
    "limits.max_pending_bytes_per_connection",
    "limits.max_server_message_size",
    "limits.max_pending_bytes_per_server_connection",
    "limits.max_relay_buffered_bytes",
    "upstream.max_response_size",
    "stateful_reconnect.buffer_size",
    "dashboard.trace_preview_bytes",
];

/// Sizes are written back as plain bytes, so a printed config loads as the same numbers.
mod size_serde {
    use std::fmt;

    use serde::de::{self, Visitor};
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &usize, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(*value as u64)
    }

    struct Size;

    impl Visitor<'_> for Size {
        type Value = usize;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a size in bytes, like 1048576, \"64KiB\" or \"1MB\"")
        }

        fn visit_u64<E: de::Error>(self, value: u64) -> Result<usize, E> {
            // TOML's integers are i64: a size above that could not be written back
            // (`config print`), and no setting means anything near it.
            i64::try_from(value)
                .ok()
                .and_then(|_| usize::try_from(value).ok())
                .ok_or_else(|| E::custom(format!("{value} bytes is too large")))
        }

        fn visit_i64<E: de::Error>(self, value: i64) -> Result<usize, E> {
            u64::try_from(value)
                .map_err(|_| E::custom(format!("a size cannot be negative (got {value})")))
                .and_then(|v| self.visit_u64(v))
        }

        fn visit_str<E: de::Error>(self, text: &str) -> Result<usize, E> {
            let bytes = switchyard_core::size::parse_size(text).ok_or_else(|| {
                E::custom(format!(
                    "'{text}' is not a size like 1048576, \"64KiB\" or \"1MB\" (K, M, G are 1024-based)"
                ))
            })?;
            self.visit_u64(bytes)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<usize, D::Error> {
        deserializer.deserialize_any(Size)
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
