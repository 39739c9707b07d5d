//! Handshake.

use super::*;

#[tokio::test]
async fn handshake_is_accepted_with_an_empty_error_and_echoes_the_cid() {
    let server = TestServer::start().await;
    let token = server.server_token("chat", "s1");
    let url = format!("{}&cid=my-cid-1", server.server_ws_url("chat"));
    let mut app = AppServer::new(dial_url(&url, Some(&token), Some("s1")).await.unwrap());
    let response = app.handshake(handshake_request(1)).await;
    assert_eq!(response.error_message, "");
    assert!(response.is_success());
    assert_eq!(response.connection_id.as_deref(), Some("my-cid-1"));
    app.echo_round_trip().await;
}

#[tokio::test]
async fn handshake_and_messages_split_at_odd_points_and_batched() {
    let server = TestServer::start().await;
    let token = server.server_token("chat", "s1");
    let mut app = AppServer::new(
        dial(&server, "chat", Some(&token), Some("s1"))
            .await
            .unwrap(),
    );
    // The handshake in three frames, the last also carrying an echo and half of another.
    let mut stream = encoded(&handshake_request(0).into()).to_vec();
    stream.extend_from_slice(&encoded(&Ping::new(&[("echo", "one")]).into()));
    let second = encoded(&Ping::new(&[("echo", "two")]).into());
    stream.extend_from_slice(&second[..3]);
    app.send_bytes(&stream[..1]).await;
    app.send_bytes(&stream[1..4]).await;
    app.send_bytes(&stream[4..]).await;
    match app.next().await {
        ServiceMessage::HandshakeResponse(r) => assert_eq!(r.error_message, ""),
        other => panic!("expected the handshake response, got {other:?}"),
    }
    assert_eq!(app.ping("echo").await.get("echo"), Some("one"));
    // The rest of the second echo, one byte per frame.
    for byte in &second[3..] {
        app.send_bytes(&[*byte]).await;
    }
    assert_eq!(app.ping("echo").await.get("echo"), Some("two"));
}

/// Sends `first` (raw bytes) as the first frame and expects a refusing HandshakeResponse
/// containing `error_part`, then the close.
pub(crate) async fn expect_handshake_refused(server: &TestServer, first: &[u8], error_part: &str) {
    let token = server.server_token("chat", "s1");
    let mut app = AppServer::new(
        dial(server, "chat", Some(&token), Some("s1"))
            .await
            .unwrap(),
    );
    if !first.is_empty() {
        app.send_bytes(first).await;
    }
    let seen = app.until_closed().await;
    match seen.as_slice() {
        [ServiceMessage::HandshakeResponse(r)] => {
            assert!(
                r.error_message.contains(error_part),
                "error {:?} should mention {error_part:?}",
                r.error_message
            );
        }
        other => panic!("expected one refusing HandshakeResponse, got {other:?}"),
    }
}

#[tokio::test]
async fn handshake_with_version_2_is_refused() {
    let server = TestServer::start().await;
    let mut request = handshake_request(0);
    request.version = 2;
    expect_handshake_refused(&server, &encoded(&request.into()), "version 2").await;
    assert_eq!(server.node.server_connection_count(), 0);
}

#[tokio::test]
async fn handshake_with_an_unknown_connection_type_is_refused() {
    let server = TestServer::start().await;
    let mut request = handshake_request(0);
    request.connection_type = 7;
    expect_handshake_refused(&server, &encoded(&request.into()), "connection type 7").await;
}

#[tokio::test]
async fn a_first_message_that_is_not_a_handshake_is_refused() {
    let server = TestServer::start().await;
    let ping = encoded(&Ping::new(&[("echo", "x")]).into());
    expect_handshake_refused(&server, &ping, "handshake").await;
}

#[tokio::test]
async fn no_handshake_in_time_is_refused() {
    let mut config = Config::default();
    config.timeouts.server_handshake_timeout = Duration::from_millis(300);
    let server = TestServer::start_with(config).await;
    let started = tokio::time::Instant::now();
    expect_handshake_refused(&server, &[], "handshake").await;
    assert!(started.elapsed() >= Duration::from_millis(250));
}

