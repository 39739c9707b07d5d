//! The `[throttling]` settings against a live node: each rate and bound driven past its limit
//! with real requests, the refusal's status, `Retry-After` and counter checked, and the rest
//! of the node (connected clients, other addresses, app servers, health, metrics) unaffected.

mod common;

use std::net::IpAddr;
use std::time::Duration;

use common::{eventually_async, now, AppServer, Msg, RawClient, TestServer, WAIT};
use futures_util::StreamExt;
use serde_json::json;
use switchyard_auth::TokenBuilder;
use switchyard_hub_protocol::Format;
use switchyard_node::Config;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

/// A negotiate (version 1) as the client makes it, from `from` when given; status,
/// `Retry-After` and body.
async fn negotiate(
    server: &TestServer,
    token: &str,
    from: Option<IpAddr>,
    forwarded_for: Option<&str>,
) -> (u16, Option<u64>, String) {
    let mut builder = reqwest::Client::builder();
    if let Some(from) = from {
        builder = builder.local_address(from);
    }
    let mut request = builder
        .build()
        .unwrap()
        .post(format!(
            "http://{}/client/negotiate?hub=chat&negotiateVersion=1",
            server.addr
        ))
        .bearer_auth(token);
    if let Some(address) = forwarded_for {
        request = request.header("x-forwarded-for", address);
    }
    answer(request.send().await.unwrap()).await
}

async fn answer(response: reqwest::Response) -> (u16, Option<u64>, String) {
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().parse::<u64>().unwrap());
    (status, retry_after, response.text().await.unwrap())
}

/// Repeats `request` until it is refused with 429: a rate of 1/s may give a token more on a
/// slow machine, so the refusal is not pinned to one attempt. Returns how many more passed
/// first, and the refusal's `Retry-After` and body.
async fn until_refused<F, Fut>(mut request: F) -> (usize, (Option<u64>, String))
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = (u16, Option<u64>, String)>,
{
    for passed in 0..10 {
        let (status, retry_after, body) = request().await;
        if status == 429 {
            return (passed, (retry_after, body));
        }
        assert!((200..300).contains(&status), "{status} {body}");
    }
    panic!("ten immediate requests and none refused");
}

/// `switchyard_throttled_total{kind=…}` as `/metrics` shows it over HTTP.
async fn throttled(server: &TestServer, kind: &str) -> u64 {
    server
        .metric(&format!("switchyard_throttled_total{{kind=\"{kind}\"}}"))
        .await
}

async fn health(server: &TestServer) -> u16 {
    reqwest::get(format!("{}/api/health", server.http()))
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// A connected client that must keep receiving whatever the throttles refuse around it.
async fn bystander(server: &TestServer) -> RawClient {
    let token = server.token("chat", Some("bystander"));
    let (mut client, _) = RawClient::start(server, "chat", &token, Format::Json).await;
    client.handshake_result().await.unwrap();
    client
}

/// A REST broadcast reaches `client` (`TestServer::rest` sends `m("rest")`).
async fn still_receives(server: &TestServer, client: &mut RawClient) {
    let (status, _) = server.rest("POST", "/api/hubs/chat/:send").await;
    assert_eq!(status, 202);
    client.expect(&Msg::invocation("m", &[json!("rest")])).await;
}

/// A WebSocket to the client endpoint that never sends its handshake (`id`: after a
/// negotiate; `None`: skipping it). `Err(status)` when the upgrade is refused.
async fn silent_websocket(
    server: &TestServer,
    token: &str,
    id: Option<&str>,
) -> Result<common::Ws, (u16, Option<u64>)> {
    let mut request = server.ws_url("chat", id).into_client_request().unwrap();
    request
        .headers_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    match tokio_tungstenite::connect_async(request).await {
        Ok((ws, _)) => Ok(ws),
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            let retry_after = response
                .headers()
                .get("retry-after")
                .map(|v| v.to_str().unwrap().parse::<u64>().unwrap());
            Err((response.status().as_u16(), retry_after))
        }
        Err(other) => panic!("expected an HTTP answer, got {other}"),
    }
}

