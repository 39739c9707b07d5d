//! More edges of the relay and the connection types.

use super::*;

#[tokio::test]
async fn handshake_response_split_and_followed_by_messages() {
    let server = TestServer::start().await;
    let hub = "chat";
    let mut app = AppServer::open(&server, hub, "s1").await;
    for format in [Format::Json, Format::MessagePack] {
        let token = server.token(hub, None);
        let (mut client, id) = Client::start(&server, hub, &token, format).await;
        app.open_connection().await;
        app.connection_data(&id).await;
        // `{` alone, then `}\x1e` with the first message and half of the second.
        let first = Msg::invocation("first", &[json!(1)]).bytes(format);
        let second = Msg::invocation("second", &[json!(2)]).bytes(format);
        app.send_to(&id, b"{").await;
        let mut rest = b"}\x1e".to_vec();
        rest.extend_from_slice(&first);
        rest.extend_from_slice(&second[..2]);
        app.send_to(&id, &rest).await;
        client.handshake_result().await.expect("handshake");
        let got = within("first", WAIT, client.next_frame()).await.unwrap();
        assert_eq!(got, first);
        app.send_to(&id, &second[2..]).await;
        let got = within("second", WAIT, client.next_frame()).await.unwrap();
        assert_eq!(got, second);
    }
}

#[tokio::test]
async fn client_bytes_reach_the_app_server_as_whole_messages() {
    let server = TestServer::start().await;
    let hub = "chat";
    let mut app = AppServer::open(&server, hub, "s1").await;
    for format in [Format::Json, Format::MessagePack] {
        let token = server.token(hub, None);
        let (mut client, id) = Client::start(&server, hub, &token, format).await;
        app.open_connection().await;
        app.connection_data(&id).await;
        app.send_to(&id, handshake::RESPONSE_OK).await;
        client.handshake_result().await.unwrap();

        // Two messages in one frame, then one split over two frames.
        let one = Msg::invocation("one", &[json!(1)]).bytes(format);
        let two = Msg::invocation("two", &[json!(2)]).bytes(format);
        let three = Msg::invocation("three", &[json!("x".repeat(100))]).bytes(format);
        let mut batch = one.to_vec();
        batch.extend_from_slice(&two);
        client.send_raw(&batch).await;
        client.send_raw(&three[..7]).await;
        client.send_raw(&three[7..]).await;
        let mut expected = batch.clone();
        expected.extend_from_slice(&three);
        let mut received = Vec::new();
        while received.len() < expected.len() {
            let chunk = app.connection_data(&id).await;
            // Never half a message.
            let mut rest = BytesMut::from(&chunk[..]);
            let frames = FrameSplitter::new(format, usize::MAX)
                .split_all(&mut rest)
                .unwrap();
            assert!(!frames.is_empty() && rest.is_empty(), "partial: {chunk:?}");
            received.extend_from_slice(&chunk);
        }
        assert_eq!(received, expected);
    }
}

#[tokio::test]
async fn client_close_message_is_forwarded_then_close_connection() {
    let server = TestServer::start().await;
    let hub = "chat";
    let mut app = AppServer::open(&server, hub, "s1").await;
    let token = server.token(hub, None);
    let (mut client, id) = connect_client(&server, &mut app, hub, &token, Format::Json).await;
    let close = switchyard_hub_protocol::encode_close(Format::Json, None, false);
    client.send_raw(&close).await;
    assert_eq!(app.connection_data(&id).await, close);
    let gone = app.close_connection(&id).await;
    assert_eq!(gone.error_message, "");
    client.until_closed().await;
}

