//! Redis client candidates for the backplane (ADR 0005), measured in the backplane's shape:
//! one publisher connection sending pipelined PUBLISHes on one channel, one subscriber
//! connection reading them as RESP3 pushes. The publisher and the subscriber each run on their
//! own thread with their own current-thread tokio runtime, so that each side's CPU time (the
//! client's tasks, encoding, decoding and socket syscalls) can be read from
//! /proc/self/task/TID/stat.
//!
//! ```text
//! redis-candidates throughput <rs|fred|raw> --port P [--size 2048] [--secs 5] [--warm 1]
//!                             [--batch 256] [--style pipe|window]
//! redis-candidates latency    <rs|fred|raw> --port P [--size 64] [--count 5000] [--warm 200]
//! redis-candidates idle       <rs|fred|raw> --port P
//! redis-candidates reconnect  <rs|fred> --port P --how client-kill|restart [--down-ms 1000]
//!                             [--channels 0] [--redis-server /usr/bin/redis-server] [--dir /tmp]
//! ```
//!
//! `throughput`/`latency`/`idle` use a Redis already listening on 127.0.0.1:P. `reconnect`
//! starts its own redis-server on P (under `timeout -s KILL`), kills it or its pub/sub
//! clients, and stops it at the end. Every mode exits by itself after `--max-secs` (default 30).

mod common;
mod fredc;
mod raw;
mod rs;

use std::collections::HashMap;
use std::future::Future;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{cpu_ticks, now_ns, payload, pct_us, rss_kb, Stats, MAX_LAG};

/// redis-server started by `reconnect`, killed by the watchdog if the run overstays.
static REDIS_PID: AtomicU32 = AtomicU32::new(0);
/// Its pidfile, removed once it is killed (so that no one kills a reused pid later).
static REDIS_PIDFILE: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());

enum Pub {
    Rs(rs::Pub),
    Fred(fredc::Pub),
    Raw(raw::Pub),
}

impl Pub {
    async fn connect(candidate: &str, port: u16) -> Result<Self, String> {
        Ok(match candidate {
            "rs" => Pub::Rs(rs::Pub::connect(port).await?),
            "fred" => Pub::Fred(fredc::Pub::connect(port).await?),
            "raw" => Pub::Raw(raw::Pub::connect(port).await?),
            other => return Err(format!("unknown candidate {other}")),
        })
    }

    async fn batch(&mut self, messages: &[Bytes]) -> Result<(), String> {
        match self {
            Pub::Rs(p) => p.batch(messages).await,
            Pub::Fred(p) => p.batch(messages).await,
            Pub::Raw(p) => p.batch(messages).await,
        }
    }

    async fn one(&mut self, message: Bytes) -> Result<i64, String> {
        match self {
            Pub::Rs(p) => p.one(message).await,
            Pub::Fred(p) => p.one(message).await,
            Pub::Raw(p) => p.one(message).await,
        }
    }

    async fn window(&mut self, stats: &Stats, window: usize, next: impl FnMut() -> Option<Bytes>) {
        match self {
            Pub::Rs(p) => p.window(stats, window, next).await,
            Pub::Fred(p) => p.window(stats, window, next).await,
            Pub::Raw(_) => panic!("the raw baseline only pipelines (--style pipe)"),
        }
    }
}

#[allow(dead_code)]
enum Sub {
    Rs(rs::Sub),
    Fred(fredc::Sub),
    Raw(raw::Sub),
}

async fn connect_sub(candidate: &str, port: u16, stats: Arc<Stats>) -> Result<Sub, String> {
    Ok(match candidate {
        "rs" => Sub::Rs(rs::Sub::connect(port, stats).await?),
        "fred" => Sub::Fred(fredc::Sub::connect(port, stats).await?),
        "raw" => Sub::Raw(raw::Sub::connect(port, stats).await?),
        other => return Err(format!("unknown candidate {other}")),
    })
}

struct Args(HashMap<String, String>);

impl Args {
    fn parse(rest: &[String]) -> Self {
        let mut map = HashMap::new();
        let mut it = rest.iter();
        while let Some(key) = it.next() {
            let key = key.trim_start_matches("--").to_string();
            let value = it.next().cloned().unwrap_or_default();
            map.insert(key, value);
        }
        Args(map)
    }

    fn get<T: std::str::FromStr>(&self, key: &str, default: T) -> T {
        self.0
            .get(key)
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    }

    fn str(&self, key: &str, default: &str) -> String {
        self.0.get(key).cloned().unwrap_or_else(|| default.to_string())
    }
}

