//! The two phases of a run as the coordinator drives them from the workers' events: the
//! connect phase (every worker opens its share, then reports once), and the sending phase
//! (one common timetable; steps merged and judged as they end, the target sampled at each
//! step boundary, a soak's failures fired on time, until every worker's final report).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write as _;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use tokio::sync::mpsc;
use tokio::time::{sleep_until, Instant};

use super::progress::{current_step, Progress};
use super::rule::rule_passes;
use super::soak::{self, Note, Soak};
use super::target::Target;
use super::workers::WorkerHandle;
use super::{Final, RunError};
use crate::cluster::Snapshot;
use crate::procstat::{self, Sample};
use crate::report;
use crate::scenario::{Plan, RunArgs, Scenario};
use crate::soak::{Outage, PhaseCounts, Window};
use crate::stats::{Bucket, BucketExport, Live};
use crate::worker::{instant_at, now_ms, Command, Event};

/// Kinds of connect error printed when no connection succeeded.
const FIRST_ERRORS: usize = 10;

/// How the service refuses a serverless client on a hub it serves in Default mode (the
/// handshake error of Azure SignalR Service, which Switchyard answers in the same words).
const DEFAULT_MODE_REFUSAL: &str = "is now in 'Default' service mode";

/// The workers and what the phases share: the plan, the flags, the live counters, the
/// progress bar and the `--counters` file.
pub(super) struct Phases<'a> {
    pub plan: &'a Plan,
    pub args: &'a RunArgs,
    pub workers: Vec<WorkerHandle>,
    pub events: mpsc::UnboundedReceiver<(usize, Event)>,
    /// Each worker's latest cumulative counters.
    pub live: Vec<Live>,
    pub progress: Progress,
    pub counters: CountersFile,
}

/// The connect phase as the workers reported it.
pub(super) struct Connected {
    pub connected: u64,
    /// Global indices of the connections that failed, sorted.
    pub failed: Vec<u64>,
    /// Connect latencies (from each attempt's intended time).
    pub bucket: Bucket,
    /// Seconds from the first attempt to the last success.
    pub seconds: f64,
    /// What the failed attempts said, by kind.
    pub errors: BTreeMap<String, u64>,
}

impl Connected {
    /// The most frequent kinds of connect error on stderr, and what to do when the hub is
    /// in Default mode.
    pub fn print_errors(&self, plan: &Plan) {
        if self.errors.is_empty() {
            eprintln!("no connection succeeded, and none reported why");
            return;
        }
        let mut kinds: Vec<(&String, &u64)> = self.errors.iter().collect();
        kinds.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        eprintln!("connect errors (count: kind):");
        for (kind, count) in kinds.iter().take(FIRST_ERRORS) {
            eprintln!("  {count}: {kind}");
        }
        if kinds.len() > FIRST_ERRORS {
            eprintln!("  … and {} more kinds", kinds.len() - FIRST_ERRORS);
        }
        let default_mode = kinds
            .iter()
            .any(|(kind, _)| kind.contains(DEFAULT_MODE_REFUSAL));
        if default_mode && !plan.scenario.needs_app_server() {
            eprintln!(
                "hint: hub '{}' is in Default mode on this service: an app server has served it, \
                 and with `mode = auto` the hub stays in Default mode, where serverless clients \
                 are refused. Run {} on a hub no app server has served (--hub), or restart the \
                 service.",
                plan.hub,
                plan.scenario.name()
            );
        }
    }
}

/// Wall-clock milliseconds of the common timetable.
#[derive(Debug, Clone, Copy)]
pub(super) struct Clock {
    /// Warm-up starts.
    pub start_ms: f64,
    /// Step 1 starts.
    pub measure_ms: f64,
    pub step_ms: f64,
    pub steps: u32,
}

impl Clock {
    /// Sending ends.
    pub fn end_ms(&self) -> f64 {
        self.measure_ms + self.step_ms * f64::from(self.steps)
    }
}

