//! Target `app_server_session`: what an app server sends after its handshake, through the
//! real `/server` endpoint of a real node: the WebSocket upgrade, the handshake, then the
//! session's reading loop and every command it runs (`switchyard_node::fuzzing::serve_stream`
//! serves the node's routes over an in-memory stream; the app server is a tokio-tungstenite
//! client on the other end). The codec has its own target; this one is the state machine.
//!
//! The knob picks the connection type (bits 0–1: Default, OnDemand, Weak, and Weak on a
//! serverless node), whether the handshake allows stateful reconnects (bit 2) and client
//! migration (bit 3), a client of the hub that has negotiated and connected, routed to this
//! app server (bit 4: `{client-connection-id}` in the payload is its id where it is a string
//! of a service message, so commands can name it), a 64-byte message limit (bit 5), and the
//! size of the third run's small pieces (bits 6–7). The
//! payload goes as one binary WebSocket message, as two cut at the cut, and in small pieces,
//! each on a fresh node, followed by an echo ping as the fence. All three must agree: the
//! same replies to the app server (keep-alive pings aside) and the same bytes to the client
//! when the fence came back; when the session ended on an error first, the same error, and
//! replies that are a prefix of one another (what was queued when the error came is
//! dropped). Every reply is a whole service-protocol frame that decodes; no task panics;
//! after the app server goes, the node holds no server connection.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Once};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::{SinkExt, StreamExt};
use switchyard_node::config::ServiceMode;
use switchyard_node::fuzzing::{self, ClientSession, SessionTransport};
use switchyard_node::{Config, Node};
use switchyard_service_protocol::{
    decode, encoded, Extensions, FrameReader, HandshakeRequest, Ping, ServiceMessage,
    CONNECTION_TYPE_DEFAULT, CONNECTION_TYPE_ONDEMAND, CONNECTION_TYPE_WEAK, VERSION,
};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message as WsMessage;

use crate::service_node::{node, now};
use crate::Input;

const HUB: &str = "chat";
const SERVER_ID: &str = "app-1";
/// The server connection's id (the SDK's `cid`), fixed so replies naming it compare.
const CID: &str = "fuzz-cid";
/// Stands for the client's connection id in the payload: as long as a generated id (22
/// characters), so that replacing it changes no length prefix.
const PLACEHOLDER: &str = "{client-connection-id}";
/// The fence: an echo ping after the payload.
const FENCE: &str = "fuzz-fence";
/// The small `limits.max_server_message_size` of knob bit 5.
const SMALL_LIMIT: usize = 64;
/// How long (in the paused clock) a run may take before it counts as stuck.
const STUCK: Duration = Duration::from_secs(600);

#[derive(Clone, Copy, Debug)]
struct Setup {
    connection_type: i32,
    mode: ServiceMode,
    stateful: bool,
    migration_level: i32,
    client: bool,
    small_limit: bool,
}

impl Setup {
    fn from_knob(knob: u8) -> Setup {
        let (connection_type, mode) = match knob & 3 {
            0 => (CONNECTION_TYPE_DEFAULT, ServiceMode::Default),
            1 => (CONNECTION_TYPE_ONDEMAND, ServiceMode::Default),
            2 => (CONNECTION_TYPE_WEAK, ServiceMode::Default),
            _ => (CONNECTION_TYPE_WEAK, ServiceMode::Serverless),
        };
        Setup {
            connection_type,
            mode,
            stateful: knob & 4 != 0,
            migration_level: i32::from(knob & 8 != 0),
            client: knob & 0x10 != 0,
            small_limit: knob & 0x20 != 0,
        }
    }

    fn config(&self) -> Config {
        let mut config = Config {
            mode: self.mode,
            ..Config::default()
        };
        if self.small_limit {
            config.limits.max_server_message_size = SMALL_LIMIT;
        }
        config
    }
}

/// How a run ended.
#[derive(Debug, PartialEq)]
enum End {
    /// The fence came back: everything before it was handled.
    Fenced,
    /// The service closed the connection first, saying this (a ServiceError's text).
    Closed(Option<String>),
}

#[derive(Debug)]
struct Outcome {
    end: End,
    /// What the app server got after its handshake response, keep-alive pings, the fence and
    /// the closing ServiceError left out, the client's id written as the placeholder.
    replies: Vec<String>,
    /// Every byte queued for the client.
    to_client: Vec<u8>,
}

