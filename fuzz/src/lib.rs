//! Property checks behind the Switchyard fuzz targets.
//!
//! Every target takes the same input layout (see [`Input`]): three header bytes that
//! choose a split position and a small "knob", then the payload. Each check feeds the
//! payload whole AND in two pieces cut at the chosen position, and asserts that the two
//! agree wherever the API promises they do. Nothing may panic.
//!
//! The checks are plain functions so that `cargo test` (stable, no libFuzzer) can replay
//! the corpora in `corpus/<target>/`; the binaries in `fuzz_targets/` only wrap them.

#![forbid(unsafe_code)]

use std::borrow::Cow;

/// Bytes in front of the payload: split position (u16, little endian) and knob.
pub const HEADER_LEN: usize = 3;

/// One fuzz input, decoded.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    /// Everything after the header: the bytes the target is about.
    pub payload: &'a [u8],
    /// Where the payload is cut for the two-piece run: `u16 % (payload.len() + 1)`,
    /// so 0 and `payload.len()` (an empty piece) are possible.
    pub cut: usize,
    /// A target-specific small choice (a tiny size limit, a clock value, …).
    pub knob: u8,
}

impl<'a> Input<'a> {
    /// Splits off the header. Missing header bytes count as zero.
    pub fn parse(data: &'a [u8]) -> Self {
        let mut header = [0u8; HEADER_LEN];
        let n = data.len().min(HEADER_LEN);
        header[..n].copy_from_slice(&data[..n]);
        let payload = &data[n..];
        let raw_cut = usize::from(u16::from_le_bytes([header[0], header[1]]));
        Input {
            payload,
            cut: raw_cut % (payload.len() + 1),
            knob: header[2],
        }
    }

    /// The payload cut in two at [`Input::cut`].
    pub fn parts(&self) -> (&'a [u8], &'a [u8]) {
        self.payload.split_at(self.cut)
    }

    /// Builds an input (for seeds and tests): header + payload.
    pub fn encode(cut: u16, knob: u8, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
        out.extend_from_slice(&cut.to_le_bytes());
        out.push(knob);
        out.extend_from_slice(payload);
        out
    }
}

/// The payload as text: invalid UTF-8 is replaced, so every input reaches the parser.
fn text(bytes: &[u8]) -> Cow<'_, str> {
    String::from_utf8_lossy(bytes)
}

/// Splits `s` at the char boundary at or before `at`.
fn split_str(s: &str, at: usize) -> (&str, &str) {
    let mut at = at.min(s.len());
    while !s.is_char_boundary(at) {
        at -= 1;
    }
    s.split_at(at)
}

// The targets that run the service itself (`switchyard-node`), each in its own file.
mod service_node;

mod http_stub;

pub mod admin_hub;
pub mod app_server_session;
pub mod client_negotiate;
pub mod client_session;
pub mod config;
pub mod negotiate_query;
pub mod rest_body;
pub mod upstream_reply;

/// `FrameSplitter` + `peek` + `json::decode` / `msgpack::decode` and their encoders.
pub mod hub_frames {
    use bytes::BytesMut;
    use switchyard_hub_protocol::msgpack::{self, Layout};
    use switchyard_hub_protocol::{
        encode_message, json, peek, CompletionResult, Format, Frame, FrameError, FrameSplitter,
        HubMessage, Peek, RECORD_SEPARATOR,
    };

    use crate::Input;

    /// The "large" limit: no limit at all.
    const NO_LIMIT: usize = usize::MAX;
    /// The "small" limit of the brief (4 KiB, below ASP.NET Core's 32 KiB default).
    const SMALL_LIMIT: usize = 4096;

    /// What splitting a whole stream produced: the frames, then either the incomplete
    /// rest left in the buffer or the error that stopped the stream.
    #[derive(Debug, PartialEq)]
    struct Outcome {
        frames: Vec<Frame>,
        end: Result<Vec<u8>, FrameError>,
    }

    /// Takes frames off `buf` until it needs more bytes or fails, checking each frame.
    fn drain(
        splitter: &FrameSplitter,
        buf: &mut BytesMut,
        frames: &mut Vec<Frame>,
    ) -> Result<(), FrameError> {
        loop {
            let before = buf.len();
            match splitter.next_frame(buf)? {
                Some(frame) => {
                    assert_eq!(
                        before - buf.len(),
                        frame.framed.len(),
                        "a frame takes exactly its own bytes off the buffer"
                    );
                    check_frame(splitter, &frame);
                    frames.push(frame);
                }
                None => {
                    assert_eq!(buf.len(), before, "Ok(None) leaves the buffer untouched");
                    return Ok(());
                }
            }
        }
    }

