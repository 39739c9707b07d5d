//! The soak: chat rooms on several nodes while nodes and Redis are killed and started again
//! (`--kill-node-every`, `--restart-redis-at`), counted per phase.
//!
//! # What counts as lost
//! A chat-room poster's timetable is fixed (slot k at `first + k × interval`), so every
//! receiver knows which posts of its room were due and when. At the end, the workers report
//! every connection's outages (from the moment it saw its connection drop to the moment it
//! had joined its room again on another node) and the coordinator hands the whole list to
//! every worker. A receiver *expects* post (s, k) when neither it nor the poster was in an
//! outage at the post's intended time, widened by [`GUARD_MS`] on both sides (a post in
//! flight on the node that died, or one sent while the join on the new node was still
//! spreading, may rightly miss it); in rest-chat-room posts are REST calls into node 1, so
//! only the receiver's outages count. Everything else is *excused*: not expected, counted
//! apart (and how many of those still arrived). Lost = expected − delivered, per phase, the
//! phase being the one in which the post was due, or the fault's for a post due less than
//! [`IN_FLIGHT_MS`] before a kill. Duplicates and reordering are counted for every delivery.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::report::{histogram_from_base64, histogram_to_base64};
use crate::scenario::Plan;
use crate::stats::{step_histogram, Arrival};
use crate::wire::Tag;

/// An outage excuses the posts due this long before it was seen and after it ended.
pub const GUARD_MS: f64 = 1000.0;

/// Posts due this long before a fault count in the fault's phase (see [`phase_due`]).
pub const IN_FLIGHT_MS: f64 = 1000.0;

/// After a chaos event is over (the node holds an app-server connection again, every node's
/// backplane answers again), traffic needs a moment to settle (subscriptions renewed,
/// resubscribes after Redis's restart ~0.2 s after health): the phase ends this much later.
pub const SETTLE: Duration = Duration::from_secs(2);

/// One outage of one connection, as the workers exchange them.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct Outage {
    pub g: u64,
    /// When the client saw its connection drop (ms since the UNIX epoch).
    pub down_ms: f64,
    /// When it had joined its room again on another node; `None`: it never did.
    pub up_ms: Option<f64>,
    /// Connection attempts that failed before it was back.
    pub failed_attempts: u32,
}

/// Where a phase starts and what it is ("steady", "n2 down", …).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PhaseMark {
    pub start_ms: f64,
    pub name: String,
}

impl PhaseMark {
    /// A kill ("n2 down", "redis down"), which may catch posts in flight.
    pub fn is_fault(&self) -> bool {
        self.name.ends_with(" down")
    }
}

/// One receiver's record: what it received from each poster, and its outages.
#[derive(Debug, Default)]
pub struct Ledger {
    pub g: u64,
    received: HashMap<u32, Seen>,
    /// Duplicated or reordered deliveries: (the post's intended time, how it arrived).
    events: Vec<(f64, Arrival)>,
    pub outages: Vec<Outage>,
}

#[derive(Debug, Default)]
struct Seen {
    max: u64,
    bits: Vec<u64>,
}

impl Ledger {
    pub fn new(g: u64) -> Ledger {
        Ledger {
            g,
            ..Ledger::default()
        }
    }

    /// A delivery of `tag` (intended at `ts_ms`): new, reordered or a duplicate.
    pub fn observe(&mut self, tag: Tag, ts_ms: f64) -> Arrival {
        let seen = self.received.entry(tag.sender).or_default();
        let (word, bit) = ((tag.seq / 64) as usize, tag.seq % 64);
        if seen.bits.len() <= word {
            seen.bits.resize(word + 1, 0);
        }
        let arrival = if seen.bits[word] & (1 << bit) != 0 {
            Arrival::Duplicate
        } else if seen.bits.iter().any(|w| *w != 0) && tag.seq < seen.max {
            Arrival::Reordered
        } else {
            Arrival::New
        };
        seen.bits[word] |= 1 << bit;
        seen.max = seen.max.max(tag.seq);
        if arrival != Arrival::New {
            self.events.push((ts_ms, arrival));
        }
        arrival
    }

