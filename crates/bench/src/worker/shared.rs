//! What every task of a running worker shares: the plan, the timetable ([`Schedule`]), the
//! counts ([`Stats`] and the live counters), the coordinator's stop, finish and node signals,
//! and the HTTP clients; and how a send, a delivery, an acknowledgement or a drop is counted.

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use parking_lot::Mutex;
use switchyard_client::connection::{Connection, Transport};
use switchyard_hub_protocol::Format;
use tokio::sync::{watch, Semaphore};

use super::now_ms;
use crate::scenario::{Plan, Scenario};
use crate::stats::{live_latency, Arrival, LiveCounters, SeqTracker, Stats};
use crate::wire;

/// Wall-clock milliseconds of the timetable.
#[derive(Debug, Clone)]
pub(super) struct Schedule {
    /// Warm-up starts.
    pub(super) start_ms: f64,
    /// Step 1 starts.
    pub(super) measure_ms: f64,
    pub(super) step_ms: f64,
    pub(super) steps: u32,
    /// Sending ends.
    pub(super) end_ms: f64,
}

impl Schedule {
    pub(super) fn new(plan: &Plan, start_ms: f64) -> Schedule {
        let measure_ms = start_ms + plan.warmup_seconds * 1000.0;
        let step_ms = plan.step_seconds * 1000.0;
        Schedule {
            start_ms,
            measure_ms,
            step_ms,
            steps: plan.steps.max(1),
            end_ms: measure_ms + step_ms * f64::from(plan.steps.max(1)),
        }
    }

    /// 0 during the warm-up.
    pub(super) fn step_of(&self, ms: f64) -> u32 {
        if ms < self.measure_ms {
            return 0;
        }
        (((ms - self.measure_ms) / self.step_ms) as u32 + 1).min(self.steps)
    }

    pub(super) fn second_of(&self, ms: f64) -> Option<u64> {
        (ms >= self.measure_ms).then(|| ((ms - self.measure_ms) / 1000.0) as u64)
    }

    pub(super) fn step_end(&self, step: u32) -> f64 {
        self.measure_ms + self.step_ms * f64::from(step)
    }

    /// When sender `g` (of `senders`) first sends: from the warm-up if it sends in step 1,
    /// else from its step; spread evenly over one interval. A chat room's posters start in
    /// the warm-up at their own phase of their interval.
    pub(super) fn first_due(&self, plan: &Plan, g: u64) -> Option<f64> {
        if plan.scenario.is_chat_room() {
            return Some(self.start_ms + plan.interval_of(g)? * Plan::phase_of(g));
        }
        let step = plan.first_step_of(g)?;
        let begin = if step == 1 {
            self.start_ms
        } else {
            self.step_end(step - 1)
        };
        Some(begin + plan.interval_ms * g as f64 / plan.senders.max(1) as f64)
    }
}

/// What every task of a running worker shares.
pub(super) struct Shared {
    pub(super) plan: Plan,
    pub(super) format: Format,
    pub(super) schedule: Schedule,
    pub(super) stats: Mutex<Stats>,
    pub(super) live: Arc<LiveCounters>,
    pub(super) padding: String,
    pub(super) connected: u64,
    pub(super) failed: Vec<u64>,
    /// Connected members per group (group scenarios), computed once.
    pub(super) group_members: HashMap<u64, u64>,
    /// Sending stops for intended times at or after this.
    pub(super) stop_ms: watch::Receiver<f64>,
    /// Set when every task must end.
    pub(super) finish: watch::Receiver<bool>,
    /// A soak: the nodes down (from the coordinator), this worker's clients per node, and
    /// what a reconnect needs.
    pub(super) nodes_down: watch::Receiver<Vec<usize>>,
    pub(super) node_load: Vec<std::sync::atomic::AtomicU64>,
    pub(super) transport: Transport,
    pub(super) http: Vec<reqwest::Client>,
    pub(super) rest_http: reqwest::Client,
    /// Reconnects in flight at once are bounded like the first connects (--max-connecting):
    /// thousands at the same instant would time out in the generator itself.
    pub(super) connecting: Arc<Semaphore>,
}

impl Shared {
    pub(super) fn stopped(&self, due_ms: f64) -> bool {
        due_ms >= self.schedule.end_ms || due_ms >= *self.stop_ms.borrow()
    }