    fn check_frame(splitter: &FrameSplitter, frame: &Frame) {
        let body = frame.body();
        assert!(
            body.len() <= splitter.max_message_size(),
            "body over the limit"
        );
        assert_eq!(frame.body_len(), body.len());
        assert_eq!(&frame.body_bytes()[..], body);
        match splitter.format() {
            Format::Json => {
                assert_eq!(frame.framed.len(), body.len() + 1);
                assert_eq!(frame.framed.last(), Some(&RECORD_SEPARATOR));
                assert!(
                    !body.contains(&RECORD_SEPARATOR),
                    "a body holds no separator"
                );
            }
            Format::MessagePack => {
                let (len, prefix) = msgpack::read_varint(&frame.framed)
                    .expect("the prefix was read once already")
                    .expect("the prefix is complete");
                assert_eq!(len as usize, body.len());
                assert_eq!(prefix + body.len(), frame.framed.len());
            }
        }
    }

    fn run_whole(splitter: &FrameSplitter, stream: &[u8]) -> Outcome {
        let mut buf = BytesMut::from(stream);
        let mut frames = Vec::new();
        let end = drain(splitter, &mut buf, &mut frames).map(|()| buf.to_vec());
        Outcome { frames, end }
    }

    fn run_split(splitter: &FrameSplitter, first: &[u8], second: &[u8]) -> Outcome {
        let mut buf = BytesMut::from(first);
        let mut frames = Vec::new();
        let end = drain(splitter, &mut buf, &mut frames).and_then(|()| {
            buf.extend_from_slice(second);
            drain(splitter, &mut buf, &mut frames)
        });
        Outcome {
            frames,
            end: end.map(|()| buf.to_vec()),
        }
    }

    /// Runs one splitter whole and split, asserts both agree, returns the outcome.
    fn split_both_ways(splitter: &FrameSplitter, input: &Input<'_>) -> Outcome {
        let (first, second) = input.parts();
        let whole = run_whole(splitter, input.payload);
        let split = run_split(splitter, first, second);
        assert_eq!(
            whole,
            split,
            "whole vs split at {} (limit {})",
            input.cut,
            splitter.max_message_size()
        );
        if let Ok(rest) = &whole.end {
            let mut again: Vec<u8> = whole
                .frames
                .iter()
                .flat_map(|f| f.framed.iter().copied())
                .collect();
            again.extend_from_slice(rest);
            assert_eq!(again, input.payload, "frames + rest give back the stream");
        }
        whole
    }

    /// The target body shared by `hub_frames_json` and `hub_frames_msgpack`.
    pub fn check(format: Format, data: &[u8]) {
        let input = Input::parse(data);
        let large = split_both_ways(&FrameSplitter::new(format, NO_LIMIT), &input);
        for limit in [usize::from(input.knob), SMALL_LIMIT] {
            let small = split_both_ways(&FrameSplitter::new(format, limit), &input);
            if small.end.is_ok() {
                assert_eq!(
                    small, large,
                    "a stream within limit {limit} splits the same"
                );
            } else {
                assert!(small.frames.len() <= large.frames.len());
                assert_eq!(
                    small.frames[..],
                    large.frames[..small.frames.len()],
                    "frames before a size error are the unlimited ones"
                );
            }
        }
        for frame in &large.frames {
            match format {
                Format::Json => json_body(frame.body()),
                Format::MessagePack => msgpack_body(frame.body()),
            }
        }
    }

    /// What `peek` must report for a message that decodes.
    fn expected_peek<V>(message: &HubMessage<V>) -> Peek {
        let mut p = Peek {
            message_type: u8::try_from(message.message_type()).unwrap_or(0),
            invocation_id: message.invocation_id().map(str::to_owned),
            ..Peek::default()
        };
        match message {
            HubMessage::Invocation { target, .. } | HubMessage::StreamInvocation { target, .. } => {
                p.target = Some(target.clone())
            }
            HubMessage::Completion {
                result: CompletionResult::Error(e),
                ..
            } => p.error = Some(e.clone()),
            HubMessage::Close {
                error,
                allow_reconnect,
            } => {
                p.error = error.clone();
                p.allow_reconnect = *allow_reconnect;
            }
            HubMessage::Ack { sequence_id } | HubMessage::Sequence { sequence_id } => {
                p.sequence_id = Some(*sequence_id)
            }
            _ => {}
        }
        p
    }

