//! The `[limits]` that bound what app servers and REST callers may make the node hold:
//! each driven past its bound, with the refusal, the metric, and a neighbour unaffected.

use super::*;

/// `switchyard_limit_refusals_total{limit}` as the node exports it.
async fn refusals(server: &TestServer, limit: &str) -> u64 {
    server
        .metric(&format!(
            "switchyard_limit_refusals_total{{limit=\"{limit}\"}}"
        ))
        .await
}

fn limited(edit: impl FnOnce(&mut switchyard_node::config::Limits)) -> Config {
    let mut config = default_mode();
    edit(&mut config.limits);
    config
}

#[tokio::test]
async fn server_connections_are_bounded_per_hub_and_per_node() {
    let server = TestServer::start_with(limited(|l| {
        l.max_server_connections = 3;
        l.max_server_connections_per_hub = 2;
    }))
    .await;
    let a1 = AppServer::open(&server, "a", "s1").await;
    let mut a2 = AppServer::open(&server, "a", "s2").await;
    let token = server.server_token("a", "s3");
    let refused = dial(&server, "a", Some(&token), Some("s3")).await;
    assert_eq!(refused_status(refused), 429, "a third of hub a");
    assert_eq!(refusals(&server, "server_connections_per_hub").await, 1);

    let mut b1 = AppServer::open(&server, "b", "s1").await;
    let token = server.server_token("b", "s2");
    let refused = dial(&server, "b", Some(&token), Some("s2")).await;
    assert_eq!(refused_status(refused), 429, "a fourth on the node");
    assert_eq!(refusals(&server, "server_connections").await, 1);

    // Those connected carry on, and a place given back is taken again.
    a2.echo_round_trip().await;
    b1.echo_round_trip().await;
    drop(a1);
    eventually_async("a place of hub a is free again", WAIT, || async {
        let token = server.server_token("a", "s4");
        match dial(&server, "a", Some(&token), Some("s4")).await {
            Ok(ws) => {
                let mut app = AppServer::new(ws);
                app.handshake(handshake_request(0)).await;
                true
            }
            Err(_) => false,
        }
    })
    .await;
}

#[tokio::test]
async fn relay_tails_are_bounded_node_wide() {
    let server = TestServer::start_with(limited(|l| l.max_relay_buffered_bytes = 4096)).await;
    let hub = "chat";
    let mut app = AppServer::open(&server, hub, "s1").await;
    let (mut first, first_id) = connect_client(
        &server,
        &mut app,
        hub,
        &server.token(hub, None),
        Format::Json,
    )
    .await;
    let (mut second, second_id) = connect_client(
        &server,
        &mut app,
        hub,
        &server.token(hub, None),
        Format::Json,
    )
    .await;

    // 3,000 bytes of an unfinished message for the first client are held...
    let big = Msg::invocation("big", &[json!("x".repeat(3000))]).bytes(Format::Json);
    app.send_to(&first_id, &big[..3000]).await;
    eventually_async("the tail is counted", WAIT, || async {
        server.metric("switchyard_relay_buffered_bytes").await == 3000
    })
    .await;
    // ...so 2,000 more for the second pass the node's 4,096: the second client is closed.
    let other = Msg::invocation("other", &[json!("y".repeat(2000))]).bytes(Format::Json);
    app.send_to(&second_id, &other[..2000]).await;
    match within("the second client's close", WAIT, second.until_closed()).await {
        Some(HubMessage::Close { error, .. }) => {
            let error = error.unwrap_or_default();
            assert!(error.contains("max_relay_buffered_bytes"), "{error}");
        }
        other => panic!("expected a Close, got {other:?}"),
    }
    assert_eq!(refusals(&server, "relay_buffer").await, 1);
    // The first client still gets its message whole, and its share is given back.
    app.send_to(&first_id, &big[3000..]).await;
    let frame = within("the big message", WAIT, first.next_frame())
        .await
        .unwrap();
    assert_eq!(frame, big);
    eventually_async("the budget is empty again", WAIT, || async {
        server.metric("switchyard_relay_buffered_bytes").await == 0
    })
    .await;
}

