//! Target `upstream_reply`: what the service makes of an upstream's answer to a serverless
//! client's invocation (`crates/node/src/upstream/request.rs` reads it, `reply.rs` accepts
//! or replaces it), end to end: a real node whose upstream template points at a scripted
//! HTTP server of the target, a client connected with the JSON or MessagePack protocol that
//! invokes `count` with id `7`, and the answer the payload makes.
//!
//! The knob picks the answer's status (bits 0–1: 200, 201, 500, 404), the client's protocol
//! (bit 2: MessagePack), a 48-byte `upstream.max_response_size` (bit 3), and whether the
//! answer names a length (bit 4: for the third run, the body ends at the close instead). The
//! body is written whole with its length, in two chunks cut at the cut, and in two writes
//! cut there; every run is a fresh node. All runs must give the client the same one frame,
//! and that frame must be what the rules say: a 2xx answer with an empty body is an empty
//! completion; a body over the limit, a non-2xx status, or anything but exactly one framed
//! Completion of invocation 7 in the client's protocol is an error completion of 7; a body
//! that is one whole frame which decodes as a Completion of 7 is passed on as it is, and
//! only whole frames are passed on.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use serde_json::json;
use switchyard_hub_protocol::{
    encode_message, handshake, CompletionResult, Format, FrameSplitter, HubMessage,
};
use switchyard_node::config::{ServiceMode, UpstreamTemplate};
use switchyard_node::fuzzing::{ClientSession, SessionTransport};
use switchyard_node::Config;

use crate::http_stub::{self, Framing, Reply, Seen};
use crate::service_node::node;
use crate::Input;

const HUB: &str = "chat";
const ID: &str = "7";
const SMALL_LIMIT: usize = 48;
/// Real time a run may take before it counts as stuck (the upstream answers at once).
const STUCK: Duration = Duration::from_secs(20);

#[derive(Clone, Copy, Debug)]
struct Setup {
    status: u16,
    format: Format,
    max: usize,
    until_close: bool,
}

impl Setup {
    fn from_knob(knob: u8) -> Setup {
        Setup {
            status: [200, 201, 500, 404][usize::from(knob & 3)],
            format: if knob & 4 != 0 {
                Format::MessagePack
            } else {
                Format::Json
            },
            max: if knob & 8 != 0 { SMALL_LIMIT } else { 16 << 20 },
            until_close: knob & 0x10 != 0,
        }
    }
}

/// The full decoders (not the service's lenient `peek`), values as JSON.
fn decode(format: Format, body: &[u8]) -> Option<HubMessage<serde_json::Value>> {
    switchyard_client::decode(format, body).ok()
}

/// The frames in `bytes` in `format`, and whether they tile it exactly.
fn frames(format: Format, bytes: &[u8], max: usize) -> (Vec<Bytes>, bool) {
    let mut buffer = BytesMut::from(bytes);
    let mut out = Vec::new();
    while let Ok(Some(frame)) = FrameSplitter::new(format, max).next_frame(&mut buffer) {
        out.push(frame.framed);
    }
    (out, buffer.is_empty())
}

