//! The user-group table copied between nodes: a copied listing does not undo changes heard during the copy.

use super::*;

#[test]
fn a_copied_listing_does_not_undo_changes_heard_during_the_copy() {
    let source = Router::new(Arc::new(Recorder::default()));
    let hub_name = HubName::new("chat", None).unwrap();
    for (user, group_name) in [("alice", "a"), ("alice", "b"), ("bob", "a"), ("carol", "c")] {
        source
            .hub(&hub_name)
            .user_join_group(&uid(user), &group(group_name), None, Instant::now())
            .unwrap();
    }
    let listing = source.user_groups(None, 100);
    assert_eq!(listing.len(), 4);
    // Paged in order of hub, user, group.
    let first = source.user_groups(None, 2);
    let last = first.last().unwrap();
    let rest = source.user_groups(
        Some(&(last.hub.clone(), last.user.clone(), last.group.clone())),
        100,
    );
    assert_eq!([first, rest].concat(), listing);

    let copy = Router::new(Arc::new(Recorder::default()));
    copy.begin_copy();
    // Heard while copying: alice left b, bob left everything.
    for leave in [
        Message::UserLeaveGroup {
            hub: hub_name.clone(),
            user: uid("alice"),
            group: Some(group("b")),
        },
        Message::UserLeaveGroup {
            hub: hub_name.clone(),
            user: uid("bob"),
            group: None,
        },
    ] {
        copy.apply(&leave);
    }
    copy.restore_user_groups(&listing);
    copy.end_copy();
    let kept: Vec<(String, String)> = copy
        .user_groups(None, 100)
        .into_iter()
        .map(|e| (e.user.as_str().to_string(), e.group.as_str().to_string()))
        .collect();
    assert_eq!(
        kept,
        vec![
            ("alice".to_string(), "a".to_string()),
            ("carol".to_string(), "c".to_string())
        ]
    );
}
