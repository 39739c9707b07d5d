//! [`ServiceMessage`] → bytes, in the SDK writer's layouts (§1.5 "current writer length").

use std::io;

use bytes::{BufMut, Bytes, BytesMut};

use crate::ext::{self, Keys};
use crate::framing::write_prefix;
use crate::message::{Extensions, ServiceMessage};
use crate::write::{Counter, Out};

/// Appends the framed message (VarInt length prefix + body) to `out`.
///
/// The body is sized first (a cheap pass that copies nothing) and then written straight
/// into `out` behind its prefix, so payloads are copied exactly once.
pub fn encode(msg: &ServiceMessage, out: &mut BytesMut) {
    let len = encoded_len(msg);
    out.reserve(5 + len);
    write_prefix(len, out);
    let start = out.len();
    write_body(msg, &mut (&mut *out).writer());
    debug_assert_eq!(out.len() - start, len, "sizing pass and writing pass agree");
}

/// Appends the body only (no length prefix), as the test vectors' `hex` shows it.
pub fn encode_body(msg: &ServiceMessage, out: &mut Vec<u8>) {
    write_body(msg, out);
}

/// The framed message as a new buffer.
pub fn encoded(msg: &ServiceMessage) -> Bytes {
    let mut out = BytesMut::new();
    encode(msg, &mut out);
    out.freeze()
}

/// The body length in bytes (without the prefix).
pub fn encoded_len(msg: &ServiceMessage) -> usize {
    let mut counter = Counter::default();
    write_body(msg, &mut counter);
    counter.0
}

fn write_ext<W: io::Write>(o: &mut Out<'_, W>, ext: &Extensions, keys: Keys) {
    ext::write(o, ext, keys, ext.protocol.as_deref());
}

