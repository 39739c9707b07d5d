//! One run as a text table laid out like the tables of Microsoft's "Performance guide for
//! Azure SignalR Service" (one column per step), plus our own rows (latency percentiles,
//! lost/duplicated/reordered, CPU and memory of the service and the app server), the cluster's
//! lines and a closing result line.

use std::fmt::Write as _;

use switchyard_capacity::format::{self, NONE};
use switchyard_capacity::report::{
    Cluster, Counts, Latency, ProcessUsage, RedisUsage, Report, Step,
};

use super::histogram::share_over_1s;
use super::per_second;

/// The scenario as a table heading, like the guide's ("Echo", "Send to group", "REST
/// broadcast").
pub(crate) fn scenario_heading(scenario: &str) -> String {
    if scenario.is_empty() {
        return "Run".into();
    }
    let words: Vec<&str> = scenario.split(['-', '_']).collect();
    let mut out = String::new();
    for (i, w) in words.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        if w.eq_ignore_ascii_case("rest") {
            out.push_str("REST");
        } else if i == 0 {
            let mut chars = w.chars();
            if let Some(c) = chars.next() {
                out.extend(c.to_uppercase());
                out.push_str(chars.as_str());
            }
        } else {
            out.push_str(w);
        }
    }
    out
}

/// Renders rows (the first is the header) as a Markdown pipe table padded to line up in a
/// terminal: first column left-aligned, the others right-aligned.
pub(super) fn render_table(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths = vec![3usize; cols];
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, row: &[String]| {
        out.push('|');
        for (i, w) in widths.iter().enumerate() {
            let cell = row.get(i).map(String::as_str).unwrap_or("");
            let pad = w - cell.chars().count();
            if i == 0 {
                let _ = write!(out, " {cell}{} |", " ".repeat(pad));
            } else {
                let _ = write!(out, " {}{cell} |", " ".repeat(pad));
            }
        }
        out.push('\n');
    };
    if let Some((header, body)) = rows.split_first() {
        line(&mut out, header);
        out.push('|');
        for (i, w) in widths.iter().enumerate() {
            if i == 0 {
                let _ = write!(out, ":{}|", "-".repeat(w + 1));
            } else {
                let _ = write!(out, "{}:|", "-".repeat(w + 1));
            }
        }
        out.push('\n');
        for row in body {
            line(&mut out, row);
        }
    }
    out
}

/// One column of [`table`]: a step, or the whole run when the report has no steps.
pub(super) struct Column<'a> {
    label: String,
    senders: Option<u64>,
    connections: u64,
    seconds: f64,
    counts: &'a Counts,
    latency: &'a Latency,
    pub(super) inbound_per_s: f64,
    pub(super) outbound_per_s: f64,
    passed: bool,
    service: Option<&'a ProcessUsage>,
    app_server: Option<&'a ProcessUsage>,
    pub(super) cpu_us_per_delivery: Option<f64>,
    pub(super) redis: Option<&'a RedisUsage>,
    generator: Option<&'a ProcessUsage>,
}

impl<'a> Column<'a> {
    fn of_step(step: &'a Step) -> Self {
        Column {
            label: format!("Step {}", step.index),
            senders: Some(step.senders),
            connections: step.connections,
            seconds: step.seconds,
            counts: &step.counts,
            latency: &step.latency,
            inbound_per_s: step.inbound_per_s,
            outbound_per_s: step.outbound_per_s,
            passed: step.passed,
            service: step.service.as_ref(),
            app_server: step.app_server.as_ref(),
            cpu_us_per_delivery: step.service_cpu_us_per_delivery,
            redis: step.redis.as_ref(),
            generator: step.generator.as_ref(),
        }
    }

    pub(super) fn of_run(report: &'a Report) -> Self {
        let c = &report.counts;
        Column {
            label: "Run".into(),
            senders: None,
            connections: report.connections,
            seconds: report.seconds,
            counts: c,
            latency: &report.latency,
            inbound_per_s: per_second(c.sent, report.seconds),
            outbound_per_s: per_second(c.received, report.seconds),
            passed: report.passed,
            service: report.service.as_ref(),
            app_server: report.app_server.as_ref(),
            cpu_us_per_delivery: report
                .service
                .as_ref()
                .filter(|_| c.received > 0)
                .map(|s| s.cpu_seconds * 1e6 / c.received as f64),
            redis: report.cluster.as_ref().and_then(|c| c.redis.as_ref()),
            generator: None,
        }
    }

