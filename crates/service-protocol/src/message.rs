//! The message model (§1.5). Field names are the protocol's, in snake case.
//!
//! Conventions:
//! - `Option` marks a field that may be nil on the wire or (for trailing fields) absent from
//!   older, shorter arrays; where presence changes the array length the encoder follows it
//!   (6- vs 7-element HandshakeRequest, 5- vs 6-element Ack).
//! - Free text that the SDK treats as "nil means empty" (error messages, Ack/ServiceEvent
//!   text, handshake target, token) is a plain `String`; nil decodes to `""`.
//! - Identifiers (connection, user, group, invocation ids) must be strings; nil is an error.
//! - Binaries decode as zero-copy slices of the message body; nil decodes as empty (the
//!   SDK reads it that way too).

use bytes::Bytes;

/// Protocol name → the complete, framed hub message in that protocol (JSON text with its
/// record separator, or MessagePack with its VarInt prefix). Wire order is kept.
pub type Payloads = Vec<(String, Bytes)>;

/// Header name → values. Wire order and duplicate names are kept.
pub type Headers = Vec<(String, Vec<String>)>;

/// `(claim type, value)`. On the wire a msgpack map whose keys repeat (one entry per claim,
/// e.g. several `role` claims), hence a list.
pub type Claims = Vec<(String, String)>;

/// The extension-members map (§1.3): int keys 1..=6, each optional.
///
/// Only the keys a message type carries are written or read (see the table in §1.3): the
/// SDK's reader desynchronises on a key its message type does not support, so e.g. `ttl`
/// is written only on UserJoinGroup(WithAck) and `data_message_type` only on ConnectionData.
/// Keys a type does not carry are skipped when decoding, so they never show up here.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Extensions {
    /// Key 1, uint64. Only set when messaging diagnostics are on.
    pub tracing_id: Option<u64>,
    /// Key 2, int32 seconds: lifetime of a user's group membership.
    pub ttl: Option<i32>,
    /// Key 3: the client's hub protocol name (OpenConnection).
    pub protocol: Option<String>,
    /// Key 4: OData subscriber filter on multicast data.
    pub filter: Option<String>,
    /// Key 5: see [`data_message_type`](crate::data_message_type).
    pub data_message_type: Option<i32>,
    /// Key 6: this ConnectionData chunk continues in the next one.
    pub is_partial: Option<bool>,
}

impl Extensions {
    /// No key set: encodes as `{}`.
    pub fn is_empty(&self) -> bool {
        *self == Extensions::default()
    }
}

/// Type 1, app server → service, first message on every server connection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HandshakeRequest {
    /// [`VERSION`](crate::VERSION).
    pub version: i32,
    /// [`CONNECTION_TYPE_DEFAULT`](crate::CONNECTION_TYPE_DEFAULT), `_ONDEMAND` or `_WEAK`.
    pub connection_type: i32,
    /// Service instance id for OnDemand connections, else `""`.
    pub target: String,
    /// [`MIGRATION_LEVEL_OFF`](crate::MIGRATION_LEVEL_OFF), `_SHUTDOWN_ONLY` or `_ANY`.
    pub migration_level: i32,
    pub ext: Extensions,
    /// Sent by newer SDKs only; `Some` makes the encoder write the 7-element layout.
    pub allow_stateful_reconnects: Option<bool>,
}

impl HandshakeRequest {
    pub const CONNECTION_TYPE_DEFAULT: i32 = crate::CONNECTION_TYPE_DEFAULT;
    pub const CONNECTION_TYPE_ONDEMAND: i32 = crate::CONNECTION_TYPE_ONDEMAND;
    pub const CONNECTION_TYPE_WEAK: i32 = crate::CONNECTION_TYPE_WEAK;
}

/// Type 2, service → app server, the answer to [`HandshakeRequest`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HandshakeResponse {
    /// Empty = accepted; otherwise the SDK logs it and closes the socket.
    pub error_message: String,
    pub ext: Extensions,
    /// Trailing; always written (nil when `None`).
    pub connection_id: Option<String>,
}

