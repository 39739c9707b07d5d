//! The client endpoint over WebSockets, against a real node on port 0.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{eventually, eventually_async, within, TestServer};
use serde_json::json;
use switchyard_client::{negotiate, ClientError, WsClient};
use switchyard_hub_protocol::{Format, HubMessage};

const WAIT: Duration = Duration::from_secs(5);

async fn connect(
    server: &TestServer,
    hub: &str,
    user: Option<&str>,
    format: Format,
) -> (WsClient, String) {
    let token = server.token(hub, user);
    let negotiated = negotiate(&server.client_url(hub), &token, 1).await.unwrap();
    let client = WsClient::connect(
        &server.ws_url(hub, Some(&negotiated.id_value)),
        Some(&token),
        format,
    )
    .await
    .unwrap();
    (client, negotiated.connection_id)
}

async fn expect_invocation(client: &mut WsClient, target: &str) -> Vec<serde_json::Value> {
    match within("invocation", WAIT, client.next_non_ping())
        .await
        .unwrap()
    {
        HubMessage::Invocation {
            target: t,
            arguments,
            invocation_id,
            ..
        } => {
            assert_eq!(t, target);
            assert_eq!(invocation_id, None);
            arguments
        }
        other => panic!("expected invocation, got {other:?}"),
    }
}

#[tokio::test]
async fn json_and_messagepack_clients_receive_one_broadcast() {
    let server = TestServer::start().await;
    let (mut json_client, _) = connect(&server, "chat", None, Format::Json).await;
    let (mut msgpack_client, _) = connect(&server, "chat", None, Format::MessagePack).await;
    eventually("both registered", WAIT, || {
        server.node.client_connection_count() == 2
    })
    .await;
    let args = [
        json!("hello"),
        json!(42),
        json!({"a": [1, 2.5, null]}),
        json!(true),
    ];
    server.broadcast("chat", "newMessage", &args);
    assert_eq!(
        expect_invocation(&mut json_client, "newMessage").await,
        args
    );
    assert_eq!(
        expect_invocation(&mut msgpack_client, "newMessage").await,
        args
    );
    server.stop().await;
}

#[tokio::test]
async fn negotiate_version_zero_uses_the_connection_id() {
    let server = TestServer::start().await;
    let token = server.token("chat", None);
    let negotiated = negotiate(&server.client_url("chat"), &token, 0)
        .await
        .unwrap();
    assert_eq!(negotiated.version, 0);
    assert!(negotiated.raw.get("connectionToken").is_none());
    assert_eq!(negotiated.id_value, negotiated.connection_id);
    let mut client = WsClient::connect(
        &server.ws_url("chat", Some(&negotiated.id_value)),
        Some(&token),
        Format::Json,
    )
    .await
    .unwrap();
    server.broadcast("chat", "m", &[]);
    expect_invocation(&mut client, "m").await;
}

#[tokio::test]
async fn version_one_connection_id_is_not_accepted_as_id() {
    let server = TestServer::start().await;
    let token = server.token("chat", None);
    let negotiated = negotiate(&server.client_url("chat"), &token, 1)
        .await
        .unwrap();
    assert_ne!(negotiated.id_value, negotiated.connection_id);
    let err = WsClient::connect(
        &server.ws_url("chat", Some(&negotiated.connection_id)),
        Some(&token),
        Format::Json,
    )
    .await
    .err()
    .expect("connection id is not the token");
    assert!(err.to_string().contains("404"), "{err}");
}

#[tokio::test]
async fn id_less_websocket_with_bearer_token_works() {
    let server = TestServer::start().await;
    let token = server.token("chat", Some("alice"));
    let mut client = WsClient::connect(&server.ws_url("chat", None), Some(&token), Format::Json)
        .await
        .unwrap();
    let user = switchyard_core::UserId::new("alice").unwrap();
    let hub = switchyard_core::HubName::new("chat", None).unwrap();
    eventually_async("user registered", WAIT, || async {
        server
            .node
            .executor()
            .execute(
                &hub,
                switchyard_node::Command::Check(switchyard_node::Check::User(user.clone())),
            )
            .await
            .is_ok()
    })
    .await;
    let executor = server.node.executor();
    let payloads = executor.encode_invocation(&hub, "direct", &[json!(1)]);
    executor.send(&hub, switchyard_core::Target::User(user), payloads);
    assert_eq!(
        expect_invocation(&mut client, "direct").await,
        vec![json!(1)]
    );
}

