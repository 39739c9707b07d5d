//! Client lifecycle.

use super::*;

pub(crate) async fn client_lifecycle(format: Format) {
    let server = TestServer::start_with(default_mode()).await;
    let hub = "chat";
    let mut app = AppServer::open(&server, hub, "s1").await;
    let token = server.token(hub, Some("alice"));
    let (mut client, id) = Client::start(&server, hub, &token, format).await;

    let open = app.open_connection().await;
    assert_eq!(open.connection_id, id);
    assert!(
        open.claims
            .iter()
            .any(|(t, v)| t == "asrs.s.uid" && v == "alice"),
        "claims: {:?}",
        open.claims
    );
    assert_eq!(open.ext.protocol.as_deref(), Some(format.name()));
    let query = open.query_string.as_deref().expect("query string");
    assert!(query.contains("hub=chat"), "query {query:?}");
    assert!(!query.contains("access_token"), "query {query:?}");
    assert!(header(&open.headers, "authorization").is_none());
    // The SDK takes the client's address from the first X-Forwarded-For entry.
    assert_eq!(
        header(&open.headers, "X-Forwarded-For"),
        Some(&["127.0.0.1".to_string()][..])
    );

    let request = app.connection_data(&id).await;
    assert_eq!(request, handshake::encode_request(format.name(), 1));
    app.send_to(&id, handshake::RESPONSE_OK).await;
    client.handshake_result().await.expect("handshake");

    // Client → app server: the exact bytes.
    let invocation = Msg::invocation("send", &[json!("hi"), json!({"n": 1})]);
    client.send_raw(&invocation.bytes(format)).await;
    assert_eq!(app.connection_data(&id).await, invocation.bytes(format));

    // App server → client: two messages over two ConnectionData split at odd bytes.
    let first = Msg::invocation("first", &[json!("a".repeat(40))]).bytes(format);
    let second = Msg::invocation("second", &[json!(2)]).bytes(format);
    let mut both = first.to_vec();
    both.extend_from_slice(&second);
    for split in [1, 5, first.len() - 1, first.len() + 1, both.len() - 1] {
        app.send_to(&id, &both[..split]).await;
        app.send_to(&id, &both[split..]).await;
        let got_first = within("first", WAIT, client.next_frame()).await.unwrap();
        assert_eq!(got_first, first, "split at {split}");
        let got_second = within("second", WAIT, client.next_frame()).await.unwrap();
        assert_eq!(got_second, second, "split at {split}");
    }

    // The client leaves: the app server is told.
    client.close().await;
    let close = app.close_connection(&id).await;
    assert_eq!(close.error_message, "");
    eventually("client gone", WAIT, || {
        server.node.client_connection_count() == 0
    })
    .await;
}

#[tokio::test]
async fn client_lifecycle_json() {
    client_lifecycle(Format::Json).await;
}

#[tokio::test]
async fn client_lifecycle_messagepack() {
    client_lifecycle(Format::MessagePack).await;
}

#[tokio::test]
async fn app_server_close_connection_closes_the_client() {
    let server = TestServer::start().await;
    let hub = "chat";
    let mut app = AppServer::open(&server, hub, "s1").await;
    for format in [Format::Json, Format::MessagePack] {
        let token = server.token(hub, Some("bob"));
        let (mut client, id) = connect_client(&server, &mut app, hub, &token, format).await;
        app.send(CloseConnection {
            connection_id: id.clone(),
            error_message: "bye".into(),
            headers: Vec::new(),
            ext: Extensions::default(),
        })
        .await;
        match client.until_closed().await {
            Some(HubMessage::Close { error, .. }) => {
                assert!(error.unwrap_or_default().contains("bye"))
            }
            other => panic!("expected a Close message, got {other:?}"),
        }
    }
    eventually("clients gone", WAIT, || {
        server.node.client_connection_count() == 0
    })
    .await;
}

#[tokio::test]
async fn default_mode_without_app_server_refuses_the_client_handshake() {
    let server = TestServer::start_with(default_mode()).await;
    let token = server.token("chat", Some("alice"));
    for format in [Format::Json, Format::MessagePack] {
        let (mut client, _) = Client::start(&server, "chat", &token, format).await;
        let error = client.handshake_result().await.expect_err("refused");
        assert!(
            error.contains("app servers are not connected"),
            "error {error:?}"
        );
        client.until_closed().await;
    }
}

#[tokio::test]
async fn default_mode_app_server_gone_refuses_new_clients() {
    let server = TestServer::start_with(default_mode()).await;
    let app = AppServer::open(&server, "chat", "s1").await;
    drop(app);
    eventually("app server gone", WAIT, || {
        server.node.server_connection_count() == 0
    })
    .await;
    let token = server.token("chat", None);
    let (mut client, _) = Client::start(&server, "chat", &token, Format::Json).await;
    let error = client.handshake_result().await.expect_err("refused");
    assert!(error.contains("app servers are not connected"), "{error:?}");
}

#[tokio::test]
async fn auto_mode_hub_without_app_server_stays_serverless() {
    let server = TestServer::start().await;
    let mut app = AppServer::open(&server, "withserver", "s1").await;
    let token = server.token("alone", Some("alice"));
    let (mut client, _) = Client::start(&server, "alone", &token, Format::Json).await;
    client
        .handshake_result()
        .await
        .expect("answered by the service");
    // The service serves it: a broadcast through the node arrives.
    eventually("joined", WAIT, || {
        server.node.client_connection_count() == 1
    })
    .await;
    server.broadcast("alone", "news", &[json!(1)]);
    match client.next_message().await {
        HubMessage::Invocation { target, .. } => assert_eq!(target, "news"),
        other => panic!("expected an invocation, got {other:?}"),
    }
    // And the app server of the other hub heard nothing of it.
    app.assert_quiet().await;

    // A client of the hub that has an app server goes to it.
    let token = server.token("withserver", None);
    let (_client, _) = connect_client(&server, &mut app, "withserver", &token, Format::Json).await;
}

#[tokio::test]
async fn id_less_websocket_works_in_default_mode() {
    let server = TestServer::start_with(default_mode()).await;
    let hub = "chat";
    let mut app = AppServer::open(&server, hub, "s1").await;
    let token = server.token(hub, Some("py"));
    let mut client = Client::start_id_less(&server, hub, &token, Format::Json).await;
    let open = app.open_connection().await;
    let id = open.connection_id.clone();
    assert!(open
        .claims
        .iter()
        .any(|(t, v)| t == "asrs.s.uid" && v == "py"));
    assert_eq!(
        app.connection_data(&id).await,
        handshake::encode_request("json", 1)
    );
    app.send_to(&id, handshake::RESPONSE_OK).await;
    client.handshake_result().await.expect("handshake");
    let up = Msg::invocation("up", &[json!(1)]);
    client.send_raw(&up.json).await;
    assert_eq!(app.connection_data(&id).await, up.json);
    let down = Msg::invocation("down", &[json!(2)]);
    app.send_to(&id, &down.json).await;
    client.expect(&down).await;
}

#[tokio::test]
async fn app_server_handshake_error_reaches_the_client() {
    let server = TestServer::start().await;
    let hub = "chat";
    let mut app = AppServer::open(&server, hub, "s1").await;
    let token = server.token(hub, None);
    let (mut client, id) = Client::start(&server, hub, &token, Format::Json).await;
    app.open_connection().await;
    app.connection_data(&id).await;
    app.send_to(&id, &handshake::encode_error_response("nope from the app"))
        .await;
    assert_eq!(
        client.handshake_result().await,
        Err("nope from the app".to_string())
    );
}