    fn columns(report: &'a Report) -> Vec<Column<'a>> {
        if report.steps.is_empty() {
            vec![Column::of_run(report)]
        } else {
            report.steps.iter().map(Column::of_step).collect()
        }
    }
}

/// The run's settings in one or two lines (shared by [`table`] and the charts).
pub fn describe(report: &Report) -> (String, String) {
    let tool = if report.tool.is_empty() {
        "switchyard-bench"
    } else {
        report.tool.as_str()
    };
    let scenario = if report.scenario.is_empty() {
        "run"
    } else {
        report.scenario.as_str()
    };
    let mut first = format!("{tool}: {scenario}");
    if !report.target.is_empty() {
        let _ = write!(first, " on {}", report.target);
    }
    if !report.mode.is_empty() {
        let _ = write!(first, " ({} mode)", report.mode);
    }
    let wire: Vec<&str> = [report.transport.as_str(), report.protocol.as_str()]
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect();
    if !wire.is_empty() {
        let _ = write!(first, ", {}", wire.join(" + "));
    }
    let mut second = format!(
        "{} connections, {}-byte messages",
        format::count(report.connections),
        format::count(report.message_size as u64)
    );
    if report.scenario.ends_with("chat-room") && report.send_interval_ms > 0.0 {
        // The profile's posters, in the run's intervals.
        let _ = write!(
            second,
            ", 10 % post every {} ms and 20 % every {} ms",
            format::number(report.send_interval_ms * crate::scenario::CHATTY_INTERVALS),
            format::number(report.send_interval_ms * crate::scenario::CASUAL_INTERVALS)
        );
    } else if report.send_interval_ms > 0.0 {
        let _ = write!(
            second,
            " every {} ms",
            format::number(report.send_interval_ms)
        );
    }
    if let (Some(size), Some(groups)) = (report.group_size, report.groups) {
        let _ = write!(
            second,
            ", {} groups of {}",
            format::count(groups),
            format::count(size)
        );
    }
    if report.workers > 0 {
        let _ = write!(
            second,
            ", {} worker{}",
            report.workers,
            if report.workers == 1 { "" } else { "s" }
        );
    }
    if !report.started_at.is_empty() {
        let _ = write!(second, ", started {}", report.started_at);
    }
    if report.seconds > 0.0 {
        let _ = write!(second, ", {} s", format::number(report.seconds));
    }
    (first, second)
}

/// The step [`compare_table`] and the result line talk about: the last passing one.
pub(crate) fn last_passing(report: &Report) -> Option<&Step> {
    let index = report.last_passing_step?;
    report
        .steps
        .iter()
        .find(|s| s.index == index)
        .or_else(|| report.steps.get(index.wrapping_sub(1)))
}

/// The closing line of [`table`].
pub fn result_line(report: &Report) -> String {
    let unit = match &report.azure_unit {
        Some(unit) => format!("it equals or exceeds Azure {unit} for this scenario"),
        // Our own scenarios (rest-send-to-group …) have no row in Azure's guide.
        None if switchyard_capacity::plan::classify(report).is_none() => {
            "Azure's guide publishes no figures for this scenario".into()
        }
        None => "it does not reach any Azure unit's published figure for this scenario".into(),
    };
    match (report.last_passing_step, last_passing(report)) {
        (Some(_), Some(step)) => format!(
            "Result: step {} ({} sending connections: {} inbound/s, {} outbound/s) is the last \
             passing step; {unit}.",
            step.index,
            format::count(step.senders),
            format::number(step.inbound_per_s),
            format::number(step.outbound_per_s),
        ),
        (Some(index), None) => format!("Result: step {index} is the last passing step; {unit}."),
        (None, _) if report.steps.is_empty() && report.passed => {
            format!("Result: the run passed; {unit}.")
        }
        (None, _) => "Result: no step passed Azure's rule (at most 1 % of deliveries at 1 s or \
                      more, lost ones included, and at most 1 % of connections failed)."
            .into(),
    }
}

/// One run as a text table, one column per step (or one for the whole run when it has no
/// steps), with the settings above and the result below.
pub fn table(report: &Report) -> String {
    let (first, second) = describe(report);
    let mut out = format!("{first}\n{second}\n\n");
    out.push_str(&render_table(&rows(report)));
    out.push('\n');
    if !report.steps.is_empty() {
        whole_run_line(&mut out, report);
    }
    if let Some(rate) = report.connects_per_s {
        let _ = writeln!(out, "Connects per second: {}.", format::number(rate));
    }
    if let Some(bytes) = report.service_rss_per_connection_bytes {
        let _ = writeln!(
            out,
            "Service memory per held connection: {} bytes.",
            format::number(bytes)
        );
    }
    if let Some(cluster) = &report.cluster {
        out.push_str(&cluster_lines(cluster));
    }
    let _ = writeln!(out, "{}", result_line(report));
    out
}

/// The rows of [`table`], the header first.
fn rows(report: &Report) -> Vec<Vec<String>> {
    let cols = Column::columns(report);
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut row = |name: &str, f: &dyn Fn(&Column<'_>) -> String| {
        let mut r = vec![name.to_string()];
        r.extend(cols.iter().map(f));
        rows.push(r);
    };
    let mut header = vec![scenario_heading(&report.scenario)];
    header.extend(cols.iter().map(|c| c.label.clone()));
    row("Connections", &|c| format::count(c.connections));
    if cols.iter().any(|c| c.senders.is_some()) {
        row("Sending connections", &|c| {
            c.senders.map_or(NONE.into(), format::count)
        });
    }
    if let Some(size) = report.group_size {
        row("Group member count", &|_| format::count(size));
    }
    if let Some(groups) = report.groups {
        row("Group count", &|_| format::count(groups));
    }
    row("Inbound (messages/s)", &|c| format::number(c.inbound_per_s));
    row("Outbound (messages/s)", &|c| {
        format::number(c.outbound_per_s)
    });
    row("Inbound bandwidth", &|c| {
        format::bandwidth(per_second(c.counts.sent_bytes, c.seconds))
    });
    row("Outbound bandwidth", &|c| {
        format::bandwidth(per_second(c.counts.received_bytes, c.seconds))
    });
    row("Seconds", &|c| format::number(c.seconds));
    row("Latency p50 (ms)", &|c| format::number(c.latency.p50_ms));
    row("Latency p90 (ms)", &|c| format::number(c.latency.p90_ms));
    row("Latency p99 (ms)", &|c| format::number(c.latency.p99_ms));
    row("Latency p99.9 (ms)", &|c| format::number(c.latency.p999_ms));
    row("Latency max (ms)", &|c| format::number(c.latency.max_ms));
    row("Deliveries ≥ 1 s or lost", &|c| {
        share_over_1s(&c.latency.buckets_v1, c.counts.lost).map_or(NONE.into(), fmt_percent)
    });
    row("Lost / duplicated / reordered", &|c| {
        format!(
            "{} / {} / {}",
            format::count(c.counts.lost),
            format::count(c.counts.duplicated),
            format::count(c.counts.reordered)
        )
    });
    row("Connections failed", &|c| {
        format::count(c.counts.connections_failed)
    });
    row("Service CPU (cores)", &|c| {
        c.service.map_or(NONE.into(), |u| format::cores(u.cores))
    });
    row("Service RSS", &|c| {
        c.service
            .map_or(NONE.into(), |u| format::memory_kb(u.rss_kb))
    });
    row("Service CPU µs/delivery", &|c| {
        c.cpu_us_per_delivery.map_or(NONE.into(), format::number)
    });
    if cols
        .iter()
        .any(|c| c.service.is_some_and(|u| u.system_seconds > 0.0))
    {
        // The kernel's part (on loopback mostly the sockets', the receivers' TCP input
        // included): what is left is the server's own code.
        row(
            "  of which system (kernel)",
            &|c| match (c.cpu_us_per_delivery, c.service) {
                (Some(per), Some(u)) if u.cpu_seconds > 0.0 => {
                    format::number(per * u.system_seconds / u.cpu_seconds)
                }
                _ => NONE.into(),
            },
        );
    }
    if cols.iter().any(|c| c.generator.is_some()) {
        // Shares the machine with the service: when service + generator near the cores,
        // latency is the machine's, not the service's.
        row("Load generator CPU (cores)", &|c| {
            c.generator.map_or(NONE.into(), |u| format::cores(u.cores))
        });
    }
    if cols.iter().any(|c| c.redis.is_some()) {
        row("Redis CPU (cores)", &|c| {
            c.redis
                .filter(|r| r.seconds > 0.0)
                .map_or(NONE.into(), |r| format::cores(r.cpu_seconds / r.seconds))
        });
        row("Redis CPU µs/message", &|c| {
            c.redis
                .and_then(|r| r.cpu_us_per_message)
                .map_or(NONE.into(), format::number)
        });
        row("Redis bytes/message", &|c| {
            c.redis
                .and_then(|r| r.bytes_per_message)
                .map_or(NONE.into(), format::number)
        });
        row("PUBLISH per message sent", &|c| {
            c.redis
                .and_then(|r| r.publish_per_message)
                .map_or(NONE.into(), format::number)
        });
    }
    if cols.iter().any(|c| c.app_server.is_some()) {
        row("App server CPU (cores)", &|c| {
            c.app_server.map_or(NONE.into(), |u| format::cores(u.cores))
        });
        row("App server RSS", &|c| {
            c.app_server
                .map_or(NONE.into(), |u| format::memory_kb(u.rss_kb))
        });
    }
    row("Azure rule", &|c| {
        if c.passed { "pass" } else { "FAIL" }.into()
    });
    rows.insert(0, header);
    rows
}

/// The totals of a run with steps.
fn whole_run_line(out: &mut String, report: &Report) {
    let c = &report.counts;
    let l = &report.latency;
    let _ = writeln!(
        out,
        "Whole run: sent {}, expected {}, received {}, lost {}, duplicated {}, reordered {}, \
         connections failed {}; latency p50 {} ms, p99 {} ms, max {} ms; {}.",
        format::count(c.sent),
        format::count(c.expected),
        format::count(c.received),
        format::count(c.lost),
        format::count(c.duplicated),
        format::count(c.reordered),
        format::count(c.connections_failed),
        format::number(l.p50_ms),
        format::number(l.p99_ms),
        format::number(l.max_ms),
        verdict(report)
    );
}

/// How the whole run ended, for [`whole_run_line`].
fn verdict(report: &Report) -> String {
    if report.passed {
        return "every step passed".into();
    }
    if report.steps.iter().any(|s| !s.passed) {
        return "not every step passed".into();
    }
    // Azure's rule tolerates a little in each step; the run passes only without any.
    let c = &report.counts;
    let what: Vec<String> = [
        (c.connections_failed, "connections failed"),
        (c.lost, "lost"),
        (c.duplicated, "duplicated"),
        (c.reordered, "reordered"),
    ]
    .into_iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, what)| format!("{} {what}", format::count(n)))
    .collect();
    match what.is_empty() {
        true => "every step passed, but the run did not".into(),
        false => format!("every step passed, but {}", what.join(", ")),
    }
}