#[tokio::test]
async fn client_sending_before_the_handshake_answer_is_forwarded_in_order() {
    let server = TestServer::start().await;
    let hub = "chat";
    let mut app = AppServer::open(&server, hub, "s1").await;
    let token = server.token(hub, None);
    let negotiated = switchyard_client::negotiate(&server.client_url(hub), &token, 1)
        .await
        .unwrap();
    let id = negotiated.connection_id.clone();
    let mut request = server
        .ws_url(hub, Some(&negotiated.id_value))
        .into_client_request()
        .unwrap();
    request
        .headers_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    let (ws, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    let mut client = Client::from_socket(ws, Format::Json);
    // The handshake request and an invocation in one frame.
    let early = Msg::invocation("early", &[json!(0)]);
    let mut frame = handshake::encode_request("json", 1);
    frame.extend_from_slice(&early.json);
    client.send_raw(&frame).await;
    app.open_connection().await;
    assert_eq!(
        app.connection_data(&id).await,
        handshake::encode_request("json", 1)
    );
    assert_eq!(app.connection_data(&id).await, early.json);
    app.send_to(&id, handshake::RESPONSE_OK).await;
    client.handshake_result().await.unwrap();
}

#[tokio::test]
async fn large_message_in_many_chunks_reaches_a_messagepack_client() {
    let server = TestServer::start().await;
    let hub = "chat";
    let mut app = AppServer::open(&server, hub, "s1").await;
    let token = server.token(hub, None);
    let (mut client, id) =
        connect_client(&server, &mut app, hub, &token, Format::MessagePack).await;
    let big = Msg::invocation("big", &[json!("z".repeat(200_000))]).msgpack;
    let small = Msg::invocation("small", &[json!(1)]).msgpack;
    let mut stream = big.to_vec();
    stream.extend_from_slice(&small);
    for chunk in stream.chunks(999) {
        app.send_to(&id, chunk).await;
    }
    assert_eq!(within("big", WAIT, client.next_frame()).await.unwrap(), big);
    assert_eq!(
        within("small", WAIT, client.next_frame()).await.unwrap(),
        small
    );
}

#[tokio::test]
async fn connection_data_and_multi_connection_data_keep_their_order() {
    let server = TestServer::start().await;
    let hub = "chat";
    let mut app = AppServer::open(&server, hub, "s1").await;
    let token = server.token(hub, None);
    let (mut client, id) = connect_client(&server, &mut app, hub, &token, Format::Json).await;
    for i in 0..500 {
        let msg = numbered(i);
        if i % 2 == 0 {
            app.send_to(&id, &msg.json).await;
        } else {
            app.send(to_connection(&id, &msg)).await;
        }
    }
    for i in 0..500 {
        client.expect(&numbered(i)).await;
    }
}

#[tokio::test]
async fn data_for_unknown_connections_is_ignored() {
    let server = TestServer::start().await;
    let mut app = AppServer::open(&server, "chat", "s1").await;
    app.send_to("no-such-connection", b"{}\x1e").await;
    app.send(CloseConnection {
        connection_id: "no-such-connection".into(),
        error_message: String::new(),
        headers: Vec::new(),
        ext: ext(),
    })
    .await;
    app.send(to_connection("no-such-connection", &numbered(1)))
        .await;
    app.assert_quiet().await;
}

#[tokio::test]
async fn a_payload_map_without_the_clients_protocol_skips_it() {
    let mut t = three().await;
    let msg = Msg::invocation("json-only", &[json!(1)]);
    t.app
        .send(BroadcastData {
            excluded_list: Vec::new(),
            payloads: vec![("json".into(), msg.json.clone())],
            ext: ext(),
        })
        .await;
    t.expect_delivery(&msg, [true, false, true], 1).await;
}

#[tokio::test]
async fn group_and_user_group_messages_without_ack() {
    use switchyard_service_protocol::{JoinGroup, LeaveGroup, UserJoinGroup, UserLeaveGroup};
    let mut t = three().await;
    t.app
        .send(JoinGroup {
            connection_id: t.id(0),
            group_name: "plain".into(),
            ext: ext(),
        })
        .await;
    t.app
        .send(UserJoinGroup {
            user_id: "u2".into(),
            group_name: "plain".into(),
            ext: ext(),
        })
        .await;
    let msg = Msg::invocation("plain", &[json!(1)]);
    t.app
        .send(GroupBroadcastData {
            group_name: "plain".into(),
            excluded_list: Vec::new(),
            payloads: msg.payloads(),
            ext: ext(),
            excluded_user_list: Vec::new(),
            caller_user_id: None,
        })
        .await;
    t.expect_delivery(&msg, [true, true, false], 1).await;
    t.app
        .send(LeaveGroup {
            connection_id: t.id(0),
            group_name: Some("plain".into()),
            ext: ext(),
        })
        .await;
    t.app
        .send(UserLeaveGroup {
            user_id: "u2".into(),
            group_name: None,
            ext: ext(),
        })
        .await;
    let status = t
        .app
        .acked(
            CheckGroupExistenceWithAck {
                group_name: "plain".into(),
                ack_id: 1,
                ext: ext(),
            },
            1,
        )
        .await;
    assert_eq!(status, NOT_FOUND);
}

#[tokio::test]
async fn close_connections_with_ack_closes_the_hub_but_the_excluded() {
    use switchyard_service_protocol::CloseConnectionsWithAck;
    let mut t = three().await;
    let status = t
        .app
        .acked(
            CloseConnectionsWithAck {
                reason: Some("everyone out".into()),
                ack_id: 1,
                excluded_list: vec![t.id(1)],
                ext: ext(),
            },
            1,
        )
        .await;
    assert_eq!(status, OK);
    for i in [0, 2] {
        match t.clients[i].until_closed().await {
            Some(HubMessage::Close { error, .. }) => {
                assert_eq!(error.as_deref(), Some("everyone out"))
            }
            other => panic!("expected a Close, got {other:?}"),
        }
    }
    let msg = Msg::invocation("left", &[json!(1)]);
    t.app
        .send(BroadcastData {
            excluded_list: Vec::new(),
            payloads: msg.payloads(),
            ext: ext(),
        })
        .await;
    t.clients[1].expect(&msg).await;
}

#[tokio::test]
async fn weak_connections_carry_no_clients_but_can_send() {
    let server = TestServer::start_with(default_mode()).await;
    let hub = "chat";
    let token = server.server_token(hub, "mgmt");
    let mut weak = AppServer::new(
        dial(&server, hub, Some(&token), Some("mgmt"))
            .await
            .unwrap(),
    );
    let mut request = handshake_request(0);
    request.connection_type = 2;
    assert_eq!(weak.handshake(request).await.error_message, "");
    // Only a weak connection: no app server can take the client.
    let client_token = server.token(hub, Some("u"));
    let (mut refused, _) = Client::start(&server, hub, &client_token, Format::Json).await;
    let error = refused.handshake_result().await.expect_err("refused");
    assert!(error.contains("app servers are not connected"), "{error}");

    // With a Default connection the client goes there, and the weak one can still send.
    let mut app = AppServer::open(&server, hub, "s1").await;
    let (mut client, id) =
        connect_client(&server, &mut app, hub, &client_token, Format::Json).await;
    let msg = Msg::invocation("from-weak", &[json!(1)]);
    weak.send(UserData {
        user_id: "u".into(),
        payloads: msg.payloads(),
        ext: ext(),
    })
    .await;
    client.expect(&msg).await;
    let status = weak
        .acked(
            CheckConnectionExistenceWithAck {
                connection_id: id,
                ack_id: 1,
                ext: ext(),
            },
            1,
        )
        .await;
    assert_eq!(status, OK);
}

#[tokio::test]
async fn on_demand_connections_carry_clients() {
    let server = TestServer::start_with(default_mode()).await;
    let hub = "chat";
    let token = server.server_token(hub, "s1");
    let mut app = AppServer::new(dial(&server, hub, Some(&token), Some("s1")).await.unwrap());
    let mut request = handshake_request(0);
    request.connection_type = 1;
    request.target = "instance-1".into();
    assert_eq!(app.handshake(request).await.error_message, "");
    let client_token = server.token(hub, None);
    connect_client(&server, &mut app, hub, &client_token, Format::Json).await;
}

#[tokio::test]
async fn a_draining_server_gets_no_new_clients() {
    let server = TestServer::start_with(default_mode()).await;
    let hub = "chat";
    let mut old = AppServer::open(&server, hub, "old").await;
    old.send(Ping::new(&[("shutdown", "fin:0")])).await;
    old.ping("shutdown").await;
    let token = server.token(hub, None);
    let (mut refused, _) = Client::start(&server, hub, &token, Format::Json).await;
    assert!(refused.handshake_result().await.is_err());
    let mut new = AppServer::open(&server, hub, "new").await;
    connect_client(&server, &mut new, hub, &token, Format::Json).await;
    old.assert_quiet().await;
}

#[tokio::test]
async fn fin1_without_another_server_keeps_the_clients() {
    let server = TestServer::start_with(default_mode()).await;
    let hub = "chat";
    let mut app = AppServer::open_with(&server, hub, "only", 1).await;
    let token = server.token(hub, None);
    let (mut client, id) = connect_client(&server, &mut app, hub, &token, Format::Json).await;
    app.send(Ping::new(&[("shutdown", "fin:1")])).await;
    assert_eq!(app.ping("shutdown").await.values, ["shutdown", "finack"]);
    app.assert_quiet().await;
    let msg = Msg::invocation("still", &[json!(1)]);
    app.send_to(&id, &msg.json).await;
    client.expect(&msg).await;
}

#[tokio::test]
async fn a_graceful_close_of_the_app_server_closes_its_clients() {
    let server = TestServer::start_with(default_mode()).await;
    let hub = "chat";
    let mut app = AppServer::open(&server, hub, "s1").await;
    let token = server.token(hub, None);
    let (mut client, _) = connect_client(&server, &mut app, hub, &token, Format::MessagePack).await;
    app.ws.close(None).await.unwrap();
    assert!(client.until_closed().await.is_some());
    eventually("app server gone", WAIT, || {
        server.node.server_connection_count() == 0
    })
    .await;
}

#[tokio::test]
async fn oversized_and_text_frames_close_the_connection() {
    let mut config = Config::default();
    config.limits.max_server_message_size = 1024;
    let server = TestServer::start_with(config).await;
    let mut app = AppServer::open(&server, "chat", "s1").await;
    // A prefix announcing 2,000 bytes: refused on the prefix alone.
    app.send_bytes(&[0xd0, 0x0f]).await;
    let seen = app.until_closed().await;
    assert!(
        matches!(seen.last(), Some(ServiceMessage::ServiceError(_))),
        "got {seen:?}"
    );

    let mut app = AppServer::open(&server, "chat", "s1").await;
    app.ws
        .send(WsMessage::Text("not binary".into()))
        .await
        .unwrap();
    let seen = app.until_closed().await;
    assert!(
        matches!(seen.last(), Some(ServiceMessage::ServiceError(_))),
        "got {seen:?}"
    );
}

#[tokio::test]
async fn client_invocation_for_a_client_of_the_caller_itself() {
    let server = TestServer::start().await;
    let hub = "chat";
    let mut a = AppServer::open(&server, hub, "A").await;
    let token = server.token(hub, None);
    let (mut client, id) = connect_client(&server, &mut a, hub, &token, Format::MessagePack).await;
    let payload = switchyard_hub_protocol::encode_message(
        Format::MessagePack,
        &HubMessage::Invocation {
            headers: Default::default(),
            invocation_id: Some("1".into()),
            target: "ask".into(),
            arguments: vec![],
            stream_ids: None,
        },
    );
    a.send(ClientInvocation {
        invocation_id: format!("{id}-m-1"),
        connection_id: id.clone(),
        caller_server_id: "A".into(),
        payloads: vec![("messagepack".into(), payload.clone())],
        ext: ext(),
    })
    .await;
    assert_eq!(
        within("invocation", WAIT, client.next_frame())
            .await
            .unwrap(),
        payload
    );
    // No mapping: the caller hosts the client and sees the answer itself.
    let answer = switchyard_hub_protocol::encode_completion(
        Format::MessagePack,
        "1",
        switchyard_hub_protocol::CompletionResult::Value(json!(true)),
    );
    client.send_raw(&answer).await;
    assert_eq!(a.connection_data(&id).await, answer);
    a.send(ClientCompletion {
        invocation_id: format!("{id}-m-1"),
        connection_id: id.clone(),
        caller_server_id: "A".into(),
        protocol: "messagepack".into(),
        payload: Bytes::new(),
        ext: ext(),
    })
    .await;
    a.assert_quiet().await;
}

#[tokio::test]
async fn app_server_never_answering_the_client_handshake_times_it_out() {
    let mut config = default_mode();
    config.timeouts.handshake_timeout = Duration::from_millis(300);
    let server = TestServer::start_with(config).await;
    let hub = "chat";
    let mut app = AppServer::open(&server, hub, "s1").await;
    let token = server.token(hub, None);
    let (mut client, id) = Client::start(&server, hub, &token, Format::Json).await;
    app.open_connection().await;
    app.connection_data(&id).await;
    let error = client.handshake_result().await.expect_err("timed out");
    assert!(error.contains("canceled"), "{error}");
    app.close_connection(&id).await;
}

#[tokio::test]
async fn auto_mode_hub_whose_app_servers_left_refuses_clients() {
    let server = TestServer::start().await;
    let app = AppServer::open(&server, "chat", "s1").await;
    drop(app);
    eventually("app server gone", WAIT, || {
        server.node.server_connection_count() == 0
    })
    .await;
    let token = server.token("chat", None);
    let (mut client, _) = Client::start(&server, "chat", &token, Format::Json).await;
    let error = client.handshake_result().await.expect_err("refused");
    assert!(error.contains("app servers are not connected"), "{error}");
}

#[tokio::test]
async fn error_completion_from_the_router_reaches_the_caller() {
    use switchyard_service_protocol::ErrorCompletion;
    let server = TestServer::start_with(default_mode()).await;
    let hub = "chat";
    let mut a = AppServer::open(&server, hub, "A").await;
    let mut b = AppServer::open(&server, hub, "B").await;
    let token = sticky_token(&server, hub, "target", "B");
    let (_client, id) = connect_client(&server, &mut b, hub, &token, Format::Json).await;
    a.send(ClientInvocation {
        invocation_id: "inv-3".into(),
        connection_id: id.clone(),
        caller_server_id: "A".into(),
        payloads: Msg::invocation("x", &[]).payloads(),
        ext: ext(),
    })
    .await;
    b.take("ClientInvocation", |m| {
        matches!(m, ServiceMessage::ClientInvocation(_)).then_some(())
    })
    .await;
    let failed = ErrorCompletion {
        invocation_id: "inv-3".into(),
        connection_id: id.clone(),
        caller_server_id: "A".into(),
        error: "the client said no".into(),
        ext: ext(),
    };
    b.send(failed.clone()).await;
    let received = a
        .take("ErrorCompletion", |m| match m {
            ServiceMessage::ErrorCompletion(e) => Some(e.clone()),
            _ => None,
        })
        .await;
    assert_eq!(received, failed);
}

#[tokio::test]
async fn long_polling_client_in_default_mode() {
    let server = TestServer::start_with(default_mode()).await;
    let hub = "chat";
    let mut app = AppServer::open(&server, hub, "s1").await;
    let http = Http::for_user(&server, hub, "lp");
    for format in [Format::Json, Format::MessagePack] {
        let negotiated = switchyard_client::negotiate(&http.base, &http.token, 1)
            .await
            .unwrap();
        let (key, id) = (negotiated.id_value, negotiated.connection_id);
        assert_eq!(http.poll(&key).await.status(), 200);
        let request = handshake::encode_request(format.name(), 1);
        assert_eq!(http.post(&key, &request).await.status(), 200);
        let open = app.open_connection().await;
        assert_eq!(open.connection_id, id);
        assert_eq!(open.ext.protocol.as_deref(), Some(format.name()));
        assert_eq!(app.connection_data(&id).await, request);
        // The answer and a message, split oddly.
        let msg = Msg::invocation("lp", &[json!(1)]).bytes(format);
        let mut stream = handshake::RESPONSE_OK.to_vec();
        stream.extend_from_slice(&msg);
        app.send_to(&id, &stream[..4]).await;
        app.send_to(&id, &stream[4..]).await;
        let mut body = Vec::new();
        while body.len() < stream.len() {
            let chunk = within("poll", WAIT, http.poll(&key)).await;
            assert_eq!(chunk.status(), 200);
            body.extend_from_slice(&chunk.bytes().await.unwrap());
        }
        assert_eq!(body, stream);
        let up = Msg::invocation("up", &[json!(2)]).bytes(format);
        assert_eq!(http.post(&key, &up).await.status(), 200);
        assert_eq!(app.connection_data(&id).await, up);
        let deleted = http
            .client
            .delete(http.url(&key))
            .bearer_auth(&http.token)
            .send()
            .await
            .unwrap();
        assert_eq!(deleted.status(), 202);
        app.close_connection(&id).await;
    }
}

#[tokio::test]
async fn server_sent_events_client_in_default_mode() {
    let server = TestServer::start_with(default_mode()).await;
    let hub = "chat";
    let mut app = AppServer::open(&server, hub, "s1").await;
    let http = Http::for_user(&server, hub, "sse");
    let negotiated = switchyard_client::negotiate(&http.base, &http.token, 1)
        .await
        .unwrap();
    let (key, id) = (negotiated.id_value, negotiated.connection_id);
    let response = http
        .client
        .get(http.url(&key))
        .bearer_auth(&http.token)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut events = Box::pin(response.bytes_stream());
    let mut received: Vec<u8> = Vec::new();
    let request = handshake::encode_request("json", 1);
    assert_eq!(http.post(&key, &request).await.status(), 200);
    app.open_connection().await;
    assert_eq!(app.connection_data(&id).await, request);
    let msg = Msg::invocation("sse", &[json!("hi")]);
    let mut stream = handshake::RESPONSE_OK.to_vec();
    stream.extend_from_slice(&msg.json);
    app.send_to(&id, &stream[..2]).await;
    app.send_to(&id, &stream[2..]).await;
    // Event data, concatenated, is the byte stream (events may batch messages).
    let data_of = |events: &[u8]| -> Vec<u8> {
        let text = String::from_utf8_lossy(events);
        let mut data = Vec::new();
        for event in text.split("\r\n\r\n") {
            for line in event.split("\r\n") {
                if let Some(rest) = line.strip_prefix("data: ") {
                    data.extend_from_slice(rest.as_bytes());
                }
            }
        }
        data
    };
    while data_of(&received) != stream {
        let chunk = tokio::time::timeout(WAIT, events.next())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "timed out; the event stream so far: {:?}",
                    String::from_utf8_lossy(&received)
                )
            })
            .expect("stream open")
            .unwrap();
        received.extend_from_slice(&chunk);
    }
    app.send(CloseConnection {
        connection_id: id.clone(),
        error_message: String::new(),
        headers: Vec::new(),
        ext: ext(),
    })
    .await;
    within("the event stream to end", WAIT, async {
        while let Some(Ok(_)) = events.next().await {}
    })
    .await;
}

