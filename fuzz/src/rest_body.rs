//! Target `rest_body`: the REST API's send-body parser (JSON invocations with property names
//! in any case, MessagePack payload maps, the size limit), its route table (percent-decoded
//! segments, literal segments in any case, 404 vs 405), and whole requests through the
//! service's routes against a node with one connected client.
//!
//! The payload is the request body for the parser checks; for the route table and the whole
//! request, the first piece (text) is the path and query and the second the body.

use bytes::BytesMut;
use switchyard_core::HubName;
use switchyard_hub_protocol::{
    encode_invocation, json, msgpack, Format, FrameSplitter, HubMessage,
};
use switchyard_node::fuzzing::{self, Call, ClientSession, Method, RestRoute, SendBody};
use switchyard_node::{Command, Config};

use crate::service_node::{node, percent_all, rest_error, token};
use crate::{text, Input};

const MIB: usize = 1024 * 1024;

/// Content types to send bodies with, and whether each one means a MessagePack payload map.
const CONTENT_TYPES: [(Option<&str>, bool); 8] = [
    (None, false),
    (Some("application/json"), false),
    (Some("application/x-msgpack"), true),
    (Some("application/msgpack; charset=binary"), true),
    (Some("APPLICATION/OCTET-STREAM"), true),
    (Some("text/plain"), false),
    (Some("application/x-msgpack2"), false),
    (Some(" application/msgpack ;"), true),
];

fn methods() -> [Method; 8] {
    [
        Method::POST,
        Method::GET,
        Method::HEAD,
        Method::PUT,
        Method::DELETE,
        Method::PATCH,
        Method::OPTIONS,
        Method::from_bytes(b"FUZZ").expect("a valid extension method"),
    ]
}

// ---- the body parser ----

fn body(input: &Input<'_>) {
    let limit = if input.knob & 0x80 != 0 {
        usize::from(input.knob & 0x7f)
    } else {
        MIB
    };
    let (first, second) = input.parts();
    let extra = usize::from((input.knob >> 4) & 7);
    for index in [0, 2, extra] {
        let (content_type, is_msgpack) = CONTENT_TYPES[index];
        let mut headers: Vec<(&str, &[u8])> = Vec::new();
        if let Some(content_type) = content_type {
            headers.push(("content-type", content_type.as_bytes()));
        }
        let whole = fuzzing::rest_read_body(&headers, &[input.payload], limit);
        let split = fuzzing::rest_read_body(&headers, &[first, second], limit);
        assert_eq!(whole, split, "whole vs in two pieces ({content_type:?})");
        let length = input.payload.len().to_string();
        let mut declared = headers.clone();
        declared.push(("content-length", length.as_bytes()));
        assert_eq!(
            fuzzing::rest_read_body(&declared, &[first, second], limit),
            whole,
            "a correct Content-Length changes nothing"
        );
        // A declared length over the limit is refused before reading.
        let over = (limit + 1).to_string();
        let mut declared = headers.clone();
        declared.push(("content-length", over.as_bytes()));
        let refused = fuzzing::rest_read_body(&declared, &[first], limit)
            .expect_err("a declared length over the limit");
        assert_eq!(refused.status, 413);

        if input.payload.len() > limit {
            let error = whole.as_ref().expect_err("a body over the limit");
            assert_eq!(error.status, 413, "over the limit: {error:?}");
        } else {
            let direct = if is_msgpack {
                fuzzing::rest_parse_payloads(input.payload).map(SendBody::Payloads)
            } else {
                fuzzing::rest_parse_invocation(input.payload)
            };
            assert_eq!(whole, direct, "read = the parser for {content_type:?}");
        }
        match &whole {
            Ok(body) => send_body(body),
            Err(error) => {
                let (code, _) = rest_error(error.status, &error.body);
                match error.status {
                    400 => assert_eq!(code, "BadRequest"),
                    413 => assert_eq!(code, "PayloadTooLarge"),
                    other => panic!("a body error with status {other}"),
                }
            }
        }
    }
}

