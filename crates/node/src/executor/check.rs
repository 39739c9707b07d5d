//! Existence checks and group listings, answered here when this node knows, else by the
//! nodes listening on the channel of what is asked.

use switchyard_core::{Channel, GroupName, HubName};
use switchyard_router::GroupMember;

use super::{owner_of, Executor};
use crate::cluster::{Answer, Question};
use crate::command::{Check, Missing};

impl Executor {
    pub(super) async fn check(&self, hub: &HubName, check: Check) -> Result<(), Missing> {
        if self.holds_locally(hub, &check) {
            return Ok(());
        }
        let (question, channel) = match &check {
            Check::Connection(id) => (Question::ConnectionExists(id.clone()), owner_of(hub, id)),
            Check::User(user) => (
                Question::UserExists(user.clone()),
                Channel::User(hub.clone(), user.clone()),
            ),
            Check::Group(group) => (
                Question::GroupExists(group.clone()),
                Channel::Group(hub.clone(), group.clone()),
            ),
            Check::UserInGroup(user, group) => (
                Question::UserInGroup(user.clone(), group.clone()),
                Channel::User(hub.clone(), user.clone()),
            ),
        };
        let gathered = self
            .cluster
            .ask(hub, channel, question, |a| *a == Answer::Yes)
            .await;
        if gathered.answers.contains(&Answer::Yes) {
            return Ok(());
        }
        Err(match check {
            Check::Connection(id) => Missing::Connection(id),
            Check::User(user) => Missing::User(user),
            Check::Group(group) => Missing::Group(group),
            Check::UserInGroup(user, group) => Missing::UserInGroup(user, group),
        })
    }

    /// Whether this node's own state says yes (a no may still be a yes elsewhere).
    fn holds_locally(&self, hub: &HubName, check: &Check) -> bool {
        let Some(h) = self.router.find_hub(hub) else {
            return false;
        };
        match check {
            Check::Connection(id) => h.connection_exists(id),
            Check::User(user) => h.user_exists(user),
            Check::Group(group) => h.group_exists(group),
            Check::UserInGroup(user, group) => {
                h.user_in_group(user, group, std::time::Instant::now())
            }
        }
    }

    /// A page of the group's members on every node, ordered by connection id, after the
    /// continuation point: each node sends its first `max`, and the first `max` of their
    /// union are the page.
    pub async fn group_members(
        &self,
        hub: &HubName,
        group: &GroupName,
        after: Option<&str>,
        max: usize,
    ) -> Vec<GroupMember> {
        let question = Question::GroupMembers {
            group: group.clone(),
            after: after.map(str::to_string),
            max: u32::try_from(max).unwrap_or(u32::MAX),
        };
        let channel = Channel::Group(hub.clone(), group.clone());
        let gathered = self.cluster.ask(hub, channel, question, |_| false).await;
        let mut members: Vec<GroupMember> = gathered
            .answers
            .into_iter()
            .flat_map(|answer| match answer {
                Answer::Members(members) => members,
                _ => Vec::new(),
            })
            .map(|(connection, user)| GroupMember { connection, user })
            .collect();
        members.sort_by(|a, b| a.connection.cmp(&b.connection));
        members.dedup_by(|a, b| a.connection == b.connection);
        members.truncate(max);
        members
    }
}
