//! The hub-protocol codec's cost per message: decode, peek and encode of every valid JSON and
//! MessagePack vector in `testdata/hub-protocol.json`, and of a 2 KB broadcast invocation
//! (the message a REST broadcast or a hub's `Clients.All` encodes once per format).
//!
//! `cargo bench -p switchyard-hub-protocol --bench codec [-- MESSAGES]` runs each case over
//! about MESSAGES messages (default 3,000,000) and prints ns per message. Each case is its
//! own `#[inline(never)]` function, so that `valgrind --tool=callgrind` followed by
//! `callgrind_annotate --inclusive=yes` gives its instruction count (use a small MESSAGES).

use std::hint::black_box;
use std::time::Instant;

use serde_json::Value as J;
use switchyard_hub_protocol::{
    encode_invocation, encode_message, json, msgpack, peek, Format, HubMessage,
};

const VECTORS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../testdata/hub-protocol.json"
);

/// The bodies (framing excluded) of the vectors' valid messages in one format.
fn bodies(vectors: &[J], protocol: &str) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for v in vectors {
        let name = v["name"].as_str().unwrap_or_default();
        if name.starts_with("Handshake_") || v["kind"] == "invalid" || v["protocol"] != protocol {
            continue;
        }
        match protocol {
            "json" => {
                let text = v["encoded"].as_str().expect("encoded");
                out.extend(
                    text.as_bytes()
                        .split(|&b| b == 0x1e)
                        .filter(|body| !body.is_empty())
                        .map(<[u8]>::to_vec),
                );
            }
            _ => match v["body"].as_str() {
                Some(body) => out.push(hex::decode(body).expect("hex")),
                // Several frames in one buffer: each whole one.
                None => {
                    let mut rest =
                        &hex::decode(v["encoded"].as_str().expect("encoded")).expect("hex")[..];
                    while let Ok(Some((len, prefix))) = msgpack::read_varint(rest) {
                        let end = prefix + len as usize;
                        if end > rest.len() {
                            break;
                        }
                        out.push(rest[prefix..end].to_vec());
                        rest = &rest[end..];
                    }
                }
            },
        }
    }
    out
}

fn broadcast_arguments() -> Vec<J> {
    vec![J::String("x".repeat(2048))]
}

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

#[inline(never)]
fn case_json_decode(bodies: &[Vec<u8>], rounds: usize) {
    for _ in 0..rounds {
        for body in bodies {
            let _ = black_box(json::decode(black_box(body)));
        }
    }
}

#[inline(never)]
fn case_json_peek(bodies: &[Vec<u8>], rounds: usize) {
    for _ in 0..rounds {
        for body in bodies {
            let _ = black_box(peek(Format::Json, black_box(body)));
        }
    }
}

#[inline(never)]
fn case_json_encode(messages: &[HubMessage<J>], rounds: usize) {
    for _ in 0..rounds {
        for message in messages {
            black_box(json::encode(black_box(message)));
        }
    }
}

#[inline(never)]
fn case_msgpack_decode(bodies: &[Vec<u8>], rounds: usize) {
    for _ in 0..rounds {
        for body in bodies {
            let _ = black_box(msgpack::decode(black_box(body)));
        }
    }
}

#[inline(never)]
fn case_msgpack_peek(bodies: &[Vec<u8>], rounds: usize) {
    for _ in 0..rounds {
        for body in bodies {
            let _ = black_box(peek(Format::MessagePack, black_box(body)));
        }
    }
}

#[inline(never)]
fn case_msgpack_encode(messages: &[HubMessage<rmpv::Value>], rounds: usize) {
    for _ in 0..rounds {
        for message in messages {
            black_box(msgpack::encode(black_box(message)));
        }
    }
}

/// The REST and hub broadcast path: one invocation, encoded once per format.
#[inline(never)]
fn case_broadcast_encode(arguments: &[J], rounds: usize) {
    for _ in 0..rounds {
        for format in [Format::Json, Format::MessagePack] {
            black_box(encode_invocation(format, black_box("broadcast"), arguments));
        }
    }
}

/// The app-server SDK path: a whole message with JSON values, in both formats.
#[inline(never)]
fn case_broadcast_encode_message(message: &HubMessage<J>, rounds: usize) {
    for _ in 0..rounds {
        for format in [Format::Json, Format::MessagePack] {
            black_box(encode_message(format, black_box(message)));
        }
    }
}

