//! In-process backplane: subscriptions in a map, publish calls each node's sink directly.
//! Delivery is synchronous, so per-publisher order holds trivially.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use parking_lot::RwLock;
use switchyard_core::{Channel, Message};

use crate::{Backplane, NodeId, Sink};

#[derive(Default)]
pub struct MemoryBackplane {
    state: RwLock<State>,
}

#[derive(Default)]
struct State {
    sinks: HashMap<NodeId, Arc<dyn Sink>>,
    subscribers: HashMap<Channel, BTreeSet<NodeId>>,
}

impl MemoryBackplane {
    pub fn new() -> Self {
        Self::default()
    }

    /// How many channels have at least one subscriber (for tests and metrics).
    pub fn channel_count(&self) -> usize {
        self.state.read().subscribers.len()
    }
}

impl Backplane for MemoryBackplane {
    fn attach(&self, node: &NodeId, sink: Arc<dyn Sink>) {
        let mut state = self.state.write();
        state.sinks.insert(node.clone(), sink);
        for channel in [Channel::Node(node.clone()), Channel::All] {
            state
                .subscribers
                .entry(channel)
                .or_default()
                .insert(node.clone());
        }
    }

    fn detach(&self, node: &NodeId) {
        let mut state = self.state.write();
        state.sinks.remove(node);
        state.subscribers.retain(|_, nodes| {
            nodes.remove(node);
            !nodes.is_empty()
        });
    }

    fn subscribe(&self, node: &NodeId, channel: &Channel) {
        self.state
            .write()
            .subscribers
            .entry(channel.clone())
            .or_default()
            .insert(node.clone());
    }

    fn unsubscribe(&self, node: &NodeId, channel: &Channel) {
        let mut state = self.state.write();
        if let Some(nodes) = state.subscribers.get_mut(channel) {
            nodes.remove(node);
            if nodes.is_empty() {
                state.subscribers.remove(channel);
            }
        }
    }

    fn publish(&self, channels: &[Channel], message: Arc<Message>) {
        // Collect sinks first so no lock is held while sinks run (they may subscribe).
        let sinks: Vec<Arc<dyn Sink>> = {
            let state = self.state.read();
            let mut nodes: BTreeSet<&NodeId> = BTreeSet::new();
            for channel in channels {
                if let Some(subscribed) = state.subscribers.get(channel) {
                    nodes.extend(subscribed.iter());
                }
            }
            nodes
                .into_iter()
                .filter_map(|n| state.sinks.get(n).cloned())
                .collect()
        };
        for sink in sinks {
            sink.receive(&message);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn memory_backplane_conforms() {
        crate::conformance::run_all(|| {
            let backplane: std::sync::Arc<dyn crate::Backplane> =
                std::sync::Arc::new(super::MemoryBackplane::new());
            (backplane.clone(), backplane)
        });
    }
}
