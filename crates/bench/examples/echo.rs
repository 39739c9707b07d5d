//! Default-mode echo load: N real SignalR clients, each redirected by an app server's
//! negotiate (`POST {app}/{hub}/negotiate` → `{url, accessToken}` → the service's negotiate
//! → WebSocket → handshake answered by the app server), each invoking
//! `Echo(ts_ms, payload)` (non-blocking, no completion) at a fixed rate. The `bench` hub
//! answers the caller with `Measure(ts_ms, payload)`; the client computes the latency.
//!
//! Open loop: client i sends its k-th message at `start + (i/N + k)/R`, whatever happened
//! before, and `ts_ms` is that intended time (ms since this process's monotonic epoch), so
//! latency counts from when the message should have left, including any time the client
//! spent behind schedule (no coordinated omission). Latencies go into one HdrHistogram (µs,
//! 3 significant digits).
//!
//! Either point it at a running app server (`--app http://127.0.0.1:5050`, plus
//! `--service-pid` for the service's CPU/RSS), or let it start both as child processes
//! (`--service-bin` and `--bench-bin`): `switchyard serve --listen 127.0.0.1:0` and
//! `switchyard-bench app-server --connection-string … --listen 127.0.0.1:0`. The children are
//! killed (SIGKILL) when it exits; if this process is itself killed by a signal they are
//! not, so run it under `timeout`, which signals the whole process group. Everything is
//! bounded: connect ramp, `--seconds` of sending, `--drain-seconds`, then exit.
//!
//! ```text
//! ulimit -n 20000      # the service and this process each need a descriptor per client
//! cargo build --release -p switchyard -p switchyard-bench     # the two binaries
//! cargo build --release -p switchyard-bench --examples         # this example
//! timeout 300 target/release/examples/echo --service-bin target/release/switchyard \
//!     --bench-bin target/release/switchyard-bench --clients 100 --rate 10 --seconds 20
//! ```
//!
//! Output (stdout, `key=value`): `SERVICE`/`APP` (children started), `CLIENTS` (ramp done),
//! `TIMELINE` per second, `SUMMARY`, `LATENCY_MS`, then per process (service, app server,
//! this generator) `CPU` (utime + stime from `/proc/PID/stat` over the window from the first
//! send to the end of the drain, and in total) and `RSS` (`VmRSS`/`VmHWM` at the end), and
//! `ERROR` per failure kind. Exit status 0 if every client connected and every echo came
//! back.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;
use hdrhistogram::Histogram;
use serde_json::Value;
use switchyard_client::{negotiate, WsClient};
use switchyard_hub_protocol::{Format, HubMessage};
use tokio::sync::Semaphore;
use tokio::time::{sleep, sleep_until, timeout, timeout_at, Instant};

/// Default-mode echo load through an app server's negotiate redirect.
#[derive(Debug, Parser)]
#[command(name = "echo")]
struct Args {
    /// App server base URL (negotiate at {app}/{hub}/negotiate). Not with --service-bin.
    #[arg(long)]
    app: Option<String>,
    /// Start this `switchyard` binary (`serve --listen 127.0.0.1:0`) as a child.
    #[arg(long, requires = "bench_bin")]
    service_bin: Option<PathBuf>,
    /// Start this `switchyard-bench` binary (`app-server`) as a child.
    #[arg(long, requires = "service_bin")]
    bench_bin: Option<PathBuf>,
    /// Server connections per hub of the started app server.
    #[arg(long, default_value_t = 5)]
    app_connections: usize,
    /// PID of an already running service, for its CPU time and RSS.
    #[arg(long)]
    service_pid: Option<u32>,
    /// PID of an already running app server, for its CPU time and RSS.
    #[arg(long)]
    app_pid: Option<u32>,
    #[arg(long, default_value = "bench")]
    hub: String,
    /// Client connections.
    #[arg(long, default_value_t = 100)]
    clients: u64,
    /// Echo invocations per second, per client.
    #[arg(long, default_value_t = 10.0)]
    rate: f64,
    /// Length of the payload string (bytes).
    #[arg(long, default_value_t = 2048)]
    payload_bytes: usize,
    /// Seconds of sending.
    #[arg(long, default_value_t = 20.0)]
    seconds: f64,
    /// Seconds to wait for late echoes after the last send.
    #[arg(long, default_value_t = 5.0)]
    drain_seconds: f64,
    /// json | messagepack.
    #[arg(long, default_value = "json")]
    protocol: String,
    /// Clients connected per second.
    #[arg(long, default_value_t = 500.0)]
    connect_rate: f64,
    /// Tokio worker threads of this load generator.
    #[arg(long, default_value_t = 2)]
    threads: usize,
}

