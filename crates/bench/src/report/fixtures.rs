//! Reports for the tests of the tables and the charts.

use switchyard_capacity::report::{Counts, Latency, ProcessUsage, Report, Step};

use super::histogram::bucket_names_v1;

pub(crate) fn usage(cores: f64, rss_kb: u64) -> ProcessUsage {
    ProcessUsage {
        pid: 42,
        cpu_seconds: cores * 30.0,
        system_seconds: cores * 20.0,
        cores,
        rss_kb,
        hwm_kb: rss_kb,
    }
}

fn buckets(fast: u64, slow: u64) -> Vec<(String, u64)> {
    let mut counts = [0u64; 11];
    counts[0] = fast;
    counts[10] = slow;
    bucket_names_v1().into_iter().zip(counts).collect()
}

fn step(index: usize, senders: u64, passed: bool) -> Step {
    let sent = senders * 30;
    let slow = if passed { 0 } else { sent / 10 };
    Step {
        index,
        senders,
        connections: 1000,
        seconds: 30.0,
        counts: Counts {
            sent,
            expected: sent,
            received: sent,
            sent_bytes: sent * 2048,
            received_bytes: sent * 2048,
            ..Counts::default()
        },
        latency: Latency {
            p50_ms: 1.5 * index as f64,
            p90_ms: 3.0 * index as f64,
            p99_ms: 12.3 * index as f64,
            p999_ms: 40.0 * index as f64,
            max_ms: if passed { 95.0 } else { 2500.0 },
            mean_ms: 2.0,
            buckets_v1: buckets(sent - slow, slow),
            buckets_v2: Vec::new(),
        },
        inbound_per_s: senders as f64,
        outbound_per_s: senders as f64,
        passed,
        service: Some(usage(0.25 * index as f64, 81_920 + 1024 * index as u64)),
        app_server: Some(usage(0.5, 40_960)),
        service_cpu_us_per_delivery: Some(250.0),
        redis: None,
        generator: None,
    }
}

/// Echo, steps of 250 / 500 / 750 / 1,000 senders; the last one fails.
pub(crate) fn multi_step() -> Report {
    let steps: Vec<Step> = [250, 500, 750, 1000]
        .iter()
        .enumerate()
        .map(|(i, &s)| step(i + 1, s, s < 1000))
        .collect();
    Report {
        tool: "switchyard-bench 0.1.0".into(),
        scenario: "echo".into(),
        target: "switchyard".into(),
        mode: "default".into(),
        transport: "websockets".into(),
        protocol: "json".into(),
        connections: 1000,
        message_size: 2048,
        send_interval_ms: 1000.0,
        workers: 1,
        started_at: "2025-01-02T03:04:05Z".into(),
        seconds: 120.0,
        counts: Counts {
            sent: 75_000,
            expected: 75_000,
            received: 75_000,
            ..Counts::default()
        },
        latency: Latency {
            p50_ms: 2.0,
            p99_ms: 30.0,
            max_ms: 2500.0,
            ..Latency::default()
        },
        steps,
        last_passing_step: Some(3),
        passed: false,
        service: Some(usage(0.6, 90_000)),
        app_server: Some(usage(0.5, 40_960)),
        azure_unit: Some("Unit1".into()),
        ..Report::default()
    }
}

/// Broadcast, one step, passing, with a per-second timeline.
pub(crate) fn single_step() -> Report {
    let mut s = step(1, 2, true);
    s.connections = 1000;
    s.outbound_per_s = 2000.0;
    s.counts.received = 60_000;
    s.counts.expected = 60_000;
    s.counts.received_bytes = 60_000 * 2048;
    let timeline = (0..30)
        .map(|i| switchyard_capacity::report::Second {
            second: i,
            step: 1,
            sent: 2,
            received: 2000,
            p50_ms: 1.0 + (i % 5) as f64 * 0.1,
            p99_ms: 8.0,
            max_ms: 20.0 + i as f64,
        })
        .collect();
    Report {
        tool: "switchyard-bench 0.1.0".into(),
        scenario: "broadcast".into(),
        target: "switchyard".into(),
        mode: "default".into(),
        transport: "websockets".into(),
        protocol: "messagepack".into(),
        connections: 1000,
        message_size: 2048,
        send_interval_ms: 1000.0,
        workers: 2,
        seconds: 30.0,
        counts: s.counts.clone(),
        latency: s.latency.clone(),
        steps: vec![s],
        timeline,
        last_passing_step: Some(1),
        passed: true,
        azure_unit: Some("Unit1".into()),
        ..Report::default()
    }
}

/// The trimmed cells of the row named `name` (the name first).
pub(crate) fn cells(table: &str, name: &str) -> Vec<String> {
    table
        .lines()
        .find(|l| l.starts_with(&format!("| {name} ")))
        .unwrap_or_else(|| panic!("no row {name} in\n{table}"))
        .trim_matches('|')
        .split('|')
        .map(|c| c.trim().to_string())
        .collect()
}
