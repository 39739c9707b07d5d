//! Load generator for the candidate servers (tokio-tungstenite client).
//!
//! `loadgen idle --port P --pid PID [--conns 10000] [--rate 2000] [--hold 5] [--hello 1]`
//!   Reads the server's VmRSS, opens `conns` WebSocket connections at `rate`
//!   per second, optionally exchanges one small text message on each
//!   (`--hello 1`, like the SignalR handshake), holds them idle for `hold`
//!   seconds, reads VmRSS again and prints (after - before) / conns.
//!
//! `loadgen echo --port P [--conns 100] [--size 256] [--window 16] [--secs 10]`
//!   Each connection keeps up to `window` text messages of `size` bytes in
//!   flight (pipelined); the send time is embedded in the payload. After a 1 s
//!   warm-up, echoes are counted for `secs` seconds; prints msg/s and p50/p99
//!   round-trip latency.
//!
//! Every phase has a timeout; the process exits by itself.

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use futures_util::{SinkExt, StreamExt};
use tokio::{net::TcpStream, sync::Semaphore};
use tokio_tungstenite::{
    tungstenite::{protocol::WebSocketConfig, Message},
    MaybeTlsStream, WebSocketStream,
};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// `--name value` lookup with a default.
fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().ok().unwrap_or_else(|| panic!("bad value for {name}")))
        .unwrap_or(default)
}

/// VmRSS of `pid` in bytes.
fn vm_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read /proc/PID/status");
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS line");
    let kb: u64 = line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("VmRSS value");
    kb * 1024
}

async fn connect(port: u16, cfg: WebSocketConfig) -> Result<Ws, Box<dyn std::error::Error + Send + Sync>> {
    let tcp = TcpStream::connect(("127.0.0.1", port)).await?;
    tcp.set_nodelay(true)?;
    let url = format!("ws://127.0.0.1:{port}/ws");
    let (ws, _) = tokio_tungstenite::client_async_with_config(url, MaybeTlsStream::Plain(tcp), Some(cfg)).await?;
    Ok(ws)
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("idle") => idle(&args).await,
        Some("echo") => echo(&args).await,
        _ => panic!("usage: loadgen idle|echo [options] (see source header)"),
    }
    // Do not wait for thousands of sockets to be torn down gracefully.
    std::process::exit(0);
}

