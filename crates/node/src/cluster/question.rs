//! What one node asks the others and what they answer, and how both are written inside a
//! control message. Adding a question is adding a variant here, its tag in `write` and
//! `read`, and its answer (`answer.rs`, or a feature's through `sink.rs`).

use std::time::Duration;

use switchyard_backplane::envelope::{EnvelopeError, Reader, Writer};
use switchyard_core::{
    ConnectionId, GroupName, HubName, Payloads, UserGroupEntry, UserGroupKey, UserId,
};

/// Asked on a channel; every node listening there answers once (see [`super::Control::Ask`]).
/// The first three change a connection its owner holds and are answered once the change is
/// live for messages from any node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Question {
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
    /// Joins the user's connections on the node to the group (as a `UserJoinGroup` message
    /// does) and answers once the change is live for messages from any node.
    UserJoinGroup {
        user: UserId,
        group: GroupName,
        ttl: Option<Duration>,
    },
    /// Asked on a node's channel: the URL other nodes reach that node at over HTTP. Also the
    /// cheapest round trip: once a node answered it, it has read what was published before.
    Address,
    /// Asked on every node by a node that starts: up to `max` of the user-group memberships
    /// the node keeps (every hub's, ordered by hub, user, group), after `after`.
    UserGroups {
        after: Option<UserGroupKey>,
        max: u32,
    },
    /// An app server's ClientInvocation for a connection held elsewhere.
    Invoke(Invocation),
    /// Asked on every node by a node whose dashboard is open: what the node shows of itself
    /// (the request and the answer, [`Answer::View`], are the dashboard's JSON).
    View(String),
}

/// A client invocation passed to the node holding its connection: the owner takes it as if
/// the caller had sent it there (answers `Yes`), provided it holds the connection and has a
/// connection from the caller to answer on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Invocation {
    pub(crate) connection: ConnectionId,
    pub(crate) invocation_id: String,
    pub(crate) caller_server_id: String,
    pub(crate) payloads: Payloads,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
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

impl Question {
    pub(super) fn write(&self, w: &mut Writer) {
        match self {
            Question::AddToGroup { connection, group } => {
                tag(w, 3, 0);
                w.str(connection.as_str());
                w.str(group.as_str());
            }
            Question::RemoveFromGroup { connection, group } => {
                tag(w, 3, 1);
                w.str(connection.as_str());
                w.opt_str(group.as_ref().map(|g| g.as_str()));
            }
            Question::CloseConnection { connection, reason } => {
                tag(w, 3, 2);
                w.str(connection.as_str());
                w.opt_str(reason.as_deref());
            }
            Question::ConnectionExists(id) => {
                tag(w, 2, 3);
                w.str(id.as_str());
            }
            Question::UserExists(user) => {
                tag(w, 2, 4);
                w.str(user.as_str());
            }
            Question::GroupExists(group) => {
                tag(w, 2, 5);
                w.str(group.as_str());
            }
            Question::UserInGroup(user, group) => {
                tag(w, 3, 6);
                w.str(user.as_str());
                w.str(group.as_str());
            }
            Question::GroupMembers { group, after, max } => {
                tag(w, 4, 7);
                w.str(group.as_str());
                w.opt_str(after.as_deref());
                w.uint(u64::from(*max));
            }
            Question::UserJoinGroup { user, group, ttl } => {
                tag(w, 4, 8);
                w.str(user.as_str());
                w.str(group.as_str());
                w.opt_ms(*ttl);
            }
            Question::Address => tag(w, 1, 9),
            Question::UserGroups { after, max } => {
                tag(w, 3, 10);
                match after {
                    Some((hub, user, group)) => {
                        w.array(3);
                        w.str(hub.as_str());
                        w.str(user.as_str());
                        w.str(group.as_str());
                    }
                    None => w.nil(),
                }
                w.uint(u64::from(*max));
            }
            Question::Invoke(invocation) => {
                tag(w, 5, 11);
                w.str(invocation.connection.as_str());
                w.str(&invocation.invocation_id);
                w.str(&invocation.caller_server_id);
                w.payloads(&invocation.payloads);
            }
            Question::View(request) => {
                tag(w, 2, 12);
                w.str(request);
            }
        }
    }

    pub(super) fn read(r: &mut Reader<'_>) -> Result<Question, EnvelopeError> {
        let len = r.array()?;
        let tag = r.uint()?;
        let want = match tag {
            9 => 1,
            3..=5 | 12 => 2,
            7 | 8 => 4,
            11 => 5,
            _ => 3,
        };
        if len != want {
            return Err(r.type_error());
        }
        Ok(match tag {
            0 => Question::AddToGroup {
                connection: connection(r)?,
                group: group(r)?,
            },
            1 => Question::RemoveFromGroup {
                connection: connection(r)?,
                group: r.opt_str()?.map(GroupName::new).transpose()?,
            },
            2 => Question::CloseConnection {
                connection: connection(r)?,
                reason: r.opt_str()?.map(str::to_string),
            },
            3 => Question::ConnectionExists(connection(r)?),
            4 => Question::UserExists(user(r)?),
            5 => Question::GroupExists(group(r)?),
            6 => Question::UserInGroup(user(r)?, group(r)?),
            7 => Question::GroupMembers {
                group: group(r)?,
                after: r.opt_str()?.map(str::to_string),
                max: u32::try_from(r.uint()?).unwrap_or(u32::MAX),
            },
            8 => Question::UserJoinGroup {
                user: user(r)?,
                group: group(r)?,
                ttl: r.opt_ms()?,
            },
            9 => Question::Address,
            10 => Question::UserGroups {
                after: user_group_key(r)?,
                max: u32::try_from(r.uint()?).unwrap_or(u32::MAX),
            },
            11 => Question::Invoke(Invocation {
                connection: connection(r)?,
                invocation_id: r.str()?.to_string(),
                caller_server_id: r.str()?.to_string(),
                payloads: r.payloads()?,
            }),
            12 => Question::View(r.str()?.to_string()),
            tag => {
                return Err(EnvelopeError::Tag {
                    what: "question",
                    tag,
                })
            }
        })
    }

