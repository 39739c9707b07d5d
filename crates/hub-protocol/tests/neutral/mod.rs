//! Conversions between this crate's `HubMessage` and the protocol-neutral message form of
//! `testdata/hub-protocol.json`, including the typed markers
//! `{"$float32": x}`, `{"$timestamp": "ISO-8601Z"}` and `{"$bin": "hex"}`.

use serde_json::{json, Map, Value as J};
use switchyard_hub_protocol::{msgpack, CompletionResult, DecodeError, HubMessage};

/// A payload value type with its codec.
pub trait Payload: Sized + Clone + PartialEq + std::fmt::Debug {
    fn to_neutral(&self) -> J;
    fn from_neutral(j: &J) -> Self;
    fn decode(body: &[u8]) -> Result<HubMessage<Self>, DecodeError>;
    /// `js_layout`: MessagePack only, use the JS client's array layout.
    fn encode(message: &HubMessage<Self>, js_layout: bool) -> Vec<u8>;
}

impl Payload for J {
    fn to_neutral(&self) -> J {
        self.clone()
    }
    fn from_neutral(j: &J) -> Self {
        j.clone()
    }
    fn decode(body: &[u8]) -> Result<HubMessage<Self>, DecodeError> {
        switchyard_hub_protocol::json::decode(body)
    }
    fn encode(message: &HubMessage<Self>, _js_layout: bool) -> Vec<u8> {
        switchyard_hub_protocol::json::encode(message)
    }
}

impl Payload for rmpv::Value {
    fn to_neutral(&self) -> J {
        use rmpv::Value as M;
        match self {
            M::Nil => J::Null,
            M::Boolean(b) => J::Bool(*b),
            M::Integer(n) => match (n.as_u64(), n.as_i64()) {
                (Some(u), _) => json!(u),
                (None, Some(i)) => json!(i),
                (None, None) => unreachable!("rmpv integers are u64 or i64"),
            },
            M::F32(f) => json!({ "$float32": f64::from(*f) }),
            M::F64(f) => json!(f),
            M::String(s) => J::String(s.as_str().expect("valid UTF-8 in vectors").to_owned()),
            M::Binary(b) => json!({ "$bin": hex::encode(b) }),
            M::Array(items) => J::Array(items.iter().map(Payload::to_neutral).collect()),
            M::Map(entries) => J::Object(
                entries
                    .iter()
                    .map(|(k, v)| {
                        let key = k.as_str().expect("string map keys in vectors");
                        (key.to_owned(), v.to_neutral())
                    })
                    .collect(),
            ),
            M::Ext(-1, data) => json!({ "$timestamp": timestamp_to_iso(data) }),
            M::Ext(ty, data) => json!({ "$ext": [ty, hex::encode(data)] }),
        }
    }

    fn from_neutral(j: &J) -> Self {
        use rmpv::Value as M;
        match j {
            J::Null => M::Nil,
            J::Bool(b) => M::Boolean(*b),
            J::Number(n) => match (n.as_u64(), n.as_i64()) {
                (Some(u), _) => M::from(u),
                (None, Some(i)) => M::from(i),
                _ => M::F64(n.as_f64().unwrap()),
            },
            J::String(s) => M::from(s.as_str()),
            J::Array(items) => M::Array(items.iter().map(Self::from_neutral).collect()),
            J::Object(map) => {
                if map.len() == 1 {
                    let (key, value) = map.iter().next().unwrap();
                    match key.as_str() {
                        "$float32" => return M::F32(value.as_f64().unwrap() as f32),
                        "$bin" => return M::Binary(hex::decode(value.as_str().unwrap()).unwrap()),
                        "$timestamp" => {
                            return M::Ext(-1, iso_to_timestamp(value.as_str().unwrap()))
                        }
                        _ => {}
                    }
                }
                M::Map(
                    map.iter()
                        .map(|(k, v)| (M::from(k.as_str()), Self::from_neutral(v)))
                        .collect(),
                )
            }
        }
    }

    fn decode(body: &[u8]) -> Result<HubMessage<Self>, DecodeError> {
        msgpack::decode(body)
    }

    fn encode(message: &HubMessage<Self>, js_layout: bool) -> Vec<u8> {
        let layout = if js_layout {
            msgpack::Layout::Js
        } else {
            msgpack::Layout::DotNet
        };
        msgpack::encode_with_layout(message, layout)
    }
}

