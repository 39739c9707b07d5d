//! What the load generator puts on the wire and reads back, without I/O.
//!
//! Every measured message is `Measure(ts, payload)` at the receiver (the benchmark hub and
//! the REST body both pass `(ts, payload)` through unchanged). `ts` is the intended send
//! time in milliseconds since the UNIX epoch (a float, so µs survive), and `payload` starts
//! with `{sender}.{seq}.{step}.` and is padded with `x` to the message size. The prefix
//! is what makes loss, duplicates and reordering countable per sender, across processes.

use std::borrow::Cow;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::Value;
use switchyard_hub_protocol::{encode_message, Format, HubMessage};

/// The method clients receive.
pub const MEASURE: &str = "Measure";

/// The payload string: prefix, then `x` up to `size` bytes (longer if the prefix is).
pub fn payload(padding: &str, sender: u32, seq: u64, step: u32) -> String {
    use std::fmt::Write;
    let mut text = String::with_capacity(padding.len().max(32));
    let _ = write!(text, "{sender}.{seq}.{step}.");
    if text.len() < padding.len() {
        text.push_str(&padding[text.len()..]);
    }
    text
}

/// What a payload prefix says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tag {
    pub sender: u32,
    pub seq: u64,
    pub step: u32,
}

/// Parses the `{sender}.{seq}.{step}.` prefix.
pub fn parse_tag(payload: &str) -> Option<Tag> {
    let mut parts = payload.splitn(4, '.');
    let sender = parts.next()?.parse().ok()?;
    let seq = parts.next()?.parse().ok()?;
    let step = parts.next()?.parse().ok()?;
    parts.next()?;
    Some(Tag { sender, seq, step })
}

/// One framed invocation (`invocation_id` `None` = fire and forget).
pub fn invocation(
    format: Format,
    target: &str,
    invocation_id: Option<String>,
    arguments: Vec<Value>,
) -> Bytes {
    encode_message(
        format,
        &HubMessage::Invocation {
            headers: Vec::new(),
            invocation_id,
            target: target.to_owned(),
            arguments,
            stream_ids: None,
        },
    )
}

/// A received hub message, as far as the benchmark cares.
#[derive(Debug, PartialEq)]
pub enum Received<'a> {
    /// `Measure(ts, payload)`.
    Measure {
        ts_ms: f64,
        payload: Cow<'a, str>,
    },
    /// A Completion: `error` set for an error completion.
    Completion {
        invocation_id: String,
        error: Option<String>,
    },
    Ping,
    /// Close from the server.
    Close {
        error: Option<String>,
    },
    /// Anything else (named for the error report).
    Other(String),
}

/// Decodes one message body (no separator / length prefix). `Measure` is read without
/// copying its payload for JSON; everything else goes through the general decoder.
pub fn decode(format: Format, body: &[u8]) -> Result<Received<'_>, String> {
    match format {
        Format::Json => decode_json(body),
        Format::MessagePack => decode_msgpack(body),
    }
}

#[derive(Deserialize)]
struct JsonMessage<'a> {
    #[serde(rename = "type")]
    kind: u8,
    // Borrowed: a string with escapes fails here and takes the general path.
    #[serde(borrow, default)]
    target: Option<&'a str>,
    #[serde(borrow, default)]
    arguments: Option<(f64, &'a str)>,
}

fn decode_json(body: &[u8]) -> Result<Received<'_>, String> {
    if let Ok(message) = serde_json::from_slice::<JsonMessage<'_>>(body) {
        if message.kind == 1 && message.target == Some(MEASURE) {
            if let Some((ts_ms, payload)) = message.arguments {
                return Ok(Received::Measure {
                    ts_ms,
                    payload: Cow::Borrowed(payload),
                });
            }
        }
    }
    general(Format::Json, body)
}

fn decode_msgpack(body: &[u8]) -> Result<Received<'_>, String> {
    if let Some(measure) = msgpack_measure(body) {
        return Ok(measure);
    }
    general(Format::MessagePack, body)
}

/// `[1, headers, invocationId, "Measure", [ts, payload], …]` read in place.
fn msgpack_measure(mut body: &[u8]) -> Option<Received<'_>> {
    use rmp::decode;
    let len = decode::read_array_len(&mut body).ok()?;
    if len < 5 || decode::read_int::<u8, _>(&mut body).ok()? != 1 {
        return None;
    }
    // Headers: the benchmark never gets any; anything else takes the general path.
    if decode::read_map_len(&mut body).ok()? != 0 {
        return None;
    }
    if body.first() == Some(&0xc0) {
        body = &body[1..];
    } else {
        return None;
    }
    let (target, rest) = decode::read_str_from_slice(body).ok()?;
    if target != MEASURE {
        return None;
    }
    body = rest;
    if decode::read_array_len(&mut body).ok()? != 2 {
        return None;
    }
    let ts_ms = read_number(&mut body)?;
    let (payload, _) = decode::read_str_from_slice(body).ok()?;
    Some(Received::Measure {
        ts_ms,
        payload: Cow::Borrowed(payload),
    })
}