impl HandshakeResponse {
    /// An accepting response.
    pub fn ok() -> Self {
        HandshakeResponse::default()
    }

    /// A refusing response.
    pub fn error(message: impl Into<String>) -> Self {
        HandshakeResponse {
            error_message: message.into(),
            ..HandshakeResponse::default()
        }
    }

    pub fn is_success(&self) -> bool {
        self.error_message.is_empty()
    }
}

/// Type 3, both directions: a flat `key, value, key, value, …` string list (§1.6). No
/// values = plain keep-alive.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ping {
    pub values: Vec<String>,
}

impl Ping {
    /// A ping carrying the given pairs in order.
    pub fn new(pairs: &[(&str, &str)]) -> Self {
        Ping {
            values: pairs
                .iter()
                .flat_map(|(k, v)| [(*k).to_owned(), (*v).to_owned()])
                .collect(),
        }
    }

    /// `[3]`.
    pub fn keep_alive() -> Self {
        Ping::default()
    }

    /// The value after the first occurrence of `key` at an even position, as the SDK
    /// looks it up. A key in the last position has no value: `None`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.values
            .chunks(2)
            .find(|pair| pair[0] == key)
            .and_then(|pair| pair.get(1))
            .map(String::as_str)
    }

    /// The `(key, value)` pairs; an odd trailing key is left out.
    pub fn pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.values
            .chunks_exact(2)
            .map(|pair| (pair[0].as_str(), pair[1].as_str()))
    }

    pub fn is_keep_alive(&self) -> bool {
        self.values.is_empty()
    }
}

/// Type 4, service → app server: a client connected.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenConnection {
    pub connection_id: String,
    pub claims: Claims,
    pub headers: Headers,
    /// The client's connect query string (leading `?` optional).
    pub query_string: Option<String>,
    /// May carry `protocol` (the client's hub protocol) and `tracing_id`.
    pub ext: Extensions,
}

/// Type 5, both directions: a client is gone (S→A) or must be closed (A→S).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CloseConnection {
    pub connection_id: String,
    /// Nil reads as `""`.
    pub error_message: String,
    /// E.g. `Asrs-Migrate-To` when the client migrated to another server.
    pub headers: Headers,
    pub ext: Extensions,
}

/// Type 6, both directions: raw bytes of one client's stream (handshake included).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnectionData {
    pub connection_id: String,
    pub payload: Bytes,
    /// May carry `tracing_id`, `data_message_type`, `is_partial`.
    pub ext: Extensions,
}

/// Type 7, app server → service: send to a list of connections.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MultiConnectionData {
    pub connection_list: Vec<String>,
    pub payloads: Payloads,
    pub ext: Extensions,
}

/// Type 8, app server → service: send to every connection of a user.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserData {
    pub user_id: String,
    pub payloads: Payloads,
    pub ext: Extensions,
}

/// Type 9, app server → service: send to several users.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MultiUserData {
    pub user_list: Vec<String>,
    pub payloads: Payloads,
    pub ext: Extensions,
}

/// Type 10, app server → service: send to every connection of the hub except some.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BroadcastData {
    pub excluded_list: Vec<String>,
    pub payloads: Payloads,
    pub ext: Extensions,
}

/// Type 11, app server → service.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JoinGroup {
    pub connection_id: String,
    pub group_name: String,
    pub ext: Extensions,
}

/// Type 12, app server → service.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaveGroup {
    pub connection_id: String,
    /// `None` (nil) = leave all groups.
    pub group_name: Option<String>,
    pub ext: Extensions,
}

/// Type 13, app server → service: send to a group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupBroadcastData {
    pub group_name: String,
    pub excluded_list: Vec<String>,
    pub payloads: Payloads,
    pub ext: Extensions,
    /// Trailing (7-element layout, always written).
    pub excluded_user_list: Vec<String>,
    /// Trailing; nil when `None`.
    pub caller_user_id: Option<String>,
}

/// Type 14, app server → service: send to several groups.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MultiGroupBroadcastData {
    pub group_list: Vec<String>,
    pub payloads: Payloads,
    pub ext: Extensions,
}