/// A Weak connection (Management SDK persistent mode, spec §1.10/§4.5) on `hub`.
pub(crate) async fn open_weak(server: &TestServer, hub: &str, server_id: &str) -> AppServer {
    let token = server.server_token(hub, server_id);
    let mut weak = AppServer::new(
        dial(server, hub, Some(&token), Some(server_id))
            .await
            .unwrap(),
    );
    let mut request = handshake_request(0);
    request.connection_type = 2;
    let response = weak.handshake(request).await;
    assert_eq!(response.error_message, "", "weak connection refused");
    weak
}

/// The Management SDK's persistent transport speaks the service protocol over Weak
/// connections and is used by serverless apps (Azure Functions); it carries no clients, so
/// serverless mode must accept it.
#[tokio::test]
async fn serverless_mode_accepts_weak_connections_for_the_management_sdk() {
    let server = TestServer::start_with(Config {
        mode: ServiceMode::Serverless,
        ..Config::default()
    })
    .await;
    let hub = "chat";
    let mut weak = open_weak(&server, hub, "mgmt").await;
    let token = server.token(hub, Some("u"));
    let (mut client, id) = Client::start(&server, hub, &token, Format::Json).await;
    client
        .handshake_result()
        .await
        .expect("served by the service");
    eventually("joined", WAIT, || {
        server.node.client_connection_count() == 1
    })
    .await;
    let msg = Msg::invocation("from-mgmt", &[json!(1)]);
    weak.send(UserData {
        user_id: "u".into(),
        payloads: msg.payloads(),
        ext: ext(),
    })
    .await;
    client.expect(&msg).await;
    let status = weak
        .acked(
            CheckConnectionExistenceWithAck {
                connection_id: id,
                ack_id: 1,
                ext: ext(),
            },
            1,
        )
        .await;
    assert_eq!(status, OK);
}