#[tokio::test]
async fn token_in_access_token_query_is_accepted() {
    let server = TestServer::start().await;
    let token = server.token("chat", None);
    let url = format!("{}&access_token={token}", server.ws_url("chat", None));
    let mut client = WsClient::connect(&url, None, Format::Json).await.unwrap();
    eventually("registered", WAIT, || {
        server.node.client_connection_count() == 1
    })
    .await;
    server.broadcast("chat", "m", &[]);
    expect_invocation(&mut client, "m").await;
}

#[tokio::test]
async fn second_websocket_for_the_same_id_is_refused() {
    let server = TestServer::start().await;
    let token = server.token("chat", None);
    let negotiated = negotiate(&server.client_url("chat"), &token, 1)
        .await
        .unwrap();
    let url = server.ws_url("chat", Some(&negotiated.id_value));
    let _first = WsClient::connect(&url, Some(&token), Format::Json)
        .await
        .unwrap();
    let err = WsClient::connect(&url, Some(&token), Format::Json)
        .await
        .err()
        .unwrap();
    assert!(err.to_string().contains("409"), "{err}");
}

#[tokio::test]
async fn handshake_errors_are_answered_and_close_only_that_connection() {
    let server = TestServer::start().await;
    let (mut bystander, _) = connect(&server, "chat", None, Format::Json).await;
    for (request, expected) in [
        (
            &b"{\"protocol\":\"xml\",\"version\":1}\x1e"[..],
            "The protocol 'xml' is not supported.",
        ),
        (
            b"{\"protocol\":\"json\",\"version\":3}\x1e",
            "The server does not support version 3 of the 'json' protocol.",
        ),
        (
            b"{\"protocol\":\"json\"}\x1e",
            "An unexpected error occurred during connection handshake.",
        ),
        (
            b"not json\x1e",
            "An unexpected error occurred during connection handshake.",
        ),
    ] {
        let token = server.token("chat", None);
        let (mut socket, _) = tokio_tungstenite::connect_async(
            tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(
                format!("{}&access_token={token}", server.ws_url("chat", None)),
            )
            .unwrap(),
        )
        .await
        .unwrap();
        use futures_util::{SinkExt, StreamExt};
        socket
            .send(tokio_tungstenite::tungstenite::Message::Text(
                String::from_utf8_lossy(request).into_owned().into(),
            ))
            .await
            .unwrap();
        let reply = within("handshake reply", WAIT, socket.next())
            .await
            .unwrap()
            .unwrap();
        let text = reply.into_text().unwrap();
        assert!(text.starts_with("{\"error\":\""), "{text}");
        assert!(text.contains(expected), "{text} should contain {expected}");
        assert!(text.ends_with('\u{1e}'));
        // Then the socket closes.
        let next = within("close", WAIT, socket.next()).await;
        assert!(
            matches!(
                next,
                None | Some(Ok(tokio_tungstenite::tungstenite::Message::Close(_))) | Some(Err(_))
            ),
            "{next:?}"
        );
    }
    server.broadcast("chat", "still", &[]);
    expect_invocation(&mut bystander, "still").await;
}

#[tokio::test]
async fn client_invocation_closes_the_sender_but_not_others() {
    let server = TestServer::start().await;
    let (mut sender, _) = connect(&server, "chat", None, Format::Json).await;
    let (mut bystander, _) = connect(&server, "chat", None, Format::MessagePack).await;
    sender
        .send_raw(b"{\"type\":1,\"target\":\"send\",\"arguments\":[]}\x1e")
        .await
        .unwrap();
    match within("close", WAIT, sender.next_non_ping()).await.unwrap() {
        HubMessage::Close {
            error: Some(error),
            allow_reconnect,
        } => {
            assert!(error.contains("not supported"), "{error}");
            assert!(!allow_reconnect);
        }
        other => panic!("expected Close, got {other:?}"),
    }
    eventually("sender removed", WAIT, || {
        server.node.client_connection_count() == 1
    })
    .await;
    server.broadcast("chat", "m", &[json!("x")]);
    assert_eq!(
        expect_invocation(&mut bystander, "m").await,
        vec![json!("x")]
    );
}

