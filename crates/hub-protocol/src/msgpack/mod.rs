//! The MessagePack hub protocol: VarInt length prefix + one MessagePack array per message.
//!
//! Decoding reads the array element by element, like the .NET reader, so error texts name
//! the element that was wrong. Optional elements are decided by the array length; extra
//! trailing elements are skipped. Payload values are `rmpv::Value`, which keeps float32,
//! binary and extension types (e.g. timestamps, ext −1) for byte-exact round trips.

mod wire;

pub use wire::{read_varint, write_varint, MAX_VARINT_VALUE};

pub(crate) use wire::{write, Reader};

use crate::error::DecodeError;
use crate::message::{
    check_invocation, dedupe_headers, message_type as t, CompletionResult, Headers, HubMessage,
};

const RESULT_KIND_ERROR: i64 = 1;
const RESULT_KIND_VOID: i64 = 2;
const RESULT_KIND_VALUE: i64 = 3;

/// The array layout used when encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Layout {
    /// The ASP.NET Core server writer: Invocation/StreamInvocation always have 6 elements
    /// (an empty streamIds array when there are none); Close always has 3.
    #[default]
    DotNet,
    /// The JS client writer: the streamIds slot is omitted when `stream_ids` is `None`, and
    /// Close is `[7, error]` unless `allow_reconnect` is true.
    Js,
}

/// Decodes one message body (without the VarInt prefix).
pub fn decode(body: &[u8]) -> Result<HubMessage<rmpv::Value>, DecodeError> {
    let mut r = Elements::start(body)?;
    let ty = r.int("messageType", "Int32")?;
    let ty = i32::try_from(ty).map_err(|_| DecodeError::read("messageType", "Int32"))?;
    let message = match u8::try_from(ty).unwrap_or(0) {
        kind @ (t::INVOCATION | t::STREAM_INVOCATION) => {
            let headers = r.headers()?;
            // Nil is an empty id to the .NET reader.
            let id = Some(r.nil_or_str("invocationId")?.unwrap_or_default());
            let (id, target) = check_invocation(kind, id, || r.str("target").map(Some))?;
            let arguments = r.values("arguments")?;
            let stream_ids = r.optional_strings("streamIds")?;
            if kind == t::STREAM_INVOCATION {
                HubMessage::StreamInvocation {
                    headers,
                    invocation_id: id.unwrap_or_default().to_owned(),
                    target: target.to_owned(),
                    arguments,
                    stream_ids,
                }
            } else {
                HubMessage::Invocation {
                    headers,
                    invocation_id: id.map(str::to_owned),
                    target: target.to_owned(),
                    arguments,
                    stream_ids,
                }
            }
        }
        t::STREAM_ITEM => HubMessage::StreamItem {
            headers: r.headers()?,
            invocation_id: r.required_id("StreamItem")?,
            item: r.value("item")?,
        },
        t::COMPLETION => {
            let headers = r.headers()?;
            let invocation_id = r.required_id("Completion")?;
            let result = match r.int("resultKind", "Int32")? {
                RESULT_KIND_ERROR => CompletionResult::Error(r.str("error")?.to_owned()),
                RESULT_KIND_VOID => CompletionResult::Void,
                RESULT_KIND_VALUE => CompletionResult::Value(r.value("result")?),
                other => return Err(DecodeError::InvalidResultKind(other)),
            };
            HubMessage::Completion {
                headers,
                invocation_id,
                result,
            }
        }
        t::CANCEL_INVOCATION => HubMessage::CancelInvocation {
            headers: r.headers()?,
            invocation_id: r.required_id("CancelInvocation")?,
        },
        t::PING => HubMessage::Ping,
        t::CLOSE => HubMessage::Close {
            error: r.nil_or_str("error")?.map(str::to_owned),
            allow_reconnect: match r.left {
                0 => false,
                _ => r.bool("allowReconnect")?,
            },
        },
        t::ACK => HubMessage::Ack {
            sequence_id: r.int("sequenceId", "Int64")?,
        },
        t::SEQUENCE => HubMessage::Sequence {
            sequence_id: r.int("sequenceId", "Int64")?,
        },
        _ => HubMessage::Unknown { message_type: ty },
    };
    r.finish()?;
    Ok(message)
}

/// Encodes a message with the .NET server layout, including the VarInt prefix.
pub fn encode(message: &HubMessage<rmpv::Value>) -> Vec<u8> {
    encode_with_layout(message, Layout::DotNet)
}

/// Encodes a message with the given layout, including the VarInt prefix.
pub fn encode_with_layout(message: &HubMessage<rmpv::Value>, layout: Layout) -> Vec<u8> {
    frame(|out| write_message(out, message, layout, write::value))
}

/// Encodes a message whose payload values are JSON (converted the plain way, see
/// [`json_to_msgpack`]) with the .NET layout, including the VarInt prefix.
pub fn encode_json_message(message: &HubMessage<serde_json::Value>) -> Vec<u8> {
    frame(|out| write_message(out, message, Layout::DotNet, write::json))
}

