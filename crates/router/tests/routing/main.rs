//! Integration tests of the routing core through its public API, one file per concern; the
//! helpers they share are here.
//!
//! # Layout
//! - `targets`: which connections each target reaches.
//! - `payloads`: which payload each recipient gets.
//! - `ordering`: per-sender order.
//! - `groups`, `user_groups`: group and user-group membership.
//! - `interest`: the channels reported wanted and unwanted.
//! - `apply`: `Router::apply`.
//! - `outbound`: outbound queues and slow consumers.
//! - `traffic`: delivery counts.
//! - `concurrency`: consistency under concurrent changes.
//! - `table_copy`: the user-group table copied between nodes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;
use switchyard_core::{
    Channel, CloseReason, ConnectionId, GroupName, HubName, Message, Payloads, Protocol, Target,
    UserId,
};
use switchyard_router::{
    Batch, Connection, GroupJoin, GroupLimits, GroupMember, Hub, Interest, Outbound, Router,
    TrafficTotals,
};

const BUDGET: usize = 1 << 20;

mod apply;
mod concurrency;
mod freeing;
mod groups;
mod interest;
mod ordering;
mod outbound;
mod payloads;
mod table_copy;
mod targets;
mod traffic;
mod user_groups;

/// Records every interest change in order.
#[derive(Default)]
struct Recorder {
    events: Mutex<Vec<(Channel, bool)>>,
}

impl Interest for Recorder {
    fn changed(&self, channel: Channel, interested: bool) {
        self.events.lock().push((channel, interested));
    }
}

impl Recorder {
    /// Events since the last call, except connection channels (one per connection, checked
    /// by `interest_in_connection_channels`).
    fn take(&self) -> Vec<(Channel, bool)> {
        let mut events = std::mem::take(&mut *self.events.lock());
        events.retain(|(channel, _)| !matches!(channel, Channel::Connection(..)));
        events
    }

    /// Every event since the last call.
    fn take_all(&self) -> Vec<(Channel, bool)> {
        std::mem::take(&mut *self.events.lock())
    }

    /// Per channel: (times reported interested) - (times reported not interested).
    fn net(&self) -> BTreeMap<Channel, i64> {
        let mut net = BTreeMap::new();
        for (channel, interested) in self.events.lock().iter() {
            *net.entry(channel.clone()).or_insert(0) += if *interested { 1 } else { -1 };
        }
        net
    }
}

fn hub_name(name: &str) -> HubName {
    HubName::new(name, None).unwrap()
}

fn cid(id: &str) -> ConnectionId {
    ConnectionId::new(id).unwrap()
}

fn uid(user: &str) -> UserId {
    UserId::new(user).unwrap()
}

fn group(name: &str) -> GroupName {
    GroupName::new(name).unwrap()
}

fn cids(ids: &[&str]) -> Vec<ConnectionId> {
    ids.iter().map(|id| cid(id)).collect()
}

struct Setup {
    interest: Arc<Recorder>,
    router: Router,
    hub: Arc<Hub>,
}

fn setup() -> Setup {
    let interest = Arc::new(Recorder::default());
    let router = Router::new(interest.clone());
    let hub = router.hub(&hub_name("chat"));
    Setup {
        interest,
        router,
        hub,
    }
}

fn connect_with(
    hub: &Hub,
    id: &str,
    user: Option<&str>,
    protocol: Protocol,
    budget: usize,
) -> Arc<Connection> {
    let connection = Arc::new(Connection::new(cid(id), user.map(uid), budget));
    assert!(connection.set_protocol(protocol));
    assert!(hub.add_connection(connection.clone()), "id {id} taken");
    connection
}

fn connect(hub: &Hub, id: &str, user: Option<&str>) -> Arc<Connection> {
    connect_with(hub, id, user, Protocol::Json, BUDGET)
}

fn connect_mp(hub: &Hub, id: &str, user: Option<&str>) -> Arc<Connection> {
    connect_with(hub, id, user, Protocol::MessagePack, BUDGET)
}

/// Everything queued for the connection; panics if it is closing.
fn drain(connection: &Connection) -> Vec<Bytes> {
    let mut out = Vec::new();
    match connection.outbound().try_drain(&mut out) {
        None | Some(Batch::Frames) => out,
        Some(Batch::Close(reason)) => panic!("{} is closing: {reason:?}", connection.id()),
        Some(Batch::Interrupted) => panic!("nothing interrupts here"),
    }
}

fn texts(connection: &Connection) -> Vec<String> {
    drain(connection)
        .iter()
        .map(|b| String::from_utf8(b.to_vec()).unwrap())
        .collect()
}

/// Ids of the connections that received exactly one frame (sorted); panics on duplicates.
fn reached(connections: &[Arc<Connection>]) -> Vec<String> {
    let mut ids = Vec::new();
    for connection in connections {
        let frames = drain(connection);
        assert!(
            frames.len() <= 1,
            "{} received {} frames",
            connection.id(),
            frames.len()
        );
        if frames.len() == 1 {
            ids.push(connection.id().to_string());
        }
    }
    ids.sort();
    ids
}

fn strings(ids: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

fn json(text: &str) -> Payloads {
    Payloads::new().with(Protocol::Json, Bytes::from(text.to_owned()))
}

fn group_target(name: &str, excluded: &[&str], excluded_users: &[&str]) -> Target {
    Target::Group {
        group: group(name),
        excluded: cids(excluded),
        excluded_users: excluded_users.iter().map(|u| uid(u)).collect(),
    }
}

fn in_group(connection: &Connection, name: &str) -> bool {
    connection.groups().contains(&group(name))
}

fn member_ids(hub: &Hub, name: &str) -> Vec<String> {
    hub.group_members(&group(name), None, usize::MAX)
        .into_iter()
        .map(|m| m.connection.to_string())
        .collect()
}

/// A small deterministic generator so the concurrency test needs no extra dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}