/// Set by the panic hook: a panic in a task of the node (which tokio would only print) fails
/// the input like one in the check itself.
static PANICKED: AtomicBool = AtomicBool::new(false);

fn watch_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICKED.store(true, Ordering::SeqCst);
            previous(info);
        }));
    });
}

type Socket = tokio_tungstenite::WebSocketStream<tokio::io::DuplexStream>;
type Sink = futures_util::stream::SplitSink<Socket, WsMessage>;
type Stream = futures_util::stream::SplitStream<Socket>;

/// Opens `/server/?hub=chat` over an in-memory stream to `node` and completes the handshake.
async fn open(node: &Arc<Node>, setup: &Setup) -> Socket {
    let (near, far) = tokio::io::duplex(1 << 20);
    let served = node.clone();
    tokio::spawn(async move { fuzzing::serve_stream(&served, far).await });
    let url = format!("ws://127.0.0.1/server/?hub={HUB}&cid={CID}");
    let token = switchyard_auth::TokenBuilder::new(format!("http://127.0.0.1/server/?hub={HUB}"))
        .claim("nameid", SERVER_ID)
        .sign(switchyard_auth::EMULATOR_ACCESS_KEY, now());
    let mut request = url.into_client_request().expect("a request");
    let headers = request.headers_mut();
    headers.insert(
        "authorization",
        format!("Bearer {token}").parse().expect("a header"),
    );
    headers.insert("x-asrs-server-id", SERVER_ID.parse().expect("a header"));
    let (mut socket, _) = tokio_tungstenite::client_async(request, near)
        .await
        .expect("the app-server upgrade");
    let handshake = ServiceMessage::HandshakeRequest(HandshakeRequest {
        version: VERSION,
        connection_type: setup.connection_type,
        target: String::new(),
        migration_level: setup.migration_level,
        ext: Extensions::default(),
        allow_stateful_reconnects: setup.stateful.then_some(true),
    });
    socket
        .send(WsMessage::Binary(encoded(&handshake)))
        .await
        .expect("the handshake");
    socket
}

/// Reads the service's replies until the fence comes back or the connection closes.
async fn read_replies(socket: &mut Stream, id: Option<&str>) -> (End, Vec<String>) {
    let reader = FrameReader::new(usize::MAX);
    let mut buffer = BytesMut::new();
    let mut replies = Vec::new();
    let mut handshaken = false;
    let mut error = None;
    loop {
        while let Some(body) = reader
            .next_body(&mut buffer)
            .expect("the service frames well")
        {
            let message = decode(&body).expect("the service encodes well");
            match message {
                ServiceMessage::HandshakeResponse(response) if !handshaken => {
                    assert_eq!(response.error_message, "", "the handshake was refused");
                    handshaken = true;
                }
                ServiceMessage::Ping(ping) if ping.is_keep_alive() => {}
                ServiceMessage::Ping(ping) if ping.get("echo") == Some(FENCE) => {
                    assert!(error.is_none(), "the fence after a ServiceError");
                    return (End::Fenced, replies);
                }
                ServiceMessage::ServiceError(failed) => {
                    assert!(error.is_none(), "two ServiceErrors");
                    error = Some(failed.error_message);
                }
                ServiceMessage::Ping(ping) if ping.get("servers").is_some() => {
                    // The server list's entries start with a wall-clock time: left out.
                    let values: Vec<String> = ping
                        .values
                        .iter()
                        .map(|v| v.split_once(':').map_or(v.clone(), |(_, rest)| rest.into()))
                        .collect();
                    replies.push(format!("Ping {values:?}"));
                }
                other => {
                    assert!(handshaken, "{other:?} before the handshake response");
                    assert!(error.is_none(), "{other:?} after a ServiceError");
                    let text = without_instance(&format!("{other:?}"));
                    replies.push(match id {
                        Some(id) => text.replace(id, PLACEHOLDER),
                        None => text,
                    });
                }
            }
        }
        match socket.next().await {
            Some(Ok(WsMessage::Binary(data))) => buffer.extend_from_slice(&data),
            Some(Ok(WsMessage::Text(text))) => panic!("the service sent a text frame: {text}"),
            Some(Ok(WsMessage::Close(_))) | None | Some(Err(_)) => {
                assert!(buffer.is_empty(), "half a frame before the close");
                assert!(handshaken, "closed before the handshake response");
                return (End::Closed(error), replies);
            }
            Some(Ok(_)) => {}
        }
    }
}