/// Converts a JSON value to MessagePack the plain way: integers stay integers (smallest
/// format), every other number becomes float64, objects become string-keyed maps.
/// No typed markers are interpreted.
pub fn json_to_msgpack(value: &serde_json::Value) -> rmpv::Value {
    use serde_json::Value as J;
    match value {
        J::Null => rmpv::Value::Nil,
        J::Bool(b) => rmpv::Value::Boolean(*b),
        J::Number(n) => {
            if let Some(u) = n.as_u64() {
                rmpv::Value::from(u)
            } else if let Some(i) = n.as_i64() {
                rmpv::Value::from(i)
            } else {
                rmpv::Value::F64(n.as_f64().unwrap_or(0.0))
            }
        }
        J::String(s) => rmpv::Value::from(s.as_str()),
        J::Array(items) => rmpv::Value::Array(items.iter().map(json_to_msgpack).collect()),
        J::Object(map) => rmpv::Value::Map(
            map.iter()
                .map(|(k, v)| (rmpv::Value::from(k.as_str()), json_to_msgpack(v)))
                .collect(),
        ),
    }
}

/// Builds one framed message: writes the body, then prepends the VarInt prefix.
pub(crate) fn frame(body: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut payload = Vec::with_capacity(64);
    body(&mut payload);
    let mut out = Vec::with_capacity(payload.len() + 5);
    write_varint(payload.len(), &mut out);
    out.extend_from_slice(&payload);
    out
}

fn write_message<V>(
    out: &mut Vec<u8>,
    message: &HubMessage<V>,
    layout: Layout,
    value: fn(&mut Vec<u8>, &V),
) {
    match message {
        HubMessage::Invocation {
            headers,
            target,
            arguments,
            stream_ids,
            ..
        }
        | HubMessage::StreamInvocation {
            headers,
            target,
            arguments,
            stream_ids,
            ..
        } => {
            let id = message.invocation_id();
            let six = layout == Layout::DotNet || stream_ids.is_some();
            write::array_len(out, if six { 6 } else { 5 });
            write::uint(out, message.message_type() as u64);
            write::headers(out, headers);
            write::nil_or_str(out, id);
            write::str(out, target);
            write::array_len(out, arguments.len());
            for arg in arguments {
                value(out, arg);
            }
            if six {
                write::strings(out, stream_ids.as_deref().unwrap_or(&[]));
            }
        }
        HubMessage::StreamItem {
            headers,
            invocation_id,
            item,
        } => {
            write::array_len(out, 4);
            write::uint(out, u64::from(t::STREAM_ITEM));
            write::headers(out, headers);
            write::str(out, invocation_id);
            value(out, item);
        }
        HubMessage::Completion {
            headers,
            invocation_id,
            result,
        } => write_completion(out, headers, invocation_id, result, value),
        HubMessage::CancelInvocation {
            headers,
            invocation_id,
        } => {
            write::array_len(out, 3);
            write::uint(out, u64::from(t::CANCEL_INVOCATION));
            write::headers(out, headers);
            write::str(out, invocation_id);
        }
        HubMessage::Ping => {
            write::array_len(out, 1);
            write::uint(out, u64::from(t::PING));
        }
        HubMessage::Close {
            error,
            allow_reconnect,
        } => write_close(out, error.as_deref(), *allow_reconnect, layout),
        HubMessage::Ack { sequence_id } | HubMessage::Sequence { sequence_id } => {
            write::array_len(out, 2);
            write::int(out, i64::from(message.message_type()));
            write::int(out, *sequence_id);
        }
        HubMessage::Unknown { message_type } => {
            write::array_len(out, 1);
            write::int(out, i64::from(*message_type));
        }
    }
}

fn write_completion<V>(
    out: &mut Vec<u8>,
    headers: &Headers,
    invocation_id: &str,
    result: &CompletionResult<V>,
    value: fn(&mut Vec<u8>, &V),
) {
    let len = if matches!(result, CompletionResult::Void) {
        4
    } else {
        5
    };
    write::array_len(out, len);
    write::uint(out, u64::from(t::COMPLETION));
    write::headers(out, headers);
    write::str(out, invocation_id);
    match result {
        CompletionResult::Error(e) => {
            write::int(out, RESULT_KIND_ERROR);
            write::str(out, e);
        }
        CompletionResult::Void => write::int(out, RESULT_KIND_VOID),
        CompletionResult::Value(v) => {
            write::int(out, RESULT_KIND_VALUE);
            value(out, v);
        }
    }
}

pub(crate) fn write_close(
    out: &mut Vec<u8>,
    error: Option<&str>,
    allow_reconnect: bool,
    layout: Layout,
) {
    let three = layout == Layout::DotNet || allow_reconnect;
    write::array_len(out, if three { 3 } else { 2 });
    write::uint(out, u64::from(t::CLOSE));
    write::nil_or_str(out, error);
    if three {
        write::bool(out, allow_reconnect);
    }
}

/// Reads the elements of the top-level array in order, like the .NET reader: a required
/// element is read even when the declared array length is used up (so that the error names
/// the element that is wrong or missing), but such a message is rejected in the end.
/// Optional elements are present only when the declared length says so.
pub(crate) struct Elements<'a> {
    reader: Reader<'a>,
    declared: usize,
    /// Declared elements not read yet.
    pub(crate) left: usize,
    /// A required element was read beyond the declared length.
    overrun: bool,
}

