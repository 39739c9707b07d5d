//! [`ServiceMessage`] → bytes, in the SDK writer's layouts (§1.5 "current writer length").

use std::io;

use bytes::{BufMut, Bytes, BytesMut};

use crate::ext::{self, Keys};
use crate::framing::write_prefix;
use crate::message::message_type as t;
use crate::message::*;
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
    match msg {
        S::HandshakeRequest(m) => handshake_request(o, m, keys),
        S::HandshakeResponse(m) => handshake_response(o, m, keys),
        S::Ping(m) => ping(o, m),
        S::OpenConnection(m) => open_connection(o, m, keys),
        S::CloseConnection(m) => close_connection(o, m, keys),
        S::ConnectionData(m) => connection_data(o, m, keys),
        S::MultiConnectionData(m) => multi_connection_data(o, m, keys),
        S::UserData(m) => user_data(o, m, keys),
        S::MultiUserData(m) => multi_user_data(o, m, keys),
        S::BroadcastData(m) => broadcast_data(o, m, keys),
        S::JoinGroup(m) => join_group(o, m, keys),
        S::LeaveGroup(m) => leave_group(o, m, keys),
        S::GroupBroadcastData(m) => group_broadcast_data(o, m, keys),
        S::MultiGroupBroadcastData(m) => multi_group_broadcast_data(o, m, keys),
        S::ServiceError(m) => service_error(o, m),
        S::UserJoinGroup(m) => user_join_group(o, m, keys),
        S::UserLeaveGroup(m) => user_leave_group(o, m, keys),
        S::JoinGroupWithAck(m) => join_group_with_ack(o, m, keys),
        S::LeaveGroupWithAck(m) => leave_group_with_ack(o, m, keys),
        S::Ack(m) => ack(o, m, keys),
        S::CheckUserInGroupWithAck(m) => check_user_in_group_with_ack(o, m, keys),
        S::ServiceEvent(m) => service_event(o, m, keys),
        S::CheckGroupExistenceWithAck(m) => check_group_existence_with_ack(o, m, keys),
        S::CheckConnectionExistenceWithAck(m) => check_connection_existence_with_ack(o, m, keys),
        S::CheckUserExistenceWithAck(m) => check_user_existence_with_ack(o, m, keys),
        S::UserJoinGroupWithAck(m) => user_join_group_with_ack(o, m, keys),
        S::UserLeaveGroupWithAck(m) => user_leave_group_with_ack(o, m, keys),
        S::AccessKeyRequest(m) => access_key_request(o, m, keys),
        S::AccessKeyResponse(m) => access_key_response(o, m, keys),
        S::CloseConnectionWithAck(m) => close_connection_with_ack(o, m, keys),
        S::CloseConnectionsWithAck(m) => close_connections_with_ack(o, m, keys),
        S::CloseUserConnectionsWithAck(m) => close_user_connections_with_ack(o, m, keys),
        S::CloseGroupConnectionsWithAck(m) => close_group_connections_with_ack(o, m, keys),
        S::ClientInvocation(m) => client_invocation(o, m, keys),
        S::ClientCompletion(m) => client_completion(o, m, keys),
        S::ErrorCompletion(m) => error_completion(o, m, keys),
        S::ServiceMapping(m) => service_mapping(o, m, keys),
        S::ConnectionReconnect(m) => connection_reconnect(o, m, keys),
        S::ConnectionFlowControl(m) => connection_flow_control(o, m, keys),
        S::GroupMemberQuery(m) => group_member_query(o, m, keys),
        S::Unknown { .. } => o.head(type_id, 1),
    }
}

// ---- The server connection itself: handshake, keep-alive, errors and events, access keys -----