/// What a node does with every inbound client message: peek, in both formats.
#[inline(never)]
fn case_broadcast_peek(bodies: &[Vec<u8>; 2], rounds: usize) {
    for _ in 0..rounds {
        let _ = black_box(peek(Format::Json, black_box(&bodies[0])));
        let _ = black_box(peek(Format::MessagePack, black_box(&bodies[1])));
    }
}

#[inline(never)]
fn case_broadcast_decode(bodies: &[Vec<u8>; 2], rounds: usize) {
    for _ in 0..rounds {
        let _ = black_box(json::decode(black_box(&bodies[0])));
        let _ = black_box(msgpack::decode(black_box(&bodies[1])));
    }
}

fn main() {
    let messages: usize = std::env::args()
        .skip(1)
        .find_map(|arg| arg.replace('_', "").parse().ok())
        .unwrap_or(3_000_000);
    let text = std::fs::read_to_string(VECTORS).expect("read testdata/hub-protocol.json");
    let vectors: Vec<J> = serde_json::from_str(&text).expect("vectors are JSON");

    let json_bodies: Vec<Vec<u8>> = bodies(&vectors, "json")
        .into_iter()
        .filter(|body| json::decode(body).is_ok())
        .collect();
    let json_messages: Vec<HubMessage<J>> = json_bodies
        .iter()
        .map(|body| json::decode(body).expect("filtered"))
        .collect();
    let msgpack_bodies: Vec<Vec<u8>> = bodies(&vectors, "messagepack")
        .into_iter()
        .filter(|body| msgpack::decode(body).is_ok())
        .collect();
    let msgpack_messages: Vec<HubMessage<rmpv::Value>> = msgpack_bodies
        .iter()
        .map(|body| msgpack::decode(body).expect("filtered"))
        .collect();

    let arguments = broadcast_arguments();
    let broadcast = HubMessage::Invocation {
        headers: Vec::new(),
        invocation_id: None,
        target: "broadcast".to_owned(),
        arguments: arguments.clone(),
        stream_ids: None,
    };
    let json_frame = encode_invocation(Format::Json, "broadcast", &arguments);
    let msgpack_frame = encode_invocation(Format::MessagePack, "broadcast", &arguments);
    let (_, prefix) = msgpack::read_varint(&msgpack_frame)
        .expect("a varint")
        .expect("complete");
    let broadcast_bodies = [
        json_frame[..json_frame.len() - 1].to_vec(),
        msgpack_frame[prefix..].to_vec(),
    ];

    println!(
        "{} JSON and {} MessagePack vector messages; {messages} messages per case",
        json_bodies.len(),
        msgpack_bodies.len()
    );
    let per = |n: usize| (messages / n).max(1);
    let n = json_bodies.len();
    report("json decode (vectors)", n, per(n), |r| {
        case_json_decode(&json_bodies, r)
    });
    report("json peek (vectors)", n, per(n), |r| {
        case_json_peek(&json_bodies, r)
    });
    report("json encode (vectors)", n, per(n), |r| {
        case_json_encode(&json_messages, r)
    });
    let n = msgpack_bodies.len();
    report("msgpack decode (vectors)", n, per(n), |r| {
        case_msgpack_decode(&msgpack_bodies, r)
    });
    report("msgpack peek (vectors)", n, per(n), |r| {
        case_msgpack_peek(&msgpack_bodies, r)
    });
    report("msgpack encode (vectors)", n, per(n), |r| {
        case_msgpack_encode(&msgpack_messages, r)
    });
    // The 2 KB cases: two messages per round (one per format).
    let big = (messages / 10).max(2);
    report("2 KB invocation encode", 2, big / 2, |r| {
        case_broadcast_encode(&arguments, r)
    });
    report("2 KB encode_message", 2, big / 2, |r| {
        case_broadcast_encode_message(&broadcast, r)
    });
    report("2 KB invocation peek", 2, big / 2, |r| {
        case_broadcast_peek(&broadcast_bodies, r)
    });
    report("2 KB invocation decode", 2, big / 2, |r| {
        case_broadcast_decode(&broadcast_bodies, r)
    });
}
