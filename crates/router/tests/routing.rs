//! Integration tests of the routing core through its public API: which connections each
//! target reaches, which payload each recipient gets, ordering, group and user-group
//! membership, interest changes, `Router::apply`, outbound queues and a concurrency smoke test.

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

// ---------------------------------------------------------------------------------------------
// helpers

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

// ---------------------------------------------------------------------------------------------
// targets

#[test]
fn all_reaches_every_connection() {
    let s = setup();
    let conns: Vec<_> = (0..10)
        .map(|i| connect(&s.hub, &format!("c{i}"), None))
        .collect();
    let n = s.hub.send(&Target::All { excluded: vec![] }, &json("hi"));
    assert_eq!(n, 10);
    assert_eq!(reached(&conns).len(), 10);
}

#[test]
fn all_with_short_exclusions() {
    let s = setup();
    let conns: Vec<_> = (0..20)
        .map(|i| connect(&s.hub, &format!("c{i:02}"), None))
        .collect();

    // A few ids, one unknown.
    let target = Target::All {
        excluded: cids(&["c01", "c05", "c19", "nope"]),
    };
    assert_eq!(s.hub.send(&target, &json("x")), 17);
    let got = reached(&conns);
    assert_eq!(got.len(), 17);
    for id in ["c01", "c05", "c19"] {
        assert!(!got.contains(&id.to_string()));
    }

    // Exactly eight: the upper bound of the short list.
    let eight: Vec<String> = (0..8).map(|i| format!("c{i:02}")).collect();
    let target = Target::All {
        excluded: eight.iter().map(|s| cid(s)).collect(),
    };
    assert_eq!(s.hub.send(&target, &json("x")), 12);
    let got = reached(&conns);
    let expected: Vec<String> = (8..20).map(|i| format!("c{i:02}")).collect();
    assert_eq!(got, expected);
}

#[test]
fn all_with_many_exclusions() {
    let s = setup();
    let conns: Vec<_> = (0..20)
        .map(|i| connect(&s.hub, &format!("c{i:02}"), None))
        .collect();

    // Nine: the smallest long list.
    let nine: Vec<ConnectionId> = (0..9).map(|i| cid(&format!("c{i:02}"))).collect();
    assert_eq!(s.hub.send(&Target::All { excluded: nine }, &json("x")), 11);
    let expected: Vec<String> = (9..20).map(|i| format!("c{i:02}")).collect();
    assert_eq!(reached(&conns), expected);

    // Many, with duplicates and unknown ids.
    let mut many: Vec<ConnectionId> = (0..20)
        .filter(|i| i % 2 == 0)
        .map(|i| cid(&format!("c{i:02}")))
        .collect();
    many.extend(cids(&["c00", "c02", "ghost1", "ghost2", "ghost3"]));
    assert!(many.len() > 8);
    assert_eq!(s.hub.send(&Target::All { excluded: many }, &json("x")), 10);
    let expected: Vec<String> = (0..20)
        .filter(|i| i % 2 == 1)
        .map(|i| format!("c{i:02}"))
        .collect();
    assert_eq!(reached(&conns), expected);

    // Everyone excluded.
    let everyone: Vec<ConnectionId> = conns.iter().map(|c| c.id().clone()).collect();
    assert_eq!(
        s.hub.send(&Target::All { excluded: everyone }, &json("x")),
        0
    );
    assert!(reached(&conns).is_empty());
}

#[test]
fn connection_target() {
    let s = setup();
    let conns = vec![
        connect(&s.hub, "a", Some("u")),
        connect(&s.hub, "b", Some("u")),
        connect(&s.hub, "c", None),
    ];
    assert_eq!(s.hub.send(&Target::Connection(cid("b")), &json("x")), 1);
    assert_eq!(reached(&conns), strings(&["b"]));
    assert_eq!(s.hub.send(&Target::Connection(cid("zz")), &json("x")), 0);
    assert!(reached(&conns).is_empty());
}

#[test]
fn connections_target_dedups() {
    let s = setup();
    let conns = vec![
        connect(&s.hub, "a", None),
        connect(&s.hub, "b", None),
        connect(&s.hub, "c", None),
    ];
    let target = Target::Connections(cids(&["a", "a", "b", "unknown", "b", "a"]));
    assert_eq!(s.hub.send(&target, &json("x")), 2);
    assert_eq!(reached(&conns), strings(&["a", "b"]));
    assert_eq!(s.hub.send(&Target::Connections(vec![]), &json("x")), 0);
}

#[test]
fn user_target_reaches_all_connections_of_the_user() {
    let s = setup();
    let conns = vec![
        connect(&s.hub, "a1", Some("alice")),
        connect_mp(&s.hub, "a2", Some("alice")),
        connect(&s.hub, "a3", Some("alice")),
        connect(&s.hub, "b1", Some("bob")),
        connect(&s.hub, "anon", None),
    ];
    let payloads = json("j").with(Protocol::MessagePack, Bytes::from_static(b"m"));
    assert_eq!(s.hub.send(&Target::User(uid("alice")), &payloads), 3);
    assert_eq!(reached(&conns), strings(&["a1", "a2", "a3"]));
    assert_eq!(s.hub.send(&Target::User(uid("nobody")), &payloads), 0);
    // User ids are case-sensitive.
    assert_eq!(s.hub.send(&Target::User(uid("Alice")), &payloads), 0);
    assert!(reached(&conns).is_empty());
}

#[test]
fn users_target_dedups() {
    let s = setup();
    let conns = vec![
        connect(&s.hub, "a1", Some("alice")),
        connect(&s.hub, "a2", Some("alice")),
        connect(&s.hub, "b1", Some("bob")),
        connect(&s.hub, "c1", Some("carol")),
        connect(&s.hub, "anon", None),
    ];
    let target = Target::Users(vec![
        uid("alice"),
        uid("bob"),
        uid("alice"),
        uid("ghost"),
        uid("bob"),
    ]);
    assert_eq!(s.hub.send(&target, &json("x")), 3);
    assert_eq!(reached(&conns), strings(&["a1", "a2", "b1"]));
}

#[test]
fn group_target_with_exclusions() {
    let s = setup();
    let conns = vec![
        connect(&s.hub, "a1", Some("alice")),
        connect(&s.hub, "a2", Some("alice")),
        connect(&s.hub, "b1", Some("bob")),
        connect(&s.hub, "c1", Some("carol")),
        connect(&s.hub, "anon", None),
        connect(&s.hub, "outside", Some("bob")),
    ];
    for id in ["a1", "a2", "b1", "c1", "anon"] {
        assert!(s.hub.add_to_group(&cid(id), &group("g")));
    }

    assert_eq!(s.hub.send(&group_target("g", &[], &[]), &json("x")), 5);
    assert_eq!(reached(&conns), strings(&["a1", "a2", "b1", "c1", "anon"]));

    // Excluded connections.
    let n = s
        .hub
        .send(&group_target("g", &["a1", "anon", "zz"], &[]), &json("x"));
    assert_eq!(n, 3);
    assert_eq!(reached(&conns), strings(&["a2", "b1", "c1"]));

    // Excluded users (an anonymous connection is never excluded by user).
    let n = s
        .hub
        .send(&group_target("g", &[], &["alice", "ghost"]), &json("x"));
    assert_eq!(n, 3);
    assert_eq!(reached(&conns), strings(&["b1", "c1", "anon"]));

    // Both.
    let n = s
        .hub
        .send(&group_target("g", &["c1"], &["alice"]), &json("x"));
    assert_eq!(n, 2);
    assert_eq!(reached(&conns), strings(&["b1", "anon"]));

    // More than eight excluded connections.
    let mut many: Vec<&str> = vec!["x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8"];
    many.push("b1");
    many.push("a2");
    let n = s.hub.send(&group_target("g", &many, &[]), &json("x"));
    assert_eq!(n, 3);
    assert_eq!(reached(&conns), strings(&["a1", "c1", "anon"]));

    // Unknown group.
    assert_eq!(s.hub.send(&group_target("nope", &[], &[]), &json("x")), 0);
    assert!(reached(&conns).is_empty());
}

#[test]
fn groups_target_delivers_once_per_connection() {
    let s = setup();
    let conns = vec![
        connect(&s.hub, "a", None),
        connect(&s.hub, "b", None),
        connect(&s.hub, "c", None),
        connect(&s.hub, "d", None),
        connect(&s.hub, "e", None),
    ];
    for (id, g) in [
        ("a", "g1"),
        ("a", "g2"),
        ("b", "g1"),
        ("c", "g2"),
        ("d", "g3"),
    ] {
        assert!(s.hub.add_to_group(&cid(id), &group(g)));
    }
    let target = Target::Groups(vec![group("g1"), group("g2"), group("g1"), group("none")]);
    assert_eq!(s.hub.send(&target, &json("x")), 3);
    assert_eq!(reached(&conns), strings(&["a", "b", "c"]));

    let target = Target::Groups(vec![group("g1"), group("g2"), group("g3")]);
    assert_eq!(s.hub.send(&target, &json("x")), 4);
    assert_eq!(reached(&conns), strings(&["a", "b", "c", "d"]));

    assert_eq!(s.hub.send(&Target::Groups(vec![]), &json("x")), 0);
}

#[test]
fn hubs_are_isolated() {
    let s = setup();
    let other = s.router.hub(&hub_name("other"));
    let a = connect(&s.hub, "same-id", Some("u"));
    let b = connect(&other, "same-id", Some("u"));
    assert!(s.hub.add_to_group(&cid("same-id"), &group("g")));

    assert_eq!(s.hub.send(&Target::All { excluded: vec![] }, &json("x")), 1);
    assert_eq!(other.send(&group_target("g", &[], &[]), &json("x")), 0);
    assert_eq!(other.send(&Target::User(uid("u")), &json("y")), 1);
    assert_eq!(texts(&a), vec!["x"]);
    assert_eq!(texts(&b), vec!["y"]);
    assert_eq!(s.router.connection_count(), 2);
    assert_eq!(s.router.hubs().len(), 2);
    // Hub names are case-insensitive keys.
    assert!(Arc::ptr_eq(
        &s.router.hub(&hub_name("CHAT")),
        &s.router.find_hub(&hub_name("chat")).unwrap()
    ));
}

// ---------------------------------------------------------------------------------------------
// payloads