    fn has(&self, sender: u64, seq: u64) -> bool {
        self.received
            .get(&(sender as u32))
            .and_then(|s| s.bits.get((seq / 64) as usize))
            .is_some_and(|w| w & (1 << (seq % 64)) != 0)
    }
}

/// Counts of one phase (summed over workers).
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct PhaseCounts {
    /// Deliveries expected: receiver and poster both connected at the post's time.
    pub expected: u64,
    /// Of those, delivered.
    pub delivered: u64,
    /// Deliveries not expected (receiver or poster in an outage), and how many still came.
    pub excused: u64,
    pub excused_delivered: u64,
    pub duplicated: u64,
    pub reordered: u64,
    /// Connections that dropped in this phase, came back, never came back; failed attempts.
    pub drops: u64,
    pub reconnected: u64,
    pub not_reconnected: u64,
    pub failed_attempts: u64,
    /// Reconnect times (µs, drop seen → room joined on another node), HdrHistogram V2.
    pub reconnect_us: String,
    /// When the earliest and the latest lost post were due (ms since the UNIX epoch): where
    /// to look when a phase lost something.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_due_ms: Option<(f64, f64)>,
}

impl PhaseCounts {
    pub fn lost(&self) -> u64 {
        self.expected.saturating_sub(self.delivered)
    }

    pub fn add(&mut self, other: &PhaseCounts) -> Result<(), String> {
        self.expected += other.expected;
        self.delivered += other.delivered;
        self.excused += other.excused;
        self.excused_delivered += other.excused_delivered;
        self.duplicated += other.duplicated;
        self.reordered += other.reordered;
        self.drops += other.drops;
        self.reconnected += other.reconnected;
        self.not_reconnected += other.not_reconnected;
        self.failed_attempts += other.failed_attempts;
        self.lost_due_ms = match (self.lost_due_ms, other.lost_due_ms) {
            (Some((a, b)), Some((c, d))) => Some((a.min(c), b.max(d))),
            (a, b) => a.or(b),
        };
        let mut hist = self.histogram()?;
        hist.add(other.histogram()?)
            .map_err(|e| format!("histogram: {e:?}"))?;
        self.reconnect_us = histogram_to_base64(&hist);
        Ok(())
    }

    pub fn histogram(&self) -> Result<Histogram<u64>, String> {
        if self.reconnect_us.is_empty() {
            Ok(step_histogram())
        } else {
            histogram_from_base64(&self.reconnect_us)
        }
    }
}

/// The phase a time falls in: the last mark at or before it (`None` before the first).
pub fn phase_of(marks: &[PhaseMark], ms: f64) -> Option<usize> {
    marks.iter().rposition(|m| m.start_ms <= ms)
}

/// The phase a post due at `ms` counts in: the one it was due in, except that a fault's phase
/// (a kill) takes the posts due in the [`IN_FLIGHT_MS`] before it, which may still be on
/// their way when it strikes (a PUBLISH Redis had read but not yet passed on, a message
/// queued on a node that died). Measured: CI lost one post (51 deliveries) due 10 ms before
/// Redis was killed, in the steady phase before it.
pub fn phase_due(marks: &[PhaseMark], ms: f64) -> Option<usize> {
    let at = phase_of(marks, ms);
    let next = at.map_or(0, |p| p + 1);
    match marks.get(next) {
        Some(m) if m.is_fault() && m.start_ms - ms < IN_FLIGHT_MS => Some(next),
        _ => at,
    }
}

/// The run's timetable as the accounting needs it.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    /// Sending (the warm-up) starts: chat-room slots count from here.
    pub start_ms: f64,
    /// Measuring starts: earlier posts are not counted.
    pub measure_ms: f64,
    /// Sending ends.
    pub end_ms: f64,
}

