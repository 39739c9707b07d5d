//! A soak's connection task: it posts and counts like a connection outside a soak, and when
//! its connection drops it connects again to another live node, joins its room again and
//! records the outage; every delivery goes into its [`Ledger`].

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use switchyard_client::connection::Connection;
use tokio::sync::watch;
use tokio::time::{sleep_until, timeout};

use super::connect::{connect_one, group_name, options_for};
use super::shared::Shared;
use super::{instant_at, now_ms};
use crate::soak::{Ledger, Outage};
use crate::stats::SeqTracker;
use crate::wire::{self, Received};

/// A soak's connection (chat rooms): posts on its timetable like `send::connection_task`, and
/// when its connection drops, connects again to another live node and joins its room again,
/// recording the outage; every delivery goes into its [`Ledger`]. A post due while it is
/// disconnected is skipped (its slot number too, so receivers can tell which were due).
pub(super) async fn soak_task(
    shared: Arc<Shared>,
    g: u64,
    conn: Connection,
    node: usize,
) -> Option<Ledger> {
    let plan = &shared.plan;
    let mut ledger = Ledger::new(g);
    let sends = !plan.scenario.is_rest() && plan.interval_of(g).is_some();
    let interval_ms = plan.interval_of(g).unwrap_or(plan.interval_ms);
    let mut due_ms = if sends {
        shared.schedule.first_due(plan, g)
    } else {
        None
    };
    let mut slot = 0u64;
    let fanout = shared.fanout(g);
    let group = Value::from(plan.group_of(g).map(group_name).unwrap_or_default());
    let mut tracker = SeqTracker::default();
    let mut finish = shared.finish.clone();
    let mut conn = Some(conn);
    let mut node = node;
    let timer = sleep_until(instant_at(due_ms.unwrap_or(0.0)));
    tokio::pin!(timer);
    'run: loop {
        if let Some(due) = due_ms {
            if shared.stopped(due) {
                due_ms = None;
            }
        }
        let Some(c) = conn.as_mut() else {
            let Some((new, choice, up_ms)) =
                reconnect(&shared, g, node, &mut finish, &mut ledger).await
            else {
                break 'run;
            };
            node = choice;
            conn = Some(new);
            // Posts due meanwhile are not sent (nor numbered again).
            while let Some(due) = due_ms.filter(|due| *due < up_ms) {
                slot += 1;
                due_ms = Some(due + interval_ms);
            }
            if let Some(due) = due_ms {
                timer.as_mut().reset(instant_at(due));
            }
            continue 'run;
        };
        let mut dropped: Option<String> = None;
        tokio::select! {
            biased;
            _ = finish.changed() => break,
            _ = &mut timer, if due_ms.is_some() => {
                let due = due_ms.unwrap_or_default();
                let step = shared.schedule.step_of(due);
                let payload = Value::String(shared.padding_payload(g as u32, slot, step));
                let frame = wire::invocation(
                    shared.format,
                    "SendToGroup",
                    None,
                    vec![group.clone(), json!(due), payload],
                );
                shared.sent(due, fanout, frame.len());
                slot += 1;
                due_ms = Some(due + interval_ms);
                timer.as_mut().reset(instant_at(due + interval_ms));
                tokio::select! {
                    sent = c.send_raw(frame) => if let Err(e) = sent {
                        dropped = Some(format!("send: {e}"));
                    },
                    _ = finish.changed() => break,
                }
            }
            frame = c.next_frame() => match frame {
                Err(e) => dropped = Some(format!("receive: {e}")),
                Ok(body) => match wire::decode(shared.format, &body) {
                    Ok(Received::Measure { ts_ms, payload }) => {
                        if let Some(tag) = wire::parse_tag(&payload) {
                            ledger.observe(tag, ts_ms);
                        }
                        shared.measure(&payload, ts_ms, body.len(), &mut tracker);
                    }
                    Ok(Received::Ping | Received::Completion { .. }) => {}
                    Ok(Received::Close { error }) => {
                        dropped = Some(format!("closed by the server: {}", error.unwrap_or_default()));
                    }
                    Ok(Received::Other(what)) => shared.stats.lock().error(format!("unexpected: {what}")),
                    Err(e) => shared.stats.lock().error(format!("undecodable: {e}")),
                },
            },
        }
        if let Some(why) = dropped {
            // Counted apart from the run's failed connections: the outage is what matters.
            shared
                .stats
                .lock()
                .error(format!("dropped, reconnecting: {why}"));
            shared.node_load[node].fetch_sub(1, Relaxed);
            conn = None;
        }
    }
    if let Some(c) = conn {
        let _ = timeout(Duration::from_secs(3), c.close()).await;
    }
    Some(ledger)
}