    /// What the question carries that is not its names (for the envelope's capacity).
    pub(super) fn payload_len(&self) -> usize {
        match self {
            Question::Invoke(invocation) => invocation.payloads.total_len(),
            Question::View(request) => request.len(),
            _ => 0,
        }
    }
}

impl Answer {
    pub(super) fn write(&self, w: &mut Writer) {
        match self {
            Answer::Yes => tag(w, 1, 0),
            Answer::No => tag(w, 1, 1),
            Answer::Members(members) => {
                tag(w, 2, 2);
                w.array(members.len() * 2);
                for (connection, user) in members {
                    w.str(connection.as_str());
                    w.opt_str(user.as_ref().map(|u| u.as_str()));
                }
            }
            Answer::At(url) => {
                tag(w, 2, 3);
                w.str(url);
            }
            Answer::UserGroups(entries) => {
                tag(w, 2, 4);
                w.array(entries.len() * 4);
                for entry in entries {
                    w.str(entry.hub.as_str());
                    w.str(entry.user.as_str());
                    w.str(entry.group.as_str());
                    w.opt_ms(entry.ttl);
                }
            }
            Answer::Full(max) => {
                tag(w, 2, 5);
                w.uint(*max);
            }
            Answer::View(json) => {
                tag(w, 2, 6);
                w.str(json);
            }
        }
    }

    pub(super) fn read(r: &mut Reader<'_>) -> Result<Answer, EnvelopeError> {
        let len = r.array()?;
        let tag = r.uint()?;
        let want = if tag < 2 { 1 } else { 2 };
        if len != want {
            return Err(r.type_error());
        }
        Ok(match tag {
            0 => Answer::Yes,
            1 => Answer::No,
            2 => Answer::Members(members(r)?),
            3 => Answer::At(r.str()?.to_string()),
            4 => Answer::UserGroups(user_group_entries(r)?),
            5 => Answer::Full(r.uint()?),
            6 => Answer::View(r.str()?.to_string()),
            tag => {
                return Err(EnvelopeError::Tag {
                    what: "answer",
                    tag,
                })
            }
        })
    }

    pub(super) fn payload_len(&self) -> usize {
        match self {
            Answer::Members(members) => members.len() * 48,
            Answer::UserGroups(entries) => entries.len() * 64,
            Answer::View(json) => json.len(),
            _ => 0,
        }
    }
}

/// An array of `len` fields whose first is the tag.
fn tag(w: &mut Writer, len: usize, tag: u64) {
    w.array(len);
    w.uint(tag);
}

fn connection(r: &mut Reader<'_>) -> Result<ConnectionId, EnvelopeError> {
    Ok(ConnectionId::new(r.str()?)?)
}

fn group(r: &mut Reader<'_>) -> Result<GroupName, EnvelopeError> {
    Ok(GroupName::new(r.str()?)?)
}

fn user(r: &mut Reader<'_>) -> Result<UserId, EnvelopeError> {
    Ok(UserId::new(r.str()?)?)
}

fn user_group_key(r: &mut Reader<'_>) -> Result<Option<UserGroupKey>, EnvelopeError> {
    if r.nil()? {
        return Ok(None);
    }
    if r.array()? != 3 {
        return Err(r.type_error());
    }
    Ok(Some((HubName::from_key(r.str()?)?, user(r)?, group(r)?)))
}

fn members(r: &mut Reader<'_>) -> Result<Vec<(ConnectionId, Option<UserId>)>, EnvelopeError> {
    let count = r.array()?;
    if count % 2 != 0 {
        return Err(EnvelopeError::Type(r.position()));
    }
    let mut members = Vec::with_capacity(count / 2);
    for _ in 0..count / 2 {
        let connection = connection(r)?;
        let user = r.opt_str()?.map(UserId::new).transpose()?;
        members.push((connection, user));
    }
    Ok(members)
}

fn user_group_entries(r: &mut Reader<'_>) -> Result<Vec<UserGroupEntry>, EnvelopeError> {
    let count = r.array()?;
    if count % 4 != 0 {
        return Err(EnvelopeError::Type(r.position()));
    }
    // An entry takes at least 7 bytes: what is left bounds the allocation.
    let mut entries = Vec::with_capacity((count / 4).min(r.rest().len() / 7));
    for _ in 0..count / 4 {
        entries.push(UserGroupEntry {
            hub: HubName::from_key(r.str()?)?,
            user: user(r)?,
            group: group(r)?,
            ttl: r.opt_ms()?,
        });
    }
    Ok(entries)
}
