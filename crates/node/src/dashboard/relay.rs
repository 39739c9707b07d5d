//! A live trace across a cluster. The node whose dashboard starts (or stops) a trace asks
//! every node to do the same ([`Request::Trace`], [`Request::StopTrace`]); each of them traces
//! the hub locally and a relay task passes its own events, every 100 ms, to the nodes that
//! asked ([`switchyard_core::Message::Trace`] on their node channels). There they join the
//! local trace's stream, so the page sees one trace with each event's `node`.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Weak};
use std::time::Duration;

use switchyard_backplane::NodeId;
use switchyard_core::clock::unix_now_ms;
use switchyard_core::HubName;
use tokio::time::{interval, MissedTickBehavior};

use super::view::Request;
use super::Dashboard;
use crate::live_trace::{Event, OnNode, TraceEvent, Watch, LOOK_EVERY};

/// Most events a node passes on per look (10 looks a second); the rest are counted as lost.
/// Bounds what one busy trace puts on the backplane.
const RELAY_MAX: usize = 500;

/// Per traced hub, the nodes this node passes its events to.
pub(super) type Relays = parking_lot::Mutex<HashMap<HubName, BTreeSet<NodeId>>>;

impl Dashboard {
    /// Starts (or extends) the trace of `hub` here and on every other node, which pass their
    /// events back to this one.
    pub(super) async fn start_trace(&self, hub: &HubName, duration: Duration) -> Watch {
        let watch = self.shared.tracer.start(hub, duration);
        self.ask_to_trace(hub, watch.until_unix_ms).await;
        watch
    }

    /// Asks the other nodes again to trace `hub` until this node's trace ends.
    pub(super) async fn announce_trace(&self, hub: &HubName) {
        if let Some(until) = self.shared.tracer.until(hub) {
            self.ask_to_trace(hub, until).await;
        }
    }

    async fn ask_to_trace(&self, hub: &HubName, until_unix_ms: i64) {
        if !self.cluster.in_cluster() {
            return;
        }
        let left_ms = (until_unix_ms - unix_now_ms()).max(0) as u64;
        let request = Request::Trace {
            hub: hub.as_str().to_string(),
            // Rounded up: the other nodes end no sooner than this one.
            seconds: left_ms.div_ceil(1000),
            to: self.cluster.node_id().to_string(),
        };
        self.cluster.views(to_json(&request)).await;
    }

    /// Ends the trace of `hub` on every node.
    pub(super) async fn stop_trace(&self, hub: &HubName) {
        self.shared.tracer.stop(hub);
        if self.cluster.in_cluster() {
            let request = Request::StopTrace {
                hub: hub.as_str().to_string(),
            };
            self.cluster.views(to_json(&request)).await;
        }
    }

    /// Another node's dashboard traces `hub`: trace it here too, for `seconds`, and pass the
    /// events to node `to`. False when the hub name is not one.
    pub(super) fn trace_for(self: &Arc<Self>, hub: &str, seconds: u64, to: NodeId) -> bool {
        let Ok(hub) = HubName::new(hub, None) else {
            return false;
        };
        if to == *self.cluster.node_id() {
            return true;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return false;
        };
        // Under the lock, so that a relay whose trace just ended either sees this one or
        // has left the table for a new relay to start.
        let mut relays = self.relays.lock();
        let watch = self.shared.tracer.start(&hub, Duration::from_secs(seconds));
        match relays.get_mut(&hub) {
            Some(to_nodes) => {
                to_nodes.insert(to);
            }
            None => {
                relays.insert(hub.clone(), BTreeSet::from([to]));
                runtime.spawn(relay(Arc::downgrade(self), hub, watch));
            }
        }
        true
    }

    /// Another node's dashboard stopped the trace of `hub`: the relay ends with it.
    pub(super) fn stop_trace_here(&self, hub: &str) -> bool {
        match HubName::new(hub, None) {
            Ok(hub) => self.shared.tracer.stop(&hub),
            Err(_) => false,
        }
    }
}

/// Passes this node's events of the trace of `hub` to the nodes that traced it, until the
/// trace ends here (time limit or stopped).
async fn relay(dashboard: Weak<Dashboard>, hub: HubName, mut watch: Watch) {
    let mut ticks = interval(LOOK_EVERY);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(dashboard) = dashboard.upgrade() else {
            return;
        };
        let news = watch.news();
        let node = dashboard.cluster.node_id().as_str();
        // Only this node's own events: those forwarded to it are its own page's business,
        // and passing them on would echo them between nodes.
        let mut events: Vec<OnNode<'_>> = news
            .events
            .iter()
            .filter_map(|event| match &**event {
                Event::Local(event) => Some(OnNode { node, event }),
                Event::Forwarded(_) => None,
            })
            .collect();
        let dropped = events.len().saturating_sub(RELAY_MAX);
        events.truncate(RELAY_MAX);
        let lost = news.lost + dropped as u64;
        let lost_event;
        if lost > 0 {
            let mut event = TraceEvent::new("lost");
            event.count = Some(lost);
            event.detail = Some(format!(
                "{lost} events of node {node} were not passed on (more than {} a second)",
                RELAY_MAX as u64 * 1000 / LOOK_EVERY.as_millis() as u64
            ));
            lost_event = event;
            events.push(OnNode {
                node,
                event: &lost_event,
            });
        }
        if !events.is_empty() {
            let to: Vec<NodeId> = dashboard
                .relays
                .lock()
                .get(&hub)
                .map(|to| to.iter().cloned().collect())
                .unwrap_or_default();
            dashboard.cluster.publish_trace(&to, &hub, to_json(&events));
        }
        if news.ended {
            let mut relays = dashboard.relays.lock();
            match dashboard.shared.tracer.watch(&hub) {
                // Started again since: go on with the new trace.
                Some(again) => watch = again,
                None => {
                    relays.remove(&hub);
                    return;
                }
            }
        }
    }
}

fn to_json(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value).expect("dashboard values serialise")
}
