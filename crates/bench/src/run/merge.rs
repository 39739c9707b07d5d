//! The workers' final reports merged into the run's [`Report`]: steps, the per-second
//! timeline, the cluster's nodes and Redis, and the process usage of each step.

use std::collections::BTreeMap;

use switchyard_capacity::report::{Cluster, Counts, ProcessUsage, Report, Second, Step};

use super::phases::{Connected, Sent};
use super::rule::rule_passes;
use super::target::Target;
use super::{Moment, RunError};
use crate::cluster;
use crate::procstat::{self, Sample};
use crate::report;
use crate::scenario::{Plan, RunArgs, Scenario};
use crate::stats::Bucket;

/// Everything a run measured, to be merged into its report.
pub(super) struct Measurements<'a> {
    pub plan: &'a Plan,
    pub args: &'a RunArgs,
    pub target: &'a Target,
    pub connect: &'a Connected,
    pub sent: &'a Sent,
    /// The target before the connect phase, after it, and after sending.
    pub moments: [&'a Moment; 3],
    /// Connections dropped during the run (every worker's live count).
    pub dropped: u64,
}

/// The workers' steps, seconds and errors, added up.
struct Merged {
    steps: Vec<Bucket>,
    seconds: Vec<Bucket>,
    errors: BTreeMap<String, u64>,
}

