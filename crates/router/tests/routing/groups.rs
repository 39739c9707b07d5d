//! Group membership: joining, leaving, removal of a connection, existence checks, paging, limits.

use super::*;

#[test]
fn add_and_remove_group_membership() {
    let s = setup();
    let a = connect(&s.hub, "a", None);
    let b = connect(&s.hub, "b", None);
    let g = group("g");

    assert!(!s.hub.group_exists(&g));
    assert!(s.hub.add_to_group(&cid("a"), &g));
    assert!(s.hub.group_exists(&g));
    assert_eq!(a.groups(), vec![g.clone()]);
    // Adding twice is idempotent.
    assert!(s.hub.add_to_group(&cid("a"), &g));
    assert_eq!(a.groups(), vec![g.clone()]);
    assert_eq!(member_ids(&s.hub, "g"), vec!["a"]);
    assert_eq!(s.hub.send(&group_target("g", &[], &[]), &json("x")), 1);
    assert_eq!(drain(&a).len(), 1);

    assert!(s.hub.add_to_group(&cid("b"), &g));
    assert_eq!(member_ids(&s.hub, "g"), vec!["a", "b"]);

    assert!(s.hub.remove_from_group(&cid("a"), &g));
    assert!(a.groups().is_empty());
    assert!(s.hub.group_exists(&g));
    assert_eq!(member_ids(&s.hub, "g"), vec!["b"]);
    // Removing a non-member of a known connection still succeeds.
    assert!(s.hub.remove_from_group(&cid("a"), &g));
    assert!(s.hub.remove_from_group(&cid("a"), &group("never")));
    // An unknown connection is reported.
    assert!(!s.hub.remove_from_group(&cid("zz"), &g));
    assert!(!s.hub.add_to_group(&cid("zz"), &g));

    assert!(s.hub.remove_from_group(&cid("b"), &g));
    assert!(!s.hub.group_exists(&g));
    assert!(b.groups().is_empty());
    assert_eq!(s.hub.send(&group_target("g", &[], &[]), &json("x")), 0);
}

#[test]
fn remove_from_all_groups() {
    let s = setup();
    let a = connect(&s.hub, "a", None);
    let b = connect(&s.hub, "b", None);
    for g in ["g1", "g2", "g3"] {
        s.hub.add_to_group(&cid("a"), &group(g));
    }
    s.hub.add_to_group(&cid("b"), &group("g2"));
    assert_eq!(a.groups().len(), 3);

    s.hub.remove_from_all_groups(&cid("a"));
    assert!(a.groups().is_empty());
    assert!(!s.hub.group_exists(&group("g1")));
    assert!(s.hub.group_exists(&group("g2")));
    assert!(!s.hub.group_exists(&group("g3")));
    assert_eq!(b.groups(), vec![group("g2")]);
    // The connection is still there and may join again.
    assert!(s.hub.connection_exists(&cid("a")));
    assert!(s.hub.add_to_group(&cid("a"), &group("g1")));
    // Unknown connection: a no-op.
    s.hub.remove_from_all_groups(&cid("zz"));
}

#[test]
fn removing_a_connection_clears_every_index() {
    let s = setup();
    let a = connect(&s.hub, "a", Some("alice"));
    let other = connect(&s.hub, "o", Some("bob"));
    for g in ["solo1", "solo2", "shared"] {
        s.hub.add_to_group(&cid("a"), &group(g));
    }
    s.hub.add_to_group(&cid("o"), &group("shared"));
    assert!(s.hub.user_exists(&uid("alice")));

    let removed = s.hub.remove_connection(&cid("a")).expect("was registered");
    assert!(Arc::ptr_eq(&removed, &a));
    assert!(a.groups().is_empty());
    assert!(!s.hub.connection_exists(&cid("a")));
    assert!(s.hub.connection(&cid("a")).is_none());
    assert!(!s.hub.user_exists(&uid("alice")));
    assert!(!s.hub.group_exists(&group("solo1")));
    assert!(!s.hub.group_exists(&group("solo2")));
    assert!(s.hub.group_exists(&group("shared")));
    assert_eq!(member_ids(&s.hub, "shared"), vec!["o"]);
    assert_eq!(s.hub.connection_count(), 1);

    // Nothing reaches it any more.
    let targets = [
        Target::All { excluded: vec![] },
        Target::Connection(cid("a")),
        Target::User(uid("alice")),
        group_target("solo1", &[], &[]),
        Target::Groups(vec![group("shared"), group("solo2")]),
    ];
    for target in &targets {
        s.hub.send(target, &json("x"));
    }
    assert!(drain(&a).is_empty());
    assert_eq!(drain(&other).len(), 2);

    // A second removal finds nothing.
    assert!(s.hub.remove_connection(&cid("a")).is_none());
    assert_eq!(s.hub.connection_count(), 1);
}

