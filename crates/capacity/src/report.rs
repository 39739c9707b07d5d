//! The benchmark report written by `switchyard-bench --summary-json FILE`.
//!
//! One [`Report`] per run. Counts are messages (deliveries for fan-out scenarios); times are
//! milliseconds unless the name says otherwise. Fields are only ever added, so an older
//! reader keeps working on a newer file.

use serde::{Deserialize, Serialize};

/// Latency percentiles and Azure's latency buckets of one set of deliveries.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    pub mean_ms: f64,
    /// Azure's bench tool v1 buckets: `message:lt:100`, `message:lt:200`, … `message:lt:1000`,
    /// `message:ge:1000` → count, in that order.
    pub buckets_v1: Vec<(String, u64)>,
    /// Azure's v2 buckets: `message:lt:50`, `:lt:100`, `:lt:200`, `:lt:500`, `:lt:1000`,
    /// `:lt:2000`, `:lt:5000`, `message:ge:5000` → count, in that order.
    pub buckets_v2: Vec<(String, u64)>,
}

/// CPU and memory of one process over a window, from `/proc/PID/{stat,status}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessUsage {
    pub pid: u32,
    /// utime + stime spent in the window.
    pub cpu_seconds: f64,
    /// Of `cpu_seconds`, stime (the kernel's, for the process): on loopback mostly the
    /// sockets' cost, which a server cannot cut; the rest is its own code's. 0 in reports of
    /// releases that did not record it.
    #[serde(default)]
    pub system_seconds: f64,
    /// `cpu_seconds` / window length.
    pub cores: f64,
    /// VmRSS at the end of the window.
    pub rss_kb: u64,
    /// VmHWM (peak RSS) at the end of the window.
    pub hwm_kb: u64,
}

/// Totals of one step (a fixed number of sending connections for a fixed time) or of the
/// whole run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Counts {
    /// Messages (or operations, or connection attempts) sent.
    pub sent: u64,
    /// Deliveries expected from what was sent (sent × recipients).
    pub expected: u64,
    /// Distinct deliveries that arrived.
    pub received: u64,
    /// `expected − received` once the drain is over.
    pub lost: u64,
    /// Deliveries that arrived more than once (each extra copy counts).
    pub duplicated: u64,
    /// Deliveries that arrived after a later message of the same sender.
    pub reordered: u64,
    /// Connections that failed to connect or dropped.
    pub connections_failed: u64,
    /// Wire bytes of the messages sent / received (hub-protocol frames).
    pub sent_bytes: u64,
    pub received_bytes: u64,
}

/// One step of a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Step {
    /// 1-based.
    pub index: usize,
    /// Connections that send in this step (REST callers for REST scenarios).
    pub senders: u64,
    /// Connections open during the step.
    pub connections: u64,
    pub seconds: f64,
    #[serde(flatten)]
    pub counts: Counts,
    #[serde(flatten)]
    pub latency: Latency,
    /// Messages sent per second (into the service).
    pub inbound_per_s: f64,
    /// Deliveries received per second (out of the service).
    pub outbound_per_s: f64,
    /// Azure's rule: ≤ 1 % of deliveries ≥ 1 s (lost ones count as ≥ 1 s) and ≤ 1 % of
    /// connections failed.
    pub passed: bool,
    pub service: Option<ProcessUsage>,
    pub app_server: Option<ProcessUsage>,
    /// Service CPU microseconds per delivered message.
    pub service_cpu_us_per_delivery: Option<f64>,
    /// The Redis of a cluster run during this step (`--nodes`, `--redis-url`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redis: Option<RedisUsage>,
    /// The load generator during this step (its worker processes, summed): on a machine
    /// it shares with the service, what the measurement itself costs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generator: Option<ProcessUsage>,
}

