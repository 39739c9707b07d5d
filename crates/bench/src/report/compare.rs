//! Several runs side by side (Switchyard against a peer), one column per run.

use std::fmt::Write as _;

use switchyard_capacity::format::{self, NONE};
use switchyard_capacity::report::{Latency, ProcessUsage, RedisUsage, Report, Step};

use super::per_second;
use super::table::{last_passing, render_table, Column};

/// The figures of one run that [`compare_table`] shows.
struct Headline<'a> {
    /// What the step column says about the step shown.
    which: String,
    inbound_per_s: f64,
    outbound_per_s: f64,
    inbound_bps: f64,
    outbound_bps: f64,
    latency: &'a Latency,
    service: Option<&'a ProcessUsage>,
    cpu_us_per_delivery: Option<f64>,
    redis: Option<&'a RedisUsage>,
}

impl<'a> Headline<'a> {
    fn of(report: &'a Report) -> Self {
        let of_step = |step: &'a Step, which: String| Headline {
            which,
            inbound_per_s: step.inbound_per_s,
            outbound_per_s: step.outbound_per_s,
            inbound_bps: per_second(step.counts.sent_bytes, step.seconds),
            outbound_bps: per_second(step.counts.received_bytes, step.seconds),
            latency: &step.latency,
            service: step.service.as_ref().or(report.service.as_ref()),
            cpu_us_per_delivery: step.service_cpu_us_per_delivery,
            redis: step.redis.as_ref(),
        };
        let total = report.steps.len();
        if let Some(step) = last_passing(report) {
            let which = format!(
                "{} of {total} ({} senders)",
                step.index,
                format::count(step.senders)
            );
            return of_step(step, which);
        }
        if let Some(step) = report.steps.last() {
            let which = format!(
                "none passed; {} of {total} ({} senders)",
                step.index,
                format::count(step.senders)
            );
            return of_step(step, which);
        }
        let col = Column::of_run(report);
        Headline {
            which: if report.passed {
                "whole run (passed)".into()
            } else {
                "whole run (failed)".into()
            },
            inbound_per_s: col.inbound_per_s,
            outbound_per_s: col.outbound_per_s,
            inbound_bps: per_second(report.counts.sent_bytes, report.seconds),
            outbound_bps: per_second(report.counts.received_bytes, report.seconds),
            latency: &report.latency,
            service: report.service.as_ref(),
            cpu_us_per_delivery: col.cpu_us_per_delivery,
            redis: col.redis,
        }
    }
}

/// A name for each run: its target, numbered (`switchyard #2`) when two runs share one.
pub(crate) fn run_labels(reports: &[&Report]) -> Vec<String> {
    let mut labels: Vec<String> = reports
        .iter()
        .enumerate()
        .map(|(i, r)| {
            if r.target.is_empty() {
                format!("run {}", i + 1)
            } else {
                r.target.clone()
            }
        })
        .collect();
    let shared: Vec<bool> = labels
        .iter()
        .map(|l| labels.iter().filter(|m| *m == l).count() > 1)
        .collect();
    for (i, label) in labels.iter_mut().enumerate() {
        if shared[i] {
            let _ = write!(label, " #{}", i + 1);
        }
    }
    labels
}

/// `a ÷ b` as `1.23×`, or nothing when either side is missing or `b` is zero.
fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if a.is_finite() && b.is_finite() && b != 0.0 => {
            format!("{:.2}×", a / b)
        }
        _ => String::new(),
    }
}

/// Several runs side by side, one column per run (headed by its target). Throughput,
/// latency and the service's CPU/memory are those of each run's last passing step (or, when
/// none passed, its last step, which the "Step shown" row says). With exactly two runs a
/// last column gives first ÷ second for throughput, CPU and memory.
pub fn compare_table(reports: &[&Report]) -> String {
    if reports.is_empty() {
        return "No reports to compare.\n".into();
    }
    let mut rows = Rows::new(reports);
    run_rows(&mut rows);
    measured_rows(&mut rows);
    if reports.iter().any(|r| r.cluster.is_some()) {
        cluster_rows(&mut rows);
    }
    rows.row(
        "Azure unit reached",
        &|r, _| r.azure_unit.clone().unwrap_or_else(|| NONE.into()),
        None,
    );
    rows.row(
        "Run passed",
        &|r, _| if r.passed { "yes" } else { "no" }.into(),
        None,
    );
    let mut out = render_table(&rows.rows);
    if rows.pair() {
        out.push_str(
            "\nRatios are first ÷ second: above 1 means the first moves more (throughput) or \
             uses more (CPU, memory).\n",
        );
    }
    out
}

