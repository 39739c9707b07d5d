//! The behaviour every [`Backplane`] implementation must show. Call [`run_all`] from the
//! implementation's tests with a factory for a fresh pair of handles on one shared backplane
//! (the same object twice for an in-process one; two clients of one server for a networked
//! one). Node "a" lives on the first handle, node "b" on the second, and messages are
//! published through the second, so a networked implementation is checked across the network;
//! every check runs again with both nodes on the first handle for the local path.
//! Implementations that deliver asynchronously get up to [`SETTLE`] for messages to arrive.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;
use switchyard_core::{Channel, GroupName, HubName, Message, Payloads, Protocol, Target};

use crate::{Backplane, NodeId, Sink};

/// How long an asynchronous implementation may take to deliver.
pub const SETTLE: Duration = Duration::from_secs(5);

/// A sink that keeps what it receives (for these checks and implementations' own tests).
#[derive(Default)]
pub struct Recorder {
    received: Mutex<Vec<Arc<Message>>>,
}

impl Sink for Recorder {
    fn receive(&self, message: &Arc<Message>) {
        self.received.lock().push(message.clone());
    }
}

impl Recorder {
    /// What has arrived so far.
    pub fn received(&self) -> Vec<Arc<Message>> {
        self.received.lock().clone()
    }

    /// What arrived once `count` messages have, or after [`SETTLE`].
    pub fn wait_for(&self, count: usize) -> Vec<Arc<Message>> {
        self.wait_for_within(count, SETTLE)
    }

