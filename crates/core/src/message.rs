//! What travels between nodes: sends and membership/close commands, addressed by channel, and
//! the node's own control messages as opaque bytes.
//!
//! A node applies a [`Message`] to its local router; the backplane decides which nodes see it
//! by the channels it is published on (see [`Channel`]).

use std::time::Duration;

use bytes::Bytes;

use crate::{CloseReason, ConnectionId, GroupName, HubName, Payloads, UserId};

/// Who a send or close is for, within one hub.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    All {
        excluded: Vec<ConnectionId>,
    },
    Connection(ConnectionId),
    Connections(Vec<ConnectionId>),
    User(UserId),
    Users(Vec<UserId>),
    Group {
        group: GroupName,
        excluded: Vec<ConnectionId>,
        excluded_users: Vec<UserId>,
    },
    Groups(Vec<GroupName>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    /// Deliver pre-encoded payloads to every local connection the target names.
    Send {
        hub: HubName,
        target: Target,
        payloads: Payloads,
    },
    AddToGroup {
        hub: HubName,
        connection: ConnectionId,
        group: GroupName,
    },
    /// `group: None` removes the connection from all its groups.
    RemoveFromGroup {
        hub: HubName,
        connection: ConnectionId,
        group: Option<GroupName>,
    },
    /// `ttl: None` keeps the membership (up to a year); `Some(0)` adds only current connections.
    UserJoinGroup {
        hub: HubName,
        user: UserId,
        group: GroupName,
        ttl: Option<Duration>,
    },
    /// `group: None` removes the user from all groups.
    UserLeaveGroup {
        hub: HubName,
        user: UserId,
        group: Option<GroupName>,
    },
    /// Close every local connection the target names, except `excluded` (and the target's
    /// own exclusions).
    Close {
        hub: HubName,
        target: Target,
        excluded: Vec<ConnectionId>,
        reason: CloseReason,
    },
    /// Node-to-node control (questions and their answers, heartbeats, live-trace events):
    /// the router and the backplane carry it without looking inside; the node encodes and
    /// decodes `body`. `hub` only places it (a partitioned backplane keeps one hub's
    /// messages together).
    Control { hub: HubName, body: Bytes },
}

/// Which membership a user-group listing continues after: hub, user, group.
pub type UserGroupKey = (HubName, UserId, GroupName);

/// One user-group membership as nodes pass it on: `ttl` is what is left of a membership made
/// with one, `None` for a membership made without.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserGroupEntry {
    pub hub: HubName,
    pub user: UserId,
    pub group: GroupName,
    pub ttl: Option<Duration>,
}

impl UserGroupEntry {
    /// What listings are ordered and paged by: hub, user, group.
    pub fn key(&self) -> (&str, &str, &str) {
        (self.hub.as_str(), self.user.as_str(), self.group.as_str())
    }
}

/// [`UserGroupEntry::key`] of a [`UserGroupKey`].
pub fn user_group_key((hub, user, group): &UserGroupKey) -> (&str, &str, &str) {
    (hub.as_str(), user.as_str(), group.as_str())
}

impl Message {
    pub fn hub(&self) -> &HubName {
        match self {
            Message::Send { hub, .. }
            | Message::AddToGroup { hub, .. }
            | Message::RemoveFromGroup { hub, .. }
            | Message::UserJoinGroup { hub, .. }
            | Message::UserLeaveGroup { hub, .. }
            | Message::Close { hub, .. }
            | Message::Control { hub, .. } => hub,
        }
    }
}

/// A backplane channel. A node subscribes to a channel while it has a local member for it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Channel {
    /// Everything addressed to a whole hub (broadcasts, close-all, user-group commands).
    Hub(HubName),
    Group(HubName, GroupName),
    User(HubName, UserId),
    /// Every node: commands whose effect outlives connections (user-group memberships).
    All,
    /// One node's inbox.
    Node(String),
    /// One connection, wherever it is: its owning node subscribes while it is connected, so
    /// connection-addressed sends and commands reach it from any node. The hub is part of it
    /// so that a partitioned backplane can keep all of a hub's channels together.
    Connection(HubName, ConnectionId),
}

impl Channel {
    /// Stable text form, used as the channel name by networked backplanes.
    pub fn key(&self) -> String {
        match self {
            Channel::Hub(hub) => format!("h:{hub}"),
            Channel::Group(hub, group) => format!("g:{hub}:{group}"),
            Channel::User(hub, user) => format!("u:{hub}:{user}"),
            Channel::All => "all".to_string(),
            Channel::Node(node) => format!("n:{node}"),
            Channel::Connection(hub, id) => format!("c:{hub}:{id}"),
        }
    }
}
