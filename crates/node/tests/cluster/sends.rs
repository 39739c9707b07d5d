//! Three real nodes, each with its own Redis backplane (as three processes would have), one
//! real `redis-server` (and again on a real Redis Cluster of three masters): sends and
//! commands issued on one node reach clients on the others.

use super::redis_node;

use serde_json::json;
use switchyard_core::{ConnectionId, GroupName, HubName, Target, UserId};
use switchyard_hub_protocol::{Format, HubMessage};
use switchyard_node::command::Command;
use switchyard_node::Config;
use switchyard_testkit::{Msg, RawClient, RedisCluster, RedisServer, TestServer};

const HUB: &str = "chat";

async fn cluster(url: &str, prefix: &str) -> Vec<TestServer> {
    let mut nodes = Vec::new();
    for name in ["n1", "n2", "n3"] {
        nodes.push(redis_node(url, prefix, name, Config::default()).await);
    }
    nodes
}

async fn client(node: &TestServer, user: &str, format: Format) -> (RawClient, String) {
    let (mut client, id) = RawClient::start(node, HUB, &node.token(HUB, Some(user)), format).await;
    client.handshake_result().await.expect("handshake");
    (client, id)
}

async fn settle(nodes: &[TestServer]) {
    for node in nodes {
        node.node.cluster().barrier().await;
    }
}

fn hub() -> HubName {
    HubName::new(HUB, None).unwrap()
}

fn send(node: &TestServer, target: Target, text: &str) {
    let message = Msg::invocation("m", &[json!(text)]);
    node.node
        .executor()
        .send(&hub(), target, message_payloads(&message));
}

fn message_payloads(message: &Msg) -> switchyard_core::Payloads {
    switchyard_core::Payloads::new()
        .with(switchyard_core::Protocol::Json, message.json.clone())
        .with(
            switchyard_core::Protocol::MessagePack,
            message.msgpack.clone(),
        )
}

async fn expect(client: &mut RawClient, text: &str) {
    client.expect(&Msg::invocation("m", &[json!(text)])).await;
}

