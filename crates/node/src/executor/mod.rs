//! The executor: applies [`Command`]s, whoever sent them (REST or an app server), wherever
//! in the cluster what they name is. It knows the router and the cluster, and nothing of
//! clients, app servers, HTTP or settings beyond the limits it enforces.
//!
//! Mutations and sends are published on the backplane (even on one node), so a cluster
//! backplane changes where messages go without changing any caller. What needs an answer from
//! the node holding a connection (membership changes, closes and checks of connections held
//! elsewhere, user-group joins, group listings) is asked on the channel of what it concerns,
//! and the answers of the nodes listening there decide.
//!
//! # Layout
//! - `send`: sends (the hot path) and the invocations REST encodes.
//! - `close`: closing connections.
//! - `membership`: groups and user groups.
//! - `check`: existence checks and group listings.
//! - here: [`Executor`], the dispatch, and where a target's connections listen.

mod check;
mod close;
mod membership;
mod send;

use std::collections::BTreeSet;
use std::sync::Arc;

use switchyard_core::{Channel, ConnectionId, HubName, Target};
use switchyard_router::Router;

use crate::cluster::{Answer, Cluster, Question};
use crate::command::{Command, Missing};
use crate::live_trace::Tracer;
use crate::metrics::Metrics;

pub struct Executor {
    router: Arc<Router>,
    cluster: Arc<Cluster>,
    metrics: Arc<Metrics>,
    tracer: Arc<Tracer>,
    /// `limits.max_groups_per_connection` (0: none), checked before a join goes out.
    max_groups_per_connection: usize,
}

impl Executor {
    pub(crate) fn new(
        cluster: Arc<Cluster>,
        metrics: Arc<Metrics>,
        tracer: Arc<Tracer>,
        max_groups_per_connection: usize,
    ) -> Executor {
        Executor {
            router: cluster.router().clone(),
            cluster,
            metrics,
            tracer,
            max_groups_per_connection,
        }
    }

    pub fn router(&self) -> &Arc<Router> {
        &self.router
    }

    /// Applies one command to the hub, wherever in the cluster what it names is. `Err` names
    /// what the command needed and did not find; nothing was changed then. When this returns,
    /// the change is live: a send published after it reaches the connections it changed.
    pub async fn execute(&self, hub: &HubName, command: Command) -> Result<(), Missing> {
        match command {
            Command::Send { target, payloads } => {
                self.send(hub, target, payloads);
                Ok(())
            }
            Command::Close {
                target,
                excluded,
                reason,
            } => self.close(hub, target, excluded, reason).await,
            Command::AddToGroup { connection, group } => {
                self.add_to_group(hub, connection, group).await
            }
            Command::RemoveFromGroup { connection, group } => {
                self.remove_from_group(hub, connection, group).await
            }
            Command::UserJoinGroup { user, group, ttl } => {
                self.user_join_group(hub, user, group, ttl).await
            }
            Command::UserLeaveGroup { user, group } => {
                self.user_leave_group(hub, user, group).await;
                Ok(())
            }
            Command::Check(check) => self.check(hub, check).await,
        }
    }

    /// Whether this node holds the connection (its handshake done).
    fn holds(&self, hub: &HubName, id: &ConnectionId) -> bool {
        self.router
            .find_hub(hub)
            .is_some_and(|h| h.connection_exists(id))
    }

    /// Has the node holding `connection` apply `question`; a miss when no node holds it.
    async fn ask_owner(
        &self,
        hub: &HubName,
        connection: &ConnectionId,
        question: Question,
    ) -> Result<(), Missing> {
        let channel = owner_of(hub, connection);
        let gathered = self
            .cluster
            .ask(hub, channel, question, |a| {
                matches!(a, Answer::Yes | Answer::Full(_))
            })
            .await;
        if gathered.answers.contains(&Answer::Yes) {
            return Ok(());
        }
        match gathered.answers.iter().find_map(|a| match a {
            Answer::Full(max) => Some(*max),
            _ => None,
        }) {
            Some(max) => Err(Missing::ConnectionGroupsFull(connection.clone(), max)),
            None => Err(Missing::Connection(connection.clone())),
        }
    }
}

/// Where a connection's owner listens: the node holding a connection subscribes to its
/// channel, so any node can address it without knowing which node that is.
fn owner_of(hub: &HubName, connection: &ConnectionId) -> Channel {
    Channel::Connection(hub.clone(), connection.clone())
}

/// The channels the nodes holding a target's connections listen on, each once.
fn channels_for(hub: &HubName, target: &Target) -> Vec<Channel> {
    let unique = |channels: Vec<Channel>| -> Vec<Channel> {
        channels
            .into_iter()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect()
    };
    match target {
        Target::All { .. } => vec![Channel::Hub(hub.clone())],
        Target::Connection(id) => vec![owner_of(hub, id)],
        Target::Connections(ids) => unique(ids.iter().map(|id| owner_of(hub, id)).collect()),
        Target::User(user) => vec![Channel::User(hub.clone(), user.clone())],
        Target::Users(users) => unique(
            users
                .iter()
                .map(|u| Channel::User(hub.clone(), u.clone()))
                .collect(),
        ),
        Target::Group { group, .. } => vec![Channel::Group(hub.clone(), group.clone())],
        Target::Groups(groups) => unique(
            groups
                .iter()
                .map(|g| Channel::Group(hub.clone(), g.clone()))
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests;
