//! Send bodies: a JSON `{"target":…,"arguments":[…]}` or a MessagePack payloads map.

use axum::body::Body;
use axum::http::{header, HeaderMap};
use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde_json::Value;
use switchyard_core::Protocol;
use switchyard_hub_protocol::{Format, FrameSplitter};

use super::error::RestError;

/// What a send request asks to deliver.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum SendBody {
    /// A JSON body: the service encodes the invocation for each protocol in use.
    Invocation {
        target: String,
        arguments: Vec<Value>,
    },
    /// A MessagePack body: complete framed hub messages, per protocol name, sent as they are.
    Payloads(Vec<(String, Bytes)>),
}

/// Reads at most `limit` bytes of body (413 beyond) and parses it by `Content-Type`:
/// `application/x-msgpack`, `application/msgpack` and `application/octet-stream` are payload
/// maps; anything else (including no type) is parsed as JSON.
pub(crate) async fn read(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
) -> Result<SendBody, RestError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit as u64) {
        return Err(RestError::PayloadTooLarge(limit));
    }
    let bytes = match Limited::new(body, limit).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(error) if error.downcast_ref::<LengthLimitError>().is_some() => {
            return Err(RestError::PayloadTooLarge(limit))
        }
        Err(error) => {
            return Err(RestError::BadRequest(format!(
                "failed to read the request body: {error}"
            )))
        }
    };
    if is_msgpack(headers) {
        parse_payloads(&bytes).map(SendBody::Payloads)
    } else {
        parse_invocation(&bytes)
    }
}

fn is_msgpack(headers: &HeaderMap) -> bool {
    let Some(value) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let mime = value.split(';').next().unwrap_or("").trim();
    [
        "application/x-msgpack",
        "application/msgpack",
        "application/octet-stream",
    ]
    .iter()
    .any(|m| mime.eq_ignore_ascii_case(m))
}

/// `{"target": "method", "arguments": [...]}` with property names matched ignoring case
/// (the .NET SDK writes `Target`/`Arguments`). `arguments` may be absent or null.
pub(crate) fn parse_invocation(bytes: &[u8]) -> Result<SendBody, RestError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(RestError::BadRequest(
            "a JSON body {\"target\":\"method\",\"arguments\":[…]} is required".into(),
        ));
    }
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|e| RestError::BadRequest(format!("the body is not valid JSON: {e}")))?;
    let Value::Object(mut object) = value else {
        return Err(RestError::BadRequest(
            "the body must be a JSON object {\"target\":\"method\",\"arguments\":[…]}".into(),
        ));
    };
    let mut take = |name: &str| {
        let key = object
            .keys()
            .find(|k| k.eq_ignore_ascii_case(name))
            .cloned();
        key.and_then(|k| object.remove(&k))
    };
    let target = match take("target") {
        Some(Value::String(target)) if !target.is_empty() => target,
        Some(Value::String(_)) => {
            return Err(RestError::BadRequest("'target' must not be empty".into()))
        }
        None | Some(Value::Null) => {
            return Err(RestError::BadRequest("'target' is required".into()))
        }
        Some(_) => return Err(RestError::BadRequest("'target' must be a string".into())),
    };
    let arguments = match take("arguments") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(arguments)) => arguments,
        Some(_) => return Err(RestError::BadRequest("'arguments' must be an array".into())),
    };
    Ok(SendBody::Invocation { target, arguments })
}

