//! The dashboard of a cluster: three real nodes on a real `redis-server`, clients on each; the
//! dashboard open on one node shows every node's clients (exact group and user counts across
//! nodes), lists them, and closes a client held by another node.

use std::sync::Arc;

use serde_json::json;
use switchyard_backplane::Backplane;
use switchyard_backplane_redis::{RedisBackplane, RedisSettings};
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
        let mut settings = RedisSettings::new(redis.url());
        settings.prefix = "dashboard".into();
        let backplane: Arc<dyn Backplane> = RedisBackplane::connect(settings).await.unwrap();
        nodes.push(TestServer::start_on(Config::default(), backplane, name).await);
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
