//! One load-generator process: opens its share of the connections, then sends and receives
//! on the plan's timetable, counting everything in [`Stats`], and reports [`Event`]s to
//! the coordinator, which answers with [`Command`]s. With `--workers N` each worker is a
//! child process speaking JSON lines (stdin: plan, then commands; stdout: events).
//!
//! Time: every process on the machine shares the wall clock, so timetables and the `ts`
//! in messages are milliseconds since the UNIX epoch; latency = arrival − intended send.

use std::collections::HashMap;
use std::net::IpAddr;
use std::str::FromStr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use switchyard_client::connection::{self, ConnectOptions, Connection, Transport};
use switchyard_hub_protocol::Format;
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::time::{sleep_until, timeout, Instant};

use crate::scenario::{Endpoint, Plan, RestTarget, Scenario};
use crate::soak::{Ledger, Outage, PhaseCounts, PhaseMark};
use crate::stats::{
    live_latency, Arrival, Bucket, BucketExport, Live, LiveCounters, SeqTracker, Stats,
};
use crate::wire::{self, Received};

/// From a worker to the coordinator.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The connect phase is over.
    Connected {
        connected: u64,
        /// Global indices of connections that failed.
        failed: Vec<u64>,
        /// Connect latencies (from each attempt's intended time).
        connect: BucketExport,
        /// Seconds from the first attempt to the last success.
        seconds: f64,
    },
    /// Cumulative counters, once a second.
    Live { live: Live },
    /// A step's counts, shortly after it ended.
    Step { step: BucketExport },
    /// Everything, after the drain.
    Final {
        steps: Vec<BucketExport>,
        seconds: Vec<BucketExport>,
        errors: Vec<(String, u64)>,
        /// A soak's counts per phase (see [`crate::soak`]).
        #[serde(default)]
        phases: Vec<PhaseCounts>,
    },
    /// A soak, after the drain: every outage of this worker's connections (the others'
    /// receivers need them to know what they should have received).
    Sessions { outages: Vec<Outage> },
    /// The worker could not run.
    Failed { error: String },
}

/// From the coordinator to a worker.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case")]
pub enum Command {
    /// Start sending: warm-up begins at `start_ms`.
    Start {
        start_ms: f64,
        connected: u64,
        failed: Vec<u64>,
    },
    /// Send nothing intended at or after `at_ms` (a step failed).
    Stop { at_ms: f64 },
    /// A soak: the nodes killed and not yet serving again (by index); clients reconnect
    /// elsewhere.
    Nodes { down: Vec<usize> },
    /// A soak, after every worker's [`Event::Sessions`]: all outages and the phases; the
    /// worker counts and sends its Final.
    Account {
        outages: Vec<Outage>,
        phases: Vec<PhaseMark>,
    },
}

/// Milliseconds since the UNIX epoch.
pub fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

/// The monotonic instant of wall-clock `ms`.
pub fn instant_at(ms: f64) -> Instant {
    let (now, wall) = (Instant::now(), now_ms());
    let delta = Duration::from_secs_f64(((ms - wall).abs()) / 1000.0);
    if ms >= wall {
        now + delta
    } else {
        now.checked_sub(delta).unwrap_or(now)
    }
}

/// Wall-clock milliseconds of the timetable.
#[derive(Debug, Clone)]
struct Schedule {
    /// Warm-up starts.
    start_ms: f64,
    /// Step 1 starts.
    measure_ms: f64,
    step_ms: f64,
    steps: u32,
    /// Sending ends.
    end_ms: f64,
}

impl Schedule {
    fn new(plan: &Plan, start_ms: f64) -> Schedule {
        let measure_ms = start_ms + plan.warmup_seconds * 1000.0;
        let step_ms = plan.step_seconds * 1000.0;
        Schedule {
            start_ms,
            measure_ms,
            step_ms,
            steps: plan.steps.max(1),
            end_ms: measure_ms + step_ms * f64::from(plan.steps.max(1)),
        }
    }

    /// 0 during the warm-up.
    fn step_of(&self, ms: f64) -> u32 {
        if ms < self.measure_ms {
            return 0;
        }
        (((ms - self.measure_ms) / self.step_ms) as u32 + 1).min(self.steps)
    }

    fn second_of(&self, ms: f64) -> Option<u64> {
        (ms >= self.measure_ms).then(|| ((ms - self.measure_ms) / 1000.0) as u64)
    }

    fn step_end(&self, step: u32) -> f64 {
        self.measure_ms + self.step_ms * f64::from(step)
    }

    /// When sender `g` (of `senders`) first sends: from the warm-up if it sends in step 1,
    /// else from its step; spread evenly over one interval. A chat room's posters start in
    /// the warm-up at their own phase of their interval.
    fn first_due(&self, plan: &Plan, g: u64) -> Option<f64> {
        if plan.scenario.is_chat_room() {
            return Some(self.start_ms + plan.interval_of(g)? * Plan::phase_of(g));
        }
        let step = plan.first_step_of(g)?;
        let begin = if step == 1 {
            self.start_ms
        } else {
            self.step_end(step - 1)
        };
        Some(begin + plan.interval_ms * g as f64 / plan.senders.max(1) as f64)
    }
}

/// What every task of a running worker shares.
struct Shared {
    plan: Plan,
    format: Format,
    schedule: Schedule,
    stats: Mutex<Stats>,
    live: Arc<LiveCounters>,
    padding: String,
    connected: u64,
    failed: Vec<u64>,
    /// Connected members per group (group scenarios), computed once.
    group_members: HashMap<u64, u64>,
    /// Sending stops for intended times at or after this.
    stop_ms: watch::Receiver<f64>,
    /// Set when every task must end.
    finish: watch::Receiver<bool>,
    /// A soak: the nodes down (from the coordinator), this worker's clients per node, and
    /// what a reconnect needs.
    nodes_down: watch::Receiver<Vec<usize>>,
    node_load: Vec<std::sync::atomic::AtomicU64>,
    transport: Transport,
    http: Vec<reqwest::Client>,
    rest_http: reqwest::Client,
    /// Reconnects in flight at once are bounded like the first connects (--max-connecting):
    /// thousands at the same instant would time out in the generator itself.
    connecting: Arc<Semaphore>,
}

impl Shared {
    fn stopped(&self, due_ms: f64) -> bool {
        due_ms >= self.schedule.end_ms || due_ms >= *self.stop_ms.borrow()
    }