/// `RT=multi`: one multi-thread runtime (2 workers) for both sides, like the service's runtime.
/// The client's tasks then run on the workers, so only the process's CPU time means anything.
static SHARED_RUNTIME: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();

fn multi_thread() -> bool {
    std::env::var("RT").is_ok_and(|v| v == "multi")
}

/// Runs `task` on a new thread with its own current-thread runtime (or, with `RT=multi`, on the
/// shared runtime); returns the thread's `stat` path (for its CPU time) once it runs.
fn start_thread<F, Fut>(name: &str, task: F) -> (std::thread::JoinHandle<()>, String)
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + 'static,
{
    let (tx, rx) = std::sync::mpsc::channel();
    let handle = std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            tx.send(common::thread_stat_path()).unwrap();
            if multi_thread() {
                SHARED_RUNTIME
                    .get_or_init(|| {
                        tokio::runtime::Builder::new_multi_thread()
                            .worker_threads(2)
                            .enable_all()
                            .build()
                            .unwrap()
                    })
                    .block_on(task());
                return;
            }
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(task());
        })
        .unwrap();
    (handle, rx.recv().unwrap())
}

/// Starts the subscriber thread and waits until it is subscribed.
fn start_sub(candidate: &str, port: u16, stats: &Arc<Stats>) -> (std::thread::JoinHandle<()>, String) {
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let (candidate, stats) = (candidate.to_string(), stats.clone());
    let started = start_thread("sub", move || async move {
        match connect_sub(&candidate, port, stats.clone()).await {
            Ok(sub) => {
                let _ = ready_tx.send(Ok(()));
                while !stats.stopped() {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                drop(sub);
            }
            Err(error) => {
                let _ = ready_tx.send(Err(error));
            }
        }
    });
    match ready_rx.recv_timeout(Duration::from_secs(10)) {
        Ok(Ok(())) => started,
        Ok(Err(error)) => fail(&format!("subscriber: {error}")),
        Err(_) => fail("subscriber: not subscribed after 10 s"),
    }
}

/// Starts the publisher thread: it connects, says so, waits for `go`, then runs `work`.
fn start_pub<W, WF>(
    candidate: &str,
    port: u16,
    go: Arc<AtomicBool>,
    work: W,
) -> (std::thread::JoinHandle<()>, String)
where
    W: FnOnce(Pub) -> WF + Send + 'static,
    WF: Future<Output = ()> + 'static,
{
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let candidate = candidate.to_string();
    let started = start_thread("pub", move || async move {
        match Pub::connect(&candidate, port).await {
            Ok(publisher) => {
                let _ = ready_tx.send(Ok(()));
                while !go.load(Relaxed) {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                work(publisher).await;
            }
            Err(error) => {
                let _ = ready_tx.send(Err(error));
            }
        }
    });
    match ready_rx.recv_timeout(Duration::from_secs(10)) {
        Ok(Ok(())) => started,
        Ok(Err(error)) => fail(&format!("publisher: {error}")),
        Err(_) => fail("publisher: not connected after 10 s"),
    }
}

fn fail(message: &str) -> ! {
    eprintln!("error: {message}");
    kill_redis();
    std::process::exit(2);
}

fn kill_redis() {
    let pid = REDIS_PID.swap(0, Relaxed);
    if pid != 0 {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        if let Ok(pidfile) = REDIS_PIDFILE.lock() {
            let _ = std::fs::remove_file(pidfile.as_str());
        }
    }
}

fn main() {
    now_ns(); // fixes the epoch
    let argv: Vec<String> = std::env::args().collect();
    if argv.len() < 3 {
        eprintln!("usage: redis-candidates <throughput|latency|idle|reconnect> <rs|fred|raw> --port P ...");
        std::process::exit(1);
    }
    let (mode, candidate) = (argv[1].clone(), argv[2].clone());
    let args = Args::parse(&argv[3..]);
    let max_secs: u64 = args.get("max-secs", 30);
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(max_secs));
        eprintln!("error: still running after {max_secs} s; giving up");
        kill_redis();
        std::process::exit(3);
    });
    let port: u16 = args.get("port", 0);
    if port == 0 {
        fail("--port is required");
    }
    let line = match mode.as_str() {
        "throughput" => throughput(&candidate, port, &args),
        "latency" => latency(&candidate, port, &args),
        "idle" => idle(&candidate, port),
        "reconnect" => reconnect(&candidate, port, &args),
        other => fail(&format!("unknown mode {other}")),
    };
    if candidate == "fred" {
        println!("{candidate} {line} fred_bcast={}", fredc::broadcast_capacity());
    } else {
        println!("{candidate} {line}");
    }
    // The threads have stopped; fred/redis-rs tasks died with their runtimes.
    std::process::exit(0);
}

