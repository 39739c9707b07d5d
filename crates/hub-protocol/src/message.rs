//! The hub message model shared by the JSON and MessagePack codecs, and the checks every
//! reader of it (decode and peek, in both formats) makes alike.

use crate::error::DecodeError;

/// Message type numbers as they appear on the wire (`type` in JSON, element 0 in MessagePack).
pub mod message_type {
    pub const INVOCATION: u8 = 1;
    pub const STREAM_ITEM: u8 = 2;
    pub const COMPLETION: u8 = 3;
    pub const STREAM_INVOCATION: u8 = 4;
    pub const CANCEL_INVOCATION: u8 = 5;
    pub const PING: u8 = 6;
    pub const CLOSE: u8 = 7;
    pub const ACK: u8 = 8;
    pub const SEQUENCE: u8 = 9;

    /// The type's name for logs and traces (`stream_item`, …; `unknown` outside 1 to 9).
    pub fn name(kind: u8) -> &'static str {
        match kind {
            INVOCATION => "invocation",
            STREAM_ITEM => "stream_item",
            COMPLETION => "completion",
            STREAM_INVOCATION => "stream_invocation",
            CANCEL_INVOCATION => "cancel_invocation",
            PING => "ping",
            CLOSE => "close",
            ACK => "ack",
            SEQUENCE => "sequence",
            _ => "unknown",
        }
    }
}

/// Message headers in wire order. Names are unique (a later duplicate replaces the earlier
/// value in place) and never empty.
pub type Headers = Vec<(String, String)>;

/// The outcome carried by a Completion message.
#[derive(Debug, Clone, PartialEq)]
pub enum CompletionResult<V> {
    /// No result (void method, or the end of a stream).
    Void,
    /// A result value, which may itself be null/nil (distinct from `Void`).
    Value(V),
    /// The invocation failed with this error text.
    Error(String),
}

impl<V> CompletionResult<V> {
    /// Converts the payload value, if any.
    pub fn map<W>(self, f: impl FnOnce(V) -> W) -> CompletionResult<W> {
        match self {
            CompletionResult::Void => CompletionResult::Void,
            CompletionResult::Value(v) => CompletionResult::Value(f(v)),
            CompletionResult::Error(e) => CompletionResult::Error(e),
        }
    }
}

/// One hub message. `V` is the payload value type: `serde_json::Value` for the JSON codec,
/// `rmpv::Value` for the MessagePack codec (which keeps float32, binary and extension types).
#[derive(Debug, Clone, PartialEq)]
pub enum HubMessage<V> {
    /// Type 1. `invocation_id` `None` = non-blocking (no Completion expected).
    /// `stream_ids` `None` = the property / array slot was absent.
    Invocation {
        headers: Headers,
        invocation_id: Option<String>,
        target: String,
        arguments: Vec<V>,
        stream_ids: Option<Vec<String>>,
    },
    /// Type 2: one item of a stream (server results or client upload).
    StreamItem {
        headers: Headers,
        invocation_id: String,
        item: V,
    },
    /// Type 3: the end of an invocation or stream.
    Completion {
        headers: Headers,
        invocation_id: String,
        result: CompletionResult<V>,
    },
    /// Type 4: a streaming invocation; the id is required and non-empty.
    StreamInvocation {
        headers: Headers,
        invocation_id: String,
        target: String,
        arguments: Vec<V>,
        stream_ids: Option<Vec<String>>,
    },
    /// Type 5: cancel the stream with this id.
    CancelInvocation {
        headers: Headers,
        invocation_id: String,
    },
    /// Type 6: keep-alive.
    Ping,
    /// Type 7: the sender is closing the connection. `Some("")` is still an error.
    Close {
        error: Option<String>,
        allow_reconnect: bool,
    },
    /// Type 8 (stateful reconnect): everything up to `sequence_id` was processed.
    Ack { sequence_id: i64 },
    /// Type 9 (stateful reconnect): the next trackable message has id `sequence_id`.
    Sequence { sequence_id: i64 },
    /// A message type this implementation does not know. Receivers must ignore it
    /// (forward compatibility); encoding writes only the type.
    Unknown { message_type: i32 },
}

impl<V> HubMessage<V> {
    /// The wire type number.
    pub fn message_type(&self) -> i32 {
        use message_type as t;
        let known = match self {
            HubMessage::Invocation { .. } => t::INVOCATION,
            HubMessage::StreamItem { .. } => t::STREAM_ITEM,
            HubMessage::Completion { .. } => t::COMPLETION,
            HubMessage::StreamInvocation { .. } => t::STREAM_INVOCATION,
            HubMessage::CancelInvocation { .. } => t::CANCEL_INVOCATION,
            HubMessage::Ping => t::PING,
            HubMessage::Close { .. } => t::CLOSE,
            HubMessage::Ack { .. } => t::ACK,
            HubMessage::Sequence { .. } => t::SEQUENCE,
            HubMessage::Unknown { message_type } => return *message_type,
        };
        i32::from(known)
    }

