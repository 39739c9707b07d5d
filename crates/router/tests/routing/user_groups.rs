//! User groups: joins that cover current and later connections, TTLs and their sweep, leaving, the cap on TTL-less memberships.

use super::*;

#[test]
fn user_join_group_adds_current_and_later_connections() {
    let s = setup();
    let a1 = connect(&s.hub, "a1", Some("alice"));
    let b1 = connect(&s.hub, "b1", Some("bob"));
    s.hub
        .user_join_group(&uid("alice"), &group("g"), None, Instant::now())
        .unwrap();
    assert!(in_group(&a1, "g"));
    assert!(!in_group(&b1, "g"));
    assert!(s.hub.group_exists(&group("g")));

    let a2 = connect_mp(&s.hub, "a2", Some("alice"));
    assert!(in_group(&a2, "g"));
    assert!(s
        .hub
        .user_in_group(&uid("alice"), &group("g"), Instant::now()));
    assert!(!s
        .hub
        .user_in_group(&uid("bob"), &group("g"), Instant::now()));

    let payloads = json("j").with(Protocol::MessagePack, Bytes::from_static(b"m"));
    assert_eq!(s.hub.send(&group_target("g", &[], &[]), &payloads), 2);
    assert_eq!(reached(&[a1, a2, b1]), strings(&["a1", "a2"]));

    // Joining twice changes nothing.
    s.hub
        .user_join_group(&uid("alice"), &group("g"), None, Instant::now())
        .unwrap();
    assert_eq!(member_ids(&s.hub, "g"), vec!["a1", "a2"]);
}

#[test]
fn user_group_ttl_expires_on_sweep() {
    let s = setup();
    let t0 = Instant::now();
    let ttl = Duration::from_secs(3600);
    let a1 = connect(&s.hub, "a1", Some("alice"));
    let direct = connect(&s.hub, "d", Some("dave"));
    let c1 = connect(&s.hub, "c1", Some("carol"));
    s.hub.add_to_group(&cid("d"), &group("g"));
    s.hub
        .user_join_group(&uid("alice"), &group("g"), Some(ttl), t0)
        .unwrap();
    s.hub
        .user_join_group(&uid("carol"), &group("g"), None, t0)
        .unwrap();
    let a2 = connect(&s.hub, "a2", Some("alice"));
    assert!(in_group(&a1, "g") && in_group(&a2, "g"));
    s.interest.take();

    s.router.sweep(t0 + ttl - Duration::from_millis(1));
    assert!(in_group(&a1, "g") && in_group(&a2, "g"));
    assert!(s.hub.user_in_group(
        &uid("alice"),
        &group("g"),
        t0 + ttl - Duration::from_millis(1)
    ));

    s.router.sweep(t0 + ttl);
    assert!(!in_group(&a1, "g"));
    assert!(!in_group(&a2, "g"));
    assert!(!s.hub.user_in_group(&uid("alice"), &group("g"), t0 + ttl));
    assert!(!s
        .hub
        .user_in_group(&uid("alice"), &group("g"), Instant::now()));
    // Other members are untouched.
    assert!(in_group(&direct, "g"));
    assert!(in_group(&c1, "g"));
    assert_eq!(member_ids(&s.hub, "g"), vec!["c1", "d"]);
    assert!(s.interest.take().is_empty(), "the group still has members");

    // A later connection of the user does not join.
    let a3 = connect(&s.hub, "a3", Some("alice"));
    assert!(a3.groups().is_empty());
}

#[test]
fn user_group_ttl_expiry_removes_the_group_when_it_empties() {
    let s = setup();
    let t0 = Instant::now();
    let ttl = Duration::from_secs(60);
    connect(&s.hub, "a1", Some("alice"));
    s.hub
        .user_join_group(&uid("alice"), &group("g"), Some(ttl), t0)
        .unwrap();
    s.interest.take();
    s.router.sweep(t0 + ttl + Duration::from_secs(1));
    assert!(!s.hub.group_exists(&group("g")));
    assert_eq!(
        s.interest.take(),
        vec![(Channel::Group(hub_name("chat"), group("g")), false)]
    );
    // Sweeping again is a no-op.
    s.router.sweep(t0 + ttl + Duration::from_secs(2));
    assert!(s.interest.take().is_empty());
}