    pub(super) fn padding_payload(&self, sender: u32, seq: u64, step: u32) -> String {
        wire::payload(&self.padding, sender, seq, step)
    }

    /// Recipients of one message from sender `g`.
    pub(super) fn fanout(&self, g: u64) -> u64 {
        match self.plan.scenario {
            Scenario::Broadcast | Scenario::RestBroadcast => self.connected,
            Scenario::SendToGroup | Scenario::ChatRoom | Scenario::RestChatRoom => self
                .plan
                .group_of(g)
                .and_then(|group| self.group_members.get(&group).copied())
                .unwrap_or(0),
            Scenario::RestSendToGroup => self
                .plan
                .rest_group_of(g)
                .and_then(|group| self.group_members.get(&group).copied())
                .unwrap_or(0),
            Scenario::RestSendToUser => {
                let target = g % self.plan.connections.max(1);
                u64::from(self.failed.binary_search(&target).is_err())
            }
            _ => 1,
        }
    }

    pub(super) fn measure(&self, payload: &str, ts_ms: f64, bytes: usize, seq: &mut SeqTracker) {
        let Some(tag) = wire::parse_tag(payload) else {
            self.stats.lock().error("Measure with an unknown payload");
            return;
        };
        let latency_us = ((now_ms() - ts_ms) * 1000.0).max(1.0) as u64;
        let mut arrival = seq.observe(tag.sender, tag.seq);
        // One REST caller's calls overlap (open loop) on different HTTP connections: HTTP
        // promises no order between them, so only duplicates count there.
        if arrival == Arrival::Reordered && self.plan.scenario.is_rest() {
            arrival = Arrival::New;
        }
        if arrival != Arrival::Duplicate {
            self.live.received.fetch_add(1, Relaxed);
            self.live.received_bytes.fetch_add(bytes as u64, Relaxed);
            if tag.step > 0 {
                live_latency(&self.live, latency_us);
            }
        }
        self.stats.lock().received(
            tag.step,
            self.schedule.second_of(ts_ms),
            arrival,
            latency_us,
            bytes,
        );
    }

    pub(super) fn sent(&self, due_ms: f64, expected: u64, bytes: usize) {
        self.live.sent.fetch_add(1, Relaxed);
        self.live.sent_bytes.fetch_add(bytes as u64, Relaxed);
        self.stats.lock().sent(
            self.schedule.step_of(due_ms),
            self.schedule.second_of(due_ms),
            expected,
            bytes,
        );
    }

    /// Dues of a sender that were never attempted (the run ended or it was stuck): they
    /// count as expected, so their deliveries show as lost.
    pub(super) fn unsent(&self, mut due: Option<f64>, interval_ms: f64, expected: u64) {
        let mut stats = self.stats.lock();
        while let Some(at) = due {
            if self.stopped(at) {
                break;
            }
            stats.unsent(
                self.schedule.step_of(at),
                self.schedule.second_of(at),
                expected,
            );
            due = Some(at + interval_ms);
        }
    }

    /// An acknowledged operation (join/leave) intended at `due` is done now (`bytes`: the
    /// acknowledgement's size).
    pub(super) fn acknowledged(&self, due: f64, bytes: usize) {
        let latency_us = ((now_ms() - due) * 1000.0).max(1.0) as u64;
        let step = self.schedule.step_of(due);
        self.live.received.fetch_add(1, Relaxed);
        if step > 0 {
            live_latency(&self.live, latency_us);
        }
        self.stats.lock().received(
            step,
            self.schedule.second_of(due),
            Arrival::New,
            latency_us,
            bytes,
        );
    }

    /// Adds a connection's stateful-reconnect counters, once, when it ends.
    pub(super) fn stateful_done(&self, conn: &Connection) {
        if let Some(stats) = conn.stateful_stats() {
            self.live
                .stateful_reconnects
                .fetch_add(stats.reconnects, Relaxed);
            self.live
                .stateful_replayed
                .fetch_add(stats.replayed, Relaxed);
            self.live
                .stateful_duplicates
                .fetch_add(stats.duplicates, Relaxed);
        }
    }