impl Measurements<'_> {
    /// The report, and the errors the workers saw (kind → count).
    pub fn report(&self, started_at: String) -> Result<(Report, BTreeMap<String, u64>), RunError> {
        let scenario = self.plan.scenario;
        let (args, plan, target, connect) = (self.args, self.plan, self.target, self.connect);
        let [before, _, after] = self.moments;
        let merged = self.merge()?;
        let ran_steps = self
            .sent
            .stopped_after
            .unwrap_or(u64::from(self.sent.clock.steps)) as usize;
        let steps = self.steps(&merged.steps, ran_steps);
        let last_passing = steps
            .iter()
            .take_while(|s| s.passed)
            .last()
            .map(|s| s.index);
        let mut total = Bucket::empty_step();
        for bucket in merged.steps.iter().take(ran_steps) {
            total.add(bucket)?;
        }
        let total_counts = counts(&total, connect.failed.len() as u64, scenario);
        let whole = |before: &Option<Sample>, after: &Option<Sample>| -> Option<ProcessUsage> {
            Some(procstat::usage(before.as_ref()?, after.as_ref()?))
        };
        let cluster = target
            .clustered()
            .then(|| self.cluster(ran_steps, total_counts.sent));
        let mut report = Report {
            tool: format!("switchyard-bench {}", env!("CARGO_PKG_VERSION")),
            scenario: scenario.name().to_owned(),
            target: target.name.clone(),
            mode: target.mode.to_owned(),
            transport: args.transport.to_ascii_lowercase(),
            protocol: args.protocol.to_ascii_lowercase(),
            connections: args.connections,
            message_size: args.message_size,
            send_interval_ms: plan.interval_ms,
            group_size: plan.group_size,
            groups: plan.groups,
            workers: args.workers as usize,
            started_at,
            // Measured time: the warm-up is neither counted nor timed.
            seconds: steps.iter().map(|s| s.seconds).sum(),
            latency: report::latency(&total.latency),
            counts: total_counts,
            passed: self.sent.stopped_after.is_none()
                && last_passing == Some(ran_steps)
                && steps.iter().all(|s| {
                    s.counts.lost == 0 && s.counts.duplicated == 0 && s.counts.reordered == 0
                })
                && connect.failed.is_empty()
                && self.dropped == 0,
            last_passing_step: last_passing,
            steps,
            timeline: self.timeline(&merged.seconds),
            connects_per_s: (connect.seconds > 0.0)
                .then(|| connect.connected as f64 / connect.seconds),
            service_rss_per_connection_bytes: self.rss_per_connection(),
            service: whole(&before.service, &after.service),
            app_server: whole(&before.app, &after.app),
            azure_unit: None,
            cluster,
        };
        report.azure_unit = switchyard_capacity::plan::azure_unit(&report);
        Ok((report, merged.errors))
    }

    /// Every worker's steps and seconds into one bucket each; their errors added up.
    fn merge(&self) -> Result<Merged, RunError> {
        let mut merged = Merged {
            steps: (0..self.sent.clock.steps)
                .map(|_| Bucket::empty_step())
                .collect(),
            seconds: Vec::new(),
            errors: BTreeMap::new(),
        };
        for (worker_steps, worker_seconds, worker_errors) in &self.sent.finals {
            for s in worker_steps {
                let i = (s.index as usize).wrapping_sub(1);
                if let Some(bucket) = merged.steps.get_mut(i) {
                    bucket.merge(s)?;
                }
            }
            for s in worker_seconds {
                let i = s.index as usize;
                if merged.seconds.len() <= i {
                    merged.seconds.resize_with(i + 1, Bucket::empty_second);
                }
                merged.seconds[i].merge(s)?;
            }
            for (kind, count) in worker_errors {
                *merged.errors.entry(kind.clone()).or_insert(0) += count;
            }
        }
        if self.plan.scenario == Scenario::ConnectRate {
            // The measurement is the connect phase itself.
            merged.steps[0] = self.connect.bucket.clone();
            merged.steps[0].dropped = self.dropped;
        }
        Ok(merged)
    }

    /// The report's steps, the first `ran` of `buckets`.
    fn steps(&self, buckets: &[Bucket], ran: usize) -> Vec<Step> {
        let (scenario, plan) = (self.plan.scenario, self.plan);
        let [before, connected, _] = self.moments;
        let samples = &self.sent.samples;
        let failed = self.connect.failed.len() as u64;
        let connect_rate = scenario == Scenario::ConnectRate;
        // Drops before the first step (warm-up) are in the live total, not in any step.
        let step_drops: u64 = buckets.iter().take(ran).map(|b| b.dropped).sum();
        let mut dropped_so_far = self.dropped.saturating_sub(step_drops);
        let mut steps = Vec::new();
        for (i, bucket) in buckets.iter().enumerate().take(ran) {
            let index = i + 1;
            dropped_so_far += bucket.dropped;
            let usage = |samples: &[Option<Sample>]| match (samples.get(i), samples.get(i + 1)) {
                (Some(Some(a)), Some(Some(b))) => Some(procstat::usage(a, b)),
                _ => None,
            };
            let connect_phase = |a: &Option<Sample>, b: &Option<Sample>| match (a, b) {
                (Some(a), Some(b)) => Some(procstat::usage(a, b)),
                _ => None,
            };
            // connect-rate measures the connect phase: its usage is that phase's.
            let (service, app_server) = if connect_rate {
                (
                    connect_phase(&before.service, &connected.service),
                    connect_phase(&before.app, &connected.app),
                )
            } else {
                (usage(&samples.service), usage(&samples.app))
            };
            let seconds = if connect_rate {
                self.connect.seconds
            } else {
                plan.step_seconds
            };
            let counts = counts(bucket, failed, scenario);
            let cpu_per_delivery = service
                .as_ref()
                .filter(|_| counts.received > 0)
                .map(|u| u.cpu_seconds * 1e6 / counts.received as f64);
            let redis = if connect_rate {
                cluster::redis_usage(&before.snapshot, &connected.snapshot, counts.sent)
            } else {
                match (samples.snapshots.get(i), samples.snapshots.get(i + 1)) {
                    (Some(a), Some(b)) => cluster::redis_usage(a, b, counts.sent),
                    _ => None,
                }
            };
            steps.push(Step {
                redis,
                index,
                senders: plan.senders_at(index as u32),
                connections: self.connect.connected.saturating_sub(dropped_so_far),
                seconds,
                latency: report::latency(&bucket.latency),
                inbound_per_s: counts.sent as f64 / seconds.max(1e-9),
                outbound_per_s: counts.received as f64 / seconds.max(1e-9),
                passed: rule_passes(bucket, failed + dropped_so_far, self.args.connections),
                service,
                app_server,
                service_cpu_us_per_delivery: cpu_per_delivery,
                generator: if connect_rate {
                    None
                } else {
                    usage(&samples.generator)
                },
                counts,
            });
        }
        steps
    }

    /// The run second by second (from the merged per-second buckets).
    fn timeline(&self, seconds: &[Bucket]) -> Vec<Second> {
        let clock = &self.sent.clock;
        seconds
            .iter()
            .enumerate()
            .map(|(second, b)| {
                let ms = |q: f64| b.latency.value_at_quantile(q) as f64 / 1000.0;
                Second {
                    second: second as u64,
                    step: ((second as f64 * 1000.0 / clock.step_ms) as usize + 1)
                        .min(clock.steps as usize),
                    sent: b.sent,
                    received: b.received,
                    p50_ms: ms(0.5),
                    p99_ms: ms(0.99),
                    max_ms: b.latency.max() as f64 / 1000.0,
                }
            })
            .collect()
    }

    /// Each node's connections and usage, and Redis's, over the measured window.
    fn cluster(&self, ran_steps: usize, messages_sent: u64) -> Cluster {
        let (target, snapshots) = (self.target, &self.sent.samples.snapshots);
        let [before, connected, after] = self.moments;
        let measured = if self.plan.scenario == Scenario::ConnectRate {
            Some((&before.snapshot, &connected.snapshot))
        } else {
            snapshots
                .first()
                .zip(snapshots.get(ran_steps).or(snapshots.last()))
        };
        let nodes = target.probe.nodes.len();
        let mut per_node = vec![0u64; nodes];
        let failed = &self.connect.failed;
        for g in (0..self.args.connections).filter(|g| failed.binary_search(g).is_err()) {
            per_node[cluster::node_of(g, nodes)] += 1;
        }
        Cluster {
            nodes: cluster::node_usage(
                &target.probe,
                (&before.snapshot, &after.snapshot),
                measured,
                &per_node,
            ),
            rest_nodes: target.rest_nodes.clone(),
            redis: measured.and_then(|(a, b)| cluster::redis_usage(a, b, messages_sent)),
        }
    }

    /// Idle: the service's memory per held connection, measured at the end of the hold,
    /// while every connection is still open.
    fn rss_per_connection(&self) -> Option<f64> {
        let before = self.moments[0];
        let held = self.sent.samples.service.last();
        match (self.plan.scenario, &before.service, held) {
            (Scenario::Idle, Some(before), Some(Some(held))) => Some(
                (held.rss_kb as f64 - before.rss_kb as f64) * 1024.0
                    / self.connect.connected.saturating_sub(self.dropped).max(1) as f64,
            ),
            _ => None,
        }
    }
}

/// Counts of a merged bucket (lost = expected − received).
fn counts(bucket: &Bucket, connect_failed: u64, scenario: Scenario) -> Counts {
    Counts {
        sent: bucket.sent,
        expected: bucket.expected,
        received: bucket.received,
        lost: bucket.expected.saturating_sub(bucket.received),
        duplicated: bucket.duplicated,
        reordered: bucket.reordered,
        connections_failed: if scenario == Scenario::ConnectRate {
            bucket.expected.saturating_sub(bucket.received) + bucket.dropped
        } else {
            connect_failed + bucket.dropped
        },
        sent_bytes: bucket.sent_bytes,
        received_bytes: bucket.received_bytes,
    }
}