/// Sends `chunks` (the client's id in place of the placeholder) and the fence, one WebSocket message
/// each; a send that fails means the service has closed, which the reader then sees.
async fn send_all(socket: &mut Sink, chunks: &[Vec<u8>]) {
    let fence = encoded(&ServiceMessage::Ping(Ping::new(&[("echo", FENCE)])));
    for chunk in chunks.iter().map(|c| Bytes::from(c.clone())).chain([fence]) {
        if socket.send(WsMessage::Binary(chunk)).await.is_err() {
            return;
        }
    }
}

/// How the payload is cut into WebSocket messages, after the placeholder is replaced (so that a cut
/// cannot fall inside the placeholder and change what is sent).
#[derive(Clone, Copy, Debug)]
enum Pieces {
    Whole,
    Two(usize),
    /// Each side of the cut cut again into pieces of this size.
    Small(usize, usize),
}

impl Pieces {
    fn cut(self, payload: &[u8]) -> Vec<Vec<u8>> {
        let at = |cut: usize| cut.min(payload.len());
        match self {
            Pieces::Whole => vec![payload.to_vec()],
            Pieces::Two(cut) => {
                let (first, second) = payload.split_at(at(cut));
                vec![first.to_vec(), second.to_vec()]
            }
            Pieces::Small(cut, size) => {
                let (first, second) = payload.split_at(at(cut));
                first
                    .chunks(size.max(1))
                    .chain(second.chunks(size.max(1)))
                    .map(<[u8]>::to_vec)
                    .collect()
            }
        }
    }
}

async fn session(node: &Arc<Node>, setup: &Setup, payload: &[u8], pieces: Pieces) -> Outcome {
    let (mut sink, mut stream) = open(node, setup).await.split();
    // A client of the hub, connected before the payload, routed to this app server (weak
    // connections carry no clients).
    let client = if setup.client && setup.connection_type != CONNECTION_TYPE_WEAK {
        // Wait until the service registered the app server (its handshake response).
        while node.server_connection_count() == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let client = ClientSession::open(node, HUB, Some("u1"), SessionTransport::WebSockets)
            .expect("a client");
        client
            .receive(b"{\"protocol\":\"json\",\"version\":1}\x1e")
            .expect("the client's handshake request");
        Some(client)
    } else {
        None
    };
    let id = client.as_ref().map(|c| c.connection_id().to_string());
    if let Some(id) = &id {
        assert_eq!(id.len(), PLACEHOLDER.len(), "the placeholder's length");
    }
    let payload = match &id {
        Some(id) => with_client_id(payload, id),
        None => payload.to_vec(),
    };
    let chunks = pieces.cut(&payload);
    let ((), (end, replies)) = tokio::join!(
        send_all(&mut sink, &chunks),
        read_replies(&mut stream, id.as_deref())
    );
    let mut to_client = Vec::new();
    if let Some(client) = &client {
        for frame in client.take_sent() {
            to_client.extend_from_slice(&frame);
        }
    }
    // What the app server relays may carry the client's id (as its payload says it): written
    // as the placeholder, so that runs on different nodes compare.
    // The relayed bytes may hold a cut piece of it too: any 8 or more of its first bytes.
    if let Some(id) = &id {
        for len in (8..=id.len()).rev() {
            to_client = replace(&to_client, &id.as_bytes()[..len], PLACEHOLDER.as_bytes());
        }
    }
    let _ = sink.close().await;
    drop((sink, stream));
    // The node lets the app server go: no server connection left.
    while node.server_connection_count() > 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    if let Some(client) = client {
        client.finish();
    }
    Outcome {
        end,
        replies,
        to_client,
    }
}

/// `text` with this run's instance id (the node id, `~` and 8 random characters) written
/// `{instance}`, so that runs on different nodes compare.
fn without_instance(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("node-1~") {
        out.push_str(&rest[..at]);
        out.push_str("{instance}");
        let random = &rest[at + "node-1~".len()..];
        let end = random
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
            .unwrap_or(random.len());
        rest = &random[end..];
    }
    out.push_str(rest);
    out
}

