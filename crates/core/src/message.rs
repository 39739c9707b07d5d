//! What travels between nodes: sends and membership/close commands, addressed by channel.
//!
//! A node applies a [`Message`] to its local router; the backplane decides which nodes see it
//! by the channels it is published on (see [`Channel`]).

use std::time::Duration;

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
    /// A question from node `from` to every node listening on the channel it is asked on;
    /// each of them sends one [`Message::Answer`] with the same `id` to `from`'s node channel.
    Ask {
        hub: HubName,
        from: String,
        id: u64,
        question: Question,
    },
    Answer {
        hub: HubName,
        id: u64,
        answer: Answer,
    },
    /// A node's heartbeat, published on [`Channel::All`] every second: other nodes learn which
    /// nodes are alive and which app servers each one has connections from. `hub` only places
    /// it (a partitioned backplane keeps one hub's messages together).
    Presence(Presence),
    /// Live-trace events of `hub` that happened on node `from`, for the node whose dashboard
    /// traces the hub (published on that node's channel). `events` is the dashboard's JSON.
    Trace {
        hub: HubName,
        from: String,
        events: String,
    },
}

/// What a node tells the others about itself (see [`Message::Presence`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Presence {
    pub hub: HubName,
    pub node: String,
    /// This run of the node (`{node}~{random}`): a node restarted under the same id is a new
    /// instance, so what is said of the old one never touches the new one.
    pub instance: String,
    /// Said once by a node shutting down: forget it now rather than after the timeout.
    pub leaving: bool,
    /// App servers with connections that carry clients on the node: per hub, their ids.
    pub servers: Vec<(HubName, Vec<String>)>,
}

/// What one node asks the others (see [`Message::Ask`]). The first three change a connection
/// its owner holds and are answered once the change is live for messages from any node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Question {
    AddToGroup {
        connection: ConnectionId,
        group: GroupName,
    },
    /// `group: None` removes the connection from all its groups.
    RemoveFromGroup {
        connection: ConnectionId,
        group: Option<GroupName>,
    },
    CloseConnection {
        connection: ConnectionId,
        reason: Option<String>,
    },
    ConnectionExists(ConnectionId),
    UserExists(UserId),
    GroupExists(GroupName),
    UserInGroup(UserId, GroupName),
    /// Up to `max` of the node's members of `group` ordered by connection id, after `after`.
    GroupMembers {
        group: GroupName,
        after: Option<String>,
        max: u32,
    },
    /// Joins the user's connections on the node to the group (as [`Message::UserJoinGroup`]
    /// does) and answers once the change is live for messages from any node.
    UserJoinGroup {
        user: UserId,
        group: GroupName,
        ttl: Option<Duration>,
    },
    /// Asked on a node's channel: the URL other nodes reach that node at over HTTP.
    Address,
    /// Asked on [`Channel::All`] by a node that starts: up to `max` of the user-group
    /// memberships the node keeps (every hub's, ordered by hub, user, group), after `after`.
    UserGroups {
        after: Option<UserGroupKey>,
        max: u32,
    },
    /// An app server's ClientInvocation for a connection held elsewhere: the owner takes it
    /// as if the caller had sent it there (answers `Yes`), provided it holds the connection
    /// and has a connection from the caller to answer on.
    Invoke {
        connection: ConnectionId,
        invocation_id: String,
        caller_server_id: String,
        payloads: Payloads,
    },
    /// Asked on [`Channel::All`] by a node whose dashboard is open: what the node shows of
    /// itself (the request and the answer, [`Answer::View`], are the dashboard's JSON).
    View(String),
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

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    Yes,
    No,
    Members(Vec<(ConnectionId, Option<UserId>)>),
    At(String),
    UserGroups(Vec<UserGroupEntry>),
    /// The connection is in its maximum of groups (the limit).
    Full(u64),
    /// A node's answer to [`Question::View`] (JSON).
    View(String),
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
            | Message::Ask { hub, .. }
            | Message::Answer { hub, .. }
            | Message::Presence(Presence { hub, .. })
            | Message::Trace { hub, .. } => hub,
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
