//! Broadcast load generator: M real SignalR receivers on one hub, and a sender that calls the
//! REST API `POST /api/hubs/{hub}/:send?api-version=2022-06-01` at a fixed rate with a payload
//! of about 2 KB carrying its send time. Receivers compute the end-to-end latency (REST send →
//! WebSocket delivery, same process and clock). Prints deliveries/s and latency percentiles.
//! Bounded: connect ramp, then `--seconds` of sending, then `--drain-seconds`; then it exits.
//!
//! ```text
//! cargo run --release -p switchyard-client --example broadcast -- \
//!     --endpoint http://127.0.0.1:8888 --receivers 1000 --rate 10 --seconds 20
//! ```

mod common;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use common::{connect, parse_format, rss_kb, ErrorTally, Flags, Target, EMULATOR_KEY};
use serde_json::{json, Value};
use switchyard_hub_protocol::HubMessage;
use tokio::sync::Semaphore;
use tokio::time::{sleep, sleep_until, timeout, timeout_at, Instant};

const USAGE: &str = "\
broadcast: M receivers + a REST sender at a fixed rate; deliveries/s and latency.

  --endpoint URL         service URL [http://127.0.0.1:8888]
  --hub NAME             hub [bcast]
  --receivers M          receiving client connections [1000]
  --rate N               REST sends per second [10]
  --seconds S            seconds of sending [20]
  --payload-bytes B      approximate size of the JSON argument [2048]
  --drain-seconds S      seconds to wait for late deliveries after the last send [5]
  --connect-rate N       receivers connected per second [1000]
  --protocol P           json | messagepack (receivers) [json]
  --access-key KEY       signing key [the Emulator key]
  --service-pid PID      also report the service's VmRSS before/after
  --threads N            tokio worker threads [2]";

const TARGET: &str = "tick";

#[derive(Default)]
struct Counters {
    connected: AtomicU64,
    connect_failed: AtomicU64,
    dropped: AtomicU64,
    deliveries: AtomicU64,
    errors: ErrorTally,
}

/// What one receiver saw.
#[derive(Default)]
struct Seen {
    /// End-to-end latency of each delivery, µs.
    latencies_us: Vec<u32>,
    /// (second since the first send, latency µs) for the timeline.
    per_second: Vec<(u32, u32)>,
    duplicates_or_reordered: u64,
}

fn main() {
    let flags = Flags::parse(
        USAGE,
        &[
            "endpoint",
            "hub",
            "receivers",
            "rate",
            "seconds",
            "payload-bytes",
            "drain-seconds",
            "connect-rate",
            "protocol",
            "access-key",
            "service-pid",
            "threads",
        ],
    );
    let threads: usize = flags.get("threads", 2);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_all()
        .build()
        .expect("tokio runtime");
    let ok = runtime.block_on(run(flags));
    std::process::exit(if ok { 0 } else { 1 });
}

async fn run(flags: Flags) -> bool {
    let target = Arc::new(Target {
        endpoint: flags
            .string("endpoint", "http://127.0.0.1:8888")
            .trim_end_matches('/')
            .to_string(),
        hub: flags.string("hub", "bcast"),
        access_key: flags.string("access-key", EMULATOR_KEY),
        format: parse_format(&flags.string("protocol", "json")),
    });
    let receivers: u64 = flags.get("receivers", 1000);
    let rate: f64 = flags.get("rate", 10.0_f64).max(0.1);
    let seconds: f64 = flags.get("seconds", 20.0);
    let payload_bytes: usize = flags.get("payload-bytes", 2048);
    let drain = Duration::from_secs_f64(flags.get("drain-seconds", 5.0));
    let connect_rate: f64 = flags.get("connect-rate", 1000.0_f64).max(1.0);
    let service_pid: u32 = flags.get("service-pid", 0);

    println!(
        "START endpoint={} hub={} receivers={receivers} rate={rate}/s seconds={seconds} payload_bytes={payload_bytes} protocol={}",
        target.endpoint,
        target.hub,
        target.format.name()
    );

    // Monotonic clock shared by sender and receivers (same process).
    let epoch = Instant::now();
    let counters = Arc::new(Counters::default());
    let total_messages = (seconds * rate).round() as u64;
    let send_start = Arc::new(tokio::sync::OnceCell::<Instant>::new());
    // Receivers stop reading at this deadline (set once the sending schedule is known).
    let (stop_tx, stop_rx) = tokio::sync::watch::channel::<Option<Instant>>(None);

    // 1. Receivers.
    let permits = Arc::new(Semaphore::new(256));
    let ramp_deadline = epoch + Duration::from_secs_f64(receivers as f64 / connect_rate + 60.0);
    let period = Duration::from_secs_f64(1.0 / connect_rate);
    let mut handles = Vec::with_capacity(receivers as usize);
    for i in 0..receivers {
        sleep_until(epoch + period.mul_f64(i as f64)).await;
        let Ok(Ok(permit)) = timeout_at(ramp_deadline, permits.clone().acquire_owned()).await
        else {
            counters.connect_failed.fetch_add(receivers - i, Relaxed);
            counters.errors.add("not attempted: ramp timeout".into());
            break;
        };
        let target = target.clone();
        let counters = counters.clone();
        let send_start = send_start.clone();
        let mut stop_rx = stop_rx.clone();
        handles.push(tokio::spawn(async move {
            let mut seen = Seen::default();
            let result = timeout(Duration::from_secs(30), connect(&target, None)).await;
            drop(permit);
            let mut client = match result {
                Ok(Ok(client)) => client,
                Ok(Err(error)) => {
                    counters.connect_failed.fetch_add(1, Relaxed);
                    counters.errors.add(error.kind());
                    return seen;
                }
                Err(_) => {
                    counters.connect_failed.fetch_add(1, Relaxed);
                    counters.errors.add("connect: timed out".into());
                    return seen;
                }
            };
            counters.connected.fetch_add(1, Relaxed);
            // Wait for the stop deadline to be known while reading.
            let mut last_seq: i64 = -1;
            loop {
                let deadline = *stop_rx.borrow();
                let next = match deadline {
                    Some(deadline) => match timeout_at(deadline, client.next()).await {
                        Ok(next) => next,
                        Err(_) => break,
                    },
                    None => tokio::select! {
                        next = client.next() => next,
                        _ = stop_rx.changed() => continue,
                    },
                };
                let received = epoch.elapsed();
                match next {
                    Ok(HubMessage::Invocation {
                        target: name,
                        arguments,
                        ..
                    }) if name == TARGET => {
                        let Some((sent_us, seq)) = arguments.first().and_then(stamp) else {
                            counters.errors.add("delivery without a timestamp".into());
                            continue;
                        };
                        let latency = (received.as_micros() as u64).saturating_sub(sent_us);
                        let latency = latency.min(u32::MAX as u64) as u32;
                        seen.latencies_us.push(latency);
                        if let Some(start) = send_start.get() {
                            let second = (epoch + Duration::from_micros(sent_us))
                                .saturating_duration_since(*start)
                                .as_secs() as u32;
                            seen.per_second.push((second, latency));
                        }
                        if seq as i64 <= last_seq {
                            seen.duplicates_or_reordered += 1;
                        }
                        last_seq = seq as i64;
                        counters.deliveries.fetch_add(1, Relaxed);
                    }
                    Ok(HubMessage::Close { error, .. }) => {
                        counters.dropped.fetch_add(1, Relaxed);
                        counters
                            .errors
                            .add(format!("dropped: service sent Close {error:?}"));
                        break;
                    }
                    Ok(_) => {}
                    Err(error) => {
                        counters.dropped.fetch_add(1, Relaxed);
                        counters.errors.add(format!("dropped: {error}"));
                        break;
                    }
                }
            }
            // Keep the socket open until the end so nothing is counted as a disconnect.
            std::mem::forget(client);
            seen
        }));
    }
    // Wait for every receiver attempt.
    loop {
        let done = counters.connected.load(Relaxed) + counters.connect_failed.load(Relaxed);
        if done >= receivers || Instant::now() >= ramp_deadline {
            break;
        }
        sleep(Duration::from_millis(50)).await;
    }
    let connected = counters.connected.load(Relaxed);
    println!(
        "RECEIVERS connected={connected} failed={} seconds={:.1}",
        counters.connect_failed.load(Relaxed),
        epoch.elapsed().as_secs_f64()
    );
    // Let the service settle (joins, handshakes) before sending.
    sleep(Duration::from_secs(1)).await;
    let rss_before = rss_kb(service_pid);

    // 2. Sender: REST send at a fixed rate, each request in its own task so a slow response
    // does not shift the schedule.
    let url = format!(
        "{}/api/hubs/{}/:send?api-version=2022-06-01",
        target.endpoint, target.hub
    );
    let token = target.rest_token(&url);
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .build()
        .expect("http client");
    let pad_len = payload_bytes.saturating_sub(60);
    let pad: String = "x".repeat(pad_len);
    let start = Instant::now();
    let _ = send_start.set(start);
    let send_period = Duration::from_secs_f64(1.0 / rate);
    let last_send = start + send_period.mul_f64(total_messages.saturating_sub(1) as f64);
    let _ = stop_tx.send(Some(last_send + drain));
    let rest_ok = Arc::new(AtomicU64::new(0));
    let rest_failed = Arc::new(AtomicU64::new(0));
    let rest_latencies = Arc::new(parking_lot::Mutex::new(Vec::<u32>::new()));
    let mut senders = Vec::with_capacity(total_messages as usize);
    for seq in 0..total_messages {
        sleep_until(start + send_period.mul_f64(seq as f64)).await;
        let sent_us = epoch.elapsed().as_micros() as u64;
        let body = json!({
            "target": TARGET,
            "arguments": [{"t": sent_us, "seq": seq, "pad": pad}],
        });
        let request = http
            .post(&url)
            .bearer_auth(&token)
            .json(&body)
            .timeout(Duration::from_secs(10));
        let (ok, failed, latencies, counters) = (
            rest_ok.clone(),
            rest_failed.clone(),
            rest_latencies.clone(),
            counters.clone(),
        );
        senders.push(tokio::spawn(async move {
            let began = Instant::now();
            match request.send().await {
                Ok(response) if response.status().is_success() => {
                    ok.fetch_add(1, Relaxed);
                    latencies.lock().push(began.elapsed().as_micros() as u32);
                }
                Ok(response) => {
                    failed.fetch_add(1, Relaxed);
                    let status = response.status();
                    let text = response.text().await.unwrap_or_default();
                    counters.errors.add(format!("rest: {status} {text:.100}"));
                }
                Err(error) => {
                    failed.fetch_add(1, Relaxed);
                    counters.errors.add(format!("rest: {error}"));
                }
            }
        }));
    }
    let send_seconds = start.elapsed().as_secs_f64();
    for sender in senders {
        let _ = sender.await;
    }

    // 3. Collect.
    let mut all = Vec::new();
    let mut timeline: Vec<(u64, u32)> = Vec::new(); // per second: deliveries, max latency
    let mut reordered = 0;
    for handle in handles {
        if let Ok(seen) = handle.await {
            all.extend_from_slice(&seen.latencies_us);
            reordered += seen.duplicates_or_reordered;
            for (second, latency) in seen.per_second {
                let second = second as usize;
                if timeline.len() <= second {
                    timeline.resize(second + 1, (0, 0));
                }
                timeline[second].0 += 1;
                timeline[second].1 = timeline[second].1.max(latency);
            }
        }
    }
    let rss_after = rss_kb(service_pid);
    all.sort_unstable();
    let sent_ok = rest_ok.load(Relaxed);
    let expected = sent_ok * connected;
    let delivered = all.len() as u64;
    let pct = |p: f64| -> f64 {
        if all.is_empty() {
            return f64::NAN;
        }
        let index = ((p / 100.0) * (all.len() as f64 - 1.0)).round() as usize;
        all[index.min(all.len() - 1)] as f64 / 1000.0
    };
    let mut rest = rest_latencies.lock().clone();
    rest.sort_unstable();
    let rest_pct = |p: f64| -> f64 {
        if rest.is_empty() {
            return f64::NAN;
        }
        let index = ((p / 100.0) * (rest.len() as f64 - 1.0)).round() as usize;
        rest[index.min(rest.len() - 1)] as f64 / 1000.0
    };

    println!("TIMELINE (second of send: deliveries, max latency ms)");
    for (second, (count, max)) in timeline.iter().enumerate() {
        println!(
            "TIMELINE second={second} deliveries={count} max_latency_ms={:.1}",
            *max as f64 / 1000.0
        );
    }
    println!(
        "REST sent={total_messages} ok={sent_ok} failed={} p50_ms={:.2} p99_ms={:.2} max_ms={:.2}",
        rest_failed.load(Relaxed),
        rest_pct(50.0),
        rest_pct(99.0),
        rest_pct(100.0)
    );
    println!(
        "SUMMARY receivers={connected} messages_ok={sent_ok} expected_deliveries={expected} delivered={delivered} missing={} dropped_receivers={} reordered={reordered} send_seconds={send_seconds:.2} deliveries_per_s={:.0} payload_bytes={payload_bytes}",
        expected.saturating_sub(delivered),
        counters.dropped.load(Relaxed),
        delivered as f64 / (total_messages as f64 / rate).max(0.001),
    );
    println!(
        "LATENCY_MS p50={:.2} p90={:.2} p99={:.2} p99.9={:.2} max={:.2}",
        pct(50.0),
        pct(90.0),
        pct(99.0),
        pct(99.9),
        pct(100.0)
    );
    if let (Some(before), Some(after)) = (rss_before, rss_after) {
        println!("SERVICE_RSS before_kb={before} after_kb={after}");
    }
    counters.errors.print("ERROR");
    delivered == expected && expected > 0 && counters.connect_failed.load(Relaxed) == 0
}

/// `{"t": µs, "seq": n, ...}` → (t, seq).
fn stamp(value: &Value) -> Option<(u64, u64)> {
    Some((value.get("t")?.as_u64()?, value.get("seq")?.as_u64()?))
}
