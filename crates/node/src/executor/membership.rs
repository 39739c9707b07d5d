//! Group and user-group membership.

use std::time::{Duration, Instant};

use switchyard_core::{Channel, ConnectionId, GroupName, HubName, Message, UserId};

use super::{owner_of, Executor};
use crate::cluster::Question;
use crate::command::Missing;

impl Executor {
    pub(super) async fn add_to_group(
        &self,
        hub: &HubName,
        connection: ConnectionId,
        group: GroupName,
    ) -> Result<(), Missing> {
        if !self.holds(hub, &connection) {
            let question = Question::AddToGroup {
                connection: connection.clone(),
                group,
            };
            let joined = self.ask_owner(hub, &connection, question).await;
            if matches!(joined, Err(Missing::ConnectionGroupsFull(..))) {
                self.metrics.refused("groups_per_connection");
            }
            return joined;
        }
        // Checked before the join goes out in order with what this node publishes; the router
        // keeps the same bound in case the connection joined meanwhile.
        let max = self.max_groups_per_connection;
        let full = self
            .router
            .find_hub(hub)
            .and_then(|h| h.connection(&connection))
            .is_some_and(|c| max != 0 && !c.in_group(&group) && c.group_count() >= max);
        if full {
            self.metrics.refused("groups_per_connection");
            return Err(Missing::ConnectionGroupsFull(connection, max as u64));
        }
        self.cluster.publish(
            vec![owner_of(hub, &connection)],
            Message::AddToGroup {
                hub: hub.clone(),
                connection,
                group,
            },
        );
        self.cluster.barrier().await;
        Ok(())
    }

    pub(super) async fn remove_from_group(
        &self,
        hub: &HubName,
        connection: ConnectionId,
        group: Option<GroupName>,
    ) -> Result<(), Missing> {
        if !self.holds(hub, &connection) {
            let question = Question::RemoveFromGroup {
                connection: connection.clone(),
                group,
            };
            return self.ask_owner(hub, &connection, question).await;
        }
        self.cluster.publish(
            vec![owner_of(hub, &connection)],
            Message::RemoveFromGroup {
                hub: hub.clone(),
                connection,
                group,
            },
        );
        Ok(())
    }

    pub(super) async fn user_join_group(
        &self,
        hub: &HubName,
        user: UserId,
        group: GroupName,
        ttl: Option<Duration>,
    ) -> Result<(), Missing> {
        // Every node keeps the same table, so this node's copy decides the limit.
        if ttl != Some(Duration::ZERO) {
            if let Some(h) = self.router.find_hub(hub) {
                if let Err(max) = h.user_may_join(&user, &group, Instant::now()) {
                    self.metrics.refused("groups_per_user");
                    return Err(Missing::UserGroupsFull(user, max as u64));
                }
            }
        }
        // Every node keeps the whole user-group table, for the user's later connections; the
        // nodes holding the user's connections now answer once those are in the group.
        self.cluster.publish(
            vec![Channel::All],
            Message::UserJoinGroup {
                hub: hub.clone(),
                user: user.clone(),
                group: group.clone(),
                ttl,
            },
        );
        let channel = Channel::User(hub.clone(), user.clone());
        let question = Question::UserJoinGroup { user, group, ttl };
        self.cluster.ask(hub, channel, question, |_| false).await;
        Ok(())
    }

    pub(super) async fn user_leave_group(
        &self,
        hub: &HubName,
        user: UserId,
        group: Option<GroupName>,
    ) {
        self.cluster.publish(
            vec![Channel::All],
            Message::UserLeaveGroup {
                hub: hub.clone(),
                user: user.clone(),
                group,
            },
        );
        // Once the nodes holding the user's connections answered, a group send from any node
        // no longer reaches the user.
        self.cluster
            .settled_on(hub, vec![Channel::User(hub.clone(), user)])
            .await;
    }
}
