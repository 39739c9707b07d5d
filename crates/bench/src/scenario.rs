//! The scenarios' flags and the plan every load-generator process follows ([`Scenario`] itself
//! is defined once, in `switchyard_capacity::scenario`, for the reports and capacity plans).

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use switchyard_capacity::scenario::Scenario;

/// Chat rooms: a chatty poster posts every this many send intervals (11 s at the default
/// 1 s), a casual one every [`CASUAL_INTERVALS`] (59 s).
pub const CHATTY_INTERVALS: f64 = 11.0;
pub const CASUAL_INTERVALS: f64 = 59.0;
/// Members per chat room unless --group-size says otherwise.
pub const DEFAULT_ROOM_SIZE: u64 = 100;

/// The hub of Default-mode runs (and of peer runs: a peer has no modes).
pub const DEFAULT_MODE_HUB: &str = "bench";
/// The hub of serverless runs, apart from [`DEFAULT_MODE_HUB`]: the service keeps a hub
/// that an app server has served in Default mode (`mode = auto`), where it refuses
/// serverless clients, so a REST run after an echo run on the same hub would fail.
pub const SERVERLESS_HUB: &str = "bench_serverless";

/// Where clients connect and how.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Endpoint {
    /// The service directly (`{base}client/?hub=`), with client tokens minted from the key
    /// (audience: that base). Connection `g` goes to `bases[g % bases.len()]`: one base for
    /// one node, one per node of a cluster.
    Service {
        bases: Vec<String>,
        access_key: String,
    },
    /// A hub URL that negotiates (and possibly redirects) by itself: an app server's
    /// `{app}/{hub}` or a plain SignalR server such as the peer. `?user=` names the user.
    Hub { url: String },
}

/// Where REST calls go.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RestTarget {
    /// `http://host:port/` (each ends with `/`); REST caller `c` calls `bases[c % len]`.
    pub bases: Vec<String>,
    /// Signs a token per call when set (Azure-style bearer with the REST URL as audience).
    pub access_key: Option<String>,
}

/// Everything one load-generator process needs: the same for every worker except
/// `worker`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Plan {
    pub scenario: Scenario,
    pub hub: String,
    pub endpoint: Endpoint,
    pub rest: Option<RestTarget>,
    pub transport: String,
    pub protocol: String,
    pub connections: u64,
    /// Senders (REST callers) in the last step.
    pub senders: u64,
    pub steps: u32,
    pub step_seconds: f64,
    pub warmup_seconds: f64,
    pub drain_seconds: f64,
    pub message_size: usize,
    pub interval_ms: f64,
    /// Members per group; connection g is in group g / group_size.
    pub group_size: Option<u64>,
    /// Number of groups; connection g is in group g % groups.
    pub groups: Option<u64>,
    pub connect_rate: f64,
    pub max_connecting: usize,
    pub source_addresses: Vec<IpAddr>,
    pub workers: u32,
    pub worker: u32,
    /// A soak with failures (--kill-node-every, --restart-redis-at): a client whose
    /// connection drops connects again to another live node and joins its room again, and
    /// the run counts per phase (see [`crate::soak`]).
    #[serde(default)]
    pub reconnect: bool,
    /// Clients use stateful reconnect (--stateful-reconnect).
    #[serde(default)]
    pub stateful_reconnect: bool,
    /// Share of connections dropped abruptly each second (--drop-share).
    #[serde(default)]
    pub drop_share: f64,
}

impl Plan {
    /// Senders active in 1-based `step` (Azure's step-up: an equal share more each step).
    pub fn senders_at(&self, step: u32) -> u64 {
        if self.steps <= 1 {
            return self.senders;
        }
        (self.senders * u64::from(step)).div_ceil(u64::from(self.steps))
    }

    /// The first step in which global sender `g` sends.
    pub fn first_step_of(&self, g: u64) -> Option<u32> {
        (1..=self.steps.max(1)).find(|&s| self.senders_at(s) > g)
    }

    /// Whether global connection (or REST caller) index `g` belongs to this worker.
    pub fn owns(&self, g: u64) -> bool {
        g % u64::from(self.workers.max(1)) == u64::from(self.worker)
    }

    /// How many groups there are, for group scenarios.
    pub fn group_count(&self) -> u64 {
        match (self.group_size, self.groups) {
            (Some(size), _) => self.connections.div_ceil(size.max(1)),
            (None, Some(groups)) => groups.max(1),
            (None, None) => 0,
        }
    }

