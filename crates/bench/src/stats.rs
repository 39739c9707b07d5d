//! What one load-generator process counts: per step and per second of intended send time,
//! latency histograms (µs) and message counts; per receiver, each sender's sequence
//! numbers (loss, duplicates, reordering). Histograms travel between processes in
//! HdrHistogram's V2 encoding.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::report::{bucket_v1, bucket_v2, histogram_from_base64, histogram_to_base64};

/// Longest latency kept exactly (µs); longer ones are recorded as this.
pub const MAX_LATENCY_US: u64 = 600_000_000;

pub fn step_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_US, 3).expect("histogram bounds")
}

/// Coarser (2 digits) for the per-second timeline, which has many.
pub fn second_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_US, 2).expect("histogram bounds")
}

/// Counts of one step or one second.
#[derive(Debug, Clone)]
pub struct Bucket {
    pub sent: u64,
    pub expected: u64,
    pub received: u64,
    pub duplicated: u64,
    pub reordered: u64,
    pub dropped: u64,
    pub sent_bytes: u64,
    pub received_bytes: u64,
    pub latency: Histogram<u64>,
}

impl Bucket {
    fn new(latency: Histogram<u64>) -> Bucket {
        Bucket {
            sent: 0,
            expected: 0,
            received: 0,
            duplicated: 0,
            reordered: 0,
            dropped: 0,
            sent_bytes: 0,
            received_bytes: 0,
            latency,
        }
    }

    pub fn export(&self, index: u64) -> BucketExport {
        BucketExport {
            index,
            sent: self.sent,
            expected: self.expected,
            received: self.received,
            duplicated: self.duplicated,
            reordered: self.reordered,
            dropped: self.dropped,
            sent_bytes: self.sent_bytes,
            received_bytes: self.received_bytes,
            latency: histogram_to_base64(&self.latency),
        }
    }

    /// Adds another bucket of this process.
    pub fn add(&mut self, other: &Bucket) -> Result<(), String> {
        self.sent += other.sent;
        self.expected += other.expected;
        self.received += other.received;
        self.duplicated += other.duplicated;
        self.reordered += other.reordered;
        self.dropped += other.dropped;
        self.sent_bytes += other.sent_bytes;
        self.received_bytes += other.received_bytes;
        self.latency
            .add(&other.latency)
            .map_err(|e| format!("histogram: {e:?}"))
    }

    /// Adds a bucket from another process.
    pub fn merge(&mut self, other: &BucketExport) -> Result<(), String> {
        self.add(&Bucket {
            sent: other.sent,
            expected: other.expected,
            received: other.received,
            duplicated: other.duplicated,
            reordered: other.reordered,
            dropped: other.dropped,
            sent_bytes: other.sent_bytes,
            received_bytes: other.received_bytes,
            latency: histogram_from_base64(&other.latency)?,
        })
    }

    pub fn empty_step() -> Bucket {
        Bucket::new(step_histogram())
    }

    pub fn empty_second() -> Bucket {
        Bucket::new(second_histogram())
    }
}

/// A [`Bucket`] as it travels between processes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BucketExport {
    /// Step (1-based) or second (0-based).
    pub index: u64,
    pub sent: u64,
    pub expected: u64,
    pub received: u64,
    pub duplicated: u64,
    pub reordered: u64,
    pub dropped: u64,
    pub sent_bytes: u64,
    pub received_bytes: u64,
    /// Base64 of the V2-encoded histogram (µs).
    pub latency: String,
}

/// Cumulative counters for the live view, summed over processes.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Live {
    pub connected: u64,
    pub connect_failed: u64,
    pub dropped: u64,
    pub sent: u64,
    pub received: u64,
    pub sent_bytes: u64,
    pub received_bytes: u64,
    pub buckets_v1: Vec<u64>,
    pub buckets_v2: Vec<u64>,
    /// Stateful reconnect (--stateful-reconnect): what the connections went through.
    #[serde(default)]
    pub stateful: StatefulCounts,
}

/// Stateful reconnect, summed over connections (each adds its own when it ends).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct StatefulCounts {
    /// Sockets dropped on purpose (--drop-share).
    pub drops: u64,
    /// New sockets the clients opened to carry on.
    pub reconnects: u64,
    /// Frames the clients wrote again (the service had not acknowledged them).
    pub replayed: u64,
    /// Messages the clients received twice (replayed by the service) and dropped.
    pub duplicates_dropped: u64,
    /// Connections the service did not agree to stateful reconnect with.
    pub refused: u64,
}

impl StatefulCounts {
    pub fn add(&mut self, other: &StatefulCounts) {
        self.drops += other.drops;
        self.reconnects += other.reconnects;
        self.replayed += other.replayed;
        self.duplicates_dropped += other.duplicates_dropped;
        self.refused += other.refused;
    }
}

