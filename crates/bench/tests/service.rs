//! The peer against the real service (`switchyard_node` in-process): a Rust client
//! negotiates through the peer's redirect, connects to the service, and every hub call
//! travels client → service → peer → service → client.

use std::time::Duration;

use serde_json::{json, Value};

use switchyard_bench::{start_app_server, AppServerArgs, RunningAppServer};
use switchyard_client::{negotiate, WsClient};
use switchyard_hub_protocol::{CompletionResult, Format, HubMessage};
use switchyard_testkit::TestServer;

const STEP: Duration = Duration::from_secs(10);

/// A service node on a free port.
type Service = TestServer;

async fn peer(service: &Service, server_id: &str) -> RunningAppServer {
    let mut args = AppServerArgs::new(service.connection_string());
    args.connections = 2;
    args.server_id = Some(server_id.to_owned());
    let running = start_app_server(&args).await.unwrap();
    tokio::time::timeout(STEP, running.server.ready())
        .await
        .expect("server connections up");
    running
}

/// One client connected through the peer's negotiate redirect.
struct TestClient {
    ws: WsClient,
    connection_id: String,
    next_id: u32,
}

impl TestClient {
    async fn connect(peer: &RunningAppServer, format: Format, user: Option<&str>) -> TestClient {
        let mut url = peer.negotiate_url("bench");
        url.push_str("?negotiateVersion=1");
        if let Some(user) = user {
            url.push_str(&format!("&user={user}"));
        }
        let response = reqwest::Client::new().post(&url).send().await.unwrap();
        assert_eq!(response.status(), 200);
        let redirect: Value = response.json().await.unwrap();
        let service_url = redirect["url"].as_str().unwrap();
        let token = redirect["accessToken"].as_str().unwrap();
        let negotiated = negotiate(service_url, token, 1).await.unwrap();
        let ws_url = format!(
            "{}&id={}",
            service_url.replacen("http://", "ws://", 1),
            negotiated.id_value
        );
        let ws = tokio::time::timeout(STEP, WsClient::connect(&ws_url, Some(token), format))
            .await
            .expect("client connect")
            .unwrap();
        TestClient {
            ws,
            connection_id: negotiated.connection_id,
            next_id: 0,
        }
    }

    async fn next(&mut self) -> HubMessage<Value> {
        tokio::time::timeout(STEP, self.ws.next_non_ping())
            .await
            .expect("a message")
            .unwrap()
    }

