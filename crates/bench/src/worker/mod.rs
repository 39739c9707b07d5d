//! One load-generator process: opens its share of the connections, then sends and receives
//! on the plan's timetable, counting everything in [`Stats`], and reports [`Event`]s to
//! the coordinator, which answers with [`Command`]s. With `--workers N` each worker is a
//! child process speaking JSON lines (stdin: plan, then commands; stdout: events).
//!
//! Time: every process on the machine shares the wall clock, so timetables and the `ts`
//! in messages are milliseconds since the UNIX epoch; latency = arrival − intended send.
//!
//! # Layout
//! - here: [`run`], a worker in order (connect, wait for the start, one task per connection
//!   and REST caller, report each step, drain, final report), and the messages.
//! - `shared`: what every task shares, the timetable, and how everything is counted.
//! - `connect`: the connect phase (negotiate, connect, join the group).
//! - `send`: a connection's task; `rest`: a REST caller's task; `soak`: a soak's connection
//!   task, which reconnects elsewhere when its node dies.

mod connect;
mod rest;
mod send;
mod shared;
mod soak;

pub use connect::group_name;

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use switchyard_client::connection::{self, Connection, Transport};
use switchyard_hub_protocol::Format;
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, Instant};

use crate::scenario::{Endpoint, Plan, Scenario};
use crate::soak::{Ledger, Outage, PhaseCounts, PhaseMark};
use crate::stats::{BucketExport, Live, LiveCounters, Stats};
use rest::REST_TIMEOUT;
use shared::{Schedule, Shared};

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
        /// What the failed attempts said, by kind (the coordinator prints them when no
        /// connection succeeded).
        #[serde(default)]
        errors: Vec<(String, u64)>,
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

pub fn parse_format(protocol: &str) -> Result<Format, String> {
    match protocol.to_ascii_lowercase().as_str() {
        "json" => Ok(Format::Json),
        "messagepack" | "msgpack" => Ok(Format::MessagePack),
        other => Err(format!("unknown protocol '{other}' (json or messagepack)")),
    }
}

/// The coordinator's word to the tasks: stop sending at, finish now, the nodes down.
struct Signals {
    stop: watch::Sender<f64>,
    finish: watch::Sender<bool>,
    nodes: watch::Sender<Vec<usize>>,
}

/// A task's end: a soak's connection hands back its ledger.
type Task = JoinHandle<Option<Ledger>>;

/// Runs one worker until its Final event is sent.
pub async fn run(
    plan: Plan,
    events: mpsc::UnboundedSender<Event>,
    mut commands: mpsc::UnboundedReceiver<Command>,
) {
    let (format, transport) = match wire_of(&plan) {
        Ok(wire) => wire,
        Err(error) => {
            let _ = events.send(Event::Failed { error });
            return;
        }
    };
    let live = Arc::new(LiveCounters::default());
    let ticker = tokio::spawn(tick_live(live.clone(), events.clone()));

    // 1. Connect this worker's share.
    let mut errors = Stats::new(0);
    let (connections, failed, connect, connect_seconds) =
        connect::connect_all(&plan, format, transport, &live, &mut errors).await;
    let _ = events.send(Event::Connected {
        connected: connections.len() as u64,
        failed,
        connect: connect.export(1),
        seconds: connect_seconds,
        errors: errors.errors.iter().map(|(k, v)| (k.clone(), *v)).collect(),
    });

    // 2. Wait for the common start.
    let Some((start_ms, connected, failed)) = wait_for_start(&mut commands).await else {
        ticker.abort();
        return;
    };
    let mut stats = Stats::new(plan.steps.max(1));
    stats.errors = std::mem::take(&mut errors.errors);
    let (shared, signals) = share(
        plan,
        (format, transport),
        live,
        stats,
        start_ms,
        (connected, failed),
        &connections,
    );

    // 3. Every connection (and REST caller) runs its own timetable.
    let ids_by_g: HashMap<u64, String> = connections
        .iter()
        .map(|(g, c)| (*g, c.connection_id().to_owned()))
        .collect();
    let mut tasks = connection_tasks(&shared, connections);
    if shared.plan.scenario.is_rest() {
        tasks.extend(rest_callers(&shared, &ids_by_g));
    }

    // 4. Report each step shortly after it ends; honour Stop; then drain and finish.
    follow(&shared, &signals, &events, &mut commands).await;
    let _ = signals.finish.send(true);
    let mut ledgers = Vec::new();
    for task in tasks {
        if let Ok(Some(ledger)) = task.await {
            ledgers.push(ledger);
        }
    }
    ticker.abort();
    let phases = if shared.plan.reconnect {
        account(&shared, &ledgers, &events, &mut commands).await
    } else {
        Vec::new()
    };
    send_final(&shared, &events, phases);
}