    fn padding_payload(&self, sender: u32, seq: u64, step: u32) -> String {
        wire::payload(&self.padding, sender, seq, step)
    }

    /// Recipients of one message from sender `g`.
    fn fanout(&self, g: u64) -> u64 {
        match self.plan.scenario {
            Scenario::Broadcast | Scenario::RestBroadcast => self.connected,
            Scenario::SendToGroup | Scenario::ChatRoom | Scenario::RestChatRoom => self
                .plan
                .group_of(g)
                .and_then(|group| self.group_members.get(&group).copied())
                .unwrap_or(0),
            Scenario::RestSendToGroup => self
                .plan
                .rest_group_of(g)
                .and_then(|group| self.group_members.get(&group).copied())
                .unwrap_or(0),
            Scenario::RestSendToUser => {
                let target = g % self.plan.connections.max(1);
                u64::from(self.failed.binary_search(&target).is_err())
            }
            _ => 1,
        }
    }

    fn measure(&self, payload: &str, ts_ms: f64, bytes: usize, seq: &mut SeqTracker) {
        let Some(tag) = wire::parse_tag(payload) else {
            self.stats.lock().error("Measure with an unknown payload");
            return;
        };
        let latency_us = ((now_ms() - ts_ms) * 1000.0).max(1.0) as u64;
        let mut arrival = seq.observe(tag.sender, tag.seq);
        // One REST caller's calls overlap (open loop) on different HTTP connections: HTTP
        // promises no order between them, so only duplicates count there.
        if arrival == Arrival::Reordered && self.plan.scenario.is_rest() {
            arrival = Arrival::New;
        }
        if arrival != Arrival::Duplicate {
            self.live.received.fetch_add(1, Relaxed);
            self.live.received_bytes.fetch_add(bytes as u64, Relaxed);
            if tag.step > 0 {
                live_latency(&self.live, latency_us);
            }
        }
        self.stats.lock().received(
            tag.step,
            self.schedule.second_of(ts_ms),
            arrival,
            latency_us,
            bytes,
        );
    }

    fn sent(&self, due_ms: f64, expected: u64, bytes: usize) {
        self.live.sent.fetch_add(1, Relaxed);
        self.live.sent_bytes.fetch_add(bytes as u64, Relaxed);
        self.stats.lock().sent(
            self.schedule.step_of(due_ms),
            self.schedule.second_of(due_ms),
            expected,
            bytes,
        );
    }

    /// Dues of a sender that were never attempted (the run ended or it was stuck): they
    /// count as expected, so their deliveries show as lost.
    fn unsent(&self, mut due: Option<f64>, interval_ms: f64, expected: u64) {
        let mut stats = self.stats.lock();
        while let Some(at) = due {
            if self.stopped(at) {
                break;
            }
            stats.unsent(
                self.schedule.step_of(at),
                self.schedule.second_of(at),
                expected,
            );
            due = Some(at + interval_ms);
        }
    }

    /// An acknowledged operation (join/leave) intended at `due` is done now (`bytes`: the
    /// acknowledgement's size).
    fn acknowledged(&self, due: f64, bytes: usize) {
        let latency_us = ((now_ms() - due) * 1000.0).max(1.0) as u64;
        let step = self.schedule.step_of(due);
        self.live.received.fetch_add(1, Relaxed);
        if step > 0 {
            live_latency(&self.live, latency_us);
        }
        self.stats.lock().received(
            step,
            self.schedule.second_of(due),
            Arrival::New,
            latency_us,
            bytes,
        );
    }

    /// Adds a connection's stateful-reconnect counters, once, when it ends.
    fn stateful_done(&self, conn: &Connection) {
        if let Some(stats) = conn.stateful_stats() {
            self.live
                .stateful_reconnects
                .fetch_add(stats.reconnects, Relaxed);
            self.live
                .stateful_replayed
                .fetch_add(stats.replayed, Relaxed);
            self.live
                .stateful_duplicates
                .fetch_add(stats.duplicates, Relaxed);
        }
    }

    fn dropped(&self, error: String) {
        self.live.dropped.fetch_add(1, Relaxed);
        let mut stats = self.stats.lock();
        stats.dropped(self.schedule.step_of(now_ms()));
        stats.error(error);
    }
}

