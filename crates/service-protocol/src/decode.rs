//! Body → [`ServiceMessage`], accepting every older (shorter) layout of §1.5 and ignoring
//! trailing elements a newer peer may add.

use bytes::Bytes;

use crate::error::{DecodeError, FieldProblem};
use crate::ext::{self, Keys, PROTOCOL};
use crate::message::*;
use crate::read::{self, capacity, Reader};

use ServiceMessage as S;

/// Decodes one message body (as returned by [`FrameReader::next_body`](crate::FrameReader)).
///
/// Binaries (payloads) are zero-copy slices of `body`. An unknown type id gives
/// `Ok(ServiceMessage::Unknown { type_id })` without looking at the rest, so that newer
/// message types can be ignored like the SDK does. Bytes after the array are ignored too.
pub fn decode(body: &Bytes) -> Result<ServiceMessage, DecodeError> {
    if body.is_empty() {
        return Err(DecodeError::Empty);
    }
    let mut r = Reader::new(body);
    let len = r.array_len().map_err(|_| DecodeError::NotAnArray)?;
    if len == 0 {
        return Err(DecodeError::EmptyArray);
    }
    let type_id = r.i32().map_err(|_| DecodeError::InvalidTypeId)?;
    let name = type_name(type_id);
    if name == "Unknown" {
        return Ok(ServiceMessage::Unknown { type_id });
    }
    let m = &mut Fields {
        r,
        type_id,
        name,
        len,
        read: 1,
        keys: Keys::for_type(type_id),
    };
    use message_type as t;
    match type_id {
        t::HANDSHAKE_REQUEST => handshake_request(m),
        t::HANDSHAKE_RESPONSE => handshake_response(m),
        t::PING => ping(m),
        t::OPEN_CONNECTION => open_connection(m),
        t::CLOSE_CONNECTION => close_connection(m),
        t::CONNECTION_DATA => connection_data(m),
        t::MULTI_CONNECTION_DATA => multi_connection_data(m),
        t::USER_DATA => user_data(m),
        t::MULTI_USER_DATA => multi_user_data(m),
        t::BROADCAST_DATA => broadcast_data(m),
        t::JOIN_GROUP => join_group(m),
        t::LEAVE_GROUP => leave_group(m),
        t::GROUP_BROADCAST_DATA => group_broadcast_data(m),
        t::MULTI_GROUP_BROADCAST_DATA => multi_group_broadcast_data(m),
        t::SERVICE_ERROR => service_error(m),
        t::USER_JOIN_GROUP => user_join_group(m),
        t::USER_LEAVE_GROUP => user_leave_group(m),
        t::JOIN_GROUP_WITH_ACK => join_group_with_ack(m),
        t::LEAVE_GROUP_WITH_ACK => leave_group_with_ack(m),
        t::ACK => ack(m),
        t::CHECK_USER_IN_GROUP_WITH_ACK => check_user_in_group_with_ack(m),
        t::SERVICE_EVENT => service_event(m),
        t::CHECK_GROUP_EXISTENCE_WITH_ACK => check_group_existence_with_ack(m),
        t::CHECK_CONNECTION_EXISTENCE_WITH_ACK => check_connection_existence_with_ack(m),
        t::CHECK_USER_EXISTENCE_WITH_ACK => check_user_existence_with_ack(m),
        t::USER_JOIN_GROUP_WITH_ACK => user_join_group_with_ack(m),
        t::USER_LEAVE_GROUP_WITH_ACK => user_leave_group_with_ack(m),
        t::ACCESS_KEY_REQUEST => access_key_request(m),
        t::ACCESS_KEY_RESPONSE => access_key_response(m),
        t::CLOSE_CONNECTION_WITH_ACK => close_connection_with_ack(m),
        t::CLOSE_CONNECTIONS_WITH_ACK => close_connections_with_ack(m),
        t::CLOSE_USER_CONNECTIONS_WITH_ACK => close_user_connections_with_ack(m),
        t::CLOSE_GROUP_CONNECTIONS_WITH_ACK => close_group_connections_with_ack(m),
        t::CLIENT_INVOCATION => client_invocation(m),
        t::CLIENT_COMPLETION => client_completion(m),
        t::ERROR_COMPLETION => error_completion(m),
        t::SERVICE_MAPPING => service_mapping(m),
        t::CONNECTION_RECONNECT => connection_reconnect(m),
        t::CONNECTION_FLOW_CONTROL => connection_flow_control(m),
        t::GROUP_MEMBER_QUERY => group_member_query(m),
        // type_name() knows exactly the ids matched above; this arm is never taken.
        _ => Ok(S::Unknown { type_id }),
    }
}