/// Counts per phase for this worker's receivers.
pub fn account(
    plan: &Plan,
    window: Window,
    failed: &[u64],
    outages: &HashMap<u64, Vec<Outage>>,
    marks: &[PhaseMark],
    ledgers: &[Ledger],
) -> Vec<PhaseCounts> {
    let mut phases: Vec<PhaseCounts> = vec![PhaseCounts::default(); marks.len()];
    let mut reconnects: Vec<Histogram<u64>> = marks.iter().map(|_| step_histogram()).collect();
    let out = |g: u64, t: f64| {
        outages.get(&g).is_some_and(|list| {
            list.iter().any(|o| {
                o.down_ms - GUARD_MS <= t && t < o.up_ms.unwrap_or(f64::INFINITY) + GUARD_MS
            })
        })
    };
    let size = plan
        .group_size
        .unwrap_or(crate::scenario::DEFAULT_ROOM_SIZE)
        .max(1);
    let sender_outages_count = !plan.scenario.is_rest();
    for ledger in ledgers {
        let r = ledger.g;
        let room = r / size;
        let members = room * size..((room + 1) * size).min(plan.connections);
        for s in members.filter(|s| failed.binary_search(s).is_err()) {
            let Some(interval) = plan.interval_of(s) else {
                continue;
            };
            let first = window.start_ms + interval * Plan::phase_of(s);
            let mut k = 0u64;
            loop {
                let t = first + interval * k as f64;
                if t >= window.end_ms {
                    break;
                }
                if t >= window.measure_ms {
                    if let Some(p) = phase_due(marks, t) {
                        let counts = &mut phases[p];
                        let got = ledger.has(s, k);
                        if out(r, t) || (sender_outages_count && out(s, t)) {
                            counts.excused += 1;
                            counts.excused_delivered += u64::from(got);
                        } else {
                            counts.expected += 1;
                            counts.delivered += u64::from(got);
                            if !got {
                                let (first, last) = counts.lost_due_ms.unwrap_or((t, t));
                                counts.lost_due_ms = Some((first.min(t), last.max(t)));
                            }
                        }
                    }
                }
                k += 1;
            }
        }
        for (ts, arrival) in &ledger.events {
            if let Some(p) = phase_due(marks, *ts) {
                match arrival {
                    Arrival::Duplicate => phases[p].duplicated += 1,
                    _ => phases[p].reordered += 1,
                }
            }
        }
        for outage in &ledger.outages {
            // Outages seen before measuring starts belong to the first phase.
            let p = phase_of(marks, outage.down_ms).unwrap_or(0);
            let Some(counts) = phases.get_mut(p) else {
                continue;
            };
            counts.drops += 1;
            counts.failed_attempts += u64::from(outage.failed_attempts);
            match outage.up_ms {
                Some(up) => {
                    counts.reconnected += 1;
                    let _ = reconnects[p].record((((up - outage.down_ms) * 1000.0) as u64).max(1));
                }
                None => counts.not_reconnected += 1,
            }
        }
    }
    for (counts, hist) in phases.iter_mut().zip(&reconnects) {
        counts.reconnect_us = histogram_to_base64(hist);
    }
    phases
}

/// A soak's outcome as `--soak-json` writes it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SoakReport {
    pub phases: Vec<PhaseRow>,
    pub rss: Vec<RssRow>,
    /// Node names, in the order of each row's `nodes`.
    pub nodes: Vec<String>,
    pub passed: bool,
}

/// One phase, times in seconds since measuring started.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PhaseRow {
    pub name: String,
    pub from_s: f64,
    pub to_s: f64,
    pub lost: u64,
    pub reconnect_p50_ms: Option<f64>,
    pub reconnect_p99_ms: Option<f64>,
    pub reconnect_max_ms: Option<f64>,
    #[serde(flatten)]
    pub counts: PhaseCounts,
}

impl SoakReport {
    pub fn new(
        marks: &[PhaseMark],
        phases: &[PhaseCounts],
        window: Window,
        nodes: Vec<String>,
        rss: Vec<RssRow>,
    ) -> SoakReport {
        let rows = marks
            .iter()
            .zip(phases)
            .enumerate()
            .map(|(i, (mark, counts))| {
                let hist = counts.histogram().unwrap_or_else(|_| step_histogram());
                let at = |q: f64| (!hist.is_empty()).then(|| ms_of(&hist, q));
                let mut counts = counts.clone();
                counts.reconnect_us.clear();
                PhaseRow {
                    name: mark.name.clone(),
                    from_s: (mark.start_ms - window.measure_ms) / 1000.0,
                    to_s: (marks.get(i + 1).map_or(window.end_ms, |m| m.start_ms)
                        - window.measure_ms)
                        / 1000.0,
                    lost: counts.lost(),
                    reconnect_p50_ms: at(0.5),
                    reconnect_p99_ms: at(0.99),
                    reconnect_max_ms: (!hist.is_empty()).then(|| hist.max() as f64 / 1000.0),
                    counts,
                }
            })
            .collect();
        SoakReport {
            phases: rows,
            rss,
            nodes,
            passed: passed(marks, phases),
        }
    }
}

