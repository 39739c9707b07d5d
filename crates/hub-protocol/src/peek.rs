//! A cheap look at one message body: its type and routing fields, without decoding the
//! payload (arguments, item, result are skipped, never materialised).

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::error::DecodeError;
use crate::message::{check_invocation, message_type as t};
use crate::msgpack::Elements;
use crate::Format;

/// What [`peek`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Peek {
    /// The wire type; types outside `0..=255` are reported as 0 (unknown, like any type
    /// other than 1 to 9, and to be ignored).
    pub message_type: u8,
    /// Invocation (1): the id, `None` = non-blocking. StreamItem, Completion,
    /// StreamInvocation, CancelInvocation (2 to 5): the id, always `Some`.
    pub invocation_id: Option<String>,
    /// Invocation and StreamInvocation: the hub method name.
    pub target: Option<String>,
    /// Close: the error, if any (`Some("")` is an error too). Completion: the error text
    /// of a failed invocation.
    pub error: Option<String>,
    /// Close: whether the peer may reconnect.
    pub allow_reconnect: bool,
    /// Ack and Sequence: the sequence id.
    pub sequence_id: Option<i64>,
}

/// Looks at a single message body (framing excluded). The fields it reports and the
/// presence of required fields are validated like [`json::decode`](crate::json::decode) and
/// [`msgpack::decode`](crate::msgpack::decode) do; payload values are skipped unchecked.
pub fn peek(format: Format, body: &[u8]) -> Result<Peek, DecodeError> {
    match format {
        Format::Json => peek_json(body),
        Format::MessagePack => peek_msgpack(body),
    }
}

fn peek_msgpack(body: &[u8]) -> Result<Peek, DecodeError> {
    let mut r = Elements::start(body)?;
    let ty = r.int("messageType", "Int32")?;
    let ty = i32::try_from(ty).map_err(|_| DecodeError::read("messageType", "Int32"))?;
    let mut peek = Peek {
        message_type: u8::try_from(ty).unwrap_or(0),
        ..Peek::default()
    };
    match peek.message_type {
        kind @ (t::INVOCATION | t::STREAM_INVOCATION) => {
            r.headers()?;
            // Nil is an empty id to the .NET reader.
            let id = Some(r.nil_or_str("invocationId")?.unwrap_or_default());
            let (id, target) = check_invocation(kind, id, || r.str("target").map(Some))?;
            if r.left == 0 {
                return Err(DecodeError::ReadLength {
                    kind: "array",
                    field: "arguments",
                });
            }
            peek.invocation_id = id.map(str::to_owned);
            peek.target = Some(target.to_owned());
        }
        t::STREAM_ITEM | t::COMPLETION | t::CANCEL_INVOCATION => {
            r.headers()?;
            let kind = match peek.message_type {
                t::STREAM_ITEM => "StreamItem",
                t::COMPLETION => "Completion",
                _ => "CancelInvocation",
            };
            peek.invocation_id = Some(r.required_id(kind)?);
            if peek.message_type == t::STREAM_ITEM && r.left == 0 {
                return Err(DecodeError::read("item", "Object"));
            }
            if peek.message_type == t::COMPLETION {
                match r.int("resultKind", "Int32")? {
                    1 => peek.error = Some(r.str("error")?.to_owned()),
                    2 => {}
                    3 if r.left > 0 => {}
                    3 => return Err(DecodeError::read("result", "Object")),
                    other => return Err(DecodeError::InvalidResultKind(other)),
                }
            }
        }
        t::CLOSE => {
            peek.error = r.nil_or_str("error")?.map(str::to_owned);
            peek.allow_reconnect = r.left > 0 && r.bool("allowReconnect")?;
        }
        t::ACK | t::SEQUENCE => peek.sequence_id = Some(r.int("sequenceId", "Int64")?),
        _ => {}
    }
    r.check_count()?;
    Ok(peek)
}

