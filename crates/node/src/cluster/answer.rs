//! This node's answers to other nodes' questions, from local state only. Questions that change
//! a connection change it here when this node holds it, and answer whether it does.

use std::time::Instant;

use switchyard_core::{CloseReason, HubName, Message, Target};
use switchyard_router::{GroupJoin, Router};

use super::question::{Answer, Question};

/// What the router's state answers; `None` for the questions a feature above answers
/// (client invocations, dashboard views) and those the node fills in (its address).
pub(super) fn from_router(router: &Router, hub: &HubName, question: &Question) -> Option<Answer> {
    let yes = |held: bool| if held { Answer::Yes } else { Answer::No };
    match question {
        Question::Address | Question::Invoke(_) | Question::View(_) => return None,
        Question::UserGroups { after, max } => {
            return Some(Answer::UserGroups(
                router.user_groups(after.as_ref(), *max as usize),
            ));
        }
        Question::UserJoinGroup { user, group, ttl } => {
            // As the message does: the table outlives connections, so the hub is created.
            router.apply(&Message::UserJoinGroup {
                hub: hub.clone(),
                user: user.clone(),
                group: group.clone(),
                ttl: *ttl,
            });
            return Some(Answer::Yes);
        }
        _ => {}
    }
    let Some(hub) = router.find_hub(hub) else {
        return Some(match question {
            Question::GroupMembers { .. } => Answer::Members(Vec::new()),
            _ => Answer::No,
        });
    };
    Some(match question {
        Question::AddToGroup { connection, group } => match hub.join_group(connection, group) {
            GroupJoin::Joined => Answer::Yes,
            GroupJoin::NotHere => Answer::No,
            GroupJoin::Full(max) => Answer::Full(max as u64),
        },
        Question::RemoveFromGroup { connection, group } => {
            let held = hub.connection_exists(connection);
            match group {
                Some(group) => {
                    hub.remove_from_group(connection, group);
                }
                None => hub.remove_from_all_groups(connection),
            }
            yes(held)
        }
        Question::CloseConnection { connection, reason } => {
            let held = hub.connection_exists(connection);
            hub.close(
                &Target::Connection(connection.clone()),
                &[],
                &CloseReason::ClosedByApi(reason.clone()),
            );
            yes(held)
        }
        Question::ConnectionExists(id) => yes(hub.connection_exists(id)),
        Question::UserExists(user) => yes(hub.user_exists(user)),
        Question::GroupExists(group) => yes(hub.group_exists(group)),
        Question::UserInGroup(user, group) => yes(hub.user_in_group(user, group, Instant::now())),
        Question::GroupMembers { group, after, max } => Answer::Members(
            hub.group_members(group, after.as_deref(), *max as usize)
                .into_iter()
                .map(|m| (m.connection, m.user))
                .collect(),
        ),
        // Answered above.
        Question::Address
        | Question::Invoke(_)
        | Question::View(_)
        | Question::UserGroups { .. }
        | Question::UserJoinGroup { .. } => Answer::Yes,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use switchyard_core::{ConnectionId, GroupName, UserId};
    use switchyard_router::NoInterest;

    use super::*;

    fn hub() -> HubName {
        HubName::new("chat", None).unwrap()
    }

    #[test]
    fn a_node_without_the_hub_holds_nothing_and_keeps_user_groups() {
        let router = Router::new(Arc::new(NoInterest));
        let c = ConnectionId::new("c").unwrap();
        let (u, g) = (UserId::new("u").unwrap(), GroupName::new("g").unwrap());
        let ask = |q: Question| from_router(&router, &hub(), &q);
        assert_eq!(ask(Question::ConnectionExists(c.clone())), Some(Answer::No));
        assert_eq!(
            ask(Question::GroupMembers {
                group: g.clone(),
                after: None,
                max: 10
            }),
            Some(Answer::Members(vec![]))
        );
        assert_eq!(ask(Question::Address), None);
        assert_eq!(
            ask(Question::UserJoinGroup {
                user: u.clone(),
                group: g.clone(),
                ttl: None
            }),
            Some(Answer::Yes)
        );
        // The join outlives connections: the hub exists now and keeps it.
        assert_eq!(
            ask(Question::UserInGroup(u.clone(), g.clone())),
            Some(Answer::Yes)
        );
        let Some(Answer::UserGroups(entries)) = ask(Question::UserGroups {
            after: None,
            max: 10,
        }) else {
            panic!("no listing")
        };
        assert_eq!(entries.len(), 1);
        assert_eq!((&entries[0].user, &entries[0].group), (&u, &g));
    }
}