/// One reading of the target's memory.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RssRow {
    /// Seconds since measuring started (negative in the warm-up).
    pub at_s: f64,
    /// Per node: RSS (kB) and client connections (`switchyard_connections`), when readable.
    pub nodes: Vec<(Option<u64>, Option<u64>)>,
    pub redis_kb: Option<u64>,
}

/// `mm:ss`, with a minus sign in the warm-up.
fn clock(seconds: f64) -> String {
    let s = seconds.abs().round() as u64;
    let sign = if seconds <= -0.5 { "-" } else { "" };
    format!("{sign}{:02}:{:02}", s / 60, s % 60)
}

fn ms_of(hist: &Histogram<u64>, q: f64) -> f64 {
    hist.value_at_quantile(q) as f64 / 1000.0
}

/// The per-phase table (text) with a total row and a total for the steady phases.
pub fn phase_table(
    marks: &[PhaseMark],
    phases: &[PhaseCounts],
    measure_ms: f64,
    end_ms: f64,
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Soak phases (a post counts in the phase in which it was due, or in a kill's if due within {:.0} s before it; lost = expected − delivered):",
        IN_FLIGHT_MS / 1000.0
    );
    let _ = writeln!(
        out,
        "  {:<5} {:<6} {:<14} {:>10} {:>10} {:>6} {:>5} {:>5} {:>10} {:>9} {:>6} {:>6} {:>5} {:>8} {:>8} {:>8}",
        "from", "to", "phase", "expected", "delivered", "lost", "dup", "reord", "excused", "exc.recv",
        "drops", "back", "never", "rc p50", "rc p99", "rc max"
    );
    let mut steady = PhaseCounts::default();
    let mut total = PhaseCounts::default();
    for (i, (mark, c)) in marks.iter().zip(phases).enumerate() {
        let to = marks.get(i + 1).map_or(end_ms, |m| m.start_ms);
        let hist = c.histogram().unwrap_or_else(|_| step_histogram());
        let rc = |q: f64| {
            if hist.is_empty() {
                "-".to_owned()
            } else {
                format!("{:.0} ms", ms_of(&hist, q))
            }
        };
        let _ = writeln!(
            out,
            "  {:<5} {:<6} {:<14} {:>10} {:>10} {:>6} {:>5} {:>5} {:>10} {:>9} {:>6} {:>6} {:>5} {:>8} {:>8} {:>8}",
            clock((mark.start_ms - measure_ms) / 1000.0),
            clock((to - measure_ms) / 1000.0),
            mark.name,
            c.expected,
            c.delivered,
            c.lost(),
            c.duplicated,
            c.reordered,
            c.excused,
            c.excused_delivered,
            c.drops,
            c.reconnected,
            c.not_reconnected,
            rc(0.5),
            rc(0.99),
            if hist.is_empty() { "-".to_owned() } else { format!("{:.0} ms", hist.max() as f64 / 1000.0) },
        );
        if mark.name == "steady" {
            let _ = steady.add(c);
        }
        let _ = total.add(c);
    }
    for (name, c) in [("all steady", &steady), ("all", &total)] {
        let hist = c.histogram().unwrap_or_else(|_| step_histogram());
        let _ = writeln!(
            out,
            "  {:<27} {:>10} {:>10} {:>6} {:>5} {:>5} {:>10} {:>9} {:>6} {:>6} {:>5} {:>8} {:>8} {:>8}",
            name,
            c.expected,
            c.delivered,
            c.lost(),
            c.duplicated,
            c.reordered,
            c.excused,
            c.excused_delivered,
            c.drops,
            c.reconnected,
            c.not_reconnected,
            if hist.is_empty() { "-".to_owned() } else { format!("{:.0} ms", ms_of(&hist, 0.5)) },
            if hist.is_empty() { "-".to_owned() } else { format!("{:.0} ms", ms_of(&hist, 0.99)) },
            if hist.is_empty() { "-".to_owned() } else { format!("{:.0} ms", hist.max() as f64 / 1000.0) },
        );
    }
    let _ = writeln!(
        out,
        "  (excused: receiver or poster reconnecting within {:.0} s of the post; exc.recv: of those, \
         delivered anyway; drops/back/never: connections that dropped in the phase, came back \
         on another node, never came back; rc: reconnect time, drop seen → room joined again; \
         failed connect attempts: {})",
        GUARD_MS / 1000.0,
        total.failed_attempts
    );
    for (i, (mark, c)) in marks.iter().zip(phases).enumerate() {
        let Some((first, last)) = c.lost_due_ms else {
            continue;
        };
        let to = marks.get(i + 1).map_or(end_ms, |m| m.start_ms);
        let _ = writeln!(
            out,
            "  lost in {} ({}): due from {:.2} s to {:.2} s, {:.2} s after the phase began and {:.2} s before it ended",
            mark.name,
            clock((mark.start_ms - measure_ms) / 1000.0),
            (first - measure_ms) / 1000.0,
            (last - measure_ms) / 1000.0,
            (first - mark.start_ms) / 1000.0,
            (to - last) / 1000.0,
        );
    }
    out
}