/// Type 15, service → app server: the SDK stops writing to this connection (no ext map).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServiceError {
    /// Nil reads as `""`.
    pub error_message: String,
}

/// Type 16, app server → service.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserJoinGroup {
    pub user_id: String,
    pub group_name: String,
    /// May carry `ttl` and `tracing_id`.
    pub ext: Extensions,
}

/// Type 17, app server → service.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserLeaveGroup {
    pub user_id: String,
    /// `None` (nil) = all groups.
    pub group_name: Option<String>,
    pub ext: Extensions,
}

/// Type 18, app server → service; answered by [`Ack`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JoinGroupWithAck {
    pub connection_id: String,
    pub group_name: String,
    pub ack_id: i32,
    pub ext: Extensions,
}

/// Type 19, app server → service; answered by [`Ack`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaveGroupWithAck {
    pub connection_id: String,
    /// `None` (nil) = all groups.
    pub group_name: Option<String>,
    pub ack_id: i32,
    pub ext: Extensions,
}

/// Known [`Ack::status`] values. The field is a plain `i32` because any value may arrive
/// (the SDK's own tests use 100 and 101).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AckStatus {
    Ok = 1,
    /// E.g. "user not in group"; the SDK maps it to `false`.
    NotFound = 2,
    Timeout = 3,
    InternalServerError = 4,
}

impl AckStatus {
    pub const fn code(self) -> i32 {
        self as i32
    }

    pub fn from_code(code: i32) -> Option<AckStatus> {
        match code {
            1 => Some(AckStatus::Ok),
            2 => Some(AckStatus::NotFound),
            3 => Some(AckStatus::Timeout),
            4 => Some(AckStatus::InternalServerError),
            _ => None,
        }
    }
}

impl From<AckStatus> for i32 {
    fn from(status: AckStatus) -> i32 {
        status.code()
    }
}

/// Type 20, service → app server: the answer to every `*WithAck` message.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ack {
    pub ack_id: i32,
    /// See [`AckStatus`].
    pub status: i32,
    /// Nil reads as `""`.
    pub message: String,
    pub ext: Extensions,
    /// Msgpack-serialized result (e.g. for [`GroupMemberQuery`]). `Some` makes the encoder
    /// write the 6-element layout; a nil payload decodes as `None`.
    pub payload: Option<Bytes>,
}

impl Ack {
    /// A 5-element Ack without payload.
    pub fn new(ack_id: i32, status: AckStatus, message: impl Into<String>) -> Self {
        Ack {
            ack_id,
            status: status.code(),
            message: message.into(),
            ..Ack::default()
        }
    }

    pub fn known_status(&self) -> Option<AckStatus> {
        AckStatus::from_code(self.status)
    }
}

/// Type 21, app server → service; answered by [`Ack`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckUserInGroupWithAck {
    pub user_id: String,
    pub group_name: String,
    pub ack_id: i32,
    pub ext: Extensions,
}

/// Type 22, service → app server, informational (the SDK only logs it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServiceEvent {
    /// `ServiceEvent::OBJECT_*`.
    pub object_type: i32,
    /// Nil reads as `""`.
    pub id: String,
    /// `ServiceEvent::KIND_*`.
    pub kind: i32,
    /// Nil reads as `""`.
    pub message: String,
    pub ext: Extensions,
}

impl ServiceEvent {
    pub const OBJECT_SERVICE_INSTANCE: i32 = 0;
    pub const OBJECT_CONNECTION: i32 = 1;
    pub const OBJECT_USER: i32 = 2;
    pub const OBJECT_GROUP: i32 = 3;
    pub const OBJECT_SERVER_CONNECTION: i32 = 4;
    pub const KIND_RELOADING: i32 = 0;
    pub const KIND_INVALID: i32 = 1;
    pub const KIND_NOT_EXISTED: i32 = 2;
    /// Back-pressure warning for a server connection that sends too fast.
    pub const KIND_BUFFER_FULL: i32 = 3;
}

