//! Interest: the channels the router reports wanted and unwanted, once each and in order.

use super::*;

#[test]
fn interest_in_the_hub_channel() {
    let s = setup();
    let ch = Channel::Hub(hub_name("chat"));
    connect(&s.hub, "a", None);
    assert_eq!(s.interest.take(), vec![(ch.clone(), true)]);
    connect(&s.hub, "b", None);
    assert!(s.interest.take().is_empty());
    s.hub.remove_connection(&cid("a"));
    assert!(s.interest.take().is_empty());
    s.hub.remove_connection(&cid("b"));
    assert_eq!(s.interest.take(), vec![(ch.clone(), false)]);
    s.hub.remove_connection(&cid("b"));
    assert!(s.interest.take().is_empty());
    connect(&s.hub, "c", None);
    assert_eq!(s.interest.take(), vec![(ch, true)]);

    // Another hub has its own channel; creating a hub alone reports nothing.
    let other = s.router.hub(&hub_name("other"));
    assert!(s.interest.take().is_empty());
    connect(&other, "x", None);
    assert_eq!(
        s.interest.take(),
        vec![(Channel::Hub(hub_name("other")), true)]
    );
}

/// A connection's own channel is wanted from the moment it is registered until it is
/// removed, so connection-addressed messages reach its node from any node.
#[test]
fn interest_in_connection_channels() {
    let s = setup();
    let a = Channel::Connection(hub_name("chat"), cid("a"));
    connect(&s.hub, "a", None);
    assert!(s.interest.take_all().contains(&(a.clone(), true)));
    // Another connection's arrival says nothing about this one.
    connect(&s.hub, "b", None);
    assert!(!s.interest.take_all().iter().any(|(c, _)| *c == a));
    s.hub.remove_connection(&cid("a"));
    assert_eq!(s.interest.take_all(), vec![(a, false)]);
    s.hub.remove_connection(&cid("a"));
    assert!(s.interest.take_all().is_empty());
}

#[test]
fn interest_in_user_channels() {
    let s = setup();
    let alice = Channel::User(hub_name("chat"), uid("alice"));
    connect(&s.hub, "a1", Some("alice"));
    assert_eq!(
        s.interest.take(),
        vec![
            (Channel::Hub(hub_name("chat")), true),
            (alice.clone(), true)
        ]
    );
    connect(&s.hub, "a2", Some("alice"));
    connect(&s.hub, "anon", None);
    assert!(s.interest.take().is_empty());
    s.hub.remove_connection(&cid("a1"));
    assert!(s.interest.take().is_empty());
    s.hub.remove_connection(&cid("a2"));
    assert_eq!(s.interest.take(), vec![(alice.clone(), false)]);
    connect(&s.hub, "a3", Some("alice"));
    assert_eq!(s.interest.take(), vec![(alice, true)]);
}

#[test]
fn interest_in_group_channels() {
    let s = setup();
    let ch = Channel::Group(hub_name("chat"), group("g"));
    connect(&s.hub, "a", None);
    connect(&s.hub, "b", None);
    s.interest.take();

    s.hub.add_to_group(&cid("a"), &group("g"));
    assert_eq!(s.interest.take(), vec![(ch.clone(), true)]);
    s.hub.add_to_group(&cid("b"), &group("g"));
    s.hub.add_to_group(&cid("a"), &group("g"));
    assert!(s.interest.take().is_empty());
    s.hub.remove_from_group(&cid("a"), &group("g"));
    s.hub.remove_from_group(&cid("a"), &group("g"));
    assert!(s.interest.take().is_empty());
    s.hub.remove_from_all_groups(&cid("b"));
    assert_eq!(s.interest.take(), vec![(ch.clone(), false)]);
    s.hub.remove_from_group(&cid("b"), &group("g"));
    assert!(s.interest.take().is_empty());

    // Through user groups.
    connect(&s.hub, "u1", Some("u"));
    s.interest.take();
    s.hub
        .user_join_group(&uid("u"), &group("g"), None, Instant::now())
        .unwrap();
    assert_eq!(s.interest.take(), vec![(ch.clone(), true)]);
    s.hub.user_leave_group(&uid("u"), Some(&group("g")));
    assert_eq!(s.interest.take(), vec![(ch, false)]);
}

