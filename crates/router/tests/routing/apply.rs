//! `Router::apply`: backplane messages (sends, group and user-group membership, closes) applied to a node's hubs.

use super::*;

#[test]
fn apply_send() {
    let s = setup();
    let a = connect(&s.hub, "a", None);
    let b = connect_mp(&s.hub, "b", None);
    let payloads = json("j").with(Protocol::MessagePack, Bytes::from_static(b"m"));
    let n = s.router.apply(&Message::Send {
        hub: hub_name("chat"),
        target: Target::All { excluded: vec![] },
        payloads: payloads.clone(),
    });
    assert_eq!(n, 2);
    assert_eq!(texts(&a), vec!["j"]);
    assert_eq!(texts(&b), vec!["m"]);

    let n = s.router.apply(&Message::Send {
        hub: hub_name("CHAT"),
        target: Target::Connection(cid("b")),
        payloads: payloads.clone(),
    });
    assert_eq!(n, 1);
    assert_eq!(texts(&b), vec!["m"]);

    // An unknown hub is not created by a send.
    let n = s.router.apply(&Message::Send {
        hub: hub_name("nowhere"),
        target: Target::All { excluded: vec![] },
        payloads,
    });
    assert_eq!(n, 0);
    assert!(s.router.find_hub(&hub_name("nowhere")).is_none());
}

#[test]
fn apply_group_membership_commands() {
    let s = setup();
    let a = connect(&s.hub, "a", None);
    let add = |g: &str| Message::AddToGroup {
        hub: hub_name("chat"),
        connection: cid("a"),
        group: group(g),
    };
    assert_eq!(s.router.apply(&add("g1")), 0);
    assert_eq!(a.groups(), vec![group("g1")]);

    let remove = |g: Option<&str>| Message::RemoveFromGroup {
        hub: hub_name("chat"),
        connection: cid("a"),
        group: g.map(group),
    };
    assert_eq!(s.router.apply(&remove(Some("g1"))), 0);
    assert!(a.groups().is_empty());
    assert!(!s.hub.group_exists(&group("g1")));

    for g in ["g1", "g2", "g3"] {
        s.router.apply(&add(g));
    }
    assert_eq!(a.groups().len(), 3);
    s.router.apply(&remove(Some("g2")));
    assert_eq!(a.groups(), vec![group("g1"), group("g3")]);
    s.router.apply(&remove(None));
    assert!(a.groups().is_empty());
    for g in ["g1", "g2", "g3"] {
        assert!(!s.hub.group_exists(&group(g)));
    }

    // Unknown hub or connection: nothing happens, no hub is created.
    s.router.apply(&Message::AddToGroup {
        hub: hub_name("nowhere"),
        connection: cid("a"),
        group: group("g"),
    });
    s.router.apply(&Message::RemoveFromGroup {
        hub: hub_name("nowhere"),
        connection: cid("a"),
        group: None,
    });
    assert!(s.router.find_hub(&hub_name("nowhere")).is_none());
    s.router.apply(&Message::AddToGroup {
        hub: hub_name("chat"),
        connection: cid("zz"),
        group: group("g"),
    });
    assert!(!s.hub.group_exists(&group("g")));
}

#[test]
fn apply_user_join_group_creates_the_hub() {
    let interest = Arc::new(Recorder::default());
    let router = Router::new(interest.clone());
    let name = hub_name("fresh");
    assert!(router.find_hub(&name).is_none());
    let n = router.apply(&Message::UserJoinGroup {
        hub: name.clone(),
        user: uid("alice"),
        group: group("g"),
        ttl: None,
    });
    assert_eq!(n, 0);
    let hub = router.find_hub(&name).expect("created by the join");
    assert_eq!(hub.connection_count(), 0);
    assert!(interest.take().is_empty());

    // The membership waits for the user's connections.
    let a1 = connect(&hub, "a1", Some("alice"));
    assert_eq!(a1.groups(), vec![group("g")]);

    // With a ttl, it expires on sweep.
    router.apply(&Message::UserJoinGroup {
        hub: name.clone(),
        user: uid("alice"),
        group: group("t"),
        ttl: Some(Duration::from_secs(30)),
    });
    assert!(in_group(&a1, "t"));
    router.sweep(Instant::now() + Duration::from_secs(31));
    assert!(!in_group(&a1, "t"));
    assert!(in_group(&a1, "g"));

    // ttl 0: current connections only.
    router.apply(&Message::UserJoinGroup {
        hub: name.clone(),
        user: uid("alice"),
        group: group("z"),
        ttl: Some(Duration::ZERO),
    });
    assert!(in_group(&a1, "z"));
    let a2 = connect(&hub, "a2", Some("alice"));
    assert_eq!(a2.groups(), vec![group("g")]);
}

