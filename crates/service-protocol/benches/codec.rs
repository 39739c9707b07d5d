//! The service-protocol codec's cost per message: decode and encode of every message vector
//! in `testdata/service-protocol.json`, and of the data messages an app server sends for a
//! 2 KB broadcast (BroadcastData, GroupBroadcastData and ConnectionData with JSON and
//! MessagePack payloads).
//!
//! `cargo bench -p switchyard-service-protocol --bench codec [-- MESSAGES]` runs each case
//! over about MESSAGES messages (default 3,000,000) and prints ns per message. Each case is
//! its own `#[inline(never)]` function, so that `valgrind --tool=callgrind` followed by
//! `callgrind_annotate --inclusive=yes` gives its instruction count (use a small MESSAGES).

use std::hint::black_box;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use serde_json::Value as J;
use switchyard_service_protocol::{
    decode, encode, BroadcastData, ConnectionData, Extensions, GroupBroadcastData, ServiceMessage,
};

const VECTORS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../testdata/service-protocol.json"
);

/// Runs `case` `rounds` times and prints its cost per message.
fn report(name: &str, messages: usize, rounds: usize, case: impl Fn(usize)) {
    let start = Instant::now();
    case(rounds);
    let elapsed = start.elapsed();
    let total = (messages * rounds) as f64;
    println!(
        "{name:<28} {:>9.1} ns/message  ({} messages)",
        elapsed.as_nanos() as f64 / total,
        messages * rounds
    );
}

#[inline(always)]
fn decode_all(bodies: &[Bytes], rounds: usize) {
    for _ in 0..rounds {
        for body in bodies {
            let _ = black_box(decode(black_box(body)));
        }
    }
}

/// Framed encoding into a reused buffer, as a server connection's writer does (a sizing pass,
/// then the write).
#[inline(always)]
fn encode_all(messages: &[ServiceMessage], rounds: usize) {
    let mut out = BytesMut::with_capacity(8192);
    for _ in 0..rounds {
        for message in messages {
            out.clear();
            encode(black_box(message), &mut out);
            black_box(&out);
        }
    }
}

// Each case is marked with its own number, so that the linker cannot fold the identical
// vector and data cases into one function (callgrind would count them together).

#[inline(never)]
fn case_decode(bodies: &[Bytes], rounds: usize) {
    black_box(1);
    decode_all(bodies, rounds);
}

#[inline(never)]
fn case_encode(messages: &[ServiceMessage], rounds: usize) {
    black_box(2);
    encode_all(messages, rounds);
}

#[inline(never)]
fn case_data_decode(bodies: &[Bytes], rounds: usize) {
    black_box(3);
    decode_all(bodies, rounds);
}

#[inline(never)]
fn case_data_encode(messages: &[ServiceMessage], rounds: usize) {
    black_box(4);
    encode_all(messages, rounds);
}

/// The payloads of a 2 KB broadcast invocation in both hub protocols.
fn broadcast_payloads() -> Vec<(String, Bytes)> {
    let text = "x".repeat(2048);
    let mut json =
        format!("{{\"type\":1,\"target\":\"broadcast\",\"arguments\":[\"{text}\"]}}").into_bytes();
    json.push(0x1e);
    // [1, {}, nil, "broadcast", ["x…"], []] behind its VarInt prefix.
    let mut body = vec![0x96, 0x01, 0x80, 0xc0, 0xa9];
    body.extend_from_slice(b"broadcast");
    body.extend_from_slice(&[0x91, 0xda, 0x08, 0x00]);
    body.extend_from_slice(text.as_bytes());
    body.push(0x90);
    let mut msgpack = vec![(body.len() & 0x7f) as u8 | 0x80, (body.len() >> 7) as u8];
    msgpack.extend_from_slice(&body);
    vec![
        ("json".to_owned(), Bytes::from(json)),
        ("messagepack".to_owned(), Bytes::from(msgpack)),
    ]
}

fn broadcast_messages() -> Vec<ServiceMessage> {
    let payloads = broadcast_payloads();
    let ext = Extensions {
        tracing_id: Some(42),
        ..Extensions::default()
    };
    vec![
        ServiceMessage::BroadcastData(BroadcastData {
            excluded_list: vec!["conn-excluded".to_owned()],
            payloads: payloads.clone(),
            ext: ext.clone(),
        }),
        ServiceMessage::GroupBroadcastData(GroupBroadcastData {
            group_name: "room".to_owned(),
            excluded_list: Vec::new(),
            payloads: payloads.clone(),
            ext: ext.clone(),
            excluded_user_list: Vec::new(),
            caller_user_id: None,
        }),
        ServiceMessage::ConnectionData(ConnectionData {
            connection_id: "a2VlcCBpdCBzaG9ydA".to_owned(),
            payload: payloads[1].1.clone(),
            ext,
        }),
    ]
}

fn main() {
    let messages: usize = std::env::args()
        .skip(1)
        .find_map(|arg| arg.replace('_', "").parse().ok())
        .unwrap_or(3_000_000);
    let text = std::fs::read_to_string(VECTORS).expect("read testdata/service-protocol.json");
    let vectors: Vec<J> = serde_json::from_str(&text).expect("vectors are JSON");
    let bodies: Vec<Bytes> = vectors
        .iter()
        .filter(|v| v["kind"] == "service-protocol-message")
        .filter_map(|v| v["hex"].as_str())
        .map(|h| Bytes::from(hex::decode(h).expect("hex")))
        .filter(|body| decode(body).is_ok())
        .collect();
    let decoded: Vec<ServiceMessage> = bodies
        .iter()
        .map(|body| decode(body).expect("filtered"))
        .collect();
    let big = broadcast_messages();
    let big_bodies: Vec<Bytes> = big
        .iter()
        .map(|m| {
            let mut body = Vec::new();
            switchyard_service_protocol::encode_body(m, &mut body);
            Bytes::from(body)
        })
        .collect();

    println!(
        "{} vector messages; {messages} messages per case",
        bodies.len()
    );
    let per = |n: usize| (messages / n).max(1);
    let n = bodies.len();
    report("decode (vectors)", n, per(n), |r| case_decode(&bodies, r));
    report("encode (vectors)", n, per(n), |r| case_encode(&decoded, r));
    let n = big.len();
    let rounds = (messages / 10 / n).max(1);
    report("2 KB data decode", n, rounds, |r| {
        case_data_decode(&big_bodies, r)
    });
    report("2 KB data encode", n, rounds, |r| case_data_encode(&big, r));
}
