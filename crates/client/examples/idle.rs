//! Idle-connection load generator: opens N real SignalR client connections to a running
//! Switchyard (negotiate v1 → WebSocket with `id=connectionToken` → handshake), then holds
//! them idle, reading continuously so the service's keep-alive pings are consumed, and
//! answering nothing. Stops by itself.
//!
//! ```text
//! cargo run --release -p switchyard-client --example idle -- \
//!     --endpoint http://127.0.0.1:8888 --connections 10000 --rate 1000 --hold-seconds 30
//! ```
//!
//! Output lines (stdout, one event each, `key=value`):
//! - `PROGRESS …` every 2 s while connecting, every 5 s while holding.
//! - `RAMP_DONE established=… failed=… seconds=…` once every attempt has finished (or the ramp
//!   timed out): scripts wait for this line before sampling the service's memory.
//! - `SUMMARY …` at the end, then `ERROR count=… kind=…` per failure kind.
//!
//! Exit status 0 if every connection was established and none dropped, 1 otherwise.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use common::{connect, parse_format, ErrorTally, Flags, Target, EMULATOR_KEY};
use switchyard_hub_protocol::HubMessage;
use tokio::sync::Semaphore;
use tokio::time::{sleep, sleep_until, timeout, Instant};

const USAGE: &str = "\
idle: hold N idle SignalR client connections to a running Switchyard.

  --endpoint URL         service URL [http://127.0.0.1:8888]
  --hub NAME             hub [idle]
  --connections N        connections to open [1000]
  --rate N               new connections started per second [1000]
  --concurrency N        connection attempts in flight at most [256]
  --connect-timeout S    seconds for one negotiate+connect+handshake [30]
  --ramp-timeout S       seconds for the whole ramp [N/rate + 60]
  --hold-seconds S       seconds to hold once the ramp is done [30]
  --protocol P           json | messagepack [json]
  --access-key KEY       signing key [the Emulator key]
  --user-prefix P        give connection i the user id P{i} (default: no user id)
  --threads N            tokio worker threads [2]
  --label TEXT           prefix for output lines (for several instances) []";

#[derive(Default)]
struct Stats {
    established: AtomicU64,
    failed: AtomicU64,
    dropped: AtomicU64,
    pings: AtomicU64,
    other_messages: AtomicU64,
    errors: ErrorTally,
    holding: AtomicBool,
}

fn main() {
    let flags = Flags::parse(
        USAGE,
        &[
            "endpoint",
            "hub",
            "connections",
            "rate",
            "concurrency",
            "connect-timeout",
            "ramp-timeout",
            "hold-seconds",
            "protocol",
            "access-key",
            "user-prefix",
            "threads",
            "label",
        ],
    );
    let threads: usize = flags.get("threads", 2);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_all()
        .build()
        .expect("tokio runtime");
    let ok = runtime.block_on(run(flags));
    // Exiting closes every socket at once; no need to close 10k connections one by one.
    std::process::exit(if ok { 0 } else { 1 });
}

async fn run(flags: Flags) -> bool {
    let target = Target {
        endpoint: flags
            .string("endpoint", "http://127.0.0.1:8888")
            .trim_end_matches('/')
            .to_string(),
        hub: flags.string("hub", "idle"),
        access_key: flags.string("access-key", EMULATOR_KEY),
        format: parse_format(&flags.string("protocol", "json")),
    };
    let connections: u64 = flags.get("connections", 1000);
    let rate: f64 = flags.get("rate", 1000.0_f64).max(1.0);
    let concurrency: usize = flags.get("concurrency", 256);
    let connect_timeout = Duration::from_secs_f64(flags.get("connect-timeout", 30.0));
    let ramp_timeout =
        Duration::from_secs_f64(flags.get("ramp-timeout", connections as f64 / rate + 60.0));
    let hold = Duration::from_secs_f64(flags.get("hold-seconds", 30.0));
    let user_prefix = flags.string("user-prefix", "");
    let label = flags.string("label", "");
    let label = if label.is_empty() {
        String::new()
    } else {
        format!("[{label}] ")
    };

    println!(
        "{label}START endpoint={} hub={} connections={connections} rate={rate} protocol={} hold_seconds={}",
        target.endpoint,
        target.hub,
        target.format.name(),
        hold.as_secs_f64()
    );

    let stats = Arc::new(Stats::default());
    let target = Arc::new(target);
    let permits = Arc::new(Semaphore::new(concurrency.max(1)));
    let started = Instant::now();
    let ramp_deadline = started + ramp_timeout;

    // Progress while ramping.
    let progress = {
        let stats = stats.clone();
        let label = label.clone();
        tokio::spawn(async move {
            loop {
                sleep(Duration::from_secs(2)).await;
                if stats.holding.load(Relaxed) {
                    break;
                }
                println!(
                    "{label}PROGRESS t={:.1}s established={} failed={} dropped={}",
                    started.elapsed().as_secs_f64(),
                    stats.established.load(Relaxed),
                    stats.failed.load(Relaxed),
                    stats.dropped.load(Relaxed),
                );
            }
        })
    };

    let period = Duration::from_secs_f64(1.0 / rate);
    for i in 0..connections {
        sleep_until(started + period.mul_f64(i as f64)).await;
        if Instant::now() >= ramp_deadline {
            let left = connections - i;
            stats.failed.fetch_add(left, Relaxed);
            stats
                .errors
                .add(format!("not attempted: ramp timeout ({left} connections)"));
            break;
        }
        let permit = match timeout_at_deadline(ramp_deadline, permits.clone()).await {
            Some(permit) => permit,
            None => {
                let left = connections - i;
                stats.failed.fetch_add(left, Relaxed);
                stats
                    .errors
                    .add(format!("not attempted: ramp timeout ({left} connections)"));
                break;
            }
        };
        let stats = stats.clone();
        let target = target.clone();
        let user = (!user_prefix.is_empty()).then(|| format!("{user_prefix}{i}"));
        tokio::spawn(async move {
            let result = timeout(connect_timeout, connect(&target, user.as_deref())).await;
            drop(permit);
            let mut client = match result {
                Ok(Ok(client)) => client,
                Ok(Err(error)) => {
                    stats.failed.fetch_add(1, Relaxed);
                    stats.errors.add(error.kind());
                    return;
                }
                Err(_) => {
                    stats.failed.fetch_add(1, Relaxed);
                    stats.errors.add("connect: timed out".into());
                    return;
                }
            };
            stats.established.fetch_add(1, Relaxed);
            // Idle: read forever (pings), answer nothing. The process exits at the end.
            loop {
                match client.next().await {
                    Ok(HubMessage::Ping) => {
                        stats.pings.fetch_add(1, Relaxed);
                    }
                    Ok(HubMessage::Close { error, .. }) => {
                        stats.dropped.fetch_add(1, Relaxed);
                        stats
                            .errors
                            .add(format!("dropped: service sent Close {error:?}"));
                        return;
                    }
                    Ok(_) => {
                        stats.other_messages.fetch_add(1, Relaxed);
                    }
                    Err(error) => {
                        stats.dropped.fetch_add(1, Relaxed);
                        stats.errors.add(format!("dropped: {error}"));
                        return;
                    }
                }
            }
        });
    }

    // Wait for every attempt to finish (or the ramp deadline).
    loop {
        let done = stats.established.load(Relaxed) + stats.failed.load(Relaxed);
        if done >= connections || Instant::now() >= ramp_deadline {
            break;
        }
        sleep(Duration::from_millis(50)).await;
    }
    let ramp_seconds = started.elapsed().as_secs_f64();
    stats.holding.store(true, Relaxed);
    progress.abort();
    let established = stats.established.load(Relaxed);
    let failed = connections - established;
    println!(
        "{label}RAMP_DONE established={established} failed={failed} seconds={ramp_seconds:.1} rate_achieved={:.0}/s",
        established as f64 / ramp_seconds.max(0.001)
    );

    // Hold.
    let hold_start = Instant::now();
    while hold_start.elapsed() < hold {
        let left = hold.saturating_sub(hold_start.elapsed());
        sleep(left.min(Duration::from_secs(5))).await;
        println!(
            "{label}PROGRESS t={:.1}s holding={:.0}s open={} dropped={} pings={} other_messages={}",
            started.elapsed().as_secs_f64(),
            hold_start.elapsed().as_secs_f64(),
            stats.established.load(Relaxed) - stats.dropped.load(Relaxed),
            stats.dropped.load(Relaxed),
            stats.pings.load(Relaxed),
            stats.other_messages.load(Relaxed),
        );
    }

    let established = stats.established.load(Relaxed);
    let dropped = stats.dropped.load(Relaxed);
    println!(
        "{label}SUMMARY connections={connections} established={established} failed={} dropped={dropped} open_at_end={} pings={} other_messages={} ramp_seconds={ramp_seconds:.1} hold_seconds={:.1} generator_rss_kb={}",
        connections - established,
        established - dropped,
        stats.pings.load(Relaxed),
        stats.other_messages.load(Relaxed),
        hold_start.elapsed().as_secs_f64(),
        common::rss_kb(std::process::id()).unwrap_or(0),
    );
    stats.errors.print(&format!("{label}ERROR"));
    established == connections && dropped == 0
}

async fn timeout_at_deadline(
    deadline: Instant,
    permits: Arc<Semaphore>,
) -> Option<tokio::sync::OwnedSemaphorePermit> {
    tokio::time::timeout_at(deadline, permits.acquire_owned())
        .await
        .ok()
        .and_then(Result::ok)
}
