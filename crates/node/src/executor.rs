//! The executor: applies [`Command`]s, whoever sent them, and answers lookups. It knows the
//! router and the backplane, and nothing of clients, app servers or HTTP.
//!
//! Mutations and sends are published on the backplane (even on one node), so a cluster
//! backplane changes where messages go without changing any caller.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use switchyard_auth::AccessKeys;
use switchyard_backplane::{Backplane, NodeId, Sink};
use switchyard_core::{
    Channel, CloseReason, ConnectionId, GroupName, HubName, Message, Payloads, Protocol, Target,
};
use switchyard_hub_protocol::{encode_invocation, Format};
use switchyard_router::{GroupMember, Interest, Router};

use crate::command::{Check, Command, Missing};
use crate::config::ValidConfig;
use crate::http::Auth;
use crate::metrics::Metrics;

pub struct Executor {
    config: ValidConfig,
    auth: Auth,
    node_id: NodeId,
    router: Arc<Router>,
    backplane: Arc<dyn Backplane>,
    metrics: Arc<Metrics>,
}

/// Subscribes this node to a channel while it has a local member.
struct BackplaneInterest {
    backplane: Arc<dyn Backplane>,
    node_id: NodeId,
}

impl Interest for BackplaneInterest {
    fn changed(&self, channel: Channel, interested: bool) {
        if interested {
            self.backplane.subscribe(&self.node_id, &channel);
        } else {
            self.backplane.unsubscribe(&self.node_id, &channel);
        }
    }
}

/// Applies what the backplane delivers to this node's router.
struct RouterSink {
    router: Arc<Router>,
    metrics: Arc<Metrics>,
}

impl Sink for RouterSink {
    fn receive(&self, message: &Arc<Message>) {
        let delivered = self.router.apply(message);
        self.metrics.frames_delivered.inc_by(delivered as u64);
    }
}

// The backplane holds the node's sink (and so its router), and the router holds the
// backplane: without this a dropped node would never be freed.
impl Drop for Executor {
    fn drop(&mut self) {
        self.backplane.detach(&self.node_id);
    }
}

impl Executor {
    pub(crate) fn new(
        config: ValidConfig,
        backplane: Arc<dyn Backplane>,
        node_id: NodeId,
        metrics: Arc<Metrics>,
    ) -> Executor {
        let keys = AccessKeys::new(
            config
                .access_key
                .clone()
                .unwrap_or_else(|| switchyard_auth::EMULATOR_ACCESS_KEY.to_string()),
            config.secondary_access_key.clone(),
        );
        let router = Arc::new(Router::new(Arc::new(BackplaneInterest {
            backplane: backplane.clone(),
            node_id: node_id.clone(),
        })));
        backplane.attach(
            &node_id,
            Arc::new(RouterSink {
                router: router.clone(),
                metrics: metrics.clone(),
            }),
        );
        Executor {
            auth: Auth::new(keys, &config),
            config,
            node_id,
            router,
            backplane,
            metrics,
        }
    }

    pub fn config(&self) -> &ValidConfig {
        &self.config
    }

    pub fn keys(&self) -> &AccessKeys {
        self.auth.keys()
    }

    /// Token checks against this service's keys, origins and token lifetime cap.
    pub(crate) fn auth(&self) -> &Auth {
        &self.auth
    }

    pub fn node_id(&self) -> &NodeId {
        &self.node_id
    }

    /// Resolves once this node's subscriptions so far are live on the backplane: a message
    /// any node publishes after that reaches them.
    pub async fn barrier(&self) {
        self.backplane.barrier(&self.node_id).await;
    }