/// The target at each step boundary (index 0: measuring starts).
#[derive(Default)]
pub(super) struct Samples {
    pub service: Vec<Option<Sample>>,
    pub snapshots: Vec<Snapshot>,
    pub app: Vec<Option<Sample>>,
    pub generator: Vec<Option<Sample>>,
}

/// What the sending phase leaves for the report.
pub(super) struct Sent {
    pub clock: Clock,
    pub samples: Samples,
    /// Every worker's final report.
    pub finals: Vec<Final>,
    /// A soak's counts per phase, per worker.
    pub phases: Vec<Vec<PhaseCounts>>,
    /// The step after which the run stopped (it failed Azure's rule).
    pub stopped_after: Option<u64>,
    pub soak: Option<Soak>,
}

/// The sending phase between two events.
struct Sending {
    clock: Clock,
    /// Connections that failed in the connect phase.
    failed: u64,
    samples: Samples,
    generator_pids: Vec<u32>,
    /// Steps as the workers report them, and how many have.
    merged: BTreeMap<u64, (Bucket, usize)>,
    finals: Vec<Option<Final>>,
    phases: Vec<Vec<PhaseCounts>>,
    stopped_after: Option<u64>,
    soak: Option<Soak>,
}

impl Phases<'_> {
    /// Waits for every worker's connect report.
    pub async fn connect(&mut self) -> Result<Connected, RunError> {
        let args = self.args;
        let deadline = Instant::now()
            + Duration::from_secs_f64(
                args.connections as f64 / args.connect_rate.max(0.001) + 120.0,
            );
        let mut phase = Connected {
            connected: 0,
            failed: Vec::new(),
            bucket: Bucket::empty_step(),
            seconds: 0.0,
            errors: BTreeMap::new(),
        };
        let mut waiting = self.workers.len();
        while waiting > 0 {
            let (index, event) = tokio::select! {
                event = self.events.recv() => event.ok_or_else(|| RunError("every worker exited".into()))?,
                _ = sleep_until(deadline) => return Err(RunError("connect phase did not finish in time".into())),
            };
            match event {
                Event::Connected {
                    connected,
                    failed,
                    connect,
                    seconds,
                    errors,
                } => {
                    phase.connected += connected;
                    phase.failed.extend(failed);
                    phase.bucket.merge(&connect)?;
                    phase.seconds = phase.seconds.max(seconds);
                    for (kind, count) in errors {
                        *phase.errors.entry(kind).or_insert(0) += count;
                    }
                    waiting -= 1;
                }
                Event::Live { live } => {
                    self.live[index] = live;
                    self.progress.connecting(&sum(&self.live));
                }
                Event::Failed { error } => {
                    return Err(RunError(format!("worker {index}: {error}")))
                }
                _ => {}
            }
        }
        phase.failed.sort_unstable();
        Ok(phase)
    }

    /// Starts the common timetable and runs it until every worker's final report.
    pub async fn send(
        &mut self,
        target: &mut Target,
        connect: &Connected,
    ) -> Result<Sent, RunError> {
        let start_ms = now_ms() + 1000.0;
        for w in &self.workers {
            w.send(Command::Start {
                start_ms,
                connected: connect.connected,
                failed: connect.failed.clone(),
            });
        }
        let plan = self.plan;
        let clock = Clock {
            start_ms,
            measure_ms: start_ms + plan.warmup_seconds * 1000.0,
            step_ms: plan.step_seconds * 1000.0,
            steps: plan.steps.max(1),
        };
        let (notes_tx, mut notes) = mpsc::unbounded_channel::<Note>();
        let window = Window {
            start_ms,
            measure_ms: clock.measure_ms,
            end_ms: clock.end_ms(),
        };
        let mut state = Sending {
            clock,
            failed: connect.failed.len() as u64,
            samples: Samples::default(),
            generator_pids: self.workers.iter().filter_map(WorkerHandle::pid).collect(),
            merged: BTreeMap::new(),
            finals: vec![None; self.workers.len()],
            phases: Vec::new(),
            stopped_after: None,
            soak: soak::enabled(self.args).then(|| Soak::new(self.args, target, window, notes_tx)),
        };
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let mut rss_tick = tokio::time::interval(
            state
                .soak
                .as_ref()
                .map_or(Duration::from_secs(3600), |s| s.rss_every),
        );
        self.progress
            .sending(plan.warmup_seconds + plan.send_seconds());
        // Workers end by themselves after the drain; this only bounds a stuck one.
        let deadline = instant_at(clock.end_ms() + plan.drain_seconds * 1000.0 + 60_000.0);
        loop {
            let next_sample = state.next_sample_at(plan.scenario);
            let sampling = state.samples.service.len() <= clock.steps as usize;
            let chaos_at = state.soak.as_ref().and_then(Soak::next_at);
            tokio::select! {
                // (The expression is evaluated even when disabled: a time an hour away.)
                _ = sleep_until(instant_at(chaos_at.unwrap_or(now_ms() + 3_600_000.0))), if chaos_at.is_some() => {
                    if let Some(soak) = state.soak.as_mut() {
                        soak.fire(target, &self.workers)?;
                    }
                }
                Some(note) = notes.recv() => {
                    if let Some(soak) = state.soak.as_mut() {
                        soak.note(note, &self.workers);
                    }
                }
                _ = rss_tick.tick(), if state.soak.is_some() => {
                    if let Some(soak) = state.soak.as_mut() {
                        soak.sample_rss(&target.probe).await;
                    }
                }
                _ = sleep_until(deadline) => {
                    return Err(RunError("a worker did not finish within a minute after the drain".into()));
                }
                _ = sleep_until(instant_at(next_sample)), if sampling => state.sample(target).await,
                _ = tick.tick() => {
                    let total = sum(&self.live);
                    self.counters.write(&total, plan, &clock);
                    self.progress.tick((now_ms() - clock.start_ms) / 1000.0, &total, plan, clock.measure_ms, clock.step_ms);
                }
                event = self.events.recv() => {
                    let Some((index, event)) = event else {
                        return Err(RunError("every worker stopped before its final report".into()));
                    };
                    if self.on_event(&mut state, index, event)? {
                        break;
                    }
                }
            }
        }
        self.progress.finish();
        self.counters.write(&sum(&self.live), plan, &clock);
        Ok(Sent {
            clock,
            samples: state.samples,
            finals: state.finals.into_iter().flatten().collect(),
            phases: state.phases,
            stopped_after: state.stopped_after,
            soak: state.soak,
        })
    }

    /// One event of the sending phase; true once every worker's final report is in.
    fn on_event(
        &mut self,
        state: &mut Sending,
        index: usize,
        event: Event,
    ) -> Result<bool, RunError> {
        match event {
            Event::Live { live } => self.live[index] = live,
            Event::Step { step } => self.on_step(state, step)?,
            Event::Sessions { outages } => self.on_sessions(state, outages),
            Event::Final {
                steps,
                seconds,
                errors,
                phases,
            } => {
                state.phases.push(phases);
                state.finals[index] = Some((steps, seconds, errors));
                return Ok(state.finals.iter().all(Option::is_some));
            }
            Event::Failed { .. } if state.finals[index].is_some() => {}
            Event::Failed { error } => return Err(RunError(format!("worker {index}: {error}"))),
            Event::Connected { .. } => {}
        }
        Ok(false)
    }

    /// A worker's counts of a step; once every worker's are in, the step is judged, and a
    /// failed step (before the last) stops sending at its end, unless `--all-steps`.
    fn on_step(&mut self, state: &mut Sending, step: BucketExport) -> Result<(), RunError> {
        let entry = state
            .merged
            .entry(step.index)
            .or_insert_with(|| (Bucket::empty_step(), 0));
        entry.0.merge(&step)?;
        entry.1 += 1;
        if entry.1 < self.workers.len() {
            return Ok(());
        }
        let dropped = sum(&self.live).dropped;
        let passed = rule_passes(&entry.0, state.failed + dropped, self.args.connections);
        let clock = state.clock;
        self.progress
            .step_done(step.index, clock.steps, &entry.0, passed);
        let last = step.index >= u64::from(clock.steps);
        if !passed && !self.args.all_steps && state.stopped_after.is_none() && !last {
            state.stopped_after = Some(step.index);
            let at_ms = clock.measure_ms + clock.step_ms * step.index as f64;
            for w in &self.workers {
                w.send(Command::Stop { at_ms });
            }
        }
        Ok(())
    }

    /// A soak: a worker's outages; once every worker's are in, every worker gets all of
    /// them, and the phases, to count its receivers.
    fn on_sessions(&mut self, state: &mut Sending, outages: Vec<Outage>) {
        let Some(soak) = state.soak.as_mut() else {
            return;
        };
        soak.outages.extend(outages);
        soak.sessions += 1;
        if soak.sessions == self.workers.len() {
            soak.settle_marks();
            for w in &self.workers {
                w.send(Command::Account {
                    outages: soak.outages.clone(),
                    phases: soak.marks.clone(),
                });
            }
        }
    }
}