async fn invoke(setup: Setup, body: Arc<Vec<u8>>, framing: Framing) -> Bytes {
    let script: http_stub::Script = Arc::new(move |seen: &Seen| {
        // Connect and disconnect events get an empty 200; the invocation gets the payload.
        if seen.target().contains("/messages/") {
            Reply {
                status: setup.status,
                headers: vec![("content-type", "application/octet-stream".into())],
                body: body.to_vec(),
                framing,
            }
        } else {
            Reply {
                status: 200,
                headers: Vec::new(),
                body: Vec::new(),
                framing: Framing::Whole,
            }
        }
    });
    let stub = http_stub::start(script).await;
    let mut config = Config {
        mode: ServiceMode::Serverless,
        ..Config::default()
    };
    config.upstream.templates = vec![UpstreamTemplate::new(format!(
        "http://127.0.0.1:{}/upstream/{{hub}}/{{category}}/{{event}}",
        stub.port
    ))];
    config.upstream.max_response_size = setup.max;
    config.upstream.timeout = Duration::from_secs(10);
    let node = node(config);
    let client = ClientSession::open(&node, HUB, Some("u1"), SessionTransport::WebSockets)
        .expect("a client");
    client
        .receive(&handshake::encode_request(setup.format.name(), 1))
        .expect("the handshake");
    let invocation = HubMessage::Invocation {
        headers: Default::default(),
        invocation_id: Some(ID.into()),
        target: "count".into(),
        arguments: vec![json!(1)],
        stream_ids: None,
    };
    client
        .receive(&encode_message(setup.format, &invocation))
        .expect("the invocation");
    let mut received = Vec::new();
    let frame = loop {
        for frame in client.take_sent() {
            received.extend_from_slice(&frame);
        }
        let rest = received
            .strip_prefix(handshake::RESPONSE_OK)
            .unwrap_or_else(|| panic!("no handshake response first: {received:?}"));
        let (frames, whole) = frames(setup.format, rest, usize::MAX);
        if let Some(frame) = frames.first() {
            assert!(
                frames.len() == 1 && whole,
                "more than the completion: {rest:?}"
            );
            break frame.clone();
        }
        assert!(
            client.close_reason().is_none(),
            "the client was closed: {:?}",
            client.close_reason()
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    client.finish();
    let seen = stub.seen.lock().clone();
    let call = seen
        .iter()
        .find(|s| s.target().contains("/messages/count"))
        .expect("the upstream was asked");
    assert!(
        call.body.windows(5).any(|w| w == b"count"),
        "the upstream request does not carry the invocation: {:?}",
        call.body
    );
    frame
}

fn run(setup: Setup, body: &[u8], framing: Framing) -> Bytes {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let body = Arc::new(body.to_vec());
    runtime.block_on(async {
        tokio::time::timeout(STUCK, invoke(setup, body, framing))
            .await
            .expect("no completion came")
    })
}

/// The frame the rules call for, when they name one; `None` where only the kind is fixed.
fn check_frame(setup: Setup, body: &[u8], frame: &Bytes) {
    let is_error = |frame: &[u8]| {
        let (frames, whole) = frames(setup.format, frame, usize::MAX);
        assert!(frames.len() == 1 && whole, "not one frame: {frame:?}");
        let body = FrameSplitter::new(setup.format, usize::MAX)
            .next_frame(&mut BytesMut::from(frame))
            .expect("a frame")
            .expect("a whole frame")
            .body_bytes();
        matches!(
            decode(setup.format, &body),
            Some(HubMessage::Completion {
                invocation_id,
                result: CompletionResult::Error(_),
                ..
            }) if invocation_id == ID
        )
    };
    let success = (200..300).contains(&setup.status);
    if !success || body.len() > setup.max {
        assert!(is_error(frame), "an error completion: {frame:?}");
        return;
    }
    if body.is_empty() {
        let void = encode_message(
            setup.format,
            &HubMessage::Completion {
                headers: Default::default(),
                invocation_id: ID.into(),
                result: CompletionResult::Void,
            },
        );
        assert_eq!(frame, &void, "an empty answer is an empty completion");
        return;
    }
    let (frames, whole) = frames(setup.format, body, setup.max);
    let completion_of_7 = frames.len() == 1
        && whole
        && frames[0].len() == body.len()
        && matches!(
            FrameSplitter::new(setup.format, usize::MAX)
                .next_frame(&mut BytesMut::from(body))
                .ok()
                .flatten()
                .and_then(|f| decode(setup.format, &f.body_bytes())),
            Some(HubMessage::Completion { invocation_id, .. }) if invocation_id == ID
        );
    if completion_of_7 {
        assert_eq!(&frame[..], body, "a completion of 7 is passed on as it is");
    } else if &frame[..] == body {
        // Passed on though it does not decode: `peek` is lenient about what it does not read;
        // still it must be one whole frame.
        assert!(
            frames.len() == 1 && whole,
            "passed on a body that is not one frame"
        );
    } else {
        assert!(is_error(frame), "an error completion: {frame:?}");
    }
}

pub fn check(data: &[u8]) {
    let input = Input::parse(data);
    let setup = Setup::from_knob(input.knob);
    let body = input.payload;
    let whole = run(setup, body, Framing::Whole);
    check_frame(setup, body, &whole);
    let chunked = run(setup, body, Framing::Chunked(input.cut));
    assert_eq!(whole, chunked, "whole vs two chunks");
    let third = if setup.until_close {
        Framing::UntilClose(input.cut)
    } else {
        Framing::Halves(input.cut)
    };
    assert_eq!(whole, run(setup, body, third), "whole vs {third:?}");
}