/// Node-wide connect rate (burst 3, 1/s): the bystander's negotiate takes one token, two more
/// negotiates pass, then negotiates and negotiation-skipping WebSockets get 429 with
/// `Retry-After: 1`, counted; the bystander, app servers and health are untouched; after the
/// wait a negotiate passes again.
#[tokio::test]
async fn the_node_wide_connect_rate_refuses_with_429_and_retry_after() {
    let mut config = Config::default();
    config.throttling.connect_rate = 1;
    config.throttling.connect_burst = 3;
    let server = TestServer::start_with(config).await;
    let mut client = bystander(&server).await;
    let token = server.token("chat", None);
    for _ in 0..2 {
        let (status, _, body) = negotiate(&server, &token, None, None).await;
        assert_eq!(status, 200, "{body}");
    }
    let (_, (retry_after, body)) = until_refused(|| negotiate(&server, &token, None, None)).await;
    assert_eq!(retry_after, Some(1));
    assert!(body.contains("throttling.connect_rate"), "{body}");
    let refused = silent_websocket(&server, &token, None).await.err();
    assert_eq!(
        refused,
        Some((429, Some(1))),
        "a WebSocket that skips negotiate"
    );
    assert_eq!(throttled(&server, "connect_node").await, 2);
    assert_eq!(throttled(&server, "connect_address").await, 0);
    // Neither app servers nor health nor metrics are new client connections.
    let mut app = AppServer::open(&server, "app", "server-1").await;
    app.echo_round_trip().await;
    assert_eq!(health(&server).await, 200);
    still_receives(&server, &mut client).await;
    tokio::time::sleep(Duration::from_secs(retry_after.unwrap())).await;
    let (status, _, body) = negotiate(&server, &token, None, None).await;
    assert_eq!(status, 200, "after Retry-After: {body}");
}

/// Per source address (burst 2, 1/s), sockets bound to different loopback addresses: the
/// third negotiate from 127.0.0.2 gets 429, counted as `connect_address`; 127.0.0.3 is still
/// admitted, and the bystander keeps receiving.
#[tokio::test]
async fn the_per_address_connect_rate_spares_other_addresses() {
    let mut config = Config::default();
    config.throttling.connect_rate_per_address = 1;
    config.throttling.connect_burst_per_address = 2;
    let server = TestServer::start_with(config).await;
    let mut client = bystander(&server).await;
    let token = server.token("chat", None);
    let busy: IpAddr = "127.0.0.2".parse().unwrap();
    let other: IpAddr = "127.0.0.3".parse().unwrap();
    for _ in 0..2 {
        assert_eq!(negotiate(&server, &token, Some(busy), None).await.0, 200);
    }
    let (_, (retry_after, body)) =
        until_refused(|| negotiate(&server, &token, Some(busy), None)).await;
    assert_eq!(retry_after, Some(1));
    assert!(body.contains("from your address"), "{body}");
    assert_eq!(negotiate(&server, &token, Some(other), None).await.0, 200);
    assert_eq!(throttled(&server, "connect_address").await, 1);
    still_receives(&server, &mut client).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(negotiate(&server, &token, Some(busy), None).await.0, 200);
}

/// Behind a trusted proxy the address is the client's, from `X-Forwarded-For`: one client
/// behind the proxy is throttled, another is not, and the proxy itself (naming nobody) is not
/// throttled as one client.
#[tokio::test]
async fn behind_a_trusted_proxy_the_forwarded_address_is_throttled() {
    let mut config = Config {
        trusted_proxies: vec!["127.0.0.0/8".into()],
        ..Config::default()
    };
    config.throttling.connect_rate_per_address = 1;
    config.throttling.connect_burst_per_address = 1;
    let server = TestServer::start_with(config).await;
    let token = server.token("chat", None);
    assert_eq!(
        negotiate(&server, &token, None, Some("203.0.113.7"))
            .await
            .0,
        200
    );
    let (_, (retry_after, _)) =
        until_refused(|| negotiate(&server, &token, None, Some("203.0.113.7"))).await;
    assert_eq!(retry_after, Some(1));
    assert_eq!(
        negotiate(&server, &token, None, Some("203.0.113.8"))
            .await
            .0,
        200
    );
    for _ in 0..3 {
        assert_eq!(negotiate(&server, &token, None, None).await.0, 200);
    }
    assert_eq!(throttled(&server, "connect_address").await, 1);
}