#[test]
fn expired_but_unswept_membership_is_not_honoured() {
    let s = setup();
    let Some(past) = Instant::now().checked_sub(Duration::from_secs(10)) else {
        return; // the clock is too close to its origin to build an instant in the past
    };
    let a1 = connect(&s.hub, "a1", Some("alice"));
    s.hub
        .user_join_group(
            &uid("alice"),
            &group("g"),
            Some(Duration::from_secs(1)),
            past,
        )
        .unwrap();
    // Current connections join regardless; the record is already stale.
    assert!(in_group(&a1, "g"));
    let a2 = connect(&s.hub, "a2", Some("alice"));
    assert!(a2.groups().is_empty());
    s.router.sweep(Instant::now());
    assert!(a1.groups().is_empty());
    assert!(!s
        .hub
        .user_in_group(&uid("alice"), &group("g"), Instant::now()));
}

#[test]
fn ttl_zero_adds_only_current_connections() {
    let s = setup();
    let a1 = connect(&s.hub, "a1", Some("alice"));
    s.hub
        .user_join_group(
            &uid("alice"),
            &group("g"),
            Some(Duration::ZERO),
            Instant::now(),
        )
        .unwrap();
    assert!(in_group(&a1, "g"));
    let a2 = connect(&s.hub, "a2", Some("alice"));
    assert!(a2.groups().is_empty(), "ttl 0 records no membership");
    // In the group by its connection only.
    assert!(s
        .hub
        .user_in_group(&uid("alice"), &group("g"), Instant::now()));
    s.router.sweep(Instant::now() + Duration::from_secs(3600));
    assert!(in_group(&a1, "g"), "nothing to expire");
    s.hub.remove_from_group(&cid("a1"), &group("g"));
    assert!(!s
        .hub
        .user_in_group(&uid("alice"), &group("g"), Instant::now()));

    // A user without connections: nothing happens at all.
    s.hub
        .user_join_group(
            &uid("nobody"),
            &group("h"),
            Some(Duration::ZERO),
            Instant::now(),
        )
        .unwrap();
    assert!(!s.hub.group_exists(&group("h")));
    assert!(!s
        .hub
        .user_in_group(&uid("nobody"), &group("h"), Instant::now()));
    let n = connect(&s.hub, "n", Some("nobody"));
    assert!(n.groups().is_empty());
}

#[test]
fn user_leave_one_group() {
    let s = setup();
    let a1 = connect(&s.hub, "a1", Some("alice"));
    let b1 = connect(&s.hub, "b1", Some("bob"));
    let now = Instant::now();
    s.hub
        .user_join_group(&uid("alice"), &group("g1"), None, now)
        .unwrap();
    s.hub
        .user_join_group(&uid("alice"), &group("g2"), None, now)
        .unwrap();
    s.hub
        .user_join_group(&uid("bob"), &group("g1"), None, now)
        .unwrap();

    s.hub.user_leave_group(&uid("alice"), Some(&group("g1")));
    assert_eq!(a1.groups(), vec![group("g2")]);
    assert_eq!(b1.groups(), vec![group("g1")]);
    assert!(!s.hub.user_in_group(&uid("alice"), &group("g1"), now));
    assert!(s.hub.user_in_group(&uid("alice"), &group("g2"), now));
    assert!(s.hub.user_in_group(&uid("bob"), &group("g1"), now));

    // The record is gone: a new connection joins only g2.
    let a2 = connect(&s.hub, "a2", Some("alice"));
    assert_eq!(a2.groups(), vec![group("g2")]);

    // Leaving a group the user was never in is harmless.
    s.hub.user_leave_group(&uid("alice"), Some(&group("never")));
    s.hub.user_leave_group(&uid("ghost"), Some(&group("g2")));
    assert_eq!(member_ids(&s.hub, "g2"), vec!["a1", "a2"]);
}