    /// The one frame `encoded` must consist of; returns its body.
    fn single_frame(format: Format, encoded: &[u8]) -> Vec<u8> {
        let mut buf = BytesMut::from(encoded);
        let frame = FrameSplitter::new(format, NO_LIMIT)
            .next_frame(&mut buf)
            .expect("an encoded message frames")
            .expect("an encoded message is complete");
        assert!(buf.is_empty(), "an encoded message is exactly one frame");
        frame.body().to_vec()
    }

    /// The .NET MessagePack layout always writes the streamIds slot, so `None` and
    /// `Some([])` are the same message on that wire.
    fn dotnet_normalized<V>(message: HubMessage<V>) -> HubMessage<V> {
        match message {
            HubMessage::Invocation {
                headers,
                invocation_id,
                target,
                arguments,
                stream_ids,
            } => HubMessage::Invocation {
                headers,
                invocation_id,
                target,
                arguments,
                stream_ids: Some(stream_ids.unwrap_or_default()),
            },
            HubMessage::StreamInvocation {
                headers,
                invocation_id,
                target,
                arguments,
                stream_ids,
            } => HubMessage::StreamInvocation {
                headers,
                invocation_id,
                target,
                arguments,
                stream_ids: Some(stream_ids.unwrap_or_default()),
            },
            other => other,
        }
    }

    fn json_body(body: &[u8]) {
        let peeked = peek(Format::Json, body);
        let Ok(message) = json::decode(body) else {
            return;
        };
        let expected = expected_peek(&message);
        assert_eq!(peeked, Ok(expected.clone()), "peek agrees with decode");

        // JSON round trip: encode, re-frame, re-decode, re-encode.
        let encoded = json::encode(&message);
        assert_eq!(encode_message(Format::Json, &message)[..], encoded[..]);
        let body2 = single_frame(Format::Json, &encoded);
        let again = json::decode(&body2).expect("an encoded message decodes");
        assert_eq!(again, message, "JSON round trip");
        assert_eq!(json::encode(&again), encoded, "JSON encoding is stable");
        assert_eq!(peek(Format::Json, &body2), Ok(expected.clone()));

        // The same message written as MessagePack decodes to the converted values.
        let mp = encode_message(Format::MessagePack, &message);
        let mp_body = single_frame(Format::MessagePack, &mp);
        let converted = msgpack::decode(&mp_body).expect("a converted message decodes");
        let want = message.map_values(|v| msgpack::json_to_msgpack(&v));
        assert_eq!(
            dotnet_normalized(converted),
            dotnet_normalized(want),
            "JSON → MessagePack conversion"
        );
        assert_eq!(peek(Format::MessagePack, &mp_body), Ok(expected));
    }

    fn msgpack_body(body: &[u8]) {
        let peeked = peek(Format::MessagePack, body);
        let Ok(message) = msgpack::decode(body) else {
            return;
        };
        let expected = expected_peek(&message);
        assert_eq!(peeked, Ok(expected.clone()), "peek agrees with decode");
        assert_eq!(
            msgpack::encode(&message),
            msgpack::encode_with_layout(&message, Layout::DotNet)
        );
        for layout in [Layout::DotNet, Layout::Js] {
            let encoded = msgpack::encode_with_layout(&message, layout);
            let body2 = single_frame(Format::MessagePack, &encoded);
            let again = msgpack::decode(&body2).expect("an encoded message decodes");
            assert_eq!(
                msgpack::encode_with_layout(&again, layout),
                encoded,
                "{layout:?} encoding is stable"
            );
            assert_eq!(peek(Format::MessagePack, &body2), Ok(expected.clone()));
            let (want, got) = match layout {
                Layout::DotNet => (dotnet_normalized(message.clone()), dotnet_normalized(again)),
                Layout::Js => (message.clone(), again),
            };
            // Float NaN payloads are not equal to themselves; the byte comparison above
            // covers them.
            #[allow(clippy::eq_op)]
            if want == want {
                assert_eq!(got, want, "{layout:?} round trip");
            }
        }
    }
}

/// Target `hub_frames_json`.
pub mod hub_frames_json {
    pub fn check(data: &[u8]) {
        crate::hub_frames::check(switchyard_hub_protocol::Format::Json, data)
    }
}

/// Target `hub_frames_msgpack`.
pub mod hub_frames_msgpack {
    pub fn check(data: &[u8]) {
        crate::hub_frames::check(switchyard_hub_protocol::Format::MessagePack, data)
    }
}

/// Target `handshake`: `parse_request` and `parse_response`.
pub mod handshake {
    use switchyard_hub_protocol::handshake::{
        encode_error_response, encode_request, parse_request, parse_response, RESPONSE_OK,
    };
    use switchyard_hub_protocol::RECORD_SEPARATOR;