/// Type 23, app server → service; answered by [`Ack`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckGroupExistenceWithAck {
    pub group_name: String,
    pub ack_id: i32,
    pub ext: Extensions,
}

/// Type 24, app server → service; answered by [`Ack`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckConnectionExistenceWithAck {
    pub connection_id: String,
    pub ack_id: i32,
    pub ext: Extensions,
}

/// Type 25, app server → service; answered by [`Ack`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckUserExistenceWithAck {
    pub user_id: String,
    pub ack_id: i32,
    pub ext: Extensions,
}

/// Type 26, app server → service; answered by [`Ack`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserJoinGroupWithAck {
    pub user_id: String,
    pub group_name: String,
    pub ack_id: i32,
    /// May carry `ttl` and `tracing_id`.
    pub ext: Extensions,
}

/// Type 27, app server → service; answered by [`Ack`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserLeaveGroupWithAck {
    pub user_id: String,
    /// `None` (nil) = all groups.
    pub group_name: Option<String>,
    pub ack_id: i32,
    pub ext: Extensions,
}

/// Type 28, app server → service: asks for a signing key with an Entra ID token.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccessKeyRequest {
    /// Nil reads as `""`.
    pub token: String,
    pub kid: Option<String>,
    pub ext: Extensions,
}

/// Type 29, service → app server: the key, or an error.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccessKeyResponse {
    pub kid: Option<String>,
    pub access_key: Option<String>,
    pub error_type: Option<String>,
    pub error_message: Option<String>,
    pub ext: Extensions,
}

/// Type 30 (obsolete), app server → service; answered by [`Ack`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CloseConnectionWithAck {
    pub connection_id: String,
    pub reason: Option<String>,
    pub ack_id: i32,
    pub ext: Extensions,
}

/// Type 31 (obsolete), app server → service: close every connection of the hub.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CloseConnectionsWithAck {
    pub reason: Option<String>,
    pub ack_id: i32,
    pub excluded_list: Vec<String>,
    pub ext: Extensions,
}

/// Type 32, app server → service; answered by [`Ack`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CloseUserConnectionsWithAck {
    pub user_id: String,
    pub reason: Option<String>,
    pub ack_id: i32,
    pub excluded_list: Vec<String>,
    pub ext: Extensions,
}

/// Type 33, app server → service; answered by [`Ack`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CloseGroupConnectionsWithAck {
    pub group_name: String,
    pub reason: Option<String>,
    pub ack_id: i32,
    pub excluded_list: Vec<String>,
    pub ext: Extensions,
}

/// Type 34, both directions: a server → client invocation that expects a result (§1.9).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientInvocation {
    pub invocation_id: String,
    pub connection_id: String,
    pub caller_server_id: String,
    pub payloads: Payloads,
    pub ext: Extensions,
}

/// Type 35, both directions: the client's completion, routed back to the caller.
///
/// The encoder also writes `protocol` into ext key 3 (as the SDK does); `ext.protocol` is
/// ignored when encoding and always `None` after decoding: this field is the only source.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientCompletion {
    pub invocation_id: String,
    pub connection_id: String,
    pub caller_server_id: String,
    /// Hub protocol of `payload`.
    pub protocol: String,
    /// Serialized CompletionMessage; empty when the caller itself only cleans up.
    pub payload: Bytes,
    pub ext: Extensions,
}

/// Type 36, both directions: a client invocation failed (client gone, timeout, …).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ErrorCompletion {
    pub invocation_id: String,
    pub connection_id: String,
    pub caller_server_id: String,
    /// Nil reads as `""`.
    pub error: String,
    pub ext: Extensions,
}

/// Type 37, service → app server: which service instance serves an invocation's client.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServiceMapping {
    pub invocation_id: String,
    pub connection_id: String,
    pub instance_id: String,
    pub ext: Extensions,
}

/// Type 38, service → app server: stateful-reconnect signal.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnectionReconnect {
    pub connection_id: String,
    pub ext: Extensions,
}

