//! Which connections each target reaches: all (with exclusions), connections, users, groups, and hubs kept apart.

use super::*;

#[test]
fn all_reaches_every_connection() {
    let s = setup();
    let conns: Vec<_> = (0..10)
        .map(|i| connect(&s.hub, &format!("c{i}"), None))
        .collect();
    let n = s.hub.send(&Target::All { excluded: vec![] }, &json("hi"));
    assert_eq!(n, 10);
    assert_eq!(reached(&conns).len(), 10);
}

#[test]
fn all_with_short_exclusions() {
    let s = setup();
    let conns: Vec<_> = (0..20)
        .map(|i| connect(&s.hub, &format!("c{i:02}"), None))
        .collect();

    // A few ids, one unknown.
    let target = Target::All {
        excluded: cids(&["c01", "c05", "c19", "nope"]),
    };
    assert_eq!(s.hub.send(&target, &json("x")), 17);
    let got = reached(&conns);
    assert_eq!(got.len(), 17);
    for id in ["c01", "c05", "c19"] {
        assert!(!got.contains(&id.to_string()));
    }

    // Exactly eight: the upper bound of the short list.
    let eight: Vec<String> = (0..8).map(|i| format!("c{i:02}")).collect();
    let target = Target::All {
        excluded: eight.iter().map(|s| cid(s)).collect(),
    };
    assert_eq!(s.hub.send(&target, &json("x")), 12);
    let got = reached(&conns);
    let expected: Vec<String> = (8..20).map(|i| format!("c{i:02}")).collect();
    assert_eq!(got, expected);
}

#[test]
fn all_with_many_exclusions() {
    let s = setup();
    let conns: Vec<_> = (0..20)
        .map(|i| connect(&s.hub, &format!("c{i:02}"), None))
        .collect();

    // Nine: the smallest long list.
    let nine: Vec<ConnectionId> = (0..9).map(|i| cid(&format!("c{i:02}"))).collect();
    assert_eq!(s.hub.send(&Target::All { excluded: nine }, &json("x")), 11);
    let expected: Vec<String> = (9..20).map(|i| format!("c{i:02}")).collect();
    assert_eq!(reached(&conns), expected);

    // Many, with duplicates and unknown ids.
    let mut many: Vec<ConnectionId> = (0..20)
        .filter(|i| i % 2 == 0)
        .map(|i| cid(&format!("c{i:02}")))
        .collect();
    many.extend(cids(&["c00", "c02", "ghost1", "ghost2", "ghost3"]));
    assert!(many.len() > 8);
    assert_eq!(s.hub.send(&Target::All { excluded: many }, &json("x")), 10);
    let expected: Vec<String> = (0..20)
        .filter(|i| i % 2 == 1)
        .map(|i| format!("c{i:02}"))
        .collect();
    assert_eq!(reached(&conns), expected);

    // Everyone excluded.
    let everyone: Vec<ConnectionId> = conns.iter().map(|c| c.id().clone()).collect();
    assert_eq!(
        s.hub.send(&Target::All { excluded: everyone }, &json("x")),
        0
    );
    assert!(reached(&conns).is_empty());
}

#[test]
fn connection_target() {
    let s = setup();
    let conns = vec![
        connect(&s.hub, "a", Some("u")),
        connect(&s.hub, "b", Some("u")),
        connect(&s.hub, "c", None),
    ];
    assert_eq!(s.hub.send(&Target::Connection(cid("b")), &json("x")), 1);
    assert_eq!(reached(&conns), strings(&["b"]));
    assert_eq!(s.hub.send(&Target::Connection(cid("zz")), &json("x")), 0);
    assert!(reached(&conns).is_empty());
}

#[test]
fn connections_target_dedups() {
    let s = setup();
    let conns = vec![
        connect(&s.hub, "a", None),
        connect(&s.hub, "b", None),
        connect(&s.hub, "c", None),
    ];
    let target = Target::Connections(cids(&["a", "a", "b", "unknown", "b", "a"]));
    assert_eq!(s.hub.send(&target, &json("x")), 2);
    assert_eq!(reached(&conns), strings(&["a", "b"]));
    assert_eq!(s.hub.send(&Target::Connections(vec![]), &json("x")), 0);
}

#[test]
fn user_target_reaches_all_connections_of_the_user() {
    let s = setup();
    let conns = vec![
        connect(&s.hub, "a1", Some("alice")),
        connect_mp(&s.hub, "a2", Some("alice")),
        connect(&s.hub, "a3", Some("alice")),
        connect(&s.hub, "b1", Some("bob")),
        connect(&s.hub, "anon", None),
    ];
    let payloads = json("j").with(Protocol::MessagePack, Bytes::from_static(b"m"));
    assert_eq!(s.hub.send(&Target::User(uid("alice")), &payloads), 3);
    assert_eq!(reached(&conns), strings(&["a1", "a2", "a3"]));
    assert_eq!(s.hub.send(&Target::User(uid("nobody")), &payloads), 0);
    // User ids are case-sensitive.
    assert_eq!(s.hub.send(&Target::User(uid("Alice")), &payloads), 0);
    assert!(reached(&conns).is_empty());
}

