//! In-process backplane: subscriptions in a map, publish calls each node's sink directly.
//! Delivery is synchronous, so per-publisher order holds trivially.
//!
//! Connection channels are not tracked: there is one per connection, and a map entry each
//! would cost every connection of a single node memory for nothing. A message on a connection
//! channel goes to every node of the process instead; a node's router ignores connections it
//! does not hold.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use parking_lot::RwLock;
use switchyard_core::{Channel, Message};

use crate::{Backplane, NodeId, Receipt, Sink};

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
        if matches!(channel, Channel::Connection(..)) {
            return;
        }
        self.state
            .write()
            .subscribers
            .entry(channel.clone())
            .or_default()
            .insert(node.clone());
    }

    fn unsubscribe(&self, node: &NodeId, channel: &Channel) {
        if matches!(channel, Channel::Connection(..)) {
            return;
        }
        let mut state = self.state.write();
        if let Some(nodes) = state.subscribers.get_mut(channel) {
            nodes.remove(node);
            if nodes.is_empty() {
                state.subscribers.remove(channel);
            }
        }
    }

    fn publish(&self, channels: &[Channel], message: Arc<Message>) {
        for sink in self.sinks_for(channels) {
            sink.receive(&message);
        }
    }

    fn ask(&self, channel: &Channel, message: Arc<Message>) -> Receipt {
        let sinks = self.sinks_for(std::slice::from_ref(channel));
        for sink in &sinks {
            sink.receive(&message);
        }
        Box::pin(std::future::ready(Some(sinks.len())))
    }
}

impl MemoryBackplane {
    /// The sinks of the nodes subscribed to any of `channels`, collected so that no lock is
    /// held while sinks run (they may subscribe).
    fn sinks_for(&self, channels: &[Channel]) -> Vec<Arc<dyn Sink>> {
        {
            let state = self.state.read();
            let mut nodes: BTreeSet<&NodeId> = BTreeSet::new();
            for channel in channels {
                if matches!(channel, Channel::Connection(..)) {
                    nodes.extend(state.sinks.keys());
                } else if let Some(subscribed) = state.subscribers.get(channel) {
                    nodes.extend(subscribed.iter());
                }
            }
            nodes
                .into_iter()
                .filter_map(|n| state.sinks.get(n).cloned())
                .collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use parking_lot::Mutex;
    use switchyard_core::{Channel, ConnectionId, Message, Target};

    use crate::{Backplane, Sink};

    #[derive(Default)]
    struct Count(Mutex<usize>);

    impl Sink for Count {
        fn receive(&self, _: &Arc<Message>) {
            *self.0.lock() += 1;
        }
    }

    /// Connection channels cost no state, and still reach the node holding the connection.
    #[test]
    fn connection_channels_are_not_tracked() {
        let backplane = super::MemoryBackplane::new();
        let sink = Arc::new(Count::default());
        let node = "a".to_string();
        backplane.attach(&node, sink.clone());
        let before = backplane.channel_count();
        let channel = Channel::Connection(
            switchyard_core::HubName::new("h", None).unwrap(),
            ConnectionId::new("c1").unwrap(),
        );
        backplane.subscribe(&node, &channel);
        assert_eq!(backplane.channel_count(), before);
        let message = Message::Close {
            hub: switchyard_core::HubName::new("h", None).unwrap(),
            target: Target::Connection(ConnectionId::new("c1").unwrap()),
            excluded: vec![],
            reason: switchyard_core::CloseReason::ClosedByApi(None),
        };
        backplane.publish(std::slice::from_ref(&channel), Arc::new(message));
        assert_eq!(*sink.0.lock(), 1);
        backplane.unsubscribe(&node, &channel);
        assert_eq!(backplane.channel_count(), before);
    }

    #[test]
    fn memory_backplane_conforms() {
        crate::conformance::run_all(|| {
            let backplane: std::sync::Arc<dyn crate::Backplane> =
                std::sync::Arc::new(super::MemoryBackplane::new());
            (backplane.clone(), backplane)
        });
    }
}
