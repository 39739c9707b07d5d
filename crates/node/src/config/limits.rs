//! The larger sections of [`Config`](super::Config): limits, timeouts and upstream webhooks.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{humantime_serde, size_serde};

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default, rename_all = "snake_case")]
pub struct Limits {
    /// Largest hub message a client may send on any transport, in bytes. Default 1 MiB.
    #[serde(with = "size_serde")]
    pub max_client_message_size: usize,
    /// Largest SSE/long-polling send body and REST request body, in bytes. Default 1 MiB.
    #[serde(with = "size_serde")]
    pub max_request_body_size: usize,
    /// Outbound bytes queued for one client before it is closed as a slow consumer. Default 1 MiB.
    #[serde(with = "size_serde")]
    pub max_pending_bytes_per_connection: usize,
    /// Concurrent client connections this node accepts; 0 = unlimited. Over it: HTTP 429.
    pub max_client_connections: usize,
    /// Largest service-protocol message an app server may send, in bytes. Default 16 MiB
    /// (Azure's recommended maximum).
    #[serde(with = "size_serde")]
    pub max_server_message_size: usize,
    /// Outbound bytes queued for one app-server connection before it is closed as a slow
    /// consumer (its clients are then closed or migrated). Default 64 MiB.
    #[serde(with = "size_serde")]
    pub max_pending_bytes_per_server_connection: usize,
    /// Client connections negotiated but not yet connected, node-wide; 0 = unlimited. Over it
    /// negotiate answers 429. Default 10,000.
    pub max_pending_negotiations: usize,
    /// Negotiated-but-unconnected connections of one user id (or, for anonymous tokens, of
    /// one source address), so one peer cannot take the whole node-wide allowance; 0 =
    /// unlimited. Over it negotiate answers 429. Default 1,000.
    pub max_pending_negotiations_per_user: usize,
    /// The same per client address (after `trusted_proxies`), whatever user ids its tokens
    /// name, so rotating user ids does not pass the per-user cap; 0 = unlimited. Over it
    /// negotiate answers 429. Default 1,000.
    pub max_pending_negotiations_per_address: usize,
    /// Connected clients of one user id on this node (anonymous clients are not counted);
    /// 0 = unlimited. Over it negotiate and the transport's connect answer 429. Default 0.
    pub max_connections_per_user: usize,
    /// Open HTTP sockets (clients, REST callers, app servers) this node accepts; 0 = automatic
    /// (the process's open-files limit, its soft limit raised to the hard one at start, minus
    /// 64). At it a new socket takes the place of the oldest one doing nothing. Default 0.
    pub max_http_connections: usize,
    /// Of `max_http_connections`, the last this many sockets serve only health, metrics and
    /// app servers (`/server`): a flood of clients cannot lock operators and app servers out.
    /// Default 64.
    pub reserved_http_connections: usize,
    /// Open sockets from one source address (the socket's peer; `trusted_proxies` and
    /// `exempt_addresses` are exempt); 0 = unlimited. Default 10,000: far more than one
    /// office behind a NAT holds, far less than a node's automatic socket cap.
    pub max_connections_per_address: usize,
    /// Source addresses (IPs or CIDR ranges) the per-address caps do not apply to
    /// (`max_connections_per_address`, `max_pending_negotiations_per_address`). Default
    /// loopback (`127.0.0.0/8`, `::1`): benchmarks, tests and a proxy on the same machine
    /// connect from there.
    pub exempt_addresses: Vec<String>,
    /// Longest lifetime (`exp` − `iat`, or `exp` − now without `iat`) a token may have; 0 =
    /// no cap. Default 24 h: a leaked token (in a log, a browser's history) stops working
    /// within a day, while the SDKs' own tokens live 1 h.
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
    #[serde(with = "size_serde")]
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
    #[serde(with = "size_serde")]
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
            max_pending_negotiations_per_address: 1_000,
            max_connections_per_user: 0,
            max_http_connections: 0,
            reserved_http_connections: 64,
            max_connections_per_address: 10_000,
            exempt_addresses: vec!["127.0.0.0/8".into(), "::1".into()],
            max_token_lifetime: Duration::from_secs(24 * 3600),
            max_server_connections: 10_000,
            max_server_connections_per_hub: 1_000,
            max_relay_buffered_bytes: 256 * 1024 * 1024,
            max_pending_invocations: 100_000,
            max_groups_per_connection: 1_000,
            max_groups_per_user: 1_000,
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
