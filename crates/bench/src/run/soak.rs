//! A soak's coordinator side: the timetable of failures (nodes and Redis killed and started
//! again), the phases they mark, the outages the workers report, and the memory series.

use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::target::{local_port_of, Target};
use super::workers::WorkerHandle;
use super::RunError;
use crate::cluster::{self, Probe};
use crate::procstat;
use switchyard_capacity::report::Report;

use crate::scenario::RunArgs;
use crate::soak::{self, Outage, PhaseCounts, PhaseMark, RssRow};
use crate::worker::{now_ms, Command};

/// Whether the run is a soak (failures on a timetable).
pub(super) fn enabled(args: &RunArgs) -> bool {
    args.kill_node_every.is_some() || args.restart_redis_at.is_some()
}

/// What a soak does, at its time.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Chaos {
    KillNode(usize),
    StartNode(usize),
    KillRedis,
    StartRedis,
}

/// From a soak's background checks to the run loop.
#[derive(Debug)]
pub(super) enum Note {
    /// The node started again serves (holds an app-server connection, or its backplane
    /// answers): clients may connect there again.
    NodeServing(usize),
    /// An event is over and traffic has settled.
    Settled,
}

/// A soak's coordinator side: the failures' timetable, the phases, the outages the workers
/// report, and the memory series.
pub(super) struct Soak {
    /// Pending events, in time order.
    timetable: std::collections::VecDeque<(f64, Chaos)>,
    pub(super) marks: Vec<PhaseMark>,
    down: Vec<usize>,
    /// Events not yet settled: "steady" only when none is.
    busy: u32,
    pub(super) outages: Vec<Outage>,
    pub(super) sessions: usize,
    rss: Vec<RssRow>,
    pub(super) rss_every: Duration,
    pub(super) window: soak::Window,
    notes: mpsc::UnboundedSender<Note>,
    default_mode: bool,
    bin: PathBuf,
}

impl Soak {
    pub(super) fn new(
        args: &RunArgs,
        target: &Target,
        window: soak::Window,
        notes: mpsc::UnboundedSender<Note>,
    ) -> Soak {
        let nodes = target.probe.nodes.len();
        // Room after each event for the node (or Redis) to come back and settle before
        // sending ends, so every phase is complete.
        let margin = 10_000.0;
        let mut timetable = Vec::new();
        if let Some(every) = args.kill_node_every {
            let every = every.as_secs_f64() * 1000.0;
            let down = args.node_down_for.as_secs_f64() * 1000.0;
            // Nodes 2..N in turn (index 1..N-1): node 1 carries the app server's
            // connections to the others and the REST calls.
            for i in 1u64.. {
                let at = window.measure_ms + every * i as f64;
                if at + down + margin > window.end_ms {
                    break;
                }
                let node = ((i - 1) % (nodes as u64 - 1) + 1) as usize;
                timetable.push((at, Chaos::KillNode(node)));
                timetable.push((at + down, Chaos::StartNode(node)));
            }
        }
        if let Some(at) = args.restart_redis_at {
            let at = window.measure_ms + at.as_secs_f64() * 1000.0;
            let down = args.redis_down_for.as_secs_f64() * 1000.0;
            if at + down + margin <= window.end_ms {
                timetable.push((at, Chaos::KillRedis));
                timetable.push((at + down, Chaos::StartRedis));
            } else {
                eprintln!(
                    "--restart-redis-at: too late in the run (after {:.0} s of sending), skipped",
                    (window.end_ms - window.measure_ms) / 1000.0
                );
            }
        }
        timetable.sort_by(|a, b| a.0.total_cmp(&b.0));
        Soak {
            timetable: timetable.into(),
            marks: vec![PhaseMark {
                start_ms: window.measure_ms,
                name: "steady".into(),
            }],
            down: Vec::new(),
            busy: 0,
            outages: Vec::new(),
            sessions: 0,
            rss: Vec::new(),
            rss_every: args.rss_every.unwrap_or(Duration::from_secs(15)),
            window,
            notes,
            default_mode: target.mode == "default",
            bin: args.service_bin.clone().unwrap_or_default(),
        }
    }

    pub(super) fn next_at(&self) -> Option<f64> {
        self.timetable.front().map(|(at, _)| *at)
    }

    fn clock(&self) -> String {
        let s = ((now_ms() - self.window.measure_ms) / 1000.0).max(0.0) as u64;
        format!("{:02}:{:02}", s / 60, s % 60)
    }

    fn mark(&mut self, name: String) {
        println!("[{}] phase: {name}", self.clock());
        self.marks.push(PhaseMark {
            start_ms: now_ms(),
            name,
        });
    }