impl Live {
    pub fn add(&mut self, other: &Live) {
        self.connected += other.connected;
        self.connect_failed += other.connect_failed;
        self.dropped += other.dropped;
        self.sent += other.sent;
        self.received += other.received;
        self.sent_bytes += other.sent_bytes;
        self.received_bytes += other.received_bytes;
        self.stateful.add(&other.stateful);
        for (target, source) in [
            (&mut self.buckets_v1, &other.buckets_v1),
            (&mut self.buckets_v2, &other.buckets_v2),
        ] {
            if target.len() < source.len() {
                target.resize(source.len(), 0);
            }
            for (t, s) in target.iter_mut().zip(source) {
                *t += s;
            }
        }
    }
}

/// Lock-free counters behind [`Live`].
#[derive(Debug, Default)]
pub struct LiveCounters {
    pub connected: AtomicU64,
    pub connect_failed: AtomicU64,
    pub dropped: AtomicU64,
    pub sent: AtomicU64,
    pub received: AtomicU64,
    pub sent_bytes: AtomicU64,
    pub received_bytes: AtomicU64,
    pub buckets_v1: [AtomicU64; 11],
    pub buckets_v2: [AtomicU64; 8],
    pub stateful_drops: AtomicU64,
    pub stateful_reconnects: AtomicU64,
    pub stateful_replayed: AtomicU64,
    pub stateful_duplicates: AtomicU64,
    pub stateful_refused: AtomicU64,
}

impl LiveCounters {
    pub fn snapshot(&self) -> Live {
        Live {
            connected: self.connected.load(Relaxed),
            connect_failed: self.connect_failed.load(Relaxed),
            dropped: self.dropped.load(Relaxed),
            sent: self.sent.load(Relaxed),
            received: self.received.load(Relaxed),
            sent_bytes: self.sent_bytes.load(Relaxed),
            received_bytes: self.received_bytes.load(Relaxed),
            buckets_v1: self.buckets_v1.iter().map(|b| b.load(Relaxed)).collect(),
            buckets_v2: self.buckets_v2.iter().map(|b| b.load(Relaxed)).collect(),
            stateful: StatefulCounts {
                drops: self.stateful_drops.load(Relaxed),
                reconnects: self.stateful_reconnects.load(Relaxed),
                replayed: self.stateful_replayed.load(Relaxed),
                duplicates_dropped: self.stateful_duplicates.load(Relaxed),
                refused: self.stateful_refused.load(Relaxed),
            },
        }
    }
}

/// How a delivery relates to what the receiver saw before from the same sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    New,
    /// New, but after a later message of the same sender.
    Reordered,
    Duplicate,
}

/// Per receiver: for each sender, the highest sequence number seen and which of the 128
/// below it arrived. Anything older than that window counts as reordered (it cannot be
/// told from a duplicate any more; 128 messages late is far past any stop rule anyway).
#[derive(Debug, Default)]
pub struct SeqTracker {
    senders: HashMap<u32, Window>,
}

#[derive(Debug, Clone, Copy)]
struct Window {
    max: u64,
    seen: u128,
}

impl SeqTracker {
    pub fn observe(&mut self, sender: u32, seq: u64) -> Arrival {
        let window = match self.senders.entry(sender) {
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(Window { max: seq, seen: 1 });
                return Arrival::New;
            }
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
        };
        if seq > window.max {
            let shift = seq - window.max;
            window.seen = if shift >= 128 {
                0
            } else {
                window.seen << shift
            } | 1;
            window.max = seq;
            return Arrival::New;
        }
        let behind = window.max - seq;
        if behind >= 128 {
            return Arrival::Reordered;
        }
        let bit = 1u128 << behind;
        if window.seen & bit != 0 {
            Arrival::Duplicate
        } else {
            window.seen |= bit;
            Arrival::Reordered
        }
    }
}

/// Everything a worker counts, under one lock (updates are a few adds).
#[derive(Debug)]
pub struct Stats {
    /// Index 0 is the warm-up (never reported).
    pub steps: Vec<Bucket>,
    pub seconds: Vec<Bucket>,
    pub errors: BTreeMap<String, u64>,
}

impl Stats {
    pub fn new(steps: u32) -> Stats {
        Stats {
            steps: (0..=steps).map(|_| Bucket::empty_step()).collect(),
            seconds: Vec::new(),
            errors: BTreeMap::new(),
        }
    }

    fn second(&mut self, second: Option<u64>) -> Option<&mut Bucket> {
        let second = usize::try_from(second?).ok()?;
        // Beyond an hour of timeline: not kept.
        if second > 3600 {
            return None;
        }
        if self.seconds.len() <= second {
            self.seconds.resize_with(second + 1, Bucket::empty_second);
        }
        Some(&mut self.seconds[second])
    }