impl Sending {
    /// When the target is sampled next: at the next step boundary, or for idle, shortly
    /// before the end (connections close at the end: sample while they are all held).
    fn next_sample_at(&self, scenario: Scenario) -> f64 {
        let clock = &self.clock;
        let taken = self.samples.service.len();
        let mut next = clock.measure_ms + clock.step_ms * taken as f64;
        if scenario == Scenario::Idle && taken == clock.steps as usize {
            next -= (clock.step_ms / 2.0).min(1000.0);
        }
        next
    }

    async fn sample(&mut self, target: &Target) {
        let snapshot = target.probe.snapshot().await;
        self.samples.service.push(snapshot.service());
        self.samples.snapshots.push(snapshot);
        self.samples
            .app
            .push(target.app_pid.and_then(procstat::sample));
        self.samples
            .generator
            .push(procstat::sample_sum(&self.generator_pids));
    }
}

/// `--counters`: Azure's bench-tool counters, a line a second.
pub(super) struct CountersFile(Option<File>);

impl CountersFile {
    pub fn create(path: Option<&PathBuf>) -> Result<CountersFile, RunError> {
        let file = match path {
            Some(path) => Some(
                File::create(path)
                    .map_err(|e| RunError(format!("--counters {}: {e}", path.display())))?,
            ),
            None => None,
        };
        Ok(CountersFile(file))
    }