fn c(id: &str) -> ConnectionId {
    ConnectionId::new(id).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_send_reaches_clients_on_other_nodes() {
    let redis = RedisServer::start();
    every_send_reaches_clients_on_other_nodes_through(&redis.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_send_reaches_clients_on_other_nodes_on_a_redis_cluster() {
    let redis = RedisCluster::start();
    every_send_reaches_clients_on_other_nodes_through(&redis.url()).await;
}

async fn every_send_reaches_clients_on_other_nodes_through(url: &str) {
    let nodes = cluster(url, "sends").await;
    let (mut a, a_id) = client(&nodes[0], "u1", Format::Json).await;
    let (mut b, b_id) = client(&nodes[1], "u2", Format::MessagePack).await;
    let (mut c3, _c3_id) = client(&nodes[2], "u1", Format::Json).await;
    settle(&nodes).await;

    // A broadcast from n3 reaches every node.
    send(&nodes[2], Target::All { excluded: vec![] }, "all");
    for client in [&mut a, &mut b, &mut c3] {
        expect(client, "all").await;
    }
    // Broadcast with an exclusion that lives on another node.
    send(
        &nodes[2],
        Target::All {
            excluded: vec![c(&b_id)],
        },
        "all-but-b",
    );
    send(&nodes[0], Target::Connection(c(&b_id)), "b-only");
    expect(&mut a, "all-but-b").await;
    expect(&mut c3, "all-but-b").await;
    expect(&mut b, "b-only").await;

    // A user whose connections are on two nodes, from the third.
    send(&nodes[1], Target::User(UserId::new("u1").unwrap()), "u1");
    expect(&mut a, "u1").await;
    expect(&mut c3, "u1").await;
    send(
        &nodes[1],
        Target::Users(vec![UserId::new("u1").unwrap(), UserId::new("u2").unwrap()]),
        "users",
    );
    for client in [&mut a, &mut b, &mut c3] {
        expect(client, "users").await;
    }

    // Connections on two other nodes, from n3.
    send(
        &nodes[2],
        Target::Connections(vec![c(&a_id), c(&b_id)]),
        "conns",
    );
    expect(&mut a, "conns").await;
    expect(&mut b, "conns").await;

    // Group membership added on the member's node; sends from the others.
    let executor = nodes[0].node.executor();
    executor
        .execute(&hub(), Command::add_to_group(&a_id, "g").unwrap())
        .await
        .unwrap();
    nodes[1]
        .node
        .executor()
        .execute(&hub(), Command::add_to_group(&b_id, "g").unwrap())
        .await
        .unwrap();
    settle(&nodes).await;
    send(
        &nodes[2],
        Target::Groups(vec![GroupName::new("g").unwrap()]),
        "g",
    );
    expect(&mut a, "g").await;
    expect(&mut b, "g").await;

    // A user-group membership made on n2 holds on every node.
    nodes[1]
        .node
        .executor()
        .execute(&hub(), Command::user_join_group("u1", "ug", None).unwrap())
        .await
        .unwrap();
    // Once the join returned, it holds for the user's connections on every node.
    send(
        &nodes[1],
        Target::Groups(vec![GroupName::new("ug").unwrap()]),
        "ug",
    );
    expect(&mut a, "ug").await;
    expect(&mut c3, "ug").await;

    // Per-sender order across nodes.
    for n in 0..200 {
        send(&nodes[0], Target::Connection(c(&b_id)), &n.to_string());
    }
    for n in 0..200 {
        expect(&mut b, &n.to_string()).await;
    }

    // Close a user from another node, with a reason.
    nodes[2]
        .node
        .executor()
        .execute(
            &hub(),
            Command::Close {
                target: Target::User(UserId::new("u2").unwrap()),
                excluded: vec![],
                reason: Some("bye".into()),
            },
        )
        .await
        .unwrap();
    match b.until_closed().await {
        Some(HubMessage::Close { error, .. }) => {
            assert!(error.unwrap_or_default().contains("bye"))
        }
        other => panic!("expected a Close, got {other:?}"),
    }
    for node in nodes {
        node.stop().await;
    }
}

/// REST calls on one node act on connections held by others, and answer for the whole
/// cluster: membership changes take effect before the call returns, checks and the group
/// listing see every node, misses are 404 only when no node has it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_on_any_node_acts_on_connections_on_every_node() {
    let redis = RedisServer::start();
    rest_on_any_node_acts_on_connections_on_every_node_through(&redis.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_on_any_node_acts_on_connections_on_every_node_on_a_redis_cluster() {
    let redis = RedisCluster::start();
    rest_on_any_node_acts_on_connections_on_every_node_through(&redis.url()).await;
}

async fn rest_on_any_node_acts_on_connections_on_every_node_through(url: &str) {
    let nodes = cluster(url, "rest").await;
    let (mut a, a_id) = client(&nodes[0], "ua", Format::Json).await;
    let (mut b, b_id) = client(&nodes[1], "ub", Format::MessagePack).await;
    let (mut c3, c3_id) = client(&nodes[2], "ua", Format::Json).await;
    settle(&nodes).await;
    let base = format!("/api/hubs/{HUB}");
    let rest = |n: usize, method: &'static str, path: String| {
        let node = &nodes[n];
        async move { node.rest(method, &path).await.0 }
    };

    // Checks from a node that holds none of it.
    assert_eq!(
        rest(2, "HEAD", format!("{base}/connections/{a_id}")).await,
        200
    );
    assert_eq!(
        rest(0, "HEAD", format!("{base}/connections/{b_id}")).await,
        200
    );
    assert_eq!(
        rest(0, "HEAD", format!("{base}/connections/nobody")).await,
        404
    );
    assert_eq!(rest(1, "HEAD", format!("{base}/users/ua")).await, 200);
    assert_eq!(rest(0, "HEAD", format!("{base}/users/ub")).await, 200);
    assert_eq!(rest(0, "HEAD", format!("{base}/users/nobody")).await, 404);

    // Add to group from another node, then send at once from a third: it arrives.
    let add = |n: usize, group: &str, id: &str| {
        rest(n, "PUT", format!("{base}/groups/{group}/connections/{id}"))
    };
    assert_eq!(add(1, "g1", &a_id).await, 200);
    assert_eq!(add(0, "g1", &b_id).await, 200);
    assert_eq!(add(2, "g1", "nobody").await, 404);
    assert_eq!(
        rest(2, "POST", format!("{base}/groups/g1/:send")).await,
        202
    );
    expect_rest(&mut a).await;
    expect_rest(&mut b).await;
    assert_eq!(rest(2, "HEAD", format!("{base}/groups/g1")).await, 200);
    assert_eq!(rest(2, "HEAD", format!("{base}/groups/g2")).await, 404);
    assert_eq!(
        rest(1, "HEAD", format!("{base}/users/ub/groups/g1")).await,
        200,
        "user in group through a local connection"
    );
    assert_eq!(
        rest(2, "HEAD", format!("{base}/users/ub/groups/g1")).await,
        200,
        "user in group through a connection on another node"
    );

    // The group listing merges every node's members, in order, page by page.
    assert_eq!(add(0, "g1", &c3_id).await, 200);
    let mut expected = vec![a_id.clone(), b_id.clone(), c3_id.clone()];
    expected.sort();
    let mut listed = Vec::new();
    let mut query = "maxpagesize=2".to_string();
    loop {
        let path = format!("{base}/groups/g1/connections?api-version=2024-12-01&{query}");
        let (status, body) = nodes[1].rest("GET", &path).await;
        assert_eq!(status, 200, "{body}");
        let page: serde_json::Value = serde_json::from_str(&body).unwrap();
        for member in page["value"].as_array().unwrap() {
            listed.push(member["connectionId"].as_str().unwrap().to_string());
        }
        match page["nextLink"].as_str() {
            Some(next) => {
                let token = next.split("continuationToken=").nth(1).unwrap();
                query = format!(
                    "maxpagesize=2&continuationToken={}",
                    token.split('&').next().unwrap()
                );
            }
            None => break,
        }
    }
    assert_eq!(listed, expected);

    // Remove from group from another node: later group sends miss it.
    let path = format!("{base}/groups/g1/connections/{a_id}");
    assert_eq!(rest(2, "DELETE", path).await, 200);
    assert_eq!(
        rest(1, "POST", format!("{base}/groups/g1/:send")).await,
        202
    );
    expect_rest(&mut b).await;
    expect_rest(&mut c3).await;
    assert_eq!(
        rest(1, "POST", format!("{base}/connections/{a_id}/:send")).await,
        202
    );
    expect_rest(&mut a).await; // the next thing a sees is this, not the group send

    // A user-group join from a node holding none of the user's connections reaches them.
    let path = format!("{base}/users/ua/groups/ug");
    assert_eq!(rest(1, "PUT", path).await, 200);
    assert_eq!(
        rest(1, "POST", format!("{base}/groups/ug/:send")).await,
        202
    );
    expect_rest(&mut a).await;
    expect_rest(&mut c3).await;

    // Close a connection held elsewhere, with a reason.
    let path = format!("{base}/connections/{b_id}?reason=moved");
    assert_eq!(rest(2, "DELETE", path).await, 200);
    match b.until_closed().await {
        Some(HubMessage::Close { error, .. }) => {
            assert!(error.unwrap_or_default().contains("moved"))
        }
        other => panic!("expected a Close, got {other:?}"),
    }
    for node in nodes {
        node.stop().await;
    }
}

async fn expect_rest(client: &mut RawClient) {
    client.expect(&Msg::invocation("m", &[json!("rest")])).await;
}

/// User-group memberships outlive connections and are kept by every node; a node that starts
/// later copies them from the running ones, so a user connecting there joins the groups.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_starts_later_learns_the_user_groups() {
    let redis = RedisServer::start();
    let url = redis.url();
    let mut nodes = cluster(&url, "late").await;
    nodes.truncate(2);
    let executor = nodes[0].node.executor();
    for (user, group, ttl) in [
        ("u1", "forever", None),
        (
            "u1",
            "for-a-minute",
            Some(std::time::Duration::from_secs(60)),
        ),
        ("u2", "forever", None),
    ] {
        executor
            .execute(&hub(), Command::user_join_group(user, group, ttl).unwrap())
            .await
            .unwrap();
    }
    let late = redis_node(&url, "late", "n-late", Config::default()).await;
    let (mut u1, _) = client(&late, "u1", Format::Json).await;
    let (mut u2, _) = client(&late, "u2", Format::MessagePack).await;
    settle(&nodes).await;
    for group in ["forever", "for-a-minute"] {
        send(
            &nodes[1],
            Target::Groups(vec![GroupName::new(group).unwrap()]),
            group,
        );
        expect(&mut u1, group).await;
    }
    expect(&mut u2, "forever").await;
    // What is left of a ttl is carried over, not restarted.
    let left = late
        .node
        .executor()
        .router()
        .user_groups(None, 10)
        .into_iter()
        .find(|e| e.group.as_str() == "for-a-minute")
        .and_then(|e| e.ttl)
        .expect("the ttl membership was copied");
    assert!(left <= std::time::Duration::from_secs(60), "{left:?}");
    assert!(left > std::time::Duration::from_secs(30), "{left:?}");
}

/// A user's leave made on one node has taken effect everywhere when it returns: a group send
/// made right after it on a third node does not reach the user's connection on the second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leave_that_returned_holds_for_the_next_send_from_any_node() {
    let redis = RedisServer::start();
    let nodes = cluster(&redis.url(), "leave").await;
    let (mut u1, _) = client(&nodes[1], "u1", Format::Json).await;
    settle(&nodes).await;
    for round in 0..20 {
        let group = format!("g{round}");
        let executor = nodes[0].node.executor();
        executor
            .execute(
                &hub(),
                Command::user_join_group("u1", &group, None).unwrap(),
            )
            .await
            .unwrap();
        executor
            .execute(
                &hub(),
                Command::user_leave_group("u1", Some(&group)).unwrap(),
            )
            .await
            .unwrap();
        send(
            &nodes[2],
            Target::Groups(vec![GroupName::new(&group).unwrap()]),
            "after the leave",
        );
        // A marker to the connection from the same node: anything sent before it has arrived.
        send(
            &nodes[2],
            Target::User(UserId::new("u1").unwrap()),
            "marker",
        );
        expect(&mut u1, "marker").await;
    }
}

/// A close of a user's connections made on one node has taken effect when it returns: a send
/// to the user right after it from a third node does not arrive before the Close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_that_returned_holds_for_the_next_send_from_any_node() {
    let redis = RedisServer::start();
    let nodes = cluster(&redis.url(), "close").await;
    for round in 0..10 {
        let user = format!("u{round}");
        let (mut victim, _) = client(&nodes[1], &user, Format::Json).await;
        settle(&nodes).await;
        let close = Command::Close {
            target: Target::User(UserId::new(&user).unwrap()),
            excluded: vec![],
            reason: Some("bye".into()),
        };
        nodes[0]
            .node
            .executor()
            .execute(&hub(), close)
            .await
            .unwrap();
        send(
            &nodes[2],
            Target::User(UserId::new(&user).unwrap()),
            "after the close",
        );
        match victim.next_message().await {
            HubMessage::Close { .. } => {}
            other => panic!("round {round}: got {other:?} before the Close"),
        }
    }
}