    /// Invokes `target` and returns the completion's result, failing on anything else
    /// arriving first except `Measure` invocations, which are returned too.
    async fn call(
        &mut self,
        target: &str,
        arguments: Vec<Value>,
    ) -> (Vec<Vec<Value>>, Result<Value, String>) {
        self.next_id += 1;
        let id = self.next_id.to_string();
        self.ws
            .send(&HubMessage::Invocation {
                headers: vec![],
                invocation_id: Some(id.clone()),
                target: target.into(),
                arguments,
                stream_ids: None,
            })
            .await
            .unwrap();
        let mut measures = Vec::new();
        loop {
            match self.next().await {
                HubMessage::Invocation {
                    target, arguments, ..
                } if target == "Measure" => measures.push(arguments),
                HubMessage::Completion {
                    invocation_id,
                    result,
                    ..
                } => {
                    assert_eq!(invocation_id, id);
                    let result = match result {
                        CompletionResult::Void => Ok(Value::Null),
                        CompletionResult::Value(v) => Ok(v),
                        CompletionResult::Error(e) => Err(e),
                    };
                    return (measures, result);
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    }

    /// The next `Measure` arguments.
    async fn measure(&mut self) -> Vec<Value> {
        match self.next().await {
            HubMessage::Invocation {
                target, arguments, ..
            } if target == "Measure" => arguments,
            other => panic!("expected Measure, got {other:?}"),
        }
    }

    /// Nothing arrives for a short while.
    async fn quiet(&mut self) {
        if let Ok(message) =
            tokio::time::timeout(Duration::from_millis(300), self.ws.next_non_ping()).await
        {
            panic!("expected nothing, got {message:?}");
        }
    }
}

async fn scenario(first: Format, second: Format) {
    let service = Service::start().await;
    let peer = peer(&service, "bench-peer-1").await;
    let mut alice = TestClient::connect(&peer, first, Some("alice")).await;
    let mut bob = TestClient::connect(&peer, second, Some("bob")).await;

    // GetConnectionId / GetUserId.
    let (_, id) = alice.call("GetConnectionId", vec![]).await;
    assert_eq!(id, Ok(json!(alice.connection_id)));
    let (_, user) = bob.call("GetUserId", vec![]).await;
    assert_eq!(user, Ok(json!("bob")));
    let (_, server) = bob.call("GetServerId", vec![]).await;
    assert_eq!(server, Ok(json!("bench-peer-1")));

    // Echo: the Measure comes before the completion.
    let (measures, done) = alice.call("Echo", vec![json!(1), json!("hi")]).await;
    assert_eq!(measures, [vec![json!(1), json!("hi")]]);
    assert_eq!(done, Ok(Value::Null));
    bob.quiet().await;

    // Broadcast reaches both.
    let (measures, _) = bob.call("Broadcast", vec![json!(2), json!("all")]).await;
    assert_eq!(measures, [vec![json!(2), json!("all")]]);
    assert_eq!(alice.measure().await, [json!(2), json!("all")]);

    // JoinGroup (acked) + SendToGroup from outside the group.
    let (_, joined) = alice.call("JoinGroup", vec![json!("g1")]).await;
    assert_eq!(joined, Ok(Value::Null));
    let (measures, _) = bob
        .call("SendToGroup", vec![json!("g1"), json!(3), json!("group")])
        .await;
    assert!(measures.is_empty());
    assert_eq!(alice.measure().await, [json!(3), json!("group")]);
    let (_, in_group) = bob
        .call("CheckUserInGroup", vec![json!("alice"), json!("g1")])
        .await;
    assert_eq!(in_group, Ok(json!(true)));
    let (_, left) = alice.call("LeaveGroup", vec![json!("g1")]).await;
    assert_eq!(left, Ok(Value::Null));
    let (_, sent) = bob
        .call("SendToGroup", vec![json!("g1"), json!(4), json!("nobody")])
        .await;
    assert_eq!(sent, Ok(Value::Null));
    alice.quiet().await;

    // SendToUser and SendToConnection.
    let (_, sent) = bob
        .call("SendToUser", vec![json!("alice"), json!(5), json!("user")])
        .await;
    assert_eq!(sent, Ok(Value::Null));
    assert_eq!(alice.measure().await, [json!(5), json!("user")]);
    let alice_id = alice.connection_id.clone();
    let (_, sent) = bob
        .call(
            "SendToConnection",
            vec![json!(alice_id), json!(6), json!("conn")],
        )
        .await;
    assert_eq!(sent, Ok(Value::Null));
    assert_eq!(alice.measure().await, [json!(6), json!("conn")]);

    // Per-sender order survives a burst.
    for i in 0..50 {
        bob.ws
            .send(&HubMessage::Invocation {
                headers: vec![],
                invocation_id: None,
                target: "SendToUser".into(),
                arguments: vec![json!("alice"), json!(i), json!("burst")],
                stream_ids: None,
            })
            .await
            .unwrap();
    }
    for i in 0..50 {
        assert_eq!(alice.measure().await, [json!(i), json!("burst")]);
    }

    // A client result across the service: bob asks alice, alice answers.
    let ask = tokio::spawn(async move {
        let result = bob
            .call(
                "AskClient",
                vec![json!(alice_id), json!("Double"), json!(21)],
            )
            .await;
        (bob, result)
    });
    let (invocation_id, arguments) = match alice.next().await {
        HubMessage::Invocation {
            invocation_id: Some(id),
            target,
            arguments,
            ..
        } if target == "Double" => (id, arguments),
        other => panic!("expected the client invocation, got {other:?}"),
    };
    assert_eq!(arguments, [json!(21)]);
    alice
        .ws
        .send(&HubMessage::Completion {
            headers: vec![],
            invocation_id,
            result: CompletionResult::Value(json!(42)),
        })
        .await
        .unwrap();
    let (_bob, (_, result)) = tokio::time::timeout(STEP, ask).await.unwrap().unwrap();
    assert_eq!(result, Ok(json!(42)));

    assert_eq!(peer.server.client_count(), 2);
    peer.stop().await;
}

#[tokio::test]
async fn json_clients_through_the_service() {
    scenario(Format::Json, Format::Json).await;
}

#[tokio::test]
async fn messagepack_clients_through_the_service() {
    scenario(Format::MessagePack, Format::MessagePack).await;
}

#[tokio::test]
async fn mixed_protocols_through_the_service() {
    scenario(Format::Json, Format::MessagePack).await;
}

#[tokio::test]
async fn negotiate_answers_500_until_connected_and_cors() {
    // Nothing listens on the service port: the peer never connects.
    let unused = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = unused.local_addr().unwrap().port();
    drop(unused);
    let mut args = AppServerArgs::new(format!(
        "Endpoint=http://127.0.0.1;Port={port};AccessKey=k;Version=1.0;"
    ));
    args.connections = 1;
    let peer = start_app_server(&args).await.unwrap();
    let http = reqwest::Client::new();
    let response = http
        .post(peer.negotiate_url("bench"))
        .header("Origin", "http://example.test")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 500);
    assert_eq!(
        response.headers()["access-control-allow-origin"],
        "http://example.test"
    );
    assert_eq!(
        response.headers()["access-control-allow-credentials"],
        "true"
    );
    assert_eq!(
        response.text().await.unwrap(),
        "Azure SignalR Service is not connected yet, please try again later."
    );

    let preflight = http
        .request(reqwest::Method::OPTIONS, peer.negotiate_url("bench"))
        .header("Origin", "http://example.test")
        .header("Access-Control-Request-Method", "POST")
        .header(
            "Access-Control-Request-Headers",
            "x-requested-with,content-type",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(preflight.status(), 204);
    assert_eq!(
        preflight.headers()["access-control-allow-headers"],
        "x-requested-with,content-type"
    );
    assert!(preflight.headers()["access-control-allow-methods"]
        .to_str()
        .unwrap()
        .contains("POST"));

    let unknown = http.post(peer.negotiate_url("other")).send().await.unwrap();
    assert_eq!(unknown.status(), 404);
    peer.abort().await;
}

#[tokio::test]
async fn crashed_peer_drops_its_clients() {
    let service = Service::start().await;
    let peer = peer(&service, "bench-peer-2").await;
    let mut client = TestClient::connect(&peer, Format::Json, None).await;
    let (_, count) = client.call("Count", vec![]).await;
    assert_eq!(count, Ok(json!(1)));
    peer.abort().await;
    // The service closes clients of a server connection that is gone.
    let closed = tokio::time::timeout(STEP, async {
        loop {
            match client.ws.next().await {
                Err(_) | Ok(HubMessage::Close { .. }) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "client closed after the app server crashed");
}

/// Two app servers: a client invocation routed through the service to the other server
/// (spec §1.9), and a broadcast crossing servers.
#[tokio::test]
async fn client_results_across_two_app_servers() {
    let service = Service::start().await;
    let first = peer(&service, "bench-peer-a").await;
    let second = peer(&service, "bench-peer-b").await;
    let mut alice = TestClient::connect(&first, Format::Json, Some("alice")).await;
    let mut bob = TestClient::connect(&second, Format::MessagePack, Some("bob")).await;
    // Each sticks to the server that issued its token (asrs.s.sn).
    assert_eq!(
        alice.call("GetServerId", vec![]).await.1,
        Ok(json!("bench-peer-a"))
    );
    assert_eq!(
        bob.call("GetServerId", vec![]).await.1,
        Ok(json!("bench-peer-b"))
    );

    let (measures, _) = bob.call("Broadcast", vec![json!(1), json!("x")]).await;
    assert_eq!(measures.len(), 1);
    assert_eq!(alice.measure().await, [json!(1), json!("x")]);

    let alice_id = alice.connection_id.clone();
    let ask = tokio::spawn(async move {
        let result = bob
            .call(
                "AskClient",
                vec![json!(alice_id), json!("Double"), json!(5)],
            )
            .await;
        (bob, result)
    });
    let invocation_id = match alice.next().await {
        HubMessage::Invocation {
            invocation_id: Some(id),
            target,
            ..
        } if target == "Double" => id,
        other => panic!("expected the client invocation, got {other:?}"),
    };
    alice
        .ws
        .send(&HubMessage::Completion {
            headers: vec![],
            invocation_id,
            result: CompletionResult::Value(json!(10)),
        })
        .await
        .unwrap();
    let (mut bob, (_, result)) = tokio::time::timeout(STEP, ask).await.unwrap().unwrap();
    assert_eq!(result, Ok(json!(10)));

    // An error answer travels back as the error text.
    let alice_id = alice.connection_id.clone();
    let ask = tokio::spawn(async move {
        bob.call("AskClient", vec![json!(alice_id), json!("Fail"), json!(0)])
            .await
    });
    let invocation_id = match alice.next().await {
        HubMessage::Invocation {
            invocation_id: Some(id),
            ..
        } => id,
        other => panic!("expected the client invocation, got {other:?}"),
    };
    alice
        .ws
        .send(&HubMessage::Completion {
            headers: vec![],
            invocation_id,
            result: CompletionResult::Error("nope".into()),
        })
        .await
        .unwrap();
    let (_, result) = tokio::time::timeout(STEP, ask).await.unwrap().unwrap();
    assert_eq!(result, Err("nope".into()));
    first.stop().await;
    second.stop().await;
}

/// Graceful shutdown in MigrateClients mode: the client moves to the other app server
/// and keeps working without reconnecting.
#[tokio::test]
async fn migrate_clients_on_graceful_stop() {
    let service = Service::start().await;
    let mut args = AppServerArgs::new(service.connection_string());
    args.connections = 2;
    args.server_id = Some("leaving".into());
    args.graceful_shutdown = switchyard_bench::GracefulShutdown::Migrate;
    let leaving = start_app_server(&args).await.unwrap();
    tokio::time::timeout(STEP, leaving.server.ready())
        .await
        .unwrap();
    let staying = peer(&service, "staying").await;
    let mut client = TestClient::connect(&leaving, Format::Json, Some("carol")).await;
    assert_eq!(
        client.call("GetServerId", vec![]).await.1,
        Ok(json!("leaving"))
    );
    let leaving_server = leaving.server.clone();
    tokio::time::timeout(Duration::from_secs(35), leaving.stop())
        .await
        .expect("graceful stop is bounded");
    assert_eq!(leaving_server.client_count(), 0);
    assert_eq!(
        client.call("GetServerId", vec![]).await.1,
        Ok(json!("staying"))
    );
    assert_eq!(client.call("GetUserId", vec![]).await.1, Ok(json!("carol")));
    assert_eq!(staying.server.client_count(), 1);
    staying.stop().await;
}