/// Runs one worker until its Final event is sent.
pub async fn run(
    plan: Plan,
    events: mpsc::UnboundedSender<Event>,
    mut commands: mpsc::UnboundedReceiver<Command>,
) {
    let format = match parse_format(&plan.protocol) {
        Ok(format) => format,
        Err(error) => {
            let _ = events.send(Event::Failed { error });
            return;
        }
    };
    let transport = match Transport::from_str(&plan.transport) {
        Ok(transport) => transport,
        Err(_) => {
            let _ = events.send(Event::Failed {
                error: format!(
                    "unknown transport '{}' (websockets, serversentevents, longpolling)",
                    plan.transport
                ),
            });
            return;
        }
    };
    let live = Arc::new(LiveCounters::default());
    let ticker = tokio::spawn({
        let (live, events) = (live.clone(), events.clone());
        async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                if events
                    .send(Event::Live {
                        live: live.snapshot(),
                    })
                    .is_err()
                {
                    return;
                }
            }
        }
    });

    // 1. Connect this worker's share.
    let mut errors = Stats::new(0);
    let (connections, failed, connect, connect_seconds) =
        connect_all(&plan, format, transport, &live, &mut errors).await;
    let _ = events.send(Event::Connected {
        connected: connections.len() as u64,
        failed,
        connect: connect.export(1),
        seconds: connect_seconds,
    });

    // 2. Wait for the common start.
    let (start_ms, connected, failed) = loop {
        match commands.recv().await {
            Some(Command::Start {
                start_ms,
                connected,
                failed,
            }) => break (start_ms, connected, failed),
            Some(Command::Stop { .. } | Command::Nodes { .. } | Command::Account { .. }) => {
                continue
            }
            None => {
                ticker.abort();
                return;
            }
        }
    };
    let schedule = Schedule::new(&plan, start_ms);
    let (stop_tx, stop_rx) = watch::channel(f64::INFINITY);
    let (finish_tx, finish_rx) = watch::channel(false);
    let (nodes_tx, nodes_rx) = watch::channel(Vec::new());
    let mut stats = Stats::new(plan.steps.max(1));
    stats.errors = std::mem::take(&mut errors.errors);
    let mut failed = failed;
    failed.sort_unstable();
    let mut group_members = HashMap::new();
    if plan.scenario.uses_groups() {
        for g in (0..plan.connections).filter(|g| failed.binary_search(g).is_err()) {
            if let Some(group) = plan.group_of(g) {
                *group_members.entry(group).or_insert(0u64) += 1;
            }
        }
    }
    let node_count = match &plan.endpoint {
        Endpoint::Service { bases, .. } => bases.len().max(1),
        Endpoint::Hub { .. } => 1,
    };
    let node_load: Vec<std::sync::atomic::AtomicU64> = (0..node_count)
        .map(|_| std::sync::atomic::AtomicU64::new(0))
        .collect();
    for (g, _) in &connections {
        node_load[crate::cluster::node_of(*g, node_count)].fetch_add(1, Relaxed);
    }
    let shared = Arc::new(Shared {
        nodes_down: nodes_rx,
        node_load,
        transport,
        http: clients_by_address(&plan.source_addresses),
        rest_http: connection::http_client(None),
        connecting: Arc::new(Semaphore::new(plan.max_connecting.max(1))),
        group_members,
        padding: "x".repeat(plan.message_size),
        plan,
        format,
        schedule,
        stats: Mutex::new(stats),
        live,
        connected,
        failed,
        stop_ms: stop_rx,
        finish: finish_rx,
    });

    // 3. Every connection (and REST caller) runs its own timetable.
    let mut tasks = Vec::new();
    let ids: Vec<String> = connections
        .iter()
        .map(|(_, c)| c.connection_id().to_owned())
        .collect();
    let count = connections.len();
    let ids_by_g: HashMap<u64, String> = connections
        .iter()
        .map(|(g, c)| (*g, c.connection_id().to_owned()))
        .collect();
    // send-to-connection: connection g (of this worker's g ≡ w mod W) sends to g + W, which is
    // on another node unless W is a multiple of the node count.
    for (i, (g, conn)) in connections.into_iter().enumerate() {
        if shared.plan.reconnect {
            let node = crate::cluster::node_of(g, node_count);
            tasks.push(tokio::spawn(soak_task(shared.clone(), g, conn, node)));
            continue;
        }
        let target = ids.get((i + 1) % count.max(1)).cloned().unwrap_or_default();
        let shared = shared.clone();
        tasks.push(tokio::spawn(async move {
            connection_task(shared, g, conn, target).await;
            None
        }));
    }
    if shared.plan.scenario.is_rest() {
        // Not bound to the source addresses: a REST connection needs no spreading (a few
        // hundred keep-alive connections at most), and reqwest binds with a port scan of
        // every socket on the address, which at ~17,000 per address took most of the
        // generator's CPU and failed calls (the WebSockets defer their port choice instead).
        let http = connection::http_client(None);
        let permits = Arc::new(Semaphore::new(2048));
        let per_connection = matches!(
            shared.plan.scenario,
            Scenario::RestSendToConnection | Scenario::RestJoinLeaveGroup
        );
        // A chat room's posters are its members: poster g calls for connection g.
        let callers: Vec<u64> = if shared.plan.scenario.is_chat_room() {
            (0..shared.plan.connections)
                .filter(|&g| shared.plan.interval_of(g).is_some() && ids_by_g.contains_key(&g))
                .collect()
        } else {
            (0..shared.plan.senders).collect()
        };
        for c in callers.into_iter().filter(|&c| shared.plan.owns(c)) {
            // Caller c addresses connection c, which this worker holds (same share); a
            // connection that failed has no caller.
            let connection_id = match per_connection {
                true => match ids_by_g.get(&c) {
                    Some(id) => Some(id.clone()),
                    None => continue,
                },
                false => None,
            };
            let (shared, http, permits) = (shared.clone(), http.clone(), permits.clone());
            tasks.push(tokio::spawn(async move {
                rest_caller(shared, c, connection_id, http, permits).await;
                None
            }));
        }
    }

    // 4. Report each step shortly after it ends; honour Stop; then drain and finish.
    let grace_ms = (shared.plan.drain_seconds * 1000.0).min(2000.0);
    let mut next_step = 1;
    let mut stop_ms = f64::INFINITY;
    loop {
        let end = shared.schedule.end_ms.min(stop_ms);
        let report_at = if next_step <= shared.schedule.steps {
            shared.schedule.step_end(next_step) + grace_ms
        } else {
            f64::INFINITY
        };
        let finish_at = end + shared.plan.drain_seconds * 1000.0;
        let wake = report_at.min(finish_at);
        tokio::select! {
            _ = sleep_until(instant_at(wake)) => {
                if wake >= finish_at {
                    break;
                }
                let step = shared.stats.lock().steps[next_step as usize].export(u64::from(next_step));
                let _ = events.send(Event::Step { step });
                next_step += 1;
            }
            command = commands.recv() => match command {
                Some(Command::Stop { at_ms }) => {
                    stop_ms = stop_ms.min(at_ms);
                    let _ = stop_tx.send(stop_ms);
                }
                Some(Command::Nodes { down }) => {
                    let _ = nodes_tx.send(down);
                }
                Some(Command::Start { .. } | Command::Account { .. }) => {}
                // The coordinator is gone: stop at once.
                None => break,
            },
        }
    }
    let _ = finish_tx.send(true);
    let mut ledgers = Vec::new();
    for task in tasks {
        if let Ok(Some(ledger)) = task.await {
            ledgers.push(ledger);
        }
    }
    ticker.abort();
    let phases = if shared.plan.reconnect {
        // Every worker's outages are needed to know what each receiver should have had.
        let outages = ledgers
            .iter()
            .flat_map(|l| l.outages.iter().copied())
            .collect();
        let _ = events.send(Event::Sessions { outages });
        let mut phases = Vec::new();
        while let Some(command) = commands.recv().await {
            if let Command::Account {
                outages,
                phases: marks,
            } = command
            {
                let mut by_g: HashMap<u64, Vec<Outage>> = HashMap::new();
                for outage in outages {
                    by_g.entry(outage.g).or_default().push(outage);
                }
                let window = crate::soak::Window {
                    start_ms: shared.schedule.start_ms,
                    measure_ms: shared.schedule.measure_ms,
                    end_ms: shared.schedule.end_ms.min(*shared.stop_ms.borrow()),
                };
                phases = crate::soak::account(
                    &shared.plan,
                    window,
                    &shared.failed,
                    &by_g,
                    &marks,
                    &ledgers,
                );
                break;
            }
        }
        phases
    } else {
        Vec::new()
    };
    let stats = shared.stats.lock();
    let _ = events.send(Event::Live {
        live: shared.live.snapshot(),
    });
    let _ = events.send(Event::Final {
        steps: stats
            .steps
            .iter()
            .enumerate()
            .skip(1)
            .map(|(i, b)| b.export(i as u64))
            .collect(),
        seconds: stats
            .seconds
            .iter()
            .enumerate()
            .map(|(i, b)| b.export(i as u64))
            .collect(),
        errors: stats.errors.iter().map(|(k, v)| (k.clone(), *v)).collect(),
        phases,
    });
}