    use crate::Input;

    /// The record a successful parse consumed: `used` bytes ending in the first separator.
    fn check_consumed(buf: &[u8], used: usize) {
        assert!(used >= 1 && used <= buf.len());
        assert_eq!(buf[used - 1], RECORD_SEPARATOR);
        assert!(!buf[..used - 1].contains(&RECORD_SEPARATOR));
    }

    pub fn check(data: &[u8]) {
        let input = Input::parse(data);
        let (first, _) = input.parts();
        let whole = input.payload;

        for max in [usize::from(input.knob), 1024, usize::MAX] {
            let all = parse_request(whole, max);
            let part = parse_request(first, max);
            // The first piece either needs more bytes or already decides the outcome.
            assert!(
                part == Ok(None) || part == all,
                "request: first piece {part:?}, whole {all:?} (max {max})"
            );
            match &all {
                Ok(None) => {
                    assert!(whole.len() <= max && !whole.contains(&RECORD_SEPARATOR));
                }
                Ok(Some((request, used))) => {
                    check_consumed(whole, *used);
                    assert!(used - 1 <= max, "record over the limit accepted");
                    let encoded = encode_request(&request.protocol, request.version);
                    assert_eq!(
                        parse_request(&encoded, usize::MAX),
                        Ok(Some((request.clone(), encoded.len()))),
                        "request round trip"
                    );
                }
                Err(_) => {}
            }
        }

        let all = parse_response(whole);
        let part = parse_response(first);
        assert!(
            part == Ok(None) || part == all,
            "response: first piece {part:?}, whole {all:?}"
        );
        match &all {
            Ok(None) => assert!(!whole.contains(&RECORD_SEPARATOR)),
            Ok(Some((error, used))) => {
                check_consumed(whole, *used);
                let encoded = match error {
                    Some(e) => encode_error_response(e),
                    None => RESPONSE_OK.to_vec(),
                };
                assert_eq!(
                    parse_response(&encoded),
                    Ok(Some((error.clone(), encoded.len()))),
                    "response round trip"
                );
            }
            Err(_) => {}
        }
    }
}

/// Target `backplane_envelope`: the envelope nodes exchange through the backplane, bare and
/// sealed (the form on the network: the envelope, then its HMAC under the cluster's key).
pub mod backplane_envelope {
    use bytes::Bytes;
    use switchyard_backplane::envelope::{
        decode, encode, encode_sealed, open, OpenError, Seal, TAG_LEN,
    };
    use switchyard_core::Message;

    use crate::Input;

    /// The key the seeds' sealed envelopes are sealed with (fuzz/seeds.py).
    pub const KEY: &[u8] = b"switchyard fuzz cluster key";

    pub fn check(data: &[u8]) {
        let input = Input::parse(data);
        let (first, _) = input.parts();
        let whole = Bytes::copy_from_slice(input.payload);
        let seal = Seal::from_secrets(KEY, &[]);
        sealed(&whole, &seal, input.cut);
        let all = decode(&whole);
        // An envelope arrives whole or not at all: a strict prefix of a good one is an error.
        if first.len() < whole.len() && all.is_ok() {
            assert!(
                decode(&Bytes::copy_from_slice(first)).is_err(),
                "a truncated envelope decoded"
            );
        }
        if let Ok((stamp, message)) = all {
            let encoded = encode(stamp, &message);
            assert_eq!(
                decode(&encoded),
                Ok((stamp, message.clone())),
                "envelope round trip"
            );
            // Sealed, it opens under the key to the same, and under no other key; a changed
            // byte anywhere (the knob's cut picks it) makes it unauthenticated.
            let sealed = encode_sealed(stamp, &message, &seal);
            assert_eq!(sealed.len(), encoded.len() + TAG_LEN);
            assert_eq!(open(&sealed, &seal), Ok((stamp, message.clone())));
            let stranger = Seal::from_secrets(b"another cluster", &[]);
            assert_eq!(open(&sealed, &stranger), Err(OpenError::Unauthenticated));
            let mut changed = sealed.to_vec();
            changed[input.cut % sealed.len()] ^= 0x01;
            assert_eq!(
                open(&Bytes::from(changed), &seal),
                Err(OpenError::Unauthenticated)
            );
            // The node's own reading of what rides inside.
            if let Message::Control { body, .. } = &message {
                switchyard_node::fuzzing::control_body(body, input.cut.min(body.len()));
            }
        }
    }