/// What every client task adds to.
struct Shared {
    epoch: Instant,
    histogram: Mutex<Histogram<u64>>,
    /// Per second of the send window, by intended send time: (echoes received, sum and max
    /// of their latencies in µs).
    timeline: Mutex<Vec<(u64, u64, u64)>>,
    connected: AtomicU64,
    connect_failed: AtomicU64,
    dropped: AtomicU64,
    sent: AtomicU64,
    received: AtomicU64,
    errors: Mutex<BTreeMap<String, u64>>,
}

impl Shared {
    fn error(&self, kind: impl Into<String>) {
        let mut kind = kind.into();
        if kind.len() > 160 {
            let mut cut = 160;
            while !kind.is_char_boundary(cut) {
                cut -= 1;
            }
            kind.truncate(cut);
        }
        *self
            .errors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(kind)
            .or_insert(0) += 1;
    }
}

fn main() {
    let args = Args::parse();
    let format = match args.protocol.to_ascii_lowercase().as_str() {
        "json" => Format::Json,
        "messagepack" | "msgpack" => Format::MessagePack,
        other => {
            eprintln!("echo: --protocol must be json or messagepack, got '{other}'");
            std::process::exit(2);
        }
    };
    let mut children = Children::default();
    let (app, service_pid, app_pid) = match (&args.app, &args.service_bin, &args.bench_bin) {
        (Some(app), None, None) => (
            app.trim_end_matches('/').to_owned(),
            args.service_pid,
            args.app_pid,
        ),
        (None, Some(service_bin), Some(bench_bin)) => {
            match children.start(service_bin, bench_bin, &args) {
                Ok((app, service, app_server)) => (app, Some(service), Some(app_server)),
                Err(e) => {
                    eprintln!("echo: {e}");
                    std::process::exit(2);
                }
            }
        }
        _ => {
            eprintln!("echo: give either --app URL or both --service-bin and --bench-bin");
            std::process::exit(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads.max(1))
        .enable_all()
        .build()
        .expect("tokio runtime");
    let ok = runtime.block_on(run(&args, format, &app, service_pid, app_pid));
    drop(runtime);
    drop(children);
    std::process::exit(if ok { 0 } else { 1 });
}

async fn run(
    args: &Args,
    format: Format,
    app: &str,
    service_pid: Option<u32>,
    app_pid: Option<u32>,
) -> bool {
    let clients = args.clients;
    let rate = args.rate.max(0.01);
    let per_client = (args.seconds * rate).round() as u64;
    println!(
        "START app={app} hub={} clients={clients} rate_per_client={rate}/s seconds={} payload_bytes={} protocol={} total_rate={:.0}/s",
        args.hub,
        args.seconds,
        args.payload_bytes,
        format.name(),
        clients as f64 * rate
    );
    let shared = Arc::new(Shared {
        epoch: Instant::now(),
        histogram: Mutex::new(Histogram::new_with_bounds(1, 120_000_000, 3).expect("histogram")),
        timeline: Mutex::new(Vec::new()),
        connected: AtomicU64::new(0),
        connect_failed: AtomicU64::new(0),
        dropped: AtomicU64::new(0),
        sent: AtomicU64::new(0),
        received: AtomicU64::new(0),
        errors: Mutex::new(BTreeMap::new()),
    });
    let negotiate_url = format!("{app}/{}/negotiate?negotiateVersion=1", args.hub);
    let http = reqwest::Client::new();
    let payload = Value::String("x".repeat(args.payload_bytes));
    let period = Duration::from_secs_f64(1.0 / rate);

    // 1. Connect every client; each then waits for the schedule.
    let (start_tx, start_rx) = tokio::sync::watch::channel::<Option<Instant>>(None);
    let permits = Arc::new(Semaphore::new(256));
    let connect_rate = args.connect_rate.max(1.0);
    let ramp_deadline =
        shared.epoch + Duration::from_secs_f64(clients as f64 / connect_rate + 60.0);
    let drain = Duration::from_secs_f64(args.drain_seconds.max(0.0));
    let mut tasks = Vec::with_capacity(clients as usize);
    for i in 0..clients {
        sleep_until(shared.epoch + Duration::from_secs_f64(i as f64 / connect_rate)).await;
        let Ok(Ok(permit)) = timeout_at(ramp_deadline, permits.clone().acquire_owned()).await
        else {
            shared.connect_failed.fetch_add(clients - i, Relaxed);
            shared.error("not attempted: ramp timeout");
            break;
        };
        let (shared, http, url, payload) = (
            shared.clone(),
            http.clone(),
            negotiate_url.clone(),
            payload.clone(),
        );
        let mut start_rx = start_rx.clone();
        // This client's phase within one period, so that the total rate is smooth.
        let phase = period.mul_f64(i as f64 / clients as f64);
        tasks.push(tokio::spawn(async move {
            let connected = timeout(Duration::from_secs(30), connect(&http, &url, format)).await;
            drop(permit);
            let mut client = match connected {
                Ok(Ok(client)) => client,
                Ok(Err(e)) => {
                    shared.connect_failed.fetch_add(1, Relaxed);
                    shared.error(e);
                    return;
                }
                Err(_) => {
                    shared.connect_failed.fetch_add(1, Relaxed);
                    shared.error("connect: timed out");
                    return;
                }
            };
            shared.connected.fetch_add(1, Relaxed);
            // Wait for the common start, consuming pings meanwhile.
            let start = loop {
                if let Some(start) = *start_rx.borrow() {
                    break start;
                }
                tokio::select! {
                    changed = start_rx.changed() => if changed.is_err() { return },
                    next = client.next() => if let Err(e) = next {
                        shared.dropped.fetch_add(1, Relaxed);
                        shared.error(format!("dropped before sending: {e}"));
                        return;
                    },
                }
            };
            echo_loop(
                &shared,
                &mut client,
                payload,
                start + phase,
                period,
                per_client,
                drain,
            )
            .await;
            // Keep the socket open until every client is done, so no close shows as a drop.
            std::mem::forget(client);
        }));
    }
    loop {
        let done = shared.connected.load(Relaxed) + shared.connect_failed.load(Relaxed);
        if done >= clients || Instant::now() >= ramp_deadline {
            break;
        }
        sleep(Duration::from_millis(50)).await;
    }
    let connected = shared.connected.load(Relaxed);
    println!(
        "CLIENTS connected={connected} failed={} seconds={:.1}",
        shared.connect_failed.load(Relaxed),
        shared.epoch.elapsed().as_secs_f64()
    );
    sleep(Duration::from_secs(1)).await;

    // 2. Send: every client runs its own timetable from `start`.
    let cpu_before =
        [service_pid, app_pid, Some(std::process::id())].map(|p| p.and_then(cpu_ticks));
    let start = Instant::now() + Duration::from_millis(100);
    let _ = start_tx.send(Some(start));
    for task in tasks {
        let _ = task.await;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let cpu_after = [service_pid, app_pid, Some(std::process::id())].map(|p| p.and_then(cpu_ticks));

    // 3. Report.
    let sent = shared.sent.load(Relaxed);
    let received = shared.received.load(Relaxed);
    println!("TIMELINE (second of intended send: echoes received, mean and max latency ms)");
    for (second, (count, sum, max)) in shared
        .timeline
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .enumerate()
    {
        println!(
            "TIMELINE second={second} received={count} mean_latency_ms={:.1} max_latency_ms={:.1}",
            *sum as f64 / 1000.0 / (*count).max(1) as f64,
            *max as f64 / 1000.0
        );
    }
    println!(
        "SUMMARY clients={connected} connect_failed={} dropped={} scheduled={} sent={sent} received={received} lost={} msgs_per_s={:.0} send_seconds={:.1} window_seconds={elapsed:.1}",
        shared.connect_failed.load(Relaxed),
        shared.dropped.load(Relaxed),
        connected * per_client,
        sent.saturating_sub(received),
        received as f64 / args.seconds.max(0.001),
        args.seconds,
    );
    {
        let h = shared.histogram.lock().unwrap_or_else(|e| e.into_inner());
        let ms = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        println!(
            "LATENCY_MS count={} p50={:.2} p90={:.2} p99={:.2} p99.9={:.2} max={:.2} mean={:.2}",
            h.len(),
            ms(0.5),
            ms(0.9),
            ms(0.99),
            ms(0.999),
            h.max() as f64 / 1000.0,
            h.mean() / 1000.0
        );
    }
    for (index, name) in ["service", "app_server", "generator"].iter().enumerate() {
        let pid = [service_pid, app_pid, Some(std::process::id())][index];
        let Some(pid) = pid else { continue };
        if let (Some(before), Some(after)) = (cpu_before[index], cpu_after[index]) {
            let window = (after - before) as f64 / CLOCK_TICKS;
            println!(
                "CPU process={name} pid={pid} window_cpu_s={window:.2} window_s={elapsed:.1} cores={:.2} total_cpu_s={:.2} us_per_echo={:.1}",
                window / elapsed.max(0.001),
                after as f64 / CLOCK_TICKS,
                window * 1e6 / received.max(1) as f64,
            );
        }
        if let Some((rss, hwm)) = memory_kb(pid) {
            println!("RSS process={name} pid={pid} rss_kb={rss} hwm_kb={hwm}");
        }
    }
    for (kind, count) in shared
        .errors
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
    {
        println!("ERROR count={count} kind={kind:?}");
    }
    connected == clients && connected > 0 && sent == received && sent == connected * per_client
}

/// One client's timetable: send `Echo(ts, payload)` when due, read `Measure` echoes
/// otherwise; after the last send, read until everything came back or `drain` passed.
#[allow(clippy::too_many_arguments)]
async fn echo_loop(
    shared: &Shared,
    client: &mut WsClient,
    payload: Value,
    first: Instant,
    period: Duration,
    count: u64,
    drain: Duration,
) {
    let mut next_k = 0u64;
    let mut outstanding = 0u64;
    let last = first + period.mul_f64(count.saturating_sub(1) as f64);
    let stop = last + drain;
    let window_start = first;
    loop {
        if next_k >= count && (outstanding == 0 || Instant::now() >= stop) {
            break;
        }
        let due = first + period.mul_f64(next_k as f64);
        tokio::select! {
            // The send is not raced: once due, it runs to completion.
            _ = sleep_until(due), if next_k < count => {
                let ts_ms = due.duration_since(shared.epoch).as_secs_f64() * 1000.0;
                let message = HubMessage::Invocation {
                    headers: Vec::new(),
                    invocation_id: None,
                    target: "Echo".to_owned(),
                    arguments: vec![Value::from(ts_ms), payload.clone()],
                    stream_ids: None,
                };
                if let Err(e) = client.send(&message).await {
                    shared.dropped.fetch_add(1, Relaxed);
                    shared.error(format!("send: {e}"));
                    return;
                }
                next_k += 1;
                outstanding += 1;
                shared.sent.fetch_add(1, Relaxed);
            }
            // `WsClient::next` is cancel-safe: bytes are buffered only after a read completes.
            next = client.next() => {
                let now = Instant::now();
                match next {
                    Ok(HubMessage::Invocation { target, arguments, .. }) if target == "Measure" => {
                        let Some(ts_ms) = arguments.first().and_then(Value::as_f64) else {
                            shared.error("Measure without a timestamp");
                            continue;
                        };
                        let sent_at = shared.epoch + Duration::from_secs_f64(ts_ms.max(0.0) / 1000.0);
                        let latency = now.saturating_duration_since(sent_at).as_micros() as u64;
                        outstanding = outstanding.saturating_sub(1);
                        shared.received.fetch_add(1, Relaxed);
                        let _ = shared
                            .histogram
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .record(latency.max(1));
                        let second = sent_at.saturating_duration_since(window_start).as_secs() as usize;
                        let mut timeline = shared.timeline.lock().unwrap_or_else(|e| e.into_inner());
                        if timeline.len() <= second {
                            timeline.resize(second + 1, (0, 0, 0));
                        }
                        timeline[second].0 += 1;
                        timeline[second].1 += latency;
                        timeline[second].2 = timeline[second].2.max(latency);
                    }
                    Ok(HubMessage::Ping) => {}
                    Ok(HubMessage::Close { error, .. }) => {
                        shared.dropped.fetch_add(1, Relaxed);
                        shared.error(format!("dropped: Close {error:?}"));
                        return;
                    }
                    Ok(HubMessage::Completion { result, .. }) => {
                        shared.error(format!("unexpected completion: {result:?}"));
                    }
                    Ok(other) => shared.error(format!("unexpected message: {other:?}")),
                    Err(e) => {
                        shared.dropped.fetch_add(1, Relaxed);
                        shared.error(format!("dropped: {e}"));
                        return;
                    }
                }
            }
            _ = sleep_until(stop), if next_k >= count => {}
        }
    }
}

/// App-server negotiate → the service's negotiate → WebSocket → handshake.
async fn connect(
    http: &reqwest::Client,
    negotiate_url: &str,
    format: Format,
) -> Result<WsClient, String> {
    let response = http
        .post(negotiate_url)
        .send()
        .await
        .map_err(|e| format!("app negotiate: {e}"))?;
    let status = response.status();
    if !status.is_success() {
        return Err(format!("app negotiate: status {status}"));
    }
    let redirect: Value = response
        .json()
        .await
        .map_err(|e| format!("app negotiate body: {e}"))?;
    let (Some(url), Some(token)) = (redirect["url"].as_str(), redirect["accessToken"].as_str())
    else {
        return Err("app negotiate: no url/accessToken".to_owned());
    };
    let negotiated = negotiate(url, token, 1)
        .await
        .map_err(|e| format!("service negotiate: {e}"))?;
    let separator = if url.contains('?') { '&' } else { '?' };
    let ws_url = format!(
        "{}{separator}id={}",
        url.replacen("https://", "wss://", 1)
            .replacen("http://", "ws://", 1),
        url::form_urlencoded::byte_serialize(negotiated.id_value.as_bytes()).collect::<String>()
    );
    WsClient::connect(&ws_url, Some(token), format)
        .await
        .map_err(|e| format!("websocket: {e}"))
}

/// `sysconf(_SC_CLK_TCK)` on Linux (x86-64 and aarch64).
const CLOCK_TICKS: f64 = 100.0;

/// utime + stime of `pid`, in clock ticks.
fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may contain spaces): state is field 3.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// (VmRSS, VmHWM) of `pid`, kB.
fn memory_kb(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// The service and app server started by `--service-bin`/`--bench-bin`, killed on drop.
#[derive(Default)]
struct Children {
    processes: Vec<Child>,
}

impl Children {
    /// Starts the service, then the app server against it; returns the app server's URL and
    /// both PIDs once the app server has printed its address (its server connections are up).
    fn start(
        &mut self,
        service_bin: &PathBuf,
        bench_bin: &PathBuf,
        args: &Args,
    ) -> Result<(String, u32, u32), String> {
        let mut service = Command::new(service_bin)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .env("SWITCHYARD_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("start {}: {e}", service_bin.display()))?;
        let service_pid = service.id();
        let service_out = service.stdout.take().expect("piped");
        self.processes.push(service);
        let lines = read_lines_until(service_out, "ConnectionString: ")?;
        let connection_string = lines
            .iter()
            .find_map(|l| l.strip_prefix("ConnectionString: "))
            .ok_or("no ConnectionString line from the service")?
            .trim()
            .to_owned();
        println!("SERVICE pid={service_pid} {}", lines.join(" | "));

        let mut app = Command::new(bench_bin)
            .args([
                "app-server",
                "--connection-string",
                &connection_string,
                "--listen",
                "127.0.0.1:0",
                "--hub",
                &args.hub,
                "--connections",
                &args.app_connections.to_string(),
            ])
            .env("SWITCHYARD_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("start {}: {e}", bench_bin.display()))?;
        let app_pid = app.id();
        let app_out = app.stdout.take().expect("piped");
        self.processes.push(app);
        let lines = read_lines_until(app_out, "App server listening on ")?;
        let url = lines
            .iter()
            .find_map(|l| l.strip_prefix("App server listening on "))
            .ok_or("no address line from the app server")?
            .trim()
            .to_owned();
        println!("APP pid={app_pid} url={url}");
        Ok((url, service_pid, app_pid))
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        // The service first: killing the app server first would make the service log every
        // server connection's reset as a warning.
        for child in self.processes.iter_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Reads lines (within 30 s) until one starts with `prefix`; the rest of the output is
/// drained in the background so the child never blocks on a full pipe.
fn read_lines_until(
    out: std::process::ChildStdout,
    prefix: &'static str,
) -> Result<Vec<String>, String> {
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                // Nobody listens any more: keep draining.
                continue;
            }
        }
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut lines = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                let done = line.starts_with(prefix);
                lines.push(line);
                if done {
                    return Ok(lines);
                }
            }
            Err(_) => return Err(format!("no line starting with {prefix:?} within 30 s")),
        }
    }
}
