//! Runs every vector of `testdata/hub-protocol.json` (JSON and MessagePack encodings of each
//! hub message, with a protocol-neutral form) through the codec.

mod neutral;

use std::collections::BTreeMap;

use bytes::BytesMut;
use neutral::{from_neutral, normalize, to_neutral, Payload};
use serde_json::Value as J;
use switchyard_hub_protocol::{
    handshake, peek, CompletionResult, Format, FrameError, FrameSplitter, HandshakeError,
    HubMessage,
};

const VECTORS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../testdata/hub-protocol.json"
);
const EXPECTED_TOTAL: usize = 202;
const KINDS: [&str; 5] = [
    "roundtrip",
    "parse-only",
    "invalid",
    "client-to-server",
    "server-to-client",
];

type Check = Result<(), String>;

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

#[test]
fn every_vector() {
    let text = std::fs::read_to_string(VECTORS).expect("read testdata/hub-protocol.json");
    let vectors: Vec<J> = serde_json::from_str(&text).expect("vectors are JSON");
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let mut failures = Vec::new();
    for v in &vectors {
        let name = v["name"].as_str().expect("name");
        let kind = v["kind"].as_str().expect("kind");
        assert!(KINDS.contains(&kind), "{name}: unknown kind {kind}");
        *counts.entry(kind.to_owned()).or_default() += 1;
        let result = if name.starts_with("Handshake_") {
            check_handshake(v, kind)
        } else {
            match v["protocol"].as_str() {
                Some("json") => check_hub::<J>(v, kind, Format::Json),
                Some("messagepack") => check_hub::<rmpv::Value>(v, kind, Format::MessagePack),
                other => Err(format!("unknown protocol {other:?}")),
            }
        };
        if let Err(e) = result {
            failures.push(format!("{name} ({kind}): {e}"));
        }
    }
    for (kind, count) in &counts {
        println!("{kind}: {count}");
    }
    let total: usize = counts.values().sum();
    println!("total: {total}");
    assert!(
        failures.is_empty(),
        "{} failing vectors:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_eq!(total, EXPECTED_TOTAL);
    assert_eq!(vectors.len(), EXPECTED_TOTAL);
}

fn check_handshake(v: &J, kind: &str) -> Check {
    let encoded = v["encoded"].as_str().ok_or("encoded")?.as_bytes();
    let message = &v["message"];
    if kind == "invalid" {
        return match handshake::parse_request(encoded, 1 << 15) {
            Err(HandshakeError::Malformed(text)) => {
                ensure!(
                    text == v["error"],
                    "error text {text:?}, expected {}",
                    v["error"]
                );
                Ok(())
            }
            other => Err(format!("expected Malformed, got {other:?}")),
        };
    }
    match message["handshake"].as_str() {
        Some("request") => {
            let (req, used) = handshake::parse_request(encoded, 1 << 15)
                .map_err(|e| e.to_string())?
                .ok_or("incomplete")?;
            ensure!(
                used == encoded.len(),
                "consumed {used} of {}",
                encoded.len()
            );
            ensure!(
                req.protocol == message["protocol"],
                "protocol {}",
                req.protocol
            );
            ensure!(message["version"] == req.version, "version {}", req.version);
            if kind == "client-to-server" {
                let again = handshake::encode_request(&req.protocol, req.version);
                ensure!(
                    again == encoded,
                    "encode_request gave {:?}",
                    String::from_utf8_lossy(&again)
                );
            }
            // One byte short of the separator is incomplete, not an error.
            let short = handshake::parse_request(&encoded[..encoded.len() - 1], 1 << 15);
            ensure!(short == Ok(None), "truncated request gave {short:?}");
            Ok(())
        }
        Some("response") => {
            let (error, used) = handshake::parse_response(encoded)
                .map_err(|e| e.to_string())?
                .ok_or("incomplete")?;
            ensure!(used == encoded.len(), "consumed {used}");
            ensure!(
                J::from(error.clone()) == message["error"],
                "error {error:?}"
            );
            if kind == "server-to-client" {
                let again = match &error {
                    None => handshake::RESPONSE_OK.to_vec(),
                    Some(e) => handshake::encode_error_response(e),
                };
                ensure!(
                    again == encoded,
                    "encoded {:?}",
                    String::from_utf8_lossy(&again)
                );
            }
            Ok(())
        }
        other => Err(format!("unknown handshake kind {other:?}")),
    }
}

fn wire_bytes(v: &J, field: &str, format: Format) -> Result<Vec<u8>, String> {
    let text = v[field].as_str().ok_or(format!("missing {field}"))?;
    Ok(match format {
        Format::Json => text.as_bytes().to_vec(),
        Format::MessagePack => hex::decode(text).map_err(|e| e.to_string())?,
    })
}

fn check_hub<V: Payload>(v: &J, kind: &str, format: Format) -> Check {
    let encoded = wire_bytes(v, "encoded", format)?;
    let splitter = FrameSplitter::new(format, 1 << 20);
    let mut buf = BytesMut::from(&encoded[..]);
    let mut frames = Vec::new();
    let split_error: Option<FrameError> = loop {
        match splitter.next_frame(&mut buf) {
            Ok(Some(frame)) => frames.push(frame),
            Ok(None) => break None,
            Err(e) => break Some(e),
        }
    };

    if kind == "invalid" {
        if let Some(e) = split_error {
            return Err(format!("invalid vectors are well framed, got {e}"));
        }
        ensure!(frames.len() == 1 && buf.is_empty(), "expected one frame");
        let body = frames[0].body();
        let expected = v["error"].as_str().ok_or("error text")?;
        let decoded = V::decode(body);
        ensure!(decoded.is_err(), "decoded an invalid message: {decoded:?}");
        let text = decoded.unwrap_err().to_string();
        ensure!(
            text == expected,
            "decode error {text:?}, expected {expected:?}"
        );
        let peeked = peek(format, body);
        let text = peeked
            .map(|p| format!("accepted {p:?}"))
            .unwrap_or_else(|e| e.to_string());
        ensure!(
            text == expected,
            "peek error {text:?}, expected {expected:?}"
        );
        return Ok(());
    }
    if let Some(e) = split_error {
        return Err(format!("frame error {e}"));
    }

    let message = &v["message"];
    if message.is_null() {
        // Partial frame (must be kept) or an unknown message type (must be ignored).
        ensure!(kind == "parse-only", "null message outside parse-only");
        if frames.is_empty() {
            ensure!(
                buf.len() == encoded.len(),
                "partial frame bytes were consumed"
            );
            return Ok(());
        }
        for frame in &frames {
            let decoded = V::decode(frame.body()).map_err(|e| e.to_string())?;
            ensure!(
                matches!(decoded, HubMessage::Unknown { .. }),
                "decoded {decoded:?}"
            );
            let p = peek(format, frame.body()).map_err(|e| e.to_string())?;
            ensure!(
                i32::from(p.message_type) == decoded.message_type(),
                "peek type"
            );
        }
        return Ok(());
    }

    let expected: Vec<&J> = match message {
        J::Array(items) => items.iter().collect(),
        single => vec![single],
    };
    ensure!(buf.is_empty(), "{} bytes left after splitting", buf.len());
    ensure!(
        frames.len() == expected.len(),
        "{} frames, expected {}",
        frames.len(),
        expected.len()
    );
    if v.get("body").is_some() {
        ensure!(
            frames[0].body() == wire_bytes(v, "body", format)?,
            "body differs"
        );
    }
    for (frame, exp) in frames.iter().zip(&expected) {
        check_decoded::<V>(format, frame.body(), exp)?;
    }
    if expected.len() > 1 {
        return Ok(()); // multi-message vectors are parse-only
    }
    let exp = expected[0];
    let built: HubMessage<V> = from_neutral(exp);
    let is_close_without_flag = exp["type"] == 7 && exp.get("allowReconnect").is_none();
    match kind {
        "roundtrip" | "server-to-client" => {
            // A Close written without allowReconnect is the 2-element array (JS layout).
            let bytes = V::encode(&built, is_close_without_flag);
            ensure!(bytes == encoded, "encoded {}", show(format, &bytes));
        }
        "client-to-server" if format == Format::MessagePack => {
            let bytes = V::encode(&built, true);
            ensure!(
                bytes == encoded,
                "JS-layout encoding {}",
                show(format, &bytes)
            );
        }
        _ => {}
    }
    Ok(())
}

/// Decodes one body and compares it (and `peek`, and a re-encode round trip) to `exp`.
fn check_decoded<V: Payload>(format: Format, body: &[u8], exp: &J) -> Check {
    let decoded = V::decode(body).map_err(|e| format!("decode: {e}"))?;
    let got = normalize(&to_neutral(&decoded));
    let want = normalize(exp);
    ensure!(got == want, "decoded {got}, expected {want}");

    let p = peek(format, body).map_err(|e| format!("peek: {e}"))?;
    ensure!(
        i32::from(p.message_type) == decoded.message_type(),
        "peek type {p:?}"
    );
    ensure!(
        p.invocation_id.as_deref() == decoded.invocation_id(),
        "peek id {p:?}"
    );
    let (target, error, allow, seq) = match &decoded {
        HubMessage::Invocation { target, .. } | HubMessage::StreamInvocation { target, .. } => {
            (Some(target.as_str()), None, false, None)
        }
        HubMessage::Completion {
            result: CompletionResult::Error(e),
            ..
        } => (None, Some(e.as_str()), false, None),
        HubMessage::Close {
            error,
            allow_reconnect,
        } => (None, error.as_deref(), *allow_reconnect, None),
        HubMessage::Ack { sequence_id } | HubMessage::Sequence { sequence_id } => {
            (None, None, false, Some(*sequence_id))
        }
        _ => (None, None, false, None),
    };
    ensure!(p.target.as_deref() == target, "peek target {p:?}");
    ensure!(p.error.as_deref() == error, "peek error {p:?}");
    ensure!(p.allow_reconnect == allow, "peek allowReconnect {p:?}");
    ensure!(p.sequence_id == seq, "peek sequenceId {p:?}");

    // Whatever we decode, we can encode and decode again to the same message.
    for js_layout in [false, true] {
        let framed = V::encode(&decoded, js_layout);
        let mut buf = BytesMut::from(&framed[..]);
        let frame = FrameSplitter::new(format, usize::MAX)
            .next_frame(&mut buf)
            .map_err(|e| e.to_string())?
            .ok_or("re-encoded frame incomplete")?;
        ensure!(buf.is_empty(), "re-encoded frame has trailing bytes");
        let again = V::decode(frame.body()).map_err(|e| format!("re-decode: {e}"))?;
        let again = normalize(&to_neutral(&again));
        ensure!(again == got, "re-decoded {again}");
    }
    Ok(())
}

fn show(format: Format, bytes: &[u8]) -> String {
    match format {
        Format::Json => format!("{:?}", String::from_utf8_lossy(bytes)),
        Format::MessagePack => hex::encode(bytes),
    }
}