/// `payload` with `id` in place of each placeholder that is a whole MessagePack string value
/// (0xb6 and its 22 bytes) in the body of a service-protocol frame that decodes as MessagePack
/// to its end, so that the three runs' nodes, each with its own random id, see the same frames
/// and the same MessagePack structure. Elsewhere the id's bytes would be read as something
/// else. Looking for the 0xb6 in front was not enough: the 0xb6 may be a byte of binary data or
/// of a string, and the placeholder run past the end of it and of its frame, so that one of its
/// characters is the next frame's length prefix (`regressions/app_server_session/crash-02be…`:
/// its closing `}`, a 125-byte frame, became the id's last character, one of `A`, `Q`, `g`, `w`:
/// a 65- to 119-byte frame, which the bytes after it, with the fence, completed in one run
/// (a decode error) and not in another (the 30 s silence); `crash-6913…` and `crash-c6db…` the
/// same with the id's 12th and 3rd character). The frames are read as the node reads them: over
/// the payload and the fence that follows it.
fn with_client_id(payload: &[u8], id: &str) -> Vec<u8> {
    let fence = encoded(&ServiceMessage::Ping(Ping::new(&[("echo", FENCE)])));
    let mut buffer = BytesMut::from([payload, &fence[..]].concat().as_slice());
    let total = buffer.len();
    let reader = FrameReader::new(usize::MAX);
    let mut out = payload.to_vec();
    while let Ok(Some(body)) = reader.next_body(&mut buffer) {
        // Where this body starts in the payload.
        let start = total - buffer.len() - body.len();
        let mut strings = Vec::new();
        if msgpack_value(&body, 0, 0, &mut strings) != Some(body.len()) {
            continue;
        }
        for at in strings {
            let at = start + at + 1;
            if at + PLACEHOLDER.len() <= payload.len() {
                out[at..at + PLACEHOLDER.len()].copy_from_slice(id.as_bytes());
            }
        }
    }
    out
}

/// Walks the MessagePack value at `at` in `body`: where it ends (`None` if it does not decode
/// or nests deeper than 32), with the offset of each placeholder string in it added to `strings`.
fn msgpack_value(body: &[u8], at: usize, depth: usize, strings: &mut Vec<usize>) -> Option<usize> {
    let marker = *body.get(at)?;
    // The big-endian number of `n` bytes after the marker.
    let number = |n: usize| -> Option<usize> {
        let bytes = body.get(at + 1..at + 1 + n)?;
        Some(bytes.iter().fold(0usize, |v, &b| (v << 8) | usize::from(b)))
    };
    // The bytes after the marker (a length and the data, or a container's count), and for a
    // container the number of values in it.
    let (skip, items) = match marker {
        0x00..=0x7f | 0xc0 | 0xc2 | 0xc3 | 0xe0..=0xff => return Some(at + 1),
        0x80..=0x8f => (0, Some(2 * usize::from(marker & 0x0f))),
        0x90..=0x9f => (0, Some(usize::from(marker & 0x0f))),
        0xa0..=0xbf => {
            let len = usize::from(marker & 0x1f);
            let end = at + 1 + len;
            if end > body.len() {
                return None;
            }
            if marker == 0xb6 && &body[at + 1..end] == PLACEHOLDER.as_bytes() {
                strings.push(at);
            }
            return Some(end);
        }
        0xc4 | 0xd9 => (1 + number(1)?, None),
        0xc5 | 0xda => (2 + number(2)?, None),
        0xc6 | 0xdb => (4 + number(4)?, None),
        0xc7 => (2 + number(1)?, None),
        0xc8 => (3 + number(2)?, None),
        0xc9 => (5 + number(4)?, None),
        0xca => (4, None),
        0xcb => (8, None),
        0xcc..=0xcf => (1 << (marker - 0xcc), None),
        0xd0..=0xd3 => (1 << (marker - 0xd0), None),
        0xd4..=0xd8 => (1 + (1 << (marker - 0xd4)), None),
        0xdc => (2, Some(number(2)?)),
        0xdd => (4, Some(number(4)?)),
        0xde => (2, Some(number(2)?.saturating_mul(2))),
        0xdf => (4, Some(number(4)?.saturating_mul(2))),
        0xc1 => return None,
    };
    let mut end = at.checked_add(1 + skip)?;
    match items {
        None => (end <= body.len()).then_some(end),
        Some(_) if depth >= 32 => None,
        Some(items) => {
            for _ in 0..items {
                // Every item takes a byte at least: a count beyond the body ends at its end.
                end = msgpack_value(body, end, depth + 1, strings)?;
            }
            Some(end)
        }
    }
}

fn replace(haystack: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(haystack.len());
    let mut rest = haystack;
    while let Some(at) = rest.windows(from.len()).position(|w| w == from) {
        out.extend_from_slice(&rest[..at]);
        out.extend_from_slice(to);
        rest = &rest[at + from.len()..];
    }
    out.extend_from_slice(rest);
    out
}