    /// The invocation id, for the message types that carry one.
    pub fn invocation_id(&self) -> Option<&str> {
        match self {
            HubMessage::Invocation { invocation_id, .. } => invocation_id.as_deref(),
            HubMessage::StreamItem { invocation_id, .. }
            | HubMessage::Completion { invocation_id, .. }
            | HubMessage::StreamInvocation { invocation_id, .. }
            | HubMessage::CancelInvocation { invocation_id, .. } => Some(invocation_id),
            _ => None,
        }
    }

    /// The headers, for the message types that carry them.
    pub fn headers(&self) -> Option<&Headers> {
        match self {
            HubMessage::Invocation { headers, .. }
            | HubMessage::StreamItem { headers, .. }
            | HubMessage::Completion { headers, .. }
            | HubMessage::StreamInvocation { headers, .. }
            | HubMessage::CancelInvocation { headers, .. } => Some(headers),
            _ => None,
        }
    }

    /// Whether the message counts for stateful-reconnect sequence numbering
    /// (types 1 to 5).
    pub fn is_trackable(&self) -> bool {
        is_trackable_type(self.message_type())
    }

    /// Converts every payload value (arguments, item, result) with `f`.
    pub fn map_values<W>(self, mut f: impl FnMut(V) -> W) -> HubMessage<W> {
        match self {
            HubMessage::Invocation {
                headers,
                invocation_id,
                target,
                arguments,
                stream_ids,
            } => HubMessage::Invocation {
                headers,
                invocation_id,
                target,
                arguments: arguments.into_iter().map(f).collect(),
                stream_ids,
            },
            HubMessage::StreamInvocation {
                headers,
                invocation_id,
                target,
                arguments,
                stream_ids,
            } => HubMessage::StreamInvocation {
                headers,
                invocation_id,
                target,
                arguments: arguments.into_iter().map(f).collect(),
                stream_ids,
            },
            HubMessage::StreamItem {
                headers,
                invocation_id,
                item,
            } => HubMessage::StreamItem {
                headers,
                invocation_id,
                item: f(item),
            },
            HubMessage::Completion {
                headers,
                invocation_id,
                result,
            } => HubMessage::Completion {
                headers,
                invocation_id,
                result: result.map(f),
            },
            HubMessage::CancelInvocation {
                headers,
                invocation_id,
            } => HubMessage::CancelInvocation {
                headers,
                invocation_id,
            },
            HubMessage::Ping => HubMessage::Ping,
            HubMessage::Close {
                error,
                allow_reconnect,
            } => HubMessage::Close {
                error,
                allow_reconnect,
            },
            HubMessage::Ack { sequence_id } => HubMessage::Ack { sequence_id },
            HubMessage::Sequence { sequence_id } => HubMessage::Sequence { sequence_id },
            HubMessage::Unknown { message_type } => HubMessage::Unknown { message_type },
        }
    }
}

/// Whether a message of this type counts for stateful-reconnect sequence numbering.
pub fn is_trackable_type(message_type: i32) -> bool {
    (1..=5).contains(&message_type)
}

/// The checks every reader makes on an Invocation or a StreamInvocation (`kind`, the wire
/// type), in the .NET readers' order: the id, then the target. `None` is an absent or null
/// property; MessagePack readers pass a nil id as `Some("")`, as the .NET reader sees it.
/// `target` reads the target, after the id passed (MessagePack reads elements in order, so
/// a message wrong in both reports its id). Returns the id, `None` for a non-blocking
/// Invocation (an empty id means that too), and the target.
// Always inlined: every inbound invocation passes here, and LLVM kept the `#[inline]`
// version a call (callgrind: a dozen more instructions per message in peek).
#[inline(always)]
pub(crate) fn check_invocation<S: AsRef<str>>(
    kind: u8,
    id: Option<S>,
    target: impl FnOnce() -> Result<Option<S>, DecodeError>,
) -> Result<(Option<S>, S), DecodeError> {
    let streaming = kind == message_type::STREAM_INVOCATION;
    let name = if streaming {
        "StreamInvocation"
    } else {
        "Invocation"
    };
    let id = match id {
        None if streaming => return Err(DecodeError::MissingProperty("invocationId")),
        Some(id) if streaming && id.as_ref().is_empty() => {
            return Err(DecodeError::EmptyInvocationId(name))
        }
        id => id.filter(|id| !id.as_ref().is_empty()),
    };
    let target = target()?.ok_or(DecodeError::MissingProperty("target"))?;
    if target.as_ref().is_empty() {
        return Err(DecodeError::EmptyTarget(name));
    }
    Ok((id, target))
}

/// Removes duplicate header names: a later duplicate replaces the earlier value in place.
pub(crate) fn dedupe_headers(headers: Headers) -> Headers {
    if headers.len() < 2 {
        return headers;
    }
    let mut index: std::collections::HashMap<String, usize> =
        std::collections::HashMap::with_capacity(headers.len());
    let mut out: Headers = Vec::with_capacity(headers.len());
    for (key, value) in headers {
        match index.get(&key) {
            Some(&i) => out[i].1 = value,
            None => {
                index.insert(key.clone(), out.len());
                out.push((key, value));
            }
        }
    }
    out
}