    /// The group REST caller `c` sends to (rest-send-to-group): spread over every group.
    pub fn rest_group_of(&self, c: u64) -> Option<u64> {
        let count = self.group_count();
        (count > 0).then(|| c % count)
    }

    /// The REST base caller `c` calls. Calls that address one connection or user (caller
    /// c's target is connection c, on node c mod N) enter at the next base, so with
    /// `--rest-node all` every such call crosses from one node to another.
    pub fn rest_base_of<'a>(&self, rest: &'a RestTarget, c: u64) -> Option<&'a str> {
        let len = rest.bases.len() as u64;
        if len == 0 {
            return None;
        }
        let shift = u64::from(self.scenario.targets_one());
        Some(&rest.bases[((c + shift) % len) as usize])
    }

    /// The group of connection `g`, for group scenarios.
    pub fn group_of(&self, g: u64) -> Option<u64> {
        match (self.group_size, self.groups) {
            (Some(size), _) => Some(g / size.max(1)),
            (None, Some(groups)) => Some(g % groups.max(1)),
            (None, None) => None,
        }
    }

    /// How often connection (or REST caller) `g` sends, in ms: the plan's interval, or in a
    /// chat room that of its member's kind — the first tenth of each room's members (by
    /// position) are chatty, the next two tenths casual, and the rest lurkers (`None`).
    /// Positions in a room are consecutive connections, so posters are spread over the
    /// nodes and workers like everyone else.
    pub fn interval_of(&self, g: u64) -> Option<f64> {
        if !self.scenario.is_chat_room() {
            return Some(self.interval_ms);
        }
        let size = self.group_size.unwrap_or(DEFAULT_ROOM_SIZE).max(1);
        let position = g % size;
        // The last room may be smaller.
        let members = size.min(self.connections - g / size * size);
        if 10 * position < members {
            Some(self.interval_ms * CHATTY_INTERVALS)
        } else if 10 * position < 3 * members {
            Some(self.interval_ms * CASUAL_INTERVALS)
        } else {
            None
        }
    }

    /// Chat-room posters: how many connections post.
    pub fn posters(&self) -> u64 {
        (0..self.connections)
            .filter(|&g| self.interval_of(g).is_some())
            .count() as u64
    }

    /// A chat-room poster's phase in its interval, in [0, 1): fixed per connection (a hash of
    /// `g`), so that every worker and every run agree, and random enough that posts arrive
    /// smoothly rather than in bursts.
    pub fn phase_of(g: u64) -> f64 {
        // SplitMix64's finaliser.
        let mut z = g.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Length of sending, steps included (warm-up not).
    pub fn send_seconds(&self) -> f64 {
        self.step_seconds * f64::from(self.steps.max(1))
    }

    /// The user id of connection `g`.
    pub fn user_of(g: u64) -> String {
        format!("user{g}")
    }
}