    pub(super) fn dropped(&self, error: String) {
        self.live.dropped.fetch_add(1, Relaxed);
        let mut stats = self.stats.lock();
        stats.dropped(self.schedule.step_of(now_ms()));
        stats.error(error);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Endpoint;

    fn plan(senders: u64, steps: u32) -> Plan {
        Plan {
            scenario: Scenario::Echo,
            hub: "bench".into(),
            endpoint: Endpoint::Hub {
                url: "http://127.0.0.1:1".into(),
            },
            rest: None,
            transport: "websockets".into(),
            protocol: "json".into(),
            connections: 100,
            senders,
            steps,
            step_seconds: 10.0,
            warmup_seconds: 2.0,
            drain_seconds: 5.0,
            message_size: 2048,
            interval_ms: 1000.0,
            group_size: Some(10),
            groups: None,
            connect_rate: 1000.0,
            max_connecting: 10,
            source_addresses: Vec::new(),
            workers: 2,
            worker: 1,
            reconnect: false,
            stateful_reconnect: false,
            drop_share: 0.0,
        }
    }

    #[test]
    fn timetable() {
        let p = plan(100, 4);
        assert_eq!(
            (1..=4).map(|s| p.senders_at(s)).collect::<Vec<_>>(),
            vec![25, 50, 75, 100]
        );
        let s = Schedule::new(&p, 1000.0);
        assert_eq!(s.measure_ms, 3000.0);
        assert_eq!(s.end_ms, 43_000.0);
        assert_eq!(s.step_of(2999.0), 0);
        assert_eq!(s.step_of(3000.0), 1);
        assert_eq!(s.step_of(12_999.0), 1);
        assert_eq!(s.step_of(13_000.0), 2);
        assert_eq!(s.step_of(99_000.0), 4);
        assert_eq!(s.second_of(4500.0), Some(1));
        // Sender 0 starts in the warm-up; sender 30 with step 2; phases spread.
        assert_eq!(s.first_due(&p, 0), Some(1000.0));
        assert_eq!(s.first_due(&p, 30), Some(13_000.0 + 300.0));
        assert_eq!(s.first_due(&p, 100), None);
        assert!(p.owns(1) && !p.owns(2));
    }

    #[test]
    fn groups() {
        let mut p = plan(100, 1);
        assert_eq!(p.group_of(25), Some(2));
        assert_eq!(p.group_of(99), Some(9));
        p.group_size = None;
        p.groups = Some(7);
        assert_eq!(p.group_of(25), Some(4));
    }

    #[test]
    fn chat_room_posters_and_phases() {
        let mut p = plan(0, 1);
        p.scenario = Scenario::ChatRoom;
        p.connections = 250;
        p.group_size = Some(100);
        // Full rooms: 10 chatty (every 11 intervals), 20 casual (every 59), 70 lurkers; the
        // last room of 50: 5 and 10.
        assert_eq!(p.interval_of(0), Some(11_000.0));
        assert_eq!(p.interval_of(109), Some(11_000.0));
        assert_eq!(p.interval_of(110), Some(59_000.0));
        assert_eq!(p.interval_of(129), Some(59_000.0));
        assert_eq!(p.interval_of(130), None);
        assert_eq!(p.interval_of(204), Some(11_000.0));
        assert_eq!(p.interval_of(205), Some(59_000.0));
        assert_eq!(p.interval_of(214), Some(59_000.0));
        assert_eq!(p.interval_of(215), None);
        assert_eq!(p.posters(), 30 + 30 + 15);
        // Phases: in [0, 1), fixed per connection, spread out.
        let phases: Vec<f64> = (0..1000).map(Plan::phase_of).collect();
        assert!(phases.iter().all(|f| (0.0..1.0).contains(f)));
        assert_eq!(Plan::phase_of(7), Plan::phase_of(7));
        let early = phases.iter().filter(|&&f| f < 0.5).count();
        assert!((400..600).contains(&early), "{early}");
        let s = Schedule::new(&p, 1000.0);
        assert_eq!(s.first_due(&p, 130), None);
        assert_eq!(
            s.first_due(&p, 3),
            Some(1000.0 + 11_000.0 * Plan::phase_of(3))
        );
        // Other scenarios keep the plan's interval.
        p.scenario = Scenario::SendToGroup;
        assert_eq!(p.interval_of(130), Some(1000.0));
    }
}