    fn tell_workers(&self, workers: &[WorkerHandle]) {
        for w in workers {
            w.send(Command::Nodes {
                down: self.down.clone(),
            });
        }
    }

    /// Runs the next event of the timetable.
    pub(super) fn fire(
        &mut self,
        target: &mut Target,
        workers: &[WorkerHandle],
    ) -> Result<(), RunError> {
        let Some((_, event)) = self.timetable.pop_front() else {
            return Ok(());
        };
        match event {
            Chaos::KillNode(i) => {
                let node = &mut target.probe.nodes[i];
                let pid = node
                    .pid
                    .take()
                    .ok_or_else(|| RunError(format!("{} has no pid", node.name)))?;
                let name = node.name.clone();
                // The phase starts before the kill: its clients see the drop at once.
                self.busy += 1;
                self.mark(format!("{name} down"));
                target._children.kill(pid)?;
                println!("[{}] SIGKILL {name} (pid {pid})", self.clock());
                self.down.push(i);
                self.tell_workers(workers);
            }
            Chaos::StartNode(i) => {
                let redis = target
                    .probe
                    .redis
                    .as_ref()
                    .map(|r| r.url.clone())
                    .unwrap_or_default();
                let node = &target.probe.nodes[i];
                let (name, url) = (node.name.clone(), node.url.clone());
                let port = url::Url::parse(&url)
                    .ok()
                    .and_then(|u| u.port())
                    .ok_or_else(|| RunError(format!("{name}: no port in {url}")))?;
                let started = target
                    ._children
                    .restart_node(&self.bin, &redis, &name, port)?;
                target.probe.nodes[i].pid = Some(started.pid);
                println!(
                    "[{}] started {name} again (pid {}, port {port})",
                    self.clock(),
                    started.pid
                );
                self.mark(format!("{name} back"));
                let (http, notes, default_mode) = (
                    target.probe.http.clone(),
                    self.notes.clone(),
                    self.default_mode,
                );
                tokio::spawn(async move {
                    // Default mode: clients there are refused until the app server (asked by
                    // node 1) has connected to it. Bounded: after a minute clients may try
                    // anyway (a refusal sends them elsewhere).
                    let deadline = Instant::now() + Duration::from_secs(60);
                    while Instant::now() < deadline {
                        let ready = if default_mode {
                            cluster::serves_app_server(&http, &url).await
                        } else {
                            cluster::healthy(&http, &url).await
                        };
                        if ready {
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    let _ = notes.send(Note::NodeServing(i));
                    tokio::time::sleep(soak::SETTLE).await;
                    let _ = notes.send(Note::Settled);
                });
            }
            Chaos::KillRedis => {
                let redis = target
                    .probe
                    .redis
                    .as_mut()
                    .ok_or_else(|| RunError("no Redis".into()))?;
                let pid = redis
                    .pid
                    .take()
                    .ok_or_else(|| RunError("Redis has no pid".into()))?;
                self.busy += 1;
                self.mark("redis down".into());
                target._children.kill(pid)?;
                println!("[{}] SIGKILL redis-server (pid {pid})", self.clock());
                let http = target.probe.http.clone();
                let urls: Vec<String> = target.probe.nodes.iter().map(|n| n.url.clone()).collect();
                let notes = self.notes.clone();
                tokio::spawn(async move {
                    // Over when every node has noticed (its health said degraded: a node
                    // healthy right after the restart may not have seen it yet, and
                    // resubscribes later) and every node's backplane answers again. A node
                    // that shows nothing within 10 s is taken as having noticed.
                    let noticed_by = Instant::now() + Duration::from_secs(10);
                    let mut noticed = vec![false; urls.len()];
                    while Instant::now() < noticed_by && noticed.iter().any(|n| !n) {
                        for (url, seen) in urls.iter().zip(noticed.iter_mut()) {
                            *seen |= !cluster::healthy(&http, url).await;
                        }
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    let deadline = Instant::now() + Duration::from_secs(60);
                    while Instant::now() < deadline {
                        let mut all = true;
                        for url in &urls {
                            all &= cluster::healthy(&http, url).await;
                        }
                        if all {
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    tokio::time::sleep(soak::SETTLE).await;
                    let _ = notes.send(Note::Settled);
                });
            }
            Chaos::StartRedis => {
                let redis = target
                    .probe
                    .redis
                    .as_mut()
                    .ok_or_else(|| RunError("no Redis".into()))?;
                let port = local_port_of(&redis.url)
                    .ok_or_else(|| RunError(format!("no port in {}", redis.url)))?;
                let started = target._children.start_redis_on(port)?;
                redis.pid = Some(started.pid);
                println!(
                    "[{}] started redis-server again (pid {}, port {port})",
                    self.clock(),
                    started.pid
                );
                self.mark("redis back".into());
            }
        }
        Ok(())
    }

    pub(super) fn note(&mut self, note: Note, workers: &[WorkerHandle]) {
        match note {
            Note::NodeServing(i) => {
                self.down.retain(|&d| d != i);
                self.tell_workers(workers);
                println!("[{}] node {} serves again", self.clock(), i + 1);
            }
            Note::Settled => {
                self.busy = self.busy.saturating_sub(1);
                if self.busy == 0 {
                    self.mark("steady".into());
                }
            }
        }
    }

    /// Marks after sending ended mean nothing (no post is due then).
    pub(super) fn settle_marks(&mut self) {
        let end = self.window.end_ms;
        self.marks.retain(|m| m.start_ms < end);
    }

    pub(super) async fn sample_rss(&mut self, probe: &Probe) {
        let mut nodes = Vec::new();
        for node in &probe.nodes {
            let rss = node.pid.and_then(procstat::sample).map(|s| s.rss_kb);
            let clients = match rss {
                Some(_) => cluster::client_connections_of(&probe.http, &node.url).await,
                None => None,
            };
            nodes.push((rss, clients));
        }
        let redis_kb = probe
            .redis
            .as_ref()
            .and_then(|r| r.pid)
            .and_then(procstat::sample)
            .map(|s| s.rss_kb);
        self.rss.push(RssRow {
            at_s: (now_ms() - self.window.measure_ms) / 1000.0,
            nodes,
            redis_kb,
        });
    }

    /// Every worker's phases, summed.
    fn merge(&self, finals: &[Vec<PhaseCounts>]) -> Result<Vec<PhaseCounts>, RunError> {
        let mut phases = vec![PhaseCounts::default(); self.marks.len()];
        for worker in finals {
            for (total, counts) in phases.iter_mut().zip(worker) {
                total.add(counts)?;
            }
        }
        Ok(phases)
    }

    /// The end of a soak: the report's counts become the soak's (the static expectation,
    /// every room member all the time, does not hold with failures), then the outputs, the
    /// phase table and the memory series.
    pub(super) fn finish(
        &self,
        mut report: Report,
        finals: &[Vec<PhaseCounts>],
        failed: u64,
        probe: &Probe,
        args: &RunArgs,
    ) -> Result<Report, RunError> {
        let phases = self.merge(finals)?;
        let all = phases.iter().fold(PhaseCounts::default(), |mut a, c| {
            let _ = a.add(c);
            a
        });
        let not_back: u64 = phases.iter().map(|c| c.not_reconnected).sum();
        for counts in std::iter::once(&mut report.counts)
            .chain(report.steps.iter_mut().map(|s| &mut s.counts))
        {
            counts.expected = all.expected;
            counts.received = all.delivered;
            counts.lost = all.lost();
            counts.duplicated = all.duplicated;
            counts.reordered = all.reordered;
            counts.connections_failed = failed + not_back;
        }
        report.passed = soak::passed(&self.marks, &phases) && failed == 0;
        super::write_outputs(&report, args.summary_json.as_ref(), args.chart.as_ref())?;
        self.print(&phases, probe, args.rss_csv.as_ref())?;
        if let Some(path) = &args.soak_json {
            let names = probe.nodes.iter().map(|n| n.name.clone()).collect();
            let out =
                soak::SoakReport::new(&self.marks, &phases, self.window, names, self.rss.clone());
            let json = serde_json::to_string_pretty(&out).expect("the soak report serialises");
            std::fs::write(path, json + "\n")
                .map_err(|e| RunError(format!("--soak-json {}: {e}", path.display())))?;
        }
        Ok(report)
    }

    fn print(
        &self,
        phases: &[PhaseCounts],
        probe: &Probe,
        csv: Option<&PathBuf>,
    ) -> Result<(), RunError> {
        println!(
            "{}",
            soak::phase_table(
                &self.marks,
                phases,
                self.window.measure_ms,
                self.window.end_ms
            )
        );
        let names: Vec<String> = probe.nodes.iter().map(|n| n.name.clone()).collect();
        println!(
            "{}",
            soak::rss_table(&names, &self.rss, &self.marks, self.window.measure_ms)
        );
        if let Some(path) = csv {
            std::fs::write(path, soak::rss_csv(&names, &self.rss))
                .map_err(|e| RunError(format!("--rss-csv {}: {e}", path.display())))?;
        }
        Ok(())
    }
}