/// A parsed body can be delivered: the invocation encodes for both protocols and decodes
/// back; payloads for `json` / `messagepack` are complete frames.
fn send_body(body: &SendBody) {
    match body {
        SendBody::Invocation { target, arguments } => {
            assert!(!target.is_empty(), "an empty target was accepted");
            let framed = encode_invocation(Format::Json, target, arguments);
            let body = one_frame(Format::Json, &framed);
            match json::decode(&body) {
                Ok(HubMessage::Invocation {
                    target: t,
                    arguments: a,
                    ..
                }) => {
                    assert_eq!(&t, target);
                    assert_eq!(&a, arguments);
                }
                other => panic!("the JSON invocation decodes as {other:?}"),
            }
            let framed = encode_invocation(Format::MessagePack, target, arguments);
            let body = one_frame(Format::MessagePack, &framed);
            match msgpack::decode(&body) {
                Ok(HubMessage::Invocation {
                    target: t,
                    arguments: a,
                    ..
                }) => {
                    assert_eq!(&t, target);
                    assert_eq!(a.len(), arguments.len());
                }
                other => panic!("the MessagePack invocation decodes as {other:?}"),
            }
        }
        SendBody::Payloads(payloads) => {
            assert!(!payloads.is_empty());
            for (name, payload) in payloads {
                assert!(!name.is_empty());
                let format = match name.as_str() {
                    "json" => Format::Json,
                    "messagepack" => Format::MessagePack,
                    _ => continue,
                };
                let mut buf = BytesMut::from(&payload[..]);
                let frames = FrameSplitter::new(format, usize::MAX)
                    .split_all(&mut buf)
                    .expect("accepted payloads split");
                assert!(!frames.is_empty() && buf.is_empty(), "complete frames");
            }
        }
    }
}

fn one_frame(format: Format, framed: &[u8]) -> bytes::Bytes {
    let mut buf = BytesMut::from(framed);
    let mut frames = FrameSplitter::new(format, usize::MAX)
        .split_all(&mut buf)
        .expect("an encoded invocation splits");
    assert!(buf.is_empty() && frames.len() == 1, "one whole frame");
    frames.pop().expect("one frame").body_bytes()
}

// ---- the route table ----

fn route_table(path: &str) {
    let segments = match fuzzing::rest_segments(path) {
        Ok(segments) => segments,
        Err(error) => {
            assert_eq!(error.status, 400, "{error:?}");
            rest_error(error.status, &error.body);
            return;
        }
    };
    // Decoding is stable: every byte percent-encoded (slashes inside segments too) gives
    // the same segments, so the same routes.
    let encoded: Vec<String> = segments.iter().map(|s| percent_all(s)).collect();
    let encoded = format!("/{}/", encoded.join("/"));
    assert_eq!(
        fuzzing::rest_segments(&encoded).expect("re-encoded segments decode"),
        segments,
        "re-encoded as {encoded:?}"
    );
    // Literal segments ignore ASCII case; names keep theirs.
    let upper: Vec<String> = segments.iter().map(|s| s.to_ascii_uppercase()).collect();

    let mut not_found = Vec::new();
    let mut results = Vec::new();
    for method in methods() {
        let result = fuzzing::rest_resolve(&segments, &method);
        let shouted = fuzzing::rest_resolve(&upper, &method);
        match (&result, &shouted) {
            (Ok(a), Ok(b)) => assert_eq!(
                format!("{a:?}").to_ascii_uppercase(),
                format!("{b:?}").to_ascii_uppercase(),
                "upper-cased path"
            ),
            (Err(a), Err(b)) => assert_eq!(a.status, b.status, "upper-cased path"),
            _ => panic!("upper-cased path: {result:?} vs {shouted:?}"),
        }
        match &result {
            Ok(RestRoute::Hub { hub, .. }) => {
                assert!(segments.contains(hub), "hub {hub:?} not from the path")
            }
            Ok(_) => {}
            Err(error) => {
                let (_, message) = rest_error(error.status, &error.body);
                match error.status {
                    404 => {}
                    405 => {
                        let allowed = message
                            .rsplit_once("allowed: ")
                            .map(|(_, list)| list)
                            .expect("405 lists the allowed methods");
                        for name in allowed.split(", ") {
                            let other = Method::from_bytes(name.as_bytes()).expect("a method");
                            assert_ne!(other, method, "{method} is listed as allowed");
                            assert!(
                                fuzzing::rest_resolve(&segments, &other).is_ok(),
                                "{name} is listed as allowed but refused"
                            );
                        }
                    }
                    other => panic!("route status {other}"),
                }
            }
        }
        not_found.push(matches!(&result, Err(e) if e.status == 404));
        results.push(result);
    }
    assert!(
        not_found.iter().all(|&n| n) || not_found.iter().all(|&n| !n),
        "404 depends on the path only: {results:?}"
    );
    // HEAD goes wherever GET goes.
    assert_eq!(results[1].is_ok(), results[2].is_ok(), "GET vs HEAD");
    if let (Ok(get), Ok(head)) = (&results[1], &results[2]) {
        assert_eq!(get, head, "GET vs HEAD");
    }
}