/// Steady phases lost nothing, nothing arrived twice or out of order, every dropped client
/// came back.
pub fn passed(marks: &[PhaseMark], phases: &[PhaseCounts]) -> bool {
    let steady_clean = marks
        .iter()
        .zip(phases)
        .filter(|(m, _)| m.name == "steady")
        .all(|(_, c)| c.lost() == 0);
    let clean = phases
        .iter()
        .all(|c| c.duplicated == 0 && c.reordered == 0 && c.not_reconnected == 0);
    steady_clean && clean
}

/// The memory series (text): one row per sample, RSS in MB and clients per node.
pub fn rss_table(
    names: &[String],
    rows: &[RssRow],
    marks: &[PhaseMark],
    measure_ms: f64,
) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "Memory over time (RSS MB, clients in parentheses):\n  {:<6}",
        "time"
    );
    for name in names {
        let _ = write!(out, " {:>16}", name);
    }
    let _ = writeln!(out, " {:>8}  phase", "redis");
    for row in rows {
        let _ = write!(out, "  {:<6}", clock(row.at_s));
        for (rss, conns) in &row.nodes {
            let cell = match (rss, conns) {
                (Some(kb), Some(c)) => format!("{:.1} ({c})", *kb as f64 / 1024.0),
                (Some(kb), None) => format!("{:.1}", *kb as f64 / 1024.0),
                _ => "down".to_owned(),
            };
            let _ = write!(out, " {cell:>16}");
        }
        let redis = row
            .redis_kb
            .map_or("down".to_owned(), |kb| format!("{:.1}", kb as f64 / 1024.0));
        let phase = phase_of(marks, measure_ms + row.at_s * 1000.0)
            .map_or("warm-up", |p| marks[p].name.as_str());
        let _ = writeln!(out, " {redis:>8}  {phase}");
    }
    out
}