struct Snapshot {
    at: Instant,
    pub_ticks: u64,
    sub_ticks: u64,
    proc_ticks: u64,
    published: u64,
    received: u64,
}

impl Snapshot {
    fn take(stats: &Stats, pub_stat: &str, sub_stat: &str) -> Self {
        Snapshot {
            at: Instant::now(),
            pub_ticks: cpu_ticks(pub_stat),
            sub_ticks: cpu_ticks(sub_stat),
            proc_ticks: cpu_ticks("/proc/self/stat"),
            published: stats.published.load(Relaxed),
            received: stats.received.load(Relaxed),
        }
    }
}

/// Microseconds of CPU per message from a difference in clock ticks (100 per second).
fn us_per(ticks: u64, messages: u64) -> f64 {
    ticks as f64 * 10_000.0 / messages.max(1) as f64
}

fn throughput(candidate: &str, port: u16, args: &Args) -> String {
    let size: usize = args.get("size", 2048);
    let secs: f64 = args.get("secs", 5.0);
    let warm: f64 = args.get("warm", 1.0);
    let batch: usize = args.get("batch", 256);
    let style = args.str("style", "pipe");
    let stats = Arc::new(Stats::default());
    let (sub_thread, sub_stat) = start_sub(candidate, port, &stats);
    let go = Arc::new(AtomicBool::new(false));
    let worker_stats = stats.clone();
    let pipe = style == "pipe";
    let (pub_thread, pub_stat) = start_pub(candidate, port, go.clone(), move |mut publisher| async move {
        let stats = worker_stats;
        let mut seq = 0u64;
        if pipe {
            let mut messages = Vec::with_capacity(batch);
            while !stats.stopped() {
                if seq.saturating_sub(stats.consumed()) > MAX_LAG {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    continue;
                }
                messages.clear();
                for _ in 0..batch {
                    messages.push(payload(seq, size));
                    seq += 1;
                }
                match publisher.batch(&messages).await {
                    Ok(()) => stats.published_ok(batch as u64),
                    Err(_) => {
                        stats.pub_errors.fetch_add(batch as u64, Relaxed);
                    }
                }
            }
        } else {
            let s = stats.clone();
            let next = move || {
                if s.stopped() || seq.saturating_sub(s.consumed()) > MAX_LAG {
                    return None;
                }
                seq += 1;
                Some(payload(seq - 1, size))
            };
            publisher.window(&stats, batch, next).await;
        }
    });
    let (rss_connected, _) = rss_kb();
    go.store(true, Relaxed);
    std::thread::sleep(Duration::from_secs_f64(warm));
    let a = Snapshot::take(&stats, &pub_stat, &sub_stat);
    std::thread::sleep(Duration::from_secs_f64(secs));
    let b = Snapshot::take(&stats, &pub_stat, &sub_stat);
    stats.stop.store(true, Relaxed);
    let _ = pub_thread.join();
    let _ = sub_thread.join();
    let (rss_end, hwm) = rss_kb();
    let dt = b.at.duration_since(a.at).as_secs_f64();
    let (published, received) = (b.published - a.published, b.received - a.received);
    let side = |ticks: u64, messages: u64| {
        if multi_thread() {
            "na".to_string() // the client's tasks run on the shared workers
        } else {
            format!("{:.2}", us_per(ticks, messages))
        }
    };
    let pct = |ticks: u64| {
        if multi_thread() {
            "na".to_string()
        } else {
            format!("{:.0}", ticks as f64 / dt)
        }
    };
    format!(
        "THROUGHPUT rt={} style={style} size={size} batch={batch} recv_msg_s={:.0} pub_msg_s={:.0} \
         pub_cpu_us_msg={} sub_cpu_us_msg={} proc_cpu_us_msg={:.2} pub_cpu_pct={} sub_cpu_pct={} \
         missing={} reordered={} lagged={} pub_errors={} rss_connected_kb={rss_connected} rss_end_kb={rss_end} hwm_kb={hwm}",
        if multi_thread() { "multi" } else { "current" },
        received as f64 / dt,
        published as f64 / dt,
        side(b.pub_ticks - a.pub_ticks, published),
        side(b.sub_ticks - a.sub_ticks, received),
        us_per(b.proc_ticks - a.proc_ticks, received),
        pct(b.pub_ticks - a.pub_ticks),
        pct(b.sub_ticks - a.sub_ticks),
        stats.missing.load(Relaxed),
        stats.reordered.load(Relaxed),
        stats.lagged.load(Relaxed),
        stats.pub_errors.load(Relaxed),
    )
}