// ---- The server connection itself: handshake, keep-alive, errors and events, access keys -----

fn handshake_request(m: &mut Fields<'_>) -> Result<ServiceMessage, DecodeError> {
    m.require(2)?;
    Ok(S::HandshakeRequest(HandshakeRequest {
        version: m.i32("version")?,
        connection_type: m.opt(0, |m| m.i32("connectionType"))?,
        target: m.opt(String::new(), |m| m.text("target"))?,
        migration_level: m.opt(0, |m| m.i32("migrationLevel"))?,
        ext: m.opt_ext()?,
        allow_stateful_reconnects: m.opt(None, |m| {
            m.with("allowStatefulReconnects", Reader::bool).map(Some)
        })?,
    }))
}

fn handshake_response(m: &mut Fields<'_>) -> Result<ServiceMessage, DecodeError> {
    m.require(2)?;
    Ok(S::HandshakeResponse(HandshakeResponse {
        error_message: m.text("errorMessage")?,
        ext: m.opt_ext()?,
        connection_id: m.opt(None, |m| m.opt_string("connectionId"))?,
    }))
}

fn ping(m: &mut Fields<'_>) -> Result<ServiceMessage, DecodeError> {
    let n = m.len - 1;
    let mut values = Vec::with_capacity(capacity(n, &m.r, 1));
    for _ in 0..n {
        // The SDK reads every element as a string that may be nil.
        values.push(m.text("messages")?);
    }
    Ok(S::Ping(Ping { values }))
}

fn service_error(m: &mut Fields<'_>) -> Result<ServiceMessage, DecodeError> {
    m.require(2)?;
    Ok(S::ServiceError(ServiceError {
        error_message: m.text("errorMessage")?,
    }))
}

fn service_event(m: &mut Fields<'_>) -> Result<ServiceMessage, DecodeError> {
    m.require(5)?;
    Ok(S::ServiceEvent(ServiceEvent {
        object_type: m.i32("objectType")?,
        id: m.text("id")?,
        kind: m.i32("kind")?,
        message: m.text("message")?,
        ext: m.opt_ext()?,
    }))
}

fn access_key_request(m: &mut Fields<'_>) -> Result<ServiceMessage, DecodeError> {
    m.require(2)?;
    Ok(S::AccessKeyRequest(AccessKeyRequest {
        token: m.text("token")?,
        kid: m.opt(None, |m| m.opt_string("kid"))?,
        ext: m.opt_ext()?,
    }))
}

fn access_key_response(m: &mut Fields<'_>) -> Result<ServiceMessage, DecodeError> {
    m.require(5)?;
    Ok(S::AccessKeyResponse(AccessKeyResponse {
        kid: m.opt_string("kid")?,
        access_key: m.opt_string("accessKey")?,
        error_type: m.opt_string("errorType")?,
        error_message: m.opt_string("errorMessage")?,
        ext: m.opt_ext()?,
    }))
}

// ---- Client connections: open, close, reconnect, flow control, and closing them with an ack ---

fn open_connection(m: &mut Fields<'_>) -> Result<ServiceMessage, DecodeError> {
    m.require(3)?;
    Ok(S::OpenConnection(OpenConnection {
        connection_id: m.string("connectionId")?,
        claims: m.claims()?,
        headers: m.opt(Vec::new(), Fields::headers)?,
        query_string: m.opt(None, |m| m.opt_string("queryString"))?,
        ext: m.opt_ext()?,
    }))
}

fn close_connection(m: &mut Fields<'_>) -> Result<ServiceMessage, DecodeError> {
    m.require(3)?;
    Ok(S::CloseConnection(CloseConnection {
        connection_id: m.string("connectionId")?,
        error_message: m.text("errorMessage")?,
        headers: m.opt(Vec::new(), Fields::headers)?,
        ext: m.opt_ext()?,
    }))
}

