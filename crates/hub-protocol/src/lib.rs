//! Sans-IO codec for the ASP.NET Core SignalR hub protocol, wire-compatible with the
//! reference server and the official clients. No async runtime, no sockets: bytes in,
//! messages (or bytes) out.
//!
//! # Layout
//! - [`handshake`]: the JSON handshake request/response that opens every connection.
//! - [`FrameSplitter`] / [`Frame`]: split a byte stream into complete messages without
//!   decoding them (record separator for JSON, VarInt length prefix for MessagePack),
//!   enforcing the maximum message size.
//! - [`peek`] / [`Peek`]: a cheap look at one body (type, invocation id, target, Close
//!   fields) for a service that forwards messages without decoding them.
//! - [`HubMessage`] / [`CompletionResult`]: the message model, generic over the payload
//!   value type.
//! - [`json`]: decode/encode with `serde_json::Value` payloads, .NET writer order.
//! - [`msgpack`]: decode/encode with `rmpv::Value` payloads, .NET (or JS) array layouts,
//!   VarInt helpers, JSON → MessagePack value conversion.
//! - Hot-path helpers that encode once into shared [`Bytes`]: [`encode_invocation`],
//!   [`encode_completion`], [`encode_close`], [`ping`], [`encode_ack`],
//!   [`encode_sequence`], [`encode_message`].
//! - [`DecodeError`], [`FrameError`], [`HandshakeError`]: typed errors whose texts follow
//!   the reference implementation (they end up in client Close messages).
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

mod error;
mod framing;
pub mod handshake;
pub mod json;
mod message;
pub mod msgpack;
mod peek;
mod sequence;

use bytes::Bytes;
use switchyard_core::Protocol;

pub use error::{DecodeError, FrameError, HandshakeError};
pub use framing::{Frame, FrameSplitter, Located};
pub use message::{is_trackable_type, message_type, CompletionResult, Headers, HubMessage};
pub use peek::{peek, Peek};
pub use sequence::{count_trackable, for_each_trackable};

/// Ends every JSON record (handshake and JSON hub messages).
pub const RECORD_SEPARATOR: u8 = 0x1e;

/// The two hub protocols this crate encodes and decodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// `json`: text frames, record-separator framing.
    Json,
    /// `messagepack`: binary frames, VarInt length-prefix framing.
    MessagePack,
}

impl Format {
    /// `None` for protocols this crate does not handle (e.g. `blazorpack`).
    pub fn from_protocol(protocol: &Protocol) -> Option<Format> {
        match protocol {
            Protocol::Json => Some(Format::Json),
            Protocol::MessagePack => Some(Format::MessagePack),
            Protocol::Other(_) => None,
        }
    }

    /// The framing of a protocol whose bytes a service relays without encoding them:
    /// [`from_protocol`](Self::from_protocol)'s, plus `blazorpack` (Blazor Server: the
    /// MessagePack protocol under another name).
    pub fn for_relay(protocol: &Protocol) -> Option<Format> {
        match protocol {
            Protocol::Other(name) if name.eq_ignore_ascii_case("blazorpack") => {
                Some(Format::MessagePack)
            }
            other => Format::from_protocol(other),
        }
    }

    pub fn protocol(self) -> Protocol {
        match self {
            Format::Json => Protocol::Json,
            Format::MessagePack => Protocol::MessagePack,
        }
    }

    /// The protocol name used in the handshake.
    pub fn name(self) -> &'static str {
        match self {
            Format::Json => "json",
            Format::MessagePack => "messagepack",
        }
    }

    /// Whether messages travel as binary (WebSocket binary frames; not possible on SSE).
    pub fn is_binary(self) -> bool {
        self == Format::MessagePack
    }
}

const JSON_PING: &[u8] = b"{\"type\":6}\x1e";
const MSGPACK_PING: &[u8] = &[0x02, 0x91, 0x06];

/// A framed Ping: `{"type":6}` + RS, or `02 91 06`. Static, no allocation.
pub fn ping(format: Format) -> Bytes {
    Bytes::from_static(match format {
        Format::Json => JSON_PING,
        Format::MessagePack => MSGPACK_PING,
    })
}

/// A framed non-blocking Invocation (no invocation id, no headers, no streams) in the .NET
/// writer layout: `{"type":1,"target":…,"arguments":[…]}` + RS, or the 6-element
/// MessagePack array `[1, {}, nil, target, [args], []]` with the arguments converted by
/// [`msgpack::json_to_msgpack`]'s rules.
pub fn encode_invocation(format: Format, target: &str, arguments: &[serde_json::Value]) -> Bytes {
    let out = match format {
        Format::Json => {
            let mut out = Vec::with_capacity(64);
            out.extend_from_slice(b"{\"type\":1");
            json::property(&mut out, "target", target);
            json::property(&mut out, "arguments", arguments);
            out.push(b'}');
            out.push(RECORD_SEPARATOR);
            out
        }
        Format::MessagePack => msgpack::frame(|out| {
            use msgpack::write;
            write::array_len(out, 6);
            write::uint(out, u64::from(message_type::INVOCATION));
            write::map_len(out, 0);
            write::nil(out);
            write::str(out, target);
            write::array_len(out, arguments.len());
            for arg in arguments {
                write::json(out, arg);
            }
            write::array_len(out, 0);
        }),
    };
    Bytes::from(out)
}

/// A framed Close. JSON follows the writer order (`error` unless `None`, `allowReconnect`
/// only when true); MessagePack is always `[7, error|nil, allowReconnect]`.
pub fn encode_close(format: Format, error: Option<&str>, allow_reconnect: bool) -> Bytes {
    let out = match format {
        Format::Json => {
            let mut out = Vec::with_capacity(32 + error.map_or(0, str::len));
            out.extend_from_slice(b"{\"type\":7");
            json::write_close_fields(&mut out, error, allow_reconnect);
            out.push(b'}');
            out.push(RECORD_SEPARATOR);
            out
        }
        Format::MessagePack => msgpack::frame(|out| {
            msgpack::write_close(out, error, allow_reconnect, msgpack::Layout::DotNet)
        }),
    };
    Bytes::from(out)
}

/// A framed Completion without headers.
pub fn encode_completion(
    format: Format,
    invocation_id: &str,
    result: CompletionResult<serde_json::Value>,
) -> Bytes {
    encode_message(
        format,
        &HubMessage::Completion {
            headers: Headers::new(),
            invocation_id: invocation_id.to_owned(),
            result,
        },
    )
}

/// A framed Ack (stateful reconnect).
pub fn encode_ack(format: Format, sequence_id: i64) -> Bytes {
    encode_message(format, &HubMessage::Ack { sequence_id })
}

/// A framed Sequence (stateful reconnect).
pub fn encode_sequence(format: Format, sequence_id: i64) -> Bytes {
    encode_message(format, &HubMessage::Sequence { sequence_id })
}

/// Any message with JSON payload values, framed, in the .NET writer layout. For
/// MessagePack the payloads are converted by [`msgpack::json_to_msgpack`]'s rules.
pub fn encode_message(format: Format, message: &HubMessage<serde_json::Value>) -> Bytes {
    Bytes::from(match format {
        Format::Json => json::encode(message),
        Format::MessagePack => msgpack::encode_json_message(message),
    })
}