    fn write(&mut self, live: &Live, plan: &Plan, clock: &Clock) {
        if let Some(file) = self.0.as_mut() {
            let step = current_step(now_ms(), clock.measure_ms, clock.step_ms, clock.steps);
            let line = report::counters_line(SystemTime::now(), &azure_counters(live, plan, step));
            let _ = writeln!(file, "{line}");
        }
    }
}

/// Every worker's live counters added up.
pub(super) fn sum(live: &[Live]) -> Live {
    let mut total = Live::default();
    for l in live {
        total.add(l);
    }
    total
}

/// The live counters in Azure's names; `step` is the step running now (0 = warm-up).
fn azure_counters(live: &Live, plan: &Plan, step: u32) -> report::LiveCounters {
    let mut counters = report::LiveCounters {
        sending_step: if step == 0 { 0 } else { plan.senders_at(step) },
        epoch: u64::from(step),
        connections_success: live.connected.saturating_sub(live.dropped),
        connections_failed: live.connect_failed + live.dropped,
        connections_reconnect: 0,
        sent: live.sent,
        received: live.received,
        sent_bytes: live.sent_bytes,
        received_bytes: live.received_bytes,
        ..Default::default()
    };
    for (t, s) in counters.buckets_v1.iter_mut().zip(&live.buckets_v1) {
        *t = *s;
    }
    for (t, s) in counters.buckets_v2.iter_mut().zip(&live.buckets_v2) {
        *t = *s;
    }
    counters
}