#[test]
fn apply_user_leave_group() {
    let s = setup();
    let a1 = connect(&s.hub, "a1", Some("alice"));
    for g in ["g1", "g2", "g3"] {
        s.router.apply(&Message::UserJoinGroup {
            hub: hub_name("chat"),
            user: uid("alice"),
            group: group(g),
            ttl: None,
        });
    }
    assert_eq!(a1.groups().len(), 3);
    let n = s.router.apply(&Message::UserLeaveGroup {
        hub: hub_name("chat"),
        user: uid("alice"),
        group: Some(group("g2")),
    });
    assert_eq!(n, 0);
    assert_eq!(a1.groups(), vec![group("g1"), group("g3")]);
    s.router.apply(&Message::UserLeaveGroup {
        hub: hub_name("chat"),
        user: uid("alice"),
        group: None,
    });
    assert!(a1.groups().is_empty());
    let a2 = connect(&s.hub, "a2", Some("alice"));
    assert!(a2.groups().is_empty());

    // Unknown hub: not created.
    s.router.apply(&Message::UserLeaveGroup {
        hub: hub_name("nowhere"),
        user: uid("alice"),
        group: None,
    });
    assert!(s.router.find_hub(&hub_name("nowhere")).is_none());
}

#[test]
fn apply_close_with_target_and_exclusions() {
    let s = setup();
    let conns: Vec<_> = ["a", "b", "c", "d"]
        .iter()
        .map(|id| connect(&s.hub, id, Some(&format!("user-{id}"))))
        .collect();
    s.hub
        .send(&Target::All { excluded: vec![] }, &json("before"));
    let reason = CloseReason::ClosedByApi(Some("bye".into()));
    let n = s.router.apply(&Message::Close {
        hub: hub_name("chat"),
        target: Target::All {
            excluded: cids(&["a"]),
        },
        excluded: cids(&["b"]),
        reason: reason.clone(),
    });
    assert_eq!(n, 2);

    for c in &conns[..2] {
        assert!(!c.outbound().is_closing(), "{}", c.id());
    }
    for c in &conns[2..] {
        assert!(c.outbound().is_closing());
        assert_eq!(c.outbound().close_reason(), Some(reason.clone()));
        let mut out = Vec::new();
        assert_eq!(c.outbound().try_drain(&mut out), Some(Batch::Frames));
        assert_eq!(out, vec![Bytes::from_static(b"before")]);
        out.clear();
        assert_eq!(
            c.outbound().try_drain(&mut out),
            Some(Batch::Close(reason.clone()))
        );
        assert!(out.is_empty());
        // Asking is all the router does: the transport removes the connection.
        assert!(s.hub.connection_exists(c.id()));
    }
    // Later frames to closing connections are dropped.
    assert_eq!(
        s.hub
            .send(&Target::All { excluded: vec![] }, &json("after")),
        2
    );
    assert_eq!(conns[2].outbound().dropped_frames(), 1);
    assert_eq!(texts(&conns[0]), vec!["before", "after"]);

    // An unknown hub closes nothing.
    let n = s.router.apply(&Message::Close {
        hub: hub_name("nowhere"),
        target: Target::All { excluded: vec![] },
        excluded: vec![],
        reason: reason.clone(),
    });
    assert_eq!(n, 0);
    assert!(s.router.find_hub(&hub_name("nowhere")).is_none());
}

#[test]
fn apply_close_group_and_user_targets() {
    let s = setup();
    let conns: Vec<_> = [
        ("a1", "alice"),
        ("a2", "alice"),
        ("b1", "bob"),
        ("c1", "carol"),
        ("d1", "dave"),
    ]
    .iter()
    .map(|(id, user)| connect(&s.hub, id, Some(user)))
    .collect();
    for id in ["a1", "a2", "b1", "c1"] {
        s.hub.add_to_group(&cid(id), &group("g"));
    }
    let close = |target: Target, excluded: &[&str]| {
        s.router.apply(&Message::Close {
            hub: hub_name("chat"),
            target,
            excluded: cids(excluded),
            reason: CloseReason::ServiceShutdown,
        })
    };
    // Group with its own exclusions plus the command's.
    let n = close(group_target("g", &["b1"], &["alice"]), &["c1"]);
    assert_eq!(n, 0);
    let n = close(group_target("g", &[], &["alice"]), &["c1"]);
    assert_eq!(n, 1);
    let closing = |c: &Arc<Connection>| c.outbound().is_closing();
    assert_eq!(
        conns
            .iter()
            .filter(|c| closing(c))
            .map(|c| c.id().as_str())
            .collect::<Vec<_>>(),
        vec!["b1"]
    );
    // User target with an excluded connection.
    assert_eq!(close(Target::User(uid("alice")), &["a2"]), 1);
    assert!(closing(&conns[0]) && !closing(&conns[1]));
    // Connection target; closing twice keeps the first reason.
    conns[4].close(CloseReason::ClientClosed);
    assert_eq!(close(Target::Connection(cid("d1")), &[]), 1);
    assert_eq!(
        conns[4].outbound().close_reason(),
        Some(CloseReason::ClientClosed)
    );
    // Many excluded ids.
    let many: Vec<String> = (0..12).map(|i| format!("x{i}")).collect();
    let mut excluded: Vec<&str> = many.iter().map(String::as_str).collect();
    excluded.push("a2");
    assert_eq!(
        close(Target::Connections(cids(&["a2", "c1"])), &excluded),
        1
    );
    assert!(closing(&conns[3]) && !closing(&conns[1]));
}