/// A msgpack number of any width as f64.
fn read_number(body: &mut &[u8]) -> Option<f64> {
    let marker = *body.first()?;
    match marker {
        0xcb => rmp::decode::read_f64(body).ok(),
        0xca => rmp::decode::read_f32(body).ok().map(f64::from),
        _ => rmp::decode::read_int::<i64, _>(body).ok().map(|v| v as f64),
    }
}

fn general(format: Format, body: &[u8]) -> Result<Received<'static>, String> {
    let message = switchyard_client::decode(format, body).map_err(|e| e.to_string())?;
    Ok(match message {
        HubMessage::Invocation {
            target, arguments, ..
        } if target == MEASURE => match (arguments.first(), arguments.get(1)) {
            (Some(ts), Some(Value::String(payload))) => Received::Measure {
                ts_ms: ts.as_f64().ok_or("Measure: ts is not a number")?,
                payload: Cow::Owned(payload.clone()),
            },
            _ => return Err("Measure without (ts, payload)".to_owned()),
        },
        HubMessage::Completion {
            invocation_id,
            result,
            ..
        } => Received::Completion {
            invocation_id,
            error: match result {
                switchyard_hub_protocol::CompletionResult::Error(e) => Some(e),
                _ => None,
            },
        },
        HubMessage::Ping => Received::Ping,
        HubMessage::Close { error, .. } => Received::Close { error },
        other => Received::Other(format!("{other:?}").chars().take(120).collect()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn measure_frame(format: Format, ts: f64, payload: &str) -> Vec<u8> {
        let frame = invocation(format, MEASURE, None, vec![json!(ts), json!(payload)]);
        match format {
            Format::Json => frame[..frame.len() - 1].to_vec(),
            Format::MessagePack => {
                // Strip the VarInt length prefix.
                let mut i = 0;
                while frame[i] & 0x80 != 0 {
                    i += 1;
                }
                frame[i + 1..].to_vec()
            }
        }
    }

    #[test]
    fn payload_prefix_round_trips_and_pads() {
        let padding = "x".repeat(2048);
        let text = payload(&padding, 17, 123_456, 3);
        assert_eq!(text.len(), 2048);
        assert_eq!(
            parse_tag(&text),
            Some(Tag {
                sender: 17,
                seq: 123_456,
                step: 3
            })
        );
        // Shorter padding than the prefix: the prefix alone.
        assert_eq!(payload("xx", 1, 2, 3), "1.2.3.");
        assert_eq!(
            parse_tag("1.2.3."),
            Some(Tag {
                sender: 1,
                seq: 2,
                step: 3
            })
        );
        assert_eq!(parse_tag("1.2.3"), None);
        assert_eq!(parse_tag("a.2.3.x"), None);
    }

    #[test]
    fn measure_decodes_in_both_formats() {
        for format in [Format::Json, Format::MessagePack] {
            let ts = 1_732_312_345_678.125;
            let body = measure_frame(format, ts, "5.6.1.xxxx");
            match decode(format, &body).unwrap() {
                Received::Measure { ts_ms, payload } => {
                    assert_eq!(ts_ms, ts, "{format:?}");
                    assert_eq!(payload, "5.6.1.xxxx");
                }
                other => panic!("{format:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn integer_timestamps_and_other_messages() {
        let body = measure_frame(Format::MessagePack, 1000.0, "1.1.1.");
        assert!(matches!(
            decode(Format::MessagePack, &body).unwrap(),
            Received::Measure { .. }
        ));
        let json = br#"{"type":1,"target":"Measure","arguments":[1000,"1.1.1."]}"#;
        assert!(matches!(
            decode(Format::Json, json).unwrap(),
            Received::Measure { ts_ms, .. } if ts_ms == 1000.0
        ));
        assert_eq!(
            decode(Format::Json, br#"{"type":6}"#).unwrap(),
            Received::Ping
        );
        assert_eq!(
            decode(
                Format::Json,
                br#"{"type":3,"invocationId":"7","error":"no"}"#
            )
            .unwrap(),
            Received::Completion {
                invocation_id: "7".into(),
                error: Some("no".into())
            }
        );
        assert_eq!(
            decode(Format::Json, br#"{"type":3,"invocationId":"8"}"#).unwrap(),
            Received::Completion {
                invocation_id: "8".into(),
                error: None
            }
        );
        assert!(matches!(
            decode(Format::Json, br#"{"type":7,"error":"bye"}"#).unwrap(),
            Received::Close { error: Some(_) }
        ));
        assert!(decode(Format::Json, b"{").is_err());
    }
}