/// Type 39, both directions: per-client pause/resume. Its ints are written as fixed int32.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnectionFlowControl {
    pub connection_id: String,
    /// [`Self::CLIENT`] or [`Self::SERVER`] (the spec text's 0/1 is wrong).
    pub connection_type: i32,
    /// [`Self::PAUSE`], [`Self::PAUSE_ACK`], [`Self::RESUME`] or [`Self::OFFLINE`].
    pub operation: i32,
    pub ext: Extensions,
}

impl ConnectionFlowControl {
    pub const CLIENT: i32 = 1;
    pub const SERVER: i32 = 2;
    /// S→A: stop sending for this client.
    pub const PAUSE: i32 = 1;
    /// A→S: sent once per pause episode.
    pub const PAUSE_ACK: i32 = 2;
    /// S→A.
    pub const RESUME: i32 = 3;
    /// S→A: send through other server connections.
    pub const OFFLINE: i32 = 4;
}

/// Type 40, app server → service: list a group's connections; answered by an [`Ack`]
/// whose payload holds the page. The ext map comes FIRST on the wire.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupMemberQuery {
    pub ext: Extensions,
    pub group_name: String,
    pub ack_id: i32,
    pub max: i32,
    pub continuation_token: Option<String>,
}

/// Every service-protocol message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServiceMessage {
    HandshakeRequest(HandshakeRequest),
    HandshakeResponse(HandshakeResponse),
    Ping(Ping),
    OpenConnection(OpenConnection),
    CloseConnection(CloseConnection),
    ConnectionData(ConnectionData),
    MultiConnectionData(MultiConnectionData),
    UserData(UserData),
    MultiUserData(MultiUserData),
    BroadcastData(BroadcastData),
    JoinGroup(JoinGroup),
    LeaveGroup(LeaveGroup),
    GroupBroadcastData(GroupBroadcastData),
    MultiGroupBroadcastData(MultiGroupBroadcastData),
    ServiceError(ServiceError),
    UserJoinGroup(UserJoinGroup),
    UserLeaveGroup(UserLeaveGroup),
    JoinGroupWithAck(JoinGroupWithAck),
    LeaveGroupWithAck(LeaveGroupWithAck),
    Ack(Ack),
    CheckUserInGroupWithAck(CheckUserInGroupWithAck),
    ServiceEvent(ServiceEvent),
    CheckGroupExistenceWithAck(CheckGroupExistenceWithAck),
    CheckConnectionExistenceWithAck(CheckConnectionExistenceWithAck),
    CheckUserExistenceWithAck(CheckUserExistenceWithAck),
    UserJoinGroupWithAck(UserJoinGroupWithAck),
    UserLeaveGroupWithAck(UserLeaveGroupWithAck),
    AccessKeyRequest(AccessKeyRequest),
    AccessKeyResponse(AccessKeyResponse),
    CloseConnectionWithAck(CloseConnectionWithAck),
    CloseConnectionsWithAck(CloseConnectionsWithAck),
    CloseUserConnectionsWithAck(CloseUserConnectionsWithAck),
    CloseGroupConnectionsWithAck(CloseGroupConnectionsWithAck),
    ClientInvocation(ClientInvocation),
    ClientCompletion(ClientCompletion),
    ErrorCompletion(ErrorCompletion),
    ServiceMapping(ServiceMapping),
    ConnectionReconnect(ConnectionReconnect),
    ConnectionFlowControl(ConnectionFlowControl),
    GroupMemberQuery(GroupMemberQuery),
    /// A type id this crate does not know (e.g. 41 RefreshAuth). The SDK ignores such
    /// messages; so should a receiver. Encoding writes `[type_id]`.
    Unknown {
        type_id: i32,
    },
}