pub fn parse_format(protocol: &str) -> Result<Format, String> {
    match protocol.to_ascii_lowercase().as_str() {
        "json" => Ok(Format::Json),
        "messagepack" | "msgpack" => Ok(Format::MessagePack),
        other => Err(format!("unknown protocol '{other}' (json or messagepack)")),
    }
}

/// One reqwest client per source address (or one for the default).
fn clients_by_address(addresses: &[IpAddr]) -> Vec<reqwest::Client> {
    if addresses.is_empty() {
        vec![connection::http_client(None)]
    } else {
        addresses
            .iter()
            .map(|a| connection::http_client(Some(*a)))
            .collect()
    }
}

type Connected = (Vec<(u64, Connection)>, Vec<u64>, Bucket, f64);

/// Opens this worker's connections on the timetable `first + g / rate`, at most
/// `max_connecting` at once; joins each to its group for send-to-group.
async fn connect_all(
    plan: &Plan,
    format: Format,
    transport: Transport,
    live: &Arc<LiveCounters>,
    errors: &mut Stats,
) -> Connected {
    let http = clients_by_address(&plan.source_addresses);
    // REST joins (rest-send-to-group) go unbound, as REST calls do (see `run`).
    let rest_http = connection::http_client(None);
    let permits = Arc::new(Semaphore::new(plan.max_connecting.max(1)));
    let first = now_ms() + 50.0;
    let rate = plan.connect_rate.max(0.001);
    let latency = Arc::new(Mutex::new(Bucket::empty_step()));
    let last_success = Arc::new(Mutex::new(first));
    // Connection g goes to node g mod N; its source address steps once per N connections,
    // so every node hears from every address. (g mod the address count put each node's
    // connections on one address when both counts were equal: 16,667 of that address's
    // ~28,000 ports towards one node, which the generator's unbound REST calls from
    // 127.0.0.1 then had to search around.)
    let nodes = match &plan.endpoint {
        Endpoint::Service { bases, .. } => bases.len().max(1),
        Endpoint::Hub { .. } => 1,
    };
    let mut attempts = Vec::new();
    for g in (0..plan.connections).filter(|&g| plan.owns(g)) {
        let due = first + g as f64 * 1000.0 / rate;
        sleep_until(instant_at(due)).await;
        let permit = permits.clone().acquire_owned().await.expect("never closed");
        let options = options_for(plan, g, nodes, transport, format, &http);
        let (plan, live, latency, last_success, rest_http) = (
            plan.clone(),
            live.clone(),
            latency.clone(),
            last_success.clone(),
            rest_http.clone(),
        );
        attempts.push(tokio::spawn(async move {
            let node = crate::cluster::node_of(g, nodes);
            let result = timeout(
                Duration::from_secs(60),
                connect_one(&plan, g, node, options, rest_http),
            )
            .await
            .unwrap_or_else(|_| Err("connect: timed out after 60 s".to_owned()));
            drop(permit);
            let done = now_ms();
            let mut bucket = latency.lock();
            bucket.sent += 1;
            bucket.expected += 1;
            match result {
                Ok(conn) => {
                    live.connected.fetch_add(1, Relaxed);
                    bucket.received += 1;
                    let _ = bucket
                        .latency
                        .record((((done - due) * 1000.0) as u64).max(1));
                    let mut last = last_success.lock();
                    *last = last.max(done);
                    Ok((g, conn))
                }
                Err(e) => {
                    live.connect_failed.fetch_add(1, Relaxed);
                    Err((g, e))
                }
            }
        }));
    }
    let mut connections = Vec::new();
    let mut failed = Vec::new();
    for attempt in attempts {
        match attempt.await {
            Ok(Ok(pair)) => connections.push(pair),
            Ok(Err((g, e))) => {
                errors.error(e);
                failed.push(g);
            }
            Err(e) => errors.error(format!("connect task: {e}")),
        }
    }
    let bucket = std::mem::replace(&mut *latency.lock(), Bucket::empty_step());
    let seconds = (*last_success.lock() - first) / 1000.0;
    (connections, failed, bucket, seconds.max(0.0))
}

/// How connection `g` connects: its source address steps once per `nodes` connections.
fn options_for(
    plan: &Plan,
    g: u64,
    nodes: usize,
    transport: Transport,
    format: Format,
    http: &[reqwest::Client],
) -> ConnectOptions {
    let source = (g as usize) / nodes.max(1);
    ConnectOptions {
        transport,
        format,
        access_token: None,
        local_address: (!plan.source_addresses.is_empty())
            .then(|| plan.source_addresses[source % plan.source_addresses.len()]),
        http: Some(http[source % http.len()].clone()),
        max_message_size: 16 * 1024 * 1024,
        stateful_reconnect: plan.stateful_reconnect,
        ..ConnectOptions::new(transport, format)
    }
}