fn connection_reconnect(m: &mut Fields<'_>) -> Result<ServiceMessage, DecodeError> {
    m.require(2)?;
    Ok(S::ConnectionReconnect(ConnectionReconnect {
        connection_id: m.string("connectionId")?,
        ext: m.opt_ext()?,
    }))
}

fn connection_flow_control(m: &mut Fields<'_>) -> Result<ServiceMessage, DecodeError> {
    m.require(4)?;
    Ok(S::ConnectionFlowControl(ConnectionFlowControl {
        connection_id: m.string("connectionId")?,
        connection_type: m.i32("connectionType")?,
        operation: m.i32("operation")?,
        ext: m.opt_ext()?,
    }))
}

fn close_connection_with_ack(m: &mut Fields<'_>) -> Result<ServiceMessage, DecodeError> {
    m.require(4)?;
    Ok(S::CloseConnectionWithAck(CloseConnectionWithAck {
        connection_id: m.string("connectionId")?,
        reason: m.opt_string("reason")?,
        ack_id: m.i32("ackId")?,
        ext: m.opt_ext()?,
    }))
}

fn close_connections_with_ack(m: &mut Fields<'_>) -> Result<ServiceMessage, DecodeError> {
    m.require(4)?;
    Ok(S::CloseConnectionsWithAck(CloseConnectionsWithAck {
        reason: m.opt_string("reason")?,
        ack_id: m.i32("ackId")?,
        excluded_list: m.strings("excludedList")?,
        ext: m.opt_ext()?,
    }))
}

fn close_user_connections_with_ack(m: &mut Fields<'_>) -> Result<ServiceMessage, DecodeError> {
    m.require(5)?;
    Ok(S::CloseUserConnectionsWithAck(
        CloseUserConnectionsWithAck {
            user_id: m.string("userId")?,
            reason: m.opt_string("reason")?,
            ack_id: m.i32("ackId")?,
            excluded_list: m.strings("excludedList")?,
            ext: m.opt_ext()?,
        },
    ))
}

fn close_group_connections_with_ack(m: &mut Fields<'_>) -> Result<ServiceMessage, DecodeError> {
    m.require(5)?;
    Ok(S::CloseGroupConnectionsWithAck(
        CloseGroupConnectionsWithAck {
            group_name: m.string("groupName")?,
            reason: m.opt_string("reason")?,
            ack_id: m.i32("ackId")?,
            excluded_list: m.strings("excludedList")?,
            ext: m.opt_ext()?,
        },
    ))
}

// ---- Data: hub messages to connections, users, groups or everyone (the hot path) -------------

fn connection_data(m: &mut Fields<'_>) -> Result<ServiceMessage, DecodeError> {
    m.require(3)?;
    Ok(S::ConnectionData(ConnectionData {
        connection_id: m.string("connectionId")?,
        payload: m.with("payload", Reader::bin_or_nil)?,
        ext: m.opt_ext()?,
    }))
}

fn multi_connection_data(m: &mut Fields<'_>) -> Result<ServiceMessage, DecodeError> {
    m.require(3)?;
    Ok(S::MultiConnectionData(MultiConnectionData {
        connection_list: m.strings("connectionList")?,
        payloads: m.payloads()?,
        ext: m.opt_ext()?,
    }))
}

fn user_data(m: &mut Fields<'_>) -> Result<ServiceMessage, DecodeError> {
    m.require(3)?;
    Ok(S::UserData(UserData {
        user_id: m.string("userId")?,
        payloads: m.payloads()?,
        ext: m.opt_ext()?,
    }))
}

fn multi_user_data(m: &mut Fields<'_>) -> Result<ServiceMessage, DecodeError> {
    m.require(3)?;
    Ok(S::MultiUserData(MultiUserData {
        user_list: m.strings("userList")?,
        payloads: m.payloads()?,
        ext: m.opt_ext()?,
    }))
}

fn broadcast_data(m: &mut Fields<'_>) -> Result<ServiceMessage, DecodeError> {
    m.require(3)?;
    Ok(S::BroadcastData(BroadcastData {
        excluded_list: m.strings("excludedList")?,
        payloads: m.payloads()?,
        ext: m.opt_ext()?,
    }))
}

