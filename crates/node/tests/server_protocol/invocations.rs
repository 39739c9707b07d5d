//! Client invocation across servers.

use super::*;

#[tokio::test]
async fn client_invocation_routed_through_another_server() {
    let server = TestServer::start_with(default_mode()).await;
    let hub = "chat";
    let mut a = AppServer::open(&server, hub, "A").await;
    let mut b = AppServer::open(&server, hub, "B").await;
    let token = sticky_token(&server, hub, "target", "B");
    let (mut client, id) = connect_client(&server, &mut b, hub, &token, Format::Json).await;

    let invocation_id = format!("{id}-mgr-1");
    let json_payload = switchyard_hub_protocol::encode_message(
        Format::Json,
        &HubMessage::Invocation {
            headers: Default::default(),
            invocation_id: Some(invocation_id.clone()),
            target: "getResult".into(),
            arguments: vec![json!(41)],
            stream_ids: None,
        },
    );
    let msgpack_payload = switchyard_hub_protocol::encode_message(
        Format::MessagePack,
        &HubMessage::Invocation {
            headers: Default::default(),
            invocation_id: Some(invocation_id.clone()),
            target: "getResult".into(),
            arguments: vec![json!(41)],
            stream_ids: None,
        },
    );
    let call = ClientInvocation {
        invocation_id: invocation_id.clone(),
        connection_id: id.clone(),
        caller_server_id: "A".into(),
        payloads: vec![
            ("json".into(), json_payload.clone()),
            ("messagepack".into(), msgpack_payload),
        ],
        ext: ext(),
    };
    a.send(call.clone()).await;

    let frame = within("the invocation", WAIT, client.next_frame())
        .await
        .unwrap();
    assert_eq!(frame, json_payload);
    let mapping = a
        .take("ServiceMapping", |m| match m {
            ServiceMessage::ServiceMapping(s) => Some(s.clone()),
            _ => None,
        })
        .await;
    assert_eq!(mapping.invocation_id, invocation_id);
    assert_eq!(mapping.connection_id, id);
    assert!(!mapping.instance_id.is_empty());
    let routed = b
        .take("ClientInvocation", |m| match m {
            ServiceMessage::ClientInvocation(c) => Some(c.clone()),
            _ => None,
        })
        .await;
    assert_eq!(routed, call);

    // The client answers through B; B routes the completion back; A receives it.
    let completion = switchyard_hub_protocol::encode_completion(
        Format::Json,
        &invocation_id,
        switchyard_hub_protocol::CompletionResult::Value(json!(42)),
    );
    client.send_raw(&completion).await;
    assert_eq!(b.connection_data(&id).await, completion);
    let done = ClientCompletion {
        invocation_id: invocation_id.clone(),
        connection_id: id.clone(),
        caller_server_id: "A".into(),
        protocol: "json".into(),
        payload: completion.clone(),
        ext: ext(),
    };
    b.send(done.clone()).await;
    let received = a
        .take("ClientCompletion", |m| match m {
            ServiceMessage::ClientCompletion(c) => Some(c.clone()),
            _ => None,
        })
        .await;
    assert_eq!(received, done);
}

#[tokio::test]
async fn client_invocation_for_an_unknown_connection_fails() {
    let server = TestServer::start().await;
    let mut a = AppServer::open(&server, "chat", "A").await;
    a.send(ClientInvocation {
        invocation_id: "inv-1".into(),
        connection_id: "no-such-connection".into(),
        caller_server_id: "A".into(),
        payloads: Msg::invocation("x", &[]).payloads(),
        ext: ext(),
    })
    .await;
    let error = a
        .take("ErrorCompletion", |m| match m {
            ServiceMessage::ErrorCompletion(e) => Some(e.clone()),
            _ => None,
        })
        .await;
    assert_eq!(error.invocation_id, "inv-1");
    assert_eq!(error.connection_id, "no-such-connection");
    assert_eq!(error.caller_server_id, "A");
    assert!(!error.error.is_empty());
}

#[tokio::test]
async fn client_leaving_fails_a_routed_invocation() {
    let server = TestServer::start_with(default_mode()).await;
    let hub = "chat";
    let mut a = AppServer::open(&server, hub, "A").await;
    let mut b = AppServer::open(&server, hub, "B").await;
    let token = sticky_token(&server, hub, "target", "B");
    let (client, id) = connect_client(&server, &mut b, hub, &token, Format::Json).await;
    a.send(ClientInvocation {
        invocation_id: "inv-2".into(),
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
    client.close().await;
    let error = a
        .take("ErrorCompletion", |m| match m {
            ServiceMessage::ErrorCompletion(e) => Some(e.clone()),
            _ => None,
        })
        .await;
    assert_eq!(error.invocation_id, "inv-2");
    assert_eq!(error.connection_id, id);
}
