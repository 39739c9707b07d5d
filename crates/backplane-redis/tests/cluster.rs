//! The Redis backplane on a real Redis Cluster of three masters: hubs spread over the shards
//! (each hub on one), many hubs at once keep each hub's order and deliver once, and a wrong
//! or unreachable cluster is a clear error.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use switchyard_backplane::conformance::Recorder;
use switchyard_backplane::Backplane;
use switchyard_backplane_redis::{RedisBackplane, RedisSettings};
use switchyard_core::{Channel, GroupName, HubName, Message, Payloads, Protocol, Target};
use switchyard_testkit::{RedisCluster, RedisServer};

/// Longer than the conformance suite's bound: a slot move makes nodes refresh and resubscribe.
const WAIT: Duration = Duration::from_secs(10);

fn hub(n: usize) -> HubName {
    HubName::new(&format!("hub{n}"), None).unwrap()
}

fn numbered(hub: &HubName, n: usize) -> Arc<Message> {
    Arc::new(Message::Send {
        hub: hub.clone(),
        target: Target::All { excluded: vec![] },
        payloads: Payloads::new().with(Protocol::Json, Bytes::from(n.to_string())),
    })
}

fn connect(runtime: &tokio::runtime::Runtime, url: String, prefix: &str) -> Arc<RedisBackplane> {
    let mut settings = RedisSettings::new(url);
    settings.prefix = prefix.into();
    runtime.block_on(RedisBackplane::connect(settings)).unwrap()
}