fn latency(candidate: &str, port: u16, args: &Args) -> String {
    let size: usize = args.get("size", 64);
    let count: usize = args.get("count", 5000);
    let warm: usize = args.get("warm", 200);
    let stats = Arc::new(Stats::default());
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let _ = stats.latency.set(tx);
    let (sub_thread, _) = start_sub(candidate, port, &stats);
    let go = Arc::new(AtomicBool::new(true));
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let (pub_thread, _) = start_pub(candidate, port, go, move |mut publisher| async move {
        let mut samples = Vec::with_capacity(count);
        let mut timeouts = 0u64;
        for i in 0..(warm + count) {
            if publisher.one(payload(i as u64, size)).await.is_err() {
                timeouts += 1;
                continue;
            }
            match tokio::time::timeout(Duration::from_secs(1), rx.recv()).await {
                Ok(Some(ns)) if i >= warm => samples.push(ns),
                Ok(Some(_)) => {}
                _ => timeouts += 1,
            }
        }
        let _ = done_tx.send((samples, timeouts));
    });
    let (mut samples, timeouts) = done_rx
        .recv_timeout(Duration::from_secs(25))
        .unwrap_or_else(|_| fail("latency run did not finish"));
    stats.stop.store(true, Relaxed);
    let _ = pub_thread.join();
    let _ = sub_thread.join();
    samples.sort_unstable();
    let mean = samples.iter().sum::<u64>() as f64 / samples.len().max(1) as f64 / 1000.0;
    format!(
        "LATENCY rt={} size={size} n={} p50_us={:.1} p99_us={:.1} p999_us={:.1} max_us={:.1} mean_us={mean:.1} failed={timeouts}",
        if multi_thread() { "multi" } else { "current" },
        samples.len(),
        pct_us(&samples, 0.50),
        pct_us(&samples, 0.99),
        pct_us(&samples, 0.999),
        pct_us(&samples, 1.0),
    )
}

fn idle(candidate: &str, port: u16) -> String {
    let stats = Arc::new(Stats::default());
    let (rss_base, _) = rss_kb();
    let (sub_thread, _) = start_sub(candidate, port, &stats);
    let go = Arc::new(AtomicBool::new(false));
    let (pub_thread, _) = start_pub(candidate, port, go.clone(), |mut publisher| async move {
        for round in 0..4u64 {
            let messages: Vec<Bytes> = (0..256).map(|i| payload(round * 256 + i, 2048)).collect();
            let _ = publisher.batch(&messages).await;
        }
        std::future::pending::<()>().await;
    });
    std::thread::sleep(Duration::from_millis(300));
    let (rss_connected, _) = rss_kb();
    go.store(true, Relaxed);
    let deadline = Instant::now() + Duration::from_secs(5);
    while stats.consumed() < 1024 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(500));
    let (rss_after, hwm) = rss_kb();
    let received = stats.received.load(Relaxed);
    stats.stop.store(true, Relaxed);
    let _ = sub_thread.join();
    drop(pub_thread); // parked on `pending`; the process exits
    format!(
        "IDLE rss_base_kb={rss_base} rss_connected_kb={rss_connected} rss_after_1024x2KiB_kb={rss_after} \
         hwm_kb={hwm} connected_delta_kb={} after_delta_kb={} received={received} lagged={}",
        rss_connected as i64 - rss_base as i64,
        rss_after as i64 - rss_base as i64,
        stats.lagged.load(Relaxed),
    )
}