/// `impl From<Struct> for ServiceMessage` and the id/name table.
macro_rules! variants {
    ($($variant:ident = $id:literal => $konst:ident),* $(,)?) => {
        $(
            impl From<$variant> for ServiceMessage {
                fn from(m: $variant) -> Self {
                    ServiceMessage::$variant(m)
                }
            }
        )*

        impl ServiceMessage {
            /// The wire type id (element 0 of the array).
            pub fn type_id(&self) -> i32 {
                match self {
                    $(ServiceMessage::$variant(_) => $id,)*
                    ServiceMessage::Unknown { type_id } => *type_id,
                }
            }

            /// The message type name (the variant's), for logs; `"Unknown"` for unknown ids.
            pub fn name(&self) -> &'static str {
                type_name(self.type_id())
            }
        }

        /// The name of a type id, `"Unknown"` when this crate does not know it.
        pub fn type_name(type_id: i32) -> &'static str {
            match type_id {
                $($id => stringify!($variant),)*
                _ => "Unknown",
            }
        }

        /// Type ids (element 0 of every message array).
        pub mod message_type {
            $(pub const $konst: i32 = $id;)*
        }
    };
}

variants! {
    HandshakeRequest = 1 => HANDSHAKE_REQUEST,
    HandshakeResponse = 2 => HANDSHAKE_RESPONSE,
    Ping = 3 => PING,
    OpenConnection = 4 => OPEN_CONNECTION,
    CloseConnection = 5 => CLOSE_CONNECTION,
    ConnectionData = 6 => CONNECTION_DATA,
    MultiConnectionData = 7 => MULTI_CONNECTION_DATA,
    UserData = 8 => USER_DATA,
    MultiUserData = 9 => MULTI_USER_DATA,
    BroadcastData = 10 => BROADCAST_DATA,
    JoinGroup = 11 => JOIN_GROUP,
    LeaveGroup = 12 => LEAVE_GROUP,
    GroupBroadcastData = 13 => GROUP_BROADCAST_DATA,
    MultiGroupBroadcastData = 14 => MULTI_GROUP_BROADCAST_DATA,
    ServiceError = 15 => SERVICE_ERROR,
    UserJoinGroup = 16 => USER_JOIN_GROUP,
    UserLeaveGroup = 17 => USER_LEAVE_GROUP,
    JoinGroupWithAck = 18 => JOIN_GROUP_WITH_ACK,
    LeaveGroupWithAck = 19 => LEAVE_GROUP_WITH_ACK,
    Ack = 20 => ACK,
    CheckUserInGroupWithAck = 21 => CHECK_USER_IN_GROUP_WITH_ACK,
    ServiceEvent = 22 => SERVICE_EVENT,
    CheckGroupExistenceWithAck = 23 => CHECK_GROUP_EXISTENCE_WITH_ACK,
    CheckConnectionExistenceWithAck = 24 => CHECK_CONNECTION_EXISTENCE_WITH_ACK,
    CheckUserExistenceWithAck = 25 => CHECK_USER_EXISTENCE_WITH_ACK,
    UserJoinGroupWithAck = 26 => USER_JOIN_GROUP_WITH_ACK,
    UserLeaveGroupWithAck = 27 => USER_LEAVE_GROUP_WITH_ACK,
    AccessKeyRequest = 28 => ACCESS_KEY_REQUEST,
    AccessKeyResponse = 29 => ACCESS_KEY_RESPONSE,
    CloseConnectionWithAck = 30 => CLOSE_CONNECTION_WITH_ACK,
    CloseConnectionsWithAck = 31 => CLOSE_CONNECTIONS_WITH_ACK,
    CloseUserConnectionsWithAck = 32 => CLOSE_USER_CONNECTIONS_WITH_ACK,
    CloseGroupConnectionsWithAck = 33 => CLOSE_GROUP_CONNECTIONS_WITH_ACK,
    ClientInvocation = 34 => CLIENT_INVOCATION,
    ClientCompletion = 35 => CLIENT_COMPLETION,
    ErrorCompletion = 36 => ERROR_COMPLETION,
    ServiceMapping = 37 => SERVICE_MAPPING,
    ConnectionReconnect = 38 => CONNECTION_RECONNECT,
    ConnectionFlowControl = 39 => CONNECTION_FLOW_CONTROL,
    GroupMemberQuery = 40 => GROUP_MEMBER_QUERY,
}
