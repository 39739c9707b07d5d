//! Routing with acks.

use super::*;

#[tokio::test]
async fn multi_connection_data_gives_each_client_its_own_protocol() {
    let mut t = three().await;
    let msg = Msg::invocation("m", &[json!("x"), json!([1, 2, 3]), json!({"k": null})]);
    t.app
        .send(MultiConnectionData {
            connection_list: vec![t.id(0), t.id(1)],
            payloads: msg.payloads(),
            ext: ext(),
        })
        .await;
    t.expect_delivery(&msg, [true, true, false], 1).await;
    // Payload keys are matched case-insensitively.
    let upper = Msg::invocation("upper", &[json!(1)]);
    t.app
        .send(MultiConnectionData {
            connection_list: vec![t.id(1), t.id(2)],
            payloads: vec![
                ("JSON".into(), upper.json.clone()),
                ("MessagePack".into(), upper.msgpack.clone()),
            ],
            ext: ext(),
        })
        .await;
    t.expect_delivery(&upper, [false, true, true], 2).await;
}

#[tokio::test]
async fn user_data_and_multi_user_data() {
    let mut t = three().await;
    let msg = Msg::invocation("user", &[json!(1)]);
    t.app
        .send(UserData {
            user_id: "u2".into(),
            payloads: msg.payloads(),
            ext: ext(),
        })
        .await;
    t.expect_delivery(&msg, [false, true, false], 1).await;
    let msg = Msg::invocation("users", &[json!(2)]);
    t.app
        .send(MultiUserData {
            user_list: vec!["u1".into(), "u3".into(), "nobody".into()],
            payloads: msg.payloads(),
            ext: ext(),
        })
        .await;
    t.expect_delivery(&msg, [true, false, true], 2).await;
}

#[tokio::test]
async fn broadcast_with_excluded_connections() {
    let mut t = three().await;
    let msg = Msg::invocation("all", &[json!("everyone but u2")]);
    t.app
        .send(BroadcastData {
            excluded_list: vec![t.id(1)],
            payloads: msg.payloads(),
            ext: ext(),
        })
        .await;
    t.expect_delivery(&msg, [true, false, true], 1).await;
}

#[tokio::test]
async fn groups_join_leave_and_group_broadcast_with_exclusions() {
    let mut t = three().await;
    for (i, ack_id) in [(0, 1), (1, 2), (2, 3)] {
        let status = t
            .app
            .acked(
                JoinGroupWithAck {
                    connection_id: t.id(i),
                    group_name: "g".into(),
                    ack_id,
                    ext: ext(),
                },
                ack_id,
            )
            .await;
        assert_eq!(status, OK);
    }
    let unknown = t
        .app
        .acked(
            JoinGroupWithAck {
                connection_id: "no-such-connection".into(),
                group_name: "g".into(),
                ack_id: 4,
                ext: ext(),
            },
            4,
        )
        .await;
    assert_eq!(unknown, NOT_FOUND);

    let msg = Msg::invocation("group", &[json!("g")]);
    t.app
        .send(GroupBroadcastData {
            group_name: "g".into(),
            excluded_list: Vec::new(),
            payloads: msg.payloads(),
            ext: ext(),
            excluded_user_list: Vec::new(),
            caller_user_id: None,
        })
        .await;
    t.expect_delivery(&msg, [true, true, true], 1).await;

    let msg = Msg::invocation("group", &[json!("only u3")]);
    t.app
        .send(GroupBroadcastData {
            group_name: "g".into(),
            excluded_list: vec![t.id(0)],
            payloads: msg.payloads(),
            ext: ext(),
            excluded_user_list: vec!["u2".into()],
            caller_user_id: Some("u1".into()),
        })
        .await;
    t.expect_delivery(&msg, [false, false, true], 2).await;

    let status = t
        .app
        .acked(
            LeaveGroupWithAck {
                connection_id: t.id(2),
                group_name: Some("g".into()),
                ack_id: 5,
                ext: ext(),
            },
            5,
        )
        .await;
    assert_eq!(status, OK);
    let status = t
        .app
        .acked(
            LeaveGroupWithAck {
                connection_id: "no-such-connection".into(),
                group_name: Some("g".into()),
                ack_id: 6,
                ext: ext(),
            },
            6,
        )
        .await;
    assert_eq!(status, NOT_FOUND);
    let msg = Msg::invocation("group", &[json!("u1 and u2")]);
    t.app
        .send(GroupBroadcastData {
            group_name: "g".into(),
            excluded_list: Vec::new(),
            payloads: msg.payloads(),
            ext: ext(),
            excluded_user_list: Vec::new(),
            caller_user_id: None,
        })
        .await;
    t.expect_delivery(&msg, [true, true, false], 3).await;
}