// ---- whole requests ----

const HUB: &str = "chat";
const HANDSHAKE: &[u8] = b"{\"protocol\":\"json\",\"version\":1}\x1e";

/// Status and body of one request against a fresh node with one JSON client (user `u1`, in
/// group `g1`); `{cid}` in the URI stands for that client's connection id, and replaces it in
/// the reply body.
fn request(uri: &str, method: &[u8], headers: &[(&str, &[u8])], body: &[&[u8]]) -> Call {
    let node = node(Config::default());
    let session = ClientSession::open(
        &node,
        HUB,
        Some("u1"),
        fuzzing::SessionTransport::WebSockets,
    )
    .expect("a connection");
    session.receive(HANDSHAKE).expect("a valid handshake");
    let hub = HubName::new(HUB, None).expect("a hub name");
    let join = Command::add_to_group(session.connection_id(), "g1").expect("valid names");
    assert!(fuzzing::execute_now(&node, &hub, join).is_ok());
    assert_eq!(session.take_sent(), vec![&b"{}\x1e"[..]]);

    let uri = uri.replace("{cid}", session.connection_id());
    let path = uri.split('?').next().unwrap_or("").to_string();
    let auth = format!("Bearer {}", token(&format!("http://localhost{path}")));
    let mut all: Vec<(&str, &[u8])> = vec![("host", b"localhost")];
    all.extend_from_slice(headers);
    if !headers.iter().any(|(n, _)| *n == "authorization") {
        all.push(("authorization", auth.as_bytes()));
    }
    let call = fuzzing::call(&node, method, &uri, &all, body);
    // Whatever reached the client are complete JSON frames.
    for frame in session.take_sent() {
        let mut buf = BytesMut::from(&frame[..]);
        let frames = FrameSplitter::new(Format::Json, usize::MAX).split_all(&mut buf);
        assert!(
            frames.is_ok_and(|f| !f.is_empty()) && buf.is_empty(),
            "the client got an incomplete JSON frame: {frame:?}"
        );
    }
    // The connection id differs from node to node: put the placeholder back.
    match call {
        Call::Done(mut reply) => {
            let body =
                String::from_utf8_lossy(&reply.body).replace(session.connection_id(), "{cid}");
            reply.body = body.into();
            Call::Done(reply)
        }
        other => other,
    }
}

fn dispatch(input: &Input<'_>) {
    let (first, second) = input.parts();
    let target = text(first);
    let uri = if target.starts_with('/') {
        target.into_owned()
    } else {
        format!("/{target}")
    };
    let method = methods()[usize::from(input.knob & 7)].clone();
    let mut headers: Vec<(&str, &[u8])> = Vec::new();
    if let (Some(content_type), _) = CONTENT_TYPES[usize::from((input.knob >> 3) & 7)] {
        headers.push(("content-type", content_type.as_bytes()));
    }
    if input.knob >> 6 == 3 {
        headers.push(("authorization", b"Bearer not-a-token"));
    }
    let method = method.as_str().as_bytes().to_vec();
    let whole = request(&uri, &method, &headers, &[second]);
    let split_at = second.len() / 2;
    let (a, b) = second.split_at(split_at);
    let split = request(&uri, &method, &headers, &[a, b]);
    match (&whole, &split) {
        (Call::Done(w), Call::Done(s)) => {
            assert_eq!(w.status, s.status, "body whole vs in two pieces");
            if w.status >= 400 {
                assert_eq!(w.body, s.body, "body whole vs in two pieces");
            }
        }
        _ => assert_eq!(whole, split),
    }
    // Paths the REST dispatcher serves (`/api/{*path}`); `/api/` alone is no route at all.
    let path = uri.split(['?', '#']).next().unwrap_or("");
    let is_rest = path.len() > "/api/".len() && path.starts_with("/api/");
    match whole {
        Call::Invalid => {}
        Call::Pending => assert!(!is_rest, "a REST request did not complete at once"),
        Call::Done(reply) => {
            assert!(
                reply.status < 500,
                "{} for {uri:?}: {:?}",
                reply.status,
                reply.body
            );
            if is_rest && reply.status >= 400 && !reply.body.is_empty() {
                rest_error(reply.status, &reply.body);
            }
        }
    }
}

pub fn check(data: &[u8]) {
    let input = Input::parse(data);
    body(&input);
    let (first, _) = input.parts();
    route_table(&text(first));
    dispatch(&input);
}