/// A redis-server on `port` (under `timeout -s KILL`, so it cannot outlive the run by much);
/// returns once it accepts connections.
fn spawn_redis(server: &str, port: u16, dir: &str, max_secs: u64) -> Child {
    let pidfile = format!("{dir}/redis-{port}.pid");
    let _ = std::fs::remove_file(&pidfile);
    let child = Command::new("timeout")
        .args(["-s", "KILL", &max_secs.to_string(), server])
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
        .args(["--pidfile", &pidfile, "--logfile", &format!("{dir}/redis-{port}.log")])
        .args(["--dir", dir])
        .spawn()
        .unwrap_or_else(|e| fail(&format!("cannot start {server}: {e}")));
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Ok(pid) = std::fs::read_to_string(&pidfile) {
            if let Ok(pid) = pid.trim().parse() {
                if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    REDIS_PID.store(pid, Relaxed);
                    *REDIS_PIDFILE.lock().unwrap() = pidfile;
                    return child;
                }
            }
        }
        if Instant::now() > deadline {
            fail("redis-server did not start");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Sends one command on a fresh connection (RESP2) and returns the last of the first `lines`
/// reply lines.
fn command(port: u16, words: &[&str], lines: usize) -> String {
    use std::io::{BufRead, BufReader, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return "connect-failed".into();
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let mut out = format!("*{}\r\n", words.len());
    for w in words {
        out.push_str(&format!("${}\r\n{w}\r\n", w.len()));
    }
    let _ = stream.write_all(out.as_bytes());
    let mut reader = BufReader::new(stream);
    let mut reply = String::new();
    for _ in 0..lines {
        reply.clear();
        if reader.read_line(&mut reply).unwrap_or(0) == 0 {
            break;
        }
    }
    reply.trim().to_string()
}

fn reconnect(candidate: &str, port: u16, args: &Args) -> String {
    if candidate == "raw" {
        fail("the raw baseline does not reconnect");
    }
    let how = args.str("how", "restart");
    let down = Duration::from_millis(args.get("down-ms", 1000));
    let server = args.str("redis-server", "/usr/bin/redis-server");
    let dir = args.str("dir", "/tmp");
    let mut redis = spawn_redis(&server, port, &dir, 25);
    let stats = Arc::new(Stats::default());
    stats.extra_channels.store(args.get("channels", 0), Relaxed);
    let (sub_thread, _) = start_sub(candidate, port, &stats);
    let go = Arc::new(AtomicBool::new(true));
    let worker_stats = stats.clone();
    let (pub_thread, _) = start_pub(candidate, port, go, move |mut publisher| async move {
        let stats = worker_stats;
        let mut seq = 0u64;
        while !stats.stopped() {
            match publisher.one(payload(seq, 64)).await {
                Ok(receivers) => {
                    stats.published_ok(1);
                    if receivers == 0 {
                        stats.zero_receivers.fetch_add(1, Relaxed);
                    }
                }
                Err(_) => {
                    stats.pub_errors.fetch_add(1, Relaxed);
                }
            }
            seq += 1;
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    });
    std::thread::sleep(Duration::from_secs(1));
    let before = stats.received.load(Relaxed);
    let killed;
    let up_ns;
    if how == "client-kill" {
        killed = command(port, &["CLIENT", "KILL", "TYPE", "pubsub"], 1);
        up_ns = now_ns();
        stats.disrupt_ns.store(up_ns, Relaxed);
    } else {
        kill_redis();
        let _ = redis.wait();
        stats.disrupt_ns.store(now_ns(), Relaxed);
        killed = "SIGKILL".into();
        std::thread::sleep(down);
        redis = spawn_redis(&server, port, &dir, 20);
        up_ns = now_ns();
    }
    let deadline = Instant::now() + Duration::from_secs(8);
    while stats.sub_recovered_ns.load(Relaxed) == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(500));
    // `*2`, `$len`, the channel, `:count`: the fourth line is the count.
    let numsub = command(port, &["PUBSUB", "NUMSUB", common::CHANNEL], 4);
    stats.stop.store(true, Relaxed);
    let _ = pub_thread.join();
    let _ = sub_thread.join();
    kill_redis();
    let _ = redis.wait();
    let ms = |at: u64| {
        if at == 0 {
            "never".to_string()
        } else {
            format!("{:.0}", ((at as f64 - up_ns as f64) / 1e6).max(0.0))
        }
    };
    format!(
        "RECONNECT how={how} down_ms={} channels={} subscribe_ms={:.1} kill_reply={killed} sub_resumed_ms={} pub_resumed_ms={} \
         subscribers_after={} received_before={before} received={} missing={} published_ok={} zero_receivers={} pub_errors={}",
        if how == "client-kill" { 0 } else { down.as_millis() },
        1 + stats.extra_channels.load(Relaxed),
        stats.subscribe_ns.load(Relaxed) as f64 / 1e6,
        ms(stats.sub_recovered_ns.load(Relaxed)),
        ms(stats.pub_recovered_ns.load(Relaxed)),
        numsub.trim_start_matches(':'),
        stats.received.load(Relaxed),
        stats.missing.load(Relaxed),
        stats.published.load(Relaxed),
        stats.zero_receivers.load(Relaxed),
        stats.pub_errors.load(Relaxed),
    )
}