fn write_body<W: io::Write>(msg: &ServiceMessage, w: &mut W) {
    use ServiceMessage as S;
    let o = &mut Out(w);
    let type_id = msg.type_id();
    let keys = Keys::for_type(type_id);
    // Writes the array header and the type id.
    let head = |o: &mut Out<'_, W>, len: usize| {
        o.array(len);
        o.int(type_id);
    };
    match msg {
        S::HandshakeRequest(m) => {
            head(
                o,
                if m.allow_stateful_reconnects.is_some() {
                    7
                } else {
                    6
                },
            );
            o.int(m.version);
            o.int(m.connection_type);
            o.str(&m.target);
            o.int(m.migration_level);
            write_ext(o, &m.ext, keys);
            if let Some(allow) = m.allow_stateful_reconnects {
                o.bool(allow);
            }
        }
        S::HandshakeResponse(m) => {
            head(o, 4);
            o.str(&m.error_message);
            write_ext(o, &m.ext, keys);
            o.opt_str(m.connection_id.as_deref());
        }
        S::Ping(m) => {
            head(o, 1 + m.values.len());
            for v in &m.values {
                o.str(v);
            }
        }
        S::OpenConnection(m) => {
            head(o, 6);
            o.str(&m.connection_id);
            o.claims(&m.claims);
            o.headers(&m.headers);
            o.opt_str(m.query_string.as_deref());
            write_ext(o, &m.ext, keys);
        }
        S::CloseConnection(m) => {
            head(o, 5);
            o.str(&m.connection_id);
            o.str(&m.error_message);
            o.headers(&m.headers);
            write_ext(o, &m.ext, keys);
        }
        S::ConnectionData(m) => {
            head(o, 4);
            o.str(&m.connection_id);
            o.bin(&m.payload);
            write_ext(o, &m.ext, keys);
        }
        S::MultiConnectionData(m) => {
            head(o, 4);
            o.strings(&m.connection_list);
            o.payloads(&m.payloads);
            write_ext(o, &m.ext, keys);
        }
        S::UserData(m) => {
            head(o, 4);
            o.str(&m.user_id);
            o.payloads(&m.payloads);
            write_ext(o, &m.ext, keys);
        }
        S::MultiUserData(m) => {
            head(o, 4);
            o.strings(&m.user_list);
            o.payloads(&m.payloads);
            write_ext(o, &m.ext, keys);
        }
        S::BroadcastData(m) => {
            head(o, 4);
            o.strings(&m.excluded_list);
            o.payloads(&m.payloads);
            write_ext(o, &m.ext, keys);
        }
        S::JoinGroup(m) => {
            head(o, 4);
            o.str(&m.connection_id);
            o.str(&m.group_name);
            write_ext(o, &m.ext, keys);
        }
        S::LeaveGroup(m) => {
            head(o, 4);
            o.str(&m.connection_id);
            o.opt_str(m.group_name.as_deref());
            write_ext(o, &m.ext, keys);
        }
        S::GroupBroadcastData(m) => {
            head(o, 7);
            o.str(&m.group_name);
            o.strings(&m.excluded_list);
            o.payloads(&m.payloads);
            write_ext(o, &m.ext, keys);
            o.strings(&m.excluded_user_list);
            o.opt_str(m.caller_user_id.as_deref());
        }
        S::MultiGroupBroadcastData(m) => {
            head(o, 4);
            o.strings(&m.group_list);
            o.payloads(&m.payloads);
            write_ext(o, &m.ext, keys);
        }
        S::ServiceError(m) => {
            head(o, 2);
            o.str(&m.error_message);
        }
        S::UserJoinGroup(m) => {
            head(o, 4);
            o.str(&m.user_id);
            o.str(&m.group_name);
            write_ext(o, &m.ext, keys);
        }
        S::UserLeaveGroup(m) => {
            head(o, 4);
            o.str(&m.user_id);
            o.opt_str(m.group_name.as_deref());
            write_ext(o, &m.ext, keys);
        }
        S::JoinGroupWithAck(m) => {
            head(o, 5);
            o.str(&m.connection_id);
            o.str(&m.group_name);
            o.int(m.ack_id);
            write_ext(o, &m.ext, keys);
        }
        S::LeaveGroupWithAck(m) => {
            head(o, 5);
            o.str(&m.connection_id);
            o.opt_str(m.group_name.as_deref());
            o.int(m.ack_id);
            write_ext(o, &m.ext, keys);
        }
        S::Ack(m) => {
            head(o, if m.payload.is_some() { 6 } else { 5 });
            o.int(m.ack_id);
            o.int(m.status);
            o.str(&m.message);
            write_ext(o, &m.ext, keys);
            if let Some(payload) = &m.payload {
                o.bin(payload);
            }
        }
        S::CheckUserInGroupWithAck(m) => {
            head(o, 5);
            o.str(&m.user_id);
            o.str(&m.group_name);
            o.int(m.ack_id);
            write_ext(o, &m.ext, keys);
        }
        S::ServiceEvent(m) => {
            head(o, 6);
            o.int(m.object_type);
            o.str(&m.id);
            o.int(m.kind);
            o.str(&m.message);
            write_ext(o, &m.ext, keys);
        }
        S::CheckGroupExistenceWithAck(m) => {
            head(o, 4);
            o.str(&m.group_name);
            o.int(m.ack_id);
            write_ext(o, &m.ext, keys);
        }
        S::CheckConnectionExistenceWithAck(m) => {
            head(o, 4);
            o.str(&m.connection_id);
            o.int(m.ack_id);
            write_ext(o, &m.ext, keys);
        }
        S::CheckUserExistenceWithAck(m) => {
            head(o, 4);
            o.str(&m.user_id);
            o.int(m.ack_id);
            write_ext(o, &m.ext, keys);
        }
        S::UserJoinGroupWithAck(m) => {
            head(o, 5);
            o.str(&m.user_id);
            o.str(&m.group_name);
            o.int(m.ack_id);
            write_ext(o, &m.ext, keys);
        }
        S::UserLeaveGroupWithAck(m) => {
            head(o, 5);
            o.str(&m.user_id);
            o.opt_str(m.group_name.as_deref());
            o.int(m.ack_id);
            write_ext(o, &m.ext, keys);
        }
        S::AccessKeyRequest(m) => {
            head(o, 4);
            o.str(&m.token);
            o.opt_str(m.kid.as_deref());
            write_ext(o, &m.ext, keys);
        }
        S::AccessKeyResponse(m) => {
            head(o, 6);
            o.opt_str(m.kid.as_deref());
            o.opt_str(m.access_key.as_deref());
            o.opt_str(m.error_type.as_deref());
            o.opt_str(m.error_message.as_deref());
            write_ext(o, &m.ext, keys);
        }
        S::CloseConnectionWithAck(m) => {
            head(o, 5);
            o.str(&m.connection_id);
            o.opt_str(m.reason.as_deref());
            o.int(m.ack_id);
            write_ext(o, &m.ext, keys);
        }
        S::CloseConnectionsWithAck(m) => {
            head(o, 5);
            o.opt_str(m.reason.as_deref());
            o.int(m.ack_id);
            o.strings(&m.excluded_list);
            write_ext(o, &m.ext, keys);
        }
        S::CloseUserConnectionsWithAck(m) => {
            head(o, 6);
            o.str(&m.user_id);
            o.opt_str(m.reason.as_deref());
            o.int(m.ack_id);
            o.strings(&m.excluded_list);
            write_ext(o, &m.ext, keys);
        }
        S::CloseGroupConnectionsWithAck(m) => {
            head(o, 6);
            o.str(&m.group_name);
            o.opt_str(m.reason.as_deref());
            o.int(m.ack_id);
            o.strings(&m.excluded_list);
            write_ext(o, &m.ext, keys);
        }
        S::ClientInvocation(m) => {
            head(o, 6);
            o.str(&m.invocation_id);
            o.str(&m.connection_id);
            o.str(&m.caller_server_id);
            o.payloads(&m.payloads);
            write_ext(o, &m.ext, keys);
        }
        S::ClientCompletion(m) => {
            head(o, 7);
            o.str(&m.invocation_id);
            o.str(&m.connection_id);
            o.str(&m.caller_server_id);
            o.str(&m.protocol);
            o.bin(&m.payload);
            // The SDK repeats the protocol under ext key 3.
            ext::write(o, &m.ext, keys, Some(&m.protocol));
        }
        S::ErrorCompletion(m) => {
            head(o, 6);
            o.str(&m.invocation_id);
            o.str(&m.connection_id);
            o.str(&m.caller_server_id);
            o.str(&m.error);
            write_ext(o, &m.ext, keys);
        }
        S::ServiceMapping(m) => {
            head(o, 5);
            o.str(&m.invocation_id);
            o.str(&m.connection_id);
            o.str(&m.instance_id);
            write_ext(o, &m.ext, keys);
        }
        S::ConnectionReconnect(m) => {
            head(o, 3);
            o.str(&m.connection_id);
            write_ext(o, &m.ext, keys);
        }
        S::ConnectionFlowControl(m) => {
            head(o, 5);
            o.str(&m.connection_id);
            o.fixed_i32(m.connection_type);
            o.fixed_i32(m.operation);
            write_ext(o, &m.ext, keys);
        }
        S::GroupMemberQuery(m) => {
            head(o, 6);
            write_ext(o, &m.ext, keys);
            o.str(&m.group_name);
            o.int(m.ack_id);
            o.int(m.max);
            o.opt_str(m.continuation_token.as_deref());
        }
        S::Unknown { .. } => head(o, 1),
    }
}