fn headers_to_neutral(headers: &[(String, String)], out: &mut Map<String, J>) {
    if !headers.is_empty() {
        let map = headers
            .iter()
            .map(|(k, v)| (k.clone(), J::String(v.clone())))
            .collect();
        out.insert("headers".into(), J::Object(map));
    }
}

/// The neutral form of a decoded message.
pub fn to_neutral<V: Payload>(message: &HubMessage<V>) -> J {
    let mut out = Map::new();
    out.insert("type".into(), json!(message.message_type()));
    if let Some(headers) = message.headers() {
        headers_to_neutral(headers, &mut out);
    }
    match message {
        HubMessage::Invocation {
            invocation_id,
            target,
            arguments,
            stream_ids,
            ..
        } => {
            out.insert("invocationId".into(), json!(invocation_id));
            invocation_fields(&mut out, target, arguments, stream_ids);
        }
        HubMessage::StreamInvocation {
            invocation_id,
            target,
            arguments,
            stream_ids,
            ..
        } => {
            out.insert("invocationId".into(), json!(invocation_id));
            invocation_fields(&mut out, target, arguments, stream_ids);
        }
        HubMessage::StreamItem {
            invocation_id,
            item,
            ..
        } => {
            out.insert("invocationId".into(), json!(invocation_id));
            out.insert("item".into(), item.to_neutral());
        }
        HubMessage::Completion {
            invocation_id,
            result,
            ..
        } => {
            out.insert("invocationId".into(), json!(invocation_id));
            match result {
                CompletionResult::Void => {}
                CompletionResult::Value(v) => {
                    out.insert("result".into(), v.to_neutral());
                }
                CompletionResult::Error(e) => {
                    out.insert("error".into(), json!(e));
                }
            }
        }
        HubMessage::CancelInvocation { invocation_id, .. } => {
            out.insert("invocationId".into(), json!(invocation_id));
        }
        HubMessage::Close {
            error,
            allow_reconnect,
        } => {
            out.insert("error".into(), json!(error));
            out.insert("allowReconnect".into(), json!(allow_reconnect));
        }
        HubMessage::Ack { sequence_id } | HubMessage::Sequence { sequence_id } => {
            out.insert("sequenceId".into(), json!(sequence_id));
        }
        HubMessage::Ping | HubMessage::Unknown { .. } => {}
    }
    J::Object(out)
}

fn invocation_fields<V: Payload>(
    out: &mut Map<String, J>,
    target: &str,
    arguments: &[V],
    stream_ids: &Option<Vec<String>>,
) {
    out.insert("target".into(), json!(target));
    let args = arguments.iter().map(Payload::to_neutral).collect();
    out.insert("arguments".into(), J::Array(args));
    if let Some(ids) = stream_ids {
        out.insert("streamIds".into(), json!(ids));
    }
}

/// Makes equivalent neutral forms equal: absent and empty `headers` / `streamIds` are the
/// same; Close always has `error` and `allowReconnect`; Invocation always has
/// `invocationId`; a `null` result next to an error is dropped (the JS parser rule).
pub fn normalize(j: &J) -> J {
    let mut obj = j.as_object().expect("a message object").clone();
    if obj
        .get("headers")
        .is_some_and(|h| h.as_object().is_some_and(Map::is_empty))
    {
        obj.remove("headers");
    }
    if obj
        .get("streamIds")
        .is_some_and(|s| s.as_array().is_some_and(Vec::is_empty))
    {
        obj.remove("streamIds");
    }
    match obj["type"].as_i64() {
        Some(1) => {
            obj.entry("invocationId").or_insert(J::Null);
        }
        Some(3)
            if obj.get("error").is_some_and(J::is_string)
                && obj.get("result") == Some(&J::Null) =>
        {
            obj.remove("result");
        }
        Some(7) => {
            obj.entry("error").or_insert(J::Null);
            obj.entry("allowReconnect").or_insert(J::Bool(false));
        }
        _ => {}
    }
    // Compare as a canonical (sorted) object: key order is not part of the neutral form.
    J::Object(
        obj.into_iter()
            .collect::<std::collections::BTreeMap<_, _>>()
            .into_iter()
            .collect(),
    )
}

