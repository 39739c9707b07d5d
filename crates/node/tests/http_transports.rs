//! Server-Sent Events, long polling and the HTTP error paths of the client endpoint.

mod common;

use std::time::Duration;

use common::{eventually, within, Http, TestServer, HANDSHAKE_JSON};
use futures_util::StreamExt;
use serde_json::json;
use switchyard_client::negotiate;

const WAIT: Duration = Duration::from_secs(5);
const HANDSHAKE_MSGPACK: &[u8] = b"{\"protocol\":\"messagepack\",\"version\":1}\x1e";

#[tokio::test]
async fn long_polling_json_round_trip() {
    let server = TestServer::start().await;
    let http = Http::new(&server, "chat");
    let id = http.negotiate().await;
    let first = http.poll(&id).await;
    assert_eq!(first.status(), 200);
    assert_eq!(first.headers()["content-type"], "application/octet-stream");
    assert_eq!(first.bytes().await.unwrap().len(), 0);
    assert_eq!(http.post(&id, HANDSHAKE_JSON).await.status(), 200);
    let handshake = http.poll(&id).await;
    assert_eq!(handshake.status(), 200);
    assert_eq!(&handshake.bytes().await.unwrap()[..], b"{}\x1e");
    server.broadcast("chat", "m", &[json!("hi")]);
    server.broadcast("chat", "m", &[json!("again")]);
    let body = http.poll(&id).await.bytes().await.unwrap();
    assert_eq!(
        &body[..],
        &b"{\"type\":1,\"target\":\"m\",\"arguments\":[\"hi\"]}\x1e{\"type\":1,\"target\":\"m\",\"arguments\":[\"again\"]}\x1e"[..]
    );
    assert_eq!(http.delete(&id).await.status(), 202);
    let after = http.poll(&id).await.status();
    assert!(after == 404 || after == 204, "{after}");
    eventually("removed", WAIT, || {
        server.node.client_connection_count() == 0
    })
    .await;
}

#[tokio::test]
async fn long_polling_messagepack_and_close_via_api() {
    let server = TestServer::start().await;
    let http = Http::new(&server, "chat");
    let id = http.negotiate().await;
    http.poll(&id).await;
    http.post(&id, HANDSHAKE_MSGPACK).await;
    assert_eq!(&http.poll(&id).await.bytes().await.unwrap()[..], b"{}\x1e");
    let hub = switchyard_core::HubName::new("chat", None).unwrap();
    let user = switchyard_core::UserId::new("u1").unwrap();
    let close = switchyard_node::Command::Close {
        target: switchyard_core::Target::User(user),
        excluded: vec![],
        reason: Some("bye".into()),
    };
    server.node.executor().execute(&hub, close).await.unwrap();
    let close = http.poll(&id).await;
    assert_eq!(close.status(), 200);
    let body = close.bytes().await.unwrap();
    // [7, "bye", true] framed: 0x07 length, 0x93 0x07 0xa3 b y e 0xc3
    assert_eq!(
        &body[..],
        &[0x07, 0x93, 0x07, 0xa3, b'b', b'y', b'e', 0xc3][..]
    );
    assert_eq!(http.poll(&id).await.status(), 204);
}