    pub fn router(&self) -> &Arc<Router> {
        &self.router
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Applies one command to the hub. `Err` names what the command needed and did not find;
    /// nothing was changed then.
    pub fn execute(&self, hub: &HubName, command: Command) -> Result<(), Missing> {
        match command {
            Command::Send { target, payloads } => {
                self.send(hub, target, payloads);
                Ok(())
            }
            Command::Close {
                target,
                excluded,
                reason,
            } => {
                if let Target::Connection(id) = &target {
                    self.require_connection(hub, id)?;
                }
                let channels = self.channels_for(hub, &target);
                self.publish(
                    channels,
                    Message::Close {
                        hub: hub.clone(),
                        target,
                        excluded,
                        reason: CloseReason::ClosedByApi(reason),
                    },
                );
                Ok(())
            }
            Command::AddToGroup { connection, group } => {
                self.require_connection(hub, &connection)?;
                self.publish(
                    vec![self.owner_of(hub, &connection)],
                    Message::AddToGroup {
                        hub: hub.clone(),
                        connection,
                        group,
                    },
                );
                Ok(())
            }
            Command::RemoveFromGroup { connection, group } => {
                self.require_connection(hub, &connection)?;
                self.publish(
                    vec![self.owner_of(hub, &connection)],
                    Message::RemoveFromGroup {
                        hub: hub.clone(),
                        connection,
                        group,
                    },
                );
                Ok(())
            }
            Command::UserJoinGroup { user, group, ttl } => {
                self.publish(
                    vec![Channel::All],
                    Message::UserJoinGroup {
                        hub: hub.clone(),
                        user,
                        group,
                        ttl,
                    },
                );
                Ok(())
            }
            Command::UserLeaveGroup { user, group } => {
                self.publish(
                    vec![Channel::All],
                    Message::UserLeaveGroup {
                        hub: hub.clone(),
                        user,
                        group,
                    },
                );
                Ok(())
            }
            Command::Check(check) => self.check(hub, check),
        }
    }

    fn check(&self, hub: &HubName, check: Check) -> Result<(), Missing> {
        let hub = self.router.find_hub(hub);
        let found = match &check {
            Check::Connection(id) => hub.is_some_and(|h| h.connection_exists(id)),
            Check::User(user) => hub.is_some_and(|h| h.user_exists(user)),
            Check::Group(group) => hub.is_some_and(|h| h.group_exists(group)),
            Check::UserInGroup(user, group) => {
                hub.is_some_and(|h| h.user_in_group(user, group, Instant::now()))
            }
        };
        if found {
            return Ok(());
        }
        Err(match check {
            Check::Connection(id) => Missing::Connection(id),
            Check::User(user) => Missing::User(user),
            Check::Group(group) => Missing::Group(group),
            Check::UserInGroup(user, group) => Missing::UserInGroup(user, group),
        })
    }

    fn require_connection(&self, hub: &HubName, id: &ConnectionId) -> Result<(), Missing> {
        self.check(hub, Check::Connection(id.clone()))
    }

    /// Sends pre-encoded payloads to the target (the hot path of every send).
    pub fn send(&self, hub: &HubName, target: Target, payloads: Payloads) {
        if payloads.is_empty() {
            return;
        }
        let channels = self.channels_for(hub, &target);
        self.publish(
            channels,
            Message::Send {
                hub: hub.clone(),
                target,
                payloads,
            },
        );
    }

    /// Encodes a non-blocking invocation once for each service-encoded protocol that the hub's
    /// connections use.
    pub fn encode_invocation(
        &self,
        hub: &HubName,
        method: &str,
        arguments: &[serde_json::Value],
    ) -> Payloads {
        let (json, messagepack) = self
            .router
            .find_hub(hub)
            .map_or((false, false), |h| h.protocols_in_use());
        let mut payloads = Payloads::new();
        if json {
            payloads.insert(
                Protocol::Json,
                encode_invocation(Format::Json, method, arguments),
            );
        }
        if messagepack {
            payloads.insert(
                Protocol::MessagePack,
                encode_invocation(Format::MessagePack, method, arguments),
            );
        }
        payloads
    }

    /// A page of group members ordered by connection id, after the continuation point.
    pub fn group_members(
        &self,
        hub: &HubName,
        group: &GroupName,
        after: Option<&str>,
        max: usize,
    ) -> Vec<GroupMember> {
        self.router
            .find_hub(hub)
            .map(|h| h.group_members(group, after, max))
            .unwrap_or_default()
    }

    /// Expires user-group memberships whose ttl has passed.
    pub(crate) fn sweep(&self, now: Instant) {
        self.router.sweep(now);
    }

    fn publish(&self, channels: Vec<Channel>, message: Message) {
        self.backplane.publish(&channels, Arc::new(message));
    }

    /// Where a connection's owner listens: the node holding a connection subscribes to its
    /// channel, so any node can address it without knowing which node that is.
    fn owner_of(&self, hub: &HubName, connection: &ConnectionId) -> Channel {
        Channel::Connection(hub.clone(), connection.clone())
    }

    fn channels_for(&self, hub: &HubName, target: &Target) -> Vec<Channel> {
        let unique = |channels: Vec<Channel>| -> Vec<Channel> {
            channels
                .into_iter()
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect()
        };
        match target {
            Target::All { .. } => vec![Channel::Hub(hub.clone())],
            Target::Connection(id) => vec![self.owner_of(hub, id)],
            Target::Connections(ids) => {
                unique(ids.iter().map(|id| self.owner_of(hub, id)).collect())
            }
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
}

#[cfg(test)]
mod tests {
    use switchyard_backplane::MemoryBackplane;

    use super::*;
    use crate::config::Config;
    use switchyard_core::UserId;

    fn executor() -> Executor {
        Executor::new(
            Config::default().validate().unwrap(),
            Arc::new(MemoryBackplane::new()),
            "n1".into(),
            Arc::new(Metrics::default()),
        )
    }

    /// The router and the backplane refer to each other; dropping the executor must free both
    /// (found by the fuzz targets, which make a node per input).
    #[test]
    fn a_dropped_executor_is_freed() {
        let backplane: Arc<dyn Backplane> = Arc::new(MemoryBackplane::new());
        let executor = Executor::new(
            Config::default().validate().unwrap(),
            backplane.clone(),
            "n1".into(),
            Arc::new(Metrics::default()),
        );
        let router = Arc::downgrade(&executor.router);
        drop(executor);
        assert!(router.upgrade().is_none(), "the router outlived its node");
        drop(backplane);
    }

    #[test]
    fn misses_name_what_is_missing() {
        let executor = executor();
        let hub = HubName::new("chat", None).unwrap();
        assert_eq!(
            executor.execute(&hub, Command::add_to_group("c1", "g").unwrap()),
            Err(Missing::Connection(ConnectionId::new("c1").unwrap()))
        );
        assert_eq!(
            executor.execute(&hub, Check::user_in_group("u", "g").unwrap()),
            Err(Missing::UserInGroup(
                UserId::new("u").unwrap(),
                GroupName::new("g").unwrap()
            ))
        );
        // A user-group membership needs no connection.
        assert_eq!(
            executor.execute(&hub, Command::user_join_group("u", "g", None).unwrap()),
            Ok(())
        );
        assert_eq!(
            executor.execute(&hub, Check::user_in_group("u", "g").unwrap()),
            Ok(())
        );
    }
}