#[tokio::test]
async fn multi_group_broadcast_and_leave_all_groups() {
    let mut t = three().await;
    let joins = [(0, "g1"), (0, "g2"), (1, "g2"), (2, "g3")];
    for (n, (i, group)) in joins.iter().enumerate() {
        let ack_id = 10 + n as i32;
        let status = t
            .app
            .acked(
                JoinGroupWithAck {
                    connection_id: t.id(*i),
                    group_name: group.to_string(),
                    ack_id,
                    ext: ext(),
                },
                ack_id,
            )
            .await;
        assert_eq!(status, OK);
    }
    let msg = Msg::invocation("groups", &[json!(1)]);
    t.app
        .send(MultiGroupBroadcastData {
            group_list: vec!["g2".into(), "nothing".into()],
            payloads: msg.payloads(),
            ext: ext(),
        })
        .await;
    t.expect_delivery(&msg, [true, true, false], 1).await;

    // LeaveGroupWithAck with a nil group: every group.
    let status = t
        .app
        .acked(
            LeaveGroupWithAck {
                connection_id: t.id(0),
                group_name: None,
                ack_id: 20,
                ext: ext(),
            },
            20,
        )
        .await;
    assert_eq!(status, OK);
    for (group, ack_id, expected) in [
        ("g1", 21, NOT_FOUND),
        ("g2", 22, OK),
        ("g3", 23, OK),
        ("never", 24, NOT_FOUND),
    ] {
        let status = t
            .app
            .acked(
                CheckGroupExistenceWithAck {
                    group_name: group.into(),
                    ack_id,
                    ext: ext(),
                },
                ack_id,
            )
            .await;
        assert_eq!(status, expected, "group {group}");
    }
    let msg = Msg::invocation("groups", &[json!(2)]);
    t.app
        .send(MultiGroupBroadcastData {
            group_list: vec!["g1".into(), "g2".into(), "g3".into()],
            payloads: msg.payloads(),
            ext: ext(),
        })
        .await;
    t.expect_delivery(&msg, [false, true, true], 2).await;
}