/// Negotiate (following redirects), connect, handshake; then join the group if any.
/// `node`: which of several service bases to connect to.
async fn connect_one(
    plan: &Plan,
    g: u64,
    node: usize,
    mut options: ConnectOptions,
    rest_http: reqwest::Client,
) -> Result<Connection, String> {
    // A user id only where the scenario addresses users: it costs the service an entry in
    // its user index per connection, which would blur what idle connections cost.
    let user = (plan.scenario == Scenario::RestSendToUser).then(|| Plan::user_of(g));
    let url = match &plan.endpoint {
        Endpoint::Service { bases, access_key } => {
            // Connection g negotiates at its node, with a token naming that node.
            let base = &bases[node % bases.len().max(1)];
            let base_url = url::Url::parse(base).map_err(|e| format!("endpoint: {e}"))?;
            let audience = switchyard_auth::client_audience(&base_url, &plan.hub);
            let claims: Vec<(String, String)> =
                user.map(|u| ("nameid".to_owned(), u)).into_iter().collect();
            options.access_token = Some(switchyard_auth::issue_token(
                access_key,
                &audience,
                &claims,
                Duration::from_secs(24 * 3600),
                now_ms() as i64 / 1000,
            ));
            format!("{base}client/?hub={}", plan.hub)
        }
        Endpoint::Hub { url } => {
            let base = format!("{}/{}", url.trim_end_matches('/'), plan.hub);
            match user {
                Some(user) => format!("{base}?user={user}"),
                None => base,
            }
        }
    };
    let mut conn = connection::connect(&url, &options)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    // Serverless: members join by REST (the call returns once the membership holds).
    if let (
        Scenario::RestSendToGroup | Scenario::RestChatRoom,
        Endpoint::Service { .. },
        Some(rest),
    ) = (plan.scenario, &plan.endpoint, &plan.rest)
    {
        if let Some(group) = plan.group_of(g) {
            let base = plan.rest_base_of(rest, g).unwrap_or_default();
            let url = format!(
                "{base}{}",
                group_member_path(&plan.hub, &group_name(group), conn.connection_id())
            );
            let mut request = rest_http.put(&url).timeout(REST_TIMEOUT);
            if let Some(token) = rest_token(rest, &url) {
                request = request.bearer_auth(token);
            }
            let response = request.send().await.map_err(|e| {
                format!("join group by REST: {}", switchyard_client::with_causes(&e))
            })?;
            if !response.status().is_success() {
                return Err(format!("join group by REST: status {}", response.status()));
            }
        }
    } else if plan.scenario.uses_groups() {
        if let Some(group) = plan.group_of(g) {
            let frame = wire::invocation(
                conn.format(),
                "JoinGroup",
                Some("join".to_owned()),
                vec![json!(group_name(group))],
            );
            conn.send_raw(frame)
                .await
                .map_err(|e| format!("join group: {e}"))?;
            loop {
                let body = conn
                    .next_frame()
                    .await
                    .map_err(|e| format!("join group: {e}"))?;
                match wire::decode(conn.format(), &body)? {
                    Received::Completion { error: None, .. } => break,
                    Received::Completion { error: Some(e), .. } => {
                        return Err(format!("join group: {e}"))
                    }
                    Received::Close { error } => {
                        return Err(format!("join group: closed: {error:?}"))
                    }
                    _ => continue,
                }
            }
        }
    }
    Ok(conn)
}

pub fn group_name(group: u64) -> String {
    format!("group{group}")
}

/// `api/hubs/{hub}/groups/{group}/connections/{id}` (2022-06-01): PUT adds, DELETE removes.
fn group_member_path(hub: &str, group: &str, connection_id: &str) -> String {
    format!(
        "api/hubs/{hub}/groups/{group}/connections/{}?api-version=2022-06-01",
        percent_encoding::utf8_percent_encode(connection_id, percent_encoding::NON_ALPHANUMERIC)
    )
}

/// An Azure-style bearer for one REST URL (its audience), when the target signs calls.
fn rest_token(rest: &RestTarget, url: &str) -> Option<String> {
    rest.access_key.as_ref().map(|key| {
        switchyard_auth::issue_token(
            key,
            url,
            &[],
            Duration::from_secs(24 * 3600),
            now_ms() as i64 / 1000,
        )
    })
}

/// One connection: sends on its timetable (if it is a sender) and counts what arrives,
/// until the worker finishes.
async fn connection_task(shared: Arc<Shared>, g: u64, mut conn: Connection, target: String) {
    let plan = &shared.plan;
    if plan.stateful_reconnect && !conn.is_stateful() {
        shared.live.stateful_refused.fetch_add(1, Relaxed);
        shared
            .stats
            .lock()
            .error("stateful reconnect: the service did not agree (is the app server started with --allow-stateful-reconnects?)");
    }
    // --drop-share: this connection's socket is dropped once every 1/share seconds, at a
    // phase of its own so that the drops spread evenly over each second.
    let drop_period_ms =
        (conn.is_stateful() && plan.drop_share > 0.0).then(|| 1000.0 / plan.drop_share);
    let mut drop_ms = drop_period_ms.map(|period| {
        let phase = (g as f64 * 0.618_033_988_75).fract() * period;
        shared.schedule.start_ms + phase
    });
    let drop_timer = sleep_until(instant_at(drop_ms.unwrap_or(0.0)));
    tokio::pin!(drop_timer);
    let sends = plan.scenario.sends() && !plan.scenario.is_rest();
    let mut due_ms = if sends {
        shared.schedule.first_due(plan, g)
    } else {
        None
    };
    let interval_ms = plan.interval_of(g).unwrap_or(plan.interval_ms);
    let mut seq = 0u64;
    let mut tracker = SeqTracker::default();
    let mut finish = shared.finish.clone();
    let mut stop = shared.stop_ms.clone();
    let fanout = shared.fanout(g);
    let group = Value::from(plan.group_of(g).map(group_name).unwrap_or_default());
    let target = Value::from(target);
    // join-leave-group: invocation id → intended send time.
    let mut pending: HashMap<u64, f64> = HashMap::new();
    // One timer, moved after each send (not re-created for every received message).
    let timer = sleep_until(instant_at(due_ms.unwrap_or(0.0)));
    tokio::pin!(timer);
    loop {
        if let Some(due) = due_ms {
            if shared.stopped(due) {
                due_ms = None;
            }
        }
        tokio::select! {
            biased;
            _ = finish.changed() => break,
            _ = stop.changed() => {}
            _ = &mut drop_timer, if drop_ms.is_some_and(|at| at < shared.schedule.end_ms) => {
                // The next next_frame or send_raw finds the socket gone and reconnects.
                conn.abort_transport();
                shared.live.stateful_drops.fetch_add(1, Relaxed);
                let next = drop_ms.unwrap_or_default() + drop_period_ms.unwrap_or_default();
                drop_ms = Some(next);
                drop_timer.as_mut().reset(instant_at(next));
            }
            _ = &mut timer, if due_ms.is_some() => {
                let due = due_ms.unwrap_or_default();
                let step = shared.schedule.step_of(due);
                let ts = json!(due);
                let frame = match plan.scenario {
                    Scenario::JoinLeaveGroup => {
                        pending.insert(seq, due);
                        let method = if seq.is_multiple_of(2) { "JoinGroup" } else { "LeaveGroup" };
                        wire::invocation(shared.format, method, Some(seq.to_string()), vec![group.clone()])
                    }
                    scenario => {
                        let payload = Value::String(shared.padding_payload(g as u32, seq, step));
                        let (method, arguments) = match scenario {
                            Scenario::Echo => ("Echo", vec![ts, payload]),
                            Scenario::Broadcast => ("Broadcast", vec![ts, payload]),
                            Scenario::SendToGroup | Scenario::ChatRoom => ("SendToGroup", vec![group.clone(), ts, payload]),
                            _ => ("SendToConnection", vec![target.clone(), ts, payload]),
                        };
                        wire::invocation(shared.format, method, None, arguments)
                    }
                };
                // Counted before the write: a write held up by back-pressure shows as
                // latency or loss, not as a message that was never due.
                shared.sent(due, fanout, frame.len());
                seq += 1;
                due_ms = Some(due + interval_ms);
                timer.as_mut().reset(instant_at(due + interval_ms));
                tokio::select! {
                    sent = conn.send_raw(frame) => if let Err(e) = sent {
                        shared.dropped(format!("send: {e}"));
                        shared.unsent(due_ms, interval_ms, fanout);
                        shared.stateful_done(&conn);
                        return;
                    },
                    _ = finish.changed() => {
                        shared.unsent(due_ms, interval_ms, fanout);
                        shared.stateful_done(&conn);
                        return;
                    }
                }
            }
            frame = conn.next_frame() => {
                let body = match frame {
                    Ok(body) => body,
                    Err(e) => {
                        shared.dropped(format!("receive: {e}"));
                        shared.unsent(due_ms, interval_ms, fanout);
                        shared.stateful_done(&conn);
                        return;
                    }
                };
                match wire::decode(shared.format, &body) {
                    Ok(Received::Measure { ts_ms, payload }) => {
                        shared.measure(&payload, ts_ms, body.len(), &mut tracker);
                    }
                    Ok(Received::Ping) => {}
                    Ok(Received::Completion { invocation_id, error }) => {
                        let Some(due) = invocation_id.parse().ok().and_then(|id| pending.remove(&id)) else {
                            shared.stats.lock().error("completion for an unknown invocation");
                            continue;
                        };
                        if let Some(error) = error {
                            shared.stats.lock().error(format!("completion: {error}"));
                            continue;
                        }
                        shared.acknowledged(due, body.len());
                    }
                    Ok(Received::Close { error }) => {
                        shared.dropped(format!("closed by the server: {}", error.unwrap_or_default()));
                        shared.unsent(due_ms, interval_ms, fanout);
                        shared.stateful_done(&conn);
                        return;
                    }
                    Ok(Received::Other(what)) => shared.stats.lock().error(format!("unexpected: {what}")),
                    Err(e) => shared.stats.lock().error(format!("undecodable: {e}")),
                }
            }
        }
    }
    shared.unsent(due_ms, interval_ms, fanout);
    shared.stateful_done(&conn);
    // Close politely so the service does not count an abort (bounded: a stuck socket
    // must not hold the worker's final report).
    let _ = timeout(Duration::from_secs(3), conn.close()).await;
}

