//! Review regressions: handshake ordering, cross-hub isolation.

use super::*;

/// Broadcasts (from the app server or through the node) made while the app server has not
/// yet answered a client's handshake must not reach that client before its handshake
/// response: the client would read them as a malformed response.
#[tokio::test]
async fn nothing_reaches_a_client_before_its_handshake_response() {
    let server = TestServer::start_with(default_mode()).await;
    let hub = "chat";
    let mut app = AppServer::open(&server, hub, "s1").await;
    let token = server.token(hub, Some("early"));
    for format in [Format::Json, Format::MessagePack] {
        let (mut client, id) = Client::start(&server, hub, &token, format).await;
        app.open_connection().await;
        app.connection_data(&id).await;
        let early = Msg::invocation("early", &[json!(1)]);
        app.send(BroadcastData {
            excluded_list: Vec::new(),
            payloads: early.payloads(),
            ext: ext(),
        })
        .await;
        app.send(UserData {
            user_id: "early".into(),
            payloads: early.payloads(),
            ext: ext(),
        })
        .await;
        server.broadcast(hub, "early", &[json!(2)]);
        app.echo_round_trip().await;
        app.send_to(&id, handshake::RESPONSE_OK).await;
        client.handshake_result().await.expect("handshake");
        let after = Msg::invocation("after", &[json!(3)]);
        app.send(BroadcastData {
            excluded_list: Vec::new(),
            payloads: after.payloads(),
            ext: ext(),
        })
        .await;
        client.expect(&after).await;
        client.close().await;
    }
}

/// A client still waiting for its handshake response that the app server closes, or whose
/// app-server connection is lost, reads the reason as a handshake error, not a Close message.
#[tokio::test]
async fn a_client_awaiting_its_handshake_response_gets_the_reason_as_a_handshake_error() {
    let server = TestServer::start_with(default_mode()).await;
    let mut app = AppServer::open(&server, "chat", "s1").await;
    let token = server.token("chat", None);
    let (mut client, id) = Client::start(&server, "chat", &token, Format::MessagePack).await;
    app.open_connection().await;
    app.connection_data(&id).await;
    app.send(CloseConnection {
        connection_id: id.clone(),
        error_message: "go away".into(),
        headers: Vec::new(),
        ext: Extensions::default(),
    })
    .await;
    assert_eq!(client.handshake_result().await, Err("go away".to_string()));

    let mut lost = AppServer::open(&server, "other", "s2").await;
    let token = server.token("other", None);
    let (mut client, id) = Client::start(&server, "other", &token, Format::Json).await;
    lost.open_connection().await;
    lost.connection_data(&id).await;
    drop(lost);
    let error = client.handshake_result().await.expect_err("refused");
    assert!(error.contains("app server"), "{error}");
    eventually("clients gone", WAIT, || {
        server.node.client_connection_count() == 0
    })
    .await;
}

/// An app server of another hub cannot complete (or hijack) a routed client invocation by
/// reusing its id.
#[tokio::test]
async fn a_completion_from_another_hub_does_not_reach_the_caller() {
    let server = TestServer::start_with(default_mode()).await;
    let hub = "chat";
    let mut a = AppServer::open(&server, hub, "A").await;
    let mut b = AppServer::open(&server, hub, "B").await;
    let mut intruder = AppServer::open(&server, "elsewhere", "X").await;
    let token = sticky_token(&server, hub, "target", "B");
    let (_client, id) = connect_client(&server, &mut b, hub, &token, Format::Json).await;
    let invocation_id = format!("{id}-mgr-1");
    a.send(ClientInvocation {
        invocation_id: invocation_id.clone(),
        connection_id: id.clone(),
        caller_server_id: "A".into(),
        payloads: Msg::invocation("x", &[]).payloads(),
        ext: ext(),
    })
    .await;
    a.take("ServiceMapping", |m| {
        matches!(m, ServiceMessage::ServiceMapping(_)).then_some(())
    })
    .await;
    let completion = |payload: &[u8]| ClientCompletion {
        invocation_id: invocation_id.clone(),
        connection_id: id.clone(),
        caller_server_id: "A".into(),
        protocol: "json".into(),
        payload: Bytes::copy_from_slice(payload),
        ext: ext(),
    };
    intruder.send(completion(b"forged")).await;
    intruder.echo_round_trip().await;
    a.assert_quiet().await;
    let genuine = completion(b"genuine");
    b.send(genuine.clone()).await;
    let received = a
        .take("ClientCompletion", |m| match m {
            ServiceMessage::ClientCompletion(c) => Some(c.clone()),
            _ => None,
        })
        .await;
    assert_eq!(received, genuine);
}