#[tokio::test]
async fn client_close_message_is_answered_with_close() {
    let server = TestServer::start().await;
    let (mut client, _) = connect(&server, "chat", None, Format::Json).await;
    client.send_raw(b"{\"type\":7}\x1e").await.unwrap();
    match within("close", WAIT, client.next_non_ping()).await.unwrap() {
        HubMessage::Close {
            error: None,
            allow_reconnect: false,
        } => {}
        other => panic!("expected empty Close, got {other:?}"),
    }
    eventually("removed", WAIT, || {
        server.node.client_connection_count() == 0
    })
    .await;
}

#[tokio::test]
async fn malformed_and_oversize_messages_close_only_the_offender() {
    let mut config = switchyard_node::Config::default();
    config.limits.max_client_message_size = 4096;
    let server = TestServer::start_with(config).await;
    let (mut bystander, _) = connect(&server, "chat", None, Format::Json).await;

    let (mut bad_json, _) = connect(&server, "chat", None, Format::Json).await;
    bad_json.send_raw(b"{\"type\":\x1e").await.unwrap();
    assert!(matches!(
        within("close", WAIT, bad_json.next_non_ping())
            .await
            .unwrap(),
        HubMessage::Close { error: Some(_), .. }
    ));

    let (mut huge, _) = connect(&server, "chat", None, Format::Json).await;
    let big = format!("{{\"type\":6,\"pad\":\"{}\"}}\x1e", "x".repeat(5000));
    huge.send_raw(big.as_bytes()).await.unwrap();
    match within("close", WAIT, huge.next_non_ping()).await {
        Ok(HubMessage::Close {
            error: Some(error), ..
        }) => assert!(
            error.contains("maximum message size") || error.contains("Message too long"),
            "{error}"
        ),
        Err(ClientError::Closed) | Err(ClientError::WebSocket(_)) => {} // the frame limit cut the socket first
        other => panic!("unexpected {other:?}"),
    }

    // Over the WebSocket frame limit (4 x the message limit): cut off by the WebSocket
    // layer, and closed for the same reason.
    let (mut huger, _) = connect(&server, "chat", None, Format::Json).await;
    let bigger = format!("{{\"type\":6,\"pad\":\"{}\"}}\x1e", "x".repeat(20_000));
    huger.send_raw(bigger.as_bytes()).await.unwrap();
    let _ = within("close", WAIT, huger.next_non_ping()).await;
    eventually(
        "both oversize clients closed as message_too_large",
        WAIT,
        || {
            server.node.metrics.encode().contains(
                "switchyard_client_connections_closed_total{reason=\"message_too_large\"} 2",
            )
        },
    )
    .await;

    let (mut bad_varint, _) = connect(&server, "chat", None, Format::MessagePack).await;
    bad_varint
        .send_raw(&[0xff, 0xff, 0xff, 0xff, 0xff, 0x01])
        .await
        .unwrap();
    assert!(matches!(
        within("close", WAIT, bad_varint.next_non_ping())
            .await
            .unwrap(),
        HubMessage::Close { error: Some(_), .. }
    ));

    eventually("offenders removed", WAIT, || {
        server.node.client_connection_count() == 1
    })
    .await;
    server.broadcast("chat", "m", &[]);
    expect_invocation(&mut bystander, "m").await;
}