#[test]
fn payload_is_chosen_per_recipient_protocol() {
    let s = setup();
    let j1 = connect(&s.hub, "j1", None);
    let j2 = connect(&s.hub, "j2", None);
    let m1 = connect_mp(&s.hub, "m1", None);
    let o1 = connect_with(
        &s.hub,
        "o1",
        None,
        Protocol::from_name("blazorpack"),
        BUDGET,
    );
    let all = Target::All { excluded: vec![] };

    let json_bytes = Bytes::from_static(b"{\"type\":1}\x1e");
    let mp_bytes = Bytes::from_static(b"\x05\x95\x01\x80\xc0\xa1x");
    let both = Payloads::new()
        .with(Protocol::Json, json_bytes.clone())
        .with(Protocol::MessagePack, mp_bytes.clone());
    assert_eq!(s.hub.send(&all, &both), 3);
    assert_eq!(drain(&j1), vec![json_bytes.clone()]);
    assert_eq!(drain(&j2), vec![json_bytes.clone()]);
    assert_eq!(drain(&m1), vec![mp_bytes.clone()]);
    assert!(drain(&o1).is_empty(), "no blazorpack payload was given");

    let json_only = Payloads::new().with(Protocol::Json, json_bytes.clone());
    assert_eq!(s.hub.send(&all, &json_only), 2);
    assert!(drain(&m1).is_empty());
    assert!(drain(&o1).is_empty());
    assert_eq!(drain(&j1).len(), 1);
    assert_eq!(drain(&j2).len(), 1);

    let mp_only = Payloads::new().with(Protocol::MessagePack, mp_bytes.clone());
    assert_eq!(s.hub.send(&all, &mp_only), 1);
    assert_eq!(drain(&m1), vec![mp_bytes]);
    assert!(drain(&j1).is_empty());

    // Other protocols match by name, case-insensitively.
    let other = Payloads::new().with(Protocol::from_name("BlazorPack"), Bytes::from_static(b"b"));
    assert_eq!(s.hub.send(&all, &other), 1);
    assert_eq!(drain(&o1), vec![Bytes::from_static(b"b")]);
    assert!(drain(&j1).is_empty() && drain(&m1).is_empty());

    // Nothing encoded: nobody gets anything.
    assert_eq!(s.hub.send(&all, &Payloads::new()), 0);
    for c in [&j1, &j2, &m1, &o1] {
        assert!(drain(c).is_empty());
    }
}

#[test]
fn frames_are_shared_not_copied() {
    let s = setup();
    let mut conns = Vec::new();
    for i in 0..40 {
        conns.push(connect(&s.hub, &format!("j{i}"), Some("u")));
        conns.push(connect_mp(&s.hub, &format!("m{i}"), Some("u")));
    }
    for c in &conns {
        assert!(s.hub.add_to_group(c.id(), &group("g")));
    }
    let json_bytes = Bytes::from(vec![b'j'; 4096]);
    let mp_bytes = Bytes::from(vec![b'm'; 4096]);
    let payloads = Payloads::new()
        .with(Protocol::Json, json_bytes.clone())
        .with(Protocol::MessagePack, mp_bytes.clone());

    let targets = [
        Target::All { excluded: vec![] },
        Target::User(uid("u")),
        group_target("g", &[], &[]),
        Target::Groups(vec![group("g")]),
        Target::Connections(conns.iter().map(|c| c.id().clone()).collect()),
    ];
    for target in &targets {
        assert_eq!(s.hub.send(target, &payloads), 80);
    }
    for c in &conns {
        let expected = match c.protocol().unwrap() {
            Protocol::Json => &json_bytes,
            _ => &mp_bytes,
        };
        let frames = drain(c);
        assert_eq!(frames.len(), targets.len());
        for frame in frames {
            assert_eq!(frame.as_ptr(), expected.as_ptr(), "{} got a copy", c.id());
            assert_eq!(frame.len(), expected.len());
        }
    }
}

#[test]
fn protocols_in_use_follow_connections() {
    let s = setup();
    assert_eq!(s.hub.protocols_in_use(), (false, false));
    connect_with(&s.hub, "o", None, Protocol::from_name("blazorpack"), BUDGET);
    assert_eq!(s.hub.protocols_in_use(), (false, false));
    connect(&s.hub, "j1", None);
    connect(&s.hub, "j2", None);
    assert_eq!(s.hub.protocols_in_use(), (true, false));
    connect_mp(&s.hub, "m", None);
    assert_eq!(s.hub.protocols_in_use(), (true, true));
    s.hub.remove_connection(&cid("j1")).unwrap();
    assert_eq!(s.hub.protocols_in_use(), (true, true));
    s.hub.remove_connection(&cid("j2")).unwrap();
    assert_eq!(s.hub.protocols_in_use(), (false, true));
    s.hub.remove_connection(&cid("m")).unwrap();
    s.hub.remove_connection(&cid("o")).unwrap();
    assert_eq!(s.hub.protocols_in_use(), (false, false));
    assert_eq!(s.hub.connection_count(), 0);
}

// ---------------------------------------------------------------------------------------------
// ordering

#[test]
fn per_sender_order_is_preserved_across_mixed_targets() {
    let s = setup();
    let a = connect(&s.hub, "a", Some("u"));
    let b = connect_mp(&s.hub, "b", Some("v"));
    let c = connect(&s.hub, "c", None);
    s.hub.add_to_group(&cid("a"), &group("g1"));
    s.hub.add_to_group(&cid("a"), &group("g2"));
    s.hub.add_to_group(&cid("b"), &group("g1"));

    let mut expected: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    let mut got: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    let conns = [("a", &a), ("b", &b), ("c", &c)];
    for i in 0..800 {
        let (target, recipients): (Target, &[&str]) = match i % 8 {
            0 => (Target::All { excluded: vec![] }, &["a", "b", "c"]),
            1 => (
                Target::All {
                    excluded: cids(&["c"]),
                },
                &["a", "b"],
            ),
            2 => (Target::Connection(cid("a")), &["a"]),
            3 => (Target::Connections(cids(&["a", "b", "a"])), &["a", "b"]),
            4 => (Target::User(uid("u")), &["a"]),
            5 => (Target::Users(vec![uid("u"), uid("v")]), &["a", "b"]),
            6 => (group_target("g1", &[], &[]), &["a", "b"]),
            _ => (Target::Groups(vec![group("g1"), group("g2")]), &["a", "b"]),
        };
        let text = format!("m{i}");
        let payloads = json(&text).with(Protocol::MessagePack, Bytes::from(text.clone()));
        assert_eq!(s.hub.send(&target, &payloads), recipients.len());
        for r in recipients {
            expected.entry(r).or_default().push(text.clone());
        }
        if i % 97 == 0 {
            for (id, conn) in conns {
                got.entry(id).or_default().extend(texts(conn));
            }
        }
    }
    for (id, conn) in conns {
        got.entry(id).or_default().extend(texts(conn));
    }
    assert_eq!(got, expected);
}

#[test]
fn per_sender_order_is_preserved_with_concurrent_senders_and_reader() {
    let s = setup();
    let a = connect(&s.hub, "a", Some("u"));
    let b = connect(&s.hub, "b", Some("v"));
    s.hub.add_to_group(&cid("a"), &group("g"));
    s.hub.add_to_group(&cid("b"), &group("g"));
    const SENDS: usize = 2000;

    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let a = a.clone();
        let done = done.clone();
        thread::spawn(move || {
            let mut frames = Vec::new();
            loop {
                let finished = done.load(Ordering::Acquire);
                let mut out = Vec::new();
                a.outbound().try_drain(&mut out);
                frames.extend(out);
                if finished {
                    break;
                }
                thread::yield_now();
            }
            frames
        })
    };
    let senders: Vec<_> = (0..2)
        .map(|sender| {
            let hub = s.hub.clone();
            thread::spawn(move || {
                for seq in 0..SENDS {
                    let target = match seq % 3 {
                        0 => Target::All { excluded: vec![] },
                        1 => group_target("g", &[], &[]),
                        _ => Target::User(uid("u")),
                    };
                    hub.send(&target, &json(&format!("{sender}:{seq}")));
                }
            })
        })
        .collect();
    for sender in senders {
        sender.join().unwrap();
    }
    done.store(true, Ordering::Release);
    let a_frames = reader.join().unwrap();

    let parse = |frames: &[Bytes]| {
        let mut per_sender: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for frame in frames {
            let text = std::str::from_utf8(frame).unwrap();
            let (sender, seq) = text.split_once(':').unwrap();
            per_sender
                .entry(sender.parse().unwrap())
                .or_default()
                .push(seq.parse().unwrap());
        }
        per_sender
    };
    let a_seen = parse(&a_frames);
    let b_seen = parse(&drain(&b));
    for sender in 0..2 {
        assert_eq!(a_seen[&sender], (0..SENDS).collect::<Vec<_>>());
        let b_expected: Vec<usize> = (0..SENDS).filter(|seq| seq % 3 != 2).collect();
        assert_eq!(b_seen[&sender], b_expected);
    }
}

// ---------------------------------------------------------------------------------------------
// group membership

#[test]
fn add_and_remove_group_membership() {
    let s = setup();
    let a = connect(&s.hub, "a", None);
    let b = connect(&s.hub, "b", None);
    let g = group("g");

    assert!(!s.hub.group_exists(&g));
    assert!(s.hub.add_to_group(&cid("a"), &g));
    assert!(s.hub.group_exists(&g));
    assert_eq!(a.groups(), vec![g.clone()]);
    // Adding twice is idempotent.
    assert!(s.hub.add_to_group(&cid("a"), &g));
    assert_eq!(a.groups(), vec![g.clone()]);
    assert_eq!(member_ids(&s.hub, "g"), vec!["a"]);
    assert_eq!(s.hub.send(&group_target("g", &[], &[]), &json("x")), 1);
    assert_eq!(drain(&a).len(), 1);

    assert!(s.hub.add_to_group(&cid("b"), &g));
    assert_eq!(member_ids(&s.hub, "g"), vec!["a", "b"]);

    assert!(s.hub.remove_from_group(&cid("a"), &g));
    assert!(a.groups().is_empty());
    assert!(s.hub.group_exists(&g));
    assert_eq!(member_ids(&s.hub, "g"), vec!["b"]);
    // Removing a non-member of a known connection still succeeds.
    assert!(s.hub.remove_from_group(&cid("a"), &g));
    assert!(s.hub.remove_from_group(&cid("a"), &group("never")));
    // An unknown connection is reported.
    assert!(!s.hub.remove_from_group(&cid("zz"), &g));
    assert!(!s.hub.add_to_group(&cid("zz"), &g));

    assert!(s.hub.remove_from_group(&cid("b"), &g));
    assert!(!s.hub.group_exists(&g));
    assert!(b.groups().is_empty());
    assert_eq!(s.hub.send(&group_target("g", &[], &[]), &json("x")), 0);
}

