//! The wire form of a [`Message`] between nodes: encoded once by the publisher, published on
//! every target channel, decoded by each receiving node. No I/O.
//!
//! An envelope is a MessagePack array:
//! `[version, origin, seq, kind, hub, ...fields of the kind]`. `origin` names the publishing
//! backplane instance (random per process start), `seq` counts its publishes, so a receiver
//! can drop its own echoes and the copies of a message published on several channels.
//! Payload bytes are binary fields; decoding slices them out of the received buffer without
//! copying.

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use rmp::Marker;
use switchyard_core::{
    Answer, Channel, CloseReason, ConnectionId, GroupName, HubName, Message, NameError, Payloads,
    Presence, Protocol, Question, Target, UserGroupEntry, UserId,
};

const VERSION: u8 = 1;

/// Where a decoded envelope came from, and its place in that publisher's sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Stamp {
    pub origin: u64,
    pub seq: u64,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EnvelopeError {
    #[error("envelope ends early")]
    Truncated,
    #[error("envelope version {0} is not supported (this node speaks {VERSION})")]
    Version(u64),
    #[error("unexpected MessagePack type at byte {0}")]
    Type(usize),
    #[error("unknown {what} tag {tag}")]
    Tag { what: &'static str, tag: u64 },
    #[error("text is not UTF-8")]
    Utf8,
    #[error(transparent)]
    Name(#[from] NameError),
    #[error("message kind {kind} with {len} fields")]
    Fields { kind: u64, len: usize },
    #[error("{0} trailing bytes")]
    Trailing(usize),
}

/// Encodes `message` stamped with its publisher and sequence number.
pub fn encode(stamp: Stamp, message: &Message) -> Bytes {
    let mut out = BytesMut::with_capacity(64 + payload_len(message)).writer();
    let w = &mut out;
    let fields = match message {
        Message::Send { .. } => 2,
        Message::AddToGroup { .. }
        | Message::RemoveFromGroup { .. }
        | Message::UserJoinGroup { .. }
        | Message::UserLeaveGroup { .. } => 2,
        Message::Close { .. } => 3,
        Message::Ask { .. } => 3,
        Message::Answer { .. } => 2,
        Message::Presence(_) => 4,
        Message::Trace { .. } => 2,
    };
    let ttl_field = usize::from(matches!(message, Message::UserJoinGroup { .. }));
    write_array(w, 5 + fields + ttl_field);
    write_uint(w, VERSION as u64);
    write_uint(w, stamp.origin);
    write_uint(w, stamp.seq);
    match message {
        Message::Send {
            hub,
            target,
            payloads,
        } => {
            write_uint(w, 0);
            write_str(w, hub.as_str());
            write_target(w, target);
            write_payloads(w, payloads);
        }
        Message::AddToGroup {
            hub,
            connection,
            group,
        } => {
            write_uint(w, 1);
            write_str(w, hub.as_str());
            write_str(w, connection.as_str());
            write_str(w, group.as_str());
        }
        Message::RemoveFromGroup {
            hub,
            connection,
            group,
        } => {
            write_uint(w, 2);
            write_str(w, hub.as_str());
            write_str(w, connection.as_str());
            write_opt_str(w, group.as_ref().map(|g| g.as_str()));
        }
        Message::UserJoinGroup {
            hub,
            user,
            group,
            ttl,
        } => {
            write_uint(w, 3);
            write_str(w, hub.as_str());
            write_str(w, user.as_str());
            write_str(w, group.as_str());
            write_opt_ms(w, *ttl);
        }
        Message::UserLeaveGroup { hub, user, group } => {
            write_uint(w, 4);
            write_str(w, hub.as_str());
            write_str(w, user.as_str());
            write_opt_str(w, group.as_ref().map(|g| g.as_str()));
        }
        Message::Close {
            hub,
            target,
            excluded,
            reason,
        } => {
            write_uint(w, 5);
            write_str(w, hub.as_str());
            write_target(w, target);
            write_ids(w, excluded.iter().map(|c| c.as_str()));
            // Only closes asked for by a caller cross nodes; anything else travels as
            // service shutdown, the other reason a node closes connections it does not own.
            match reason {
                CloseReason::ClosedByApi(text) => {
                    write_array(w, 2);
                    write_uint(w, 0);
                    write_opt_str(w, text.as_deref());
                }
                _ => {
                    write_array(w, 1);
                    write_uint(w, 1);
                }
            }
        }
        Message::Ask {
            hub,
            from,
            id,
            question,
        } => {
            write_uint(w, 6);
            write_str(w, hub.as_str());
            write_str(w, from);
            write_uint(w, *id);
            write_question(w, question);
        }
        Message::Answer { hub, id, answer } => {
            write_uint(w, 7);
            write_str(w, hub.as_str());
            write_uint(w, *id);
            write_answer(w, answer);
        }
        Message::Presence(presence) => {
            write_uint(w, 8);
            write_str(w, presence.hub.as_str());
            write_str(w, &presence.node);
            write_str(w, &presence.instance);
            rmp::encode::write_bool(w, presence.leaving).expect("writing to memory");
            write_array(w, presence.servers.len());
            for (hub, servers) in &presence.servers {
                write_array(w, 2);
                write_str(w, hub.as_str());
                write_ids(w, servers.iter().map(String::as_str));
            }
        }
        Message::Trace { hub, from, events } => {
            write_uint(w, 9);
            write_str(w, hub.as_str());
            write_str(w, from);
            write_str(w, events);
        }
    }
    out.into_inner().freeze()
}

/// Decodes an envelope; payloads share `input`'s buffer.
pub fn decode(input: &Bytes) -> Result<(Stamp, Message), EnvelopeError> {
    let mut r = Reader { input, pos: 0 };
    let len = r.array()?;
    if len < 5 {
        return Err(EnvelopeError::Truncated);
    }
    let version = r.uint()?;
    if version != VERSION as u64 {
        return Err(EnvelopeError::Version(version));
    }
    let stamp = Stamp {
        origin: r.uint()?,
        seq: r.uint()?,
    };
    let kind = r.uint()?;
    let hub = HubName::from_key(r.str()?)?;
    let expect = |n: usize| {
        if len == n {
            Ok(())
        } else {
            Err(EnvelopeError::Fields { kind, len })
        }
    };
    let message = match kind {
        0 => {
            expect(7)?;
            let target = r.target()?;
            let payloads = r.payloads()?;
            Message::Send {
                hub,
                target,
                payloads,
            }
        }
        1 => {
            expect(7)?;
            Message::AddToGroup {
                hub,
                connection: ConnectionId::new(r.str()?)?,
                group: GroupName::new(r.str()?)?,
            }
        }
        2 => {
            expect(7)?;
            Message::RemoveFromGroup {
                hub,
                connection: ConnectionId::new(r.str()?)?,
                group: r.opt_str()?.map(GroupName::new).transpose()?,
            }
        }
        3 => {
            expect(8)?;
            Message::UserJoinGroup {
                hub,
                user: UserId::new(r.str()?)?,
                group: GroupName::new(r.str()?)?,
                ttl: r.opt_ms()?,
            }
        }
        4 => {
            expect(7)?;
            Message::UserLeaveGroup {
                hub,
                user: UserId::new(r.str()?)?,
                group: r.opt_str()?.map(GroupName::new).transpose()?,
            }
        }
        5 => {
            expect(8)?;
            let target = r.target()?;
            let excluded = r.ids(ConnectionId::new)?;
            let reason = match (r.array()?, r.uint()?) {
                (2, 0) => CloseReason::ClosedByApi(r.opt_str()?.map(str::to_string)),
                (1, 1) => CloseReason::ServiceShutdown,
                (_, tag) => {
                    return Err(EnvelopeError::Tag {
                        what: "close reason",
                        tag,
                    })
                }
            };
            Message::Close {
                hub,
                target,
                excluded,
                reason,
            }
        }
        6 => {
            expect(8)?;
            Message::Ask {
                hub,
                from: r.str()?.to_string(),
                id: r.uint()?,
                question: r.question()?,
            }
        }
        7 => {
            expect(7)?;
            Message::Answer {
                hub,
                id: r.uint()?,
                answer: r.answer()?,
            }
        }
        8 => {
            expect(9)?;
            let node = r.str()?.to_string();
            let instance = r.str()?.to_string();
            let leaving = r.bool()?;
            let count = r.array()?;
            // Each entry takes at least four bytes: do not reserve for more than could follow.
            let mut servers = Vec::with_capacity(count.min(r.rest().len() / 4));
            for _ in 0..count {
                if r.array()? != 2 {
                    return Err(EnvelopeError::Type(r.pos));
                }
                let hub = HubName::from_key(r.str()?)?;
                servers.push((hub, r.ids(|id| Ok(id.to_string()))?));
            }
            Message::Presence(Presence {
                hub,
                node,
                instance,
                leaving,
                servers,
            })
        }
        9 => {
            expect(7)?;
            Message::Trace {
                hub,
                from: r.str()?.to_string(),
                events: r.str()?.to_string(),
            }
        }
        tag => {
            return Err(EnvelopeError::Tag {
                what: "message kind",
                tag,
            })
        }
    };
    if r.pos != input.len() {
        return Err(EnvelopeError::Trailing(input.len() - r.pos));
    }
    Ok((stamp, message))
}

/// The channel name a networked backplane uses for `channel` under `prefix`.
pub fn channel_name(prefix: &str, channel: &Channel) -> String {
    format!("{prefix}:{}", channel.key())
}

fn payload_len(message: &Message) -> usize {
    match message {
        Message::Send { payloads, .. }
        | Message::Ask {
            question: Question::Invoke { payloads, .. },
            ..
        } => payloads.total_len() + 16,
        Message::Trace { events, .. } => events.len() + 16,
        _ => 0,
    }
}

type W = bytes::buf::Writer<BytesMut>;

fn write_array(w: &mut W, len: usize) {
    rmp::encode::write_array_len(w, len as u32).expect("writing to memory");
}

fn write_uint(w: &mut W, value: u64) {
    rmp::encode::write_uint(w, value).expect("writing to memory");
}

fn write_str(w: &mut W, value: &str) {
    rmp::encode::write_str(w, value).expect("writing to memory");
}

fn write_opt_str(w: &mut W, value: Option<&str>) {
    match value {
        Some(v) => write_str(w, v),
        None => rmp::encode::write_nil(w).expect("writing to memory"),
    }
}

fn write_opt_ms(w: &mut W, value: Option<Duration>) {
    match value {
        Some(ttl) => write_uint(w, ttl.as_millis().min(u64::MAX as u128) as u64),
        None => rmp::encode::write_nil(w).expect("writing to memory"),
    }
}

fn write_ids<'a>(w: &mut W, ids: impl ExactSizeIterator<Item = &'a str>) {
    write_array(w, ids.len());
    for id in ids {
        write_str(w, id);
    }
}

fn write_target(w: &mut W, target: &Target) {
    match target {
        Target::All { excluded } => {
            write_array(w, 2);
            write_uint(w, 0);
            write_ids(w, excluded.iter().map(|c| c.as_str()));
        }
        Target::Connection(id) => {
            write_array(w, 2);
            write_uint(w, 1);
            write_str(w, id.as_str());
        }
        Target::Connections(ids) => {
            write_array(w, 2);
            write_uint(w, 2);
            write_ids(w, ids.iter().map(|c| c.as_str()));
        }
        Target::User(user) => {
            write_array(w, 2);
            write_uint(w, 3);
            write_str(w, user.as_str());
        }
        Target::Users(users) => {
            write_array(w, 2);
            write_uint(w, 4);
            write_ids(w, users.iter().map(|u| u.as_str()));
        }
        Target::Group {
            group,
            excluded,
            excluded_users,
        } => {
            write_array(w, 4);
            write_uint(w, 5);
            write_str(w, group.as_str());
            write_ids(w, excluded.iter().map(|c| c.as_str()));
            write_ids(w, excluded_users.iter().map(|u| u.as_str()));
        }
        Target::Groups(groups) => {
            write_array(w, 2);
            write_uint(w, 6);
            write_ids(w, groups.iter().map(|g| g.as_str()));
        }
    }
}

fn write_question(w: &mut W, question: &Question) {
    match question {
        Question::AddToGroup { connection, group } => {
            write_array(w, 3);
            write_uint(w, 0);
            write_str(w, connection.as_str());
            write_str(w, group.as_str());
        }
        Question::RemoveFromGroup { connection, group } => {
            write_array(w, 3);
            write_uint(w, 1);
            write_str(w, connection.as_str());
            write_opt_str(w, group.as_ref().map(|g| g.as_str()));
        }
        Question::CloseConnection { connection, reason } => {
            write_array(w, 3);
            write_uint(w, 2);
            write_str(w, connection.as_str());
            write_opt_str(w, reason.as_deref());
        }
        Question::ConnectionExists(id) => {
            write_array(w, 2);
            write_uint(w, 3);
            write_str(w, id.as_str());
        }
        Question::UserExists(user) => {
            write_array(w, 2);
            write_uint(w, 4);
            write_str(w, user.as_str());
        }
        Question::GroupExists(group) => {
            write_array(w, 2);
            write_uint(w, 5);
            write_str(w, group.as_str());
        }
        Question::UserInGroup(user, group) => {
            write_array(w, 3);
            write_uint(w, 6);
            write_str(w, user.as_str());
            write_str(w, group.as_str());
        }
        Question::GroupMembers { group, after, max } => {
            write_array(w, 4);
            write_uint(w, 7);
            write_str(w, group.as_str());
            write_opt_str(w, after.as_deref());
            write_uint(w, u64::from(*max));
        }
        Question::UserJoinGroup { user, group, ttl } => {
            write_array(w, 4);
            write_uint(w, 8);
            write_str(w, user.as_str());
            write_str(w, group.as_str());
            write_opt_ms(w, *ttl);
        }
        Question::Address => {
            write_array(w, 1);
            write_uint(w, 9);
        }
        Question::UserGroups { after, max } => {
            write_array(w, 3);
            write_uint(w, 10);
            match after {
                Some((hub, user, group)) => {
                    write_array(w, 3);
                    write_str(w, hub.as_str());
                    write_str(w, user.as_str());
                    write_str(w, group.as_str());
                }
                None => rmp::encode::write_nil(w).expect("writing to memory"),
            }
            write_uint(w, u64::from(*max));
        }
        Question::Invoke {
            connection,
            invocation_id,
            caller_server_id,
            payloads,
        } => {
            write_array(w, 5);
            write_uint(w, 11);
            write_str(w, connection.as_str());
            write_str(w, invocation_id);
            write_str(w, caller_server_id);
            write_payloads(w, payloads);
        }
        Question::View(request) => {
            write_array(w, 2);
            write_uint(w, 12);
            write_str(w, request);
        }
    }
}

fn write_payloads(w: &mut W, payloads: &Payloads) {
    write_array(w, payloads.iter().count() * 2);
    for (protocol, bytes) in payloads.iter() {
        write_str(w, protocol.name());
        rmp::encode::write_bin(w, bytes).expect("writing to memory");
    }
}

fn write_answer(w: &mut W, answer: &Answer) {
    match answer {
        Answer::Yes => {
            write_array(w, 1);
            write_uint(w, 0);
        }
        Answer::No => {
            write_array(w, 1);
            write_uint(w, 1);
        }
        Answer::Members(members) => {
            write_array(w, 2);
            write_uint(w, 2);
            write_array(w, members.len() * 2);
            for (connection, user) in members {
                write_str(w, connection.as_str());
                write_opt_str(w, user.as_ref().map(|u| u.as_str()));
            }
        }
        Answer::At(url) => {
            write_array(w, 2);
            write_uint(w, 3);
            write_str(w, url);
        }
        Answer::Full(max) => {
            write_array(w, 2);
            write_uint(w, 5);
            write_uint(w, *max);
        }
        Answer::View(json) => {
            write_array(w, 2);
            write_uint(w, 6);
            write_str(w, json);
        }
        Answer::UserGroups(entries) => {
            write_array(w, 2);
            write_uint(w, 4);
            write_array(w, entries.len() * 4);
            for entry in entries {
                write_str(w, entry.hub.as_str());
                write_str(w, entry.user.as_str());
                write_str(w, entry.group.as_str());
                write_opt_ms(w, entry.ttl);
            }
        }
    }
}

struct Reader<'a> {
    input: &'a Bytes,
    pos: usize,
}

