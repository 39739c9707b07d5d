//! The JSON hub protocol: one UTF-8 JSON object per message, followed by the record
//! separator `0x1E`.
//!
//! Decoding is independent of property order (the JS client writes `type` last), skips
//! unknown properties and lets a later duplicate win. Encoding follows the ASP.NET Core
//! server's property order and omission rules, so its output is byte-identical to it for
//! the same values (payloads are written by `serde_json`: raw UTF-8, shortest round-trip
//! floats, object keys in their original order).

use serde_json::{Map, Value};

use crate::error::DecodeError;
use crate::message::{check_invocation, message_type as t, CompletionResult, Headers, HubMessage};
use crate::RECORD_SEPARATOR;

/// Decodes one message body (the JSON text, without the record separator).
pub fn decode(body: &[u8]) -> Result<HubMessage<Value>, DecodeError> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| DecodeError::Json(e.to_string()))?;
    let mut obj = match value {
        Value::Object(obj) => obj,
        other => return Err(DecodeError::NotAnObject(token_name(&other))),
    };
    let ty = match obj.get("type") {
        None => return Err(DecodeError::MissingProperty("type")),
        Some(v) => int32(v, "type")?,
    };
    let obj = &mut obj;
    match u8::try_from(ty).unwrap_or(0) {
        kind @ (t::INVOCATION | t::STREAM_INVOCATION) => invocation(obj, kind),
        t::STREAM_ITEM => stream_item(obj),
        t::COMPLETION => completion(obj),
        t::CANCEL_INVOCATION => Ok(HubMessage::CancelInvocation {
            headers: headers(obj)?,
            invocation_id: required_id(obj, "CancelInvocation")?,
        }),
        t::PING => Ok(HubMessage::Ping),
        t::CLOSE => close(obj),
        kind @ (t::ACK | t::SEQUENCE) => sequence(obj, kind),
        _ => Ok(HubMessage::Unknown { message_type: ty }),
    }
}

/// Invocation and StreamInvocation (`kind`). Every property's type is checked before
/// the required ones are looked for, as the .NET reader does.
fn invocation(obj: &mut Map<String, Value>, kind: u8) -> Result<HubMessage<Value>, DecodeError> {
    let headers = headers(obj)?;
    let id = opt_string(obj, "invocationId")?;
    let target = opt_string(obj, "target")?;
    let arguments = match obj.remove("arguments") {
        None => None,
        Some(Value::Array(items)) => Some(items),
        Some(_) => return Err(wrong_type("arguments", "Array")),
    };
    let stream_ids = stream_ids(obj)?;
    let (id, target) = check_invocation(kind, id, || Ok(target))?;
    let arguments = arguments.ok_or(DecodeError::MissingProperty("arguments"))?;
    Ok(match id {
        Some(invocation_id) if kind == t::STREAM_INVOCATION => HubMessage::StreamInvocation {
            headers,
            invocation_id,
            target,
            arguments,
            stream_ids,
        },
        invocation_id => HubMessage::Invocation {
            headers,
            invocation_id,
            target,
            arguments,
            stream_ids,
        },
    })
}

fn stream_item(obj: &mut Map<String, Value>) -> Result<HubMessage<Value>, DecodeError> {
    let headers = headers(obj)?;
    let invocation_id = required_id(obj, "StreamItem")?;
    let item = obj
        .remove("item")
        .ok_or(DecodeError::MissingProperty("item"))?;
    Ok(HubMessage::StreamItem {
        headers,
        invocation_id,
        item,
    })
}

fn completion(obj: &mut Map<String, Value>) -> Result<HubMessage<Value>, DecodeError> {
    let headers = headers(obj)?;
    let error = opt_string(obj, "error")?;
    let invocation_id = required_id(obj, "Completion")?;
    let result = match (error, obj.remove("result")) {
        // Accepted like the JS client does: a null result next to an error is
        // ignored. The .NET parser rejects this; never write it.
        (Some(error), None | Some(Value::Null)) => CompletionResult::Error(error),
        (Some(_), Some(_)) => return Err(DecodeError::ErrorAndResult),
        (None, Some(result)) => CompletionResult::Value(result),
        (None, None) => CompletionResult::Void,
    };
    Ok(HubMessage::Completion {
        headers,
        invocation_id,
        result,
    })
}

fn close(obj: &mut Map<String, Value>) -> Result<HubMessage<Value>, DecodeError> {
    let error = opt_string(obj, "error")?;
    let allow_reconnect = match obj.get("allowReconnect") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(wrong_type("allowReconnect", "Boolean")),
    };
    Ok(HubMessage::Close {
        error,
        allow_reconnect,
    })
}

/// Ack and Sequence (`kind`).
fn sequence(obj: &mut Map<String, Value>, kind: u8) -> Result<HubMessage<Value>, DecodeError> {
    let sequence_id = match obj.get("sequenceId") {
        None => return Err(DecodeError::MissingProperty("sequenceId")),
        Some(v) => int64(v, "sequenceId")?,
    };
    Ok(if kind == t::ACK {
        HubMessage::Ack { sequence_id }
    } else {
        HubMessage::Sequence { sequence_id }
    })
}

/// Encodes a message in the .NET server's property order, followed by the record separator.
pub fn encode(message: &HubMessage<Value>) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    write_message(&mut out, message);
    out.push(RECORD_SEPARATOR);
    out
}