#[test]
fn user_leave_one_group_also_removes_direct_memberships() {
    let s = setup();
    let a1 = connect(&s.hub, "a1", Some("alice"));
    s.hub.add_to_group(&cid("a1"), &group("g"));
    s.hub.user_leave_group(&uid("alice"), Some(&group("g")));
    assert!(a1.groups().is_empty());
    assert!(!s.hub.group_exists(&group("g")));
}

#[test]
fn user_leave_all_groups() {
    let s = setup();
    let a1 = connect(&s.hub, "a1", Some("alice"));
    let b1 = connect(&s.hub, "b1", Some("bob"));
    let now = Instant::now();
    s.hub
        .user_join_group(&uid("alice"), &group("g1"), None, now)
        .unwrap();
    s.hub
        .user_join_group(
            &uid("alice"),
            &group("g2"),
            Some(Duration::from_secs(600)),
            now,
        )
        .unwrap();
    s.hub
        .user_join_group(&uid("alice"), &group("g3"), Some(Duration::ZERO), now)
        .unwrap();
    s.hub.add_to_group(&cid("a1"), &group("g4"));
    s.hub
        .user_join_group(&uid("bob"), &group("g1"), None, now)
        .unwrap();
    assert_eq!(a1.groups().len(), 4);

    s.hub.user_leave_group(&uid("alice"), None);
    assert!(a1.groups().is_empty());
    for g in ["g1", "g2", "g3", "g4"] {
        assert!(!s.hub.user_in_group(&uid("alice"), &group(g), now), "{g}");
    }
    for g in ["g2", "g3", "g4"] {
        assert!(!s.hub.group_exists(&group(g)), "{g}");
    }
    assert_eq!(b1.groups(), vec![group("g1")]);
    assert_eq!(member_ids(&s.hub, "g1"), vec!["b1"]);
    let a2 = connect(&s.hub, "a2", Some("alice"));
    assert!(a2.groups().is_empty());

    // A user with records but no connections.
    s.hub
        .user_join_group(&uid("zoe"), &group("z"), None, now)
        .unwrap();
    assert!(s.hub.user_in_group(&uid("zoe"), &group("z"), now));
    s.hub.user_leave_group(&uid("zoe"), None);
    assert!(!s.hub.user_in_group(&uid("zoe"), &group("z"), now));
    let z1 = connect(&s.hub, "z1", Some("zoe"));
    assert!(z1.groups().is_empty());
}

#[test]
fn user_in_group_by_record_or_by_connection() {
    let s = setup();
    let t0 = Instant::now();
    // By record, without any connection.
    s.hub
        .user_join_group(&uid("alice"), &group("g"), None, t0)
        .unwrap();
    assert!(s.hub.user_in_group(&uid("alice"), &group("g"), t0));
    assert!(!s.hub.user_exists(&uid("alice")));
    assert!(!s.hub.group_exists(&group("g")));

    // By record, bounded by its ttl.
    s.hub
        .user_join_group(
            &uid("alice"),
            &group("t"),
            Some(Duration::from_secs(60)),
            t0,
        )
        .unwrap();
    assert!(s
        .hub
        .user_in_group(&uid("alice"), &group("t"), t0 + Duration::from_secs(59)));
    assert!(!s
        .hub
        .user_in_group(&uid("alice"), &group("t"), t0 + Duration::from_secs(60)));

    // By connection, without any record.
    connect(&s.hub, "b1", Some("bob"));
    connect(&s.hub, "b2", Some("bob"));
    assert!(!s.hub.user_in_group(&uid("bob"), &group("h"), t0));
    s.hub.add_to_group(&cid("b2"), &group("h"));
    assert!(s.hub.user_in_group(&uid("bob"), &group("h"), t0));
    s.hub.remove_connection(&cid("b2"));
    assert!(!s.hub.user_in_group(&uid("bob"), &group("h"), t0));

    // Neither.
    assert!(!s.hub.user_in_group(&uid("carol"), &group("g"), t0));
    assert!(!s.hub.user_in_group(&uid("alice"), &group("other"), t0));
}