/// In `mode = auto` a Weak connection is not an app server that can take clients: the hub
/// stays serverless (otherwise a serverless app using the Management SDK's persistent
/// transport would get its clients refused with "app servers are not connected").
#[tokio::test]
async fn auto_mode_weak_connection_keeps_the_hub_serverless() {
    let server = TestServer::start().await;
    let hub = "chat";
    let mut weak = open_weak(&server, hub, "mgmt").await;
    let token = server.token(hub, Some("u"));
    let (mut client, _) = Client::start(&server, hub, &token, Format::MessagePack).await;
    client
        .handshake_result()
        .await
        .expect("served by the service");
    eventually("joined", WAIT, || {
        server.node.client_connection_count() == 1
    })
    .await;
    let msg = Msg::invocation("from-mgmt", &[json!(2)]);
    weak.send(BroadcastData {
        excluded_list: Vec::new(),
        payloads: msg.payloads(),
        ext: ext(),
    })
    .await;
    client.expect(&msg).await;
    weak.assert_quiet().await;
}

/// Blazor Server clients speak `blazorpack` (MessagePack framing and encoding under another
/// name); in Default mode the service only relays their bytes, so it must carry them.
#[tokio::test]
async fn blazorpack_clients_are_relayed_in_default_mode() {
    let server = TestServer::start().await;
    let hub = "componenthub";
    let mut app = AppServer::open(&server, hub, "blazor").await;
    let token = server.token(hub, None);
    let negotiated = switchyard_client::negotiate(&server.client_url(hub), &token, 1)
        .await
        .unwrap();
    let id = negotiated.connection_id.clone();
    let mut client = Client::start_url_as(
        &server.ws_url(hub, Some(&negotiated.id_value)),
        &token,
        Format::MessagePack,
        "blazorpack",
    )
    .await;
    let open = app.open_connection().await;
    assert_eq!(open.connection_id, id);
    assert_eq!(open.ext.protocol.as_deref(), Some("blazorpack"));
    assert_eq!(
        app.connection_data(&id).await,
        handshake::encode_request("blazorpack", 1)
    );
    app.send_to(&id, handshake::RESPONSE_OK).await;
    client.handshake_result().await.expect("handshake");

    // Both ways, byte for byte, over binary frames.
    let up = Msg::invocation("StartCircuit", &[json!("x")]).msgpack;
    client.send_raw(&up).await;
    assert_eq!(app.connection_data(&id).await, up);
    let down = Msg::invocation("JS.RenderBatch", &[json!(1)]).msgpack;
    app.send_to(&id, &down[..3]).await;
    app.send_to(&id, &down[3..]).await;
    assert_eq!(
        within("down", WAIT, client.next_frame()).await.unwrap(),
        down
    );
    let multi = Msg::invocation("JS.Other", &[json!(2)]).msgpack;
    app.send(MultiConnectionData {
        connection_list: vec![id.clone()],
        payloads: vec![("blazorpack".into(), multi.clone())],
        ext: ext(),
    })
    .await;
    assert_eq!(
        within("multi", WAIT, client.next_frame()).await.unwrap(),
        multi
    );

    // Closed by the app server: the client gets a Close message it can read.
    app.send(CloseConnection {
        connection_id: id.clone(),
        error_message: "bye".into(),
        headers: Vec::new(),
        ext: ext(),
    })
    .await;
    assert!(client.until_closed().await.is_some(), "Close message");
}

