//! How nodes share routing.
//!
//! # Layout
//! - [`Backplane`]: subscribe a node to channels and publish messages addressed by channel.
//! - [`MemoryBackplane`]: the in-process implementation (one node, or several in one process).
//! - [`envelope`]: the wire form of a message between nodes (no I/O).
//! - [`conformance`]: the behaviour every implementation must show; run it against each one.
//!
//! Rules every implementation keeps: a message published on several channels reaches each
//! subscribed node once; messages from one publisher reach a node in publish order (asks
//! included); publish never waits for a consumer; after [`Backplane::barrier`], a node's
//! subscriptions hear every later publish; an ask's receipt counts exactly the nodes it
//! reaches.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

pub mod conformance;
pub mod envelope;
mod memory;

pub use memory::MemoryBackplane;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use switchyard_core::{Channel, Message};

/// Resolves once every subscribe a node issued before asking is live.
pub type Barrier = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// Resolves to whether the backplane answered a round trip (see [`Backplane::probe`]).
pub type Probe = Pin<Box<dyn Future<Output = bool> + Send + 'static>>;

/// Resolves to how many nodes an ask reached, or `None` when it could not be published.
pub type Receipt = Pin<Box<dyn Future<Output = Option<usize>> + Send + 'static>>;

/// Identifies one service node within a cluster.
pub type NodeId = String;

/// Where a node receives messages from the backplane.
pub trait Sink: Send + Sync {
    fn receive(&self, message: &Arc<Message>);
}

pub trait Backplane: Send + Sync {
    /// Registers a node and where its messages go. It is subscribed to its own
    /// `Channel::Node` and to `Channel::All`.
    fn attach(&self, node: &NodeId, sink: Arc<dyn Sink>);
    /// Removes a node and all its subscriptions.
    fn detach(&self, node: &NodeId);
    fn subscribe(&self, node: &NodeId, channel: &Channel);
    fn unsubscribe(&self, node: &NodeId, channel: &Channel);
    /// Delivers `message` once to every node subscribed to at least one of `channels`.
    /// Never waits: nodes of this process get it before `publish` returns, other nodes
    /// when the network delivers it.
    fn publish(&self, channels: &[Channel], message: Arc<Message>);
    /// Resolves once the node's earlier subscribes are live everywhere, so a message
    /// published by any node after that reaches it. Subscribing itself never waits.
    fn barrier(&self, _node: &NodeId) -> Barrier {
        Box::pin(std::future::ready(()))
    }
    /// Resolves to true once every connection the node receives on has answered a round
    /// trip now, false when one failed; it may never resolve while the network hangs, so
    /// callers bound it. Whether the node can hear the cluster at the moment.
    fn probe(&self, _node: &NodeId) -> Probe {
        Box::pin(std::future::ready(true))
    }
    /// Publishes a [`Message::Ask`] on one channel to every node subscribed to it, the asking
    /// node too when it is subscribed (no local shortcut: the count and the deliveries must
    /// agree), and resolves to how many nodes it reached. Each of them answers once, so the
    /// asker knows how many answers to wait for.
    fn ask(&self, channel: &Channel, message: Arc<Message>) -> Receipt;
    /// Whether nodes of other processes may receive what is published (so a node cannot
    /// judge from its own connections what the receivers need, e.g. which protocols).
    fn spans_processes(&self) -> bool {
        false
    }
    /// A server of the backplane's own that the other nodes reach too, if it has one: a node
    /// bound on every interface announces the address it routes to it from.
    fn peer_address_hint(&self) -> Option<(String, u16)> {
        None
    }
    /// What crossed between processes so far, for metrics (all zero in one process).
    fn stats(&self) -> Traffic {
        Traffic::default()
    }
}

/// Counts of a networked backplane's traffic since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Messages handed to the network (one per message, whatever its channel count).
    pub published: u64,
    /// Messages the network did not accept: lost.
    pub publish_errors: u64,
    /// Messages received from other processes and applied.
    pub received: u64,
    /// Received messages that did not decode: counted and dropped.
    pub decode_errors: u64,
    /// Received messages not sealed with a key of this cluster: dropped before decoding.
    pub unauthenticated: u64,
    /// Subscription changes that failed (and are retried).
    pub subscribe_errors: u64,
}
