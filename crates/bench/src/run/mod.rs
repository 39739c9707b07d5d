//! The coordinator of a scenario run: sets up the target (service, app server, peer),
//! starts the workers (in this process, or `--workers N` child processes), merges what
//! they report, applies Azure's stop rule after each step, samples the target's CPU and
//! memory, and writes the report, counters and chart.
//!
//! # Layout
//! - here: [`run`], a run in order (target, plan, workers, the two phases, the report,
//!   the outputs), and [`RunError`].
//! - `validate`: the flags clap cannot check.
//! - `target`: the target resolved from the flags: peer, cluster or one service, its app
//!   server, where clients connect and REST calls go, what is probed.
//! - `workers`: the workers as the coordinator sees them, and [`serve_worker`] (a child's side).
//! - `phases`: the connect phase and the sending phase, driven by the workers' events.
//! - `merge`: the workers' finals merged into the report; `rule`: Azure's rule for a step.
//! - `soak`: a soak's timetable of failures, its phases and memory series.
//! - `progress`: the live view on stderr.

mod merge;
mod phases;
mod progress;
mod rule;
mod soak;
mod target;
mod validate;
mod workers;

pub use workers::serve_worker;

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use switchyard_capacity::format;
use switchyard_capacity::report::Report;
use tokio::sync::mpsc;

use crate::cluster::{self, Snapshot};
use crate::procstat::{self, Sample};
use crate::report;
use crate::scenario::{Plan, RunArgs, Scenario, DEFAULT_ROOM_SIZE};
use crate::stats::{BucketExport, Live, StatefulCounts};
use crate::worker::Event;
use phases::{CountersFile, Phases};
use progress::Progress;
use target::Target;

/// How long a Default-mode cluster run waits for the app server to hold a connection on
/// every node (the nodes ask it within their 1 s heartbeat; it connects in well under 1 s).
const APP_SERVER_WAIT: Duration = Duration::from_secs(30);

/// A worker's final report: steps, seconds, errors.
type Final = (Vec<BucketExport>, Vec<BucketExport>, Vec<(String, u64)>);

/// A run that could not be set up or carried out.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct RunError(pub String);

impl From<String> for RunError {
    fn from(value: String) -> Self {
        RunError(value)
    }
}

/// The target's processes at one moment: the cluster's snapshot, and the CPU and memory of
/// the service and of the app server.
struct Moment {
    snapshot: Snapshot,
    service: Option<Sample>,
    app: Option<Sample>,
}

impl Moment {
    async fn take(target: &Target) -> Moment {
        let snapshot = target.probe.snapshot().await;
        Moment {
            service: snapshot.service(),
            app: target.app_pid.and_then(procstat::sample),
            snapshot,
        }
    }
}

/// Runs `scenario`; the report is written and printed before it returns.
pub async fn run(scenario: Scenario, args: &RunArgs) -> Result<Report, RunError> {
    validate::validate(scenario, args)?;
    let mut target = target::resolve_target(scenario, args)?;
    let plan = plan_of(scenario, args, &target);
    if target.mode == "default" && target.probe.nodes.len() > 1 {
        let counts = cluster::wait_for_app_servers(&target.probe, APP_SERVER_WAIT).await?;
        if !args.quiet {
            eprintln!("app-server connections per node: {counts:?}");
        }
    }
    let dashboard = match args.dashboard {
        true => {
            let base = target.probe.nodes[0].url.clone();
            let key = target
                .rest
                .as_ref()
                .and_then(|rest| rest.access_key.clone())
                .ok_or_else(|| RunError("--dashboard needs the service's access key".into()))?;
            Some(crate::dashboard::open(&base, &key, &plan.hub, args.trace).await?)
        }
        false => None,
    };
    let started_at = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
    let before = Moment::take(&target).await;

    let (events_tx, events) = mpsc::unbounded_channel::<(usize, Event)>();
    let workers = workers::start_workers(&plan, events_tx).await?;
    let mut phases = Phases {
        plan: &plan,
        args,
        live: vec![Live::default(); workers.len()],
        workers,
        events,
        progress: Progress::new(args.quiet, args.connections),
        counters: CountersFile::create(args.counters.as_ref())?,
    };
    let connect = phases.connect().await?;
    let connected_at = Moment::take(&target).await;
    phases.progress.connected(
        connect.connected,
        connect.failed.len() as u64,
        connect.seconds,
    );
    if connect.connected == 0 {
        phases.progress.finish();
        connect.print_errors(&plan);
        return Err(RunError(format!(
            "no connection succeeded; first errors are printed above (target {})",
            target::describe(&target.endpoint)
        )));
    }
    let sent = phases.send(&mut target, &connect).await?;
    let after = Moment::take(&target).await;
    phases.workers.clear();

    let live = phases::sum(&phases.live);
    let (report, errors) = merge::Measurements {
        plan: &plan,
        args,
        target: &target,
        connect: &connect,
        sent: &sent,
        moments: [&before, &connected_at, &after],
        dropped: live.dropped,
    }
    .report(started_at)?;
    if !errors.is_empty() {
        eprintln!("errors (count: kind):");
        for (kind, count) in &errors {
            eprintln!("  {count}: {kind}");
        }
    }
    if let Some(soak) = sent.soak.as_ref() {
        let failed = connect.failed.len() as u64;
        return soak.finish(report, &sent.phases, failed, &target.probe, args);
    }
    if let Some(dashboard) = &dashboard {
        println!("{}", dashboard.summary());
    }
    write_outputs(&report, args.summary_json.as_ref(), args.chart.as_ref())?;
    if args.stateful_reconnect {
        println!("{}", stateful_line(&live.stateful, &report));
    }
    Ok(report)
}