    /// The input as a received message: it opens only with a good tag, and then to what the
    /// bytes before the tag decode to; those bytes with a good tag open to that too, so
    /// decoding is fuzzed behind the seal as well.
    fn sealed(whole: &Bytes, seal: &Seal, cut: usize) {
        match open(whole, seal) {
            Ok((stamp, message)) => {
                let inside = whole.slice(..whole.len() - TAG_LEN);
                assert_eq!(decode(&inside), Ok((stamp, message)), "opened to another");
            }
            Err(OpenError::Envelope(_)) => {
                assert!(whole.len() >= TAG_LEN, "a short message passed the seal");
            }
            Err(OpenError::Unauthenticated) => {}
        }
        let mut resealed = whole.to_vec();
        resealed.extend_from_slice(&seal.tag(&[whole]));
        let resealed = Bytes::from(resealed);
        assert_eq!(
            open(&resealed, seal),
            decode(whole).map_err(OpenError::Envelope),
            "the seal changed the reading"
        );
        // A cut anywhere in a sealed message leaves no valid tag.
        let cut = cut.min(resealed.len().saturating_sub(1));
        assert_eq!(
            open(&resealed.slice(..cut), seal),
            Err(OpenError::Unauthenticated)
        );
    }
}

/// Target `connection_string`: `ConnectionString::from_str` and `Display`.
pub mod connection_string {
    use switchyard_auth::{ConnectionString, ConnectionStringError};

    use crate::{split_str, text, Input};

    /// Parses `s`; when it is valid, its canonical text must parse back to it.
    fn parse_and_roundtrip(s: &str) -> Result<ConnectionString, ConnectionStringError> {
        let parsed = s.parse::<ConnectionString>();
        if let Ok(cs) = &parsed {
            let canonical = cs.to_string();
            let again: ConnectionString = canonical
                .parse()
                .unwrap_or_else(|e| panic!("Display output does not re-parse: {e}"));
            assert_eq!(&again, cs, "connection string round trip");
            assert_eq!(again.to_string(), canonical, "Display is stable");
            for url in [cs.base_url(), cs.client_base_url(), cs.server_base_url()] {
                assert!(url.path().ends_with('/'), "base URLs end with '/'");
            }
            let _ = format!("{cs:?}");
        }
        parsed
    }

    pub fn check(data: &[u8]) {
        let input = Input::parse(data);
        let s = text(input.payload);
        parse_and_roundtrip(&s).ok();

        let (a, b) = split_str(&s, input.cut);
        parse_and_roundtrip(a).ok();
        parse_and_roundtrip(b).ok();
        // Segment order never matters: `a;b` and `b;a` hold the same segments.
        let ab = parse_and_roundtrip(&format!("{a};{b}"));
        let ba = parse_and_roundtrip(&format!("{b};{a}"));
        assert_eq!(ab.is_ok(), ba.is_ok(), "{ab:?} vs {ba:?}");
        if let (Ok(ab), Ok(ba)) = (ab, ba) {
            assert_eq!(ab, ba, "segment order changed the value");
        }
    }
}

/// Target `jwt_verify`: `verify_token` on raw and on validly signed tokens, the
/// issue → verify round trip, and `audience_matches`.
pub mod jwt_verify {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine as _;
    use hmac::{Hmac, Mac};
    use switchyard_auth::{
        audience_matches, verify_token, verify_token_ignoring_audience, AccessKeys, AuthError,
        RequestTarget, TokenBuilder, EMULATOR_ACCESS_KEY, MAX_TOKEN_LEN,
    };

    use crate::{split_str, text, Input};

    /// Clock values the knob picks from.
    const NOWS: [i64; 6] = [1_700_000_000, 1_700_003_660, 0, -1, i64::MIN, i64::MAX];

    fn hmac<M: Mac + hmac::digest::KeyInit>(input: &[u8]) -> Vec<u8> {
        let mut mac = <M as Mac>::new_from_slice(EMULATOR_ACCESS_KEY.as_bytes())
            .expect("HMAC takes any key length");
        mac.update(input);
        mac.finalize().into_bytes().to_vec()
    }

    /// A token whose header and payload are the given bytes, validly signed with the
    /// emulator key in the algorithm the header names (HS256 when it names none).
    pub fn sign(header: &[u8], payload: &[u8]) -> String {
        let alg = serde_json::from_slice::<serde_json::Value>(header)
            .ok()
            .and_then(|h| h.get("alg").and_then(|a| a.as_str()).map(str::to_owned));
        let mut token = URL_SAFE_NO_PAD.encode(header);
        token.push('.');
        token.push_str(&URL_SAFE_NO_PAD.encode(payload));
        let signature = match alg.as_deref() {
            Some("HS384") => hmac::<Hmac<sha2::Sha384>>(token.as_bytes()),
            Some("HS512") => hmac::<Hmac<sha2::Sha512>>(token.as_bytes()),
            _ => hmac::<Hmac<sha2::Sha256>>(token.as_bytes()),
        };
        token.push('.');
        token.push_str(&URL_SAFE_NO_PAD.encode(signature));
        token
    }