/// A soak's connection (chat rooms): posts on its timetable like [`connection_task`], and
/// when its connection drops, connects again to another live node and joins its room again,
/// recording the outage; every delivery goes into its [`Ledger`]. A post due while it is
/// disconnected is skipped (its slot number too, so receivers can tell which were due).
async fn soak_task(shared: Arc<Shared>, g: u64, conn: Connection, node: usize) -> Option<Ledger> {
    let plan = &shared.plan;
    let mut ledger = Ledger::new(g);
    let sends = !plan.scenario.is_rest() && plan.interval_of(g).is_some();
    let interval_ms = plan.interval_of(g).unwrap_or(plan.interval_ms);
    let mut due_ms = if sends {
        shared.schedule.first_due(plan, g)
    } else {
        None
    };
    let mut slot = 0u64;
    let fanout = shared.fanout(g);
    let group = Value::from(plan.group_of(g).map(group_name).unwrap_or_default());
    let mut tracker = SeqTracker::default();
    let mut finish = shared.finish.clone();
    let mut conn = Some(conn);
    let mut node = node;
    let timer = sleep_until(instant_at(due_ms.unwrap_or(0.0)));
    tokio::pin!(timer);
    'run: loop {
        if let Some(due) = due_ms {
            if shared.stopped(due) {
                due_ms = None;
            }
        }
        let Some(c) = conn.as_mut() else {
            // Reconnect: to the live node holding the fewest of this worker's clients, never
            // the one that just dropped it; each failed node is skipped until all were tried.
            let down_ms = now_ms();
            let mut tried = vec![node];
            let mut failed_attempts = 0u32;
            let mut backoff = Duration::from_millis(100);
            loop {
                let choice = pick_node(&shared, g, &tried);
                let options = options_for(
                    plan,
                    g,
                    shared.node_load.len(),
                    shared.transport,
                    shared.format,
                    &shared.http,
                );
                let attempt = tokio::select! {
                    _ = finish.changed() => {
                        ledger.outages.push(Outage { g, down_ms, up_ms: None, failed_attempts });
                        break 'run;
                    }
                    result = async {
                        let _permit = shared.connecting.acquire().await;
                        timeout(
                            Duration::from_secs(30),
                            connect_one(plan, g, choice, options, shared.rest_http.clone()),
                        )
                        .await
                    } => result.unwrap_or_else(|_| Err("connect: timed out after 30 s".to_owned())),
                };
                match attempt {
                    Ok(new) => {
                        let up_ms = now_ms();
                        ledger.outages.push(Outage {
                            g,
                            down_ms,
                            up_ms: Some(up_ms),
                            failed_attempts,
                        });
                        node = choice;
                        conn = Some(new);
                        // Posts due meanwhile are not sent (nor numbered again).
                        while let Some(due) = due_ms.filter(|due| *due < up_ms) {
                            slot += 1;
                            due_ms = Some(due + interval_ms);
                        }
                        if let Some(due) = due_ms {
                            timer.as_mut().reset(instant_at(due));
                        }
                        continue 'run;
                    }
                    Err(e) => {
                        shared.node_load[choice].fetch_sub(1, Relaxed);
                        failed_attempts += 1;
                        shared.stats.lock().error(format!("reconnect: {e}"));
                        tried.push(choice);
                        tokio::select! {
                            _ = finish.changed() => {
                                ledger.outages.push(Outage { g, down_ms, up_ms: None, failed_attempts });
                                break 'run;
                            }
                            _ = tokio::time::sleep(backoff) => {}
                        }
                        backoff = (backoff * 2).min(Duration::from_secs(2));
                    }
                }
            }
        };
        let mut dropped: Option<String> = None;
        tokio::select! {
            biased;
            _ = finish.changed() => break,
            _ = &mut timer, if due_ms.is_some() => {
                let due = due_ms.unwrap_or_default();
                let step = shared.schedule.step_of(due);
                let payload = Value::String(shared.padding_payload(g as u32, slot, step));
                let frame = wire::invocation(
                    shared.format,
                    "SendToGroup",
                    None,
                    vec![group.clone(), json!(due), payload],
                );
                shared.sent(due, fanout, frame.len());
                slot += 1;
                due_ms = Some(due + interval_ms);
                timer.as_mut().reset(instant_at(due + interval_ms));
                tokio::select! {
                    sent = c.send_raw(frame) => if let Err(e) = sent {
                        dropped = Some(format!("send: {e}"));
                    },
                    _ = finish.changed() => break,
                }
            }
            frame = c.next_frame() => match frame {
                Err(e) => dropped = Some(format!("receive: {e}")),
                Ok(body) => match wire::decode(shared.format, &body) {
                    Ok(Received::Measure { ts_ms, payload }) => {
                        if let Some(tag) = wire::parse_tag(&payload) {
                            ledger.observe(tag, ts_ms);
                        }
                        shared.measure(&payload, ts_ms, body.len(), &mut tracker);
                    }
                    Ok(Received::Ping | Received::Completion { .. }) => {}
                    Ok(Received::Close { error }) => {
                        dropped = Some(format!("closed by the server: {}", error.unwrap_or_default()));
                    }
                    Ok(Received::Other(what)) => shared.stats.lock().error(format!("unexpected: {what}")),
                    Err(e) => shared.stats.lock().error(format!("undecodable: {e}")),
                },
            },
        }
        if let Some(why) = dropped {
            // Counted apart from the run's failed connections: the outage is what matters.
            shared
                .stats
                .lock()
                .error(format!("dropped, reconnecting: {why}"));
            shared.node_load[node].fetch_sub(1, Relaxed);
            conn = None;
        }
    }
    if let Some(c) = conn {
        let _ = timeout(Duration::from_secs(3), c.close()).await;
    }
    Some(ledger)
}

