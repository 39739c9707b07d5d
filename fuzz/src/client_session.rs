//! Target `client_session`: what a client sends — WebSocket frames, SSE and long-polling POST
//! bodies all end in `ClientConnection::receive` — through the real hub-protocol session:
//! the handshake, then messages (JSON or MessagePack), serverless or forwarded to an app
//! server (Default mode).
//!
//! The knob picks the transport (bits 0–1), the mode (bits 2–3: serverless; Default with an
//! app server; Default without one; auto), a 64-byte message limit (bit 4), the size of
//! the small pieces of the third run (bits 5–6) and whether negotiate offered stateful
//! reconnect (bit 7: Acks, Sequences and replayed duplicates are then taken by the service,
//! so what reaches the app server is no longer a prefix of the client's bytes). The payload
//! is fed whole, in two pieces at
//! the cut, and in small pieces (each side of the cut cut again); all three must end the
//! same way: "ok" or the same close reason, the same bytes to the client, and to the app
//! server the same bytes (or, when the session failed, a prefix of what the smaller pieces
//! sent, since messages read before a bad one in the same read are not forwarded).

use bytes::{Bytes, BytesMut};
use switchyard_core::{CloseReason, ConnectionId, HubName};
use switchyard_hub_protocol::{handshake, json, msgpack, Format, FrameSplitter, HubMessage};
use switchyard_node::config::ServiceMode;
use switchyard_node::fuzzing::{self, AppServer, ClientSession, SessionTransport};
use switchyard_node::{Check, Command, Config};
use switchyard_service_protocol::{decode, FrameReader, ServiceMessage};

use crate::service_node::node;
use crate::Input;

const HUB: &str = "chat";

#[derive(Clone, Copy, Debug)]
struct Setup {
    transport: SessionTransport,
    mode: ServiceMode,
    app_server: bool,
    small_limit: bool,
    stateful: bool,
}

impl Setup {
    fn from_knob(knob: u8) -> Setup {
        let transport = match knob & 3 {
            1 => SessionTransport::ServerSentEvents,
            2 => SessionTransport::LongPolling,
            _ => SessionTransport::WebSockets,
        };
        let (mode, app_server) = match (knob >> 2) & 3 {
            0 => (ServiceMode::Serverless, false),
            1 => (ServiceMode::Default, true),
            2 => (ServiceMode::Default, false),
            _ => (ServiceMode::Auto, false),
        };
        Setup {
            transport,
            mode,
            app_server,
            small_limit: knob & 0x10 != 0,
            stateful: knob & 0x80 != 0,
        }
    }

    fn config(&self) -> Config {
        let mut config = Config {
            mode: self.mode,
            ..Config::default()
        };
        if self.small_limit {
            config.limits.max_client_message_size = 64;
        }
        config
    }
}

/// How one run ended.
#[derive(Debug, PartialEq)]
struct Outcome {
    /// The first error `receive` returned: the reason the connection closes.
    error: Option<CloseReason>,
    /// Every byte queued for the client.
    to_client: Vec<u8>,
    /// The client's bytes the app server got (its handshake request, then whole messages),
    /// up to the first error.
    forwarded: Vec<u8>,
    handshake_done: bool,
}

/// Service-protocol messages queued for the app server.
fn server_messages(server: &AppServer) -> Vec<ServiceMessage> {
    let mut stream = BytesMut::new();
    for frame in server.take_sent() {
        stream.extend_from_slice(&frame);
    }
    let reader = FrameReader::new(usize::MAX);
    let mut messages = Vec::new();
    while let Some(body) = reader
        .next_body(&mut stream)
        .expect("the service frames well")
    {
        messages.push(decode(&body).expect("the service encodes well"));
    }
    assert!(stream.is_empty(), "half a frame to the app server");
    messages
}

/// Appends what the app server got for connection `id`; checks it is what it should be.
fn collect_forwarded(server: &AppServer, id: &str, opened: &mut bool, out: &mut Vec<u8>) {
    for message in server_messages(server) {
        match message {
            ServiceMessage::OpenConnection(open) => {
                assert!(!*opened, "OpenConnection twice");
                assert_eq!(open.connection_id, id);
                *opened = true;
            }
            ServiceMessage::ConnectionData(data) => {
                assert!(*opened, "ConnectionData before OpenConnection");
                assert_eq!(data.connection_id, id);
                assert!(!data.payload.is_empty(), "empty ConnectionData");
                out.extend_from_slice(&data.payload);
            }
            other => panic!("unexpected {other:?} to the app server while connected"),
        }
    }
}

/// A Close message in either format, as (error, allowReconnect).
fn read_close(frame: &Bytes) -> (Option<String>, bool) {
    for format in [Format::Json, Format::MessagePack] {
        let mut buf = BytesMut::from(&frame[..]);
        let Ok(mut frames) = FrameSplitter::new(format, usize::MAX).split_all(&mut buf) else {
            continue;
        };
        if frames.len() != 1 || !buf.is_empty() {
            continue;
        }
        let body = frames.pop().expect("one frame").body_bytes();
        let close = match format {
            Format::Json => match json::decode(&body) {
                Ok(HubMessage::Close {
                    error,
                    allow_reconnect,
                }) => Some((error, allow_reconnect)),
                _ => None,
            },
            Format::MessagePack => match msgpack::decode(&body) {
                Ok(HubMessage::Close {
                    error,
                    allow_reconnect,
                }) => Some((error, allow_reconnect)),
                _ => None,
            },
        };
        if let Some(close) = close {
            return close;
        }
    }
    panic!("not a Close message: {frame:?}");
}

