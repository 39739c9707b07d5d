//! The behaviour every [`Backplane`] implementation must show. Call [`run_all`] from the
//! implementation's tests with a factory for fresh instances. Implementations that deliver
//! asynchronously get up to [`SETTLE`] for messages to arrive.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;
use switchyard_core::{Channel, GroupName, HubName, Message, Payloads, Protocol, Target};

use crate::{Backplane, NodeId, Sink};

/// How long an asynchronous implementation may take to deliver.
pub const SETTLE: Duration = Duration::from_secs(5);

#[derive(Default)]
struct Recorder {
    received: Mutex<Vec<Arc<Message>>>,
}

impl Sink for Recorder {
    fn receive(&self, message: &Arc<Message>) {
        self.received.lock().push(message.clone());
    }
}

impl Recorder {
    fn wait_for(&self, count: usize) -> Vec<Arc<Message>> {
        let deadline = Instant::now() + SETTLE;
        loop {
            let got = self.received.lock().clone();
            if got.len() >= count || Instant::now() > deadline {
                return got;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

fn hub() -> HubName {
    HubName::new("chat", None).unwrap()
}

fn group(name: &str) -> GroupName {
    GroupName::new(name).unwrap()
}

fn numbered(n: usize) -> Arc<Message> {
    Arc::new(Message::Send {
        hub: hub(),
        target: Target::All { excluded: vec![] },
        payloads: Payloads::new().with(Protocol::Json, Bytes::from(n.to_string())),
    })
}

fn attach(backplane: &dyn Backplane, name: &str) -> (NodeId, Arc<Recorder>) {
    let recorder = Arc::new(Recorder::default());
    let node: NodeId = name.to_string();
    backplane.attach(&node, recorder.clone());
    (node, recorder)
}

/// Runs every check against fresh instances from `make`.
pub fn run_all<B: Backplane + 'static>(make: impl Fn() -> Arc<B>) {
    subscribed_nodes_receive_and_others_do_not(&*make());
    one_delivery_per_node_for_many_channels(&*make());
    node_channel_is_implicit(&*make());
    unsubscribe_stops_delivery(&*make());
    order_is_preserved_per_publisher(&*make());
    detach_removes_subscriptions(&*make());
}

pub fn subscribed_nodes_receive_and_others_do_not(backplane: &dyn Backplane) {
    let (a, ra) = attach(backplane, "a");
    let (_b, rb) = attach(backplane, "b");
    let channel = Channel::Group(hub(), group("g"));
    backplane.subscribe(&a, &channel);
    backplane.publish(std::slice::from_ref(&channel), numbered(1));
    assert_eq!(ra.wait_for(1).len(), 1, "subscriber must receive");
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        rb.received.lock().is_empty(),
        "non-subscriber must not receive"
    );
}

pub fn one_delivery_per_node_for_many_channels(backplane: &dyn Backplane) {
    let (a, ra) = attach(backplane, "a");
    let g1 = Channel::Group(hub(), group("g1"));
    let g2 = Channel::Group(hub(), group("g2"));
    backplane.subscribe(&a, &g1);
    backplane.subscribe(&a, &g2);
    backplane.publish(&[g1, g2], numbered(1));
    backplane.publish(&[Channel::Hub(hub())], numbered(2));
    let _ = ra.wait_for(1);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        ra.received.lock().len(),
        1,
        "one delivery per node, none for unsubscribed channels"
    );
}

pub fn node_channel_is_implicit(backplane: &dyn Backplane) {
    let (a, ra) = attach(backplane, "a");
    let (_b, rb) = attach(backplane, "b");
    backplane.publish(&[Channel::Node(a.clone())], numbered(1));
    assert_eq!(ra.wait_for(1).len(), 1);
    backplane.publish(&[Channel::All], numbered(2));
    assert_eq!(ra.wait_for(2).len(), 2, "every node hears Channel::All");
    assert_eq!(rb.wait_for(1).len(), 1, "every node hears Channel::All");
}

pub fn unsubscribe_stops_delivery(backplane: &dyn Backplane) {
    let (a, ra) = attach(backplane, "a");
    let channel = Channel::Hub(hub());
    backplane.subscribe(&a, &channel);
    backplane.unsubscribe(&a, &channel);
    backplane.publish(std::slice::from_ref(&channel), numbered(1));
    backplane.publish(&[Channel::Node(a.clone())], numbered(2));
    let got = ra.wait_for(1);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(got.len(), 1);
    assert_eq!(*got[0], *numbered(2));
}

pub fn order_is_preserved_per_publisher(backplane: &dyn Backplane) {
    let (a, ra) = attach(backplane, "a");
    let channel = Channel::Hub(hub());
    backplane.subscribe(&a, &channel);
    for n in 0..500 {
        backplane.publish(std::slice::from_ref(&channel), numbered(n));
    }
    let got = ra.wait_for(500);
    assert_eq!(got.len(), 500);
    for (n, message) in got.iter().enumerate() {
        assert_eq!(**message, *numbered(n), "message {n} out of order");
    }
}

pub fn detach_removes_subscriptions(backplane: &dyn Backplane) {
    let (a, ra) = attach(backplane, "a");
    let channel = Channel::Hub(hub());
    backplane.subscribe(&a, &channel);
    backplane.detach(&a);
    backplane.publish(std::slice::from_ref(&channel), numbered(1));
    std::thread::sleep(Duration::from_millis(50));
    assert!(ra.received.lock().is_empty());
}