    /// `verify_token` with an accept-all and a reject-all audience rule must agree with
    /// `verify_token_ignoring_audience`.
    fn verify(token: &str, keys: &AccessKeys, now: i64) -> Result<(), AuthError> {
        let loose = verify_token_ignoring_audience(token, keys, now);
        let accept_all = verify_token(token, keys, now, |_| true);
        let reject_all = verify_token(token, keys, now, |_| false);
        match &loose {
            Ok(v) => {
                let wrong = Err(AuthError::WrongAudience {
                    found: v.audiences.clone(),
                });
                if v.audiences.is_empty() {
                    assert_eq!(accept_all, wrong);
                } else {
                    assert_eq!(accept_all, Ok(v.clone()));
                }
                assert_eq!(reject_all, wrong);
                assert!(
                    now < v
                        .expires_at
                        .saturating_add(switchyard_auth::EXPIRY_LEEWAY_SECS),
                    "an expired token was accepted"
                );
                let _ = (
                    v.user_id(),
                    v.allowed_transports(),
                    v.max_poll_interval_secs(),
                    v.handshake_timeout_secs(),
                    v.close_on_auth_expiry(),
                );
                assert!(v.allowed_transports().is_none_or(|m| (1..=7).contains(&m)));
                assert!(v
                    .max_poll_interval_secs()
                    .is_none_or(|s| (1..=300).contains(&s)));
                assert!(v
                    .handshake_timeout_secs()
                    .is_none_or(|s| (1..=30).contains(&s)));
            }
            Err(e) => {
                assert_eq!(accept_all.as_ref().err(), Some(e));
                assert_eq!(reject_all.as_ref().err(), Some(e));
                let _ = e.to_string();
            }
        }
        loose.map(|_| ())
    }

    /// A request target spelled out by `aud` itself, when it names an http(s)/ws(s) host.
    fn self_target(url: &url::Url) -> Option<(String, String, Option<String>)> {
        let scheme = url.scheme().to_ascii_lowercase();
        if !matches!(scheme.as_str(), "http" | "https" | "ws" | "wss") {
            return None;
        }
        let host = url.host_str().filter(|h| !h.is_empty())?;
        let host = match url.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_owned(),
        };
        // The query goes in with its leading '?': `RequestTarget::query` may or may not
        // start with one, so a raw query that itself starts with '?' (`/p??a=b`) is only
        // unambiguous in that form.
        Some((
            host,
            url.path().to_owned(),
            url.query().map(|q| format!("?{q}")),
        ))
    }

    fn audience(aud: &str, request: &str) {
        let mut fields = request.splitn(4, '\n');
        let target = RequestTarget {
            scheme: fields.next().unwrap_or(""),
            host: fields.next().unwrap_or(""),
            path: fields.next().unwrap_or(""),
            query: fields.next(),
        };
        let _ = audience_matches(aud, &target);

        // An audience URL always names the request spelled out from its own parts.
        if let Ok(url) = url::Url::parse(aud.trim()) {
            if let Some((host, path, query)) = self_target(&url) {
                let own = RequestTarget {
                    scheme: url.scheme(),
                    host: &host,
                    path: &path,
                    query: query.as_deref(),
                };
                assert!(
                    audience_matches(aud, &own),
                    "audience {aud:?} does not match its own target {own:?}"
                );
            }
        }
    }

    /// Tokens we issue verify, with the audience, lifetime and claim we put in.
    fn issue_and_verify(aud: &str, claim: &str, keys: &AccessKeys) {
        let (name, value) = claim.split_once('=').unwrap_or((claim, ""));
        let now = 1_700_000_000;
        let token = TokenBuilder::new(aud)
            .claim(name, value)
            .sign(EMULATOR_ACCESS_KEY, now);
        if token.len() > MAX_TOKEN_LEN {
            return;
        }
        let verified = verify_token(&token, keys, now, |a| a == aud)
            .unwrap_or_else(|e| panic!("an issued token does not verify: {e}"));
        assert_eq!(verified.audiences, vec![aud.to_owned()]);
        assert_eq!(verified.expires_at, now + 3600);
        let stored = if ["nbf", "exp", "iat", "iss", "aud"].contains(&name) {
            format!("asrs.u.{name}")
        } else {
            name.to_owned()
        };
        assert!(
            verified.claim_values(&stored).any(|v| v == value),
            "claim {stored:?} lost"
        );
    }

    pub fn check(data: &[u8]) {
        let input = Input::parse(data);
        let now = NOWS[usize::from(input.knob) % NOWS.len()];
        let keys = AccessKeys::emulator();

        // Whole: the payload is the token.
        let _ = verify(&text(input.payload), &keys, now);

        // Split: header JSON | payload JSON, signed with the emulator key, so the claim
        // checks behind the signature are reached.
        let (header, payload) = input.parts();
        let token = sign(header, payload);
        if verify(&token, &keys, now).is_ok() {
            // The same token with a different signature must not verify.
            let mut forged = token.into_bytes();
            let last = forged.len() - 1;
            forged[last] = if forged[last] == b'A' { b'B' } else { b'A' };
            let forged = String::from_utf8(forged).expect("base64url is ASCII");
            assert!(
                verify(&forged, &keys, now).is_err(),
                "a forged token verified"
            );
        }

        let s = text(input.payload);
        let (first, second) = split_str(&s, input.cut);
        audience(first, second);
        issue_and_verify(first, second, &keys);
    }
}