#[test]
fn remove_from_all_groups() {
    let s = setup();
    let a = connect(&s.hub, "a", None);
    let b = connect(&s.hub, "b", None);
    for g in ["g1", "g2", "g3"] {
        s.hub.add_to_group(&cid("a"), &group(g));
    }
    s.hub.add_to_group(&cid("b"), &group("g2"));
    assert_eq!(a.groups().len(), 3);

    s.hub.remove_from_all_groups(&cid("a"));
    assert!(a.groups().is_empty());
    assert!(!s.hub.group_exists(&group("g1")));
    assert!(s.hub.group_exists(&group("g2")));
    assert!(!s.hub.group_exists(&group("g3")));
    assert_eq!(b.groups(), vec![group("g2")]);
    // The connection is still there and may join again.
    assert!(s.hub.connection_exists(&cid("a")));
    assert!(s.hub.add_to_group(&cid("a"), &group("g1")));
    // Unknown connection: a no-op.
    s.hub.remove_from_all_groups(&cid("zz"));
}

#[test]
fn removing_a_connection_clears_every_index() {
    let s = setup();
    let a = connect(&s.hub, "a", Some("alice"));
    let other = connect(&s.hub, "o", Some("bob"));
    for g in ["solo1", "solo2", "shared"] {
        s.hub.add_to_group(&cid("a"), &group(g));
    }
    s.hub.add_to_group(&cid("o"), &group("shared"));
    assert!(s.hub.user_exists(&uid("alice")));

    let removed = s.hub.remove_connection(&cid("a")).expect("was registered");
    assert!(Arc::ptr_eq(&removed, &a));
    assert!(a.groups().is_empty());
    assert!(!s.hub.connection_exists(&cid("a")));
    assert!(s.hub.connection(&cid("a")).is_none());
    assert!(!s.hub.user_exists(&uid("alice")));
    assert!(!s.hub.group_exists(&group("solo1")));
    assert!(!s.hub.group_exists(&group("solo2")));
    assert!(s.hub.group_exists(&group("shared")));
    assert_eq!(member_ids(&s.hub, "shared"), vec!["o"]);
    assert_eq!(s.hub.connection_count(), 1);

    // Nothing reaches it any more.
    let targets = [
        Target::All { excluded: vec![] },
        Target::Connection(cid("a")),
        Target::User(uid("alice")),
        group_target("solo1", &[], &[]),
        Target::Groups(vec![group("shared"), group("solo2")]),
    ];
    for target in &targets {
        s.hub.send(target, &json("x"));
    }
    assert!(drain(&a).is_empty());
    assert_eq!(drain(&other).len(), 2);

    // A second removal finds nothing.
    assert!(s.hub.remove_connection(&cid("a")).is_none());
    assert_eq!(s.hub.connection_count(), 1);
}

#[test]
fn a_connection_that_left_cannot_join_groups() {
    let s = setup();
    let a = connect(&s.hub, "a", Some("alice"));
    s.hub.remove_connection(&cid("a")).unwrap();
    assert!(!s.hub.add_to_group(&cid("a"), &group("g")));
    assert!(!s.hub.group_exists(&group("g")));
    assert!(a.groups().is_empty());
    // A user-group join after it left does not reach it either.
    s.hub
        .user_join_group(&uid("alice"), &group("g"), None, Instant::now())
        .unwrap();
    assert!(!s.hub.group_exists(&group("g")));
    assert!(a.groups().is_empty());
}

#[test]
fn duplicate_connection_id_is_refused() {
    let s = setup();
    let first = connect(&s.hub, "a", Some("alice"));
    let dup = Arc::new(Connection::new(cid("a"), Some(uid("mallory")), BUDGET));
    dup.set_protocol(Protocol::Json);
    assert!(!s.hub.add_connection(dup.clone()));
    assert_eq!(s.hub.connection_count(), 1);
    assert!(!s.hub.user_exists(&uid("mallory")));
    assert!(Arc::ptr_eq(&s.hub.connection(&cid("a")).unwrap(), &first));
    s.hub.send(&Target::Connection(cid("a")), &json("x"));
    assert_eq!(drain(&first).len(), 1);
    assert!(drain(&dup).is_empty());
    // The protocol is set once.
    assert!(!first.set_protocol(Protocol::MessagePack));
    assert_eq!(first.protocol(), Some(&Protocol::Json));
}

#[test]
fn existence_checks() {
    let s = setup();
    assert!(!s.hub.connection_exists(&cid("a")));
    assert!(!s.hub.user_exists(&uid("alice")));
    assert!(!s.hub.group_exists(&group("g")));

    connect(&s.hub, "a", Some("alice"));
    connect(&s.hub, "a2", Some("alice"));
    connect(&s.hub, "n", None);
    assert!(s.hub.connection_exists(&cid("a")));
    assert!(s.hub.connection_exists(&cid("n")));
    assert!(!s.hub.connection_exists(&cid("A")));
    assert!(s.hub.user_exists(&uid("alice")));
    assert!(!s.hub.group_exists(&group("g")));
    s.hub.add_to_group(&cid("n"), &group("g"));
    assert!(s.hub.group_exists(&group("g")));

    s.hub.remove_connection(&cid("a"));
    assert!(s.hub.user_exists(&uid("alice")), "a2 is still connected");
    s.hub.remove_connection(&cid("a2"));
    assert!(!s.hub.user_exists(&uid("alice")));
    s.hub.remove_connection(&cid("n"));
    assert!(!s.hub.group_exists(&group("g")));
}

#[test]
fn group_members_paging() {
    let s = setup();
    // Insert in a scrambled order.
    let mut order: Vec<usize> = (0..25).collect();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i + 1));
    }
    for i in order {
        let id = format!("m{i:02}");
        let user = (i % 2 == 0).then(|| format!("u{}", i % 3));
        connect(&s.hub, &id, user.as_deref());
        s.hub.add_to_group(&cid(&id), &group("g"));
    }
    connect(&s.hub, "outsider", None);
    let g = group("g");
    let ids = |page: &[GroupMember]| -> Vec<String> {
        page.iter().map(|m| m.connection.to_string()).collect()
    };
    let range = |from: usize, to: usize| -> Vec<String> {
        (from..to).map(|i| format!("m{i:02}")).collect()
    };

    let page1 = s.hub.group_members(&g, None, 10);
    assert_eq!(ids(&page1), range(0, 10));
    let page2 = s
        .hub
        .group_members(&g, Some(page1.last().unwrap().connection.as_str()), 10);
    assert_eq!(ids(&page2), range(10, 20));
    let page3 = s
        .hub
        .group_members(&g, Some(page2.last().unwrap().connection.as_str()), 10);
    assert_eq!(ids(&page3), range(20, 25));
    assert!(s.hub.group_members(&g, Some("m24"), 10).is_empty());

    // `after` need not be a member id.
    assert_eq!(ids(&s.hub.group_members(&g, Some("m05x"), 3)), range(6, 9));
    assert_eq!(ids(&s.hub.group_members(&g, Some(""), 100)), range(0, 25));
    assert!(s.hub.group_members(&g, None, 0).is_empty());
    assert!(s.hub.group_members(&group("none"), None, 10).is_empty());

    // Users are reported.
    for member in s.hub.group_members(&g, None, 100) {
        let i: usize = member.connection.as_str()[1..].parse().unwrap();
        let expected = (i & 1 == 0).then(|| uid(&format!("u{}", i % 3)));
        assert_eq!(member.user, expected, "{}", member.connection);
    }

    // Removed members disappear from the listing.
    s.hub.remove_connection(&cid("m03"));
    s.hub.remove_from_group(&cid("m04"), &g);
    assert_eq!(
        ids(&s.hub.group_members(&g, Some("m01"), 3)),
        vec!["m02", "m05", "m06"]
    );
}

// ---------------------------------------------------------------------------------------------
// user groups

#[test]
fn user_join_group_adds_current_and_later_connections() {
    let s = setup();
    let a1 = connect(&s.hub, "a1", Some("alice"));
    let b1 = connect(&s.hub, "b1", Some("bob"));
    s.hub
        .user_join_group(&uid("alice"), &group("g"), None, Instant::now())
        .unwrap();
    assert!(in_group(&a1, "g"));
    assert!(!in_group(&b1, "g"));
    assert!(s.hub.group_exists(&group("g")));

    let a2 = connect_mp(&s.hub, "a2", Some("alice"));
    assert!(in_group(&a2, "g"));
    assert!(s
        .hub
        .user_in_group(&uid("alice"), &group("g"), Instant::now()));
    assert!(!s
        .hub
        .user_in_group(&uid("bob"), &group("g"), Instant::now()));

    let payloads = json("j").with(Protocol::MessagePack, Bytes::from_static(b"m"));
    assert_eq!(s.hub.send(&group_target("g", &[], &[]), &payloads), 2);
    assert_eq!(reached(&[a1, a2, b1]), strings(&["a1", "a2"]));

    // Joining twice changes nothing.
    s.hub
        .user_join_group(&uid("alice"), &group("g"), None, Instant::now())
        .unwrap();
    assert_eq!(member_ids(&s.hub, "g"), vec!["a1", "a2"]);
}

#[test]
fn user_group_ttl_expires_on_sweep() {
    let s = setup();
    let t0 = Instant::now();
    let ttl = Duration::from_secs(3600);
    let a1 = connect(&s.hub, "a1", Some("alice"));
    let direct = connect(&s.hub, "d", Some("dave"));
    let c1 = connect(&s.hub, "c1", Some("carol"));
    s.hub.add_to_group(&cid("d"), &group("g"));
    s.hub
        .user_join_group(&uid("alice"), &group("g"), Some(ttl), t0)
        .unwrap();
    s.hub
        .user_join_group(&uid("carol"), &group("g"), None, t0)
        .unwrap();
    let a2 = connect(&s.hub, "a2", Some("alice"));
    assert!(in_group(&a1, "g") && in_group(&a2, "g"));
    s.interest.take();

    s.router.sweep(t0 + ttl - Duration::from_millis(1));
    assert!(in_group(&a1, "g") && in_group(&a2, "g"));
    assert!(s.hub.user_in_group(
        &uid("alice"),
        &group("g"),
        t0 + ttl - Duration::from_millis(1)
    ));

    s.router.sweep(t0 + ttl);
    assert!(!in_group(&a1, "g"));
    assert!(!in_group(&a2, "g"));
    assert!(!s.hub.user_in_group(&uid("alice"), &group("g"), t0 + ttl));
    assert!(!s
        .hub
        .user_in_group(&uid("alice"), &group("g"), Instant::now()));
    // Other members are untouched.
    assert!(in_group(&direct, "g"));
    assert!(in_group(&c1, "g"));
    assert_eq!(member_ids(&s.hub, "g"), vec!["c1", "d"]);
    assert!(s.interest.take().is_empty(), "the group still has members");

    // A later connection of the user does not join.
    let a3 = connect(&s.hub, "a3", Some("alice"));
    assert!(a3.groups().is_empty());
}