impl<'a> Elements<'a> {
    pub(crate) fn start(body: &'a [u8]) -> Result<Self, DecodeError> {
        let mut reader = Reader::new(body);
        let left = reader.array_len().ok_or(DecodeError::ReadLength {
            kind: "array",
            field: "elementCount",
        })?;
        Ok(Elements {
            reader,
            declared: left,
            left,
            overrun: false,
        })
    }

    /// Accounts for one required element.
    fn next(&mut self) {
        match self.left {
            0 => self.overrun = true,
            _ => self.left -= 1,
        }
    }

    pub(crate) fn int(&mut self, field: &str, expected: &'static str) -> Result<i64, DecodeError> {
        self.next();
        self.reader
            .int()
            .ok_or_else(|| DecodeError::read(field, expected))
    }

    pub(crate) fn bool(&mut self, field: &str) -> Result<bool, DecodeError> {
        self.next();
        self.reader
            .bool()
            .ok_or_else(|| DecodeError::read(field, "Boolean"))
    }

    pub(crate) fn str(&mut self, field: &str) -> Result<&'a str, DecodeError> {
        self.next();
        self.reader
            .str()
            .ok_or_else(|| DecodeError::read(field, "String"))
    }

    pub(crate) fn nil_or_str(&mut self, field: &str) -> Result<Option<&'a str>, DecodeError> {
        self.next();
        self.reader
            .nil_or_str()
            .ok_or_else(|| DecodeError::read(field, "String"))
    }

    pub(crate) fn required_id(&mut self, kind: &'static str) -> Result<String, DecodeError> {
        match self.nil_or_str("invocationId")? {
            Some(id) if !id.is_empty() => Ok(id.to_owned()),
            _ => Err(DecodeError::EmptyInvocationId(kind)),
        }
    }

    pub(crate) fn value(&mut self, field: &'static str) -> Result<rmpv::Value, DecodeError> {
        self.next();
        self.reader
            .value()
            .map_err(|detail| DecodeError::Value { field, detail })
    }

    pub(crate) fn headers(&mut self) -> Result<Headers, DecodeError> {
        let length_error = DecodeError::ReadLength {
            kind: "map",
            field: "headers",
        };
        self.next();
        let count = self.reader.map_len().ok_or(length_error)?;
        let mut headers = Vec::with_capacity(count.min(16));
        for i in 0..count {
            let key = self
                .reader
                .str()
                .ok_or_else(|| DecodeError::read(format!("headers[{i}].Key"), "String"))?;
            if key.is_empty() {
                return Err(DecodeError::EmptyHeaderKey);
            }
            let value = self
                .reader
                .str()
                .ok_or_else(|| DecodeError::read(format!("headers[{i}].Value"), "String"))?;
            headers.push((key.to_owned(), value.to_owned()));
        }
        Ok(dedupe_headers(headers))
    }

    pub(crate) fn values(&mut self, field: &'static str) -> Result<Vec<rmpv::Value>, DecodeError> {
        let length_error = DecodeError::ReadLength {
            kind: "array",
            field,
        };
        self.next();
        let count = self.reader.array_len().ok_or(length_error)?;
        // Every element needs at least one byte: cap the preallocation by what is left.
        let mut values = Vec::with_capacity(count.min(self.reader.remaining()));
        for _ in 0..count {
            let value = self
                .reader
                .value()
                .map_err(|detail| DecodeError::Value { field, detail })?;
            values.push(value);
        }
        Ok(values)
    }

    /// An optional trailing array of strings (streamIds): `None` when the slot is absent.
    pub(crate) fn optional_strings(
        &mut self,
        field: &'static str,
    ) -> Result<Option<Vec<String>>, DecodeError> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        let count = self.reader.array_len().ok_or(DecodeError::ReadLength {
            kind: "array",
            field,
        })?;
        let mut items = Vec::with_capacity(count.min(self.reader.remaining()));
        for i in 0..count {
            let s = self
                .reader
                .str()
                .ok_or_else(|| DecodeError::read(format!("{field}[{i}]"), "String"))?;
            items.push(s.to_owned());
        }
        Ok(Some(items))
    }

    /// Fails if a required element was read beyond the declared array length.
    pub(crate) fn check_count(&self) -> Result<(), DecodeError> {
        match self.overrun {
            true => Err(DecodeError::TooFewElements(self.declared)),
            false => Ok(()),
        }
    }

    /// Skips elements a newer peer may have added, then insists the body is used up.
    pub(crate) fn finish(mut self) -> Result<(), DecodeError> {
        while self.left > 0 {
            self.left -= 1;
            self.reader.skip().ok_or(DecodeError::Value {
                field: "extra element",
                detail: "truncated or malformed value".to_owned(),
            })?;
        }
        self.check_count()?;
        match self.reader.remaining() {
            0 => Ok(()),
            n => Err(DecodeError::TrailingBytes(n)),
        }
    }
}
