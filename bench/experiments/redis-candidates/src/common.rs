//! What every candidate shares: message payloads, the subscriber's counters, and readings of
//! CPU time and memory from /proc.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;
use std::time::Instant;

use bytes::Bytes;
use tokio::sync::mpsc::UnboundedSender;

/// The one channel everything is published on.
pub const CHANNEL: &str = "sy-bench:{hub}:all";

/// The publisher stops adding messages while this many are sent but not yet read by the
/// subscriber, so that the rate measured is what the subscriber keeps up with, and Redis's
/// output buffer for the subscriber stays below its 32 MiB hard limit for pub/sub clients
/// (4096 x 2 KiB = 8 MiB at most; the 8 MiB/60 s soft limit cannot trigger in a 10 s run).
pub const MAX_LAG: u64 = 4096;

static EPOCH: OnceLock<Instant> = OnceLock::new();

/// Nanoseconds since the process's first call (monotonic, shared by all threads).
pub fn now_ns() -> u64 {
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// A message of `size` bytes (at least 16): sequence number, send time, then filler.
pub fn payload(seq: u64, size: usize) -> Bytes {
    let mut v = vec![b'x'; size.max(16)];
    v[..8].copy_from_slice(&seq.to_le_bytes());
    v[8..16].copy_from_slice(&now_ns().to_le_bytes());
    Bytes::from(v)
}

/// Counters shared by the publisher thread, the subscriber thread and the main thread.
#[derive(Default)]
pub struct Stats {
    pub stop: AtomicBool,
    /// Messages whose PUBLISH Redis acknowledged.
    pub published: AtomicU64,
    /// Acknowledged PUBLISHes that reached no subscriber (reply 0).
    pub zero_receivers: AtomicU64,
    pub pub_errors: AtomicU64,
    pub received: AtomicU64,
    /// Sequence numbers skipped by the subscriber (lost messages).
    pub missing: AtomicU64,
    /// Messages that came with a lower sequence number than one seen before.
    pub reordered: AtomicU64,
    /// fred only: messages its broadcast channel dropped because the reader lagged.
    pub lagged: AtomicU64,
    pub bad_payload: AtomicU64,
    expected: AtomicU64,
    /// Reconnect test: when the disruption began; 0 = none yet.
    pub disrupt_ns: AtomicU64,
    /// Reconnect test: first time a message sent after `disrupt_ns` was received.
    pub sub_recovered_ns: AtomicU64,
    /// Reconnect test: first publish acknowledged after `disrupt_ns`.
    pub pub_recovered_ns: AtomicU64,
    /// Reconnect test: channels subscribed besides `CHANNEL` (nothing is published on them).
    pub extra_channels: AtomicU64,
    /// How long subscribing took (all channels, in commands of `SUBSCRIBE_CHUNK` names).
    pub subscribe_ns: AtomicU64,
    /// Latency test: the subscriber sends each message's publish-to-receive time here.
    pub latency: OnceLock<UnboundedSender<u64>>,
}

impl Stats {
    /// Called by every candidate's subscriber for every message read, on the subscriber thread.
    pub fn on_message(&self, payload: &[u8]) {
        let now = now_ns();
        if payload.len() < 16 {
            self.bad_payload.fetch_add(1, Relaxed);
            return;
        }
        let seq = u64::from_le_bytes(payload[..8].try_into().unwrap());
        let sent = u64::from_le_bytes(payload[8..16].try_into().unwrap());
        self.received.fetch_add(1, Relaxed);
        let expected = self.expected.load(Relaxed);
        if seq >= expected {
            if seq > expected {
                self.missing.fetch_add(seq - expected, Relaxed);
            }
            self.expected.store(seq + 1, Relaxed);
        } else {
            self.reordered.fetch_add(1, Relaxed);
        }
        let disrupt = self.disrupt_ns.load(Relaxed);
        if disrupt != 0 && sent >= disrupt && self.sub_recovered_ns.load(Relaxed) == 0 {
            self.sub_recovered_ns.store(now, Relaxed);
        }
        if let Some(tx) = self.latency.get() {
            let _ = tx.send(now.saturating_sub(sent));
        }
    }

    pub fn published_ok(&self, n: u64) {
        self.published.fetch_add(n, Relaxed);
        let disrupt = self.disrupt_ns.load(Relaxed);
        if disrupt != 0 && self.pub_recovered_ns.load(Relaxed) == 0 {
            self.pub_recovered_ns.store(now_ns(), Relaxed);
        }
    }

    /// Messages the subscriber is done with: read, or dropped by fred's broadcast channel.
    pub fn consumed(&self) -> u64 {
        self.received.load(Relaxed) + self.lagged.load(Relaxed)
    }

    pub fn stopped(&self) -> bool {
        self.stop.load(Relaxed)
    }
}

/// Names per SUBSCRIBE command when subscribing many channels.
pub const SUBSCRIBE_CHUNK: usize = 1000;

/// `CHANNEL` first, then the extra channels, in SUBSCRIBE-sized chunks.
pub fn channel_chunks(stats: &Stats) -> Vec<Vec<String>> {
    let extra = stats.extra_channels.load(Relaxed) as usize;
    let mut names = vec![CHANNEL.to_string()];
    names.extend((0..extra).map(|i| format!("sy-bench:{{hub}}:idle:{i}")));
    names.chunks(SUBSCRIBE_CHUNK).map(|c| c.to_vec()).collect()
}

/// `/proc/self/task/TID/stat` of the calling thread, for reading its CPU time from elsewhere.
pub fn thread_stat_path() -> String {
    let link = std::fs::read_link("/proc/thread-self").expect("/proc/thread-self");
    format!("/proc/{}/stat", link.display())
}

/// utime + stime in clock ticks (1/100 s here) from a `stat` file.
pub fn cpu_ticks(stat_path: &str) -> u64 {
    let text = std::fs::read_to_string(stat_path).unwrap_or_default();
    let after = text.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    // fields[0] is field 3 (state); utime is field 14, stime field 15.
    let get = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    get(11) + get(12)
}

/// (VmRSS, VmHWM) of this process in KiB.
pub fn rss_kb() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Percentile of sorted nanosecond samples, in microseconds.
pub fn pct_us(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64 / 1000.0
}
