//! Traffic counts: each delivery on its connection, the fan-out once on the hub.

use super::*;

#[test]
fn traffic_counts_each_delivery_on_its_connection_and_the_fan_out_once_on_the_hub() {
    let s = setup();
    let a = connect(&s.hub, "a", Some("u1"));
    let b = connect(&s.hub, "b", Some("u1"));
    let c = connect_mp(&s.hub, "c", None);
    assert!(s.hub.add_to_group(&cid("a"), &group("g")));
    assert!(s.hub.add_to_group(&cid("c"), &group("g")));
    assert_eq!((s.hub.user_count(), s.hub.group_count()), (1, 1));
    let big = "x".repeat(3000);
    let payloads = Payloads::new()
        .with(Protocol::Json, Bytes::from(big.clone()))
        .with(Protocol::MessagePack, Bytes::from_static(b"mp"));
    let all = Target::All { excluded: vec![] };
    assert_eq!(s.hub.send(&all, &payloads), 3);
    assert_eq!(s.hub.send(&Target::User(uid("u1")), &json("hi")), 2);
    let totals = s.hub.traffic().snapshot();
    assert_eq!(totals.messages_out, 5);
    assert_eq!(totals.bytes_out, 3000 * 2 + 2 + 2 * 2);
    // 3,000 bytes are two 2 KB units; anything smaller one.
    assert_eq!(totals.units_out, 2 * 2 + 1 + 2);
    assert_eq!(totals.messages_in, 0);
    let a_totals = a.traffic().snapshot();
    assert_eq!((a_totals.messages_out, a_totals.units_out), (2, 3));
    assert_eq!(c.traffic().snapshot().bytes_out, 2);
    assert_eq!(b.queued_bytes(), 3002);

    let mut read = TrafficTotals::default();
    read.add_in(10);
    read.add_in(5000);
    s.hub.received(&a, &read);
    assert_eq!(s.hub.traffic().snapshot().units_in, 4);
    assert_eq!(a.traffic().snapshot().messages_in, 2);
    let mut one = TrafficTotals::default();
    one.add_out(1);
    assert!(s.hub.deliver(&c, Bytes::from_static(b"x"), &one));
    assert_eq!(s.hub.traffic().snapshot().messages_out, 6);
    c.close(CloseReason::ClientClosed);
    assert!(!s.hub.deliver(&c, Bytes::from_static(b"x"), &one));
    assert_eq!(c.traffic().snapshot().messages_out, 2);
}