/// A MessagePack map `protocol name (str) → framed hub message(s) (bin)`, the body the .NET
/// SDK sends. Payloads for `json` and `messagepack` must consist of complete frames.
pub(crate) fn parse_payloads(bytes: &[u8]) -> Result<Vec<(String, Bytes)>, RestError> {
    let bad =
        |why: &str| RestError::BadRequest(format!("invalid MessagePack payloads body: {why}"));
    let mut cursor = bytes;
    let value = rmpv::decode::read_value(&mut cursor).map_err(|e| bad(&e.to_string()))?;
    if !cursor.is_empty() {
        return Err(bad("unexpected bytes after the map"));
    }
    let rmpv::Value::Map(entries) = value else {
        return Err(bad("expected a map of protocol name to binary payload"));
    };
    if entries.is_empty() {
        return Err(bad("the map has no payloads"));
    }
    let mut payloads = Vec::with_capacity(entries.len());
    for (key, value) in entries {
        let name = match key {
            rmpv::Value::String(name) => name
                .into_str()
                .filter(|n| !n.is_empty())
                .ok_or_else(|| bad("protocol names must be non-empty UTF-8 strings"))?,
            _ => return Err(bad("protocol names must be strings")),
        };
        let rmpv::Value::Binary(payload) = value else {
            return Err(bad(&format!("the payload for '{name}' must be binary")));
        };
        if let Some(format) = Format::from_protocol(&Protocol::from_name(&name)) {
            if !is_complete_frames(format, &payload) {
                return Err(bad(&format!(
                    "the payload for '{name}' is not a sequence of complete {} frames",
                    format.name()
                )));
            }
        }
        payloads.push((name, Bytes::from(payload)));
    }
    Ok(payloads)
}

fn is_complete_frames(format: Format, payload: &[u8]) -> bool {
    let mut buf = BytesMut::from(payload);
    match FrameSplitter::new(format, usize::MAX).split_all(&mut buf) {
        Ok(frames) => !frames.is_empty() && buf.is_empty(),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_property_names_ignore_case() {
        let body = parse_invocation(br#"{"Target":"hello","Arguments":[1,"a"]}"#).unwrap();
        assert_eq!(
            body,
            SendBody::Invocation {
                target: "hello".into(),
                arguments: vec![serde_json::json!(1), serde_json::json!("a")],
            }
        );
    }

    #[test]
    fn json_arguments_default_to_empty() {
        let body = parse_invocation(br#"{"target":"t"}"#).unwrap();
        assert_eq!(
            body,
            SendBody::Invocation {
                target: "t".into(),
                arguments: vec![],
            }
        );
        assert!(parse_invocation(br#"{"target":"t","arguments":null}"#).is_ok());
    }

    #[test]
    fn json_errors() {
        for body in [
            &b""[..],
            b"  ",
            b"{",
            b"[]",
            br#"{"arguments":[]}"#,
            br#"{"target":""}"#,
            br#"{"target":5}"#,
            br#"{"target":"t","arguments":{}}"#,
        ] {
            assert!(
                matches!(parse_invocation(body), Err(RestError::BadRequest(_))),
                "{:?}",
                String::from_utf8_lossy(body)
            );
        }
    }

    fn encode(value: &rmpv::Value) -> Vec<u8> {
        let mut out = Vec::new();
        rmpv::encode::write_value(&mut out, value).unwrap();
        out
    }

    #[test]
    fn payload_map() {
        let json = b"{\"type\":1,\"target\":\"t\",\"arguments\":[]}\x1e".to_vec();
        let msgpack = vec![0x02, 0x91, 0x06];
        let body = encode(&rmpv::Value::Map(vec![
            (rmpv::Value::from("json"), rmpv::Value::Binary(json.clone())),
            (
                rmpv::Value::from("messagepack"),
                rmpv::Value::Binary(msgpack.clone()),
            ),
        ]));
        let payloads = parse_payloads(&body).unwrap();
        assert_eq!(
            payloads,
            vec![
                ("json".to_string(), Bytes::from(json)),
                ("messagepack".to_string(), Bytes::from(msgpack)),
            ]
        );
    }

    #[test]
    fn payload_map_errors() {
        let unframed_json = encode(&rmpv::Value::Map(vec![(
            rmpv::Value::from("json"),
            rmpv::Value::Binary(b"{\"type\":6}".to_vec()),
        )]));
        let truncated_msgpack = encode(&rmpv::Value::Map(vec![(
            rmpv::Value::from("messagepack"),
            rmpv::Value::Binary(vec![0x05, 0x91]),
        )]));
        let not_binary = encode(&rmpv::Value::Map(vec![(
            rmpv::Value::from("json"),
            rmpv::Value::from("text"),
        )]));
        let not_map = encode(&rmpv::Value::from(1));
        let empty = encode(&rmpv::Value::Map(vec![]));
        for body in [
            unframed_json,
            truncated_msgpack,
            not_binary,
            not_map,
            empty,
            vec![0xc1],
        ] {
            assert!(parse_payloads(&body).is_err(), "{body:?}");
        }
    }
}