fn run(setup: Setup, chunks: &[&[u8]]) -> Outcome {
    let node = node(setup.config());
    let server = setup
        .app_server
        .then(|| AppServer::attach(&node, HUB, "app-1").expect("a hub name"));
    let session =
        ClientSession::open(&node, HUB, Some("u1"), setup.transport).expect("a connection");
    if setup.stateful {
        session.offer_stateful_reconnect();
    }
    let id = session.connection_id().to_string();
    let mut error = None;
    let mut to_client = Vec::new();
    let mut forwarded = Vec::new();
    let mut opened = false;
    for chunk in chunks {
        let result = session.receive(chunk);
        for frame in session.take_sent() {
            to_client.extend_from_slice(&frame);
        }
        if error.is_none() {
            if let Some(server) = &server {
                collect_forwarded(server, &id, &mut opened, &mut forwarded);
            }
            error = result.err();
        }
        // After an error the transport may still hand over bytes it had already read
        // (nothing may panic); they are not compared.
    }
    let handshake_done = session.handshake_done();
    let fed: Vec<u8> = chunks.concat();

    // The first error is the reason the connection closes; no error, no close.
    assert_eq!(session.close_reason(), error, "close reason");
    // The client got a handshake response first, if anything; a refusal closes.
    if !to_client.is_empty() {
        let (refusal, consumed) = handshake::parse_response(&to_client)
            .expect("a handshake response parses")
            .expect("a whole handshake response");
        if refusal.is_some() {
            assert!(
                error.is_some(),
                "a refused handshake left the connection open"
            );
            assert!(!handshake_done);
            assert_eq!(consumed, to_client.len(), "nothing after a refusal");
        } else {
            assert_eq!(&to_client[..consumed], handshake::RESPONSE_OK);
            assert!(!setup.app_server, "the service answered for the app server");
        }
    }
    if setup.mode != ServiceMode::Default && handshake_done {
        assert_eq!(&to_client[..], handshake::RESPONSE_OK);
    }
    // What the transport would send before ending: a Close message, or, while the app server
    // has not answered the handshake (Default mode; it never does here), a handshake error.
    if let Some(reason) = &error {
        let frame = session.close_frame(reason);
        if opened {
            let expected = match reason {
                CloseReason::HandshakeTimeout | CloseReason::ClientClosed => None,
                other => Some(handshake::encode_error_response(
                    &other.close_error().unwrap_or_else(|| other.to_string()),
                )),
            };
            assert_eq!(
                frame.map(|f| f.to_vec()),
                expected,
                "ending before the app server answered"
            );
        } else if let Some(frame) = frame {
            let (text, allow_reconnect) = read_close(&frame);
            assert_eq!(text, reason.close_error());
            assert_eq!(allow_reconnect, reason.allow_reconnect());
        }
    }
    // What the app server got is the client's bytes, in order, from the start (with stateful
    // reconnect: its handshake asks for version 1 and Acks, Sequences and duplicates stay).
    assert!(
        setup.stateful || fed.starts_with(&forwarded),
        "forwarded bytes are not the client's"
    );

    let hub = HubName::new(HUB, None).expect("a hub name");
    let exists = || {
        let check = Check::Connection(ConnectionId::new(&id).expect("an id"));
        fuzzing::execute_now(&node, &hub, Command::Check(check)).is_ok()
    };
    if error.is_none() && handshake_done && !setup.app_server {
        assert!(exists());
    }
    session.finish();
    assert!(!exists());
    assert_eq!(node.client_connection_count(), 0);
    if let Some(server) = &server {
        // Anything forwarded after the first error, then CloseConnection once, if opened.
        let mut closed = false;
        for message in server_messages(server) {
            match message {
                ServiceMessage::ConnectionData(data) if !closed => {
                    assert_eq!(data.connection_id, id)
                }
                ServiceMessage::CloseConnection(close) if !closed => {
                    assert_eq!(close.connection_id, id);
                    closed = true;
                }
                other => panic!("unexpected {other:?} to the app server at the end"),
            }
        }
        assert_eq!(closed, opened, "CloseConnection iff OpenConnection");
    }
    Outcome {
        error,
        to_client,
        forwarded,
        handshake_done,
    }
}

fn pieces(data: &[u8], size: usize) -> impl Iterator<Item = &[u8]> {
    data.chunks(size.max(1))
}

pub fn check(data: &[u8]) {
    let input = Input::parse(data);
    let setup = Setup::from_knob(input.knob);
    let (first, second) = input.parts();
    let size = 1 + 3 * usize::from((input.knob >> 5) & 3);
    let small: Vec<&[u8]> = pieces(first, size).chain(pieces(second, size)).collect();

    let whole = run(setup, &[input.payload]);
    let two = run(setup, &[first, second]);
    let many = run(setup, &small);
    for (name, other) in [("two pieces", &two), ("small pieces", &many)] {
        assert_eq!(whole.error, other.error, "whole vs {name}: close reason");
        assert_eq!(
            whole.to_client, other.to_client,
            "whole vs {name}: to the client"
        );
        assert_eq!(
            whole.handshake_done, other.handshake_done,
            "whole vs {name}: handshake"
        );
        if whole.error.is_none() {
            assert_eq!(
                whole.forwarded, other.forwarded,
                "whole vs {name}: forwarded"
            );
        } else {
            assert!(
                other.forwarded.starts_with(&whole.forwarded),
                "whole vs {name}: forwarded"
            );
        }
    }
}