/// The plan's protocol and transport, or why they are not known.
fn wire_of(plan: &Plan) -> Result<(Format, Transport), String> {
    let format = parse_format(&plan.protocol)?;
    let transport = Transport::from_str(&plan.transport).map_err(|_| {
        format!(
            "unknown transport '{}' (websockets, serversentevents, longpolling)",
            plan.transport
        )
    })?;
    Ok((format, transport))
}

/// Sends the live counters once a second, until the coordinator is gone.
async fn tick_live(live: Arc<LiveCounters>, events: mpsc::UnboundedSender<Event>) {
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

/// The coordinator's Start (`None` when it is gone first).
async fn wait_for_start(
    commands: &mut mpsc::UnboundedReceiver<Command>,
) -> Option<(f64, u64, Vec<u64>)> {
    loop {
        match commands.recv().await? {
            Command::Start {
                start_ms,
                connected,
                failed,
            } => return Some((start_ms, connected, failed)),
            Command::Stop { .. } | Command::Nodes { .. } | Command::Account { .. } => continue,
        }
    }
}

/// What the tasks share, once the start is known, and the signals to them. The counts are
/// every worker's: connections connected, and the global indices of those that failed.
fn share(
    plan: Plan,
    (format, transport): (Format, Transport),
    live: Arc<LiveCounters>,
    stats: Stats,
    start_ms: f64,
    (connected, mut failed): (u64, Vec<u64>),
    connections: &[(u64, Connection)],
) -> (Arc<Shared>, Signals) {
    let schedule = Schedule::new(&plan, start_ms);
    let (stop_tx, stop_rx) = watch::channel(f64::INFINITY);
    let (finish_tx, finish_rx) = watch::channel(false);
    let (nodes_tx, nodes_rx) = watch::channel(Vec::new());
    failed.sort_unstable();
    let mut group_members = HashMap::new();
    if plan.scenario.uses_groups() {
        for g in (0..plan.connections).filter(|g| failed.binary_search(g).is_err()) {
            if let Some(group) = plan.group_of(g) {
                *group_members.entry(group).or_insert(0u64) += 1;
            }
        }
    }
    let node_count = nodes_of(&plan);
    let node_load: Vec<std::sync::atomic::AtomicU64> = (0..node_count)
        .map(|_| std::sync::atomic::AtomicU64::new(0))
        .collect();
    for (g, _) in connections {
        node_load[crate::cluster::node_of(*g, node_count)].fetch_add(1, Relaxed);
    }
    let shared = Arc::new(Shared {
        nodes_down: nodes_rx,
        node_load,
        transport,
        http: connect::clients_by_address(&plan.source_addresses),
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
    let signals = Signals {
        stop: stop_tx,
        finish: finish_tx,
        nodes: nodes_tx,
    };
    (shared, signals)
}

/// The service bases clients spread over (1 through an app server's negotiate).
fn nodes_of(plan: &Plan) -> usize {
    match &plan.endpoint {
        Endpoint::Service { bases, .. } => bases.len().max(1),
        Endpoint::Hub { .. } => 1,
    }
}

/// A task per connection: a soak's, or one that sends and counts.
fn connection_tasks(shared: &Arc<Shared>, connections: Vec<(u64, Connection)>) -> Vec<Task> {
    let node_count = nodes_of(&shared.plan);
    let ids: Vec<String> = connections
        .iter()
        .map(|(_, c)| c.connection_id().to_owned())
        .collect();
    let count = connections.len();
    let mut tasks = Vec::new();
    // send-to-connection: connection g (of this worker's g ≡ w mod W) sends to g + W, which is
    // on another node unless W is a multiple of the node count.
    for (i, (g, conn)) in connections.into_iter().enumerate() {
        if shared.plan.reconnect {
            let node = crate::cluster::node_of(g, node_count);
            tasks.push(tokio::spawn(soak::soak_task(shared.clone(), g, conn, node)));
            continue;
        }
        let target = ids.get((i + 1) % count.max(1)).cloned().unwrap_or_default();
        let shared = shared.clone();
        tasks.push(tokio::spawn(async move {
            send::connection_task(shared, g, conn, target).await;
            None
        }));
    }
    tasks
}

/// A task per REST caller this worker owns; `ids_by_g`: this worker's connections' ids.
fn rest_callers(shared: &Arc<Shared>, ids_by_g: &HashMap<u64, String>) -> Vec<Task> {
    // Not bound to the source addresses: a REST connection needs no spreading (a few
    // hundred keep-alive connections at most), and reqwest binds with a port scan of
    // every socket on the address, which at ~17,000 per address took most of the
    // generator's CPU and failed calls (the WebSockets defer their port choice instead).
    let http = connection::http_client(None);
    let permits = Arc::new(Semaphore::new(2048));
    let plan = &shared.plan;
    let per_connection = matches!(
        plan.scenario,
        Scenario::RestSendToConnection | Scenario::RestJoinLeaveGroup
    );
    // A chat room's posters are its members: poster g calls for connection g.
    let callers: Vec<u64> = if plan.scenario.is_chat_room() {
        (0..plan.connections)
            .filter(|&g| plan.interval_of(g).is_some() && ids_by_g.contains_key(&g))
            .collect()
    } else {
        (0..plan.senders).collect()
    };
    let mut tasks = Vec::new();
    for c in callers.into_iter().filter(|&c| plan.owns(c)) {
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
            rest::rest_caller(shared, c, connection_id, http, permits).await;
            None
        }));
    }
    tasks
}