/// A user's connections kept apart from one to several and back (one needs no map).
#[test]
fn user_target_follows_connections_leaving_one_by_one() {
    let s = setup();
    let conns = vec![
        connect(&s.hub, "a1", Some("alice")),
        connect(&s.hub, "a2", Some("alice")),
        connect(&s.hub, "a3", Some("alice")),
    ];
    let payloads = json("j");
    let alice = Target::User(uid("alice"));
    s.hub.remove_connection(&cid("a2"));
    assert_eq!(s.hub.send(&alice, &payloads), 2);
    assert_eq!(reached(&conns), strings(&["a1", "a3"]));
    s.hub.remove_connection(&cid("a1"));
    assert_eq!(s.hub.send(&alice, &payloads), 1);
    assert_eq!(reached(&conns), strings(&["a3"]));
    // Back to two, then none.
    let a4 = connect(&s.hub, "a4", Some("alice"));
    assert_eq!(s.hub.send(&alice, &payloads), 2);
    assert_eq!(reached(&conns), strings(&["a3"]));
    assert_eq!(reached(std::slice::from_ref(&a4)), strings(&["a4"]));
    s.hub.remove_connection(&cid("a3"));
    s.hub.remove_connection(&cid("a4"));
    assert_eq!(s.hub.send(&alice, &payloads), 0);
    assert!(!s.hub.user_exists(&uid("alice")));
}

#[test]
fn users_target_dedups() {
    let s = setup();
    let conns = vec![
        connect(&s.hub, "a1", Some("alice")),
        connect(&s.hub, "a2", Some("alice")),
        connect(&s.hub, "b1", Some("bob")),
        connect(&s.hub, "c1", Some("carol")),
        connect(&s.hub, "anon", None),
    ];
    let target = Target::Users(vec![
        uid("alice"),
        uid("bob"),
        uid("alice"),
        uid("ghost"),
        uid("bob"),
    ]);
    assert_eq!(s.hub.send(&target, &json("x")), 3);
    assert_eq!(reached(&conns), strings(&["a1", "a2", "b1"]));
}

#[test]
fn group_target_with_exclusions() {
    let s = setup();
    let conns = vec![
        connect(&s.hub, "a1", Some("alice")),
        connect(&s.hub, "a2", Some("alice")),
        connect(&s.hub, "b1", Some("bob")),
        connect(&s.hub, "c1", Some("carol")),
        connect(&s.hub, "anon", None),
        connect(&s.hub, "outside", Some("bob")),
    ];
    for id in ["a1", "a2", "b1", "c1", "anon"] {
        assert!(s.hub.add_to_group(&cid(id), &group("g")));
    }

    assert_eq!(s.hub.send(&group_target("g", &[], &[]), &json("x")), 5);
    assert_eq!(reached(&conns), strings(&["a1", "a2", "b1", "c1", "anon"]));

    // Excluded connections.
    let n = s
        .hub
        .send(&group_target("g", &["a1", "anon", "zz"], &[]), &json("x"));
    assert_eq!(n, 3);
    assert_eq!(reached(&conns), strings(&["a2", "b1", "c1"]));

    // Excluded users (an anonymous connection is never excluded by user).
    let n = s
        .hub
        .send(&group_target("g", &[], &["alice", "ghost"]), &json("x"));
    assert_eq!(n, 3);
    assert_eq!(reached(&conns), strings(&["b1", "c1", "anon"]));

    // Both.
    let n = s
        .hub
        .send(&group_target("g", &["c1"], &["alice"]), &json("x"));
    assert_eq!(n, 2);
    assert_eq!(reached(&conns), strings(&["b1", "anon"]));

    // More than eight excluded connections.
    let mut many: Vec<&str> = vec!["x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8"];
    many.push("b1");
    many.push("a2");
    let n = s.hub.send(&group_target("g", &many, &[]), &json("x"));
    assert_eq!(n, 3);
    assert_eq!(reached(&conns), strings(&["a1", "c1", "anon"]));

    // Unknown group.
    assert_eq!(s.hub.send(&group_target("nope", &[], &[]), &json("x")), 0);
    assert!(reached(&conns).is_empty());
}

#[test]
fn groups_target_delivers_once_per_connection() {
    let s = setup();
    let conns = vec![
        connect(&s.hub, "a", None),
        connect(&s.hub, "b", None),
        connect(&s.hub, "c", None),
        connect(&s.hub, "d", None),
        connect(&s.hub, "e", None),
    ];
    for (id, g) in [
        ("a", "g1"),
        ("a", "g2"),
        ("b", "g1"),
        ("c", "g2"),
        ("d", "g3"),
    ] {
        assert!(s.hub.add_to_group(&cid(id), &group(g)));
    }
    let target = Target::Groups(vec![group("g1"), group("g2"), group("g1"), group("none")]);
    assert_eq!(s.hub.send(&target, &json("x")), 3);
    assert_eq!(reached(&conns), strings(&["a", "b", "c"]));

    let target = Target::Groups(vec![group("g1"), group("g2"), group("g3")]);
    assert_eq!(s.hub.send(&target, &json("x")), 4);
    assert_eq!(reached(&conns), strings(&["a", "b", "c", "d"]));

    assert_eq!(s.hub.send(&Target::Groups(vec![]), &json("x")), 0);
}

#[test]
fn hubs_are_isolated() {
    let s = setup();
    let other = s.router.hub(&hub_name("other"));
    let a = connect(&s.hub, "same-id", Some("u"));
    let b = connect(&other, "same-id", Some("u"));
    assert!(s.hub.add_to_group(&cid("same-id"), &group("g")));

    assert_eq!(s.hub.send(&Target::All { excluded: vec![] }, &json("x")), 1);
    assert_eq!(other.send(&group_target("g", &[], &[]), &json("x")), 0);
    assert_eq!(other.send(&Target::User(uid("u")), &json("y")), 1);
    assert_eq!(texts(&a), vec!["x"]);
    assert_eq!(texts(&b), vec!["y"]);
    assert_eq!(s.router.connection_count(), 2);
    assert_eq!(s.router.hubs().len(), 2);
    // Hub names are case-insensitive keys.
    assert!(Arc::ptr_eq(
        &s.router.hub(&hub_name("CHAT")),
        &s.router.find_hub(&hub_name("chat")).unwrap()
    ));
}