/// Connects `g` again after node `from` dropped it: to the live node holding the fewest of
/// this worker's clients, never `from`; each failed node is skipped until all were tried.
/// The outage goes into `ledger`. The new connection, its node and when it was up; `None`
/// when the worker finishes first.
async fn reconnect(
    shared: &Shared,
    g: u64,
    from: usize,
    finish: &mut watch::Receiver<bool>,
    ledger: &mut Ledger,
) -> Option<(Connection, usize, f64)> {
    let plan = &shared.plan;
    let down_ms = now_ms();
    let mut tried = vec![from];
    let mut failed_attempts = 0u32;
    let mut backoff = Duration::from_millis(100);
    loop {
        let choice = pick_node(shared, g, &tried);
        let options = options_for(
            plan,
            g,
            shared.node_load.len(),
            shared.transport,
            shared.format,
            &shared.http,
        );
        let attempt = tokio::select! {
            _ = finish.changed() => {
                ledger.outages.push(Outage { g, down_ms, up_ms: None, failed_attempts });
                return None;
            }
            result = async {
                let _permit = shared.connecting.acquire().await;
                timeout(
                    Duration::from_secs(30),
                    connect_one(plan, g, choice, options, shared.rest_http.clone()),
                )
                .await
            } => result.unwrap_or_else(|_| Err("connect: timed out after 30 s".to_owned())),
        };
        match attempt {
            Ok(new) => {
                let up_ms = now_ms();
                ledger.outages.push(Outage {
                    g,
                    down_ms,
                    up_ms: Some(up_ms),
                    failed_attempts,
                });
                return Some((new, choice, up_ms));
            }
            Err(e) => {
                shared.node_load[choice].fetch_sub(1, Relaxed);
                failed_attempts += 1;
                shared.stats.lock().error(format!("reconnect: {e}"));
                tried.push(choice);
                tokio::select! {
                    _ = finish.changed() => {
                        ledger.outages.push(Outage { g, down_ms, up_ms: None, failed_attempts });
                        return None;
                    }
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
    }
}

/// The node for a reconnect, counted in its load at once (the caller takes it back if the
/// attempt fails): the live one (not down by the coordinator's word, not tried already)
/// with the fewest of this worker's clients, ties broken by `g` (all of a dead node's
/// clients choose at the same instant). Each worker holds a like share of every node's
/// clients, so this spreads the dropped ones evenly, and a node started again takes the
/// clients of the next node killed: they never pile up on node 1.
fn pick_node(shared: &Shared, g: u64, tried: &[usize]) -> usize {
    let down = shared.nodes_down.borrow().clone();
    let n = shared.node_load.len();
    let key = |i: &usize| {
        let turn = (*i + n - (g as usize % n.max(1))) % n.max(1);
        (shared.node_load[*i].load(Relaxed), turn)
    };
    let choice = (0..n)
        .filter(|i| !down.contains(i) && !tried.contains(i))
        .min_by_key(key)
        // All tried: any live one again (its trouble may have passed).
        .or_else(|| (0..n).filter(|i| !down.contains(i)).min_by_key(key))
        .or_else(|| (0..n).min_by_key(key))
        .unwrap_or(0);
    shared.node_load[choice].fetch_add(1, Relaxed);
    choice
}