/// Reports each step shortly after it ends and passes the coordinator's Stop and Nodes on,
/// until sending and the drain are over (or the coordinator is gone).
async fn follow(
    shared: &Shared,
    signals: &Signals,
    events: &mpsc::UnboundedSender<Event>,
    commands: &mut mpsc::UnboundedReceiver<Command>,
) {
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
                    let _ = signals.stop.send(stop_ms);
                }
                Some(Command::Nodes { down }) => {
                    let _ = signals.nodes.send(down);
                }
                Some(Command::Start { .. } | Command::Account { .. }) => {}
                // The coordinator is gone: stop at once.
                None => break,
            },
        }
    }
}

/// A soak: sends this worker's outages, waits for everyone's and the phases, and counts
/// its receivers per phase.
async fn account(
    shared: &Shared,
    ledgers: &[Ledger],
    events: &mpsc::UnboundedSender<Event>,
    commands: &mut mpsc::UnboundedReceiver<Command>,
) -> Vec<PhaseCounts> {
    // Every worker's outages are needed to know what each receiver should have had.
    let outages = ledgers
        .iter()
        .flat_map(|l| l.outages.iter().copied())
        .collect();
    let _ = events.send(Event::Sessions { outages });
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
            return crate::soak::account(
                &shared.plan,
                window,
                &shared.failed,
                &by_g,
                &marks,
                ledgers,
            );
        }
    }
    Vec::new()
}

/// The last live counters and the final report.
fn send_final(shared: &Shared, events: &mpsc::UnboundedSender<Event>, phases: Vec<PhaseCounts>) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Bucket;

    #[test]
    fn events_round_trip_as_json_lines() {
        let event = Event::Connected {
            connected: 3,
            failed: vec![7],
            connect: Bucket::empty_step().export(1),
            seconds: 0.5,
            errors: vec![("connect: refused".into(), 2)],
        };
        let line = serde_json::to_string(&event).unwrap();
        assert!(line.starts_with(r#"{"event":"connected""#), "{line}");
        let back: Event = serde_json::from_str(&line).unwrap();
        assert!(matches!(back, Event::Connected { connected: 3, .. }));
        let command: Command = serde_json::from_str(r#"{"command":"stop","at_ms":5.0}"#).unwrap();
        assert!(matches!(command, Command::Stop { at_ms } if at_ms == 5.0));
    }
}
