//! Hubs nothing lives in are freed on sweep, so hub names that come and go do not grow
//! memory; a hub in use or held is kept.

use super::*;

#[test]
fn a_hub_nothing_lives_in_is_freed_on_sweep_and_made_again_on_use() {
    let interest = Arc::new(Recorder::default());
    let router = Router::new(interest);
    for i in 0..100 {
        let hub = router.hub(&hub_name(&format!("visitor{i}")));
        let connection = connect(&hub, "c", Some("u"));
        hub.add_to_group(connection.id(), &group("g"));
        hub.remove_connection(connection.id());
    }
    assert_eq!(router.hub_count(), 100);
    router.sweep(Instant::now());
    assert_eq!(router.hub_count(), 0, "every hub emptied is freed");
    // Made again on its next use, working.
    let hub = router.hub(&hub_name("visitor1"));
    let connection = connect(&hub, "c", None);
    assert_eq!(router.hub_count(), 1);
    router.sweep(Instant::now());
    assert_eq!(router.hub_count(), 1, "a hub with a connection is kept");
    drop(connection);
}

#[test]
fn a_hub_held_or_with_user_group_memberships_is_kept() {
    let s = setup();
    // Held (as a client or an app server holds its hub) though empty.
    s.router.sweep(Instant::now());
    assert_eq!(s.router.hub_count(), 1);
    assert!(Arc::ptr_eq(&s.hub, &s.router.hub(&hub_name("chat"))));
    // Not held, but a user-group membership lives in it (it covers later connections).
    let other = s.router.hub(&hub_name("other"));
    other
        .user_join_group(&uid("alice"), &group("g"), None, Instant::now())
        .unwrap();
    drop(other);
    s.router.sweep(Instant::now());
    assert_eq!(s.router.hub_count(), 2);
    let other = s.router.hub(&hub_name("other"));
    let a1 = connect(&other, "a1", Some("alice"));
    assert!(in_group(&a1, "g"), "the membership survived the sweep");
    other.remove_connection(a1.id());
    other.user_leave_group(&uid("alice"), None);
    drop(other);
    s.router.sweep(Instant::now());
    assert_eq!(s.router.hub_count(), 1, "freed once the membership is gone");
}
