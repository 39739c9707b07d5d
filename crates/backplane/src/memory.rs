//! In-process backplane: subscriptions in a map, publish calls each node's sink directly.
//! Delivery is synchronous, so per-publisher order holds trivially.
//!
//! Connection channels are not tracked: there is one per connection, and a map entry each
//! would cost every connection of a single node memory for nothing. A message on a connection
//! channel goes to every node of the process instead; a node's router ignores connections it
//! does not hold. User channels are tracked (a user's sends reach only its nodes), so each
//! costs little: a sorted list of shared node names, one 16-byte allocation for one node
//! (a `BTreeSet` of names held a 280-byte leaf and a copy of the name per user).

use std::collections::HashMap;
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
    /// Each attached node's sink, and its name as the subscription lists share it.
    sinks: HashMap<NodeId, (Arc<str>, Arc<dyn Sink>)>,
    /// Sorted and without repeats.
    subscribers: HashMap<Channel, Vec<Arc<str>>>,
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

impl State {
    fn add(&mut self, channel: Channel, node: &NodeId) {
        let name = match self.sinks.get(node) {
            Some((name, _)) => name.clone(),
            None => Arc::from(node.as_str()),
        };
        let nodes = self
            .subscribers
            .entry(channel)
            .or_insert_with(|| Vec::with_capacity(1));
        if let Err(at) = nodes.binary_search_by(|n| n.as_ref().cmp(node.as_str())) {
            nodes.insert(at, name);
        }
    }
}

impl Backplane for MemoryBackplane {
    fn attach(&self, node: &NodeId, sink: Arc<dyn Sink>) {
        let mut state = self.state.write();
        state
            .sinks
            .insert(node.clone(), (Arc::from(node.as_str()), sink));
        for channel in [Channel::Node(node.clone()), Channel::All] {
            state.add(channel, node);
        }
    }

    fn detach(&self, node: &NodeId) {
        let mut state = self.state.write();
        state.sinks.remove(node);
        state.subscribers.retain(|_, nodes| {
            nodes.retain(|n| n.as_ref() != node.as_str());
            !nodes.is_empty()
        });
    }

    fn subscribe(&self, node: &NodeId, channel: &Channel) {
        if matches!(channel, Channel::Connection(..)) {
            return;
        }
        self.state.write().add(channel.clone(), node);
    }

    fn unsubscribe(&self, node: &NodeId, channel: &Channel) {
        if matches!(channel, Channel::Connection(..)) {
            return;
        }
        let mut state = self.state.write();
        if let Some(nodes) = state.subscribers.get_mut(channel) {
            nodes.retain(|n| n.as_ref() != node.as_str());
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
    /// The sinks of the nodes subscribed to any of `channels`, each once, in the order of
    /// their names; collected so that no lock is held while sinks run (they may subscribe).
    fn sinks_for(&self, channels: &[Channel]) -> Vec<Arc<dyn Sink>> {
        let state = self.state.read();
        let mut nodes: Vec<&str> = Vec::new();
        for channel in channels {
            if matches!(channel, Channel::Connection(..)) {
                nodes.extend(state.sinks.keys().map(String::as_str));
            } else if let Some(subscribed) = state.subscribers.get(channel) {
                nodes.extend(subscribed.iter().map(|n| n.as_ref()));
            }
        }
        // One channel's list is sorted already; several may share nodes.
        if channels.len() > 1 || matches!(channels.first(), Some(Channel::Connection(..))) {
            nodes.sort_unstable();
            nodes.dedup();
        }
        nodes
            .into_iter()
            .filter_map(|n| state.sinks.get(n).map(|(_, sink)| sink.clone()))
            .collect()
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

    /// A user channel is a set: subscribing twice keeps one entry, and a channel leaves
    /// the map with its last subscriber.
    #[test]
    fn subscriptions_are_sets_per_channel() {
        let backplane = super::MemoryBackplane::new();
        let (a, b) = ("a".to_string(), "b".to_string());
        let (sink_a, sink_b) = (Arc::new(Count::default()), Arc::new(Count::default()));
        backplane.attach(&b, sink_b.clone());
        backplane.attach(&a, sink_a.clone());
        let before = backplane.channel_count();
        let hub = switchyard_core::HubName::new("h", None).unwrap();
        let user = Channel::User(hub.clone(), switchyard_core::UserId::new("u").unwrap());
        backplane.subscribe(&b, &user);
        backplane.subscribe(&a, &user);
        backplane.subscribe(&a, &user);
        assert_eq!(backplane.channel_count(), before + 1);
        let send = |n: u64| {
            Arc::new(Message::Close {
                hub: hub.clone(),
                target: Target::User(switchyard_core::UserId::new("u").unwrap()),
                excluded: vec![],
                reason: switchyard_core::CloseReason::ClosedByApi(Some(n.to_string())),
            })
        };
        backplane.publish(&[user.clone(), Channel::All], send(1));
        assert_eq!((*sink_a.0.lock(), *sink_b.0.lock()), (1, 1));
        backplane.unsubscribe(&a, &user);
        backplane.publish(std::slice::from_ref(&user), send(2));
        assert_eq!((*sink_a.0.lock(), *sink_b.0.lock()), (1, 2));
        backplane.unsubscribe(&b, &user);
        assert_eq!(backplane.channel_count(), before);
        backplane.subscribe(&a, &user);
        backplane.detach(&a);
        // Its node channel and the user channel went; `All` keeps b.
        assert_eq!(backplane.channel_count(), before - 1);
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