/// Target `service_protocol`: `FrameReader`, `decode` and the encoders of the Azure SignalR
/// service protocol.
pub mod service_protocol {
    use bytes::{Bytes, BytesMut};
    use switchyard_service_protocol::{
        decode, encode, encode_body, encoded, encoded_len, type_name, FrameError, FrameReader,
        ServiceMessage,
    };

    use crate::Input;

    /// The "small" limit next to the knob's tiny one and no limit at all.
    const SMALL_LIMIT: usize = 4096;

    /// What reading a whole stream produced: each body with the number of stream bytes its
    /// frame took, then the incomplete rest or the error that stopped the stream.
    #[derive(Debug, PartialEq)]
    struct Outcome {
        bodies: Vec<(usize, Bytes)>,
        end: Result<Vec<u8>, FrameError>,
    }

    fn drain(
        reader: &FrameReader,
        buf: &mut BytesMut,
        bodies: &mut Vec<(usize, Bytes)>,
    ) -> Result<(), FrameError> {
        loop {
            let before = buf.len();
            match reader.next_body(buf)? {
                Some(body) => {
                    let taken = before - buf.len();
                    assert!(
                        body.len() <= reader.max_message_size(),
                        "body over the limit"
                    );
                    assert!(
                        taken > body.len() && taken <= body.len() + 5,
                        "a frame is its body plus a 1..=5 byte prefix"
                    );
                    bodies.push((taken, body));
                }
                None => {
                    assert_eq!(buf.len(), before, "Ok(None) leaves the buffer untouched");
                    return Ok(());
                }
            }
        }
    }

    fn run(reader: &FrameReader, first: &[u8], second: &[u8]) -> Outcome {
        let mut buf = BytesMut::from(first);
        let mut bodies = Vec::new();
        let end = drain(reader, &mut buf, &mut bodies).and_then(|()| {
            buf.extend_from_slice(second);
            drain(reader, &mut buf, &mut bodies)
        });
        Outcome {
            bodies,
            end: end.map(|()| buf.to_vec()),
        }
    }

    /// Whole and split runs agree; the frames tile the stream.
    fn split_both_ways(reader: &FrameReader, input: &Input<'_>) -> Outcome {
        let (first, second) = input.parts();
        let whole = run(reader, input.payload, &[]);
        let split = run(reader, first, second);
        assert_eq!(
            whole,
            split,
            "whole vs split at {} (limit {})",
            input.cut,
            reader.max_message_size()
        );
        let mut offset = 0;
        for (taken, body) in &whole.bodies {
            offset += taken;
            assert_eq!(&input.payload[offset - body.len()..offset], &body[..]);
        }
        if let Ok(rest) = &whole.end {
            assert_eq!(
                &input.payload[offset..],
                &rest[..],
                "frames + rest = stream"
            );
        }
        whole
    }