#[tokio::test]
async fn keep_alive_pings_and_client_timeout() {
    let mut config = switchyard_node::Config::default();
    config.timeouts.keep_alive_interval = Duration::from_millis(200);
    config.timeouts.client_timeout = Duration::from_millis(1500);
    let server = TestServer::start_with(config).await;
    let (mut client, _) = connect(&server, "chat", None, Format::Json).await;
    assert!(matches!(
        within("ping", WAIT, client.next()).await.unwrap(),
        HubMessage::Ping
    ));
    // A client that pings once arms the timeout; then silence closes it.
    client.send_raw(b"{\"type\":6}\x1e").await.unwrap();
    match within("timeout close", WAIT, client.next_non_ping())
        .await
        .unwrap()
    {
        HubMessage::Close {
            error: Some(error),
            allow_reconnect: true,
        } => assert!(error.contains("timeout"), "{error}"),
        other => panic!("expected Close, got {other:?}"),
    }
}

#[tokio::test]
async fn handshake_timeout_closes_the_socket() {
    let mut config = switchyard_node::Config::default();
    config.timeouts.handshake_timeout = Duration::from_millis(500);
    let server = TestServer::start_with(config).await;
    let token = server.token("chat", None);
    let request = tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(
        format!("{}&access_token={token}", server.ws_url("chat", None)),
    )
    .unwrap();
    let (mut socket, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    use futures_util::StreamExt;
    let reply = within("handshake error", WAIT, socket.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        reply.into_text().unwrap().as_str(),
        "{\"error\":\"Handshake was canceled.\"}\u{1e}"
    );
    let next = within("closed", WAIT, socket.next()).await;
    assert!(
        matches!(
            next,
            None | Some(Ok(tokio_tungstenite::tungstenite::Message::Close(_))) | Some(Err(_))
        ),
        "{next:?}"
    );
    // Keep reading so the client answers the close frame.
    while let Some(Ok(_)) = within("socket ends", WAIT, socket.next()).await {}
    eventually("removed", WAIT, || {
        server.node.client_connection_count() == 0
    })
    .await;
}

#[tokio::test]
async fn slow_consumer_is_closed_and_others_get_everything() {
    let mut config = switchyard_node::Config::default();
    config.limits.max_pending_bytes_per_connection = 64 * 1024;
    let server = TestServer::start_with(config).await;
    let (mut reader, _) = connect(&server, "chat", None, Format::Json).await;
    let (stalled, _) = connect(&server, "chat", None, Format::Json).await; // never reads
    eventually("both registered", WAIT, || {
        server.node.client_connection_count() == 2
    })
    .await;
    let padding = "y".repeat(32 * 1024);
    let total = 500;
    let received = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let reading = tokio::spawn({
        let received = received.clone();
        async move {
            for n in 0..total {
                let args = expect_invocation(&mut reader, "m").await;
                assert_eq!(args[0], json!(n), "message {n} out of order or lost");
                received.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            reader
        }
    });
    for n in 0..total {
        server.broadcast("chat", "m", &[json!(n), json!(padding)]);
        // Pace the sender to a reader that keeps up; the stalled client falls behind anyway.
        {
            let sent = n + 1;
            eventually("reader keeps up", WAIT, || {
                received.load(std::sync::atomic::Ordering::Relaxed) >= sent
            })
            .await;
        }
    }
    let _reader = within("reader got all", Duration::from_secs(30), reading)
        .await
        .unwrap();
    eventually("stalled client cut off", WAIT, || {
        server.node.client_connection_count() == 1
    })
    .await;
    drop(stalled);
}

#[tokio::test]
async fn connection_limit_answers_429() {
    let mut config = switchyard_node::Config::default();
    config.limits.max_client_connections = 1;
    let server = TestServer::start_with(config).await;
    let token = server.token("chat", None);
    // A negotiated connection is not a client yet: a second negotiate still works.
    negotiate(&server.client_url("chat"), &token, 1)
        .await
        .unwrap();
    let (_connected, _) = connect(&server, "chat", None, Format::Json).await;
    match negotiate(&server.client_url("chat"), &token, 1).await {
        Err(ClientError::Negotiate { status: 429, .. }) => {}
        other => panic!("expected 429, got {other:?}"),
    }
}

#[tokio::test]
async fn shutdown_sends_reconnectable_close() {
    let server = TestServer::start().await;
    let (mut client, _) = connect(&server, "chat", None, Format::Json).await;
    eventually("registered", WAIT, || {
        server.node.client_connection_count() == 1
    })
    .await;
    let stopping = tokio::spawn(server.stop());
    match within("close", WAIT, client.next_non_ping()).await.unwrap() {
        HubMessage::Close {
            allow_reconnect: true,
            ..
        } => {}
        other => panic!("expected Close, got {other:?}"),
    }
    stopping.await.unwrap();
}

#[tokio::test]
async fn a_flood_of_connects_is_refused_clearly_and_bystanders_keep_receiving() {
    let mut config = switchyard_node::Config::default();
    config.limits.max_pending_negotiations = 199;
    config.timeouts.connect_timeout = Duration::from_secs(2);
    let server = TestServer::start_with(config).await;
    let (mut bystander, _) = connect(&server, "chat", None, Format::Json).await;
    let token = server.token("flood", None);
    let url = server.client_url("flood");
    // Sample the client count during the flood: the limit must hold at every moment. (Under a
    // loaded machine the flood can outlast connect_timeout, so slots freed by negotiated
    // connections that never connected may be reused: more than 199 may be accepted in total.)
    let watching = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let most = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let watcher = {
        let (node, watching, most) = (server.node.clone(), watching.clone(), most.clone());
        tokio::spawn(async move {
            while watching.load(std::sync::atomic::Ordering::Relaxed) {
                most.fetch_max(
                    node.client_connection_count(),
                    std::sync::atomic::Ordering::Relaxed,
                );
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
    };
    let mut attempts = Vec::new();
    for _ in 0..600 {
        let token = token.clone();
        let url = url.clone();
        attempts.push(tokio::spawn(
            async move { negotiate(&url, &token, 1).await },
        ));
    }
    let (mut accepted, mut refused) = (0, 0);
    for attempt in attempts {
        match attempt.await.unwrap() {
            Ok(_) => accepted += 1,
            Err(ClientError::Negotiate { status: 429, body }) => {
                assert!(
                    body.contains("too many negotiated connections are waiting"),
                    "{body}"
                );
                refused += 1;
            }
            Err(other) => panic!("unexpected {other}"),
        }
    }
    watching.store(false, std::sync::atomic::Ordering::Relaxed);
    watcher.await.unwrap();
    assert!(
        most.load(std::sync::atomic::Ordering::Relaxed) <= 200,
        "never more clients than the limit (the bystander counts)"
    );
    assert!(accepted >= 199, "accepted {accepted}");
    assert!(refused >= 1, "refused {refused}");
    assert_eq!(accepted + refused, 600);
    server.broadcast("chat", "still", &[]);
    expect_invocation(&mut bystander, "still").await;
    // Negotiated connections that never connect are discarded, freeing the slots.
    eventually("flood discarded", Duration::from_secs(10), || {
        server.node.client_connection_count() == 1
    })
    .await;
    negotiate(&url, &token, 1).await.unwrap();
}

#[tokio::test]
async fn a_client_close_frame_is_answered_with_a_clean_close() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let server = TestServer::start().await;
    let token = server.token("chat", None);
    let request = tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(
        format!("{}&access_token={token}", server.ws_url("chat", None)),
    )
    .unwrap();
    let (mut socket, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    socket
        .send(Message::Text(
            "{\"protocol\":\"messagepack\",\"version\":1}\u{1e}".into(),
        ))
        .await
        .unwrap();
    // MessagePack connections get binary frames from the handshake response on.
    let reply = within("handshake", WAIT, socket.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reply, Message::Binary(bytes::Bytes::from_static(b"{}\x1e")));
    socket.close(None).await.unwrap();
    let mut answered = false;
    while let Some(message) = within("close reply", WAIT, socket.next()).await {
        if let Ok(Message::Close(frame)) = message {
            let code = frame.map(|f| u16::from(f.code));
            assert!(code.is_none() || code == Some(1000), "{code:?}");
            answered = true;
            break;
        }
    }
    assert!(answered, "the server answered the close frame");
    eventually("removed", WAIT, || {
        server.node.client_connection_count() == 0
    })
    .await;
}