fn peek_json(body: &[u8]) -> Result<Peek, DecodeError> {
    let raw = json_properties(body)?;
    let ty = raw.ty.ok_or(DecodeError::MissingProperty("type"))?;
    let ty = crate::json::int32(&ty, "type")?;
    let mut peek = Peek {
        message_type: u8::try_from(ty).unwrap_or(0),
        ..Peek::default()
    };
    // Like `json::decode`, headers and invocationId are only read for the types that
    // carry them: any other type (Ping, Close, unknown, …) ignores them whatever they hold.
    let mut invocation_id = None;
    if crate::message::is_trackable_type(ty) {
        check_headers(raw.headers)?;
        invocation_id = opt_string(raw.invocation_id, "invocationId")?;
    }
    match peek.message_type {
        kind @ (t::INVOCATION | t::STREAM_INVOCATION) => {
            let target = opt_string(raw.target, "target")?;
            if raw.arguments.is_some_and(|shape| shape != "Array") {
                return Err(DecodeError::WrongType {
                    property: "arguments",
                    expected: "Array",
                });
            }
            let (id, target) = check_invocation(kind, invocation_id, || Ok(target))?;
            if raw.arguments.is_none() {
                return Err(DecodeError::MissingProperty("arguments"));
            }
            peek.invocation_id = id;
            peek.target = Some(target);
        }
        t::STREAM_ITEM | t::COMPLETION | t::CANCEL_INVOCATION => {
            let kind = match peek.message_type {
                t::STREAM_ITEM => "StreamItem",
                t::COMPLETION => "Completion",
                _ => "CancelInvocation",
            };
            if peek.message_type == t::COMPLETION {
                peek.error = opt_string(raw.error, "error")?;
            }
            peek.invocation_id = match invocation_id {
                None => return Err(DecodeError::MissingProperty("invocationId")),
                Some(id) if id.is_empty() => return Err(DecodeError::EmptyInvocationId(kind)),
                id => id,
            };
            if peek.message_type == t::STREAM_ITEM && raw.item.is_none() {
                return Err(DecodeError::MissingProperty("item"));
            }
            if peek.error.is_some() && raw.result.is_some_and(|shape| shape != "Null") {
                return Err(DecodeError::ErrorAndResult);
            }
        }
        t::CLOSE => {
            peek.error = opt_string(raw.error, "error")?;
            peek.allow_reconnect = allow_reconnect(raw.allow_reconnect)?;
        }
        t::ACK | t::SEQUENCE => {
            let id = raw
                .sequence_id
                .ok_or(DecodeError::MissingProperty("sequenceId"))?;
            peek.sequence_id = Some(crate::json::int64(&id, "sequenceId")?);
        }
        _ => {}
    }
    Ok(peek)
}

/// Parses the body in one pass, keeping the properties peek looks at. Skipped values are
/// not checked by serde_json, but ASP.NET's reader refuses invalid UTF-8 anywhere in a
/// message, so it is refused here too before it is passed on.
fn json_properties(body: &[u8]) -> Result<Box<Raw>, DecodeError> {
    if let Err(e) = std::str::from_utf8(body) {
        return Err(DecodeError::Json(format!(
            "invalid unicode: not UTF-8 at byte {}",
            e.valid_up_to()
        )));
    }
    let json_error = |e: serde_json::Error| DecodeError::Json(e.to_string());
    let mut de = serde_json::Deserializer::from_slice(body);
    let top = Deserializer::deserialize_any(&mut de, ShapeVisitor { collect: true });
    let raw = match top.map_err(json_error)? {
        Top::Object(raw) => raw,
        Top::Other(token) => {
            de.end().map_err(json_error)?;
            return Err(DecodeError::NotAnObject(token));
        }
    };
    de.end().map_err(json_error)?;
    Ok(raw)
}

fn allow_reconnect(value: Option<Value>) -> Result<bool, DecodeError> {
    match value {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(b),
        Some(_) => Err(DecodeError::WrongType {
            property: "allowReconnect",
            expected: "Boolean",
        }),
    }
}

fn check_headers(headers: Option<Value>) -> Result<(), DecodeError> {
    match headers {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Object(map)) => map.into_iter().try_for_each(|(key, value)| match value {
            Value::String(_) if !key.is_empty() => Ok(()),
            Value::String(_) => Err(DecodeError::EmptyHeaderKey),
            _ => Err(DecodeError::HeaderNotString(key)),
        }),
        Some(_) => Err(DecodeError::WrongType {
            property: "headers",
            expected: "Object",
        }),
    }
}

fn opt_string(value: Option<Value>, property: &'static str) -> Result<Option<String>, DecodeError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(DecodeError::WrongType {
            property,
            expected: "String",
        }),
    }
}

/// The properties peek looks at. Small scalar properties are kept as values; payloads are
/// reduced to the name of their JSON token type.
#[derive(Default)]
struct Raw {
    ty: Option<Value>,
    headers: Option<Value>,
    invocation_id: Option<Value>,
    target: Option<Value>,
    error: Option<Value>,
    allow_reconnect: Option<Value>,
    sequence_id: Option<Value>,
    arguments: Option<&'static str>,
    item: Option<&'static str>,
    result: Option<&'static str>,
}