/// The fence of the "exactly once" checks: a marker published on each of `channels` after
/// everything else, waited for; a channel keeps its order (on any shard), so whatever was
/// published before on them and was going to arrive has arrived. Returns what came, the
/// markers left out. (A sleep would let a late copy through.)
fn fence(far: &RedisBackplane, recorder: &Recorder, channels: &[Channel]) -> Vec<Arc<Message>> {
    let marker = |k: usize| {
        Arc::new(Message::Send {
            hub: hub(0),
            target: Target::All { excluded: vec![] },
            payloads: Payloads::new().with(Protocol::Json, Bytes::from(format!("fence-{k}"))),
        })
    };
    let is_marker = |m: &Arc<Message>| {
        matches!(&**m, Message::Send { payloads, .. }
            if payloads.get(&Protocol::Json).is_some_and(|p| p.starts_with(b"fence-")))
    };
    for (k, channel) in channels.iter().enumerate() {
        far.publish(std::slice::from_ref(channel), marker(k));
    }
    let deadline = Instant::now() + WAIT;
    loop {
        let got = recorder.received();
        if got.iter().filter(|m| is_marker(m)).count() == channels.len() {
            return got.into_iter().filter(|m| !is_marker(m)).collect();
        }
        assert!(
            Instant::now() < deadline,
            "the fence's markers did not all arrive"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// `PUBSUB SHARDCHANNELS` of each master.
fn shard_channels(cluster: &RedisCluster) -> Vec<HashSet<String>> {
    cluster
        .masters()
        .iter()
        .map(|m| {
            m.cli(&["PUBSUB", "SHARDCHANNELS", "sy:*"])
                .lines()
                .map(str::to_string)
                .collect()
        })
        .collect()
}

#[test]
fn hubs_spread_over_shards_and_each_hub_stays_on_one() {
    let cluster = RedisCluster::start();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let backplane = connect(&runtime, cluster.url(), "sy");
    let node = "n1".to_string();
    backplane.attach(&node, Arc::new(Recorder::default()));
    const HUBS: usize = 12;
    for n in 0..HUBS {
        backplane.subscribe(&node, &Channel::Hub(hub(n)));
        let group = GroupName::new("g").unwrap();
        backplane.subscribe(&node, &Channel::Group(hub(n), group));
    }
    runtime.block_on(backplane.barrier(&node));
    let shards = shard_channels(&cluster);
    assert_eq!(shards.len(), 3);
    let mut used = HashSet::new();
    for n in 0..HUBS {
        let hub = hub(n);
        let holding: Vec<usize> = (0..shards.len())
            .filter(|&s| {
                shards[s]
                    .iter()
                    .any(|c| c.ends_with(&format!(":h:{hub}")) || c.contains(&format!(":g:{hub}:")))
            })
            .collect();
        assert_eq!(
            holding.len(),
            1,
            "{hub} is on shards {holding:?}: {shards:?}"
        );
        let both = shards[holding[0]]
            .iter()
            .filter(|c| c.ends_with(&format!(":h:{hub}")) || c.ends_with(&format!(":g:{hub}:g")))
            .count();
        assert_eq!(both, 2, "{hub}'s hub and group channels share a shard");
        used.insert(holding[0]);
    }
    assert!(used.len() >= 2, "{HUBS} hubs all landed on one shard");
    // The node's own channel and `All` are heard on every shard (one name per tag).
    for shard in &shards {
        assert!(shard.iter().any(|c| c.ends_with(":n:n1")), "{shard:?}");
        assert!(shard.iter().any(|c| c.ends_with(":all")), "{shard:?}");
    }
    let total: usize = shards.iter().map(|s| s.len()).sum();
    assert_eq!(total, 2 * HUBS + 2 * 128, "one subscription per name");
    // Detaching drops every subscription on every shard.
    backplane.detach(&node);
    let deadline = Instant::now() + Duration::from_secs(5);
    while shard_channels(&cluster).iter().any(|s| !s.is_empty()) {
        assert!(Instant::now() < deadline, "subscriptions left after detach");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One publisher, many hubs (so several shards), messages on several channels at once and on
/// the receiving node's own channel: each hub's messages arrive once each and in order.
#[test]
fn many_hubs_keep_their_order_and_deliver_once() {
    let cluster = RedisCluster::start();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let near = connect(&runtime, cluster.url(), "sy");
    let far = connect(&runtime, cluster.url(), "sy");
    let node = "a".to_string();
    let recorder = Arc::new(Recorder::default());
    near.attach(&node, recorder.clone());
    const HUBS: usize = 8;
    let group = |n| Channel::Group(hub(n), GroupName::new("g").unwrap());
    for n in 0..HUBS {
        near.subscribe(&node, &Channel::Hub(hub(n)));
        near.subscribe(&node, &group(n));
    }
    runtime.block_on(near.barrier(&node));
    const EACH: usize = 200;
    for i in 0..EACH {
        for n in 0..HUBS {
            let channels = match i % 3 {
                0 => vec![Channel::Hub(hub(n)), group(n)],
                1 => vec![group(n), Channel::Node(node.clone())],
                _ => vec![Channel::Node(node.clone())],
            };
            far.publish(&channels, numbered(&hub(n), i));
        }
    }
    recorder.wait_for_within(EACH * HUBS, WAIT);
    let mut channels: Vec<Channel> = (0..HUBS)
        .flat_map(|n| [Channel::Hub(hub(n)), group(n)])
        .collect();
    channels.push(Channel::Node(node.clone()));
    let got = fence(&far, &recorder, &channels);
    assert_eq!(got.len(), EACH * HUBS, "one delivery per message");
    for n in 0..HUBS {
        let hub = hub(n);
        let of_hub: Vec<&Arc<Message>> = got.iter().filter(|m| *m.hub() == hub).collect();
        assert_eq!(of_hub.len(), EACH, "{hub}");
        for (i, message) in of_hub.iter().enumerate() {
            assert_eq!(
                ***message,
                *numbered(&hub, i),
                "{hub}: message {i} out of order"
            );
        }
    }
}

#[test]
fn wrong_or_unreachable_clusters_are_clear_errors() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let error = |url: String| {
        runtime
            .block_on(RedisBackplane::connect(RedisSettings::new(url)))
            .err()
            .expect("connect must fail")
            .to_string()
    };
    for url in [
        "redis-cluster://",
        "redis-cluster://h:1,,h:2",
        "redis-cluster://h:1/3",
    ] {
        let message = error(url.to_string());
        assert!(message.contains("not valid"), "{url}: {message}");
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let message = error(format!("redis-cluster://:secret@127.0.0.1:{port}"));
    assert!(message.contains("cannot reach redis"), "{message}");
    assert!(!message.contains("secret"), "password leaked: {message}");
    let single = RedisServer::start();
    let message = error(format!("redis-cluster://127.0.0.1:{}", single.port));
    assert!(message.contains("not in cluster mode"), "{message}");
    let mut settings = RedisSettings::new(format!("redis-cluster://127.0.0.1:{}", single.port));
    settings.prefix = "a{b}".into();
    let message = runtime
        .block_on(RedisBackplane::connect(settings))
        .err()
        .unwrap()
        .to_string();
    assert!(message.contains("prefix"), "{message}");
}

/// A hub's slot moves to another master (resharding): the subscriber, told by Redis that its
/// subscription is gone, follows it to the new master, and the publisher, redirected with
/// MOVED, publishes there; nothing is delivered twice.
#[test]
fn a_moved_slot_is_followed_by_subscribers_and_publishers() {
    let cluster = RedisCluster::start();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let near = connect(&runtime, cluster.url(), "sy");
    let far = connect(&runtime, cluster.url(), "sy");
    let node = "a".to_string();
    let recorder = Arc::new(Recorder::default());
    near.attach(&node, recorder.clone());
    let hub = hub(0);
    let channel = Channel::Hub(hub.clone());
    near.subscribe(&node, &channel);
    runtime.block_on(near.barrier(&node));
    far.publish(std::slice::from_ref(&channel), numbered(&hub, 0));
    assert_eq!(recorder.wait_for_within(1, WAIT).len(), 1);

    // Where the hub's channel lives, and a master to move its slot to.
    let masters = cluster.masters();
    let suffix = format!(":h:{hub}");
    let (from, name) = masters
        .iter()
        .find_map(|m| {
            let channels = m.cli(&["PUBSUB", "SHARDCHANNELS", "sy:*"]);
            let name = channels.lines().find(|c| c.ends_with(&suffix))?.to_string();
            Some((*m, name))
        })
        .expect("the hub's channel is subscribed somewhere");
    let to = *masters.iter().find(|m| m.port != from.port).unwrap();
    let slot = from.cli(&["CLUSTER", "KEYSLOT", &name]);
    let from_id = from.cli(&["CLUSTER", "MYID"]);
    let to_id = to.cli(&["CLUSTER", "MYID"]);
    assert_eq!(
        to.cli(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from_id]),
        "OK"
    );
    assert_eq!(
        from.cli(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id]),
        "OK"
    );
    for master in [to, from] {
        assert_eq!(
            master.cli(&["CLUSTER", "SETSLOT", &slot, "NODE", &to_id]),
            "OK"
        );
    }
    for other in masters
        .iter()
        .filter(|m| m.port != from.port && m.port != to.port)
    {
        assert_eq!(
            other.cli(&["CLUSTER", "SETSLOT", &slot, "NODE", &to_id]),
            "OK"
        );
    }

    // The subscriber follows the slot.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !to
        .cli(&["PUBSUB", "SHARDCHANNELS", "sy:*"])
        .lines()
        .any(|c| c == name)
    {
        assert!(Instant::now() < deadline, "the subscription did not move");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The publisher follows the redirection.
    for n in 1..=20 {
        far.publish(std::slice::from_ref(&channel), numbered(&hub, n));
    }
    recorder.wait_for_within(21, WAIT);
    let got = fence(&far, &recorder, std::slice::from_ref(&channel));
    assert_eq!(got.len(), 21, "{got:?}");
    for (n, message) in got.iter().enumerate() {
        assert_eq!(**message, *numbered(&hub, n), "message {n}");
    }
    assert_eq!(
        far.stats()
            .publish_errors
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
}