fn write_message(out: &mut Vec<u8>, message: &HubMessage<Value>) {
    out.extend_from_slice(b"{\"type\":");
    out.extend_from_slice(message.message_type().to_string().as_bytes());
    if let Some(headers) = message.headers() {
        write_headers(out, headers);
    }
    match message {
        HubMessage::Invocation {
            target,
            arguments,
            stream_ids,
            ..
        }
        | HubMessage::StreamInvocation {
            target,
            arguments,
            stream_ids,
            ..
        } => {
            if let Some(id) = message.invocation_id().filter(|id| !id.is_empty()) {
                property(out, "invocationId", id);
            }
            property(out, "target", target);
            property(out, "arguments", arguments);
            if let Some(ids) = stream_ids {
                property(out, "streamIds", ids);
            }
        }
        HubMessage::StreamItem {
            invocation_id,
            item,
            ..
        } => {
            property(out, "invocationId", invocation_id);
            property(out, "item", item);
        }
        HubMessage::Completion {
            invocation_id,
            result,
            ..
        } => {
            property(out, "invocationId", invocation_id);
            match result {
                CompletionResult::Void => {}
                CompletionResult::Value(v) => property(out, "result", v),
                CompletionResult::Error(e) => property(out, "error", e),
            }
        }
        HubMessage::CancelInvocation { invocation_id, .. } => {
            property(out, "invocationId", invocation_id);
        }
        HubMessage::Close {
            error,
            allow_reconnect,
        } => write_close_fields(out, error.as_deref(), *allow_reconnect),
        HubMessage::Ack { sequence_id } | HubMessage::Sequence { sequence_id } => {
            property(out, "sequenceId", sequence_id);
        }
        HubMessage::Ping | HubMessage::Unknown { .. } => {}
    }
    out.push(b'}');
}

/// The Close fields after `"type":7`: `error` unless null, `allowReconnect` only when true.
pub(crate) fn write_close_fields(out: &mut Vec<u8>, error: Option<&str>, allow_reconnect: bool) {
    if let Some(error) = error {
        property(out, "error", error);
    }
    if allow_reconnect {
        out.extend_from_slice(b",\"allowReconnect\":true");
    }
}

fn write_headers(out: &mut Vec<u8>, headers: &Headers) {
    if headers.is_empty() {
        return;
    }
    out.extend_from_slice(b",\"headers\":{");
    for (i, (key, value)) in headers.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_json(out, key);
        out.push(b':');
        write_json(out, value);
    }
    out.push(b'}');
}

/// Writes `,"name":value`.
pub(crate) fn property<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, name: &str, value: &T) {
    out.push(b',');
    write_json(out, name);
    out.push(b':');
    write_json(out, value);
}

/// Serializes one value. Cannot fail for the types used here (strings, integers and
/// `serde_json::Value`, which holds only finite numbers and string keys).
pub(crate) fn write_json<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    serde_json::to_writer(&mut *out, value).expect("serializing JSON into a Vec cannot fail");
}

/// The .NET name of the JSON token type that starts `value`.
pub(crate) fn token_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "Null",
        Value::Bool(true) => "True",
        Value::Bool(false) => "False",
        Value::Number(_) => "Number",
        Value::String(_) => "String",
        Value::Array(_) => "Array",
        Value::Object(_) => "Object",
    }
}

fn wrong_type(property: &'static str, expected: &'static str) -> DecodeError {
    DecodeError::WrongType { property, expected }
}

pub(crate) fn int32(value: &Value, property: &'static str) -> Result<i32, DecodeError> {
    let n = int64(value, property)?;
    i32::try_from(n).map_err(|_| DecodeError::NotAnInteger {
        property,
        range: "Int32",
    })
}

pub(crate) fn int64(value: &Value, property: &'static str) -> Result<i64, DecodeError> {
    match value {
        Value::Number(n) => n.as_i64().ok_or(DecodeError::NotAnInteger {
            property,
            range: "Int64",
        }),
        _ => Err(wrong_type(property, "Number")),
    }
}

/// An optional string property; `null` counts as absent.
fn opt_string(
    obj: &mut Map<String, Value>,
    name: &'static str,
) -> Result<Option<String>, DecodeError> {
    match obj.remove(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(wrong_type(name, "String")),
    }
}

fn required_id(obj: &mut Map<String, Value>, kind: &'static str) -> Result<String, DecodeError> {
    match opt_string(obj, "invocationId")? {
        None => Err(DecodeError::MissingProperty("invocationId")),
        Some(id) if id.is_empty() => Err(DecodeError::EmptyInvocationId(kind)),
        Some(id) => Ok(id),
    }
}

fn headers(obj: &mut Map<String, Value>) -> Result<Headers, DecodeError> {
    match obj.remove("headers") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Object(map)) => map
            .into_iter()
            .map(|(key, value)| match value {
                Value::String(value) if !key.is_empty() => Ok((key, value)),
                Value::String(_) => Err(DecodeError::EmptyHeaderKey),
                _ => Err(DecodeError::HeaderNotString(key)),
            })
            .collect(),
        Some(_) => Err(wrong_type("headers", "Object")),
    }
}

fn stream_ids(obj: &mut Map<String, Value>) -> Result<Option<Vec<String>>, DecodeError> {
    match obj.remove("streamIds") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(items)) => items
            .into_iter()
            .map(|item| match item {
                Value::String(s) => Ok(s),
                _ => Err(wrong_type("streamIds", "Array of String")),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(_) => Err(wrong_type("streamIds", "Array")),
    }
}