/// What the Redis of a cluster did over a window: its process (when it runs on this machine)
/// and its own counters (`INFO stats`, `INFO commandstats`), and the same per message sent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RedisUsage {
    pub seconds: f64,
    /// The redis-server process, from `/proc` (when it runs on this machine).
    pub process: Option<ProcessUsage>,
    /// CPU seconds Redis reports itself (`INFO cpu`: `used_cpu_user` + `used_cpu_sys`).
    pub cpu_seconds: f64,
    /// `total_net_input_bytes` / `total_net_output_bytes` grown in the window.
    pub net_input_bytes: u64,
    pub net_output_bytes: u64,
    /// `total_commands_processed` grown in the window.
    pub commands: u64,
    /// `cmdstat_publish` + `cmdstat_spublish` calls in the window.
    pub publish_calls: u64,
    /// Messages sent into the service in the window (REST calls, client invocations).
    pub messages_sent: u64,
    /// Redis CPU microseconds (`cpu_seconds`) per message sent.
    pub cpu_us_per_message: Option<f64>,
    /// (input + output) bytes per message sent.
    pub bytes_per_message: Option<f64>,
    /// PUBLISH (and SPUBLISH) calls per message sent: 1 when a broadcast crosses Redis once.
    pub publish_per_message: Option<f64>,
}

/// One node of a cluster run, over the whole run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeUsage {
    /// `n1`, `n2`, … (the `--node-id` the tool gave it, or the endpoint's position).
    pub name: String,
    /// Its base URL.
    pub url: String,
    /// Client connections the tool opened on it (that connected).
    pub connections: u64,
    /// The process, from `/proc`, measured like the report's `service` (which is the sum).
    pub process: Option<ProcessUsage>,
    /// Its `switchyard_backplane_messages_total{kind="published"|"received"}` grown in the
    /// measured window (the node copies them from the backplane once a second).
    pub backplane_published: Option<u64>,
    pub backplane_received: Option<u64>,
}

/// A run against several nodes (`--nodes N`, `--client-endpoints`): client connections
/// spread round-robin over the nodes; the report's `service` figures are the nodes' sums.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Cluster {
    pub nodes: Vec<NodeUsage>,
    /// Which nodes REST calls entered: `n1` (the default) or `all`.
    pub rest_nodes: String,
    /// Redis over the measured window (the connect phase for connect-rate).
    pub redis: Option<RedisUsage>,
}

/// One second of a run, by intended send time.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Second {
    /// Seconds since the first send.
    pub second: u64,
    /// 1-based step the second belongs to.
    pub step: usize,
    pub sent: u64,
    pub received: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

/// What a bench run measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// `switchyard-bench <version>`.
    pub tool: String,
    /// `echo`, `broadcast`, `send-to-group`, `send-to-connection`, `rest-broadcast`,
    /// `rest-send-to-user`, `join-leave-group`, `connect-rate`, `idle`.
    pub scenario: String,
    /// `switchyard` or the peer's name (`go-signalr`).
    pub target: String,
    /// `default`, `serverless` or `direct` (a plain SignalR server such as the peer).
    pub mode: String,
    /// `websockets`, `serversentevents` or `longpolling`.
    pub transport: String,
    /// `json` or `messagepack`.
    pub protocol: String,
    pub connections: u64,
    /// Payload bytes per message.
    pub message_size: usize,
    /// Per sending connection.
    pub send_interval_ms: f64,
    /// Members per group (send-to-group), if any.
    pub group_size: Option<u64>,
    /// Number of groups (send-to-group), if any.
    pub groups: Option<u64>,
    /// Load-generator processes.
    pub workers: usize,
    /// UTC, RFC 3339.
    pub started_at: String,
    pub seconds: f64,
    #[serde(flatten)]
    pub counts: Counts,
    #[serde(flatten)]
    pub latency: Latency,
    pub steps: Vec<Step>,
    /// Per second of sending (deliveries attributed to the second they were meant to leave).
    pub timeline: Vec<Second>,
    /// The last step that passed Azure's rule (1-based), if any.
    pub last_passing_step: Option<usize>,
    /// Every step passed and nothing was lost, duplicated or reordered.
    pub passed: bool,
    /// Connections per second achieved (connect-rate) and connect latency are in the
    /// step/total latency fields; this is the achieved rate.
    pub connects_per_s: Option<f64>,
    /// Service RSS growth per held connection in bytes (idle).
    pub service_rss_per_connection_bytes: Option<f64>,
    /// Whole-run usage.
    pub service: Option<ProcessUsage>,
    pub app_server: Option<ProcessUsage>,
    /// The Azure unit whose published figure for this scenario the last passing step equals
    /// or exceeds (`Unit1` … `Unit100`; `Unit200 (Premium_P2)` and up), if any.
    pub azure_unit: Option<String>,
    /// Several nodes sharing a Redis: per node, and Redis's own cost. Absent for one node
    /// without Redis (the `service` fields then name that one process, as always).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<Cluster>,
}