fn group_broadcast_data(m: &mut Fields<'_>) -> Result<ServiceMessage, DecodeError> {
    m.require(4)?;
    Ok(S::GroupBroadcastData(GroupBroadcastData {
        group_name: m.string("groupName")?,
        excluded_list: m.strings("excludedList")?,
        payloads: m.payloads()?,
        ext: m.opt_ext()?,
        excluded_user_list: m.opt(Vec::new(), |m| m.strings("excludedUserList"))?,
        caller_user_id: m.opt(None, |m| m.opt_string("callerUserId"))?,
    }))
}

fn multi_group_broadcast_data(m: &mut Fields<'_>) -> Result<ServiceMessage, DecodeError> {
    m.require(3)?;
    Ok(S::MultiGroupBroadcastData(MultiGroupBroadcastData {
        group_list: m.strings("groupList")?,
        payloads: m.payloads()?,
        ext: m.opt_ext()?,
    }))
}

// ---- Groups: membership of connections and users, with or without an ack, and member queries ---

fn join_group(m: &mut Fields<'_>) -> Result<ServiceMessage, DecodeError> {
    m.require(3)?;
    Ok(S::JoinGroup(JoinGroup {
        connection_id: m.string("connectionId")?,
        group_name: m.string("groupName")?,
        ext: m.opt_ext()?,
    }))
}

fn leave_group(m: &mut Fields<'_>) -> Result<ServiceMessage, DecodeError> {
    m.require(3)?;
    Ok(S::LeaveGroup(LeaveGroup {
        connection_id: m.string("connectionId")?,
        group_name: m.opt_string("groupName")?,
        ext: m.opt_ext()?,
    }))
}

fn user_join_group(m: &mut Fields<'_>) -> Result<ServiceMessage, DecodeError> {
    m.require(3)?;
    Ok(S::UserJoinGroup(UserJoinGroup {
        user_id: m.string("userId")?,
        group_name: m.string("groupName")?,
        ext: m.opt_ext()?,
    }))
}

fn user_leave_group(m: &mut Fields<'_>) -> Result<ServiceMessage, DecodeError> {
    m.require(3)?;
    Ok(S::UserLeaveGroup(UserLeaveGroup {
        user_id: m.string("userId")?,
        group_name: m.opt_string("groupName")?,
        ext: m.opt_ext()?,
    }))
}

fn join_group_with_ack(m: &mut Fields<'_>) -> Result<ServiceMessage, DecodeError> {
    m.require(4)?;
    Ok(S::JoinGroupWithAck(JoinGroupWithAck {
        connection_id: m.string("connectionId")?,
        group_name: m.string("groupName")?,
        ack_id: m.i32("ackId")?,
        ext: m.opt_ext()?,
    }))
}

fn leave_group_with_ack(m: &mut Fields<'_>) -> Result<ServiceMessage, DecodeError> {
    m.require(4)?;
    Ok(S::LeaveGroupWithAck(LeaveGroupWithAck {
        connection_id: m.string("connectionId")?,
        group_name: m.opt_string("groupName")?,
        ack_id: m.i32("ackId")?,
        ext: m.opt_ext()?,
    }))
}

fn user_join_group_with_ack(m: &mut Fields<'_>) -> Result<ServiceMessage, DecodeError> {
    m.require(4)?;
    Ok(S::UserJoinGroupWithAck(UserJoinGroupWithAck {
        user_id: m.string("userId")?,
        group_name: m.string("groupName")?,
        ack_id: m.i32("ackId")?,
        ext: m.opt_ext()?,
    }))
}

fn user_leave_group_with_ack(m: &mut Fields<'_>) -> Result<ServiceMessage, DecodeError> {
    m.require(4)?;
    Ok(S::UserLeaveGroupWithAck(UserLeaveGroupWithAck {
        user_id: m.string("userId")?,
        group_name: m.opt_string("groupName")?,
        ack_id: m.i32("ackId")?,
        ext: m.opt_ext()?,
    }))
}