/// The memory series as CSV: `seconds,n1_rss_kb,n1_clients,…,redis_rss_kb`.
pub fn rss_csv(names: &[String], rows: &[RssRow]) -> String {
    let mut out = String::from("seconds");
    for name in names {
        let _ = write!(out, ",{name}_rss_kb,{name}_clients");
    }
    out.push_str(",redis_rss_kb\n");
    let cell = |v: &Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
    for row in rows {
        let _ = write!(out, "{:.0}", row.at_s);
        for (rss, conns) in &row.nodes {
            let _ = write!(out, ",{},{}", cell(rss), cell(conns));
        }
        let _ = writeln!(out, ",{}", cell(&row.redis_kb));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{Endpoint, Scenario};

    fn plan() -> Plan {
        Plan {
            scenario: Scenario::ChatRoom,
            hub: "bench".into(),
            endpoint: Endpoint::Hub {
                url: "http://127.0.0.1:1".into(),
            },
            rest: None,
            transport: "websockets".into(),
            protocol: "json".into(),
            connections: 10,
            senders: 0,
            steps: 1,
            step_seconds: 100.0,
            warmup_seconds: 0.0,
            drain_seconds: 1.0,
            message_size: 100,
            interval_ms: 1000.0,
            group_size: Some(10),
            groups: None,
            connect_rate: 100.0,
            max_connecting: 10,
            source_addresses: Vec::new(),
            workers: 1,
            worker: 0,
            reconnect: true,
            stateful_reconnect: false,
            drop_share: 0.0,
        }
    }

    fn tag(sender: u32, seq: u64) -> Tag {
        Tag {
            sender,
            seq,
            step: 1,
        }
    }

    #[test]
    fn ledger_tells_new_reordered_and_duplicates() {
        let mut l = Ledger::new(3);
        assert_eq!(l.observe(tag(0, 0), 1.0), Arrival::New);
        assert_eq!(l.observe(tag(0, 2), 3.0), Arrival::New);
        assert_eq!(l.observe(tag(0, 1), 2.0), Arrival::Reordered);
        assert_eq!(l.observe(tag(0, 1), 2.0), Arrival::Duplicate);
        assert_eq!(l.observe(tag(0, 200), 9.0), Arrival::New);
        assert!(l.has(0, 200) && l.has(0, 1) && !l.has(0, 3) && !l.has(1, 0));
        assert_eq!(l.events.len(), 2);
    }

    #[test]
    fn expectations_skip_outages_and_split_by_phase() {
        // Room of 10: member 0 is the only chatty poster (every 11 s), 1 and 2 casual (59 s).
        let p = plan();
        assert_eq!(p.interval_of(0), Some(11_000.0));
        let window = Window {
            start_ms: 0.0,
            measure_ms: 0.0,
            end_ms: 100_000.0,
        };
        let marks = vec![
            PhaseMark {
                start_ms: 0.0,
                name: "steady".into(),
            },
            PhaseMark {
                start_ms: 50_000.0,
                name: "n2 down".into(),
            },
        ];
        // Receiver 5 got everything from poster 0 except what was due in its outage.
        let first = 11_000.0 * Plan::phase_of(0);
        let slots: Vec<f64> = (0..10)
            .map(|k| first + 11_000.0 * k as f64)
            .filter(|t| *t < 100_000.0)
            .collect();
        let down = slots[5] - 100.0;
        let outage = Outage {
            g: 5,
            down_ms: down,
            up_ms: Some(down + 300.0),
            failed_attempts: 1,
        };
        let mut ledger = Ledger::new(5);
        for (k, t) in slots.iter().enumerate() {
            if k != 5 {
                ledger.observe(tag(0, k as u64), *t);
            }
        }
        ledger.outages.push(outage);
        let outages = HashMap::from([(5, vec![outage])]);
        let phases = account(&p, window, &[1, 2], &outages, &marks, &[ledger]);
        let all: u64 = phases.iter().map(|c| c.expected + c.excused).sum();
        assert_eq!(all, slots.len() as u64);
        assert_eq!(phases.iter().map(|c| c.excused).sum::<u64>(), 1);
        assert_eq!(phases.iter().map(|c| c.lost()).sum::<u64>(), 0);
        let before = slots.iter().filter(|t| **t < 50_000.0).count() as u64;
        let p5 = phase_due(&marks, slots[5]).unwrap();
        assert_eq!(phases[0].expected + phases[0].excused, before);
        // The outage counts in the phase it began in, and only there.
        let other = 1 - p5;
        assert_eq!(
            (
                phases[p5].drops,
                phases[p5].reconnected,
                phases[p5].failed_attempts
            ),
            (1, 1, 1)
        );
        assert_eq!(
            (
                phases[other].drops,
                phases[other].reconnected,
                phases[other].failed_attempts
            ),
            (0, 0, 0)
        );
        // Its reconnect time is up − down.
        let hist = phases[p5].histogram().unwrap();
        assert!((hist.max() as f64 - 300_000.0).abs() < 1000.0);
        assert!(phases[other].histogram().unwrap().is_empty());
        // Without the outage the missing post is lost.
        let mut ledger = Ledger::new(5);
        for (k, t) in slots.iter().enumerate() {
            if k != 5 {
                ledger.observe(tag(0, k as u64), *t);
            }
        }
        let ledgers = [ledger];
        let phases = account(&p, window, &[1, 2], &HashMap::new(), &marks, &ledgers);
        assert_eq!(phases.iter().map(|c| c.lost()).sum::<u64>(), 1);
        assert_eq!(phases[p5].lost(), 1);
        // Where to look: when the lost post was due, also after merging workers' counts.
        assert_eq!(phases[p5].lost_due_ms, Some((slots[5], slots[5])));
        let mut merged = PhaseCounts {
            lost_due_ms: Some((slots[5] + 10.0, slots[5] + 20.0)),
            ..PhaseCounts::default()
        };
        merged.add(&phases[p5]).unwrap();
        assert_eq!(merged.lost_due_ms, Some((slots[5], slots[5] + 20.0)));
        let table = phase_table(&marks, &phases, window.measure_ms, window.end_ms);
        assert!(
            table.contains(&format!("lost in {}", marks[p5].name)),
            "{table}"
        );
        // A loss in a steady phase fails the soak; one while n2 was down does not.
        assert_eq!(passed(&marks, &phases), marks[p5].name != "steady");
        let steady = &marks[..1];
        let phases = account(&p, window, &[1, 2], &HashMap::new(), steady, &ledgers);
        assert_eq!(phases[0].lost(), 1);
        assert!(!passed(steady, &phases));
    }

    #[test]
    fn phases_and_tables() {
        let marks = vec![
            PhaseMark {
                start_ms: 10.0,
                name: "steady".into(),
            },
            PhaseMark {
                start_ms: 20.0,
                name: "n2 down".into(),
            },
        ];
        assert_eq!(phase_of(&marks, 5.0), None);
        assert_eq!(phase_of(&marks, 10.0), Some(0));
        assert_eq!(phase_of(&marks, 25.0), Some(1));
        // Posts due within IN_FLIGHT_MS before a kill count in the kill's phase; before a
        // phase that is no kill, or earlier, in their own.
        let timeline = |names: [&str; 3]| -> Vec<PhaseMark> {
            names
                .iter()
                .zip([0.0, 10_000.0, 20_000.0])
                .map(|(name, start_ms)| PhaseMark {
                    start_ms,
                    name: (*name).into(),
                })
                .collect()
        };
        let kills = timeline(["steady", "redis down", "redis back"]);
        assert_eq!(phase_due(&kills, 8_999.0), Some(0));
        assert_eq!(phase_due(&kills, 9_001.0), Some(1));
        assert_eq!(phase_of(&kills, 9_001.0), Some(0));
        assert_eq!(phase_due(&kills, 19_500.0), Some(1));
        assert_eq!(phase_due(&kills, 25_000.0), Some(2));
        let first_kill = timeline(["n2 down", "n2 back", "steady"]);
        assert_eq!(phase_due(&first_kill, -500.0), Some(0));
        assert_eq!(phase_due(&first_kill, -1_500.0), None);
        let mut a = PhaseCounts {
            expected: 5,
            delivered: 4,
            ..PhaseCounts::default()
        };
        a.add(&PhaseCounts {
            expected: 1,
            delivered: 1,
            ..PhaseCounts::default()
        })
        .unwrap();
        assert_eq!((a.expected, a.lost()), (6, 1));
        let table = phase_table(&marks, &[a.clone(), PhaseCounts::default()], 10.0, 30.0);
        assert!(
            table.contains("n2 down") && table.contains("all steady"),
            "{table}"
        );
        assert!(!passed(&marks, &[a, PhaseCounts::default()]));
        let rows = vec![RssRow {
            at_s: 15.0,
            nodes: vec![(Some(2048), Some(3)), (None, None)],
            redis_kb: Some(1024),
        }];
        let names = vec!["n1".to_owned(), "n2".to_owned()];
        let text = rss_table(&names, &rows, &marks, 10.0);
        assert!(text.contains("2.0 (3)") && text.contains("down"), "{text}");
        assert_eq!(
            rss_csv(&names, &rows),
            "seconds,n1_rss_kb,n1_clients,n2_rss_kb,n2_clients,redis_rss_kb\n15,2048,3,,,1024\n"
        );
    }
}