#[tokio::test]
async fn newer_poll_supersedes_the_pending_one() {
    let server = TestServer::start().await;
    let http = Http::new(&server, "chat");
    let id = http.negotiate().await;
    http.poll(&id).await;
    http.post(&id, HANDSHAKE_JSON).await;
    http.poll(&id).await; // handshake response
    let pending = tokio::spawn({
        let client = http.client.clone();
        let url = http.url(&id);
        let token = http.token.clone();
        async move {
            client
                .get(url)
                .bearer_auth(token)
                .send()
                .await
                .unwrap()
                .status()
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let newer = tokio::spawn({
        let client = http.client.clone();
        let url = http.url(&id);
        let token = http.token.clone();
        async move { client.get(url).bearer_auth(token).send().await.unwrap() }
    });
    assert_eq!(within("superseded", WAIT, pending).await.unwrap(), 204);
    server.broadcast("chat", "m", &[]);
    let newer = within("newer poll", WAIT, newer).await.unwrap();
    assert_eq!(newer.status(), 200);
    assert!(newer.bytes().await.unwrap().starts_with(b"{\"type\":1"));
}

#[tokio::test]
async fn long_poll_times_out_empty_and_inactive_clients_are_dropped() {
    let mut config = switchyard_node::Config::default();
    config.timeouts.long_poll_timeout = Duration::from_millis(300);
    config.timeouts.long_poll_inactivity = Duration::from_millis(1500);
    let server = TestServer::start_with(config).await;
    let http = Http::new(&server, "chat");
    let id = http.open_long_polling().await;
    let empty = http.poll(&id).await;
    assert_eq!(empty.status(), 200);
    assert_eq!(empty.bytes().await.unwrap().len(), 0);
    eventually("inactive client dropped", WAIT, || {
        server.node.client_connection_count() == 0
    })
    .await;
    assert_eq!(http.poll(&id).await.status(), 404);
    // Counted as inactive, not as closed by the client.
    let metrics = server.metrics_text().await;
    assert!(
        metrics.contains("switchyard_client_connections_closed_total{reason=\"inactive\"} 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn server_sent_events_stream() {
    let server = TestServer::start().await;
    let http = Http::new(&server, "chat");
    let id = http.negotiate().await;
    let response = http.open_sse(&id).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut stream = Box::pin(response.bytes_stream());
    let mut received: Vec<u8> = Vec::new();
    macro_rules! read_until {
        ($needle:expr) => {{
            let needle: &[u8] = $needle;
            while !received.windows(needle.len()).any(|w| w == needle) {
                let chunk = within("sse data", WAIT, stream.next())
                    .await
                    .unwrap()
                    .unwrap();
                received.extend_from_slice(&chunk);
            }
        }};
    }
    read_until!(b":\r\n");
    assert_eq!(http.post(&id, HANDSHAKE_JSON).await.status(), 200);
    read_until!(b"data: {}\x1e\r\n\r\n");
    server.broadcast("chat", "m", &[json!(1)]);
    read_until!(b"data: {\"type\":1,\"target\":\"m\",\"arguments\":[1]}\x1e\r\n\r\n");
    // Messages sent by POST are read; a Close from the client ends the connection.
    assert_eq!(http.post(&id, b"{\"type\":7}\x1e").await.status(), 200);
    read_until!(b"data: {\"type\":7}\x1e\r\n\r\n");
    eventually("removed", WAIT, || {
        server.node.client_connection_count() == 0
    })
    .await;
}

#[tokio::test]
async fn messagepack_over_sse_is_refused_in_the_handshake() {
    let server = TestServer::start().await;
    let http = Http::new(&server, "chat");
    let id = http.negotiate().await;
    let response = http.open_sse(&id).await;
    let mut stream = response.bytes_stream();
    http.post(&id, HANDSHAKE_MSGPACK).await;
    let mut received = Vec::new();
    while let Ok(Some(Ok(chunk))) = tokio::time::timeout(WAIT, stream.next()).await {
        received.extend_from_slice(&chunk);
    }
    let text = String::from_utf8_lossy(&received);
    assert!(
        text.contains("Cannot use the 'messagepack' protocol on the current transport. The transport does not support 'Binary' transfer format."),
        "{text}"
    );
}

#[tokio::test]
async fn transport_rules_and_http_errors() {
    let server = TestServer::start().await;
    let http = Http::new(&server, "chat");
    // No id, unknown id.
    let no_id = http
        .client
        .get(&http.base)
        .bearer_auth(&http.token)
        .send()
        .await
        .unwrap();
    assert_eq!(no_id.status(), 400);
    assert_eq!(no_id.text().await.unwrap(), "Connection ID required");
    let unknown = http.poll("nope").await;
    assert_eq!(unknown.status(), 404);
    assert_eq!(unknown.text().await.unwrap(), "No Connection with that ID");
    assert_eq!(http.post("nope", b"x").await.status(), 404);
    // Transport change.
    let id = http.negotiate().await;
    http.poll(&id).await;
    let sse = http.open_sse(&id).await;
    assert_eq!(sse.status(), 400);
    assert_eq!(
        sse.text().await.unwrap(),
        "Cannot change transports mid-connection"
    );
    // Body over the limit.
    let big = vec![b'x'; 1024 * 1024 + 1];
    assert_eq!(http.post(&id, &big).await.status(), 413);
    // DELETE on a connection that is not long polling.
    let other = http.negotiate().await;
    assert_eq!(http.delete(&other).await.status(), 400);
    // Unsupported method.
    let put = http
        .client
        .put(http.url(&id))
        .bearer_auth(&http.token)
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 405);
    // Negotiate over GET.
    let get = http
        .client
        .get(format!("{}/client/negotiate?hub=chat", server.http()))
        .bearer_auth(&http.token)
        .send()
        .await
        .unwrap();
    assert_eq!(get.status(), 405);
}

#[tokio::test]
async fn negotiate_rules() {
    let server = TestServer::start().await;
    let client = reqwest::Client::new();
    let token = server.token("chat", None);
    let post = |url: String, token: Option<String>| {
        let client = client.clone();
        async move {
            let mut request = client.post(url);
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            let response = request.send().await.unwrap();
            (response.status().as_u16(), response.text().await.unwrap())
        }
    };
    let base = format!("{}/client/negotiate", server.http());
    let (status, body) = post(
        format!("{base}?hub=chat&negotiateVersion=1"),
        Some(token.clone()),
    )
    .await;
    assert_eq!(status, 200);
    let value: serde_json::Value = serde_json::from_str(&body).unwrap();
    let keys: Vec<&String> = value.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            "negotiateVersion",
            "connectionId",
            "connectionToken",
            "availableTransports"
        ]
    );
    assert!(body.contains(r#""availableTransports":[{"transport":"WebSockets","transferFormats":["Text","Binary"]},{"transport":"ServerSentEvents","transferFormats":["Text"]},{"transport":"LongPolling","transferFormats":["Text","Binary"]}]"#), "{body}");
    assert_eq!(value["connectionId"].as_str().unwrap().len(), 22);
    let (_, body) = post(
        format!("{base}?hub=chat&negotiateVersion=7"),
        Some(token.clone()),
    )
    .await;
    assert!(body.starts_with(r#"{"negotiateVersion":1,"#), "{body}");
    let (status, body) = post(
        format!("{base}?hub=chat&negotiateVersion=x"),
        Some(token.clone()),
    )
    .await;
    assert_eq!(
        (status, body.as_str()),
        (
            200,
            r#"{"error":"The client requested a non-integer protocol version."}"#
        )
    );
    // Stale id and unknown keys are ignored.
    assert_eq!(
        post(
            format!("{base}?hub=chat&id=old&foo=bar"),
            Some(token.clone())
        )
        .await
        .0,
        200
    );
    // Hub rules.
    assert_eq!(post(base.clone(), Some(token.clone())).await.0, 400);
    assert_eq!(
        post(format!("{base}?hub=chat&hub=chat"), Some(token.clone()))
            .await
            .0,
        400
    );
    assert_eq!(
        post(format!("{base}?hub=../etc"), Some(token.clone()))
            .await
            .0,
        400
    );
    // Tokens.
    assert_eq!(post(format!("{base}?hub=chat"), None).await.0, 401);
    let other_hub = server.token("other", None);
    assert_eq!(
        post(format!("{base}?hub=chat"), Some(other_hub)).await.0,
        401
    );
    let expired = switchyard_auth::TokenBuilder::new(server.client_url("chat"))
        .sign(switchyard_auth::EMULATOR_ACCESS_KEY, common::now() - 7200);
    assert_eq!(post(format!("{base}?hub=chat"), Some(expired)).await.0, 401);
    let forged = switchyard_auth::TokenBuilder::new(server.client_url("chat")).sign(
        "ZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZ",
        common::now(),
    );
    assert_eq!(post(format!("{base}?hub=chat"), Some(forged)).await.0, 401);
    // Audience without the port, and the hub's case, are accepted.
    let no_port = switchyard_auth::TokenBuilder::new("http://127.0.0.1/client/?hub=Chat")
        .sign(switchyard_auth::EMULATOR_ACCESS_KEY, common::now());
    assert_eq!(post(format!("{base}?hub=chat"), Some(no_port)).await.0, 200);
    // Token in the query.
    assert_eq!(
        post(format!("{base}?hub=chat&access_token={token}"), None)
            .await
            .0,
        200
    );
}

#[tokio::test]
async fn transport_claims_restrict_transports() {
    let server = TestServer::start().await;
    let token = server.token_with("chat", &[("asrs.s.htt", "1")]);
    let negotiated = negotiate(&server.client_url("chat"), &token, 1)
        .await
        .unwrap();
    assert_eq!(negotiated.transports, vec!["WebSockets".to_string()]);
    let poll = reqwest::Client::new()
        .get(format!(
            "{}&id={}",
            server.client_url("chat"),
            negotiated.id_value
        ))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(poll.status(), 404);
    assert_eq!(
        poll.text().await.unwrap(),
        "LongPolling transport not supported by this end point type"
    );
}

#[tokio::test]
async fn negotiated_but_never_connected_is_discarded() {
    let mut config = switchyard_node::Config::default();
    config.timeouts.connect_timeout = Duration::from_millis(500);
    let server = TestServer::start_with(config).await;
    let http = Http::new(&server, "chat");
    let id = http.negotiate().await;
    eventually("discarded", WAIT, || {
        server.node.client_connection_count() == 0
    })
    .await;
    assert_eq!(http.poll(&id).await.status(), 404);
}

#[tokio::test]
async fn close_on_auth_expiry() {
    let server = TestServer::start().await;
    let expires = (common::now() + 1).to_string();
    let token = server.token_with("chat", &[("asrs.s.coae", "true"), ("asrs.s.aeo", &expires)]);
    let negotiated = negotiate(&server.client_url("chat"), &token, 1)
        .await
        .unwrap();
    let mut client = switchyard_client::WsClient::connect(
        &server.ws_url("chat", Some(&negotiated.id_value)),
        Some(&token),
        switchyard_hub_protocol::Format::Json,
    )
    .await
    .unwrap();
    match within("auth expiry close", WAIT, client.next_non_ping())
        .await
        .unwrap()
    {
        switchyard_hub_protocol::HubMessage::Close {
            error: Some(error),
            allow_reconnect: true,
        } => {
            assert!(error.contains("expired"), "{error}")
        }
        other => panic!("expected Close, got {other:?}"),
    }
}

#[tokio::test]
async fn an_abandoned_long_poll_does_not_keep_the_connection() {
    let mut config = switchyard_node::Config::default();
    config.timeouts.long_poll_inactivity = Duration::from_millis(1000);
    let server = TestServer::start_with(config).await;
    let http = Http::new(&server, "chat");
    let id = http.open_long_polling().await;
    http.abandon_poll(&id).await;
    eventually("abandoned connection dropped", WAIT, || {
        server.node.client_connection_count() == 0
    })
    .await;
}

#[tokio::test]
async fn delete_after_an_abandoned_poll_ends_the_connection() {
    let server = TestServer::start().await;
    let http = Http::new(&server, "chat");
    let id = http.open_long_polling().await;
    http.abandon_poll(&id).await;
    assert_eq!(http.delete(&id).await.status(), 202);
    eventually("deleted", WAIT, || {
        server.node.client_connection_count() == 0
    })
    .await;
    assert_eq!(http.delete(&id).await.status(), 404);
}

#[tokio::test]
async fn metrics_are_exported() {
    let server = TestServer::start().await;
    let http = Http::new(&server, "chat");
    let id = http.open_long_polling().await;
    server.broadcast("chat", "m", &[]);
    http.poll(&id).await;
    assert_eq!(http.delete(&id).await.status(), 202);
    let text = server.metrics_text().await;
    for expected in [
        "switchyard_client_connections{transport=\"LongPolling\"} 0",
        "switchyard_client_connections_opened_total 1",
        "switchyard_client_connections_closed_total{reason=\"client_closed\"} 1",
        "switchyard_frames_delivered_total 1",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in\n{text}");
    }
}