fn group_member_query(m: &mut Fields<'_>) -> Result<ServiceMessage, DecodeError> {
    m.require(5)?;
    Ok(S::GroupMemberQuery(GroupMemberQuery {
        ext: m.ext()?,
        group_name: m.string("groupName")?,
        ack_id: m.i32("ackId")?,
        max: m.i32("max")?,
        continuation_token: m.opt(None, |m| m.opt_string("continuationToken"))?,
    }))
}

// ---- Acks and existence checks ---------------------------------------------------------------

fn ack(m: &mut Fields<'_>) -> Result<ServiceMessage, DecodeError> {
    m.require(4)?;
    Ok(S::Ack(Ack {
        ack_id: m.i32("ackId")?,
        status: m.i32("status")?,
        message: m.text("message")?,
        ext: m.opt_ext()?,
        payload: m.opt(None, |m| {
            m.with("payload", |r| {
                if r.nil()? {
                    Ok(None)
                } else {
                    r.bin().map(Some).map_err(|p| match p {
                        FieldProblem::Expected(_) => FieldProblem::Expected("binary or nil"),
                        p => p,
                    })
                }
            })
        })?,
    }))
}

fn check_user_in_group_with_ack(m: &mut Fields<'_>) -> Result<ServiceMessage, DecodeError> {
    m.require(4)?;
    Ok(S::CheckUserInGroupWithAck(CheckUserInGroupWithAck {
        user_id: m.string("userId")?,
        group_name: m.string("groupName")?,
        ack_id: m.i32("ackId")?,
        ext: m.opt_ext()?,
    }))
}

fn check_group_existence_with_ack(m: &mut Fields<'_>) -> Result<ServiceMessage, DecodeError> {
    m.require(3)?;
    Ok(S::CheckGroupExistenceWithAck(CheckGroupExistenceWithAck {
        group_name: m.string("groupName")?,
        ack_id: m.i32("ackId")?,
        ext: m.opt_ext()?,
    }))
}

fn check_connection_existence_with_ack(m: &mut Fields<'_>) -> Result<ServiceMessage, DecodeError> {
    m.require(3)?;
    Ok(S::CheckConnectionExistenceWithAck(
        CheckConnectionExistenceWithAck {
            connection_id: m.string("connectionId")?,
            ack_id: m.i32("ackId")?,
            ext: m.opt_ext()?,
        },
    ))
}

fn check_user_existence_with_ack(m: &mut Fields<'_>) -> Result<ServiceMessage, DecodeError> {
    m.require(3)?;
    Ok(S::CheckUserExistenceWithAck(CheckUserExistenceWithAck {
        user_id: m.string("userId")?,
        ack_id: m.i32("ackId")?,
        ext: m.opt_ext()?,
    }))
}

// ---- Client invocations: a server's call to a client, its answer, and where it is routed -----

fn client_invocation(m: &mut Fields<'_>) -> Result<ServiceMessage, DecodeError> {
    m.require(5)?;
    Ok(S::ClientInvocation(ClientInvocation {
        invocation_id: m.string("invocationId")?,
        connection_id: m.string("connectionId")?,
        caller_server_id: m.string("callerServerId")?,
        payloads: m.payloads()?,
        ext: m.opt_ext()?,
    }))
}

fn client_completion(m: &mut Fields<'_>) -> Result<ServiceMessage, DecodeError> {
    m.require(6)?;
    // The explicit protocol field is the only source; ext key 3 repeats it.
    m.keys = m.keys.without(PROTOCOL);
    Ok(S::ClientCompletion(ClientCompletion {
        invocation_id: m.string("invocationId")?,
        connection_id: m.string("connectionId")?,
        caller_server_id: m.string("callerServerId")?,
        protocol: m.string("protocol")?,
        payload: m.with("payload", Reader::bin_or_nil)?,
        ext: m.opt_ext()?,
    }))
}

fn error_completion(m: &mut Fields<'_>) -> Result<ServiceMessage, DecodeError> {
    m.require(5)?;
    Ok(S::ErrorCompletion(ErrorCompletion {
        invocation_id: m.string("invocationId")?,
        connection_id: m.string("connectionId")?,
        caller_server_id: m.string("callerServerId")?,
        error: m.text("error")?,
        ext: m.opt_ext()?,
    }))
}