enum Top {
    Object(Box<Raw>),
    Other(&'static str),
}

enum Key {
    Type,
    Headers,
    InvocationId,
    Target,
    Error,
    AllowReconnect,
    SequenceId,
    Arguments,
    Item,
    Result,
    Other,
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a property name")
            }
            fn visit_str<E: de::Error>(self, name: &str) -> Result<Key, E> {
                Ok(match name {
                    "type" => Key::Type,
                    "headers" => Key::Headers,
                    "invocationId" => Key::InvocationId,
                    "target" => Key::Target,
                    "error" => Key::Error,
                    "allowReconnect" => Key::AllowReconnect,
                    "sequenceId" => Key::SequenceId,
                    "arguments" => Key::Arguments,
                    "item" => Key::Item,
                    "result" => Key::Result,
                    _ => Key::Other,
                })
            }
        }
        deserializer.deserialize_identifier(KeyVisitor)
    }
}

/// Visits any JSON value; objects are collected into [`Raw`] (top level) or skipped
/// (nested, `collect == false`), everything else is reduced to its token type name.
struct ShapeVisitor {
    collect: bool,
}

/// The token type name of a skipped JSON value.
struct Shape(&'static str);

impl<'de> Deserialize<'de> for Shape {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match deserializer.deserialize_any(ShapeVisitor { collect: false })? {
            Top::Other(name) => Ok(Shape(name)),
            Top::Object(_) => Ok(Shape("Object")),
        }
    }
}

impl<'de> Visitor<'de> for ShapeVisitor {
    type Value = Top;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Top, E> {
        Ok(Top::Other(if v { "True" } else { "False" }))
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Top, E> {
        Ok(Top::Other("Number"))
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Top, E> {
        Ok(Top::Other("Number"))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Top, E> {
        Ok(Top::Other("Number"))
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Top, E> {
        Ok(Top::Other("String"))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Top, E> {
        Ok(Top::Other("Null"))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Top, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Top::Other("Array"))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Top, A::Error> {
        if !self.collect {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            return Ok(Top::Object(Box::default()));
        }
        let mut raw = Box::<Raw>::default();
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Type => raw.ty = Some(map.next_value()?),
                Key::Headers => raw.headers = Some(map.next_value()?),
                Key::InvocationId => raw.invocation_id = Some(map.next_value()?),
                Key::Target => raw.target = Some(map.next_value()?),
                Key::Error => raw.error = Some(map.next_value()?),
                Key::AllowReconnect => raw.allow_reconnect = Some(map.next_value()?),
                Key::SequenceId => raw.sequence_id = Some(map.next_value()?),
                Key::Arguments => raw.arguments = Some(map.next_value::<Shape>()?.0),
                Key::Item => raw.item = Some(map.next_value::<Shape>()?.0),
                Key::Result => raw.result = Some(map.next_value::<Shape>()?.0),
                Key::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Top::Object(raw))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_with_invalid_utf8_anywhere_is_refused() {
        for body in [
            &b"{\"type\":1,\"target\":\"t\",\"arguments\":[\"\xFF\"]}"[..],
            b"{\"type\":6,\"unknown\":\"\xC3\x28\"}",
            b"{\"type\":3,\"invocationId\":\"1\",\"result\":{\"k\":\"\xED\xA0\x80\"}}",
        ] {
            match peek(Format::Json, body) {
                Err(DecodeError::Json(text)) => {
                    assert!(text.starts_with("invalid unicode"), "{text}")
                }
                other => panic!("expected a JSON error, got {other:?}"),
            }
            assert!(crate::json::decode(body).is_err(), "decode refuses it too");
        }
    }

    /// Found by the `hub_frames_json` fuzz target: peek rejected a non-string
    /// `invocationId` on message types that have none, where `json::decode` ignores it.
    #[test]
    fn json_invocation_id_is_ignored_on_types_without_one() {
        for (body, ty) in [
            (&br#"{"type":0,"invocationId":42}"#[..], 0),
            (br#"{"type":6,"invocationId":[]}"#, 6),
            (br#"{"type":7,"invocationId":{},"error":"e"}"#, 7),
            (br#"{"type":8,"invocationId":true,"sequenceId":3}"#, 8),
            (br#"{"type":99,"invocationId":1.5}"#, 99),
        ] {
            let decoded = crate::json::decode(body).expect("decode ignores it");
            let peeked = peek(Format::Json, body).expect("peek ignores it too");
            assert_eq!(decoded.message_type(), i32::from(ty));
            assert_eq!(peeked.message_type, ty);
            assert_eq!(peeked.invocation_id, None);
        }
        // Types that carry an id still insist on a string.
        let err = peek(Format::Json, br#"{"type":5,"invocationId":42}"#).unwrap_err();
        assert_eq!(
            err,
            crate::json::decode(br#"{"type":5,"invocationId":42}"#).unwrap_err()
        );
    }
}