#[test]
fn ttl_less_memberships_are_capped_at_100_per_user() {
    let s = setup();
    let a1 = connect(&s.hub, "a1", Some("alice"));
    let now = Instant::now();
    let g = |i: usize| group(&format!("n{i:03}"));
    // Memberships with a ttl do not count against the cap.
    for i in 0..5 {
        s.hub
            .user_join_group(
                &uid("alice"),
                &group(&format!("t{i}")),
                Some(Duration::from_secs(3600)),
                now,
            )
            .unwrap();
    }
    for i in 0..100 {
        s.hub
            .user_join_group(&uid("alice"), &g(i), None, now)
            .unwrap();
    }
    assert_eq!(a1.groups().len(), 105);
    for i in 0..100 {
        assert!(s.hub.user_in_group(&uid("alice"), &g(i), now));
    }
    s.interest.take();

    // The 101st evicts the oldest.
    s.hub
        .user_join_group(&uid("alice"), &g(100), None, now)
        .unwrap();
    assert!(!s.hub.user_in_group(&uid("alice"), &g(0), now));
    assert!(!in_group(&a1, "n000"));
    assert!(!s.hub.group_exists(&g(0)));
    for i in 1..=100 {
        assert!(s.hub.user_in_group(&uid("alice"), &g(i), now), "n{i:03}");
    }
    for i in 0..5 {
        assert!(in_group(&a1, &format!("t{i}")));
    }
    assert_eq!(a1.groups().len(), 105);
    let events = s.interest.take();
    assert!(events.contains(&(Channel::Group(hub_name("chat"), g(0)), false)));
    assert!(events.contains(&(Channel::Group(hub_name("chat"), g(100)), true)));

    // Joining again refreshes a membership: the next eviction takes n002, not n001.
    s.hub
        .user_join_group(&uid("alice"), &g(1), None, now)
        .unwrap();
    s.hub
        .user_join_group(&uid("alice"), &g(101), None, now)
        .unwrap();
    assert!(s.hub.user_in_group(&uid("alice"), &g(1), now));
    assert!(!s.hub.user_in_group(&uid("alice"), &g(2), now));
    assert!(!in_group(&a1, "n002"));

    // A later connection joins exactly the surviving memberships.
    let a2 = connect(&s.hub, "a2", Some("alice"));
    let survivors: BTreeSet<GroupName> = a1.groups().into_iter().collect();
    assert_eq!(a2.groups().into_iter().collect::<BTreeSet<_>>(), survivors);
    assert_eq!(survivors.len(), 105);

    // Another user's cap is independent.
    connect(&s.hub, "b1", Some("bob"));
    s.hub
        .user_join_group(&uid("bob"), &g(0), None, now)
        .unwrap();
    assert!(s.hub.user_in_group(&uid("bob"), &g(0), now));
}

#[test]
fn a_ttl_beyond_reason_is_capped_not_a_panic() {
    let router = Router::new(Arc::new(Recorder::default()));
    let hub_name = HubName::new("chat", None).unwrap();
    router.apply(&Message::UserJoinGroup {
        hub: hub_name.clone(),
        user: uid("alice"),
        group: group("g"),
        ttl: Some(Duration::MAX),
    });
    assert!(router
        .hub(&hub_name)
        .user_in_group(&uid("alice"), &group("g"), Instant::now()));
}
