//! How nodes share routing.
//!
//! # Layout
//! - [`Backplane`]: subscribe a node to channels and publish messages addressed by channel.
//! - [`MemoryBackplane`]: the in-process implementation (one node, or several in one process).
//! - [`conformance`]: the behaviour every implementation must show; run it against each one.
//!
//! Rules every implementation keeps: a message published on several channels reaches each
//! subscribed node once; messages from one publisher reach a node in publish order; publish
//! never waits for a consumer.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

pub mod conformance;
mod memory;

pub use memory::MemoryBackplane;

use std::sync::Arc;

use switchyard_core::{Channel, Message};

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
    fn publish(&self, channels: &[Channel], message: Arc<Message>);
}