#[tokio::test]
async fn clients_stick_to_the_server_named_in_their_token() {
    let server = TestServer::start_with(default_mode()).await;
    let hub = "chat";
    let mut s1 = AppServer::open(&server, hub, "s1").await;
    let mut s2 = AppServer::open(&server, hub, "s2").await;
    // Preferred (asrs.s.sn without ssticky): every client goes to s2 although s1 is idle.
    for i in 0..3 {
        let token = server.token_with(
            hub,
            &[("asrs.s.sn", "s2"), ("asrs.s.uid", &format!("p{i}"))],
        );
        connect_client(&server, &mut s2, hub, &token, Format::Json).await;
    }
    s1.assert_quiet().await;
    // Preferred but absent: any server.
    let token = server.token_with(hub, &[("asrs.s.sn", "gone")]);
    let (mut client, id) = Client::start(&server, hub, &token, Format::Json).await;
    let on_s1 = tokio::select! {
        open = s1.open_connection() => { assert_eq!(open.connection_id, id); true }
        open = s2.open_connection() => { assert_eq!(open.connection_id, id); false }
    };
    let app = if on_s1 { &mut s1 } else { &mut s2 };
    app.connection_data(&id).await;
    app.send_to(&id, handshake::RESPONSE_OK).await;
    client.handshake_result().await.unwrap();
    // Required and absent: refused with the server named.
    let token = sticky_token(&server, hub, "u", "gone");
    let (mut refused, _) = Client::start(&server, hub, &token, Format::Json).await;
    let error = refused.handshake_result().await.expect_err("refused");
    assert!(error.contains("gone"), "{error}");
}

#[tokio::test]
async fn server_endpoint_http_errors() {
    let server = TestServer::start().await;
    let token = server.server_token("chat", "s1");
    // No hub: 400 (not an auth failure).
    let url = format!("ws://{}/server/", server.addr);
    assert_eq!(
        refused_status(dial_url(&url, Some(&token), Some("s1")).await),
        400
    );
    // A plain GET with a valid token: 400, an upgrade is required.
    let response = reqwest::Client::new()
        .get(format!("http://{}/server/?hub=chat", server.addr))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    // Without the trailing slash too.
    let url = format!("ws://{}/server?hub=chat", server.addr);
    let mut app = AppServer::new(dial_url(&url, Some(&token), Some("s1")).await.unwrap());
    assert_eq!(app.handshake(handshake_request(0)).await.error_message, "");
}