/// The nodes and Redis of a cluster run, one line each.
fn cluster_lines(cluster: &Cluster) -> String {
    let mut out = format!(
        "Cluster: {} node{} (the service figures above are their sums), REST calls into {}:\n",
        cluster.nodes.len(),
        if cluster.nodes.len() == 1 { "" } else { "s" },
        if cluster.rest_nodes.is_empty() {
            NONE
        } else {
            cluster.rest_nodes.as_str()
        }
    );
    for node in &cluster.nodes {
        let _ = write!(
            out,
            "  {} {}: {} connections",
            node.name,
            node.url,
            format::count(node.connections)
        );
        if let Some(p) = &node.process {
            let _ = write!(
                out,
                ", CPU {} s ({} cores), RSS {}",
                format::number(p.cpu_seconds),
                format::cores(p.cores),
                format::memory_kb(p.rss_kb)
            );
        }
        if let (Some(p), Some(r)) = (node.backplane_published, node.backplane_received) {
            let _ = write!(
                out,
                ", backplane published {} received {} (measured window)",
                format::count(p),
                format::count(r)
            );
        }
        out.push_str(".\n");
    }
    if let Some(r) = &cluster.redis {
        let _ = write!(
            out,
            "  Redis over {} s: CPU {} s, in {} bytes, out {} bytes, {} commands, {} PUBLISH for {} messages sent",
            format::number(r.seconds),
            format::number(r.cpu_seconds),
            format::count(r.net_input_bytes),
            format::count(r.net_output_bytes),
            format::count(r.commands),
            format::count(r.publish_calls),
            format::count(r.messages_sent)
        );
        if let Some(p) = &r.process {
            let _ = write!(
                out,
                "; redis-server in /proc: CPU {} s, RSS {}",
                format::number(p.cpu_seconds),
                format::memory_kb(p.rss_kb)
            );
        }
        let per = |v: Option<f64>| v.map_or(NONE.to_string(), format::number);
        let _ = writeln!(
            out,
            ".\n  Per message sent: Redis CPU {} µs, {} bytes, {} PUBLISH.",
            per(r.cpu_us_per_message),
            per(r.bytes_per_message),
            per(r.publish_per_message)
        );
    }
    out
}