#[tokio::test]
async fn serverless_mode_refuses_app_servers() {
    let server = TestServer::start_with(Config {
        mode: ServiceMode::Serverless,
        ..Config::default()
    })
    .await;
    expect_handshake_refused(
        &server,
        &encoded(&handshake_request(0).into()),
        "serverless",
    )
    .await;
    assert_eq!(server.node.server_connection_count(), 0);
}

/// `garbage` after the handshake: that connection gets a ServiceError and is closed (its
/// clients with it); another connection of the hub and its clients keep working.
pub(crate) async fn garbage_closes_only_that_connection(garbage: &[u8]) {
    let server = TestServer::start_with(default_mode()).await;
    let hub = "chat";
    let mut bad = AppServer::open(&server, hub, "bad").await;
    let mut good = AppServer::open(&server, hub, "good").await;
    let (mut bad_client, _) = connect_client(
        &server,
        &mut bad,
        hub,
        &sticky_token(&server, hub, "u-bad", "bad"),
        Format::Json,
    )
    .await;
    let (mut good_client, good_id) = connect_client(
        &server,
        &mut good,
        hub,
        &sticky_token(&server, hub, "u-good", "good"),
        Format::MessagePack,
    )
    .await;

    bad.send_bytes(garbage).await;
    let seen = bad.until_closed().await;
    assert!(
        matches!(seen.last(), Some(ServiceMessage::ServiceError(e)) if !e.error_message.is_empty()),
        "expected a ServiceError before the close, got {seen:?}"
    );
    assert!(bad_client.until_closed().await.is_some(), "Close message");

    // The other server connection and its client are untouched.
    good.echo_round_trip().await;
    let hello = Msg::invocation("hello", &[json!("still here")]);
    good.send(MultiConnectionData {
        connection_list: vec![good_id.clone()],
        payloads: hello.payloads(),
        ext: Extensions::default(),
    })
    .await;
    good_client.expect(&hello).await;
    let from_client = Msg::invocation("echo", &[json!(1)]);
    good_client.send_raw(&from_client.msgpack).await;
    assert_eq!(good.connection_data(&good_id).await, from_client.msgpack);
    assert_eq!(server.node.server_connection_count(), 1);
}

#[tokio::test]
async fn garbage_six_byte_varint_closes_only_that_connection() {
    garbage_closes_only_that_connection(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x01]).await;
}

#[tokio::test]
async fn garbage_invalid_msgpack_body_closes_only_that_connection() {
    // A valid prefix (3 bytes) with a body that is not a valid message: 0xc1 is never used.
    garbage_closes_only_that_connection(&[0x03, 0x92, 0x06, 0xc1]).await;
}

#[tokio::test]
async fn garbage_non_array_body_closes_the_connection() {
    let server = TestServer::start().await;
    let mut app = AppServer::open(&server, "chat", "s1").await;
    app.send_bytes(&[0x02, 0xa1, b'x']).await;
    let seen = app.until_closed().await;
    assert!(
        matches!(seen.last(), Some(ServiceMessage::ServiceError(_))),
        "got {seen:?}"
    );
}

/// Found by the `app_server_session` fuzz target: a first message that breaks the framing
/// ended the session before its queue was written, so the app server got the ServiceError
/// (or only the close) without its handshake response. Many times, as it was a race.
#[tokio::test]
async fn a_bad_first_message_still_gets_the_handshake_response_first() {
    let server = TestServer::start().await;
    let token = server.server_token("chat", "s1");
    for round in 0..20 {
        let mut app = AppServer::new(
            dial(&server, "chat", Some(&token), Some("s1"))
                .await
                .unwrap(),
        );
        app.send(handshake_request(0)).await;
        // A six-byte length prefix: the service protocol allows five.
        app.send_bytes(&[0xff, 0xff, 0xff, 0xff, 0xff, 0x01]).await;
        let seen = app.until_closed().await;
        match seen.first() {
            Some(ServiceMessage::HandshakeResponse(r)) => assert_eq!(r.error_message, ""),
            other => panic!("round {round}: the handshake response first, got {other:?}"),
        }
        assert!(
            matches!(seen.get(1), Some(ServiceMessage::ServiceError(_))),
            "round {round}: then the framing error: {seen:?}"
        );
    }
}
