//! One command model: what REST callers and app servers ask of the service, as typed data
//! whose names were validated when it was made. The executor applies a [`Command`] the same
//! way whoever sent it, and a miss comes back as [`Missing`], which REST turns into its
//! `x-ms-error-code` and the service protocol into an Ack, each in one place. This is also
//! the form in which commands cross nodes.

use std::time::Duration;

use bytes::Bytes;
use switchyard_core::{ConnectionId, GroupName, NameError, Payloads, Protocol, Target, UserId};

/// Something the service is asked to do within one hub.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Deliver pre-encoded payloads to the target's connections.
    Send { target: Target, payloads: Payloads },
    /// Close the target's connections, except `excluded`, with a Close carrying `reason` and
    /// allowReconnect. A single missing connection is a miss.
    Close {
        target: Target,
        excluded: Vec<ConnectionId>,
        reason: Option<String>,
    },
    AddToGroup {
        connection: ConnectionId,
        group: GroupName,
    },
    /// `group: None` removes the connection from all its groups.
    RemoveFromGroup {
        connection: ConnectionId,
        group: Option<GroupName>,
    },
    /// `ttl: None` keeps the membership (up to a year); `Some(0)` adds only current connections.
    UserJoinGroup {
        user: UserId,
        group: GroupName,
        ttl: Option<Duration>,
    },
    /// `group: None` removes the user from all groups.
    UserLeaveGroup {
        user: UserId,
        group: Option<GroupName>,
    },
    /// Answers `Ok` if the thing exists, else the miss.
    Check(Check),
}

/// An existence check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Check {
    Connection(ConnectionId),
    /// The user has at least one connection.
    User(UserId),
    /// The group has at least one connection.
    Group(GroupName),
    UserInGroup(UserId, GroupName),
}

/// What a command found missing. The texts are the ones the Azure SDKs show.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Missing {
    #[error("Connection '{0}' does not exist.")]
    Connection(ConnectionId),
    #[error("User '{0}' has no connections.")]
    User(UserId),
    #[error("Group '{0}' has no connections.")]
    Group(GroupName),
    #[error("User '{0}' is not in group '{1}'.")]
    UserInGroup(UserId, GroupName),
    /// Not a miss but a limit: the connection is in `limits.max_groups_per_connection` groups.
    #[error(
        "Connection '{0}' is in its maximum of {1} groups (limits.max_groups_per_connection)."
    )]
    ConnectionGroupsFull(ConnectionId, u64),
    /// Not a miss but a limit: the user has `limits.max_groups_per_user` memberships.
    #[error("User '{0}' is in its maximum of {1} groups (limits.max_groups_per_user).")]
    UserGroupsFull(UserId, u64),
}

impl Missing {
    /// A limit refused the command (rather than something being missing).
    pub fn is_limit(&self) -> bool {
        matches!(
            self,
            Missing::ConnectionGroupsFull(..) | Missing::UserGroupsFull(..)
        )
    }
}

/// Builders from the raw names both APIs receive: every name is checked here, once.
impl Command {
    pub fn add_to_group(connection: &str, group: &str) -> Result<Command, NameError> {
        Ok(Command::AddToGroup {
            connection: ConnectionId::new(connection)?,
            group: GroupName::new(group)?,
        })
    }

    pub fn remove_from_group(connection: &str, group: Option<&str>) -> Result<Command, NameError> {
        Ok(Command::RemoveFromGroup {
            connection: ConnectionId::new(connection)?,
            group: group.map(GroupName::new).transpose()?,
        })
    }

    pub fn user_join_group(
        user: &str,
        group: &str,
        ttl: Option<Duration>,
    ) -> Result<Command, NameError> {
        Ok(Command::UserJoinGroup {
            user: UserId::new(user)?,
            group: GroupName::new(group)?,
            ttl,
        })
    }

    pub fn user_leave_group(user: &str, group: Option<&str>) -> Result<Command, NameError> {
        Ok(Command::UserLeaveGroup {
            user: UserId::new(user)?,
            group: group.map(GroupName::new).transpose()?,
        })
    }

    /// A send of payloads named by protocol (the service protocol's and the MessagePack REST
    /// body's payload maps).
    pub fn send_named(target: Target, named: Vec<(String, Bytes)>) -> Command {
        let mut payloads = Payloads::new();
        for (protocol, bytes) in named {
            payloads.insert(Protocol::from_name(&protocol), bytes);
        }
        Command::Send { target, payloads }
    }
}

impl Check {
    pub fn connection(id: &str) -> Result<Command, NameError> {
        Ok(Command::Check(Check::Connection(ConnectionId::new(id)?)))
    }

    pub fn user(user: &str) -> Result<Command, NameError> {
        Ok(Command::Check(Check::User(UserId::new(user)?)))
    }

    pub fn group(group: &str) -> Result<Command, NameError> {
        Ok(Command::Check(Check::Group(GroupName::new(group)?)))
    }

    pub fn user_in_group(user: &str, group: &str) -> Result<Command, NameError> {
        Ok(Command::Check(Check::UserInGroup(
            UserId::new(user)?,
            GroupName::new(group)?,
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_when_a_command_is_made() {
        assert!(Command::add_to_group("c1", "g").is_ok());
        assert!(Command::add_to_group("", "g").is_err());
        assert!(Command::remove_from_group("c1", Some("")).is_err());
        assert!(matches!(
            Command::remove_from_group("c1", None),
            Ok(Command::RemoveFromGroup { group: None, .. })
        ));
        assert!(Command::user_join_group("u", &"g".repeat(2000), None).is_err());
        assert!(Check::user_in_group("u", "g").is_ok());
    }

    #[test]
    fn misses_read_like_the_sdk() {
        let id = ConnectionId::new("c1").unwrap();
        assert_eq!(
            Missing::Connection(id).to_string(),
            "Connection 'c1' does not exist."
        );
        let (user, group) = (UserId::new("u").unwrap(), GroupName::new("g").unwrap());
        assert_eq!(
            Missing::UserInGroup(user, group).to_string(),
            "User 'u' is not in group 'g'."
        );
    }
}
