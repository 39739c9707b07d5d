//! Per-sender order across mixed targets, and with concurrent senders and a reader.

use super::*;

#[test]
fn per_sender_order_is_preserved_across_mixed_targets() {
    let s = setup();
    let a = connect(&s.hub, "a", Some("u"));
    let b = connect_mp(&s.hub, "b", Some("v"));
    let c = connect(&s.hub, "c", None);
    s.hub.add_to_group(&cid("a"), &group("g1"));
    s.hub.add_to_group(&cid("a"), &group("g2"));
    s.hub.add_to_group(&cid("b"), &group("g1"));

    let mut expected: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    let mut got: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    let conns = [("a", &a), ("b", &b), ("c", &c)];
    for i in 0..800 {
        let (target, recipients): (Target, &[&str]) = match i % 8 {
            0 => (Target::All { excluded: vec![] }, &["a", "b", "c"]),
            1 => (
                Target::All {
                    excluded: cids(&["c"]),
                },
                &["a", "b"],
            ),
            2 => (Target::Connection(cid("a")), &["a"]),
            3 => (Target::Connections(cids(&["a", "b", "a"])), &["a", "b"]),
            4 => (Target::User(uid("u")), &["a"]),
            5 => (Target::Users(vec![uid("u"), uid("v")]), &["a", "b"]),
            6 => (group_target("g1", &[], &[]), &["a", "b"]),
            _ => (Target::Groups(vec![group("g1"), group("g2")]), &["a", "b"]),
        };
        let text = format!("m{i}");
        let payloads = json(&text).with(Protocol::MessagePack, Bytes::from(text.clone()));
        assert_eq!(s.hub.send(&target, &payloads), recipients.len());
        for r in recipients {
            expected.entry(r).or_default().push(text.clone());
        }
        if i % 97 == 0 {
            for (id, conn) in conns {
                got.entry(id).or_default().extend(texts(conn));
            }
        }
    }
    for (id, conn) in conns {
        got.entry(id).or_default().extend(texts(conn));
    }
    assert_eq!(got, expected);
}

#[test]
fn per_sender_order_is_preserved_with_concurrent_senders_and_reader() {
    let s = setup();
    let a = connect(&s.hub, "a", Some("u"));
    let b = connect(&s.hub, "b", Some("v"));
    s.hub.add_to_group(&cid("a"), &group("g"));
    s.hub.add_to_group(&cid("b"), &group("g"));
    const SENDS: usize = 2000;

    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let a = a.clone();
        let done = done.clone();
        thread::spawn(move || {
            let mut frames = Vec::new();
            loop {
                let finished = done.load(Ordering::Acquire);
                let mut out = Vec::new();
                a.outbound().try_drain(&mut out);
                frames.extend(out);
                if finished {
                    break;
                }
                thread::yield_now();
            }
            frames
        })
    };
    let senders: Vec<_> = (0..2)
        .map(|sender| {
            let hub = s.hub.clone();
            thread::spawn(move || {
                for seq in 0..SENDS {
                    let target = match seq % 3 {
                        0 => Target::All { excluded: vec![] },
                        1 => group_target("g", &[], &[]),
                        _ => Target::User(uid("u")),
                    };
                    hub.send(&target, &json(&format!("{sender}:{seq}")));
                }
            })
        })
        .collect();
    for sender in senders {
        sender.join().unwrap();
    }
    done.store(true, Ordering::Release);
    let a_frames = reader.join().unwrap();

    let parse = |frames: &[Bytes]| {
        let mut per_sender: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for frame in frames {
            let text = std::str::from_utf8(frame).unwrap();
            let (sender, seq) = text.split_once(':').unwrap();
            per_sender
                .entry(sender.parse().unwrap())
                .or_default()
                .push(seq.parse().unwrap());
        }
        per_sender
    };
    let a_seen = parse(&a_frames);
    let b_seen = parse(&drain(&b));
    for sender in 0..2 {
        assert_eq!(a_seen[&sender], (0..SENDS).collect::<Vec<_>>());
        let b_expected: Vec<usize> = (0..SENDS).filter(|seq| seq % 3 != 2).collect();
        assert_eq!(b_seen[&sender], b_expected);
    }
}