fn run(setup: Setup, payload: &[u8], pieces: Pieces) -> Outcome {
    watch_panics();
    // The paused clock jumps ahead whenever every task waits: timeouts and keep-alives of
    // the session cost no real time, and the run is the same on a slow machine.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime");
    let outcome = runtime.block_on(async {
        let node = node(setup.config());
        let outcome = tokio::time::timeout(STUCK, session(&node, &setup, payload, pieces))
            .await
            .expect("the session got stuck");
        assert_eq!(node.server_connection_count(), 0);
        assert_eq!(node.client_connection_count(), 0);
        outcome
    });
    drop(runtime);
    assert!(!PANICKED.load(Ordering::SeqCst), "a task panicked");
    outcome
}

pub fn check(data: &[u8]) {
    let input = Input::parse(data);
    let setup = Setup::from_knob(input.knob);
    let size = 1 + 5 * usize::from(input.knob >> 6);
    // Under the 64-byte limit the WebSocket itself takes messages up to twice that: a longer
    // one ends the socket before the session reads it, whole but not in pieces. Kept within.
    let payload = match setup.small_limit {
        true => &input.payload[..input.payload.len().min(2 * SMALL_LIMIT)],
        false => input.payload,
    };
    let whole = run(setup, payload, Pieces::Whole);
    let two = run(setup, payload, Pieces::Two(input.cut));
    let many = run(setup, payload, Pieces::Small(input.cut, size));
    for (name, other) in [("two pieces", &two), ("small pieces", &many)] {
        assert_eq!(whole.end, other.end, "whole vs {name}: how it ended");
        // Bytes relayed to the client may hold any piece of its random id (one byte of it
        // is enough to differ between nodes): with the id in the payload only the length is
        // compared.
        if input
            .payload
            .windows(PLACEHOLDER.len())
            .any(|w| w == PLACEHOLDER.as_bytes())
        {
            assert_eq!(
                whole.to_client.len(),
                other.to_client.len(),
                "whole vs {name}: to the client"
            );
        } else {
            assert_eq!(
                whole.to_client, other.to_client,
                "whole vs {name}: to the client"
            );
        }
        if whole.end == End::Fenced {
            assert_eq!(whole.replies, other.replies, "whole vs {name}: replies");
        } else {
            let (short, long) = if whole.replies.len() <= other.replies.len() {
                (&whole.replies, &other.replies)
            } else {
                (&other.replies, &whole.replies)
            };
            assert_eq!(
                &long[..short.len()],
                &short[..],
                "whole vs {name}: replies before the error"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "0123456789abcdefghijkl";

    fn framed(body: &[u8]) -> Vec<u8> {
        [&[u8::try_from(body.len()).expect("a short body")], body].concat()
    }

    #[test]
    fn the_placeholder_is_replaced_where_it_is_a_string_value() {
        // ConnectionData [6, connectionId, payload], twice.
        let body = [b"\x93\x06\xb6", PLACEHOLDER.as_bytes(), b"\xc4\x01x"].concat();
        let payload = [framed(&body), framed(&body)].concat();
        let expected = [b"\x93\x06\xb6", ID.as_bytes(), b"\xc4\x01x"].concat();
        let expected = [framed(&expected), framed(&expected)].concat();
        assert_eq!(with_client_id(&payload, ID), expected);
    }

    #[test]
    fn the_placeholder_is_kept_elsewhere() {
        // In binary data.
        let body = [b"\x93\x06\xa1x\xc4\x17\xb6", PLACEHOLDER.as_bytes()].concat();
        let payload = framed(&body);
        assert_eq!(with_client_id(&payload, ID), payload);
        // Cut by the end of the frame: its `}` is the next frame's length prefix (the
        // regression crash-02be…), 125 bytes that the fence does not complete.
        let body = [b"\x93\x06\xa1x\xc4\x16\xb6", &PLACEHOLDER.as_bytes()[..21]].concat();
        let payload = [&framed(&body)[..], b"}\x93\x03"].concat();
        assert_eq!(with_client_id(&payload, ID), payload);
        // In a frame that does not decode to its end.
        let body = [b"\x93\x06\xb6", PLACEHOLDER.as_bytes(), b"\xc4\x05x"].concat();
        let payload = framed(&body);
        assert_eq!(with_client_id(&payload, ID), payload);
    }
}