#[tokio::test]
async fn user_groups_with_ttl_and_checks() {
    let mut t = three().await;
    let mut ttl = ext();
    ttl.ttl = Some(60);
    let status = t
        .app
        .acked(
            UserJoinGroupWithAck {
                user_id: "u1".into(),
                group_name: "ug".into(),
                ack_id: 1,
                ext: ttl,
            },
            1,
        )
        .await;
    assert_eq!(status, OK);
    let check = |user: &str, ack_id| CheckUserInGroupWithAck {
        user_id: user.into(),
        group_name: "ug".into(),
        ack_id,
        ext: ext(),
    };
    assert_eq!(t.app.acked(check("u1", 2), 2).await, OK);
    assert_eq!(t.app.acked(check("u2", 3), 3).await, NOT_FOUND);
    let msg = Msg::invocation("ug", &[json!(1)]);
    t.app
        .send(GroupBroadcastData {
            group_name: "ug".into(),
            excluded_list: Vec::new(),
            payloads: msg.payloads(),
            ext: ext(),
            excluded_user_list: Vec::new(),
            caller_user_id: None,
        })
        .await;
    t.expect_delivery(&msg, [true, false, false], 1).await;

    let status = t
        .app
        .acked(
            UserLeaveGroupWithAck {
                user_id: "u1".into(),
                group_name: Some("ug".into()),
                ack_id: 4,
                ext: ext(),
            },
            4,
        )
        .await;
    assert_eq!(status, OK);
    assert_eq!(t.app.acked(check("u1", 5), 5).await, NOT_FOUND);

    // Nil group: leave every group.
    for (group, ack_id) in [("a", 6), ("b", 7)] {
        let status = t
            .app
            .acked(
                UserJoinGroupWithAck {
                    user_id: "u3".into(),
                    group_name: group.into(),
                    ack_id,
                    ext: ext(),
                },
                ack_id,
            )
            .await;
        assert_eq!(status, OK);
    }
    let status = t
        .app
        .acked(
            UserLeaveGroupWithAck {
                user_id: "u3".into(),
                group_name: None,
                ack_id: 8,
                ext: ext(),
            },
            8,
        )
        .await;
    assert_eq!(status, OK);
    for (group, ack_id) in [("a", 9), ("b", 10)] {
        let status = t
            .app
            .acked(
                CheckUserInGroupWithAck {
                    user_id: "u3".into(),
                    group_name: group.into(),
                    ack_id,
                    ext: ext(),
                },
                ack_id,
            )
            .await;
        assert_eq!(status, NOT_FOUND, "group {group}");
    }

    // A membership with a 1 s ttl ends by itself.
    let mut short = ext();
    short.ttl = Some(1);
    let status = t
        .app
        .acked(
            UserJoinGroupWithAck {
                user_id: "u2".into(),
                group_name: "ug".into(),
                ack_id: 11,
                ext: short,
            },
            11,
        )
        .await;
    assert_eq!(status, OK);
    assert_eq!(t.app.acked(check("u2", 12), 12).await, OK);
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut ack_id = 13;
    loop {
        if t.app.acked(check("u2", ack_id), ack_id).await == NOT_FOUND {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the ttl membership never ended"
        );
        ack_id += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn existence_checks() {
    let mut t = three().await;
    let status = t
        .app
        .acked(
            JoinGroupWithAck {
                connection_id: t.id(0),
                group_name: "exists".into(),
                ack_id: 1,
                ext: ext(),
            },
            1,
        )
        .await;
    assert_eq!(status, OK);
    let cases: Vec<(ServiceMessage, i32, i32)> = vec![
        (
            CheckConnectionExistenceWithAck {
                connection_id: t.id(1),
                ack_id: 2,
                ext: ext(),
            }
            .into(),
            2,
            OK,
        ),
        (
            CheckConnectionExistenceWithAck {
                connection_id: "nope".into(),
                ack_id: 3,
                ext: ext(),
            }
            .into(),
            3,
            NOT_FOUND,
        ),
        (
            CheckUserExistenceWithAck {
                user_id: "u3".into(),
                ack_id: 4,
                ext: ext(),
            }
            .into(),
            4,
            OK,
        ),
        (
            CheckUserExistenceWithAck {
                user_id: "nobody".into(),
                ack_id: 5,
                ext: ext(),
            }
            .into(),
            5,
            NOT_FOUND,
        ),
        (
            CheckGroupExistenceWithAck {
                group_name: "exists".into(),
                ack_id: 6,
                ext: ext(),
            }
            .into(),
            6,
            OK,
        ),
        (
            CheckGroupExistenceWithAck {
                group_name: "empty".into(),
                ack_id: 7,
                ext: ext(),
            }
            .into(),
            7,
            NOT_FOUND,
        ),
        (
            CheckUserInGroupWithAck {
                user_id: "u1".into(),
                group_name: "exists".into(),
                ack_id: 8,
                ext: ext(),
            }
            .into(),
            8,
            OK,
        ),
        (
            CheckUserInGroupWithAck {
                user_id: "u2".into(),
                group_name: "exists".into(),
                ack_id: 9,
                ext: ext(),
            }
            .into(),
            9,
            NOT_FOUND,
        ),
    ];
    for (message, ack_id, expected) in cases {
        let name = message.name();
        assert_eq!(t.app.acked(message, ack_id).await, expected, "{name}");
    }
}

#[tokio::test]
async fn close_with_acks() {
    let mut t = three().await;
    // Two more clients: u4 and a second connection of u2.
    let mut more = Vec::new();
    for (user, format) in [("u4", Format::Json), ("u2", Format::Json)] {
        let token = t.server.token("chat", Some(user));
        let (client, id) = connect_client(&t.server, &mut t.app, "chat", &token, format).await;
        more.push((client, id));
    }
    let (mut c4, id4) = more.remove(0);
    let (mut c2b, id2b) = more.remove(0);

    // CloseConnectionWithAck.
    let status = t
        .app
        .acked(
            CloseConnectionWithAck {
                connection_id: t.id(0),
                reason: Some("r1".into()),
                ack_id: 1,
                ext: ext(),
            },
            1,
        )
        .await;
    assert_eq!(status, OK);
    match t.clients[0].until_closed().await {
        Some(HubMessage::Close { error, .. }) => assert_eq!(error.as_deref(), Some("r1")),
        other => panic!("expected a Close, got {other:?}"),
    }
    t.app.close_connection(&t.id(0)).await;
    let status = t
        .app
        .acked(
            CloseConnectionWithAck {
                connection_id: "nope".into(),
                reason: None,
                ack_id: 2,
                ext: ext(),
            },
            2,
        )
        .await;
    assert_eq!(status, NOT_FOUND);

    // CloseUserConnectionsWithAck, sparing one of u2's connections.
    let status = t
        .app
        .acked(
            CloseUserConnectionsWithAck {
                user_id: "u2".into(),
                reason: Some("r2".into()),
                ack_id: 3,
                excluded_list: vec![id2b.clone()],
                ext: ext(),
            },
            3,
        )
        .await;
    assert_eq!(status, OK);
    assert!(t.clients[1].until_closed().await.is_some());
    t.app.close_connection(&t.id(1)).await;

    // CloseGroupConnectionsWithAck, sparing u3.
    for (id, ack_id) in [(t.id(2), 4), (id4.clone(), 5)] {
        let status = t
            .app
            .acked(
                JoinGroupWithAck {
                    connection_id: id,
                    group_name: "closing".into(),
                    ack_id,
                    ext: ext(),
                },
                ack_id,
            )
            .await;
        assert_eq!(status, OK);
    }
    let status = t
        .app
        .acked(
            CloseGroupConnectionsWithAck {
                group_name: "closing".into(),
                reason: None,
                ack_id: 6,
                excluded_list: vec![t.id(2)],
                ext: ext(),
            },
            6,
        )
        .await;
    assert_eq!(status, OK);
    assert!(c4.until_closed().await.is_some());
    t.app.close_connection(&id4).await;

    // The spared connections still receive.
    let msg = Msg::invocation("survivors", &[json!(1)]);
    t.app
        .send(BroadcastData {
            excluded_list: Vec::new(),
            payloads: msg.payloads(),
            ext: ext(),
        })
        .await;
    t.clients[2].expect(&msg).await;
    c2b.expect(&msg).await;
    assert_eq!(t.server.node.client_connection_count(), 2);
    let status = t
        .app
        .acked(
            CheckConnectionExistenceWithAck {
                connection_id: id2b,
                ack_id: 7,
                ext: ext(),
            },
            7,
        )
        .await;
    assert_eq!(status, OK);
}

/// Decodes a GroupMemberQuery page: `([(connection, user|None)], token|None)`.
pub(crate) fn members_page(payload: &[u8]) -> (Vec<(String, Option<String>)>, Option<String>) {
    let value = rmpv::decode::read_value(&mut &payload[..]).expect("msgpack payload");
    let parts = value.as_array().expect("array");
    assert_eq!(parts.len(), 2, "{value}");
    let members = parts[0]
        .as_array()
        .expect("member list")
        .iter()
        .map(|m| {
            let pair = m.as_array().expect("member pair");
            assert_eq!(pair.len(), 2);
            (
                pair[0].as_str().expect("connection id").to_string(),
                if pair[1].is_nil() {
                    None
                } else {
                    Some(pair[1].as_str().expect("user id").to_string())
                },
            )
        })
        .collect();
    let token = if parts[1].is_nil() {
        None
    } else {
        Some(parts[1].as_str().expect("token").to_string())
    };
    (members, token)
}

#[tokio::test]
async fn group_member_query_pages() {
    let mut t = three().await;
    // A fourth client without a user id.
    let token = t.server.token("chat", None);
    let (_anonymous, anon_id) =
        connect_client(&t.server, &mut t.app, "chat", &token, Format::Json).await;
    let mut expected = vec![
        (t.id(0), Some("u1".to_string())),
        (t.id(2), Some("u3".to_string())),
        (anon_id.clone(), None),
    ];
    for (n, (id, _)) in expected.clone().iter().enumerate() {
        let ack_id = 100 + n as i32;
        let status = t
            .app
            .acked(
                JoinGroupWithAck {
                    connection_id: id.clone(),
                    group_name: "members".into(),
                    ack_id,
                    ext: ext(),
                },
                ack_id,
            )
            .await;
        assert_eq!(status, OK);
    }
    expected.sort();

    let query = |ack_id, max, token: Option<String>, group: &str| GroupMemberQuery {
        ext: ext(),
        group_name: group.into(),
        ack_id,
        max,
        continuation_token: token,
    };
    t.app.send(query(1, 100, None, "members")).await;
    let ack = t.app.ack(1).await;
    assert_eq!(ack.status, OK);
    let (mut all, token) = members_page(&ack.payload.expect("payload"));
    all.sort();
    assert_eq!(all, expected);
    assert_eq!(token, None);

    // One per page, following the continuation token.
    let mut paged = Vec::new();
    let mut token = None;
    for ack_id in 2..10 {
        t.app.send(query(ack_id, 1, token.clone(), "members")).await;
        let ack = t.app.ack(ack_id).await;
        assert_eq!(ack.status, OK);
        let (page, next) = members_page(&ack.payload.expect("payload"));
        assert!(page.len() <= 1);
        paged.extend(page);
        token = next;
        if token.is_none() {
            break;
        }
    }
    paged.sort();
    assert_eq!(paged, expected);

    t.app.send(query(20, 10, None, "nobody-here")).await;
    let ack = t.app.ack(20).await;
    assert_eq!(members_page(&ack.payload.expect("payload")), (vec![], None));
}

#[tokio::test]
async fn access_key_request_gets_an_error_response() {
    let server = TestServer::start().await;
    let mut app = AppServer::open(&server, "chat", "s1").await;
    app.send(AccessKeyRequest {
        token: "entra-id-token".into(),
        kid: Some("kid-1".into()),
        ext: ext(),
    })
    .await;
    let response = app
        .take("AccessKeyResponse", |m| match m {
            ServiceMessage::AccessKeyResponse(r) => Some(r.clone()),
            _ => None,
        })
        .await;
    assert!(response.access_key.is_none());
    assert!(!response.error_message.unwrap_or_default().is_empty());
    assert!(!response.error_type.unwrap_or_default().is_empty());
    app.echo_round_trip().await;
}