#[tokio::test]
async fn only_the_pinned_app_server_may_write_to_a_client() {
    let server = TestServer::start_with(default_mode()).await;
    let hub = "chat";
    let mut s1 = AppServer::open(&server, hub, "s1").await;
    let mut s2 = AppServer::open(&server, hub, "s2").await;
    let token = sticky_token(&server, hub, "u", "s1");
    let (mut client, id) = connect_client(&server, &mut s1, hub, &token, Format::Json).await;
    // Half a message from another app server must not reach (or corrupt) the client's stream.
    let intruder = Msg::invocation("intruder", &[json!(1)]);
    let bytes = intruder.bytes(Format::Json);
    s2.send(ConnectionData {
        connection_id: id.clone(),
        payload: Bytes::copy_from_slice(&bytes[..bytes.len() / 2]),
        ext: ext(),
    })
    .await;
    let own = Msg::invocation("own", &[json!(2)]);
    s1.send(ConnectionData {
        connection_id: id.clone(),
        payload: own.bytes(Format::Json),
        ext: ext(),
    })
    .await;
    client.expect(&own).await;
    // A whole message from another app server is not delivered either.
    s2.send(ConnectionData {
        connection_id: id.clone(),
        payload: intruder.bytes(Format::Json),
        ext: ext(),
    })
    .await;
    let after = Msg::invocation("after", &[json!(3)]);
    s1.send(ConnectionData {
        connection_id: id,
        payload: after.bytes(Format::Json),
        ext: ext(),
    })
    .await;
    client.expect(&after).await;
}

#[tokio::test]
async fn a_slow_client_is_cut_off_and_its_app_server_told_buffer_full() {
    let mut config = default_mode();
    config.limits.max_pending_bytes_per_connection = 1024;
    let server = TestServer::start_with(config).await;
    let hub = "chat";
    let mut app = AppServer::open(&server, hub, "s1").await;
    let token = sticky_token(&server, hub, "u", "s1");
    let (_client, id) = connect_client(&server, &mut app, hub, &token, Format::Json).await;
    // 200 messages of ~600 bytes in one WebSocket frame: they are queued in one go, far past
    // the 1 KiB budget, faster than the client's writer can drain them.
    let msg = Msg::invocation("bulk", &[json!("x".repeat(600))]);
    let mut frame = Vec::new();
    for _ in 0..200 {
        frame.extend_from_slice(&encoded(&ServiceMessage::MultiConnectionData(
            MultiConnectionData {
                connection_list: vec![id.clone()],
                payloads: msg.payloads(),
                ext: ext(),
            },
        )));
    }
    app.send_bytes(&frame).await;
    let event = app
        .take("a BufferFull event", |m| match m {
            ServiceMessage::ServiceEvent(e) => Some(e.clone()),
            _ => None,
        })
        .await;
    assert_eq!(event.object_type, ServiceEvent::OBJECT_CONNECTION);
    assert_eq!(event.id, id);
    assert_eq!(event.kind, ServiceEvent::KIND_BUFFER_FULL);
    assert!(event.message.contains("slow consumer"), "{}", event.message);
    let close = app
        .take("CloseConnection", |m| match m {
            ServiceMessage::CloseConnection(c) if c.connection_id == id => Some(c.clone()),
            _ => None,
        })
        .await;
    assert!(
        close.error_message.contains("slow consumer"),
        "{}",
        close.error_message
    );
}