#[tokio::test]
async fn pending_client_invocations_are_bounded() {
    let server = TestServer::start_with(limited(|l| l.max_pending_invocations = 1)).await;
    let hub = "chat";
    let mut a = AppServer::open(&server, hub, "A").await;
    let mut b = AppServer::open(&server, hub, "B").await;
    let token = sticky_token(&server, hub, "target", "B");
    let (_client, id) = connect_client(&server, &mut b, hub, &token, Format::Json).await;
    let call = |n: u32| ClientInvocation {
        invocation_id: format!("{id}-call-{n}"),
        connection_id: id.clone(),
        caller_server_id: "A".into(),
        payloads: vec![(
            "json".into(),
            Msg::invocation("getResult", &[json!(n)]).bytes(Format::Json),
        )],
        ext: Extensions::default(),
    };
    a.send(call(1)).await;
    b.take("the first invocation, routed", |m| match m {
        ServiceMessage::ClientInvocation(c) => Some(c.invocation_id.clone()),
        _ => None,
    })
    .await;
    // The first waits for its answer: the second is over the limit and fails at once.
    a.send(call(2)).await;
    let failed = a
        .take("the second fails", |m| match m {
            ServiceMessage::ErrorCompletion(e) => Some(e.clone()),
            _ => None,
        })
        .await;
    assert_eq!(failed.invocation_id, format!("{id}-call-2"));
    assert!(
        failed.error.contains("max_pending_invocations"),
        "{}",
        failed.error
    );
    assert_eq!(refusals(&server, "pending_invocations").await, 1);
}

#[tokio::test]
async fn groups_per_connection_are_bounded_for_app_servers_and_rest() {
    let server = TestServer::start_with(limited(|l| l.max_groups_per_connection = 2)).await;
    let hub = "chat";
    let mut app = AppServer::open(&server, hub, "s1").await;
    let (mut client, id) = connect_client(
        &server,
        &mut app,
        hub,
        &server.token(hub, None),
        Format::Json,
    )
    .await;
    let join = |group: &str, ack_id: i32| JoinGroupWithAck {
        connection_id: id.clone(),
        group_name: group.into(),
        ack_id,
        ext: Extensions::default(),
    };
    assert_eq!(app.acked(join("g1", 1), 1).await, OK);
    assert_eq!(app.acked(join("g2", 2), 2).await, OK);
    app.send(join("g3", 3)).await;
    let ack = app.ack(3).await;
    assert_eq!(ack.status, 4, "a limit is an error, not a 'no'");
    assert!(
        ack.message.contains("maximum of 2 groups"),
        "{}",
        ack.message
    );
    assert_eq!(
        app.acked(join("g1", 4), 4).await,
        OK,
        "a group it is in already"
    );

    let (status, body) = server
        .rest(
            "PUT",
            &format!("/api/v1/hubs/{hub}/groups/g3/connections/{id}"),
        )
        .await;
    assert_eq!(status, 429, "{body}");
    assert!(body.contains("LimitReached"), "{body}");
    assert_eq!(refusals(&server, "groups_per_connection").await, 2);

    // Its groups still work.
    let (status, body) = server
        .rest("POST", &format!("/api/hubs/{hub}/groups/g2/:send"))
        .await;
    assert_eq!(status, 202, "{body}");
    let frame = within("the group message", WAIT, client.next_frame())
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&frame).contains("rest"));
}

#[tokio::test]
async fn groups_per_user_are_bounded_ttl_or_not() {
    let server = TestServer::start_with(limited(|l| l.max_groups_per_user = 2)).await;
    let hub = "chat";
    let path =
        |group: &str, ttl: &str| format!("/api/v1/hubs/{hub}/groups/{group}/users/alice{ttl}");
    assert_eq!(server.rest("PUT", &path("g1", "?ttl=600")).await.0, 202);
    assert_eq!(server.rest("PUT", &path("g2", "")).await.0, 202);
    let (status, body) = server.rest("PUT", &path("g3", "?ttl=60")).await;
    assert_eq!(status, 429, "{body}");
    assert!(body.contains("maximum of 2 groups"), "{body}");
    assert_eq!(
        server.rest("PUT", &path("g1", "")).await.0,
        202,
        "already in g1"
    );
    assert_eq!(server.rest("PUT", &path("g3", "?ttl=60")).await.0, 429);
    assert_eq!(refusals(&server, "groups_per_user").await, 2);
    // Leaving makes room.
    assert_eq!(server.rest("DELETE", &path("g2", "")).await.0, 202);
    assert_eq!(server.rest("PUT", &path("g3", "?ttl=60")).await.0, 202);
    // Another user is not touched by alice's count.
    let bob = format!("/api/v1/hubs/{hub}/groups/g1/users/bob");
    assert_eq!(server.rest("PUT", &bob).await.0, 202);
}