    /// A send in `step` (intended during `second`) that `expected` recipients should get.
    pub fn sent(&mut self, step: u32, second: Option<u64>, expected: u64, bytes: usize) {
        if let Some(bucket) = self.steps.get_mut(step as usize) {
            bucket.sent += 1;
            bucket.expected += expected;
            bucket.sent_bytes += bytes as u64;
        }
        if let Some(bucket) = self.second(second) {
            bucket.sent += 1;
            bucket.expected += expected;
            bucket.sent_bytes += bytes as u64;
        }
    }

    /// A message that was due but never sent: its recipients still expected it.
    pub fn unsent(&mut self, step: u32, second: Option<u64>, expected: u64) {
        if let Some(bucket) = self.steps.get_mut(step as usize) {
            bucket.expected += expected;
        }
        if let Some(bucket) = self.second(second) {
            bucket.expected += expected;
        }
    }

    /// A delivery (or acknowledgement) of a message sent in `step`.
    pub fn received(
        &mut self,
        step: u32,
        second: Option<u64>,
        arrival: Arrival,
        latency_us: u64,
        bytes: usize,
    ) {
        let latency_us = latency_us.clamp(1, MAX_LATENCY_US);
        let apply = |bucket: &mut Bucket| match arrival {
            Arrival::Duplicate => bucket.duplicated += 1,
            Arrival::New | Arrival::Reordered => {
                bucket.received += 1;
                bucket.received_bytes += bytes as u64;
                if arrival == Arrival::Reordered {
                    bucket.reordered += 1;
                }
                let _ = bucket.latency.record(latency_us);
            }
        };
        if let Some(bucket) = self.steps.get_mut(step as usize) {
            apply(bucket);
        }
        if let Some(bucket) = self.second(second) {
            apply(bucket);
        }
    }

    pub fn dropped(&mut self, step: u32) {
        if let Some(bucket) = self.steps.get_mut(step as usize) {
            bucket.dropped += 1;
        }
    }

    pub fn error(&mut self, kind: impl Into<String>) {
        let mut kind: String = kind.into();
        if kind.len() > 200 {
            let mut cut = 200;
            while !kind.is_char_boundary(cut) {
                cut -= 1;
            }
            kind.truncate(cut);
        }
        *self.errors.entry(kind).or_insert(0) += 1;
    }
}

/// Adds a delivery's latency to the live buckets.
pub fn live_latency(live: &LiveCounters, latency_us: u64) {
    let ms = latency_us as f64 / 1000.0;
    live.buckets_v1[bucket_v1(ms)].fetch_add(1, Relaxed);
    live.buckets_v2[bucket_v2(ms)].fetch_add(1, Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_tracking() {
        let mut t = SeqTracker::default();
        assert_eq!(t.observe(1, 0), Arrival::New);
        assert_eq!(t.observe(1, 1), Arrival::New);
        assert_eq!(t.observe(1, 3), Arrival::New);
        assert_eq!(t.observe(1, 2), Arrival::Reordered);
        assert_eq!(t.observe(1, 2), Arrival::Duplicate);
        assert_eq!(t.observe(1, 3), Arrival::Duplicate);
        // Another sender is independent.
        assert_eq!(t.observe(2, 2), Arrival::New);
        // A jump beyond the window clears it.
        assert_eq!(t.observe(1, 1000), Arrival::New);
        assert_eq!(t.observe(1, 999), Arrival::Reordered);
        assert_eq!(t.observe(1, 872), Arrival::Reordered);
        assert_eq!(t.observe(1, 3), Arrival::Reordered);
    }

    #[test]
    fn buckets_merge_across_processes() {
        let mut a = Stats::new(2);
        a.sent(1, Some(0), 3, 100);
        a.received(1, Some(0), Arrival::New, 1500, 100);
        a.received(1, Some(0), Arrival::Reordered, 2500, 100);
        a.received(1, Some(0), Arrival::Duplicate, 2500, 100);
        let export = a.steps[1].export(1);
        let mut merged = Bucket::empty_step();
        merged.merge(&export).unwrap();
        merged.merge(&export).unwrap();
        assert_eq!(merged.sent, 2);
        assert_eq!(merged.expected, 6);
        assert_eq!(merged.received, 4);
        assert_eq!(merged.reordered, 2);
        assert_eq!(merged.duplicated, 2);
        assert_eq!(merged.latency.len(), 4);
        assert_eq!(a.seconds[0].received, 2);
    }

    #[test]
    fn live_sums() {
        let mut a = Live {
            sent: 1,
            buckets_v1: vec![1, 2],
            ..Live::default()
        };
        a.add(&Live {
            sent: 2,
            buckets_v1: vec![1, 1, 1],
            ..Live::default()
        });
        assert_eq!(a.sent, 3);
        assert_eq!(a.buckets_v1, vec![2, 3, 1]);
    }
}