/// A cell of one run.
type Text<'r> = dyn Fn(&Report, &Headline<'_>) -> String + 'r;
/// The number of one run that the ratio column divides.
type Value<'r> = dyn Fn(&Report, &Headline<'_>) -> Option<f64> + 'r;

/// The rows of [`compare_table`] as they are built, the header first.
struct Rows<'a> {
    reports: &'a [&'a Report],
    heads: Vec<Headline<'a>>,
    rows: Vec<Vec<String>>,
}

impl<'a> Rows<'a> {
    fn new(reports: &'a [&'a Report]) -> Self {
        let labels = run_labels(reports);
        let mut header = vec![String::new()];
        header.extend(labels.iter().cloned());
        if reports.len() == 2 {
            header.push(format!("{} ÷ {}", labels[0], labels[1]));
        }
        Rows {
            reports,
            heads: reports.iter().map(|r| Headline::of(r)).collect(),
            rows: vec![header],
        }
    }

    fn pair(&self) -> bool {
        self.reports.len() == 2
    }

    /// `text` gives each cell; `value`, when given, the number the ratio column divides.
    fn row(&mut self, name: &str, text: &Text<'_>, value: Option<&Value<'_>>) {
        let mut r = vec![name.to_string()];
        r.extend(
            self.reports
                .iter()
                .zip(&self.heads)
                .map(|(rep, h)| text(rep, h)),
        );
        if self.pair() {
            r.push(value.map_or(String::new(), |v| {
                ratio(
                    v(self.reports[0], &self.heads[0]),
                    v(self.reports[1], &self.heads[1]),
                )
            }));
        }
        self.rows.push(r);
    }
}

fn or_none(s: &str) -> String {
    if s.is_empty() {
        NONE.to_string()
    } else {
        s.to_string()
    }
}

/// What each run was: scenario, mode, wire, size, and the step shown.
fn run_rows(rows: &mut Rows<'_>) {
    rows.row("Scenario", &|r, _| or_none(&r.scenario), None);
    rows.row("Mode", &|r, _| or_none(&r.mode), None);
    rows.row(
        "Transport / protocol",
        &|r, _| format!("{} / {}", or_none(&r.transport), or_none(&r.protocol)),
        None,
    );
    rows.row("Connections", &|r, _| format::count(r.connections), None);
    rows.row(
        "Message size (bytes)",
        &|r, _| format::count(r.message_size as u64),
        None,
    );
    rows.row("Step shown", &|_, h| h.which.clone(), None);
}

/// Throughput, latency, what went wrong, and what the service used.
fn measured_rows(rows: &mut Rows<'_>) {
    rows.row(
        "Inbound (messages/s)",
        &|_, h| format::number(h.inbound_per_s),
        Some(&|_, h| Some(h.inbound_per_s)),
    );
    rows.row(
        "Outbound (messages/s)",
        &|_, h| format::number(h.outbound_per_s),
        Some(&|_, h| Some(h.outbound_per_s)),
    );
    rows.row(
        "Inbound bandwidth",
        &|_, h| format::bandwidth(h.inbound_bps),
        Some(&|_, h| Some(h.inbound_bps)),
    );
    rows.row(
        "Outbound bandwidth",
        &|_, h| format::bandwidth(h.outbound_bps),
        Some(&|_, h| Some(h.outbound_bps)),
    );
    rows.row(
        "Latency p50 (ms)",
        &|_, h| format::number(h.latency.p50_ms),
        None,
    );
    rows.row(
        "Latency p99 (ms)",
        &|_, h| format::number(h.latency.p99_ms),
        None,
    );
    rows.row(
        "Latency max (ms)",
        &|_, h| format::number(h.latency.max_ms),
        None,
    );
    rows.row(
        "Lost / duplicated / reordered (run)",
        &|r, _| {
            format!(
                "{} / {} / {}",
                format::count(r.counts.lost),
                format::count(r.counts.duplicated),
                format::count(r.counts.reordered)
            )
        },
        None,
    );
    rows.row(
        "Connections failed (run)",
        &|r, _| format::count(r.counts.connections_failed),
        None,
    );
    rows.row(
        "Service CPU (cores)",
        &|_, h| h.service.map_or(NONE.into(), |u| format::cores(u.cores)),
        Some(&|_, h| h.service.map(|u| u.cores)),
    );
    rows.row(
        "Service RSS",
        &|_, h| {
            h.service
                .map_or(NONE.into(), |u| format::memory_kb(u.rss_kb))
        },
        Some(&|_, h| h.service.map(|u| u.rss_kb as f64)),
    );
    rows.row(
        "Service CPU µs/delivery",
        &|_, h| h.cpu_us_per_delivery.map_or(NONE.into(), format::number),
        Some(&|_, h| h.cpu_us_per_delivery),
    );
}