fn service_mapping(m: &mut Fields<'_>) -> Result<ServiceMessage, DecodeError> {
    m.require(4)?;
    Ok(S::ServiceMapping(ServiceMapping {
        invocation_id: m.string("invocationId")?,
        connection_id: m.string("connectionId")?,
        instance_id: m.string("instanceId")?,
        ext: m.opt_ext()?,
    }))
}

/// The elements of one message array after the type id, read in order.
struct Fields<'a> {
    r: Reader<'a>,
    type_id: i32,
    name: &'static str,
    /// Array length, type id included.
    len: u32,
    /// Elements consumed so far, type id included.
    read: u32,
    /// Extension keys kept when reading the ext map.
    keys: Keys,
}

impl<'a> Fields<'a> {
    fn error(&self, field: &'static str, problem: FieldProblem) -> DecodeError {
        DecodeError::Field {
            type_id: self.type_id,
            message: self.name,
            field,
            problem,
        }
    }

    /// The array must hold at least `min` elements (type id included).
    fn require(&self, min: u32) -> Result<(), DecodeError> {
        if self.len < min {
            return Err(DecodeError::TooFewElements {
                type_id: self.type_id,
                message: self.name,
                len: self.len,
                min,
            });
        }
        Ok(())
    }

    /// Reads the next element with `f`.
    fn with<T>(
        &mut self,
        field: &'static str,
        f: impl FnOnce(&mut Reader<'a>) -> read::Result<T>,
    ) -> Result<T, DecodeError> {
        self.read += 1;
        f(&mut self.r).map_err(|p| self.error(field, p))
    }

    /// Reads an element that older layouts do not have: `default` when the array ends.
    fn opt<T>(
        &mut self,
        default: T,
        f: impl FnOnce(&mut Self) -> Result<T, DecodeError>,
    ) -> Result<T, DecodeError> {
        if self.read < self.len {
            f(self)
        } else {
            Ok(default)
        }
    }

    fn i32(&mut self, field: &'static str) -> Result<i32, DecodeError> {
        self.with(field, Reader::i32)
    }

    fn string(&mut self, field: &'static str) -> Result<String, DecodeError> {
        self.with(field, Reader::string)
    }

    fn opt_string(&mut self, field: &'static str) -> Result<Option<String>, DecodeError> {
        self.with(field, Reader::opt_string)
    }

    fn text(&mut self, field: &'static str) -> Result<String, DecodeError> {
        self.with(field, Reader::text)
    }

    fn ext(&mut self) -> Result<Extensions, DecodeError> {
        let keys = self.keys;
        self.with("ext", |r| ext::read(r, keys))
    }

    fn opt_ext(&mut self) -> Result<Extensions, DecodeError> {
        self.opt(Extensions::default(), Fields::ext)
    }

    fn strings(&mut self, field: &'static str) -> Result<Vec<String>, DecodeError> {
        self.with(field, |r| {
            let n = r.array_len()?;
            let mut items = Vec::with_capacity(capacity(n, r, 1));
            for _ in 0..n {
                items.push(r.string()?);
            }
            Ok(items)
        })
    }

    fn payloads(&mut self) -> Result<Payloads, DecodeError> {
        self.with("payloads", |r| {
            let n = r.map_len()?;
            let mut items = Vec::with_capacity(capacity(n, r, 2));
            for _ in 0..n {
                let protocol = r.string()?;
                // The SDK reads a nil payload as empty.
                items.push((protocol, r.bin_or_nil()?));
            }
            Ok(items)
        })
    }

    fn claims(&mut self) -> Result<Claims, DecodeError> {
        self.with("claims", |r| {
            let n = r.map_len()?;
            let mut items = Vec::with_capacity(capacity(n, r, 2));
            for _ in 0..n {
                let ty = r.string()?;
                items.push((ty, r.string()?));
            }
            Ok(items)
        })
    }

    fn headers(&mut self) -> Result<Headers, DecodeError> {
        self.with("headers", |r| {
            let n = r.map_len()?;
            let mut items = Vec::with_capacity(capacity(n, r, 2));
            for _ in 0..n {
                let name = r.string()?;
                let count = r.array_len()?;
                let mut values = Vec::with_capacity(capacity(count, r, 1));
                for _ in 0..count {
                    values.push(r.string()?);
                }
                items.push((name, values));
            }
            Ok(items)
        })
    }
}