/// The node for a reconnect, counted in its load at once (the caller takes it back if the
/// attempt fails): the live one (not down by the coordinator's word, not tried already)
/// with the fewest of this worker's clients, ties broken by `g` (all of a dead node's
/// clients choose at the same instant). Each worker holds a like share of every node's
/// clients, so this spreads the dropped ones evenly, and a node started again takes the
/// clients of the next node killed: they never pile up on node 1.
fn pick_node(shared: &Shared, g: u64, tried: &[usize]) -> usize {
    let down = shared.nodes_down.borrow().clone();
    let n = shared.node_load.len();
    let key = |i: &usize| {
        let turn = (*i + n - (g as usize % n.max(1))) % n.max(1);
        (shared.node_load[*i].load(Relaxed), turn)
    };
    let choice = (0..n)
        .filter(|i| !down.contains(i) && !tried.contains(i))
        .min_by_key(key)
        // All tried: any live one again (its trouble may have passed).
        .or_else(|| (0..n).filter(|i| !down.contains(i)).min_by_key(key))
        .or_else(|| (0..n).min_by_key(key))
        .unwrap_or(0);
    shared.node_load[choice].fetch_add(1, Relaxed);
    choice
}

/// One REST caller on its timetable, without waiting for earlier calls (open loop; at most
/// 2,048 in flight per worker). Sends `POST` a `Measure` (counted where it arrives);
/// rest-join-leave-group alternates `PUT` and `DELETE` of connection c's membership and
/// counts each success at its response.
async fn rest_caller(
    shared: Arc<Shared>,
    c: u64,
    connection_id: Option<String>,
    http: reqwest::Client,
    permits: Arc<Semaphore>,
) {
    let plan = &shared.plan;
    let Some(rest) = plan.rest.clone() else {
        return;
    };
    let Some(base) = plan.rest_base_of(&rest, c) else {
        return;
    };
    let connection_id = connection_id.unwrap_or_default();
    // The 2022-06-01 data-plane API (Azure's current REST surface).
    let path = match plan.scenario {
        Scenario::RestSendToUser => format!(
            "api/hubs/{}/users/{}/:send?api-version=2022-06-01",
            plan.hub,
            Plan::user_of(c % plan.connections.max(1))
        ),
        Scenario::RestSendToGroup => format!(
            "api/hubs/{}/groups/{}/:send?api-version=2022-06-01",
            plan.hub,
            group_name(plan.rest_group_of(c).unwrap_or_default())
        ),
        // A poster sends to its own room.
        Scenario::RestChatRoom => format!(
            "api/hubs/{}/groups/{}/:send?api-version=2022-06-01",
            plan.hub,
            group_name(plan.group_of(c).unwrap_or_default())
        ),
        Scenario::RestSendToConnection => format!(
            "api/hubs/{}/connections/{}/:send?api-version=2022-06-01",
            plan.hub,
            percent_encoding::utf8_percent_encode(
                &connection_id,
                percent_encoding::NON_ALPHANUMERIC
            )
        ),
        Scenario::RestJoinLeaveGroup => group_member_path(
            &plan.hub,
            &group_name(plan.group_of(c).unwrap_or_default()),
            &connection_id,
        ),
        _ => format!("api/hubs/{}/:send?api-version=2022-06-01", plan.hub),
    };
    let url = format!("{base}{path}");
    let token = rest_token(&rest, &url);
    let membership = plan.scenario == Scenario::RestJoinLeaveGroup;
    let fanout = shared.fanout(c);
    let interval_ms = plan.interval_of(c).unwrap_or(plan.interval_ms);
    let mut due_ms = shared.schedule.first_due(plan, c);
    let mut seq = 0u64;
    let mut finish = shared.finish.clone();
    while let Some(due) = due_ms {
        if shared.stopped(due) {
            break;
        }
        tokio::select! {
            biased;
            _ = finish.changed() => break,
            _ = sleep_until(instant_at(due)) => {}
        }
        let step = shared.schedule.step_of(due);
        let mut request = if membership {
            // Join on even calls, leave on odd ones: the membership ends as it began.
            let method = if seq.is_multiple_of(2) {
                reqwest::Method::PUT
            } else {
                reqwest::Method::DELETE
            };
            shared.sent(due, fanout, 0);
            http.request(method, &url)
        } else {
            let body = serde_json::to_vec(&json!({
                "target": wire::MEASURE,
                "arguments": [due, shared.padding_payload(c as u32, seq, step)],
            }))
            .unwrap_or_default();
            shared.sent(due, fanout, body.len());
            http.post(&url)
                .header("content-type", "application/json")
                .body(body)
        };
        seq += 1;
        due_ms = Some(due + interval_ms);
        let permit = tokio::select! {
            permit = permits.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            _ = finish.changed() => break,
        };
        request = request.timeout(REST_TIMEOUT);
        if let Some(token) = &token {
            request = request.bearer_auth(token);
        }
        let shared = shared.clone();
        tokio::spawn(async move {
            let result = request.send().await;
            drop(permit);
            match result {
                Ok(response) if response.status().is_success() => {
                    if membership {
                        shared.acknowledged(due, 0);
                    }
                }
                Ok(response) => shared
                    .stats
                    .lock()
                    .error(format!("REST: status {}", response.status())),
                Err(e) => shared
                    .stats
                    .lock()
                    .error(format!("REST: {}", switchyard_client::with_causes(&e))),
            }
        });
    }
    shared.unsent(due_ms, interval_ms, fanout);
}