#[test]
fn user_group_ttl_expiry_removes_the_group_when_it_empties() {
    let s = setup();
    let t0 = Instant::now();
    let ttl = Duration::from_secs(60);
    connect(&s.hub, "a1", Some("alice"));
    s.hub
        .user_join_group(&uid("alice"), &group("g"), Some(ttl), t0)
        .unwrap();
    s.interest.take();
    s.router.sweep(t0 + ttl + Duration::from_secs(1));
    assert!(!s.hub.group_exists(&group("g")));
    assert_eq!(
        s.interest.take(),
        vec![(Channel::Group(hub_name("chat"), group("g")), false)]
    );
    // Sweeping again is a no-op.
    s.router.sweep(t0 + ttl + Duration::from_secs(2));
    assert!(s.interest.take().is_empty());
}

#[test]
fn expired_but_unswept_membership_is_not_honoured() {
    let s = setup();
    let Some(past) = Instant::now().checked_sub(Duration::from_secs(10)) else {
        return; // the clock is too close to its origin to build an instant in the past
    };
    let a1 = connect(&s.hub, "a1", Some("alice"));
    s.hub
        .user_join_group(
            &uid("alice"),
            &group("g"),
            Some(Duration::from_secs(1)),
            past,
        )
        .unwrap();
    // Current connections join regardless; the record is already stale.
    assert!(in_group(&a1, "g"));
    let a2 = connect(&s.hub, "a2", Some("alice"));
    assert!(a2.groups().is_empty());
    s.router.sweep(Instant::now());
    assert!(a1.groups().is_empty());
    assert!(!s
        .hub
        .user_in_group(&uid("alice"), &group("g"), Instant::now()));
}

#[test]
fn ttl_zero_adds_only_current_connections() {
    let s = setup();
    let a1 = connect(&s.hub, "a1", Some("alice"));
    s.hub
        .user_join_group(
            &uid("alice"),
            &group("g"),
            Some(Duration::ZERO),
            Instant::now(),
        )
        .unwrap();
    assert!(in_group(&a1, "g"));
    let a2 = connect(&s.hub, "a2", Some("alice"));
    assert!(a2.groups().is_empty(), "ttl 0 records no membership");
    // In the group by its connection only.
    assert!(s
        .hub
        .user_in_group(&uid("alice"), &group("g"), Instant::now()));
    s.router.sweep(Instant::now() + Duration::from_secs(3600));
    assert!(in_group(&a1, "g"), "nothing to expire");
    s.hub.remove_from_group(&cid("a1"), &group("g"));
    assert!(!s
        .hub
        .user_in_group(&uid("alice"), &group("g"), Instant::now()));

    // A user without connections: nothing happens at all.
    s.hub
        .user_join_group(
            &uid("nobody"),
            &group("h"),
            Some(Duration::ZERO),
            Instant::now(),
        )
        .unwrap();
    assert!(!s.hub.group_exists(&group("h")));
    assert!(!s
        .hub
        .user_in_group(&uid("nobody"), &group("h"), Instant::now()));
    let n = connect(&s.hub, "n", Some("nobody"));
    assert!(n.groups().is_empty());
}

#[test]
fn user_leave_one_group() {
    let s = setup();
    let a1 = connect(&s.hub, "a1", Some("alice"));
    let b1 = connect(&s.hub, "b1", Some("bob"));
    let now = Instant::now();
    s.hub
        .user_join_group(&uid("alice"), &group("g1"), None, now)
        .unwrap();
    s.hub
        .user_join_group(&uid("alice"), &group("g2"), None, now)
        .unwrap();
    s.hub
        .user_join_group(&uid("bob"), &group("g1"), None, now)
        .unwrap();

    s.hub.user_leave_group(&uid("alice"), Some(&group("g1")));
    assert_eq!(a1.groups(), vec![group("g2")]);
    assert_eq!(b1.groups(), vec![group("g1")]);
    assert!(!s.hub.user_in_group(&uid("alice"), &group("g1"), now));
    assert!(s.hub.user_in_group(&uid("alice"), &group("g2"), now));
    assert!(s.hub.user_in_group(&uid("bob"), &group("g1"), now));

    // The record is gone: a new connection joins only g2.
    let a2 = connect(&s.hub, "a2", Some("alice"));
    assert_eq!(a2.groups(), vec![group("g2")]);

    // Leaving a group the user was never in is harmless.
    s.hub.user_leave_group(&uid("alice"), Some(&group("never")));
    s.hub.user_leave_group(&uid("ghost"), Some(&group("g2")));
    assert_eq!(member_ids(&s.hub, "g2"), vec!["a1", "a2"]);
}

#[test]
fn user_leave_one_group_also_removes_direct_memberships() {
    let s = setup();
    let a1 = connect(&s.hub, "a1", Some("alice"));
    s.hub.add_to_group(&cid("a1"), &group("g"));
    s.hub.user_leave_group(&uid("alice"), Some(&group("g")));
    assert!(a1.groups().is_empty());
    assert!(!s.hub.group_exists(&group("g")));
}

#[test]
fn user_leave_all_groups() {
    let s = setup();
    let a1 = connect(&s.hub, "a1", Some("alice"));
    let b1 = connect(&s.hub, "b1", Some("bob"));
    let now = Instant::now();
    s.hub
        .user_join_group(&uid("alice"), &group("g1"), None, now)
        .unwrap();
    s.hub
        .user_join_group(
            &uid("alice"),
            &group("g2"),
            Some(Duration::from_secs(600)),
            now,
        )
        .unwrap();
    s.hub
        .user_join_group(&uid("alice"), &group("g3"), Some(Duration::ZERO), now)
        .unwrap();
    s.hub.add_to_group(&cid("a1"), &group("g4"));
    s.hub
        .user_join_group(&uid("bob"), &group("g1"), None, now)
        .unwrap();
    assert_eq!(a1.groups().len(), 4);

    s.hub.user_leave_group(&uid("alice"), None);
    assert!(a1.groups().is_empty());
    for g in ["g1", "g2", "g3", "g4"] {
        assert!(!s.hub.user_in_group(&uid("alice"), &group(g), now), "{g}");
    }
    for g in ["g2", "g3", "g4"] {
        assert!(!s.hub.group_exists(&group(g)), "{g}");
    }
    assert_eq!(b1.groups(), vec![group("g1")]);
    assert_eq!(member_ids(&s.hub, "g1"), vec!["b1"]);
    let a2 = connect(&s.hub, "a2", Some("alice"));
    assert!(a2.groups().is_empty());

    // A user with records but no connections.
    s.hub
        .user_join_group(&uid("zoe"), &group("z"), None, now)
        .unwrap();
    assert!(s.hub.user_in_group(&uid("zoe"), &group("z"), now));
    s.hub.user_leave_group(&uid("zoe"), None);
    assert!(!s.hub.user_in_group(&uid("zoe"), &group("z"), now));
    let z1 = connect(&s.hub, "z1", Some("zoe"));
    assert!(z1.groups().is_empty());
}

#[test]
fn user_in_group_by_record_or_by_connection() {
    let s = setup();
    let t0 = Instant::now();
    // By record, without any connection.
    s.hub
        .user_join_group(&uid("alice"), &group("g"), None, t0)
        .unwrap();
    assert!(s.hub.user_in_group(&uid("alice"), &group("g"), t0));
    assert!(!s.hub.user_exists(&uid("alice")));
    assert!(!s.hub.group_exists(&group("g")));

    // By record, bounded by its ttl.
    s.hub
        .user_join_group(
            &uid("alice"),
            &group("t"),
            Some(Duration::from_secs(60)),
            t0,
        )
        .unwrap();
    assert!(s
        .hub
        .user_in_group(&uid("alice"), &group("t"), t0 + Duration::from_secs(59)));
    assert!(!s
        .hub
        .user_in_group(&uid("alice"), &group("t"), t0 + Duration::from_secs(60)));

    // By connection, without any record.
    connect(&s.hub, "b1", Some("bob"));
    connect(&s.hub, "b2", Some("bob"));
    assert!(!s.hub.user_in_group(&uid("bob"), &group("h"), t0));
    s.hub.add_to_group(&cid("b2"), &group("h"));
    assert!(s.hub.user_in_group(&uid("bob"), &group("h"), t0));
    s.hub.remove_connection(&cid("b2"));
    assert!(!s.hub.user_in_group(&uid("bob"), &group("h"), t0));

    // Neither.
    assert!(!s.hub.user_in_group(&uid("carol"), &group("g"), t0));
    assert!(!s.hub.user_in_group(&uid("alice"), &group("other"), t0));
}