/// The nodes and what Redis cost per message, when a run was on a cluster.
fn cluster_rows(rows: &mut Rows<'_>) {
    rows.row(
        "Nodes (REST into)",
        &|r, _| match &r.cluster {
            Some(c) => format!("{} ({})", c.nodes.len(), or_none(&c.rest_nodes)),
            None => "1".into(),
        },
        None,
    );
    let redis = |h: &Headline<'_>, f: &dyn Fn(&RedisUsage) -> Option<f64>| {
        h.redis.and_then(f).map_or(NONE.into(), format::number)
    };
    rows.row(
        "Redis CPU µs/message",
        &|_, h| redis(h, &|r| r.cpu_us_per_message),
        Some(&|_, h| h.redis.and_then(|r| r.cpu_us_per_message)),
    );
    rows.row(
        "Redis bytes/message",
        &|_, h| redis(h, &|r| r.bytes_per_message),
        Some(&|_, h| h.redis.and_then(|r| r.bytes_per_message)),
    );
    rows.row(
        "PUBLISH per message sent",
        &|_, h| redis(h, &|r| r.publish_per_message),
        None,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures::{cells, multi_step, single_step, usage};

    #[test]
    fn compare_two_runs() {
        let ours = multi_step();
        let mut peer = multi_step();
        peer.target = "go-signalr".into();
        peer.mode = "direct".into();
        peer.last_passing_step = Some(2);
        peer.azure_unit = None;
        for s in &mut peer.steps {
            s.passed = s.index <= 2;
            s.service = Some(usage(1.0, 163_840));
            s.service_cpu_us_per_delivery = Some(500.0);
        }
        let t = compare_table(&[&ours, &peer]);
        println!("{t}");
        let row = |name: &str| cells(&t, name);
        assert_eq!(
            row("")[1..],
            ["switchyard", "go-signalr", "switchyard ÷ go-signalr"]
        );
        assert_eq!(row("Scenario")[1..3], ["echo", "echo"]);
        assert_eq!(row("Mode")[1..3], ["default", "direct"]);
        assert_eq!(row("Connections")[1], "1,000");
        assert_eq!(
            row("Step shown")[1..3],
            ["3 of 4 (750 senders)", "2 of 4 (500 senders)"]
        );
        // 750 ÷ 500.
        assert_eq!(row("Inbound (messages/s)")[1..], ["750", "500", "1.50×"]);
        assert_eq!(row("Outbound (messages/s)")[3], "1.50×");
        assert_eq!(row("Outbound bandwidth")[3], "1.50×");
        assert_eq!(row("Latency p50 (ms)")[1..], ["4.5", "3", ""]);
        // 83 MB ÷ 160 MB; 0.75 ÷ 1 core; 250 ÷ 500 µs.
        assert_eq!(row("Service RSS")[1..], ["83 MB", "160 MB", "0.52×"]);
        assert_eq!(row("Service CPU (cores)")[3], "0.75×");
        assert_eq!(row("Service CPU µs/delivery")[3], "0.50×");
        assert_eq!(row("Azure unit reached")[1..3], ["Unit1", "-"]);
        assert_eq!(row("Run passed")[1..3], ["no", "no"]);
    }

    #[test]
    fn compare_many_and_failed_runs() {
        let a = multi_step();
        let mut b = multi_step();
        b.last_passing_step = None;
        let c = single_step();
        let t = compare_table(&[&a, &b, &c]);
        assert!(!t.contains('×'));
        assert!(t.contains("switchyard #1"));
        assert!(t.contains("switchyard #3"));
        assert!(t.contains("none passed; 4 of 4 (1,000 senders)"));
        assert_eq!(compare_table(&[]), "No reports to compare.\n");
    }
}
