//! Concurrency: membership changes, broadcasts, adds and removals at once leave every index consistent.

use super::*;

/// Four workers add and remove connections and change group and user-group memberships
/// while another thread broadcasts. Each worker only touches its own connections and users
/// (groups are shared), so every index can be checked while the others keep running.
#[test]
fn concurrent_membership_changes_and_broadcasts_leave_consistent_indices() {
    const WORKERS: usize = 4;
    const STEPS: usize = 20_000;
    let s = setup();
    let groups: Arc<Vec<GroupName>> = Arc::new((0..6).map(|i| group(&format!("g{i}"))).collect());
    let users_of =
        |t: usize| -> Vec<UserId> { (0..2).map(|k| uid(&format!("u{t}-{k}"))).collect() };
    let all_users: Vec<UserId> = (0..WORKERS).flat_map(users_of).collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    let stop = Arc::new(AtomicBool::new(false));

    let broadcaster = {
        let hub = s.hub.clone();
        let stop = stop.clone();
        let groups = groups.clone();
        let users = all_users.clone();
        thread::spawn(move || {
            let payloads = json("b").with(Protocol::MessagePack, Bytes::from_static(b"m"));
            let mut rounds = 0usize;
            while !stop.load(Ordering::Relaxed) {
                hub.send(&Target::All { excluded: vec![] }, &payloads);
                let g = &groups[rounds % groups.len()];
                hub.send(
                    &Target::Group {
                        group: g.clone(),
                        excluded: vec![],
                        excluded_users: vec![users[0].clone()],
                    },
                    &payloads,
                );
                hub.send(&Target::Groups(groups.to_vec()), &payloads);
                hub.send(&Target::Users(users.clone()), &payloads);
                let members = hub.group_members(g, None, usize::MAX);
                assert!(members
                    .windows(2)
                    .all(|w| w[0].connection < w[1].connection));
                rounds += 1;
            }
            rounds
        })
    };

    let workers: Vec<_> = (0..WORKERS)
        .map(|t| {
            let hub = s.hub.clone();
            let groups = groups.clone();
            let users = users_of(t);
            thread::spawn(move || {
                let mut rng = Rng(0x2545_f491_4f6c_dd1d ^ ((t as u64 + 1) * 0x9e37_79b9));
                let mut live: Vec<Arc<Connection>> = Vec::new();
                let mut gone: Vec<Arc<Connection>> = Vec::new();
                let leave = |hub: &Hub, c: Arc<Connection>, gone: &mut Vec<Arc<Connection>>| {
                    let removed = hub.remove_connection(c.id()).expect("registered");
                    assert!(Arc::ptr_eq(&removed, &c));
                    assert!(c.groups().is_empty());
                    assert!(!hub.add_to_group(c.id(), &group("g0")));
                    assert!(c.groups().is_empty());
                    assert!(!hub.connection_exists(c.id()));
                    gone.push(c);
                };
                for step in 0..STEPS {
                    if Instant::now() > deadline {
                        break;
                    }
                    let g = &groups[rng.below(groups.len())];
                    let u = &users[rng.below(users.len())];
                    match rng.below(10) {
                        0 | 1 if live.len() < 6 => {
                            let user = match rng.below(3) {
                                0 => None,
                                n => Some(users[n - 1].clone()),
                            };
                            let c = Arc::new(Connection::new(
                                cid(&format!("w{t}-{step}")),
                                user,
                                64 * 1024,
                            ));
                            c.set_protocol(if step % 2 == 0 {
                                Protocol::Json
                            } else {
                                Protocol::MessagePack
                            });
                            assert!(hub.add_connection(c.clone()));
                            live.push(c);
                        }
                        0..=2 if !live.is_empty() => {
                            let c = live.swap_remove(rng.below(live.len()));
                            leave(&hub, c, &mut gone);
                        }
                        3 | 4 if !live.is_empty() => {
                            let c = &live[rng.below(live.len())];
                            assert!(hub.add_to_group(c.id(), g));
                            assert!(c.groups().contains(g));
                        }
                        5 if !live.is_empty() => {
                            let c = &live[rng.below(live.len())];
                            assert!(hub.remove_from_group(c.id(), g));
                            assert!(!c.groups().contains(g));
                        }
                        6 if !live.is_empty() => {
                            let c = &live[rng.below(live.len())];
                            hub.remove_from_all_groups(c.id());
                            assert!(c.groups().is_empty());
                        }
                        7 => {
                            let ttl = match rng.below(3) {
                                0 => None,
                                1 => Some(Duration::ZERO),
                                _ => Some(Duration::from_secs(3600)),
                            };
                            hub.user_join_group(u, g, ttl, Instant::now()).unwrap();
                            let connected = live.iter().any(|c| c.user() == Some(u));
                            if ttl != Some(Duration::ZERO) || connected {
                                assert!(hub.user_in_group(u, g, Instant::now()));
                            }
                        }
                        8 => {
                            let which = (rng.below(3) > 0).then_some(g);
                            hub.user_leave_group(u, which);
                            assert!(!hub.user_in_group(u, g, Instant::now()));
                        }
                        _ => {
                            if let Some(c) = live.first() {
                                let mut out = Vec::new();
                                c.outbound().try_drain(&mut out);
                            }
                        }
                    }
                    if step % 8 == 0 {
                        // Only this worker changes these connections, so the indices must
                        // agree with each connection's own list right now.
                        for c in &live {
                            let own = c.groups();
                            for g in groups.iter() {
                                let listed = hub
                                    .group_members(g, None, usize::MAX)
                                    .iter()
                                    .any(|m| &m.connection == c.id());
                                assert_eq!(own.contains(g), listed, "{} in {g}", c.id());
                            }
                            assert!(hub.connection_exists(c.id()));
                        }
                        for u in &users {
                            let connected = live.iter().any(|c| c.user() == Some(u));
                            assert_eq!(hub.user_exists(u), connected, "{u}");
                        }
                    }
                }
                for c in std::mem::take(&mut live) {
                    leave(&hub, c, &mut gone);
                }
                gone
            })
        })
        .collect();

    let mut gone = Vec::new();
    for worker in workers {
        gone.extend(worker.join().expect("worker panicked"));
    }
    stop.store(true, Ordering::Relaxed);
    let rounds = broadcaster.join().expect("broadcaster panicked");
    assert!(rounds > 0);
    assert!(!gone.is_empty());

    // Memberships recorded for users outlive connections; clear them too.
    for u in &all_users {
        s.hub.user_leave_group(u, None);
    }

    assert_eq!(s.hub.connection_count(), 0);
    assert_eq!(s.router.connection_count(), 0);
    assert_eq!(s.hub.protocols_in_use(), (false, false));
    for g in groups.iter() {
        assert!(!s.hub.group_exists(g), "{g} still exists");
        assert!(s.hub.group_members(g, None, usize::MAX).is_empty());
    }
    for u in &all_users {
        assert!(!s.hub.user_exists(u), "{u} still indexed");
        for g in groups.iter() {
            assert!(!s.hub.user_in_group(u, g, Instant::now()));
        }
    }
    for c in &gone {
        assert!(c.groups().is_empty(), "{} kept groups", c.id());
        assert!(!s.hub.connection_exists(c.id()));
    }
    assert_eq!(s.hub.send(&Target::All { excluded: vec![] }, &json("x")), 0);

    let net = s.interest.net();
    assert!(net.contains_key(&Channel::Hub(hub_name("chat"))));
    for (channel, n) in &net {
        assert_eq!(*n, 0, "interest in {channel:?} is unbalanced");
    }
}