#[test]
fn ttl_less_memberships_are_capped_at_100_per_user() {
    let s = setup();
    let a1 = connect(&s.hub, "a1", Some("alice"));
    let now = Instant::now();
    let g = |i: usize| group(&format!("n{i:03}"));
    // Memberships with a ttl do not count against the cap.
    for i in 0..5 {
        s.hub
            .user_join_group(
                &uid("alice"),
                &group(&format!("t{i}")),
                Some(Duration::from_secs(3600)),
                now,
            )
            .unwrap();
    }
    for i in 0..100 {
        s.hub
            .user_join_group(&uid("alice"), &g(i), None, now)
            .unwrap();
    }
    assert_eq!(a1.groups().len(), 105);
    for i in 0..100 {
        assert!(s.hub.user_in_group(&uid("alice"), &g(i), now));
    }
    s.interest.take();

    // The 101st evicts the oldest.
    s.hub
        .user_join_group(&uid("alice"), &g(100), None, now)
        .unwrap();
    assert!(!s.hub.user_in_group(&uid("alice"), &g(0), now));
    assert!(!in_group(&a1, "n000"));
    assert!(!s.hub.group_exists(&g(0)));
    for i in 1..=100 {
        assert!(s.hub.user_in_group(&uid("alice"), &g(i), now), "n{i:03}");
    }
    for i in 0..5 {
        assert!(in_group(&a1, &format!("t{i}")));
    }
    assert_eq!(a1.groups().len(), 105);
    let events = s.interest.take();
    assert!(events.contains(&(Channel::Group(hub_name("chat"), g(0)), false)));
    assert!(events.contains(&(Channel::Group(hub_name("chat"), g(100)), true)));

    // Joining again refreshes a membership: the next eviction takes n002, not n001.
    s.hub
        .user_join_group(&uid("alice"), &g(1), None, now)
        .unwrap();
    s.hub
        .user_join_group(&uid("alice"), &g(101), None, now)
        .unwrap();
    assert!(s.hub.user_in_group(&uid("alice"), &g(1), now));
    assert!(!s.hub.user_in_group(&uid("alice"), &g(2), now));
    assert!(!in_group(&a1, "n002"));

    // A later connection joins exactly the surviving memberships.
    let a2 = connect(&s.hub, "a2", Some("alice"));
    let survivors: BTreeSet<GroupName> = a1.groups().into_iter().collect();
    assert_eq!(a2.groups().into_iter().collect::<BTreeSet<_>>(), survivors);
    assert_eq!(survivors.len(), 105);

    // Another user's cap is independent.
    connect(&s.hub, "b1", Some("bob"));
    s.hub
        .user_join_group(&uid("bob"), &g(0), None, now)
        .unwrap();
    assert!(s.hub.user_in_group(&uid("bob"), &g(0), now));
}

// ---------------------------------------------------------------------------------------------
// interest

#[test]
fn interest_in_the_hub_channel() {
    let s = setup();
    let ch = Channel::Hub(hub_name("chat"));
    connect(&s.hub, "a", None);
    assert_eq!(s.interest.take(), vec![(ch.clone(), true)]);
    connect(&s.hub, "b", None);
    assert!(s.interest.take().is_empty());
    s.hub.remove_connection(&cid("a"));
    assert!(s.interest.take().is_empty());
    s.hub.remove_connection(&cid("b"));
    assert_eq!(s.interest.take(), vec![(ch.clone(), false)]);
    s.hub.remove_connection(&cid("b"));
    assert!(s.interest.take().is_empty());
    connect(&s.hub, "c", None);
    assert_eq!(s.interest.take(), vec![(ch, true)]);

    // Another hub has its own channel; creating a hub alone reports nothing.
    let other = s.router.hub(&hub_name("other"));
    assert!(s.interest.take().is_empty());
    connect(&other, "x", None);
    assert_eq!(
        s.interest.take(),
        vec![(Channel::Hub(hub_name("other")), true)]
    );
}

/// A connection's own channel is wanted from the moment it is registered until it is
/// removed, so connection-addressed messages reach its node from any node.
#[test]
fn interest_in_connection_channels() {
    let s = setup();
    let a = Channel::Connection(hub_name("chat"), cid("a"));
    connect(&s.hub, "a", None);
    assert!(s.interest.take_all().contains(&(a.clone(), true)));
    // Another connection's arrival says nothing about this one.
    connect(&s.hub, "b", None);
    assert!(!s.interest.take_all().iter().any(|(c, _)| *c == a));
    s.hub.remove_connection(&cid("a"));
    assert_eq!(s.interest.take_all(), vec![(a, false)]);
    s.hub.remove_connection(&cid("a"));
    assert!(s.interest.take_all().is_empty());
}

#[test]
fn interest_in_user_channels() {
    let s = setup();
    let alice = Channel::User(hub_name("chat"), uid("alice"));
    connect(&s.hub, "a1", Some("alice"));
    assert_eq!(
        s.interest.take(),
        vec![
            (Channel::Hub(hub_name("chat")), true),
            (alice.clone(), true)
        ]
    );
    connect(&s.hub, "a2", Some("alice"));
    connect(&s.hub, "anon", None);
    assert!(s.interest.take().is_empty());
    s.hub.remove_connection(&cid("a1"));
    assert!(s.interest.take().is_empty());
    s.hub.remove_connection(&cid("a2"));
    assert_eq!(s.interest.take(), vec![(alice.clone(), false)]);
    connect(&s.hub, "a3", Some("alice"));
    assert_eq!(s.interest.take(), vec![(alice, true)]);
}

#[test]
fn interest_in_group_channels() {
    let s = setup();
    let ch = Channel::Group(hub_name("chat"), group("g"));
    connect(&s.hub, "a", None);
    connect(&s.hub, "b", None);
    s.interest.take();

    s.hub.add_to_group(&cid("a"), &group("g"));
    assert_eq!(s.interest.take(), vec![(ch.clone(), true)]);
    s.hub.add_to_group(&cid("b"), &group("g"));
    s.hub.add_to_group(&cid("a"), &group("g"));
    assert!(s.interest.take().is_empty());
    s.hub.remove_from_group(&cid("a"), &group("g"));
    s.hub.remove_from_group(&cid("a"), &group("g"));
    assert!(s.interest.take().is_empty());
    s.hub.remove_from_all_groups(&cid("b"));
    assert_eq!(s.interest.take(), vec![(ch.clone(), false)]);
    s.hub.remove_from_group(&cid("b"), &group("g"));
    assert!(s.interest.take().is_empty());

    // Through user groups.
    connect(&s.hub, "u1", Some("u"));
    s.interest.take();
    s.hub
        .user_join_group(&uid("u"), &group("g"), None, Instant::now())
        .unwrap();
    assert_eq!(s.interest.take(), vec![(ch.clone(), true)]);
    s.hub.user_leave_group(&uid("u"), Some(&group("g")));
    assert_eq!(s.interest.take(), vec![(ch, false)]);
}

#[test]
fn removing_a_connection_reports_each_last_member_once() {
    let s = setup();
    connect(&s.hub, "a", Some("alice"));
    connect(&s.hub, "o", None);
    for g in ["g1", "g2", "shared"] {
        s.hub.add_to_group(&cid("a"), &group(g));
    }
    s.hub.add_to_group(&cid("o"), &group("shared"));
    s.interest.take();

    s.hub.remove_connection(&cid("a"));
    let events: BTreeSet<_> = s.interest.take().into_iter().collect();
    let expected: BTreeSet<_> = [
        (Channel::Group(hub_name("chat"), group("g1")), false),
        (Channel::Group(hub_name("chat"), group("g2")), false),
        (Channel::User(hub_name("chat"), uid("alice")), false),
    ]
    .into_iter()
    .collect();
    assert_eq!(events, expected);

    s.hub.remove_connection(&cid("o"));
    let events: BTreeSet<_> = s.interest.take().into_iter().collect();
    let expected: BTreeSet<_> = [
        (Channel::Group(hub_name("chat"), group("shared")), false),
        (Channel::Hub(hub_name("chat")), false),
    ]
    .into_iter()
    .collect();
    assert_eq!(events, expected);
    assert!(s.interest.net().values().all(|n| *n == 0));
}

