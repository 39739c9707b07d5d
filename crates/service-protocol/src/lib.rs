//! Sans-IO codec for the Azure SignalR service protocol: the MessagePack messages between
//! an app server (the SDK) and the service over a server connection. Bytes in, messages
//! (or bytes) out; no sockets, no runtime.
//!
//! # Layout
//! - [`FrameReader`]: splits the byte stream into message bodies (VarInt length prefix).
//! - [`decode`]: one body → [`ServiceMessage`]; payloads are zero-copy [`Bytes`] slices.
//!   Accepts every older, shorter layout and ignores what newer peers append; unknown
//!   type ids come back as [`ServiceMessage::Unknown`] so they can be ignored.
//! - [`encode`] / [`encoded`] / [`encode_body`]: the SDK writer's layouts, byte for byte
//!   (shortest encodings, fixed int32 for ConnectionFlowControl, ext keys 1..=6 in order
//!   and only on the message types that carry them, since the SDK's reader desyncs
//!   otherwise).
//! - [`encode_group_member_page`]: the GroupMemberQuery answer's payload.
//! - [`DecodeError`], [`FrameError`]: typed errors naming message type and field.
//!
//! Decoding never panics and never allocates more than the input could hold; skipped
//! values nest at most [`MAX_SKIP_DEPTH`] levels.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

mod decode;
mod encode;
mod error;
mod ext;
mod framing;
mod members;
mod message;
mod read;
mod write;

pub use bytes::Bytes;

pub use decode::decode;
pub use encode::{encode, encode_body, encoded, encoded_len};
pub use error::{DecodeError, FieldProblem, FrameError};
pub use framing::FrameReader;
pub use members::{encode_group_member_page, GroupMember};
pub use message::*;

/// The protocol version sent in [`HandshakeRequest::version`].
pub const VERSION: i32 = 1;

/// Server connection carrying clients; the service must accept it.
pub const CONNECTION_TYPE_DEFAULT: i32 = 0;
/// Extra connection requested by a `target` ping; carries clients, may be refused.
pub const CONNECTION_TYPE_ONDEMAND: i32 = 1;
/// Send-only connection (secondary endpoints, Management SDK); carries no clients.
pub const CONNECTION_TYPE_WEAK: i32 = 2;

/// Clients of this server cannot be migrated.
pub const MIGRATION_LEVEL_OFF: i32 = 0;
/// Clients may be migrated when the server shuts down gracefully (`MigrateClients`).
pub const MIGRATION_LEVEL_SHUTDOWN_ONLY: i32 = 1;
/// Defined by the SDK but never sent.
pub const MIGRATION_LEVEL_ANY: i32 = 2;

/// Deepest nesting accepted inside a value that is skipped (unknown extension values).
/// Deeper input is a nesting bomb, not a real message.
pub const MAX_SKIP_DEPTH: usize = 64;

/// Values of [`Extensions::data_message_type`] (ext key 5, ConnectionData only).
pub mod data_message_type {
    pub const UNKNOWN: i32 = 0;
    /// The SignalR handshake request/response.
    pub const HANDSHAKE: i32 = 1;
    /// Any hub invocation.
    pub const INVOCATION: i32 = 2;
    pub const OTHER: i32 = 3;
    /// A hub Close message (added later; dropped by SDKs before .NET 8).
    pub const CLOSE: i32 = 4;
}