    /// What arrived once `count` messages have, or after `limit`.
    pub fn wait_for_within(&self, count: usize, limit: Duration) -> Vec<Arc<Message>> {
        let deadline = Instant::now() + limit;
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

/// A marker no check publishes otherwise, numbered apart from [`numbered`]'s messages.
fn marker(n: usize) -> Arc<Message> {
    numbered(1_000_000 + n)
}

/// The fence of every "nothing else arrived" check: publishes a marker to `node`'s own
/// channel through `publisher`, waits for it, and returns everything `recorder` got before
/// it (earlier fences' markers left out). A publisher's messages arrive in publish order
/// (checked below), so anything published before the marker that was going to arrive has
/// arrived by then; no sleep can say that.
fn fence(
    publisher: &dyn Backplane,
    node: &NodeId,
    recorder: &Recorder,
    n: usize,
) -> Vec<Arc<Message>> {
    let marker = marker(n);
    publisher.publish(&[Channel::Node(node.clone())], marker.clone());
    let deadline = Instant::now() + SETTLE;
    loop {
        let got = recorder.received();
        if let Some(at) = got.iter().position(|m| **m == *marker) {
            assert_eq!(
                at + 1,
                got.len(),
                "messages after the fence's marker: {got:?}"
            );
            let earlier_marker = |m: &Arc<Message>| (0..n).any(|k| **m == *self::marker(k));
            return got[..at]
                .iter()
                .filter(|m| !earlier_marker(m))
                .cloned()
                .collect();
        }
        assert!(
            Instant::now() < deadline,
            "the fence's marker did not arrive: {got:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits for the node's subscriptions to be live (from a thread outside any runtime).
fn settle(backplane: &dyn Backplane, node: &NodeId) {
    block_on(backplane.barrier(node));
}

/// A minimal executor for barriers: the implementation's own tasks do the work.
fn block_on<T>(future: std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>) -> T {
    use std::task::{Context, Poll, Wake, Waker};
    struct Thread(std::thread::Thread);
    impl Wake for Thread {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Thread(std::thread::current())));
    let mut context = Context::from_waker(&waker);
    let mut future = future;
    let deadline = Instant::now() + SETTLE;
    loop {
        if let Poll::Ready(value) = future.as_mut().poll(&mut context) {
            return value;
        }
        assert!(Instant::now() < deadline, "barrier did not resolve");
        std::thread::park_timeout(Duration::from_millis(10));
    }
}

type Pair = (Arc<dyn Backplane>, Arc<dyn Backplane>);

/// Runs every check, across the pair and then on the first handle alone.
pub fn run_all(make: impl Fn() -> Pair) {
    let checks: [fn(&dyn Backplane, &dyn Backplane); 8] = [
        subscribed_nodes_receive_and_others_do_not,
        one_delivery_per_node_for_many_channels,
        node_channel_is_implicit,
        unsubscribe_stops_delivery,
        order_is_preserved_per_publisher,
        order_holds_across_channels,
        detach_removes_subscriptions,
        asks_reach_exactly_the_subscribed_nodes,
    ];
    for check in checks {
        let (near, far) = make();
        check(&*near, &*far);
        let (near, _) = make();
        check(&*near, &*near);
    }
}

pub fn subscribed_nodes_receive_and_others_do_not(near: &dyn Backplane, far: &dyn Backplane) {
    let (a, ra) = attach(near, "a");
    let (b, rb) = attach(far, "b");
    let channel = Channel::Group(hub(), group("g"));
    near.subscribe(&a, &channel);
    settle(near, &a);
    settle(far, &b);
    far.publish(std::slice::from_ref(&channel), numbered(1));
    assert_eq!(ra.wait_for(1).len(), 1, "subscriber must receive");
    assert!(
        fence(far, &b, &rb, 1).is_empty(),
        "non-subscriber must not receive"
    );
    assert_eq!(fence(far, &a, &ra, 2).len(), 1, "subscriber received twice");
}

pub fn one_delivery_per_node_for_many_channels(near: &dyn Backplane, far: &dyn Backplane) {
    let (a, ra) = attach(near, "a");
    let g1 = Channel::Group(hub(), group("g1"));
    let g2 = Channel::Group(hub(), group("g2"));
    near.subscribe(&a, &g1);
    near.subscribe(&a, &g2);
    settle(near, &a);
    far.publish(&[g1, g2], numbered(1));
    far.publish(&[Channel::Hub(hub())], numbered(2));
    far.publish(&[Channel::Node(a.clone())], numbered(3));
    let got = fence(far, &a, &ra, 1);
    assert_eq!(
        got,
        vec![numbered(1), numbered(3)],
        "one delivery per node, none for unsubscribed channels"
    );
}

pub fn node_channel_is_implicit(near: &dyn Backplane, far: &dyn Backplane) {
    let (a, ra) = attach(near, "a");
    let (b, rb) = attach(far, "b");
    settle(near, &a);
    settle(far, &b);
    far.publish(&[Channel::Node(a.clone())], numbered(1));
    assert_eq!(ra.wait_for(1).len(), 1);
    far.publish(&[Channel::All], numbered(2));
    assert_eq!(ra.wait_for(2).len(), 2, "every node hears Channel::All");
    assert_eq!(rb.wait_for(1).len(), 1, "every node hears Channel::All");
}

pub fn unsubscribe_stops_delivery(near: &dyn Backplane, far: &dyn Backplane) {
    let (a, ra) = attach(near, "a");
    let channel = Channel::Hub(hub());
    near.subscribe(&a, &channel);
    near.unsubscribe(&a, &channel);
    settle(near, &a);
    far.publish(std::slice::from_ref(&channel), numbered(1));
    far.publish(&[Channel::Node(a.clone())], numbered(2));
    // Everything before the marker: only the node's own message, not the hub's.
    let got = fence(far, &a, &ra, 1);
    assert_eq!(got.len(), 1, "delivered after unsubscribe: {got:?}");
    assert_eq!(*got[0], *numbered(2));
    // Subscribing again delivers again (the unsubscribe did not break the channel).
    near.subscribe(&a, &channel);
    settle(near, &a);
    far.publish(std::slice::from_ref(&channel), numbered(3));
    let got = fence(far, &a, &ra, 2);
    assert_eq!(got.len(), 2, "resubscribed: {got:?}");
    assert_eq!(*got[1], *numbered(3));
}

pub fn order_is_preserved_per_publisher(near: &dyn Backplane, far: &dyn Backplane) {
    let (a, ra) = attach(near, "a");
    let channel = Channel::Hub(hub());
    near.subscribe(&a, &channel);
    settle(near, &a);
    for n in 0..500 {
        far.publish(std::slice::from_ref(&channel), numbered(n));
    }
    let got = ra.wait_for(500);
    assert_eq!(got.len(), 500);
    for (n, message) in got.iter().enumerate() {
        assert_eq!(**message, *numbered(n), "message {n} out of order");
    }
}

/// One publisher, messages for different channels that one node hears: publish order.
pub fn order_holds_across_channels(near: &dyn Backplane, far: &dyn Backplane) {
    let (a, ra) = attach(near, "a");
    let channels = [
        Channel::Hub(hub()),
        Channel::Group(hub(), group("g")),
        Channel::Node(a.clone()),
    ];
    near.subscribe(&a, &channels[0]);
    near.subscribe(&a, &channels[1]);
    settle(near, &a);
    for n in 0..300 {
        far.publish(std::slice::from_ref(&channels[n % 3]), numbered(n));
    }
    let got = ra.wait_for(300);
    assert_eq!(got.len(), 300);
    for (n, message) in got.iter().enumerate() {
        assert_eq!(**message, *numbered(n), "message {n} out of order");
    }
}

pub fn detach_removes_subscriptions(near: &dyn Backplane, far: &dyn Backplane) {
    let (a, ra) = attach(near, "a");
    let channel = Channel::Hub(hub());
    near.subscribe(&a, &channel);
    settle(near, &a);
    near.detach(&a);
    // The same node attached again with a fresh sink and no subscription of its own: a
    // subscription the detach left behind would now deliver to it. (Checking the old sink
    // alone proves nothing: it is gone with the detach whether or not its channels are.)
    let (_, again) = attach(near, "a");
    settle(near, &a);
    far.publish(std::slice::from_ref(&channel), numbered(1));
    assert!(
        fence(far, &a, &again, 1).is_empty(),
        "a detached node's subscription survived"
    );
    assert!(ra.received().is_empty(), "a detached sink still receives");
}

/// An ask reaches every subscribed node, the asker included, after the asker's earlier
/// publishes, and its receipt counts exactly those nodes.
pub fn asks_reach_exactly_the_subscribed_nodes(near: &dyn Backplane, far: &dyn Backplane) {
    let (a, ra) = attach(near, "a");
    let (b, rb) = attach(far, "b");
    let both = Channel::Group(hub(), group("both"));
    let only_a = Channel::Group(hub(), group("a"));
    near.subscribe(&a, &both);
    near.subscribe(&a, &only_a);
    far.subscribe(&b, &both);
    settle(near, &a);
    settle(far, &b);
    // What an ask carries is the node's business: here a body naming the ask.
    let ask = |id: u64| {
        Arc::new(Message::Control {
            hub: hub(),
            body: bytes::Bytes::from(format!("ask {id} from {b}")),
        })
    };
    let is_ask = |message: &Message, id: u64| matches!(message, Message::Control { body, .. } if *body == format!("ask {id} from {b}"));
    far.publish(std::slice::from_ref(&both), numbered(1));
    assert_eq!(block_on(far.ask(&both, ask(1))), Some(2));
    assert_eq!(block_on(far.ask(&only_a, ask(2))), Some(1));
    let nobody = Channel::Group(hub(), group("nobody"));
    assert_eq!(block_on(far.ask(&nobody, ask(3))), Some(0));
    let got = ra.wait_for(3);
    assert_eq!(got.len(), 3, "a: {got:?}");
    assert_eq!(*got[0], *numbered(1), "an ask overtook an earlier publish");
    assert!(is_ask(&got[1], 1));
    assert!(is_ask(&got[2], 2));
    let got = rb.wait_for(2);
    assert_eq!(got.len(), 2, "b: {got:?}");
    assert!(is_ask(&got[1], 1));
    assert_eq!(fence(far, &a, &ra, 1).len(), 3, "a got more");
    assert_eq!(fence(far, &b, &rb, 2).len(), 2, "b got more");
}