/// A Redis Cluster master killed (SIGKILL) and failed over to its replica: every node follows
/// the new master and sends cross nodes again; what arrives keeps its order, without copies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_nodes_follow_a_failed_over_master() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(std::env::var("TEST_LOG").unwrap_or_else(|_| "off".into()))
        .with_test_writer()
        .try_init();
    let mut redis = RedisCluster::with_replicas(1);
    let nodes = cluster(&redis.url(), "failover").await;
    let (mut b, b_id) = client(&nodes[1], "ub", Format::Json).await;
    settle(&nodes).await;
    send(&nodes[0], Target::Connection(c(&b_id)), "before");
    expect(&mut b, "before").await;

    // The master holding the hub's channels (b's connection channel is one of them).
    let port = redis
        .masters()
        .into_iter()
        .find(|m| {
            m.cli(&["PUBSUB", "SHARDCHANNELS", "failover:*"])
                .contains(&format!("c:{HUB}:{b_id}"))
        })
        .expect("a master holds the hub's channels")
        .port;
    let index = redis.nodes.iter().position(|n| n.port == port).unwrap();
    let started = std::time::Instant::now();
    drop(redis.nodes.remove(index));

    // Send numbered messages until one arrives from after the failover.
    let mut sent = 0u32;
    let mut got: Vec<u32> = Vec::new();
    let deadline = started + std::time::Duration::from_secs(40);
    while got
        .last()
        .is_none_or(|last| *last + 1 < sent.saturating_sub(5))
        || got.is_empty()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "no message crossed nodes within 40 s of the failover (got {got:?} of {sent}); cluster nodes:\n{}",
            redis.nodes[0].cli(&["CLUSTER", "NODES"])
        );
        send(&nodes[0], Target::Connection(c(&b_id)), &sent.to_string());
        sent += 1;
        while let Ok(message) =
            tokio::time::timeout(std::time::Duration::from_millis(100), b.next_message()).await
        {
            if let HubMessage::Invocation { arguments, .. } = message {
                got.push(arguments[0].as_str().unwrap().parse().unwrap());
            }
        }
    }
    let recovered = started.elapsed();
    assert!(
        got.windows(2).all(|w| w[0] < w[1]),
        "in order, once: {got:?}"
    );
    let errors: u64 = nodes
        .iter()
        .map(|n| n.node.cluster().backplane_traffic().publish_errors)
        .sum();
    // What was sent while the shard had no master is lost (pub/sub is at most once): some
    // of it counted by the publisher, some accepted by the new master before the nodes had
    // subscribed there again (docs/cluster.md, "Redis Cluster").
    println!(
        "failover: cross-node sends flow again {recovered:?} after the master was killed; \
         {} of {sent} delivered; {errors} publishes (all nodes, heartbeats included) counted lost",
        got.len()
    );
}

