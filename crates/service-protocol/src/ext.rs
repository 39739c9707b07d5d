//! The extension-members map (§1.3) and which message types carry which keys.

use std::io;

use crate::error::FieldProblem;
use crate::message::{message_type as t, Extensions};
use crate::read::Reader;
use crate::write::Out;

pub(crate) const TRACING_ID: u8 = 1;
pub(crate) const TTL: u8 = 2;
pub(crate) const PROTOCOL: u8 = 3;
pub(crate) const FILTER: u8 = 4;
pub(crate) const DATA_MESSAGE_TYPE: u8 = 5;
pub(crate) const IS_PARTIAL: u8 = 6;

/// A set of extension keys (bit n = key n).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Keys(u8);

impl Keys {
    pub(crate) const NONE: Keys = Keys(0);

    const fn of(keys: &[u8]) -> Keys {
        let mut bits = 0;
        let mut i = 0;
        while i < keys.len() {
            bits |= 1 << keys[i];
            i += 1;
        }
        Keys(bits)
    }

    pub(crate) fn has(self, key: u8) -> bool {
        key < 8 && self.0 & (1 << key) != 0
    }

    pub(crate) fn without(self, key: u8) -> Keys {
        Keys(self.0 & !(1 << key))
    }

    /// The keys a message type carries (the "set on" column of §1.3). Types not listed
    /// carry none: HandshakeRequest/Response, Ack, ServiceEvent, AccessKey*, ServiceMapping,
    /// ConnectionReconnect, ConnectionFlowControl.
    pub(crate) fn for_type(type_id: i32) -> Keys {
        const TRACING: Keys = Keys::of(&[TRACING_ID]);
        match type_id {
            t::OPEN_CONNECTION | t::CLIENT_COMPLETION => Keys::of(&[TRACING_ID, PROTOCOL]),
            t::CONNECTION_DATA => Keys::of(&[TRACING_ID, DATA_MESSAGE_TYPE, IS_PARTIAL]),
            t::MULTI_CONNECTION_DATA
            | t::USER_DATA
            | t::MULTI_USER_DATA
            | t::BROADCAST_DATA
            | t::GROUP_BROADCAST_DATA
            | t::MULTI_GROUP_BROADCAST_DATA => Keys::of(&[TRACING_ID, FILTER]),
            t::USER_JOIN_GROUP | t::USER_JOIN_GROUP_WITH_ACK => Keys::of(&[TRACING_ID, TTL]),
            t::CLOSE_CONNECTION
            | t::JOIN_GROUP
            | t::LEAVE_GROUP
            | t::USER_LEAVE_GROUP
            | t::JOIN_GROUP_WITH_ACK
            | t::LEAVE_GROUP_WITH_ACK
            | t::CHECK_USER_IN_GROUP_WITH_ACK
            | t::CHECK_GROUP_EXISTENCE_WITH_ACK
            | t::CHECK_CONNECTION_EXISTENCE_WITH_ACK
            | t::CHECK_USER_EXISTENCE_WITH_ACK
            | t::USER_LEAVE_GROUP_WITH_ACK
            | t::CLOSE_CONNECTION_WITH_ACK
            | t::CLOSE_CONNECTIONS_WITH_ACK
            | t::CLOSE_USER_CONNECTIONS_WITH_ACK
            | t::CLOSE_GROUP_CONNECTIONS_WITH_ACK
            | t::CLIENT_INVOCATION
            | t::ERROR_COMPLETION
            | t::GROUP_MEMBER_QUERY => TRACING,
            _ => Keys::NONE,
        }
    }
}

/// Writes the map: keys in order 1..=6, only those set and carried by `keys`.
/// `protocol` replaces `ext.protocol` (ClientCompletion writes its explicit field there).
pub(crate) fn write<W: io::Write>(
    out: &mut Out<'_, W>,
    ext: &Extensions,
    keys: Keys,
    protocol: Option<&str>,
) {
    let tracing_id = ext.tracing_id.filter(|_| keys.has(TRACING_ID));
    let ttl = ext.ttl.filter(|_| keys.has(TTL));
    let protocol = protocol.filter(|_| keys.has(PROTOCOL));
    let filter = ext.filter.as_deref().filter(|_| keys.has(FILTER));
    let data_message_type = ext
        .data_message_type
        .filter(|_| keys.has(DATA_MESSAGE_TYPE));
    let is_partial = ext.is_partial.filter(|_| keys.has(IS_PARTIAL));

    let count = usize::from(tracing_id.is_some())
        + usize::from(ttl.is_some())
        + usize::from(protocol.is_some())
        + usize::from(filter.is_some())
        + usize::from(data_message_type.is_some())
        + usize::from(is_partial.is_some());
    out.map(count);
    if let Some(v) = tracing_id {
        out.int(i32::from(TRACING_ID));
        out.uint(v);
    }
    if let Some(v) = ttl {
        out.int(i32::from(TTL));
        out.int(v);
    }
    if let Some(v) = protocol {
        out.int(i32::from(PROTOCOL));
        out.str(v);
    }
    if let Some(v) = filter {
        out.int(i32::from(FILTER));
        out.str(v);
    }
    if let Some(v) = data_message_type {
        out.int(i32::from(DATA_MESSAGE_TYPE));
        out.int(v);
    }
    if let Some(v) = is_partial {
        out.int(i32::from(IS_PARTIAL));
        out.bool(v);
    }
}

/// Reads the map, keeping the keys in `keys`. Everything else (other keys, non-int keys,
/// values of an unusable type) is skipped, so a newer peer's additions never fail a message.
pub(crate) fn read(r: &mut Reader<'_>, keys: Keys) -> Result<Extensions, FieldProblem> {
    let count = r.map_len()?;
    let mut ext = Extensions::default();
    for _ in 0..count {
        let key = r.or_skip(Reader::i32)?;
        let key = match key.and_then(|k| u8::try_from(k).ok()) {
            Some(k) if keys.has(k) => k,
            _ => {
                r.skip()?;
                continue;
            }
        };
        // A later entry for the same key wins; a value of an unusable type is skipped.
        match key {
            TRACING_ID => set(&mut ext.tracing_id, r.or_skip(Reader::u64)?),
            TTL => set(&mut ext.ttl, r.or_skip(Reader::i32)?),
            PROTOCOL => set(&mut ext.protocol, r.or_skip(Reader::string)?),
            FILTER => set(&mut ext.filter, r.or_skip(Reader::string)?),
            DATA_MESSAGE_TYPE => set(&mut ext.data_message_type, r.or_skip(Reader::i32)?),
            IS_PARTIAL => set(&mut ext.is_partial, r.or_skip(Reader::bool)?),
            _ => r.skip()?,
        }
    }
    Ok(ext)
}

fn set<T>(slot: &mut Option<T>, value: Option<T>) {
    if value.is_some() {
        *slot = value;
    }
}
