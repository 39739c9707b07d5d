//! Three real nodes, each with its own Redis backplane (as three processes would have), one
//! real `redis-server`: sends and commands issued on one node reach clients on the others.

use std::sync::Arc;

use serde_json::json;
use switchyard_backplane::Backplane;
use switchyard_backplane_redis::{RedisBackplane, RedisSettings};
use switchyard_core::{ConnectionId, GroupName, HubName, Target, UserId};
use switchyard_hub_protocol::{Format, HubMessage};
use switchyard_node::command::Command;
use switchyard_node::Config;
use switchyard_testkit::{Msg, RawClient, RedisServer, TestServer};

const HUB: &str = "chat";

async fn cluster(redis: &RedisServer, prefix: &str) -> Vec<TestServer> {
    let mut nodes = Vec::new();
    for name in ["n1", "n2", "n3"] {
        let mut settings = RedisSettings::new(redis.url());
        settings.prefix = prefix.into();
        let backplane: Arc<dyn Backplane> = RedisBackplane::connect(settings).await.unwrap();
        nodes.push(TestServer::start_on(Config::default(), backplane, name).await);
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
        node.node.executor().barrier().await;
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
    let nodes = cluster(&redis, "sends").await;
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
        .unwrap();
    nodes[1]
        .node
        .executor()
        .execute(&hub(), Command::add_to_group(&b_id, "g").unwrap())
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
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while nodes[2]
        .node
        .executor()
        .execute(
            &hub(),
            switchyard_node::command::Check::user_in_group("u1", "ug").unwrap(),
        )
        .is_err()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "user group did not spread"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    settle(&nodes).await;
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