/// `limits.max_groups_per_connection` is kept by the node that holds the connection, and a
/// join asked through another node comes back refused as a limit, not as "no such connection".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_limit_refuses_joins_asked_through_other_nodes() {
    let redis = RedisServer::start();
    let mut config = Config::default();
    config.limits.max_groups_per_connection = 1;
    let mut nodes = Vec::new();
    for name in ["n1", "n2"] {
        nodes.push(redis_node(&redis.url(), "limits", name, config.clone()).await);
    }
    let (mut a, a_id) = client(&nodes[0], "u1", Format::Json).await;
    let elsewhere = nodes[1].node.executor();
    elsewhere
        .execute(&hub(), Command::add_to_group(&a_id, "g1").unwrap())
        .await
        .unwrap();
    let refused = elsewhere
        .execute(&hub(), Command::add_to_group(&a_id, "g2").unwrap())
        .await
        .unwrap_err();
    assert_eq!(
        refused,
        switchyard_node::Missing::ConnectionGroupsFull(ConnectionId::new(&a_id).unwrap(), 1)
    );
    assert!(refused.is_limit());
    // The limit refused only that join: the group it is in still reaches it.
    settle(&nodes).await;
    send(
        &nodes[1],
        Target::Groups(vec![GroupName::new("g1").unwrap()]),
        "g1",
    );
    expect(&mut a, "g1").await;
}