/// REST per access key (burst 2, 1/s): the third call signed with the primary key gets 429 in
/// the REST error format with `Retry-After`; the secondary key has its own allowance; health
/// is exempt; the bystander received the calls that passed.
#[tokio::test]
async fn rest_calls_are_throttled_per_access_key() {
    let primary = "p".repeat(40);
    let secondary = "s".repeat(40);
    let mut config = Config {
        access_key: Some(primary.clone()),
        secondary_access_key: Some(secondary.clone()),
        ..Config::default()
    };
    config.throttling.rest_rate_per_key = 1;
    config.throttling.rest_burst_per_key = 2;
    let server = TestServer::start_with(config).await;
    let mut client = bystander(&server).await;
    still_receives(&server, &mut client).await;
    assert_eq!(server.rest("POST", "/api/hubs/chat/:send").await.0, 202);
    let path = "/api/hubs/chat/:send";
    let call = |key: &str| {
        let token = TokenBuilder::new(format!("{}{path}", server.http())).sign(key, now());
        reqwest::Client::new()
            .post(format!("{}{path}", server.http()))
            .bearer_auth(token)
            .header("content-type", "application/json")
            .body("{\"target\":\"m\",\"arguments\":[\"rest\"]}")
            .send()
    };
    let (extra, (retry_after, body)) =
        until_refused(|| async { answer(call(&primary).await.unwrap()).await }).await;
    assert_eq!(retry_after, Some(1));
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["code"], "TooManyRequests");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("throttling.rest_rate_per_key"),
        "{body}"
    );
    let (status, _, body) = answer(call(&secondary).await.unwrap()).await;
    assert_eq!(status, 202, "the secondary key's own allowance: {body}");
    for _ in 0..5 {
        assert_eq!(health(&server).await, 200);
    }
    assert_eq!(throttled(&server, "rest").await, 1);
    // The second call, any that passed before the refusal, the secondary key's.
    for _ in 0..(2 + extra) {
        client.expect(&Msg::invocation("m", &[json!("rest")])).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(answer(call(&primary).await.unwrap()).await.0, 202);
    client.expect(&Msg::invocation("m", &[json!("rest")])).await;
}

/// Handshakes in progress (bound 3): three WebSockets that never send their handshake hold
/// the bound; a fourth WebSocket (with or without negotiate) and a long-polling connect get
/// 503 with `Retry-After`, counted; health, metrics, an app server and the bystander are
/// unaffected; a handshake that arrives, or a socket that goes away, frees a place.
#[tokio::test]
async fn handshakes_in_progress_are_bounded() {
    let mut config = Config::default();
    config.throttling.max_handshakes_in_progress = 3;
    let server = TestServer::start_with(config).await;
    let mut client = bystander(&server).await;
    let token = server.token("chat", None);
    let mut silent = Vec::new();
    for _ in 0..3 {
        silent.push(silent_websocket(&server, &token, None).await.unwrap());
    }
    let refused = silent_websocket(&server, &token, None).await.err();
    assert_eq!(refused, Some((503, Some(1))));
    let http = common::Http::for_user(&server, "chat", "poller");
    let id = http.negotiate().await;
    let refused = silent_websocket(&server, &http.token, Some(&id))
        .await
        .err();
    assert_eq!(refused, Some((503, Some(1))), "after a negotiate");
    let (status, retry_after, body) = answer(http.poll(&id).await).await;
    assert_eq!((status, retry_after), (503, Some(1)), "long polling");
    assert!(
        body.contains("throttling.max_handshakes_in_progress"),
        "{body}"
    );
    assert_eq!(throttled(&server, "handshakes").await, 3);
    assert_eq!(health(&server).await, 200);
    let mut app = AppServer::open(&server, "app", "server-1").await;
    app.echo_round_trip().await;
    still_receives(&server, &mut client).await;
    // One silent client completes its handshake: its place is free.
    let mut first = RawClient::from_socket(silent.remove(0), Format::Json);
    first.send_raw(common::HANDSHAKE_JSON).await;
    first.handshake_result().await.unwrap();
    let mut fourth = silent_websocket(&server, &token, None).await.unwrap();
    // One goes away without a word: its place is free once the node notices.
    let mut gone = silent.remove(0);
    let _ = gone.close(None).await;
    while gone.next().await.is_some() {}
    let (server_ref, token_ref) = (&server, &token);
    eventually_async("the closed socket's place freed", WAIT, || async move {
        silent_websocket(server_ref, token_ref, None).await.is_ok()
    })
    .await;
    let _ = fourth.close(None).await;
}