impl<'a> Reader<'a> {
    fn rest(&self) -> &'a [u8] {
        &self.input[self.pos..]
    }

    fn marker(&mut self) -> Result<Marker, EnvelopeError> {
        let byte = *self.rest().first().ok_or(EnvelopeError::Truncated)?;
        self.pos += 1;
        Ok(Marker::from_u8(byte))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], EnvelopeError> {
        let rest = self.rest();
        if rest.len() < n {
            return Err(EnvelopeError::Truncated);
        }
        self.pos += n;
        Ok(&rest[..n])
    }

    fn be(&mut self, n: usize) -> Result<u64, EnvelopeError> {
        Ok(self
            .take(n)?
            .iter()
            .fold(0u64, |acc, b| (acc << 8) | u64::from(*b)))
    }

    fn type_error(&self) -> EnvelopeError {
        EnvelopeError::Type(self.pos.saturating_sub(1))
    }

    fn uint(&mut self) -> Result<u64, EnvelopeError> {
        match self.marker()? {
            Marker::FixPos(n) => Ok(u64::from(n)),
            Marker::U8 => self.be(1),
            Marker::U16 => self.be(2),
            Marker::U32 => self.be(4),
            Marker::U64 => self.be(8),
            _ => Err(self.type_error()),
        }
    }

    fn array(&mut self) -> Result<usize, EnvelopeError> {
        let len = match self.marker()? {
            Marker::FixArray(n) => usize::from(n),
            Marker::Array16 => self.be(2)? as usize,
            Marker::Array32 => self.be(4)? as usize,
            _ => return Err(self.type_error()),
        };
        // Every element takes at least a byte: a length past the input is a lie.
        if len > self.rest().len() {
            return Err(EnvelopeError::Truncated);
        }
        Ok(len)
    }

    fn bool(&mut self) -> Result<bool, EnvelopeError> {
        match self.marker()? {
            Marker::True => Ok(true),
            Marker::False => Ok(false),
            _ => Err(self.type_error()),
        }
    }

    fn nil(&mut self) -> Result<bool, EnvelopeError> {
        if self.rest().first() == Some(&0xc0) {
            self.pos += 1;
            return Ok(true);
        }
        Ok(false)
    }

    fn str(&mut self) -> Result<&'a str, EnvelopeError> {
        let len = match self.marker()? {
            Marker::FixStr(n) => usize::from(n),
            Marker::Str8 => self.be(1)? as usize,
            Marker::Str16 => self.be(2)? as usize,
            Marker::Str32 => self.be(4)? as usize,
            _ => return Err(self.type_error()),
        };
        std::str::from_utf8(self.take(len)?).map_err(|_| EnvelopeError::Utf8)
    }

    fn opt_ms(&mut self) -> Result<Option<Duration>, EnvelopeError> {
        if self.nil()? {
            return Ok(None);
        }
        Ok(Some(Duration::from_millis(self.uint()?)))
    }

    fn opt_str(&mut self) -> Result<Option<&'a str>, EnvelopeError> {
        if self.nil()? {
            return Ok(None);
        }
        self.str().map(Some)
    }

    fn bin(&mut self) -> Result<Bytes, EnvelopeError> {
        let len = match self.marker()? {
            Marker::Bin8 => self.be(1)? as usize,
            Marker::Bin16 => self.be(2)? as usize,
            Marker::Bin32 => self.be(4)? as usize,
            _ => return Err(self.type_error()),
        };
        let start = self.pos;
        self.take(len)?;
        Ok(self.input.slice(start..start + len))
    }

    fn payloads(&mut self) -> Result<Payloads, EnvelopeError> {
        let count = self.array()?;
        if count % 2 != 0 {
            return Err(EnvelopeError::Type(self.pos));
        }
        let mut payloads = Payloads::new();
        for _ in 0..count / 2 {
            let protocol = Protocol::from_name(self.str()?);
            payloads.insert(protocol, self.bin()?);
        }
        Ok(payloads)
    }

    fn ids<T>(
        &mut self,
        make: impl Fn(&str) -> Result<T, NameError>,
    ) -> Result<Vec<T>, EnvelopeError> {
        let len = self.array()?;
        let mut out = Vec::with_capacity(len);
        for _ in 0..len {
            out.push(make(self.str()?)?);
        }
        Ok(out)
    }

    fn question(&mut self) -> Result<Question, EnvelopeError> {
        let len = self.array()?;
        let tag = self.uint()?;
        let want = match tag {
            9 => 1,
            3..=5 | 12 => 2,
            7 | 8 => 4,
            11 => 5,
            _ => 3,
        };
        let hub =
            |r: &mut Self| -> Result<HubName, EnvelopeError> { Ok(HubName::from_key(r.str()?)?) };
        if len != want {
            return Err(self.type_error());
        }
        let connection = |r: &mut Self| -> Result<ConnectionId, EnvelopeError> {
            Ok(ConnectionId::new(r.str()?)?)
        };
        let group =
            |r: &mut Self| -> Result<GroupName, EnvelopeError> { Ok(GroupName::new(r.str()?)?) };
        Ok(match tag {
            0 => Question::AddToGroup {
                connection: connection(self)?,
                group: group(self)?,
            },
            1 => Question::RemoveFromGroup {
                connection: connection(self)?,
                group: self.opt_str()?.map(GroupName::new).transpose()?,
            },
            2 => Question::CloseConnection {
                connection: connection(self)?,
                reason: self.opt_str()?.map(str::to_string),
            },
            3 => Question::ConnectionExists(connection(self)?),
            4 => Question::UserExists(UserId::new(self.str()?)?),
            5 => Question::GroupExists(group(self)?),
            6 => Question::UserInGroup(UserId::new(self.str()?)?, group(self)?),
            7 => Question::GroupMembers {
                group: group(self)?,
                after: self.opt_str()?.map(str::to_string),
                max: u32::try_from(self.uint()?).unwrap_or(u32::MAX),
            },
            8 => Question::UserJoinGroup {
                user: UserId::new(self.str()?)?,
                group: group(self)?,
                ttl: self.opt_ms()?,
            },
            9 => Question::Address,
            10 => Question::UserGroups {
                after: if self.nil()? {
                    None
                } else {
                    if self.array()? != 3 {
                        return Err(self.type_error());
                    }
                    Some((hub(self)?, UserId::new(self.str()?)?, group(self)?))
                },
                max: u32::try_from(self.uint()?).unwrap_or(u32::MAX),
            },
            11 => Question::Invoke {
                connection: connection(self)?,
                invocation_id: self.str()?.to_string(),
                caller_server_id: self.str()?.to_string(),
                payloads: self.payloads()?,
            },
            12 => Question::View(self.str()?.to_string()),
            tag => {
                return Err(EnvelopeError::Tag {
                    what: "question",
                    tag,
                })
            }
        })
    }

    fn answer(&mut self) -> Result<Answer, EnvelopeError> {
        let len = self.array()?;
        let tag = self.uint()?;
        let want = if tag < 2 { 1 } else { 2 };
        if len != want {
            return Err(self.type_error());
        }
        Ok(match tag {
            0 => Answer::Yes,
            1 => Answer::No,
            2 => {
                let count = self.array()?;
                if count % 2 != 0 {
                    return Err(EnvelopeError::Type(self.pos));
                }
                let mut members = Vec::with_capacity(count / 2);
                for _ in 0..count / 2 {
                    let connection = ConnectionId::new(self.str()?)?;
                    let user = self.opt_str()?.map(UserId::new).transpose()?;
                    members.push((connection, user));
                }
                Answer::Members(members)
            }
            3 => Answer::At(self.str()?.to_string()),
            5 => Answer::Full(self.uint()?),
            6 => Answer::View(self.str()?.to_string()),
            4 => {
                let count = self.array()?;
                if count % 4 != 0 {
                    return Err(EnvelopeError::Type(self.pos));
                }
                // An entry takes at least 7 bytes: what is left bounds the allocation.
                let mut entries = Vec::with_capacity((count / 4).min(self.rest().len() / 7));
                for _ in 0..count / 4 {
                    entries.push(UserGroupEntry {
                        hub: HubName::from_key(self.str()?)?,
                        user: UserId::new(self.str()?)?,
                        group: GroupName::new(self.str()?)?,
                        ttl: self.opt_ms()?,
                    });
                }
                Answer::UserGroups(entries)
            }
            tag => {
                return Err(EnvelopeError::Tag {
                    what: "answer",
                    tag,
                })
            }
        })
    }

    fn target(&mut self) -> Result<Target, EnvelopeError> {
        let len = self.array()?;
        let tag = self.uint()?;
        let want = if tag == 5 { 4 } else { 2 };
        if len != want {
            return Err(self.type_error());
        }
        Ok(match tag {
            0 => Target::All {
                excluded: self.ids(ConnectionId::new)?,
            },
            1 => Target::Connection(ConnectionId::new(self.str()?)?),
            2 => Target::Connections(self.ids(ConnectionId::new)?),
            3 => Target::User(UserId::new(self.str()?)?),
            4 => Target::Users(self.ids(UserId::new)?),
            5 => Target::Group {
                group: GroupName::new(self.str()?)?,
                excluded: self.ids(ConnectionId::new)?,
                excluded_users: self.ids(UserId::new)?,
            },
            6 => Target::Groups(self.ids(GroupName::new)?),
            tag => {
                return Err(EnvelopeError::Tag {
                    what: "target",
                    tag,
                })
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hub() -> HubName {
        HubName::new("Chat", Some("App")).unwrap()
    }

    fn c(id: &str) -> ConnectionId {
        ConnectionId::new(id).unwrap()
    }

    fn samples() -> Vec<Message> {
        let payloads = Payloads::new()
            .with(Protocol::Json, Bytes::from_static(b"{\"type\":1}\x1e"))
            .with(Protocol::MessagePack, Bytes::from(vec![7u8; 300]))
            .with(
                Protocol::from_name("blazorpack"),
                Bytes::from_static(b"\x01"),
            );
        let targets = [
            Target::All {
                excluded: vec![c("x"), c("y")],
            },
            Target::Connection(c("conn-1")),
            Target::Connections(vec![c("a"), c("b")]),
            Target::User(UserId::new("ü user").unwrap()),
            Target::Users(vec![]),
            Target::Group {
                group: GroupName::new("g:{1}").unwrap(),
                excluded: vec![c("z")],
                excluded_users: vec![UserId::new("u").unwrap()],
            },
            Target::Groups(vec![GroupName::new("g1").unwrap()]),
        ];
        let mut out: Vec<Message> = targets
            .iter()
            .map(|t| Message::Send {
                hub: hub(),
                target: t.clone(),
                payloads: payloads.clone(),
            })
            .collect();
        out.extend([
            Message::AddToGroup {
                hub: hub(),
                connection: c("c"),
                group: GroupName::new("g").unwrap(),
            },
            Message::RemoveFromGroup {
                hub: hub(),
                connection: c("c"),
                group: None,
            },
            Message::UserJoinGroup {
                hub: hub(),
                user: UserId::new("u").unwrap(),
                group: GroupName::new("g").unwrap(),
                ttl: Some(Duration::from_millis(1500)),
            },
            Message::UserJoinGroup {
                hub: hub(),
                user: UserId::new("u").unwrap(),
                group: GroupName::new("g").unwrap(),
                ttl: None,
            },
            Message::UserLeaveGroup {
                hub: hub(),
                user: UserId::new("u").unwrap(),
                group: Some(GroupName::new("g").unwrap()),
            },
            Message::Close {
                hub: hub(),
                target: Target::User(UserId::new("u").unwrap()),
                excluded: vec![c("keep")],
                reason: CloseReason::ClosedByApi(Some("bye".into())),
            },
            Message::Close {
                hub: hub(),
                target: Target::All { excluded: vec![] },
                excluded: vec![],
                reason: CloseReason::ClosedByApi(None),
            },
        ]);
        let (g, u) = (GroupName::new("g").unwrap(), UserId::new("u").unwrap());
        let questions = [
            Question::AddToGroup {
                connection: c("c"),
                group: g.clone(),
            },
            Question::RemoveFromGroup {
                connection: c("c"),
                group: None,
            },
            Question::RemoveFromGroup {
                connection: c("c"),
                group: Some(g.clone()),
            },
            Question::CloseConnection {
                connection: c("c"),
                reason: Some("why".into()),
            },
            Question::ConnectionExists(c("c")),
            Question::UserExists(u.clone()),
            Question::GroupExists(g.clone()),
            Question::UserInGroup(u.clone(), g.clone()),
            Question::GroupMembers {
                group: g.clone(),
                after: Some("c1".into()),
                max: 201,
            },
            Question::UserJoinGroup {
                user: u.clone(),
                group: g.clone(),
                ttl: Some(Duration::from_secs(60)),
            },
            Question::UserJoinGroup {
                user: u.clone(),
                group: g.clone(),
                ttl: None,
            },
            Question::Address,
            Question::UserGroups {
                after: None,
                max: 1000,
            },
            Question::UserGroups {
                after: Some((hub(), u.clone(), g.clone())),
                max: 2,
            },
            Question::Invoke {
                connection: c("c"),
                invocation_id: "c-1-2".into(),
                caller_server_id: "host_1".into(),
                payloads: Payloads::new().with(Protocol::Json, Bytes::from_static(b"{}\x1e")),
            },
            Question::View(r#"{"filter":null}"#.into()),
        ];
        out.extend(
            questions
                .into_iter()
                .enumerate()
                .map(|(n, question)| Message::Ask {
                    hub: hub(),
                    from: "node-1".into(),
                    id: n as u64 * 77_777,
                    question,
                }),
        );
        let answers = [
            Answer::Yes,
            Answer::No,
            Answer::Members(vec![(c("a"), None), (c("b"), Some(u.clone()))]),
            Answer::Members(vec![]),
            Answer::View(r#"{"node":{"id":"n1"}}"#.into()),
            Answer::At("http://10.0.0.1:8080".into()),
            Answer::Full(1000),
            Answer::UserGroups(vec![]),
            Answer::UserGroups(vec![
                UserGroupEntry {
                    hub: hub(),
                    user: u.clone(),
                    group: g.clone(),
                    ttl: None,
                },
                UserGroupEntry {
                    hub: hub(),
                    user: u.clone(),
                    group: g.clone(),
                    ttl: Some(Duration::from_millis(1500)),
                },
            ]),
        ];
        out.extend(answers.into_iter().map(|answer| Message::Answer {
            hub: hub(),
            id: u64::MAX,
            answer,
        }));
        for (leaving, servers) in [
            (false, vec![]),
            (
                true,
                vec![
                    (hub(), vec!["host_1".to_string(), "host_2".to_string()]),
                    (HubName::new("other", Some("app")).unwrap(), vec![]),
                ],
            ),
        ] {
            out.push(Message::Presence(Presence {
                hub: hub(),
                node: "n1".into(),
                instance: "n1~0a1b".into(),
                leaving,
                servers,
            }));
        }
        out.push(Message::Trace {
            hub: hub(),
            from: "n2".into(),
            events: r#"[{"node":"n2","time":1,"kind":"connected"}]"#.into(),
        });
        out
    }

    #[test]
    fn every_message_round_trips() {
        for (n, message) in samples().into_iter().enumerate() {
            let stamp = Stamp {
                origin: u64::MAX - n as u64,
                seq: n as u64 * 1_000_003,
            };
            let bytes = encode(stamp, &message);
            assert_eq!(decode(&bytes), Ok((stamp, message)), "sample {n}");
        }
    }

    #[test]
    fn payloads_are_not_copied() {
        let message = &samples()[0];
        let bytes = encode(Stamp { origin: 1, seq: 2 }, message);
        let (_, Message::Send { payloads, .. }) = decode(&bytes).unwrap() else {
            panic!("not a send")
        };
        let json = payloads.get(&Protocol::Json).unwrap();
        let inside = bytes.as_ptr_range();
        assert!(inside.contains(&json.as_ptr()), "payload was copied");
    }

    #[test]
    fn every_truncation_and_bad_byte_is_an_error_not_a_panic() {
        for message in samples() {
            let bytes = encode(Stamp { origin: 9, seq: 9 }, &message);
            for cut in 0..bytes.len() {
                assert!(decode(&bytes.slice(..cut)).is_err(), "cut at {cut}");
            }
            for at in 0..bytes.len() {
                let mut bad = bytes.to_vec();
                bad[at] ^= 0xff;
                let _ = decode(&Bytes::from(bad));
            }
        }
        assert_eq!(
            decode(&Bytes::from_static(&[0x95, 2, 0, 0, 0, 0xa1, b'h'])),
            Err(EnvelopeError::Version(2))
        );
    }

    #[test]
    fn other_close_reasons_travel_as_shutdown() {
        let message = Message::Close {
            hub: hub(),
            target: Target::All { excluded: vec![] },
            excluded: vec![],
            reason: CloseReason::ServiceShutdown,
        };
        let bytes = encode(Stamp { origin: 1, seq: 1 }, &message);
        assert_eq!(decode(&bytes).unwrap().1, message);
    }
}