#[test]
fn a_connection_that_left_cannot_join_groups() {
    let s = setup();
    let a = connect(&s.hub, "a", Some("alice"));
    s.hub.remove_connection(&cid("a")).unwrap();
    assert!(!s.hub.add_to_group(&cid("a"), &group("g")));
    assert!(!s.hub.group_exists(&group("g")));
    assert!(a.groups().is_empty());
    // A user-group join after it left does not reach it either.
    s.hub
        .user_join_group(&uid("alice"), &group("g"), None, Instant::now())
        .unwrap();
    assert!(!s.hub.group_exists(&group("g")));
    assert!(a.groups().is_empty());
}

#[test]
fn duplicate_connection_id_is_refused() {
    let s = setup();
    let first = connect(&s.hub, "a", Some("alice"));
    let dup = Arc::new(Connection::new(cid("a"), Some(uid("mallory")), BUDGET));
    dup.set_protocol(Protocol::Json);
    assert!(!s.hub.add_connection(dup.clone()));
    assert_eq!(s.hub.connection_count(), 1);
    assert!(!s.hub.user_exists(&uid("mallory")));
    assert!(Arc::ptr_eq(&s.hub.connection(&cid("a")).unwrap(), &first));
    s.hub.send(&Target::Connection(cid("a")), &json("x"));
    assert_eq!(drain(&first).len(), 1);
    assert!(drain(&dup).is_empty());
    // The protocol is set once.
    assert!(!first.set_protocol(Protocol::MessagePack));
    assert_eq!(first.protocol(), Some(&Protocol::Json));
}

#[test]
fn existence_checks() {
    let s = setup();
    assert!(!s.hub.connection_exists(&cid("a")));
    assert!(!s.hub.user_exists(&uid("alice")));
    assert!(!s.hub.group_exists(&group("g")));

    connect(&s.hub, "a", Some("alice"));
    connect(&s.hub, "a2", Some("alice"));
    connect(&s.hub, "n", None);
    assert!(s.hub.connection_exists(&cid("a")));
    assert!(s.hub.connection_exists(&cid("n")));
    assert!(!s.hub.connection_exists(&cid("A")));
    assert!(s.hub.user_exists(&uid("alice")));
    assert!(!s.hub.group_exists(&group("g")));
    s.hub.add_to_group(&cid("n"), &group("g"));
    assert!(s.hub.group_exists(&group("g")));

    s.hub.remove_connection(&cid("a"));
    assert!(s.hub.user_exists(&uid("alice")), "a2 is still connected");
    s.hub.remove_connection(&cid("a2"));
    assert!(!s.hub.user_exists(&uid("alice")));
    s.hub.remove_connection(&cid("n"));
    assert!(!s.hub.group_exists(&group("g")));
}