/// Builds a message from its neutral form.
pub fn from_neutral<V: Payload>(j: &J) -> HubMessage<V> {
    let headers: Vec<(String, String)> = j
        .get("headers")
        .and_then(J::as_object)
        .map(|h| {
            h.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
                .collect()
        })
        .unwrap_or_default();
    let string = |key: &str| j.get(key).and_then(J::as_str).map(str::to_owned);
    let arguments = || -> Vec<V> {
        j["arguments"]
            .as_array()
            .unwrap()
            .iter()
            .map(V::from_neutral)
            .collect()
    };
    let stream_ids = || -> Option<Vec<String>> {
        j.get("streamIds").map(|ids| {
            ids.as_array()
                .unwrap()
                .iter()
                .map(|id| id.as_str().unwrap().to_owned())
                .collect()
        })
    };
    match j["type"].as_i64().unwrap() {
        1 => HubMessage::Invocation {
            headers,
            invocation_id: string("invocationId"),
            target: string("target").unwrap(),
            arguments: arguments(),
            stream_ids: stream_ids(),
        },
        2 => HubMessage::StreamItem {
            headers,
            invocation_id: string("invocationId").unwrap(),
            item: V::from_neutral(&j["item"]),
        },
        3 => HubMessage::Completion {
            headers,
            invocation_id: string("invocationId").unwrap(),
            result: match (string("error"), j.get("result")) {
                (Some(e), _) => CompletionResult::Error(e),
                (None, Some(r)) => CompletionResult::Value(V::from_neutral(r)),
                (None, None) => CompletionResult::Void,
            },
        },
        4 => HubMessage::StreamInvocation {
            headers,
            invocation_id: string("invocationId").unwrap(),
            target: string("target").unwrap(),
            arguments: arguments(),
            stream_ids: stream_ids(),
        },
        5 => HubMessage::CancelInvocation {
            headers,
            invocation_id: string("invocationId").unwrap(),
        },
        6 => HubMessage::Ping,
        7 => HubMessage::Close {
            error: string("error"),
            allow_reconnect: j
                .get("allowReconnect")
                .and_then(J::as_bool)
                .unwrap_or(false),
        },
        8 => HubMessage::Ack {
            sequence_id: j["sequenceId"].as_i64().unwrap(),
        },
        9 => HubMessage::Sequence {
            sequence_id: j["sequenceId"].as_i64().unwrap(),
        },
        other => HubMessage::Unknown {
            message_type: other as i32,
        },
    }
}

// ---- MessagePack timestamps (extension type -1) <-> ISO 8601 UTC ----

fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400;
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// `2018-02-01T12:34:56.789Z` -> the smallest timestamp encoding (as `@msgpack/msgpack`).
pub fn iso_to_timestamp(iso: &str) -> Vec<u8> {
    let s = iso.strip_suffix('Z').expect("UTC timestamp");
    let num = |range: std::ops::Range<usize>| s[range].parse::<i64>().unwrap();
    let days = days_from_civil(num(0..4), num(5..7), num(8..10));
    let secs = days * 86_400 + num(11..13) * 3600 + num(14..16) * 60 + num(17..19);
    let nanos: u32 = match s.get(19..) {
        Some(frac) if frac.starts_with('.') => {
            let digits = &frac[1..];
            format!("{digits:0<9}")[..9].parse().unwrap()
        }
        _ => 0,
    };
    if nanos == 0 && (0..=i64::from(u32::MAX)).contains(&secs) {
        (secs as u32).to_be_bytes().to_vec()
    } else if (0..1 << 34).contains(&secs) {
        ((u64::from(nanos) << 34) | secs as u64)
            .to_be_bytes()
            .to_vec()
    } else {
        let mut out = nanos.to_be_bytes().to_vec();
        out.extend_from_slice(&secs.to_be_bytes());
        out
    }
}

/// The inverse of [`iso_to_timestamp`] for any of the three encodings.
pub fn timestamp_to_iso(data: &[u8]) -> String {
    let (secs, nanos): (i64, u32) = match data.len() {
        4 => (i64::from(u32::from_be_bytes(data.try_into().unwrap())), 0),
        8 => {
            let v = u64::from_be_bytes(data.try_into().unwrap());
            ((v & ((1 << 34) - 1)) as i64, (v >> 34) as u32)
        }
        12 => (
            i64::from_be_bytes(data[4..].try_into().unwrap()),
            u32::from_be_bytes(data[..4].try_into().unwrap()),
        ),
        n => panic!("timestamp with {n} bytes"),
    };
    let (y, mo, d) = civil_from_days(secs.div_euclid(86_400));
    let t = secs.rem_euclid(86_400);
    let mut out = format!(
        "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}",
        t / 3600,
        t % 3600 / 60,
        t % 60
    );
    if nanos != 0 {
        out.push('.');
        out.push_str(format!("{nanos:09}").trim_end_matches('0'));
    }
    out.push('Z');
    out
}