/// Interest changes must be reported in the order they happen: a "last member left" must never
/// be reported after a later "first member arrived" for the same channel, or the node would
/// unsubscribe while it has a member (`BackplaneInterest` in crates/node/src/node.rs forwards
/// each change to subscribe/unsubscribe).
#[test]
fn interest_changes_of_one_channel_are_reported_in_order() {
    struct Gate {
        events: Mutex<Vec<(Channel, bool)>>,
        entered: Mutex<Option<mpsc::Sender<()>>>,
        release: Mutex<Option<mpsc::Receiver<()>>>,
    }
    impl Interest for Gate {
        fn changed(&self, channel: Channel, interested: bool) {
            if matches!(channel, Channel::Hub(_)) && !interested {
                let entered = self.entered.lock().take();
                if let Some(entered) = entered {
                    // Hold the first "last member left" until the main thread says so.
                    entered.send(()).unwrap();
                    let release = self.release.lock().take().unwrap();
                    let _ = release.recv_timeout(Duration::from_secs(10));
                }
            }
            self.events.lock().push((channel, interested));
        }
    }
    let (entered_tx, entered_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel();
    let gate = Arc::new(Gate {
        events: Mutex::new(Vec::new()),
        entered: Mutex::new(Some(entered_tx)),
        release: Mutex::new(Some(release_rx)),
    });
    let router = Router::new(gate.clone());
    let hub = router.hub(&hub_name("chat"));

    connect(&hub, "b", None);
    let leaving = {
        let hub = hub.clone();
        thread::spawn(move || hub.remove_connection(&cid("b")))
    };
    entered_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("remove_connection reported the last member");
    // While that report is in flight, a new first member arrives (it must wait its turn).
    let arriving = {
        let hub = hub.clone();
        thread::spawn(move || {
            connect(&hub, "a", None);
        })
    };
    thread::sleep(Duration::from_millis(200));
    release_tx.send(()).unwrap();
    leaving.join().unwrap();
    arriving.join().unwrap();

    assert_eq!(hub.connection_count(), 1);
    let events = gate.events.lock().clone();
    let last = events
        .iter()
        .rev()
        .find(|(c, _)| matches!(c, Channel::Hub(_)))
        .unwrap();
    assert!(
        last.1,
        "the hub has a connection but the last change reported was 'not interested': {events:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Router::apply

#[test]
fn apply_send() {
    let s = setup();
    let a = connect(&s.hub, "a", None);
    let b = connect_mp(&s.hub, "b", None);
    let payloads = json("j").with(Protocol::MessagePack, Bytes::from_static(b"m"));
    let n = s.router.apply(&Message::Send {
        hub: hub_name("chat"),
        target: Target::All { excluded: vec![] },
        payloads: payloads.clone(),
    });
    assert_eq!(n, 2);
    assert_eq!(texts(&a), vec!["j"]);
    assert_eq!(texts(&b), vec!["m"]);

    let n = s.router.apply(&Message::Send {
        hub: hub_name("CHAT"),
        target: Target::Connection(cid("b")),
        payloads: payloads.clone(),
    });
    assert_eq!(n, 1);
    assert_eq!(texts(&b), vec!["m"]);

    // An unknown hub is not created by a send.
    let n = s.router.apply(&Message::Send {
        hub: hub_name("nowhere"),
        target: Target::All { excluded: vec![] },
        payloads,
    });
    assert_eq!(n, 0);
    assert!(s.router.find_hub(&hub_name("nowhere")).is_none());
}

#[test]
fn apply_group_membership_commands() {
    let s = setup();
    let a = connect(&s.hub, "a", None);
    let add = |g: &str| Message::AddToGroup {
        hub: hub_name("chat"),
        connection: cid("a"),
        group: group(g),
    };
    assert_eq!(s.router.apply(&add("g1")), 0);
    assert_eq!(a.groups(), vec![group("g1")]);

    let remove = |g: Option<&str>| Message::RemoveFromGroup {
        hub: hub_name("chat"),
        connection: cid("a"),
        group: g.map(group),
    };
    assert_eq!(s.router.apply(&remove(Some("g1"))), 0);
    assert!(a.groups().is_empty());
    assert!(!s.hub.group_exists(&group("g1")));

    for g in ["g1", "g2", "g3"] {
        s.router.apply(&add(g));
    }
    assert_eq!(a.groups().len(), 3);
    s.router.apply(&remove(Some("g2")));
    assert_eq!(a.groups(), vec![group("g1"), group("g3")]);
    s.router.apply(&remove(None));
    assert!(a.groups().is_empty());
    for g in ["g1", "g2", "g3"] {
        assert!(!s.hub.group_exists(&group(g)));
    }

    // Unknown hub or connection: nothing happens, no hub is created.
    s.router.apply(&Message::AddToGroup {
        hub: hub_name("nowhere"),
        connection: cid("a"),
        group: group("g"),
    });
    s.router.apply(&Message::RemoveFromGroup {
        hub: hub_name("nowhere"),
        connection: cid("a"),
        group: None,
    });
    assert!(s.router.find_hub(&hub_name("nowhere")).is_none());
    s.router.apply(&Message::AddToGroup {
        hub: hub_name("chat"),
        connection: cid("zz"),
        group: group("g"),
    });
    assert!(!s.hub.group_exists(&group("g")));
}

#[test]
fn apply_user_join_group_creates_the_hub() {
    let interest = Arc::new(Recorder::default());
    let router = Router::new(interest.clone());
    let name = hub_name("fresh");
    assert!(router.find_hub(&name).is_none());
    let n = router.apply(&Message::UserJoinGroup {
        hub: name.clone(),
        user: uid("alice"),
        group: group("g"),
        ttl: None,
    });
    assert_eq!(n, 0);
    let hub = router.find_hub(&name).expect("created by the join");
    assert_eq!(hub.connection_count(), 0);
    assert!(interest.take().is_empty());

    // The membership waits for the user's connections.
    let a1 = connect(&hub, "a1", Some("alice"));
    assert_eq!(a1.groups(), vec![group("g")]);

    // With a ttl, it expires on sweep.
    router.apply(&Message::UserJoinGroup {
        hub: name.clone(),
        user: uid("alice"),
        group: group("t"),
        ttl: Some(Duration::from_secs(30)),
    });
    assert!(in_group(&a1, "t"));
    router.sweep(Instant::now() + Duration::from_secs(31));
    assert!(!in_group(&a1, "t"));
    assert!(in_group(&a1, "g"));

    // ttl 0: current connections only.
    router.apply(&Message::UserJoinGroup {
        hub: name.clone(),
        user: uid("alice"),
        group: group("z"),
        ttl: Some(Duration::ZERO),
    });
    assert!(in_group(&a1, "z"));
    let a2 = connect(&hub, "a2", Some("alice"));
    assert_eq!(a2.groups(), vec![group("g")]);
}

#[test]
fn apply_user_leave_group() {
    let s = setup();
    let a1 = connect(&s.hub, "a1", Some("alice"));
    for g in ["g1", "g2", "g3"] {
        s.router.apply(&Message::UserJoinGroup {
            hub: hub_name("chat"),
            user: uid("alice"),
            group: group(g),
            ttl: None,
        });
    }
    assert_eq!(a1.groups().len(), 3);
    let n = s.router.apply(&Message::UserLeaveGroup {
        hub: hub_name("chat"),
        user: uid("alice"),
        group: Some(group("g2")),
    });
    assert_eq!(n, 0);
    assert_eq!(a1.groups(), vec![group("g1"), group("g3")]);
    s.router.apply(&Message::UserLeaveGroup {
        hub: hub_name("chat"),
        user: uid("alice"),
        group: None,
    });
    assert!(a1.groups().is_empty());
    let a2 = connect(&s.hub, "a2", Some("alice"));
    assert!(a2.groups().is_empty());

    // Unknown hub: not created.
    s.router.apply(&Message::UserLeaveGroup {
        hub: hub_name("nowhere"),
        user: uid("alice"),
        group: None,
    });
    assert!(s.router.find_hub(&hub_name("nowhere")).is_none());
}

#[test]
fn apply_close_with_target_and_exclusions() {
    let s = setup();
    let conns: Vec<_> = ["a", "b", "c", "d"]
        .iter()
        .map(|id| connect(&s.hub, id, Some(&format!("user-{id}"))))
        .collect();
    s.hub
        .send(&Target::All { excluded: vec![] }, &json("before"));
    let reason = CloseReason::ClosedByApi(Some("bye".into()));
    let n = s.router.apply(&Message::Close {
        hub: hub_name("chat"),
        target: Target::All {
            excluded: cids(&["a"]),
        },
        excluded: cids(&["b"]),
        reason: reason.clone(),
    });
    assert_eq!(n, 2);

    for c in &conns[..2] {
        assert!(!c.outbound().is_closing(), "{}", c.id());
    }
    for c in &conns[2..] {
        assert!(c.outbound().is_closing());
        assert_eq!(c.outbound().close_reason(), Some(reason.clone()));
        let mut out = Vec::new();
        assert_eq!(c.outbound().try_drain(&mut out), Some(Batch::Frames));
        assert_eq!(out, vec![Bytes::from_static(b"before")]);
        out.clear();
        assert_eq!(
            c.outbound().try_drain(&mut out),
            Some(Batch::Close(reason.clone()))
        );
        assert!(out.is_empty());
        // Asking is all the router does: the transport removes the connection.
        assert!(s.hub.connection_exists(c.id()));
    }
    // Later frames to closing connections are dropped.
    assert_eq!(
        s.hub
            .send(&Target::All { excluded: vec![] }, &json("after")),
        2
    );
    assert_eq!(conns[2].outbound().dropped_frames(), 1);
    assert_eq!(texts(&conns[0]), vec!["before", "after"]);

    // An unknown hub closes nothing.
    let n = s.router.apply(&Message::Close {
        hub: hub_name("nowhere"),
        target: Target::All { excluded: vec![] },
        excluded: vec![],
        reason: reason.clone(),
    });
    assert_eq!(n, 0);
    assert!(s.router.find_hub(&hub_name("nowhere")).is_none());
}

#[test]
fn apply_close_group_and_user_targets() {
    let s = setup();
    let conns: Vec<_> = [
        ("a1", "alice"),
        ("a2", "alice"),
        ("b1", "bob"),
        ("c1", "carol"),
        ("d1", "dave"),
    ]
    .iter()
    .map(|(id, user)| connect(&s.hub, id, Some(user)))
    .collect();
    for id in ["a1", "a2", "b1", "c1"] {
        s.hub.add_to_group(&cid(id), &group("g"));
    }
    let close = |target: Target, excluded: &[&str]| {
        s.router.apply(&Message::Close {
            hub: hub_name("chat"),
            target,
            excluded: cids(excluded),
            reason: CloseReason::ServiceShutdown,
        })
    };
    // Group with its own exclusions plus the command's.
    let n = close(group_target("g", &["b1"], &["alice"]), &["c1"]);
    assert_eq!(n, 0);
    let n = close(group_target("g", &[], &["alice"]), &["c1"]);
    assert_eq!(n, 1);
    let closing = |c: &Arc<Connection>| c.outbound().is_closing();
    assert_eq!(
        conns
            .iter()
            .filter(|c| closing(c))
            .map(|c| c.id().as_str())
            .collect::<Vec<_>>(),
        vec!["b1"]
    );
    // User target with an excluded connection.
    assert_eq!(close(Target::User(uid("alice")), &["a2"]), 1);
    assert!(closing(&conns[0]) && !closing(&conns[1]));
    // Connection target; closing twice keeps the first reason.
    conns[4].close(CloseReason::ClientClosed);
    assert_eq!(close(Target::Connection(cid("d1")), &[]), 1);
    assert_eq!(
        conns[4].outbound().close_reason(),
        Some(CloseReason::ClientClosed)
    );
    // Many excluded ids.
    let many: Vec<String> = (0..12).map(|i| format!("x{i}")).collect();
    let mut excluded: Vec<&str> = many.iter().map(String::as_str).collect();
    excluded.push("a2");
    assert_eq!(
        close(Target::Connections(cids(&["a2", "c1"])), &excluded),
        1
    );
    assert!(closing(&conns[3]) && !closing(&conns[1]));
}

// ---------------------------------------------------------------------------------------------
// outbound

#[test]
fn outbound_budget_cuts_off_a_slow_consumer() {
    let q = Outbound::new(10);
    assert!(q.push(Bytes::from_static(b"12345")));
    assert!(q.push(Bytes::from_static(b"67890")));
    assert_eq!(q.pending_bytes(), 10, "exactly the budget is allowed");
    assert!(!q.push(Bytes::from_static(b"x")));
    assert_eq!(q.dropped_frames(), 3);
    assert_eq!(
        q.close_reason(),
        Some(CloseReason::SlowConsumer {
            pending_bytes: 11,
            budget: 10
        })
    );
    assert_eq!(q.pending_bytes(), 0);
    let mut out = Vec::new();
    assert_eq!(
        q.try_drain(&mut out),
        Some(Batch::Close(CloseReason::SlowConsumer {
            pending_bytes: 11,
            budget: 10
        }))
    );
    assert!(out.is_empty(), "the backlog was dropped");
    assert!(!q.push(Bytes::from_static(b"y")));
    assert_eq!(q.dropped_frames(), 4);
}

#[test]
fn outbound_draining_frees_the_budget() {
    let q = Outbound::new(10);
    let mut out = Vec::new();
    for round in 0..5 {
        assert!(q.push(Bytes::from(vec![round; 8])));
        assert_eq!(q.pending_bytes(), 8);
        assert_eq!(q.try_drain(&mut out), Some(Batch::Frames));
        assert_eq!(q.pending_bytes(), 0);
    }
    assert_eq!(out.len(), 5);
    assert_eq!(q.try_drain(&mut out), None);
    assert_eq!(q.dropped_frames(), 0);
    assert!(!q.is_closing());
}

#[test]
fn outbound_close_comes_after_queued_frames() {
    let q = Outbound::new(100);
    q.push(Bytes::from_static(b"a"));
    q.push(Bytes::from_static(b"b"));
    q.close(CloseReason::ClientTimeout);
    q.close(CloseReason::ServiceShutdown);
    assert_eq!(q.close_reason(), Some(CloseReason::ClientTimeout));
    assert!(!q.push(Bytes::from_static(b"c")));
    assert_eq!(q.dropped_frames(), 1);
    let mut out = Vec::new();
    assert_eq!(q.try_drain(&mut out), Some(Batch::Frames));
    assert_eq!(
        out,
        vec![Bytes::from_static(b"a"), Bytes::from_static(b"b")]
    );
    out.clear();
    for _ in 0..2 {
        assert_eq!(
            q.try_drain(&mut out),
            Some(Batch::Close(CloseReason::ClientTimeout))
        );
    }
    assert!(out.is_empty());
}

#[test]
fn outbound_oversize_frame_on_empty_queue_is_allowed() {
    let q = Outbound::new(10);
    let big = Bytes::from(vec![7u8; 50]);
    assert!(q.push(big.clone()));
    assert_eq!(q.pending_bytes(), 50);
    let mut out = Vec::new();
    assert_eq!(q.try_drain(&mut out), Some(Batch::Frames));
    assert_eq!(out[0].as_ptr(), big.as_ptr());
    // Again after draining.
    assert!(q.push(big.clone()));
    // But nothing may queue behind it.
    assert!(!q.push(Bytes::from_static(b"1")));
    assert_eq!(q.dropped_frames(), 2);
    assert!(matches!(
        q.close_reason(),
        Some(CloseReason::SlowConsumer { budget: 10, .. })
    ));
}

#[test]
fn slow_consumer_does_not_affect_other_recipients() {
    let s = setup();
    let slow = connect_with(&s.hub, "slow", None, Protocol::Json, 16);
    let fast = connect(&s.hub, "fast", None);
    let all = Target::All { excluded: vec![] };
    let frame = json("0123456789");
    assert_eq!(s.hub.send(&all, &frame), 2);
    assert_eq!(s.hub.send(&all, &frame), 1);
    assert_eq!(s.hub.send(&all, &frame), 1);
    assert_eq!(slow.outbound().dropped_frames(), 3);
    let mut out = Vec::new();
    assert_eq!(
        slow.outbound().try_drain(&mut out),
        Some(Batch::Close(CloseReason::SlowConsumer {
            pending_bytes: 20,
            budget: 16
        }))
    );
    assert!(out.is_empty());
    assert_eq!(drain(&fast).len(), 3);
}

#[tokio::test]
async fn next_batch_wakes_on_push_and_on_close() {
    let connection = Arc::new(Connection::new(cid("w"), None, BUDGET));
    let writer = {
        let connection = connection.clone();
        tokio::spawn(async move {
            let mut batches = Vec::new();
            loop {
                let mut out = Vec::new();
                match connection.outbound().next_batch(&mut out).await {
                    Batch::Frames => batches.push(out),
                    Batch::Close(reason) => return (batches, reason),
                    Batch::Interrupted => panic!("nothing interrupts here"),
                }
            }
        })
    };
    tokio::task::yield_now().await;
    connection.outbound().push(Bytes::from_static(b"1"));
    tokio::time::sleep(Duration::from_millis(20)).await;
    connection.outbound().push(Bytes::from_static(b"2"));
    connection.close(CloseReason::Inactive);
    let (batches, reason) = tokio::time::timeout(Duration::from_secs(10), writer)
        .await
        .expect("writer finished")
        .unwrap();
    assert_eq!(reason, CloseReason::Inactive);
    let frames: Vec<Bytes> = batches.into_iter().flatten().collect();
    assert_eq!(
        frames,
        vec![Bytes::from_static(b"1"), Bytes::from_static(b"2")]
    );
}

// ---------------------------------------------------------------------------------------------
// concurrency

/// Four workers add and remove connections and change group and user-group memberships
/// while another thread broadcasts. Each worker only touches its own connections and users
/// (groups are shared), so every index can be checked while the others keep running.
#[test]
fn concurrent_membership_changes_and_broadcasts_leave_consistent_indices() {
    const WORKERS: usize = 4;
    const STEPS: usize = 20_000;
    let s = setup();
    let groups: Arc<Vec<GroupName>> = Arc::new((0..6).map(|i| group(&format!("g{i}"))).collect());
    let users_of =
        |t: usize| -> Vec<UserId> { (0..2).map(|k| uid(&format!("u{t}-{k}"))).collect() };
    let all_users: Vec<UserId> = (0..WORKERS).flat_map(users_of).collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    let stop = Arc::new(AtomicBool::new(false));

    let broadcaster = {
        let hub = s.hub.clone();
        let stop = stop.clone();
        let groups = groups.clone();
        let users = all_users.clone();
        thread::spawn(move || {
            let payloads = json("b").with(Protocol::MessagePack, Bytes::from_static(b"m"));
            let mut rounds = 0usize;
            while !stop.load(Ordering::Relaxed) {
                hub.send(&Target::All { excluded: vec![] }, &payloads);
                let g = &groups[rounds % groups.len()];
                hub.send(
                    &Target::Group {
                        group: g.clone(),
                        excluded: vec![],
                        excluded_users: vec![users[0].clone()],
                    },
                    &payloads,
                );
                hub.send(&Target::Groups(groups.to_vec()), &payloads);
                hub.send(&Target::Users(users.clone()), &payloads);
                let members = hub.group_members(g, None, usize::MAX);
                assert!(members
                    .windows(2)
                    .all(|w| w[0].connection < w[1].connection));
                rounds += 1;
            }
            rounds
        })
    };

    let workers: Vec<_> = (0..WORKERS)
        .map(|t| {
            let hub = s.hub.clone();
            let groups = groups.clone();
            let users = users_of(t);
            thread::spawn(move || {
                let mut rng = Rng(0x2545_f491_4f6c_dd1d ^ ((t as u64 + 1) * 0x9e37_79b9));
                let mut live: Vec<Arc<Connection>> = Vec::new();
                let mut gone: Vec<Arc<Connection>> = Vec::new();
                let leave = |hub: &Hub, c: Arc<Connection>, gone: &mut Vec<Arc<Connection>>| {
                    let removed = hub.remove_connection(c.id()).expect("registered");
                    assert!(Arc::ptr_eq(&removed, &c));
                    assert!(c.groups().is_empty());
                    assert!(!hub.add_to_group(c.id(), &group("g0")));
                    assert!(c.groups().is_empty());
                    assert!(!hub.connection_exists(c.id()));
                    gone.push(c);
                };
                for step in 0..STEPS {
                    if Instant::now() > deadline {
                        break;
                    }
                    let g = &groups[rng.below(groups.len())];
                    let u = &users[rng.below(users.len())];
                    match rng.below(10) {
                        0 | 1 if live.len() < 6 => {
                            let user = match rng.below(3) {
                                0 => None,
                                n => Some(users[n - 1].clone()),
                            };
                            let c = Arc::new(Connection::new(
                                cid(&format!("w{t}-{step}")),
                                user,
                                64 * 1024,
                            ));
                            c.set_protocol(if step % 2 == 0 {
                                Protocol::Json
                            } else {
                                Protocol::MessagePack
                            });
                            assert!(hub.add_connection(c.clone()));
                            live.push(c);
                        }
                        0..=2 if !live.is_empty() => {
                            let c = live.swap_remove(rng.below(live.len()));
                            leave(&hub, c, &mut gone);
                        }
                        3 | 4 if !live.is_empty() => {
                            let c = &live[rng.below(live.len())];
                            assert!(hub.add_to_group(c.id(), g));
                            assert!(c.groups().contains(g));
                        }
                        5 if !live.is_empty() => {
                            let c = &live[rng.below(live.len())];
                            assert!(hub.remove_from_group(c.id(), g));
                            assert!(!c.groups().contains(g));
                        }
                        6 if !live.is_empty() => {
                            let c = &live[rng.below(live.len())];
                            hub.remove_from_all_groups(c.id());
                            assert!(c.groups().is_empty());
                        }
                        7 => {
                            let ttl = match rng.below(3) {
                                0 => None,
                                1 => Some(Duration::ZERO),
                                _ => Some(Duration::from_secs(3600)),
                            };
                            hub.user_join_group(u, g, ttl, Instant::now()).unwrap();
                            let connected = live.iter().any(|c| c.user() == Some(u));
                            if ttl != Some(Duration::ZERO) || connected {
                                assert!(hub.user_in_group(u, g, Instant::now()));
                            }
                        }
                        8 => {
                            let which = (rng.below(3) > 0).then_some(g);
                            hub.user_leave_group(u, which);
                            assert!(!hub.user_in_group(u, g, Instant::now()));
                        }
                        _ => {
                            if let Some(c) = live.first() {
                                let mut out = Vec::new();
                                c.outbound().try_drain(&mut out);
                            }
                        }
                    }
                    if step % 8 == 0 {
                        // Only this worker changes these connections, so the indices must
                        // agree with each connection's own list right now.
                        for c in &live {
                            let own = c.groups();
                            for g in groups.iter() {
                                let listed = hub
                                    .group_members(g, None, usize::MAX)
                                    .iter()
                                    .any(|m| &m.connection == c.id());
                                assert_eq!(own.contains(g), listed, "{} in {g}", c.id());
                            }
                            assert!(hub.connection_exists(c.id()));
                        }
                        for u in &users {
                            let connected = live.iter().any(|c| c.user() == Some(u));
                            assert_eq!(hub.user_exists(u), connected, "{u}");
                        }
                    }
                }
                for c in std::mem::take(&mut live) {
                    leave(&hub, c, &mut gone);
                }
                gone
            })
        })
        .collect();

    let mut gone = Vec::new();
    for worker in workers {
        gone.extend(worker.join().expect("worker panicked"));
    }
    stop.store(true, Ordering::Relaxed);
    let rounds = broadcaster.join().expect("broadcaster panicked");
    assert!(rounds > 0);
    assert!(!gone.is_empty());

    // Memberships recorded for users outlive connections; clear them too.
    for u in &all_users {
        s.hub.user_leave_group(u, None);
    }

    assert_eq!(s.hub.connection_count(), 0);
    assert_eq!(s.router.connection_count(), 0);
    assert_eq!(s.hub.protocols_in_use(), (false, false));
    for g in groups.iter() {
        assert!(!s.hub.group_exists(g), "{g} still exists");
        assert!(s.hub.group_members(g, None, usize::MAX).is_empty());
    }
    for u in &all_users {
        assert!(!s.hub.user_exists(u), "{u} still indexed");
        for g in groups.iter() {
            assert!(!s.hub.user_in_group(u, g, Instant::now()));
        }
    }
    for c in &gone {
        assert!(c.groups().is_empty(), "{} kept groups", c.id());
        assert!(!s.hub.connection_exists(c.id()));
    }
    assert_eq!(s.hub.send(&Target::All { excluded: vec![] }, &json("x")), 0);

    let net = s.interest.net();
    assert!(net.contains_key(&Channel::Hub(hub_name("chat"))));
    for (channel, n) in &net {
        assert_eq!(*n, 0, "interest in {channel:?} is unbalanced");
    }
}

/// `remove_from_group` updates the connection's own list and the group index in two separate
/// critical sections. A concurrent `add_to_group` of the same connection (two REST calls, or
/// a user-group join) landing between them leaves the connection listing the group while the
/// index no longer has it, and reports the group's first member a second time.
#[test]
fn concurrent_add_and_remove_of_one_connection_keep_indices_consistent() {
    /// Two threads meet at each step by spinning, so they start the racing calls within
    /// nanoseconds of each other; `stop` releases a thread whose partner is gone.
    struct Rendezvous {
        arrived: AtomicUsize,
        stop: AtomicBool,
    }
    impl Rendezvous {
        fn wait(&self, step: usize) -> bool {
            self.arrived.fetch_add(1, Ordering::AcqRel);
            let mut spins = 0u32;
            while self.arrived.load(Ordering::Acquire) < 2 * step {
                if self.stop.load(Ordering::Acquire) {
                    return false;
                }
                spins += 1;
                if spins & 1023 == 0 {
                    thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            }
            true
        }
    }

    let s = setup();
    let c = connect(&s.hub, "c", Some("u"));
    let g = group("g");
    let channel = Channel::Group(hub_name("chat"), g.clone());
    let meet = Arc::new(Rendezvous {
        arrived: AtomicUsize::new(0),
        stop: AtomicBool::new(false),
    });
    let adder = {
        let hub = s.hub.clone();
        let meet = meet.clone();
        let g = g.clone();
        thread::spawn(move || {
            let mut rng = Rng(0x1234_5678_9abc_def1);
            let mut step = 0;
            loop {
                step += 1;
                if !meet.wait(step) {
                    return;
                }
                // Vary the offset so some attempts land between the two critical sections.
                for _ in 0..rng.below(64) {
                    std::hint::spin_loop();
                }
                hub.add_to_group(&cid("c"), &g);
                step += 1;
                if !meet.wait(step) {
                    return;
                }
            }
        })
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut failure = None;
    let mut step = 0;
    let mut rounds = 0u64;
    while Instant::now() < deadline {
        rounds += 1;
        s.hub.add_to_group(&cid("c"), &g);
        step += 1;
        meet.wait(step);
        s.hub.remove_from_group(&cid("c"), &g);
        step += 1;
        meet.wait(step);
        // The adder now waits for the next step: the state is quiescent.
        let own = c.groups().contains(&g);
        let listed = member_ids(&s.hub, "g") == vec!["c"];
        let net = s.interest.net().get(&channel).copied().unwrap_or(0);
        if own != listed || net != i64::from(s.hub.group_exists(&g)) {
            failure = Some(format!(
                "round {rounds}: own list says {own}, group index says {listed}, \
                 net interest {net}"
            ));
            break;
        }
    }
    meet.stop.store(true, Ordering::Release);
    adder.join().unwrap();
    if let Some(failure) = failure {
        // Once desynchronised, adding again is a silent no-op: the group stays unreachable.
        let added = s.hub.add_to_group(&cid("c"), &g);
        let reached = s.hub.send(&group_target("g", &[], &[]), &json("x"));
        panic!("{failure}; add_to_group again returns {added}, a group send reaches {reached}");
    }
}

// ---------------------------------------------------------------------------------------------
// the user-group table copied between nodes

#[test]
fn a_copied_listing_does_not_undo_changes_heard_during_the_copy() {
    let source = Router::new(Arc::new(Recorder::default()));
    let hub_name = HubName::new("chat", None).unwrap();
    for (user, group_name) in [("alice", "a"), ("alice", "b"), ("bob", "a"), ("carol", "c")] {
        source
            .hub(&hub_name)
            .user_join_group(&uid(user), &group(group_name), None, Instant::now())
            .unwrap();
    }
    let listing = source.user_groups(None, 100);
    assert_eq!(listing.len(), 4);
    // Paged in order of hub, user, group.
    let first = source.user_groups(None, 2);
    let last = first.last().unwrap();
    let rest = source.user_groups(
        Some(&(last.hub.clone(), last.user.clone(), last.group.clone())),
        100,
    );
    assert_eq!([first, rest].concat(), listing);

    let copy = Router::new(Arc::new(Recorder::default()));
    copy.begin_copy();
    // Heard while copying: alice left b, bob left everything.
    for leave in [
        Message::UserLeaveGroup {
            hub: hub_name.clone(),
            user: uid("alice"),
            group: Some(group("b")),
        },
        Message::UserLeaveGroup {
            hub: hub_name.clone(),
            user: uid("bob"),
            group: None,
        },
    ] {
        copy.apply(&leave);
    }
    copy.restore_user_groups(&listing);
    copy.end_copy();
    let kept: Vec<(String, String)> = copy
        .user_groups(None, 100)
        .into_iter()
        .map(|e| (e.user.as_str().to_string(), e.group.as_str().to_string()))
        .collect();
    assert_eq!(
        kept,
        vec![
            ("alice".to_string(), "a".to_string()),
            ("carol".to_string(), "c".to_string())
        ]
    );
}

#[test]
fn a_ttl_beyond_reason_is_capped_not_a_panic() {
    let router = Router::new(Arc::new(Recorder::default()));
    let hub_name = HubName::new("chat", None).unwrap();
    router.apply(&Message::UserJoinGroup {
        hub: hub_name.clone(),
        user: uid("alice"),
        group: group("g"),
        ttl: Some(Duration::MAX),
    });
    assert!(router
        .hub(&hub_name)
        .user_in_group(&uid("alice"), &group("g"), Instant::now()));
}

#[test]
fn group_limits_refuse_joins_past_them_and_expired_memberships_do_not_count() {
    let router = Router::with_limits(
        Arc::new(Recorder::default()),
        GroupLimits {
            per_connection: 2,
            per_user: 2,
        },
    );
    let hub = router.hub(&hub_name("chat"));
    let a = connect(&hub, "a", Some("alice"));
    assert_eq!(hub.join_group(a.id(), &group("g1")), GroupJoin::Joined);
    assert_eq!(hub.join_group(a.id(), &group("g2")), GroupJoin::Joined);
    assert_eq!(hub.join_group(a.id(), &group("g3")), GroupJoin::Full(2));
    assert_eq!(
        hub.join_group(a.id(), &group("g1")),
        GroupJoin::Joined,
        "already in it"
    );
    assert_eq!(
        hub.join_group(&cid("nobody"), &group("g1")),
        GroupJoin::NotHere
    );
    assert!(!hub.group_exists(&group("g3")));
    assert!(hub.remove_from_group(a.id(), &group("g1")));
    assert_eq!(hub.join_group(a.id(), &group("g3")), GroupJoin::Joined);

    let t0 = Instant::now();
    let bob = uid("bob");
    hub.user_join_group(&bob, &group("u1"), Some(Duration::from_secs(1)), t0)
        .unwrap();
    hub.user_join_group(&bob, &group("u2"), None, t0).unwrap();
    assert_eq!(hub.user_join_group(&bob, &group("u3"), None, t0), Err(2));
    assert!(!hub.user_in_group(&bob, &group("u3"), t0));
    hub.user_join_group(&bob, &group("u2"), Some(Duration::from_secs(60)), t0)
        .unwrap();
    // Once u1's ttl has passed it no longer counts, swept or not.
    let later = t0 + Duration::from_secs(2);
    hub.user_join_group(&bob, &group("u3"), None, later)
        .unwrap();
    // ttl 0 adds only the user's current connections and records nothing: no limit.
    hub.user_join_group(&bob, &group("u4"), Some(Duration::ZERO), later)
        .unwrap();
}

#[test]
fn traffic_counts_each_delivery_on_its_connection_and_the_fan_out_once_on_the_hub() {
    let s = setup();
    let a = connect(&s.hub, "a", Some("u1"));
    let b = connect(&s.hub, "b", Some("u1"));
    let c = connect_mp(&s.hub, "c", None);
    assert!(s.hub.add_to_group(&cid("a"), &group("g")));
    assert!(s.hub.add_to_group(&cid("c"), &group("g")));
    assert_eq!((s.hub.user_count(), s.hub.group_count()), (1, 1));
    let big = "x".repeat(3000);
    let payloads = Payloads::new()
        .with(Protocol::Json, Bytes::from(big.clone()))
        .with(Protocol::MessagePack, Bytes::from_static(b"mp"));
    let all = Target::All { excluded: vec![] };
    assert_eq!(s.hub.send(&all, &payloads), 3);
    assert_eq!(s.hub.send(&Target::User(uid("u1")), &json("hi")), 2);
    let totals = s.hub.traffic().snapshot();
    assert_eq!(totals.messages_out, 5);
    assert_eq!(totals.bytes_out, 3000 * 2 + 2 + 2 * 2);
    // 3,000 bytes are two 2 KB units; anything smaller one.
    assert_eq!(totals.units_out, 2 * 2 + 1 + 2);
    assert_eq!(totals.messages_in, 0);
    let a_totals = a.traffic().snapshot();
    assert_eq!((a_totals.messages_out, a_totals.units_out), (2, 3));
    assert_eq!(c.traffic().snapshot().bytes_out, 2);
    assert_eq!(b.queued_bytes(), 3002);

    let mut read = TrafficTotals::default();
    read.add_in(10);
    read.add_in(5000);
    s.hub.received(&a, &read);
    assert_eq!(s.hub.traffic().snapshot().units_in, 4);
    assert_eq!(a.traffic().snapshot().messages_in, 2);
    let mut one = TrafficTotals::default();
    one.add_out(1);
    assert!(s.hub.deliver(&c, Bytes::from_static(b"x"), &one));
    assert_eq!(s.hub.traffic().snapshot().messages_out, 6);
    c.close(CloseReason::ClientClosed);
    assert!(!s.hub.deliver(&c, Bytes::from_static(b"x"), &one));
    assert_eq!(c.traffic().snapshot().messages_out, 2);
}