#[test]
fn removing_a_connection_reports_each_last_member_once() {
    let s = setup();
    connect(&s.hub, "a", Some("alice"));
    connect(&s.hub, "o", None);
    for g in ["g1", "g2", "shared"] {
        s.hub.add_to_group(&cid("a"), &group(g));
    }
    s.hub.add_to_group(&cid("o"), &group("shared"));
    s.interest.take();

    s.hub.remove_connection(&cid("a"));
    let events: BTreeSet<_> = s.interest.take().into_iter().collect();
    let expected: BTreeSet<_> = [
        (Channel::Group(hub_name("chat"), group("g1")), false),
        (Channel::Group(hub_name("chat"), group("g2")), false),
        (Channel::User(hub_name("chat"), uid("alice")), false),
    ]
    .into_iter()
    .collect();
    assert_eq!(events, expected);

    s.hub.remove_connection(&cid("o"));
    let events: BTreeSet<_> = s.interest.take().into_iter().collect();
    let expected: BTreeSet<_> = [
        (Channel::Group(hub_name("chat"), group("shared")), false),
        (Channel::Hub(hub_name("chat")), false),
    ]
    .into_iter()
    .collect();
    assert_eq!(events, expected);
    assert!(s.interest.net().values().all(|n| *n == 0));
}

/// Interest changes must be reported in the order they happen: a "last member left" must never
/// be reported after a later "first member arrived" for the same channel, or the node would
/// unsubscribe while it has a member (`BackplaneInterest` in crates/node/src/node.rs forwards
/// each change to subscribe/unsubscribe).
#[test]
fn interest_changes_of_one_channel_are_reported_in_order() {
    struct Gate {
        events: Mutex<Vec<(Channel, bool)>>,
        entered: Mutex<Option<mpsc::Sender<()>>>,
        release: Mutex<Option<mpsc::Receiver<()>>>,
    }
    impl Interest for Gate {
        fn changed(&self, channel: Channel, interested: bool) {
            if matches!(channel, Channel::Hub(_)) && !interested {
                let entered = self.entered.lock().take();
                if let Some(entered) = entered {
                    // Hold the first "last member left" until the main thread says so.
                    entered.send(()).unwrap();
                    let release = self.release.lock().take().unwrap();
                    let _ = release.recv_timeout(Duration::from_secs(10));
                }
            }
            self.events.lock().push((channel, interested));
        }
    }
    let (entered_tx, entered_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel();
    let gate = Arc::new(Gate {
        events: Mutex::new(Vec::new()),
        entered: Mutex::new(Some(entered_tx)),
        release: Mutex::new(Some(release_rx)),
    });
    let router = Router::new(gate.clone());
    let hub = router.hub(&hub_name("chat"));

    connect(&hub, "b", None);
    let leaving = {
        let hub = hub.clone();
        thread::spawn(move || hub.remove_connection(&cid("b")))
    };
    entered_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("remove_connection reported the last member");
    // While that report is in flight, a new first member arrives (it must wait its turn).
    let arriving = {
        let hub = hub.clone();
        thread::spawn(move || {
            connect(&hub, "a", None);
        })
    };
    thread::sleep(Duration::from_millis(200));
    release_tx.send(()).unwrap();
    leaving.join().unwrap();
    arriving.join().unwrap();

    assert_eq!(hub.connection_count(), 1);
    let events = gate.events.lock().clone();
    let last = events
        .iter()
        .rev()
        .find(|(c, _)| matches!(c, Channel::Hub(_)))
        .unwrap();
    assert!(
        last.1,
        "the hub has a connection but the last change reported was 'not interested': {events:?}"
    );
}
