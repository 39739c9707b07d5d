//! The dashboard of a cluster: three real nodes on a real `redis-server`, clients on each; the
//! dashboard open on one node shows every node's clients (exact group and user counts across
//! nodes), lists them, and closes a client held by another node; a live trace started there
//! streams every node's events, a node that joins during the trace included.

use super::redis_node;

use serde_json::{json, Value};
use switchyard_core::HubName;
use switchyard_hub_protocol::{Format, HubMessage};
use switchyard_node::command::Command;
use switchyard_node::Config;
use switchyard_testkit::{hub_of, Admin, RawClient, RedisServer, TestServer};

const HUB: &str = "chat";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dashboard_on_one_node_sees_and_closes_clients_on_every_node() {
    let redis = RedisServer::start();
    let mut nodes = Vec::new();
    for name in ["n1", "n2", "n3"] {
        nodes.push(redis_node(&redis.url(), "dashboard", name, Config::default()).await);
    }
    let mut clients = Vec::new();
    for (node, user, format) in [
        (0, "ada", Format::Json),
        (1, "bob", Format::Json),
        (1, "cy", Format::MessagePack),
        (2, "dee", Format::Json),
    ] {
        let server = &nodes[node];
        let token = server.token(HUB, Some(user));
        let (mut client, id) = RawClient::start(server, HUB, &token, format).await;
        client.handshake_result().await.unwrap();
        clients.push((client, id));
    }
    let hub = HubName::new(HUB, None).unwrap();
    // "red" has members on two nodes: counted once.
    for (client, group) in [(0, "red"), (1, "red"), (3, "blue")] {
        let command = Command::add_to_group(&clients[client].1, group).unwrap();
        nodes[0]
            .node
            .executor()
            .execute(&hub, command)
            .await
            .unwrap();
    }

    // Development mode on loopback: no token needed.
    let mut admin = Admin::open(&nodes[0], "").await;
    let snapshot = admin
        .push("snapshot", |args| {
            args[0]["nodes"].as_array().is_some_and(|n| n.len() == 3)
                && hub_of(&args[0], HUB).is_some_and(|hub| hub["connections"] == 4)
        })
        .await
        .remove(0);
    let chat = hub_of(&snapshot, HUB).unwrap();
    assert_eq!(chat["protocols"]["json"], 3, "{chat}");
    assert_eq!(chat["protocols"]["messagepack"], 1);
    assert_eq!(chat["groups"], 2, "{chat}");
    assert_eq!(chat["users"], 4);
    assert!(chat.get("approximate").is_none());
    assert!(chat.get("groupNames").is_none(), "names stay between nodes");
    assert_eq!(snapshot["node"]["id"], "n1");

    let list = admin
        .invoke("SetFilter", &[json!({"hub": HUB})])
        .await
        .unwrap();
    assert_eq!(list["matched"], 4, "{list}");
    let mut held: Vec<(String, String)> = list["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            (
                row["userId"].as_str().unwrap().to_string(),
                row["node"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    held.sort();
    assert_eq!(
        held,
        [("ada", "n1"), ("bob", "n2"), ("cy", "n2"), ("dee", "n3")]
            .map(|(u, n)| (u.to_string(), n.to_string()))
    );

    // Closed from n1's dashboard, held by n3.
    admin
        .invoke(
            "CloseConnection",
            &[
                json!(HUB),
                json!(clients[3].1),
                json!("Closed across the cluster."),
            ],
        )
        .await
        .unwrap();
    match clients[3].0.until_closed().await {
        Some(HubMessage::Close { error, .. }) => {
            assert_eq!(error.as_deref(), Some("Closed across the cluster."))
        }
        other => panic!("expected a Close, got {other:?}"),
    }
    admin
        .push("snapshot", |args| {
            hub_of(&args[0], HUB).is_some_and(|hub| hub["connections"] == 3)
        })
        .await;
    for node in nodes {
        node.stop().await;
    }
}

async fn node(redis: &RedisServer, name: &str) -> TestServer {
    redis_node(&redis.url(), "trace", name, Config::default()).await
}

/// Trace events pushed to `admin` until one satisfies `wanted`; every one seen is kept.
async fn trace_until(admin: &mut Admin, seen: &mut Vec<Value>, wanted: impl Fn(&Value) -> bool) {
    while !seen.iter().any(&wanted) {
        let args = admin.push("trace", |_| true).await;
        assert_eq!(args[0], HUB);
        seen.extend(args[1].as_array().unwrap().iter().cloned());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_trace_covers_every_node_and_ends_on_every_node() {
    let redis = RedisServer::start();
    let n1 = node(&redis, "n1").await;
    let n2 = node(&redis, "n2").await;
    let mut admin = Admin::open(&n1, "").await;
    admin
        .push("snapshot", |args| {
            args[0]["nodes"].as_array().is_some_and(|n| n.len() == 2)
        })
        .await;
    admin
        .invoke("StartTrace", &[json!(HUB), json!(60)])
        .await
        .unwrap();

    // Once StartTrace has returned, n2 traces: its client's connect and close, and a
    // broadcast sent through it, reach n1's page, each with the node it happened on.
    let (mut client, id) =
        RawClient::start(&n2, HUB, &n2.token(HUB, Some("bob")), Format::Json).await;
    client.handshake_result().await.unwrap();
    n2.broadcast(HUB, "fromN2", &[]);
    client.close().await;
    let mut seen = Vec::new();
    trace_until(&mut admin, &mut seen, |e| e["kind"] == "disconnected").await;
    trace_until(&mut admin, &mut seen, |e| e["target"] == "fromN2").await;
    let of = |kind: &str| {
        seen.iter()
            .find(|e| e["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind} in {seen:?}"))
    };
    assert_eq!(of("connected")["node"], "n2", "{seen:?}");
    assert_eq!(of("connected")["connectionId"], id.as_str());
    assert_eq!(of("connected")["userId"], "bob");
    assert_eq!(of("disconnected")["node"], "n2");
    let sent = seen.iter().find(|e| e["target"] == "fromN2").unwrap();
    assert_eq!(
        (&sent["node"], &sent["direction"]),
        (&json!("n2"), &json!("out"))
    );
    // n1's own events say n1.
    n1.broadcast(HUB, "fromN1", &[]);
    trace_until(&mut admin, &mut seen, |e| e["target"] == "fromN1").await;
    let local = seen.iter().find(|e| e["target"] == "fromN1").unwrap();
    assert_eq!(local["node"], "n1");

    // A node that joins during the trace is told within a few seconds (the page's session
    // announces the trace again), and its events come too.
    let n3 = node(&redis, "n3").await;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        n3.broadcast(HUB, "fromN3", &[]);
        let got = tokio::time::timeout(std::time::Duration::from_millis(500), async {
            loop {
                let args = admin.push("trace", |_| true).await;
                let events = args[1].as_array().unwrap().clone();
                if events.iter().any(|e| e["target"] == "fromN3") {
                    return events;
                }
            }
        })
        .await;
        if let Ok(events) = got {
            let from_n3 = events.iter().find(|e| e["target"] == "fromN3").unwrap();
            assert_eq!(from_n3["node"], "n3");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "n3 never traced the hub"
        );
    }

    // Stopped from n1: no node traces the hub any more.
    admin.invoke("StopTrace", &[json!(HUB)]).await.unwrap();
    admin
        .push("snapshot", |args| {
            args[0]["nodes"].as_array().is_some_and(|n| n.len() == 3)
                && args[0]["hubs"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|hub| hub.get("traceUntil").is_none())
        })
        .await;
    for node in [n1, n2, n3] {
        node.stop().await;
    }
}
