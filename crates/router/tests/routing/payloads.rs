//! Which payload each recipient gets (per protocol), frames shared not copied, the protocols in use.

use super::*;

#[test]
fn payload_is_chosen_per_recipient_protocol() {
    let s = setup();
    let j1 = connect(&s.hub, "j1", None);
    let j2 = connect(&s.hub, "j2", None);
    let m1 = connect_mp(&s.hub, "m1", None);
    let o1 = connect_with(
        &s.hub,
        "o1",
        None,
        Protocol::from_name("blazorpack"),
        BUDGET,
    );
    let all = Target::All { excluded: vec![] };

    let json_bytes = Bytes::from_static(b"{\"type\":1}\x1e");
    let mp_bytes = Bytes::from_static(b"\x05\x95\x01\x80\xc0\xa1x");
    let both = Payloads::new()
        .with(Protocol::Json, json_bytes.clone())
        .with(Protocol::MessagePack, mp_bytes.clone());
    assert_eq!(s.hub.send(&all, &both), 3);
    assert_eq!(drain(&j1), vec![json_bytes.clone()]);
    assert_eq!(drain(&j2), vec![json_bytes.clone()]);
    assert_eq!(drain(&m1), vec![mp_bytes.clone()]);
    assert!(drain(&o1).is_empty(), "no blazorpack payload was given");

    let json_only = Payloads::new().with(Protocol::Json, json_bytes.clone());
    assert_eq!(s.hub.send(&all, &json_only), 2);
    assert!(drain(&m1).is_empty());
    assert!(drain(&o1).is_empty());
    assert_eq!(drain(&j1).len(), 1);
    assert_eq!(drain(&j2).len(), 1);

    let mp_only = Payloads::new().with(Protocol::MessagePack, mp_bytes.clone());
    assert_eq!(s.hub.send(&all, &mp_only), 1);
    assert_eq!(drain(&m1), vec![mp_bytes]);
    assert!(drain(&j1).is_empty());

    // Other protocols match by name, case-insensitively.
    let other = Payloads::new().with(Protocol::from_name("BlazorPack"), Bytes::from_static(b"b"));
    assert_eq!(s.hub.send(&all, &other), 1);
    assert_eq!(drain(&o1), vec![Bytes::from_static(b"b")]);
    assert!(drain(&j1).is_empty() && drain(&m1).is_empty());

    // Nothing encoded: nobody gets anything.
    assert_eq!(s.hub.send(&all, &Payloads::new()), 0);
    for c in [&j1, &j2, &m1, &o1] {
        assert!(drain(c).is_empty());
    }
}

#[test]
fn frames_are_shared_not_copied() {
    let s = setup();
    let mut conns = Vec::new();
    for i in 0..40 {
        conns.push(connect(&s.hub, &format!("j{i}"), Some("u")));
        conns.push(connect_mp(&s.hub, &format!("m{i}"), Some("u")));
    }
    for c in &conns {
        assert!(s.hub.add_to_group(c.id(), &group("g")));
    }
    let json_bytes = Bytes::from(vec![b'j'; 4096]);
    let mp_bytes = Bytes::from(vec![b'm'; 4096]);
    let payloads = Payloads::new()
        .with(Protocol::Json, json_bytes.clone())
        .with(Protocol::MessagePack, mp_bytes.clone());

    let targets = [
        Target::All { excluded: vec![] },
        Target::User(uid("u")),
        group_target("g", &[], &[]),
        Target::Groups(vec![group("g")]),
        Target::Connections(conns.iter().map(|c| c.id().clone()).collect()),
    ];
    for target in &targets {
        assert_eq!(s.hub.send(target, &payloads), 80);
    }
    for c in &conns {
        let expected = match c.protocol().unwrap() {
            Protocol::Json => &json_bytes,
            _ => &mp_bytes,
        };
        let frames = drain(c);
        assert_eq!(frames.len(), targets.len());
        for frame in frames {
            assert_eq!(frame.as_ptr(), expected.as_ptr(), "{} got a copy", c.id());
            assert_eq!(frame.len(), expected.len());
        }
    }
}

#[test]
fn protocols_in_use_follow_connections() {
    let s = setup();
    assert_eq!(s.hub.protocols_in_use(), (false, false));
    connect_with(&s.hub, "o", None, Protocol::from_name("blazorpack"), BUDGET);
    assert_eq!(s.hub.protocols_in_use(), (false, false));
    connect(&s.hub, "j1", None);
    connect(&s.hub, "j2", None);
    assert_eq!(s.hub.protocols_in_use(), (true, false));
    connect_mp(&s.hub, "m", None);
    assert_eq!(s.hub.protocols_in_use(), (true, true));
    s.hub.remove_connection(&cid("j1")).unwrap();
    assert_eq!(s.hub.protocols_in_use(), (true, true));
    s.hub.remove_connection(&cid("j2")).unwrap();
    assert_eq!(s.hub.protocols_in_use(), (false, true));
    s.hub.remove_connection(&cid("m")).unwrap();
    s.hub.remove_connection(&cid("o")).unwrap();
    assert_eq!(s.hub.protocols_in_use(), (false, false));
    assert_eq!(s.hub.connection_count(), 0);
}
