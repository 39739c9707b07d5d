//! One connection's task outside a soak: it sends on its timetable (if it is a sender) and
//! counts what arrives, until the worker finishes.

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use switchyard_client::connection::Connection;
use tokio::time::{sleep_until, timeout};

use super::connect::group_name;
use super::instant_at;
use super::shared::Shared;
use crate::scenario::Scenario;
use crate::stats::SeqTracker;
use crate::wire::{self, Received};

/// One connection: sends on its timetable (if it is a sender) and counts what arrives,
/// until the worker finishes.
pub(super) async fn connection_task(
    shared: Arc<Shared>,
    g: u64,
    mut conn: Connection,
    target: String,
) {
    let plan = &shared.plan;
    if plan.stateful_reconnect && !conn.is_stateful() {
        shared.live.stateful_refused.fetch_add(1, Relaxed);
        shared
            .stats
            .lock()
            .error("stateful reconnect: the service did not agree (is the app server started with --allow-stateful-reconnects?)");
    }
    // --drop-share: this connection's socket is dropped once every 1/share seconds, at a
    // phase of its own so that the drops spread evenly over each second.
    let drop_period_ms =
        (conn.is_stateful() && plan.drop_share > 0.0).then(|| 1000.0 / plan.drop_share);
    let mut drop_ms = drop_period_ms.map(|period| {
        let phase = (g as f64 * 0.618_033_988_75).fract() * period;
        shared.schedule.start_ms + phase
    });
    let drop_timer = sleep_until(instant_at(drop_ms.unwrap_or(0.0)));
    tokio::pin!(drop_timer);
    let sends = plan.scenario.sends() && !plan.scenario.is_rest();
    let mut due_ms = if sends {
        shared.schedule.first_due(plan, g)
    } else {
        None
    };
    let interval_ms = plan.interval_of(g).unwrap_or(plan.interval_ms);
    let mut seq = 0u64;
    let mut tracker = SeqTracker::default();
    let mut finish = shared.finish.clone();
    let mut stop = shared.stop_ms.clone();
    let fanout = shared.fanout(g);
    let group = Value::from(plan.group_of(g).map(group_name).unwrap_or_default());
    let target = Value::from(target);
    // join-leave-group: invocation id → intended send time.
    let mut pending: HashMap<u64, f64> = HashMap::new();
    // One timer, moved after each send (not re-created for every received message).
    let timer = sleep_until(instant_at(due_ms.unwrap_or(0.0)));
    tokio::pin!(timer);
    loop {
        if let Some(due) = due_ms {
            if shared.stopped(due) {
                due_ms = None;
            }
        }
        tokio::select! {
            biased;
            _ = finish.changed() => break,
            _ = stop.changed() => {}
            _ = &mut drop_timer, if drop_ms.is_some_and(|at| at < shared.schedule.end_ms) => {
                // The next next_frame or send_raw finds the socket gone and reconnects.
                conn.abort_transport();
                shared.live.stateful_drops.fetch_add(1, Relaxed);
                let next = drop_ms.unwrap_or_default() + drop_period_ms.unwrap_or_default();
                drop_ms = Some(next);
                drop_timer.as_mut().reset(instant_at(next));
            }
            _ = &mut timer, if due_ms.is_some() => {
                let due = due_ms.unwrap_or_default();
                let step = shared.schedule.step_of(due);
                let ts = json!(due);
                let frame = match plan.scenario {
                    Scenario::JoinLeaveGroup => {
                        pending.insert(seq, due);
                        let method = if seq.is_multiple_of(2) { "JoinGroup" } else { "LeaveGroup" };
                        wire::invocation(shared.format, method, Some(seq.to_string()), vec![group.clone()])
                    }
                    scenario => {
                        let payload = Value::String(shared.padding_payload(g as u32, seq, step));
                        let (method, arguments) = match scenario {
                            Scenario::Echo => ("Echo", vec![ts, payload]),
                            Scenario::Broadcast => ("Broadcast", vec![ts, payload]),
                            Scenario::SendToGroup | Scenario::ChatRoom => ("SendToGroup", vec![group.clone(), ts, payload]),
                            _ => ("SendToConnection", vec![target.clone(), ts, payload]),
                        };
                        wire::invocation(shared.format, method, None, arguments)
                    }
                };
                // Counted before the write: a write held up by back-pressure shows as
                // latency or loss, not as a message that was never due.
                shared.sent(due, fanout, frame.len());
                seq += 1;
                due_ms = Some(due + interval_ms);
                timer.as_mut().reset(instant_at(due + interval_ms));
                tokio::select! {
                    sent = conn.send_raw(frame) => if let Err(e) = sent {
                        shared.dropped(format!("send: {e}"));
                        shared.unsent(due_ms, interval_ms, fanout);
                        shared.stateful_done(&conn);
                        return;
                    },
                    _ = finish.changed() => {
                        shared.unsent(due_ms, interval_ms, fanout);
                        shared.stateful_done(&conn);
                        return;
                    }
                }
            }
            frame = conn.next_frame() => {
                let body = match frame {
                    Ok(body) => body,
                    Err(e) => {
                        shared.dropped(format!("receive: {e}"));
                        shared.unsent(due_ms, interval_ms, fanout);
                        shared.stateful_done(&conn);
                        return;
                    }
                };
                match wire::decode(shared.format, &body) {
                    Ok(Received::Measure { ts_ms, payload }) => {
                        shared.measure(&payload, ts_ms, body.len(), &mut tracker);
                    }
                    Ok(Received::Ping) => {}
                    Ok(Received::Completion { invocation_id, error }) => {
                        let Some(due) = invocation_id.parse().ok().and_then(|id| pending.remove(&id)) else {
                            shared.stats.lock().error("completion for an unknown invocation");
                            continue;
                        };
                        if let Some(error) = error {
                            shared.stats.lock().error(format!("completion: {error}"));
                            continue;
                        }
                        shared.acknowledged(due, body.len());
                    }
                    Ok(Received::Close { error }) => {
                        shared.dropped(format!("closed by the server: {}", error.unwrap_or_default()));
                        shared.unsent(due_ms, interval_ms, fanout);
                        shared.stateful_done(&conn);
                        return;
                    }
                    Ok(Received::Other(what)) => shared.stats.lock().error(format!("unexpected: {what}")),
                    Err(e) => shared.stats.lock().error(format!("undecodable: {e}")),
                }
            }
        }
    }
    shared.unsent(due_ms, interval_ms, fanout);
    shared.stateful_done(&conn);
    // Close politely so the service does not count an abort (bounded: a stuck socket
    // must not hold the worker's final report).
    let _ = timeout(Duration::from_secs(3), conn.close()).await;
}