#[test]
fn group_members_paging() {
    let s = setup();
    // Insert in a scrambled order.
    let mut order: Vec<usize> = (0..25).collect();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i + 1));
    }
    for i in order {
        let id = format!("m{i:02}");
        let user = (i % 2 == 0).then(|| format!("u{}", i % 3));
        connect(&s.hub, &id, user.as_deref());
        s.hub.add_to_group(&cid(&id), &group("g"));
    }
    connect(&s.hub, "outsider", None);
    let g = group("g");
    let ids = |page: &[GroupMember]| -> Vec<String> {
        page.iter().map(|m| m.connection.to_string()).collect()
    };
    let range = |from: usize, to: usize| -> Vec<String> {
        (from..to).map(|i| format!("m{i:02}")).collect()
    };

    let page1 = s.hub.group_members(&g, None, 10);
    assert_eq!(ids(&page1), range(0, 10));
    let page2 = s
        .hub
        .group_members(&g, Some(page1.last().unwrap().connection.as_str()), 10);
    assert_eq!(ids(&page2), range(10, 20));
    let page3 = s
        .hub
        .group_members(&g, Some(page2.last().unwrap().connection.as_str()), 10);
    assert_eq!(ids(&page3), range(20, 25));
    assert!(s.hub.group_members(&g, Some("m24"), 10).is_empty());

    // `after` need not be a member id.
    assert_eq!(ids(&s.hub.group_members(&g, Some("m05x"), 3)), range(6, 9));
    assert_eq!(ids(&s.hub.group_members(&g, Some(""), 100)), range(0, 25));
    assert!(s.hub.group_members(&g, None, 0).is_empty());
    assert!(s.hub.group_members(&group("none"), None, 10).is_empty());

    // Users are reported.
    for member in s.hub.group_members(&g, None, 100) {
        let i: usize = member.connection.as_str()[1..].parse().unwrap();
        let expected = (i & 1 == 0).then(|| uid(&format!("u{}", i % 3)));
        assert_eq!(member.user, expected, "{}", member.connection);
    }

    // Removed members disappear from the listing.
    s.hub.remove_connection(&cid("m03"));
    s.hub.remove_from_group(&cid("m04"), &g);
    assert_eq!(
        ids(&s.hub.group_members(&g, Some("m01"), 3)),
        vec!["m02", "m05", "m06"]
    );
}

#[test]
fn group_limits_refuse_joins_past_them_and_expired_memberships_do_not_count() {
    let router = Router::with_limits(
        Arc::new(Recorder::default()),
        GroupLimits {
            per_connection: 2,
            per_user: 2,
        },
    );
    let hub = router.hub(&hub_name("chat"));
    let a = connect(&hub, "a", Some("alice"));
    assert_eq!(hub.join_group(a.id(), &group("g1")), GroupJoin::Joined);
    assert_eq!(hub.join_group(a.id(), &group("g2")), GroupJoin::Joined);
    assert_eq!(hub.join_group(a.id(), &group("g3")), GroupJoin::Full(2));
    assert_eq!(
        hub.join_group(a.id(), &group("g1")),
        GroupJoin::Joined,
        "already in it"
    );
    assert_eq!(
        hub.join_group(&cid("nobody"), &group("g1")),
        GroupJoin::NotHere
    );
    assert!(!hub.group_exists(&group("g3")));
    assert!(hub.remove_from_group(a.id(), &group("g1")));
    assert_eq!(hub.join_group(a.id(), &group("g3")), GroupJoin::Joined);

    let t0 = Instant::now();
    let bob = uid("bob");
    hub.user_join_group(&bob, &group("u1"), Some(Duration::from_secs(1)), t0)
        .unwrap();
    hub.user_join_group(&bob, &group("u2"), None, t0).unwrap();
    assert_eq!(hub.user_join_group(&bob, &group("u3"), None, t0), Err(2));
    assert!(!hub.user_in_group(&bob, &group("u3"), t0));
    hub.user_join_group(&bob, &group("u2"), Some(Duration::from_secs(60)), t0)
        .unwrap();
    // Once u1's ttl has passed it no longer counts, swept or not.
    let later = t0 + Duration::from_secs(2);
    hub.user_join_group(&bob, &group("u3"), None, later)
        .unwrap();
    // ttl 0 adds only the user's current connections and records nothing: no limit.
    hub.user_join_group(&bob, &group("u4"), Some(Duration::ZERO), later)
        .unwrap();
}
