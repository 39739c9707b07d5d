//! Hub messages as this client hands them out: MessagePack values as JSON values.

use base64::Engine;
use serde_json::Value;
use switchyard_hub_protocol::{json, msgpack, Format, HubMessage};

use crate::ClientError;

/// Decodes one body; MessagePack values are converted to JSON values.
pub fn decode(format: Format, body: &[u8]) -> Result<HubMessage<Value>, ClientError> {
    match format {
        Format::Json => json::decode(body).map_err(|e| ClientError::Protocol(e.to_string())),
        Format::MessagePack => msgpack::decode(body)
            .map(|m| m.map_values(|v| msgpack_to_json(&v)))
            .map_err(|e| ClientError::Protocol(e.to_string())),
    }
}

/// A lossy view of a MessagePack value as JSON (binary as base64, ext as null).
pub fn msgpack_to_json(value: &rmpv::Value) -> Value {
    use rmpv::Value as M;
    match value {
        M::Nil => Value::Null,
        M::Boolean(b) => Value::Bool(*b),
        M::Integer(i) => i
            .as_i64()
            .map(Value::from)
            .or_else(|| i.as_u64().map(Value::from))
            .unwrap_or(Value::Null),
        M::F32(f) => serde_json::Number::from_f64(f64::from(*f)).map_or(Value::Null, Value::Number),
        M::F64(f) => serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number),
        M::String(s) => Value::String(s.as_str().unwrap_or_default().to_string()),
        M::Binary(b) => Value::String(base64::engine::general_purpose::STANDARD.encode(b)),
        M::Array(items) => Value::Array(items.iter().map(msgpack_to_json).collect()),
        M::Map(pairs) => Value::Object(
            pairs
                .iter()
                .map(|(k, v)| {
                    let key = match k {
                        M::String(s) => s.as_str().unwrap_or_default().to_string(),
                        other => other.to_string(),
                    };
                    (key, msgpack_to_json(v))
                })
                .collect(),
        ),
        M::Ext(_, _) => Value::Null,
    }
}