/// A REST call that takes longer is abandoned (its deliveries count as lost if missing).
const REST_TIMEOUT: Duration = Duration::from_secs(30);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{Endpoint, Plan};

    fn plan(senders: u64, steps: u32) -> Plan {
        Plan {
            scenario: Scenario::Echo,
            hub: "bench".into(),
            endpoint: Endpoint::Hub {
                url: "http://127.0.0.1:1".into(),
            },
            rest: None,
            transport: "websockets".into(),
            protocol: "json".into(),
            connections: 100,
            senders,
            steps,
            step_seconds: 10.0,
            warmup_seconds: 2.0,
            drain_seconds: 5.0,
            message_size: 2048,
            interval_ms: 1000.0,
            group_size: Some(10),
            groups: None,
            connect_rate: 1000.0,
            max_connecting: 10,
            source_addresses: Vec::new(),
            workers: 2,
            worker: 1,
            reconnect: false,
            stateful_reconnect: false,
            drop_share: 0.0,
        }
    }

    #[test]
    fn timetable() {
        let p = plan(100, 4);
        assert_eq!(
            (1..=4).map(|s| p.senders_at(s)).collect::<Vec<_>>(),
            vec![25, 50, 75, 100]
        );
        let s = Schedule::new(&p, 1000.0);
        assert_eq!(s.measure_ms, 3000.0);
        assert_eq!(s.end_ms, 43_000.0);
        assert_eq!(s.step_of(2999.0), 0);
        assert_eq!(s.step_of(3000.0), 1);
        assert_eq!(s.step_of(12_999.0), 1);
        assert_eq!(s.step_of(13_000.0), 2);
        assert_eq!(s.step_of(99_000.0), 4);
        assert_eq!(s.second_of(4500.0), Some(1));
        // Sender 0 starts in the warm-up; sender 30 with step 2; phases spread.
        assert_eq!(s.first_due(&p, 0), Some(1000.0));
        assert_eq!(s.first_due(&p, 30), Some(13_000.0 + 300.0));
        assert_eq!(s.first_due(&p, 100), None);
        assert!(p.owns(1) && !p.owns(2));
    }

    #[test]
    fn groups() {
        let mut p = plan(100, 1);
        assert_eq!(p.group_of(25), Some(2));
        assert_eq!(p.group_of(99), Some(9));
        p.group_size = None;
        p.groups = Some(7);
        assert_eq!(p.group_of(25), Some(4));
    }

    #[test]
    fn chat_room_posters_and_phases() {
        let mut p = plan(0, 1);
        p.scenario = Scenario::ChatRoom;
        p.connections = 250;
        p.group_size = Some(100);
        // Full rooms: 10 chatty (every 11 intervals), 20 casual (every 59), 70 lurkers; the
        // last room of 50: 5 and 10.
        assert_eq!(p.interval_of(0), Some(11_000.0));
        assert_eq!(p.interval_of(109), Some(11_000.0));
        assert_eq!(p.interval_of(110), Some(59_000.0));
        assert_eq!(p.interval_of(129), Some(59_000.0));
        assert_eq!(p.interval_of(130), None);
        assert_eq!(p.interval_of(204), Some(11_000.0));
        assert_eq!(p.interval_of(205), Some(59_000.0));
        assert_eq!(p.interval_of(214), Some(59_000.0));
        assert_eq!(p.interval_of(215), None);
        assert_eq!(p.posters(), 30 + 30 + 15);
        // Phases: in [0, 1), fixed per connection, spread out.
        let phases: Vec<f64> = (0..1000).map(Plan::phase_of).collect();
        assert!(phases.iter().all(|f| (0.0..1.0).contains(f)));
        assert_eq!(Plan::phase_of(7), Plan::phase_of(7));
        let early = phases.iter().filter(|&&f| f < 0.5).count();
        assert!((400..600).contains(&early), "{early}");
        let s = Schedule::new(&p, 1000.0);
        assert_eq!(s.first_due(&p, 130), None);
        assert_eq!(
            s.first_due(&p, 3),
            Some(1000.0 + 11_000.0 * Plan::phase_of(3))
        );
        // Other scenarios keep the plan's interval.
        p.scenario = Scenario::SendToGroup;
        assert_eq!(p.interval_of(130), Some(1000.0));
    }

    #[test]
    fn events_round_trip_as_json_lines() {
        let event = Event::Connected {
            connected: 3,
            failed: vec![7],
            connect: Bucket::empty_step().export(1),
            seconds: 0.5,
        };
        let line = serde_json::to_string(&event).unwrap();
        assert!(line.starts_with(r#"{"event":"connected""#), "{line}");
        let back: Event = serde_json::from_str(&line).unwrap();
        assert!(matches!(back, Event::Connected { connected: 3, .. }));
        let command: Command = serde_json::from_str(r#"{"command":"stop","at_ms":5.0}"#).unwrap();
        assert!(matches!(command, Command::Stop { at_ms } if at_ms == 5.0));
    }
}