    /// A body that decodes re-encodes (framed and bare) into bytes that decode to the same
    /// message and encode to the same bytes again.
    fn body(body: &Bytes) {
        let message = match decode(body) {
            Ok(message) => message,
            Err(e) => {
                let _ = e.to_string();
                return;
            }
        };
        assert_eq!(
            type_name(message.type_id()),
            message.name(),
            "name and id agree"
        );
        if let ServiceMessage::Unknown { type_id } = message {
            assert_eq!(message.name(), "Unknown", "type {type_id} is known");
        }
        let mut bare = Vec::new();
        encode_body(&message, &mut bare);
        assert_eq!(encoded_len(&message), bare.len());
        let bare = Bytes::from(bare);
        let again = decode(&bare).expect("an encoded message decodes");
        assert_eq!(again, message, "round trip");
        let mut twice = Vec::new();
        encode_body(&again, &mut twice);
        assert_eq!(twice, bare, "encoding is stable");

        let framed = encoded(&message);
        let mut buf = BytesMut::from(&b"\x00"[..]);
        encode(&message, &mut buf);
        assert_eq!(
            &buf[1..],
            &framed[..],
            "encode appends what encoded returns"
        );
        let mut buf = BytesMut::from(&framed[..]);
        let unframed = FrameReader::new(bare.len())
            .next_body(&mut buf)
            .expect("an encoded frame is within its own size")
            .expect("an encoded frame is complete");
        assert!(buf.is_empty(), "one frame");
        assert_eq!(unframed, bare);
    }

    pub fn check(data: &[u8]) {
        let input = Input::parse(data);
        let large = split_both_ways(&FrameReader::new(usize::MAX), &input);
        for limit in [usize::from(input.knob), SMALL_LIMIT] {
            let small = split_both_ways(&FrameReader::new(limit), &input);
            if small.end.is_ok() {
                assert_eq!(small, large, "a stream within limit {limit} reads the same");
            } else {
                assert!(small.bodies.len() <= large.bodies.len());
                assert_eq!(
                    small.bodies[..],
                    large.bodies[..small.bodies.len()],
                    "bodies before a size error are the unlimited ones"
                );
            }
        }
        for (_, b) in &large.bodies {
            body(b);
        }
        // The payload itself as one body, so that decoding is reached without a valid
        // prefix as well.
        body(&Bytes::copy_from_slice(input.payload));
    }
}

#[cfg(test)]
mod tests {
    //! Replays every stored corpus input, and every input that once crashed
    //! (`regressions/<target>/`), through its check (stable toolchain, no libFuzzer):
    //! `cargo test --manifest-path fuzz/Cargo.toml`.

    use std::path::Path;

    use super::*;

    fn replay(target: &str, check: fn(&[u8])) {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut count = 0;
        for folder in ["corpus", "regressions"] {
            let dir = root.join(folder).join(target);
            let Ok(entries) = std::fs::read_dir(&dir) else {
                assert_eq!(folder, "regressions", "no corpus at {}", dir.display());
                continue;
            };
            for entry in entries {
                let path = entry.expect("corpus entry").path();
                let data = std::fs::read(&path).expect("corpus file");
                // Named on failure, so the input can be run again on its own.
                if std::panic::catch_unwind(|| check(&data)).is_err() {
                    panic!("{target} failed on {}", path.display());
                }
                count += 1;
            }
        }
        assert!(count > 0, "empty corpus for {target}");
    }

    // One `replay_<target>` test per file in `fuzz_targets/`, written by `build.rs`, and
    // `TARGETS`, their names.
    include!(concat!(env!("OUT_DIR"), "/replay.rs"));

    /// Every target is a `[[bin]]` cargo-fuzz can run, has a corpus, and is in the README's
    /// table; every `[[bin]]` is a target.
    #[test]
    fn every_target_is_built_seeded_and_listed() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("Cargo.toml");
        let mut bins: Vec<&str> = manifest
            .split("[[bin]]")
            .skip(1)
            .filter_map(|bin| bin.split("name = \"").nth(1)?.split('"').next())
            .collect();
        bins.sort_unstable();
        assert_eq!(bins, TARGETS, "[[bin]] entries vs fuzz_targets/");
        let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
        for target in TARGETS {
            assert!(
                root.join("corpus").join(target).is_dir(),
                "no corpus/{target}/ (fuzz/seeds.py writes the seeds)"
            );
            assert!(
                readme.contains(&format!("| `{target}` |")),
                "{target} is not in the README's table of targets"
            );
        }
    }

    #[test]
    fn input_layout() {
        let data = Input::encode(3, 7, b"abcdef");
        let input = Input::parse(&data);
        assert_eq!(input.payload, b"abcdef");
        assert_eq!(input.cut, 3);
        assert_eq!(input.knob, 7);
        assert_eq!(input.parts(), (&b"abc"[..], &b"def"[..]));
        // The cut wraps modulo len + 1; short inputs have an empty payload.
        assert_eq!(Input::parse(&Input::encode(7, 0, b"abc")).cut, 3);
        assert_eq!(Input::parse(&[9]).payload, b"");
        assert_eq!(split_str("aé", 2), ("a", "é"));
    }
}