fn fmt_percent(share: f64) -> String {
    format!("{:.2} %", share * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures::{cells, multi_step, single_step};

    #[test]
    fn table_of_multi_step_run() {
        let r = multi_step();
        let t = table(&r);
        println!("{t}");
        let row = |name: &str| cells(&t, name);
        assert!(t.starts_with(
            "switchyard-bench 0.1.0: echo on switchyard (default mode), websockets + json\n"
        ));
        assert!(t.contains("1,000 connections, 2,048-byte messages every 1,000 ms"));
        assert_eq!(
            row("Echo"),
            ["Echo", "Step 1", "Step 2", "Step 3", "Step 4"]
        );
        assert_eq!(row("Connections")[1..], ["1,000"; 4]);
        assert_eq!(
            row("Sending connections")[1..],
            ["250", "500", "750", "1,000"]
        );
        assert_eq!(row("Inbound (messages/s)")[3], "750");
        // 250 senders × 2,048 bytes/s = 500 KBps; 1,000 × 2,048 = 2,000 KBps = 2 MBps.
        assert_eq!(row("Inbound bandwidth")[1], "500 KBps");
        assert_eq!(row("Outbound bandwidth")[4], "2 MBps");
        assert_eq!(row("Latency p50 (ms)")[1..], ["1.5", "3", "4.5", "6"]);
        assert_eq!(row("Latency p99 (ms)")[1], "12.3");
        assert_eq!(row("Latency p99 (ms)")[4], "49.2");
        assert_eq!(row("Latency max (ms)")[4], "2,500");
        assert_eq!(row("Deliveries ≥ 1 s or lost")[4], "10.00 %");
        assert_eq!(row("Deliveries ≥ 1 s or lost")[1], "0.00 %");
        assert_eq!(row("Lost / duplicated / reordered")[1], "0 / 0 / 0");
        assert_eq!(row("Connections failed")[1], "0");
        assert_eq!(row("Service CPU (cores)")[3], "0.75");
        assert_eq!(row("Service RSS")[3], "83 MB");
        assert_eq!(row("Service CPU µs/delivery")[1], "250");
        assert_eq!(row("App server CPU (cores)")[1], "0.50");
        assert_eq!(row("App server RSS")[1], "40 MB");
        assert_eq!(row("Azure rule")[1..], ["pass", "pass", "pass", "FAIL"]);
        assert!(t.contains(
            "Result: step 3 (750 sending connections: 750 inbound/s, 750 outbound/s) is the last \
             passing step; it equals or exceeds Azure Unit1 for this scenario."
        ));
        assert!(t.contains("Whole run: sent 75,000"));
        assert!(t.contains("max 2,500 ms; not every step passed."));
        // Every table line has the same number of columns and the same width.
        let lines: Vec<&str> = t.lines().filter(|l| l.starts_with('|')).collect();
        assert!(lines.iter().all(|l| l.matches('|').count() == 6));
        assert!(lines
            .iter()
            .all(|l| l.chars().count() == lines[0].chars().count()));
    }

    #[test]
    fn whole_run_says_what_failed_when_every_step_passed() {
        let mut r = multi_step();
        r.steps.truncate(3);
        r.last_passing_step = Some(3);
        r.counts.connections_failed = 128;
        r.counts.lost = 2;
        let t = table(&r);
        assert!(
            t.contains("; every step passed, but 128 connections failed, 2 lost.\n"),
            "{t}"
        );
        r.counts = Counts::default();
        assert!(table(&r).contains("; every step passed, but the run did not.\n"));
        r.passed = true;
        assert!(table(&r).contains("; every step passed.\n"));
    }

    #[test]
    fn table_of_failing_run() {
        let mut r = multi_step();
        for s in &mut r.steps {
            s.passed = false;
        }
        r.last_passing_step = None;
        r.azure_unit = None;
        let t = table(&r);
        assert!(t.contains("Result: no step passed Azure's rule"), "{t}");
        assert!(!t.contains("equals or exceeds"));
    }

    #[test]
    fn table_of_single_step_and_stepless_runs() {
        let r = single_step();
        let t = table(&r);
        assert!(t
            .lines()
            .any(|l| l.starts_with("| Broadcast") && l.contains("Step 1")));
        assert!(t.contains("| Outbound (messages/s)"));
        assert!(t.contains("2,000"));
        assert!(t.contains("4 MBps"), "{t}");
        assert!(t.contains("messagepack"));
        assert!(t.contains("equals or exceeds Azure Unit1"));

        let mut bare = single_step();
        bare.steps.clear();
        bare.last_passing_step = None;
        bare.azure_unit = None;
        let t = table(&bare);
        assert!(
            t.lines()
                .any(|l| l.starts_with("| Broadcast") && l.contains("Run")),
            "{t}"
        );
        assert!(!t.contains("Sending connections"));
        assert!(t.contains("Result: the run passed; it does not reach any Azure unit"));
    }

    #[test]
    fn scenario_headings() {
        assert_eq!(scenario_heading("echo"), "Echo");
        assert_eq!(scenario_heading("send-to-group"), "Send to group");
        assert_eq!(scenario_heading("rest-broadcast"), "REST broadcast");
    }
}
