//! Messages that route or change membership, parsed into [`Command`]s. Names in a message
//! that targets one thing are checked (a bad one refuses the command); ids in lists that the
//! SDK builds (connections, users, groups, exclusions) that no connection could have are left
//! out, as they could match nothing.

use std::time::Duration;

use switchyard_core::{ConnectionId, GroupName, NameError, Target, UserId};
use switchyard_service_protocol::ServiceMessage;

use crate::command::{Check, Command};

pub(super) enum Parsed {
    /// A command, and the id of the Ack the app server waits for (if any).
    Command {
        command: Result<Command, NameError>,
        ack_id: Option<i32>,
    },
    /// Not a routing message.
    Other(ServiceMessage),
}

fn command(command: Result<Command, NameError>, ack_id: Option<i32>) -> Parsed {
    Parsed::Command { command, ack_id }
}

fn connection_ids(list: &[String]) -> Vec<ConnectionId> {
    list.iter()
        .filter_map(|id| ConnectionId::new(id).ok())
        .collect()
}

fn user_ids(list: &[String]) -> Vec<UserId> {
    list.iter().filter_map(|u| UserId::new(u).ok()).collect()
}

fn group_names(list: &[String]) -> Vec<GroupName> {
    list.iter().filter_map(|g| GroupName::new(g).ok()).collect()
}

/// The SDK's ttl in seconds; zero or less means none.
fn ttl(seconds: Option<i32>) -> Option<Duration> {
    seconds
        .filter(|t| *t > 0)
        .map(|t| Duration::from_secs(t as u64))
}

fn close(
    target: Result<Target, NameError>,
    excluded: &[String],
    reason: Option<String>,
) -> Result<Command, NameError> {
    Ok(Command::Close {
        target: target?,
        excluded: connection_ids(excluded),
        reason,
    })
}

pub(super) fn parse(message: ServiceMessage) -> Parsed {
    match sends(message) {
        Parsed::Other(message) => match memberships(message) {
            Parsed::Other(message) => checks_and_closes(message),
            parsed => parsed,
        },
        parsed => parsed,
    }
}

/// Sends to connections, users, groups or everyone; any other message as it is.
fn sends(message: ServiceMessage) -> Parsed {
    use ServiceMessage as M;
    match message {
        M::MultiConnectionData(m) => command(
            Ok(Command::send_named(
                Target::Connections(connection_ids(&m.connection_list)),
                m.payloads,
            )),
            None,
        ),
        M::UserData(m) => command(
            UserId::new(&m.user_id).map(|user| Command::send_named(Target::User(user), m.payloads)),
            None,
        ),
        M::MultiUserData(m) => command(
            Ok(Command::send_named(
                Target::Users(user_ids(&m.user_list)),
                m.payloads,
            )),
            None,
        ),
        M::BroadcastData(m) => command(
            Ok(Command::send_named(
                Target::All {
                    excluded: connection_ids(&m.excluded_list),
                },
                m.payloads,
            )),
            None,
        ),
        M::GroupBroadcastData(m) => command(
            GroupName::new(&m.group_name).map(|group| {
                Command::send_named(
                    Target::Group {
                        group,
                        excluded: connection_ids(&m.excluded_list),
                        excluded_users: user_ids(&m.excluded_user_list),
                    },
                    m.payloads,
                )
            }),
            None,
        ),
        M::MultiGroupBroadcastData(m) => command(
            Ok(Command::send_named(
                Target::Groups(group_names(&m.group_list)),
                m.payloads,
            )),
            None,
        ),
        other => Parsed::Other(other),
    }
}

/// Group and user-group membership; any other message as it is.
fn memberships(message: ServiceMessage) -> Parsed {
    use ServiceMessage as M;
    match message {
        M::JoinGroup(m) => command(Command::add_to_group(&m.connection_id, &m.group_name), None),
        M::LeaveGroup(m) => command(
            Command::remove_from_group(&m.connection_id, m.group_name.as_deref()),
            None,
        ),
        M::JoinGroupWithAck(m) => command(
            Command::add_to_group(&m.connection_id, &m.group_name),
            Some(m.ack_id),
        ),
        M::LeaveGroupWithAck(m) => command(
            Command::remove_from_group(&m.connection_id, m.group_name.as_deref()),
            Some(m.ack_id),
        ),
        M::UserJoinGroup(m) => command(
            Command::user_join_group(&m.user_id, &m.group_name, ttl(m.ext.ttl)),
            None,
        ),
        M::UserLeaveGroup(m) => command(
            Command::user_leave_group(&m.user_id, m.group_name.as_deref()),
            None,
        ),
        M::UserJoinGroupWithAck(m) => command(
            Command::user_join_group(&m.user_id, &m.group_name, ttl(m.ext.ttl)),
            Some(m.ack_id),
        ),
        M::UserLeaveGroupWithAck(m) => command(
            Command::user_leave_group(&m.user_id, m.group_name.as_deref()),
            Some(m.ack_id),
        ),
        other => Parsed::Other(other),
    }
}

/// Existence checks and closes (all acknowledged); any other message as it is.
fn checks_and_closes(message: ServiceMessage) -> Parsed {
    use ServiceMessage as M;
    match message {
        M::CheckUserInGroupWithAck(m) => command(
            Check::user_in_group(&m.user_id, &m.group_name),
            Some(m.ack_id),
        ),
        M::CheckGroupExistenceWithAck(m) => command(Check::group(&m.group_name), Some(m.ack_id)),
        M::CheckConnectionExistenceWithAck(m) => {
            command(Check::connection(&m.connection_id), Some(m.ack_id))
        }
        M::CheckUserExistenceWithAck(m) => command(Check::user(&m.user_id), Some(m.ack_id)),
        M::CloseConnectionWithAck(m) => command(
            close(
                ConnectionId::new(&m.connection_id).map(Target::Connection),
                &[],
                m.reason,
            ),
            Some(m.ack_id),
        ),
        M::CloseConnectionsWithAck(m) => command(
            close(
                Ok(Target::All {
                    excluded: Vec::new(),
                }),
                &m.excluded_list,
                m.reason,
            ),
            Some(m.ack_id),
        ),
        M::CloseUserConnectionsWithAck(m) => command(
            close(
                UserId::new(&m.user_id).map(Target::User),
                &m.excluded_list,
                m.reason,
            ),
            Some(m.ack_id),
        ),
        M::CloseGroupConnectionsWithAck(m) => command(
            close(
                GroupName::new(&m.group_name).map(|group| Target::Group {
                    group,
                    excluded: Vec::new(),
                    excluded_users: Vec::new(),
                }),
                &m.excluded_list,
                m.reason,
            ),
            Some(m.ack_id),
        ),
        other => Parsed::Other(other),
    }
}