/// Flags of a scenario run (`switchyard-bench SCENARIO …`).
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// `Endpoint=…;AccessKey=…;Version=1.0;` of the service under test.
    #[arg(long, env = "Azure__SignalR__ConnectionString")]
    pub connection_string: Option<String>,
    /// Start this `switchyard` binary (`serve --listen 127.0.0.1:0`) and test it, instead of
    /// naming a running service.
    #[arg(long, conflicts_with = "connection_string")]
    pub service_bin: Option<PathBuf>,
    /// PID of the service, for its CPU time and memory (found from the endpoint's port
    /// when it listens on this machine).
    #[arg(long)]
    pub service_pid: Option<u32>,
    /// Start a cluster of N nodes (with --service-bin): a redis-server (or --redis-url) and
    /// N `switchyard serve --redis … --node-id nI`. Client connections are spread
    /// round-robin over the nodes (straight to their node, with a token signed by the
    /// key); REST calls enter node 1 (see --rest-node). Default-mode scenarios start one
    /// app server that knows node 1 only (as an SDK given one node's connection string);
    /// the other nodes ask it to connect to them too, and the run waits until every node
    /// holds a connection from it.
    #[arg(long, requires = "service_bin")]
    pub nodes: Option<u32>,
    /// The Redis of the cluster (`redis://127.0.0.1:6379`): with --nodes, use it instead of
    /// starting a redis-server; with --client-endpoints, measure it (its CPU when it runs on
    /// this machine, and its `INFO` counters).
    #[arg(long)]
    pub redis_url: Option<String>,
    /// The nodes of a running cluster, by base URL (`http://127.0.0.1:8001,http://…`):
    /// client connection i negotiates at node i % N with a token for that node. The
    /// connection string's AccessKey signs tokens; REST calls go to the first (--rest-node).
    #[arg(
        long,
        value_delimiter = ',',
        requires = "connection_string",
        conflicts_with = "nodes"
    )]
    pub client_endpoints: Vec<String>,
    /// With several nodes, where REST calls enter: a node's number (1-based; default 1), or
    /// `all` (caller c calls node c % N).
    #[arg(long, default_value = "1")]
    pub rest_node: String,
    /// For Default-mode scenarios: an app server already running (`{url}/{hub}/negotiate`);
    /// by default the tool starts `switchyard-bench app-server` itself.
    #[arg(long)]
    pub app_url: Option<String>,
    /// PID of the app server given by --app-url, for its CPU time and memory.
    #[arg(long)]
    pub app_pid: Option<u32>,
    /// Server connections of the started app server.
    #[arg(long, default_value_t = 5)]
    pub server_connections: usize,
    /// Test a plain SignalR server (e.g. the Go peer) at this base URL instead of the
    /// service: clients negotiate at `{url}/{hub}`, REST goes to `{url}/api/hubs/…`.
    #[arg(long, conflicts_with_all = ["connection_string", "service_bin"])]
    pub peer_url: Option<String>,
    /// Start this peer binary (`--listen 127.0.0.1:0`; it prints `Peer listening on URL`).
    #[arg(long, conflicts_with_all = ["connection_string", "service_bin", "peer_url"])]
    pub peer_bin: Option<PathBuf>,
    /// Test the floor instead (`switchyard-bench floor`, started like a peer): the least
    /// server that moves the same frames over the same sockets, to divide the service's CPU
    /// by. WebSockets and JSON; echo, broadcast, rest-broadcast, idle, connect-rate.
    #[arg(long, conflicts_with_all = ["connection_string", "service_bin", "peer_url", "peer_bin"])]
    pub floor: bool,
    /// Name of the target in reports.
    #[arg(long)]
    pub target_name: Option<String>,
    /// PID of the peer given by --peer-url.
    #[arg(long)]
    pub peer_pid: Option<u32>,
    /// Hub name [default: `bench` for Default-mode scenarios and against a peer,
    /// `bench_serverless` for serverless ones: on a service with `mode = auto` a hub that
    /// an app server has served stays in Default mode and refuses serverless clients].
    #[arg(long)]
    pub hub: Option<String>,
    /// Client connections.
    #[arg(long, short = 'c', default_value_t = 1000)]
    pub connections: u64,
    /// Sending connections (REST callers) — the last step's count when stepping up.
    /// Default: all connections (echo, small groups, connection, join/leave, REST send to
    /// user), 20 for big groups (--groups), 10 for broadcasts; chat rooms fix their own.
    #[arg(long, short = 's')]
    pub senders: Option<u64>,
    /// Steps: senders rise in equal shares up to --senders; stops after the first step that
    /// fails Azure's rule (> 1 % of messages ≥ 1 s, or > 1 % of connections failed).
    #[arg(long, default_value_t = 1)]
    pub steps: u32,
    /// Run every step even after one fails Azure's rule (each step is still marked pass or
    /// FAIL, and the run does not pass): the whole curve past the knee.
    #[arg(long)]
    pub all_steps: bool,
    /// Length of each step (or of the whole run with one step), e.g. `30s`.
    #[arg(long, short = 'd', default_value = "30s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Sending before measuring starts (not counted).
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    pub warmup: Duration,
    /// How long to wait for late messages after the last send.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub drain: Duration,
    /// Payload size in bytes.
    #[arg(long, default_value_t = 2048)]
    pub message_size: usize,
    /// Time between two sends of one sender, e.g. `1s`, `100ms`.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub send_interval: Duration,
    /// websockets | serversentevents | longpolling.
    #[arg(long, short = 't', default_value = "websockets")]
    pub transport: String,
    /// json | messagepack.
    #[arg(long, short = 'p', default_value = "json")]
    pub protocol: String,
    /// send-to-group: members per group (Azure's small groups: 10); chat-room: members per
    /// room (default 100).
    #[arg(long, conflicts_with = "groups")]
    pub group_size: Option<u64>,
    /// send-to-group / join-leave-group: number of groups (Azure's big groups: 10).
    #[arg(long)]
    pub groups: Option<u64>,
    /// Connections opened per second (the measured rate for connect-rate).
    #[arg(long, default_value_t = 2000.0)]
    pub connect_rate: f64,
    /// Connection attempts in flight at once, per worker.
    #[arg(long, default_value_t = 512)]
    pub max_connecting: usize,
    /// Loopback source addresses, used in turn (e.g. `127.0.0.1,127.0.0.2`), to pass the
    /// ~28k ephemeral ports of one address.
    #[arg(long, value_delimiter = ',')]
    pub source_addresses: Vec<IpAddr>,
    /// Load-generator processes (a process may hold at most ~19,000 connections here).
    #[arg(long, short = 'w', default_value_t = 1)]
    pub workers: u32,
    /// Soak (chat-room, rest-chat-room; with --nodes 2 or more): SIGKILL a node this often
    /// (from the start of measuring), in turn nodes 2..N, and start it again after
    /// --node-down-for on the same port. Node 1 is never killed: the app server knows node 1
    /// only and reaches the others through it, and REST enters node 1. Clients of the killed
    /// node connect again to the live node holding the fewest of their process's clients
    /// and join their room again; the report counts each phase apart.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub kill_node_every: Option<Duration>,
    /// How long a killed node stays down.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub node_down_for: Duration,
    /// Soak: SIGKILL redis-server this long after measuring starts and start it again on the
    /// same port after --redis-down-for (once).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub restart_redis_at: Option<Duration>,
    /// How long Redis stays down.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub redis_down_for: Duration,
    /// Soak: sample every node's and Redis's memory (RSS) this often, printed as a series at
    /// the end (default 15 s in a soak).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub rss_every: Option<Duration>,
    /// Soak: also write the RSS series as CSV here.
    #[arg(long)]
    pub rss_csv: Option<PathBuf>,
    /// Soak: write the phases, reconnect times and memory series (JSON) here.
    #[arg(long)]
    pub soak_json: Option<PathBuf>,
    /// Write the run's report (JSON) here.
    #[arg(long)]
    pub summary_json: Option<PathBuf>,
    /// Write Azure-bench-compatible JSON-lines counters (one line per second) here.
    #[arg(long)]
    pub counters: Option<PathBuf>,
    /// Write a chart (SVG) of throughput and latency here.
    #[arg(long)]
    pub chart: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Keep the service's dashboard open during the run (an operator's admin-hub session:
    /// a snapshot each second, the hub's connection list every two), to measure its cost.
    #[arg(long)]
    pub dashboard: bool,
    /// With --dashboard: also run a live trace of the hub.
    #[arg(long, requires = "dashboard")]
    pub trace: bool,
    /// Stateful reconnect (WebSockets): clients ask for it (`withStatefulReconnect()`), and an
    /// app server the tool starts allows it. The run prints the reconnects it saw.
    #[arg(long)]
    pub stateful_reconnect: bool,
    /// With --stateful-reconnect: the share of connections whose socket is dropped abruptly
    /// (no close) each second, from the start of the warm-up to the end of sending; 0.05
    /// drops each connection once every 20 s. Messages must still arrive exactly once.
    #[arg(long, default_value_t = 0.0, requires = "stateful_reconnect")]
    pub drop_share: f64,
}

impl RunArgs {
    /// Whether the target is a plain SignalR server (the peer, or the floor) rather than
    /// the service.
    pub fn is_peer(&self) -> bool {
        self.peer_url.is_some() || self.peer_bin.is_some() || self.floor
    }

    /// The hub `scenario` runs on: `--hub`, else [`DEFAULT_MODE_HUB`] where an app server
    /// serves it or the target is a peer, and [`SERVERLESS_HUB`] where clients connect to
    /// the service directly.
    pub fn hub_for(&self, scenario: Scenario) -> String {
        match &self.hub {
            Some(hub) => hub.clone(),
            None if self.is_peer() || scenario.needs_app_server() => DEFAULT_MODE_HUB.to_owned(),
            None => SERVERLESS_HUB.to_owned(),
        }
    }
}
