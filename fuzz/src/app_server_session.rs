//! Target `app_server_session`: what an app server sends after its handshake, through the
//! real `/server` endpoint of a real node: the WebSocket upgrade, the handshake, then the
//! session's reading loop and every command it runs (`switchyard_node::fuzzing::serve_stream`
//! serves the node's routes over an in-memory stream; the app server is a tokio-tungstenite
//! client on the other end). The codec has its own target; this one is the state machine.
//!
//! The knob picks the connection type (bits 0–1: Default, OnDemand, Weak, and Weak on a
//! serverless node), whether the handshake allows stateful reconnects (bit 2) and client
//! migration (bit 3), a client of the hub that has negotiated and connected, routed to this
//! app server (bit 4: `{client-connection-id}` in the payload is its id, so commands can name it), a 64-byte
//! message limit (bit 5), and the size of the third run's small pieces (bits 6–7). The
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
    // Only where it is a MessagePack string (0xb6: 22 bytes follow): elsewhere the random id's
    // bytes could be read as a length prefix, and each run's node would see other bytes.
    let payload = match &id {
        Some(id) => replace(
            payload,
            &[b"\xb6", PLACEHOLDER.as_bytes()].concat(),
            &[b"\xb6", id.as_bytes()].concat(),
        ),
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