async fn idle(args: &[String]) {
    let port: u16 = arg(args, "--port", 9001);
    let pid: u32 = arg(args, "--pid", 0);
    let conns: usize = arg(args, "--conns", 10_000);
    let rate: usize = arg(args, "--rate", 2_000);
    let hold: u64 = arg(args, "--hold", 5);
    let hello: u8 = arg(args, "--hello", 1);
    assert!(pid != 0, "--pid is required");

    // Let the server settle, then take the baseline.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = vm_rss(pid);

    let cfg = WebSocketConfig::default().read_buffer_size(4096).write_buffer_size(0);
    let ok = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    // Open connections in 10 ms batches to keep the rate bounded.
    let per_tick = (rate / 100).max(1);
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    let mut opened = 0;
    while opened < conns {
        tick.tick().await;
        for _ in 0..per_tick.min(conns - opened) {
            opened += 1;
            let (ok, failed) = (ok.clone(), failed.clone());
            tokio::spawn(async move {
                let res = tokio::time::timeout(Duration::from_secs(20), async {
                    let mut ws = connect(port, cfg).await?;
                    if hello == 1 {
                        // ~SignalR JSON handshake request; wait for the echo.
                        ws.send(Message::text("{\"protocol\":\"json\",\"version\":1}\u{1e}")).await?;
                        ws.next().await.ok_or("closed")??;
                    }
                    Ok::<_, Box<dyn std::error::Error + Send + Sync>>(ws)
                })
                .await;
                match res {
                    Ok(Ok(mut ws)) => {
                        ok.fetch_add(1, Ordering::Relaxed);
                        // Hold the connection: the server never sends unprompted.
                        let _ = ws.next().await;
                    }
                    _ => {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    }
    // Wait (bounded) until every connection is established or failed.
    let wait_deadline = Instant::now() + Duration::from_secs(30);
    while ok.load(Ordering::Relaxed) + failed.load(Ordering::Relaxed) < conns && Instant::now() < wait_deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let ramp = started.elapsed();
    tokio::time::sleep(Duration::from_secs(hold)).await;
    let after = vm_rss(pid);
    let n = ok.load(Ordering::Relaxed);
    let per_conn = after.saturating_sub(before) as f64 / n.max(1) as f64;
    println!(
        "IDLE conns_ok={n} failed={} ramp_s={:.1} rss_before={before} rss_after={after} bytes_per_conn={per_conn:.0}",
        failed.load(Ordering::Relaxed),
        ramp.as_secs_f64()
    );
}

async fn echo(args: &[String]) {
    let port: u16 = arg(args, "--port", 9001);
    let conns: usize = arg(args, "--conns", 100);
    let size: usize = arg(args, "--size", 256);
    let window: usize = arg(args, "--window", 16);
    let secs: u64 = arg(args, "--secs", 10);
    assert!(size >= 16, "--size must be >= 16 (timestamp prefix)");

    // Client batches its own writes (64 KiB) so it is not the bottleneck.
    let cfg = WebSocketConfig::default().write_buffer_size(64 * 1024);
    let epoch = Instant::now();
    let measure_start = epoch + Duration::from_secs(1);
    let measure_end = measure_start + Duration::from_secs(secs);

    let mut readers = Vec::with_capacity(conns);
    for _ in 0..conns {
        let ws = connect(port, cfg).await.expect("connect");
        let (mut sink, mut stream) = ws.split();
        let credits = Arc::new(Semaphore::new(window));

        // Writer: send as many messages as there are credits, flush once.
        let wcredits = credits.clone();
        tokio::spawn(async move {
            let mut payload = vec![b'x'; size];
            while Instant::now() < measure_end {
                let Ok(p) = wcredits.acquire().await else { return };
                p.forget();
                let n = 1 + wcredits.available_permits();
                if let Ok(extra) = wcredits.try_acquire_many(n as u32 - 1) {
                    extra.forget();
                }
                for _ in 0..n {
                    let ts = epoch.elapsed().as_nanos() as u64;
                    payload[..16].copy_from_slice(format!("{ts:016x}").as_bytes());
                    let text = String::from_utf8(payload.clone()).expect("ascii");
                    if sink.feed(Message::text(text)).await.is_err() {
                        return;
                    }
                }
                if sink.flush().await.is_err() {
                    return;
                }
            }
        });

        // Reader: record round-trip latency (µs) of echoes inside the window.
        readers.push(tokio::spawn(async move {
            let mut lat_us: Vec<u32> = Vec::new();
            while let Some(Ok(Message::Text(t))) = stream.next().await {
                let now = Instant::now();
                credits.add_permits(1);
                let ts = u64::from_str_radix(&t.as_str()[..16], 16).unwrap_or(0);
                if now >= measure_end {
                    break;
                }
                if now >= measure_start {
                    let sent = epoch + Duration::from_nanos(ts);
                    lat_us.push(now.duration_since(sent).as_micros() as u32);
                }
            }
            lat_us
        }));
    }

    let mut all: Vec<u32> = Vec::new();
    for r in readers {
        if let Ok(Ok(v)) = tokio::time::timeout_at((measure_end + Duration::from_secs(5)).into(), r).await {
            all.extend(v);
        }
    }
    all.sort_unstable();
    let pct = |p: f64| all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1))).copied().unwrap_or(0);
    println!(
        "ECHO conns={conns} size={size} window={window} secs={secs} msgs={} msg_per_s={:.0} p50_us={} p99_us={}",
        all.len(),
        all.len() as f64 / secs as f64,
        pct(0.50),
        pct(0.99)
    );
}