/// A setting that cannot work stops the node at start, naming the key.
#[test]
fn a_burst_without_a_rate_is_refused() {
    let mut config = Config::default();
    config.throttling.rest_burst_per_key = 5;
    let error = config.validate().unwrap_err().to_string();
    assert!(error.contains("throttling.rest_burst_per_key"), "{error}");
    assert!(error.contains("throttling.rest_rate_per_key"), "{error}");
    let mut config = Config::default();
    config.throttling.connect_rate = 2_000_000;
    let error = config.validate().unwrap_err().to_string();
    assert!(error.contains("throttling.connect_rate"), "{error}");
}

/// Pending negotiations are capped per user, and per client address whatever user ids its
/// tokens name: rotating user ids from one address used to pass a per-user cap of 3 (8 of
/// 8 negotiated). The refusal is the per-user cap's; other addresses are not affected.
#[tokio::test]
async fn pending_negotiations_are_capped_per_address_too() {
    let mut config = Config::default();
    config.limits.max_pending_negotiations_per_user = 3;
    config.limits.max_pending_negotiations_per_address = 3;
    // Loopback, where the test connects from, is exempt by default.
    config.limits.exempt_addresses = Vec::new();
    let server = TestServer::start_with(config).await;
    let rotating: IpAddr = "127.0.0.2".parse().unwrap();
    let mut answers = Vec::new();
    for n in 0..8 {
        let token = server.token("chat", Some(&format!("user-{n}")));
        answers.push(negotiate(&server, &token, Some(rotating), None).await);
    }
    let passed = answers.iter().filter(|answer| answer.0 == 200).count();
    assert_eq!(passed, 3, "{answers:?}");
    let (status, _, by_address) = &answers[3];
    assert_eq!(*status, 429);
    // The per-user cap's own refusal, from another address, reads the same.
    let one_user = server.token("chat", Some("alice"));
    let other: IpAddr = "127.0.0.3".parse().unwrap();
    for _ in 0..3 {
        assert_eq!(
            negotiate(&server, &one_user, Some(other), None).await.0,
            200
        );
    }
    let (status, _, by_user) = negotiate(&server, &one_user, Some(other), None).await;
    assert_eq!(status, 429);
    assert_eq!(by_address, &by_user);
    assert!(
        by_user.contains("too many negotiated connections"),
        "{by_user}"
    );
    let fresh: IpAddr = "127.0.0.4".parse().unwrap();
    let token = server.token("chat", Some("user-9"));
    assert_eq!(negotiate(&server, &token, Some(fresh), None).await.0, 200);
}

/// `limits.max_connections_per_user` (off by default): with 2, a user's third connection is
/// refused with 429 and the setting's name, at negotiate once two are connected, and at the
/// transport's connect when it was negotiated before; another user is not affected, and a
/// closed connection makes room.
#[tokio::test]
async fn connections_per_user_can_be_capped() {
    let mut config = Config::default();
    config.limits.max_connections_per_user = 2;
    let server = TestServer::start_with(config).await;
    let alice = server.token("chat", Some("alice"));
    let early = switchyard_client::negotiate(&server.client_url("chat"), &alice, 1)
        .await
        .unwrap();
    let mut connected = Vec::new();
    for _ in 0..2 {
        let (mut client, _) = RawClient::start(&server, "chat", &alice, Format::Json).await;
        client.handshake_result().await.unwrap();
        connected.push(client);
    }
    let (status, _, body) = negotiate(&server, &alice, None, None).await;
    assert_eq!(status, 429, "{body}");
    assert!(body.contains("limits.max_connections_per_user"), "{body}");
    let refused = silent_websocket(&server, &alice, Some(&early.id_value)).await;
    assert_eq!(refused.err().map(|(status, _)| status), Some(429));
    let bob = server.token("chat", Some("bob"));
    assert_eq!(negotiate(&server, &bob, None, None).await.0, 200);
    connected.pop().unwrap().close().await;
    let mut again = None;
    for _ in 0..50 {
        let (status, _, _) = negotiate(&server, &alice, None, None).await;
        if status == 200 {
            again = Some(status);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(again, Some(200), "a closed connection made no room");
}