fn handshake_request<W: io::Write>(o: &mut Out<'_, W>, m: &HandshakeRequest, keys: Keys) {
    o.head(
        t::HANDSHAKE_REQUEST,
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

fn handshake_response<W: io::Write>(o: &mut Out<'_, W>, m: &HandshakeResponse, keys: Keys) {
    o.head(t::HANDSHAKE_RESPONSE, 4);
    o.str(&m.error_message);
    write_ext(o, &m.ext, keys);
    o.opt_str(m.connection_id.as_deref());
}

fn ping<W: io::Write>(o: &mut Out<'_, W>, m: &Ping) {
    o.head(t::PING, 1 + m.values.len());
    for v in &m.values {
        o.str(v);
    }
}

fn service_error<W: io::Write>(o: &mut Out<'_, W>, m: &ServiceError) {
    o.head(t::SERVICE_ERROR, 2);
    o.str(&m.error_message);
}

fn service_event<W: io::Write>(o: &mut Out<'_, W>, m: &ServiceEvent, keys: Keys) {
    o.head(t::SERVICE_EVENT, 6);
    o.int(m.object_type);
    o.str(&m.id);
    o.int(m.kind);
    o.str(&m.message);
    write_ext(o, &m.ext, keys);
}

fn access_key_request<W: io::Write>(o: &mut Out<'_, W>, m: &AccessKeyRequest, keys: Keys) {
    o.head(t::ACCESS_KEY_REQUEST, 4);
    o.str(&m.token);
    o.opt_str(m.kid.as_deref());
    write_ext(o, &m.ext, keys);
}

fn access_key_response<W: io::Write>(o: &mut Out<'_, W>, m: &AccessKeyResponse, keys: Keys) {
    o.head(t::ACCESS_KEY_RESPONSE, 6);
    o.opt_str(m.kid.as_deref());
    o.opt_str(m.access_key.as_deref());
    o.opt_str(m.error_type.as_deref());
    o.opt_str(m.error_message.as_deref());
    write_ext(o, &m.ext, keys);
}

// ---- Client connections: open, close, reconnect, flow control, closing them with an ack ------

fn open_connection<W: io::Write>(o: &mut Out<'_, W>, m: &OpenConnection, keys: Keys) {
    o.head(t::OPEN_CONNECTION, 6);
    o.str(&m.connection_id);
    o.claims(&m.claims);
    o.headers(&m.headers);
    o.opt_str(m.query_string.as_deref());
    write_ext(o, &m.ext, keys);
}

fn close_connection<W: io::Write>(o: &mut Out<'_, W>, m: &CloseConnection, keys: Keys) {
    o.head(t::CLOSE_CONNECTION, 5);
    o.str(&m.connection_id);
    o.str(&m.error_message);
    o.headers(&m.headers);
    write_ext(o, &m.ext, keys);
}

fn connection_reconnect<W: io::Write>(o: &mut Out<'_, W>, m: &ConnectionReconnect, keys: Keys) {
    o.head(t::CONNECTION_RECONNECT, 3);
    o.str(&m.connection_id);
    write_ext(o, &m.ext, keys);
}

fn connection_flow_control<W: io::Write>(
    o: &mut Out<'_, W>,
    m: &ConnectionFlowControl,
    keys: Keys,
) {
    o.head(t::CONNECTION_FLOW_CONTROL, 5);
    o.str(&m.connection_id);
    o.fixed_i32(m.connection_type);
    o.fixed_i32(m.operation);
    write_ext(o, &m.ext, keys);
}

fn close_connection_with_ack<W: io::Write>(
    o: &mut Out<'_, W>,
    m: &CloseConnectionWithAck,
    keys: Keys,
) {
    o.head(t::CLOSE_CONNECTION_WITH_ACK, 5);
    o.str(&m.connection_id);
    o.opt_str(m.reason.as_deref());
    o.int(m.ack_id);
    write_ext(o, &m.ext, keys);
}

fn close_connections_with_ack<W: io::Write>(
    o: &mut Out<'_, W>,
    m: &CloseConnectionsWithAck,
    keys: Keys,
) {
    o.head(t::CLOSE_CONNECTIONS_WITH_ACK, 5);
    o.opt_str(m.reason.as_deref());
    o.int(m.ack_id);
    o.strings(&m.excluded_list);
    write_ext(o, &m.ext, keys);
}

fn close_user_connections_with_ack<W: io::Write>(
    o: &mut Out<'_, W>,
    m: &CloseUserConnectionsWithAck,
    keys: Keys,
) {
    o.head(t::CLOSE_USER_CONNECTIONS_WITH_ACK, 6);
    o.str(&m.user_id);
    o.opt_str(m.reason.as_deref());
    o.int(m.ack_id);
    o.strings(&m.excluded_list);
    write_ext(o, &m.ext, keys);
}

fn close_group_connections_with_ack<W: io::Write>(
    o: &mut Out<'_, W>,
    m: &CloseGroupConnectionsWithAck,
    keys: Keys,
) {
    o.head(t::CLOSE_GROUP_CONNECTIONS_WITH_ACK, 6);
    o.str(&m.group_name);
    o.opt_str(m.reason.as_deref());
    o.int(m.ack_id);
    o.strings(&m.excluded_list);
    write_ext(o, &m.ext, keys);
}

// ---- Data: hub messages to connections, users, groups or everyone (the hot path) -------------

fn connection_data<W: io::Write>(o: &mut Out<'_, W>, m: &ConnectionData, keys: Keys) {
    o.head(t::CONNECTION_DATA, 4);
    o.str(&m.connection_id);
    o.bin(&m.payload);
    write_ext(o, &m.ext, keys);
}

fn multi_connection_data<W: io::Write>(o: &mut Out<'_, W>, m: &MultiConnectionData, keys: Keys) {
    o.head(t::MULTI_CONNECTION_DATA, 4);
    o.strings(&m.connection_list);
    o.payloads(&m.payloads);
    write_ext(o, &m.ext, keys);
}

fn user_data<W: io::Write>(o: &mut Out<'_, W>, m: &UserData, keys: Keys) {
    o.head(t::USER_DATA, 4);
    o.str(&m.user_id);
    o.payloads(&m.payloads);
    write_ext(o, &m.ext, keys);
}

fn multi_user_data<W: io::Write>(o: &mut Out<'_, W>, m: &MultiUserData, keys: Keys) {
    o.head(t::MULTI_USER_DATA, 4);
    o.strings(&m.user_list);
    o.payloads(&m.payloads);
    write_ext(o, &m.ext, keys);
}

fn broadcast_data<W: io::Write>(o: &mut Out<'_, W>, m: &BroadcastData, keys: Keys) {
    o.head(t::BROADCAST_DATA, 4);
    o.strings(&m.excluded_list);
    o.payloads(&m.payloads);
    write_ext(o, &m.ext, keys);
}

fn group_broadcast_data<W: io::Write>(o: &mut Out<'_, W>, m: &GroupBroadcastData, keys: Keys) {
    o.head(t::GROUP_BROADCAST_DATA, 7);
    o.str(&m.group_name);
    o.strings(&m.excluded_list);
    o.payloads(&m.payloads);
    write_ext(o, &m.ext, keys);
    o.strings(&m.excluded_user_list);
    o.opt_str(m.caller_user_id.as_deref());
}

fn multi_group_broadcast_data<W: io::Write>(
    o: &mut Out<'_, W>,
    m: &MultiGroupBroadcastData,
    keys: Keys,
) {
    o.head(t::MULTI_GROUP_BROADCAST_DATA, 4);
    o.strings(&m.group_list);
    o.payloads(&m.payloads);
    write_ext(o, &m.ext, keys);
}

// ---- Groups: membership of connections and users, with or without an ack; member queries -----

fn join_group<W: io::Write>(o: &mut Out<'_, W>, m: &JoinGroup, keys: Keys) {
    o.head(t::JOIN_GROUP, 4);
    o.str(&m.connection_id);
    o.str(&m.group_name);
    write_ext(o, &m.ext, keys);
}

fn leave_group<W: io::Write>(o: &mut Out<'_, W>, m: &LeaveGroup, keys: Keys) {
    o.head(t::LEAVE_GROUP, 4);
    o.str(&m.connection_id);
    o.opt_str(m.group_name.as_deref());
    write_ext(o, &m.ext, keys);
}

fn user_join_group<W: io::Write>(o: &mut Out<'_, W>, m: &UserJoinGroup, keys: Keys) {
    o.head(t::USER_JOIN_GROUP, 4);
    o.str(&m.user_id);
    o.str(&m.group_name);
    write_ext(o, &m.ext, keys);
}

fn user_leave_group<W: io::Write>(o: &mut Out<'_, W>, m: &UserLeaveGroup, keys: Keys) {
    o.head(t::USER_LEAVE_GROUP, 4);
    o.str(&m.user_id);
    o.opt_str(m.group_name.as_deref());
    write_ext(o, &m.ext, keys);
}

fn join_group_with_ack<W: io::Write>(o: &mut Out<'_, W>, m: &JoinGroupWithAck, keys: Keys) {
    o.head(t::JOIN_GROUP_WITH_ACK, 5);
    o.str(&m.connection_id);
    o.str(&m.group_name);
    o.int(m.ack_id);
    write_ext(o, &m.ext, keys);
}

fn leave_group_with_ack<W: io::Write>(o: &mut Out<'_, W>, m: &LeaveGroupWithAck, keys: Keys) {
    o.head(t::LEAVE_GROUP_WITH_ACK, 5);
    o.str(&m.connection_id);
    o.opt_str(m.group_name.as_deref());
    o.int(m.ack_id);
    write_ext(o, &m.ext, keys);
}

fn user_join_group_with_ack<W: io::Write>(
    o: &mut Out<'_, W>,
    m: &UserJoinGroupWithAck,
    keys: Keys,
) {
    o.head(t::USER_JOIN_GROUP_WITH_ACK, 5);
    o.str(&m.user_id);
    o.str(&m.group_name);
    o.int(m.ack_id);
    write_ext(o, &m.ext, keys);
}

fn user_leave_group_with_ack<W: io::Write>(
    o: &mut Out<'_, W>,
    m: &UserLeaveGroupWithAck,
    keys: Keys,
) {
    o.head(t::USER_LEAVE_GROUP_WITH_ACK, 5);
    o.str(&m.user_id);
    o.opt_str(m.group_name.as_deref());
    o.int(m.ack_id);
    write_ext(o, &m.ext, keys);
}

fn group_member_query<W: io::Write>(o: &mut Out<'_, W>, m: &GroupMemberQuery, keys: Keys) {
    o.head(t::GROUP_MEMBER_QUERY, 6);
    write_ext(o, &m.ext, keys);
    o.str(&m.group_name);
    o.int(m.ack_id);
    o.int(m.max);
    o.opt_str(m.continuation_token.as_deref());
}

// ---- Acks and existence checks ---------------------------------------------------------------

fn ack<W: io::Write>(o: &mut Out<'_, W>, m: &Ack, keys: Keys) {
    o.head(t::ACK, if m.payload.is_some() { 6 } else { 5 });
    o.int(m.ack_id);
    o.int(m.status);
    o.str(&m.message);
    write_ext(o, &m.ext, keys);
    if let Some(payload) = &m.payload {
        o.bin(payload);
    }
}

fn check_user_in_group_with_ack<W: io::Write>(
    o: &mut Out<'_, W>,
    m: &CheckUserInGroupWithAck,
    keys: Keys,
) {
    o.head(t::CHECK_USER_IN_GROUP_WITH_ACK, 5);
    o.str(&m.user_id);
    o.str(&m.group_name);
    o.int(m.ack_id);
    write_ext(o, &m.ext, keys);
}

fn check_group_existence_with_ack<W: io::Write>(
    o: &mut Out<'_, W>,
    m: &CheckGroupExistenceWithAck,
    keys: Keys,
) {
    o.head(t::CHECK_GROUP_EXISTENCE_WITH_ACK, 4);
    o.str(&m.group_name);
    o.int(m.ack_id);
    write_ext(o, &m.ext, keys);
}

fn check_connection_existence_with_ack<W: io::Write>(
    o: &mut Out<'_, W>,
    m: &CheckConnectionExistenceWithAck,
    keys: Keys,
) {
    o.head(t::CHECK_CONNECTION_EXISTENCE_WITH_ACK, 4);
    o.str(&m.connection_id);
    o.int(m.ack_id);
    write_ext(o, &m.ext, keys);
}

fn check_user_existence_with_ack<W: io::Write>(
    o: &mut Out<'_, W>,
    m: &CheckUserExistenceWithAck,
    keys: Keys,
) {
    o.head(t::CHECK_USER_EXISTENCE_WITH_ACK, 4);
    o.str(&m.user_id);
    o.int(m.ack_id);
    write_ext(o, &m.ext, keys);
}

// ---- Client invocations: a server's call to a client, its answer, where it is routed ---------

fn client_invocation<W: io::Write>(o: &mut Out<'_, W>, m: &ClientInvocation, keys: Keys) {
    o.head(t::CLIENT_INVOCATION, 6);
    o.str(&m.invocation_id);
    o.str(&m.connection_id);
    o.str(&m.caller_server_id);
    o.payloads(&m.payloads);
    write_ext(o, &m.ext, keys);
}

fn client_completion<W: io::Write>(o: &mut Out<'_, W>, m: &ClientCompletion, keys: Keys) {
    o.head(t::CLIENT_COMPLETION, 7);
    o.str(&m.invocation_id);
    o.str(&m.connection_id);
    o.str(&m.caller_server_id);
    o.str(&m.protocol);
    o.bin(&m.payload);
    // The SDK repeats the protocol under ext key 3.
    ext::write(o, &m.ext, keys, Some(&m.protocol));
}

fn error_completion<W: io::Write>(o: &mut Out<'_, W>, m: &ErrorCompletion, keys: Keys) {
    o.head(t::ERROR_COMPLETION, 6);
    o.str(&m.invocation_id);
    o.str(&m.connection_id);
    o.str(&m.caller_server_id);
    o.str(&m.error);
    write_ext(o, &m.ext, keys);
}

fn service_mapping<W: io::Write>(o: &mut Out<'_, W>, m: &ServiceMapping, keys: Keys) {
    o.head(t::SERVICE_MAPPING, 5);
    o.str(&m.invocation_id);
    o.str(&m.connection_id);
    o.str(&m.instance_id);
    write_ext(o, &m.ext, keys);
}