/// The plan every worker follows: the flags, with the scenario's defaults filled in.
fn plan_of(scenario: Scenario, args: &RunArgs, target: &Target) -> Plan {
    let senders = match args.senders {
        _ if !scenario.sends() => 0,
        Some(senders) => senders,
        // Big groups: Azure's guide has 20 senders (every receiver tracks each sender).
        None if scenario == Scenario::SendToGroup && args.groups.is_some() => {
            args.connections.min(20)
        }
        // One caller per group.
        None if scenario == Scenario::RestSendToGroup => match (args.group_size, args.groups) {
            (Some(size), _) => args.connections.div_ceil(size.max(1)),
            (None, groups) => groups.unwrap_or(1).max(1),
        },
        None => scenario.default_senders(args.connections),
    };
    let groups = args.groups.or((matches!(
        scenario,
        Scenario::JoinLeaveGroup | Scenario::RestJoinLeaveGroup
    ) && args.group_size.is_none())
    .then_some(10));
    let mut plan = Plan {
        scenario,
        hub: args.hub_for(scenario),
        endpoint: target.endpoint.clone(),
        rest: target.rest.clone(),
        transport: args.transport.clone(),
        protocol: args.protocol.clone(),
        connections: args.connections,
        senders,
        steps: if scenario.sends() { args.steps } else { 1 },
        step_seconds: args.duration.as_secs_f64(),
        warmup_seconds: args.warmup.as_secs_f64(),
        drain_seconds: args.drain.as_secs_f64(),
        message_size: args.message_size,
        interval_ms: args.send_interval.as_secs_f64() * 1000.0,
        group_size: args
            .group_size
            .or(scenario.is_chat_room().then_some(DEFAULT_ROOM_SIZE)),
        groups,
        connect_rate: args.connect_rate,
        max_connecting: args.max_connecting,
        source_addresses: args.source_addresses.clone(),
        workers: args.workers,
        worker: 0,
        reconnect: soak::enabled(args),
        stateful_reconnect: args.stateful_reconnect,
        drop_share: args.drop_share,
    };
    if scenario.is_chat_room() {
        plan.senders = plan.posters();
    }
    plan
}

/// One line on what stateful reconnect went through, with what it must not have cost
/// (lost or duplicated messages) and what it may (the service's CPU and memory).
fn stateful_line(counts: &StatefulCounts, report: &Report) -> String {
    let cpu = report
        .steps
        .iter()
        .filter_map(|s| s.service_cpu_us_per_delivery)
        .next_back()
        .map_or("-".to_owned(), |us| format!("{us:.1} µs/delivery"));
    // At the end of the last step, while every connection (and its buffers) is held.
    let rss = report
        .steps
        .last()
        .and_then(|s| s.service.as_ref())
        .map_or("-".to_owned(), |s| format::memory_kb(s.rss_kb));
    format!(
        "stateful reconnect: drops {}, reconnects {}, replayed by clients {}, duplicates dropped by clients {}, not agreed {}; lost {}, duplicated {}; service CPU {cpu}, service RSS {rss}",
        counts.drops,
        counts.reconnects,
        counts.replayed,
        counts.duplicates_dropped,
        counts.refused,
        report.counts.lost,
        report.counts.duplicated,
    )
}

/// The table on stdout, and the `--summary-json` and `--chart` files.
fn write_outputs(
    report: &Report,
    summary: Option<&PathBuf>,
    chart: Option<&PathBuf>,
) -> Result<(), RunError> {
    println!("{}", report::table(report));
    if let Some(path) = summary {
        let json = serde_json::to_string_pretty(report).expect("report serialises");
        std::fs::write(path, json + "\n")
            .map_err(|e| RunError(format!("--summary-json {}: {e}", path.display())))?;
    }
    if let Some(path) = chart {
        crate::chart::write_svg(report, path)
            .map_err(|e| RunError(format!("--chart {}: {e}", path.display())))?;
    }
    Ok(())
}