/// `remove_from_group` updates the connection's own list and the group index in two separate
/// critical sections. A concurrent `add_to_group` of the same connection (two REST calls, or
/// a user-group join) landing between them leaves the connection listing the group while the
/// index no longer has it, and reports the group's first member a second time.
#[test]
fn concurrent_add_and_remove_of_one_connection_keep_indices_consistent() {
    /// Two threads meet at each step by spinning, so they start the racing calls within
    /// nanoseconds of each other; `stop` releases a thread whose partner is gone.
    struct Rendezvous {
        arrived: AtomicUsize,
        stop: AtomicBool,
    }
    impl Rendezvous {
        fn wait(&self, step: usize) -> bool {
            self.arrived.fetch_add(1, Ordering::AcqRel);
            let mut spins = 0u32;
            while self.arrived.load(Ordering::Acquire) < 2 * step {
                if self.stop.load(Ordering::Acquire) {
                    return false;
                }
                spins += 1;
                if spins & 1023 == 0 {
                    thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            }
            true
        }
    }

    let s = setup();
    let c = connect(&s.hub, "c", Some("u"));
    let g = group("g");
    let channel = Channel::Group(hub_name("chat"), g.clone());
    let meet = Arc::new(Rendezvous {
        arrived: AtomicUsize::new(0),
        stop: AtomicBool::new(false),
    });
    let adder = {
        let hub = s.hub.clone();
        let meet = meet.clone();
        let g = g.clone();
        thread::spawn(move || {
            let mut rng = Rng(0x1234_5678_9abc_def1);
            let mut step = 0;
            loop {
                step += 1;
                if !meet.wait(step) {
                    return;
                }
                // Vary the offset so some attempts land between the two critical sections.
                for _ in 0..rng.below(64) {
                    std::hint::spin_loop();
                }
                hub.add_to_group(&cid("c"), &g);
                step += 1;
                if !meet.wait(step) {
                    return;
                }
            }
        })
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut failure = None;
    let mut step = 0;
    let mut rounds = 0u64;
    while Instant::now() < deadline {
        rounds += 1;
        s.hub.add_to_group(&cid("c"), &g);
        step += 1;
        meet.wait(step);
        s.hub.remove_from_group(&cid("c"), &g);
        step += 1;
        meet.wait(step);
        // The adder now waits for the next step: the state is quiescent.
        let own = c.groups().contains(&g);
        let listed = member_ids(&s.hub, "g") == vec!["c"];
        let net = s.interest.net().get(&channel).copied().unwrap_or(0);
        if own != listed || net != i64::from(s.hub.group_exists(&g)) {
            failure = Some(format!(
                "round {rounds}: own list says {own}, group index says {listed}, \
                 net interest {net}"
            ));
            break;
        }
    }
    meet.stop.store(true, Ordering::Release);
    adder.join().unwrap();
    if let Some(failure) = failure {
        // Once desynchronised, adding again is a silent no-op: the group stays unreachable.
        let added = s.hub.add_to_group(&cid("c"), &g);
        let reached = s.hub.send(&group_target("g", &[], &[]), &json("x"));
        panic!("{failure}; add_to_group again returns {added}, a group send reaches {reached}");
    }
}
