//! The bad-input catalogue: every known kind of bad input thrown at a live node (port 0).
//!
//! Each case checks three things:
//! - the offender gets a specific answer: an HTTP status with a text naming the problem, a
//!   handshake error, or a Close message whose error says what was wrong;
//! - only the offender is closed (connection counts);
//! - a bystander — a JSON WebSocket client of the same hub, connected before — receives every
//!   message of a REST broadcast sent afterwards, in order (sequence numbers).

mod common;

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use common::{eventually, within, RawClient, TestServer};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use switchyard_auth::{TokenBuilder, EMULATOR_ACCESS_KEY};
use switchyard_hub_protocol::{handshake, Format, FrameSplitter, HubMessage};
use switchyard_node::Config;
use switchyard_service_protocol::{decode, FrameReader, ServiceMessage};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::{Error as WsError, Message as WsMessage};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

const HUB: &str = "chat";
const WAIT: Duration = Duration::from_secs(10);
/// Messages in each bystander check.
const BROADCASTS: i64 = 20;

// ---------------------------------------------------------------------------------------
// Clients
// ---------------------------------------------------------------------------------------

// `RawClient` (connect without a handshake, send any bytes, read how it ended) is the
// testkit's.

/// The bystander: a JSON client of the hub, connected before the bad input.
struct Bystander {
    client: RawClient,
    round: i64,
}

impl Bystander {
    async fn join(server: &TestServer) -> Bystander {
        Bystander {
            client: RawClient::ready(server, HUB, Format::Json).await,
            round: 0,
        }
    }

    /// Broadcasts `BROADCASTS` numbered messages through REST and checks every one arrives,
    /// in order.
    async fn still_receives_everything(&mut self, server: &TestServer) {
        self.round += 1;
        for i in 0..BROADCASTS {
            let body = json!({"target": "seq", "arguments": [self.round, i]});
            let (status, text) = rest_send(server, &body).await;
            assert_eq!(status, 202, "broadcast {i}: {text}");
        }
        for i in 0..BROADCASTS {
            let message = within(
                "a broadcast to the bystander",
                WAIT,
                self.client.try_next_message(),
            )
            .await
            .expect("the bystander was closed");
            match message {
                HubMessage::Invocation {
                    target, arguments, ..
                } => {
                    assert_eq!(target, "seq");
                    assert_eq!(arguments, vec![json!(self.round), json!(i)], "message lost");
                }
                other => panic!("the bystander got {other:?}"),
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// HTTP
// ---------------------------------------------------------------------------------------

fn rest_token(server: &TestServer, path: &str) -> String {
    TokenBuilder::new(format!("http://{}{path}", server.addr))
        .sign(EMULATOR_ACCESS_KEY, common::now())
}

async fn rest_send(server: &TestServer, body: &Value) -> (u16, String) {
    let path = format!("/api/hubs/{HUB}/:send");
    let response = reqwest::Client::new()
        .post(format!("{}{path}", server.http()))
        .bearer_auth(rest_token(server, &path))
        .json(body)
        .send()
        .await
        .expect("REST send");
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}

/// A response read off a raw socket.
#[derive(Debug)]
struct RawResponse {
    status: u16,
    content_type: String,
    body: String,
}

impl RawResponse {
    /// The `message` of a REST error body (`{"code":…,"message":…}`).
    fn rest_message(&self) -> String {
        assert!(
            self.content_type.starts_with("application/json"),
            "{self:?}"
        );
        let body: Value = serde_json::from_str(&self.body).expect("a JSON error body");
        assert!(
            body["code"].as_str().is_some_and(|c| !c.is_empty()),
            "{self:?}"
        );
        body["message"].as_str().expect("a message").to_string()
    }
}

/// One HTTP/1.1 request written verbatim (no URL normalisation), `Connection: close`.
async fn raw_http(
    server: &TestServer,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> RawResponse {
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let mut request = format!(
        "{method} {target} HTTP/1.1\r\nhost: {}\r\nconnection: close\r\ncontent-length: {}\r\n",
        server.addr,
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    let mut bytes = request.into_bytes();
    bytes.extend_from_slice(body);
    stream.write_all(&bytes).await.unwrap();
    let mut response = Vec::new();
    within(
        "a raw HTTP response",
        WAIT,
        stream.read_to_end(&mut response),
    )
    .await
    .unwrap();
    parse_response(&response)
}

fn parse_response(response: &[u8]) -> RawResponse {
    let end = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no response head: {:?}", String::from_utf8_lossy(response)));
    let head = String::from_utf8_lossy(&response[..end]).to_string();
    let mut body = response[end + 4..].to_vec();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    let mut content_type = String::new();
    let mut chunked = false;
    for line in lines {
        let (name, value) = line.split_once(':').unwrap_or((line, ""));
        if name.eq_ignore_ascii_case("content-type") {
            content_type = value.trim().to_string();
        }
        if name.eq_ignore_ascii_case("transfer-encoding") && value.contains("chunked") {
            chunked = true;
        }
    }
    if chunked {
        let mut plain = Vec::new();
        let mut rest = &body[..];
        while let Some(line_end) = rest.windows(2).position(|w| w == b"\r\n") {
            let size = usize::from_str_radix(String::from_utf8_lossy(&rest[..line_end]).trim(), 16)
                .unwrap_or(0);
            if size == 0 {
                break;
            }
            plain.extend_from_slice(&rest[line_end + 2..line_end + 2 + size]);
            rest = &rest[line_end + 2 + size + 2..];
        }
        body = plain;
    }
    RawResponse {
        status,
        content_type,
        body: String::from_utf8_lossy(&body).to_string(),
    }
}

/// A REST request with a token for exactly its path.
async fn rest(
    server: &TestServer,
    method: &str,
    target: &str,
    content_type: Option<&str>,
    body: &[u8],
) -> RawResponse {
    let path = target.split('?').next().unwrap();
    let authorization = format!("Bearer {}", rest_token(server, path));
    let mut headers = vec![("authorization", authorization.as_str())];
    if let Some(content_type) = content_type {
        headers.push(("content-type", content_type));
    }
    raw_http(server, method, target, &headers, body).await
}

/// Starts a node (with `config`) and the bystander.
async fn setup(config: Config) -> (TestServer, Bystander) {
    let server = TestServer::start_with(config).await;
    let bystander = Bystander::join(&server).await;
    eventually("the bystander registered", WAIT, || {
        server.node.client_connection_count() == 1
    })
    .await;
    (server, bystander)
}

/// Only the offender went away: the bystander is the one client left and receives every
/// broadcast.
async fn only_the_offender_closed(server: &TestServer, bystander: &mut Bystander) {
    eventually("the offender removed", WAIT, || {
        server.node.client_connection_count() == 1
    })
    .await;
    bystander.still_receives_everything(server).await;
}

fn protocol_error(text: &str) -> String {
    format!("Connection closed with an error. protocol error: {text}")
}

/// The Close text for a message over the limit, in ASP.NET Core's words.
fn too_large(limit: usize) -> String {
    format!("Connection closed with an error. The maximum message size of {limit}B was exceeded.")
}

// ---------------------------------------------------------------------------------------
// Hub-protocol bytes over the client endpoint
// ---------------------------------------------------------------------------------------

/// A frame cut short stays pending (a frame may span WebSocket messages); the connection
/// is not closed for it, and its completion is read as one message.
#[tokio::test]
async fn truncated_frames_wait_for_the_rest() {
    let (server, mut bystander) = setup(Config::default()).await;
    for format in [Format::Json, Format::MessagePack] {
        let mut client = RawClient::ready(&server, HUB, format).await;
        let close = match format {
            Format::Json => b"{\"type\":7,\"error\":\"bye\"}\x1e".to_vec(),
            Format::MessagePack => vec![0x03, 0x92, 0x07, 0xC0],
        };
        let (head, tail) = close.split_at(close.len() / 2);
        client.send_raw(head).await;
        bystander.still_receives_everything(&server).await;
        assert_eq!(server.node.client_connection_count(), 2, "{format:?}");
        // The rest completes a Close message from the client: the service ends the
        // connection as the client asked.
        client.send_raw(tail).await;
        let ending = client.ending().await;
        assert_eq!(ending.ws_close_code, Some(1000), "{format:?}: {ending:?}");
        only_the_offender_closed(&server, &mut bystander).await;
    }
    // A truncated handshake, then the client goes away: nothing is left behind.
    let mut client = RawClient::connect(&server, HUB, Format::Json).await;
    client.send_text("{\"protocol\":\"js").await;
    drop(client);
    only_the_offender_closed(&server, &mut bystander).await;
}

/// MessagePack length prefixes longer than 5 bytes.
#[tokio::test]
async fn messagepack_varint_over_five_bytes() {
    let (server, mut bystander) = setup(Config::default()).await;
    for prefix in [
        &[0x80, 0x80, 0x80, 0x80, 0x80, 0x01][..],
        &[0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF],
    ] {
        let mut client = RawClient::ready(&server, HUB, Format::MessagePack).await;
        client.send_binary(prefix).await;
        assert_eq!(
            client.close_error().await,
            protocol_error("Messages over 2GB in size are not supported.")
        );
        only_the_offender_closed(&server, &mut bystander).await;
    }
}

/// Length prefixes of 2 GB: over the message limit, or over what the protocol allows.
#[tokio::test]
async fn two_gigabyte_length_prefixes() {
    let (server, mut bystander) = setup(Config::default()).await;
    for (prefix, error) in [
        // 2^31 - 1: a legal prefix, over the 1 MiB message limit.
        (&[0xFF, 0xFF, 0xFF, 0xFF, 0x07][..], too_large(1048576)),
        // 2^31: more than the protocol allows.
        (
            &[0x80, 0x80, 0x80, 0x80, 0x08][..],
            protocol_error("Messages over 2GB in size are not supported."),
        ),
    ] {
        let mut client = RawClient::ready(&server, HUB, Format::MessagePack).await;
        client.send_binary(prefix).await;
        assert_eq!(client.close_error().await, error);
        only_the_offender_closed(&server, &mut bystander).await;
    }
    // A JSON message that never ends: closed once it passes the limit.
    let mut client = RawClient::ready(&server, HUB, Format::Json).await;
    let chunk = "x".repeat(64 * 1024);
    for _ in 0..17 {
        client.send_text(&chunk).await;
    }
    assert_eq!(client.close_error().await, too_large(1048576));
    only_the_offender_closed(&server, &mut bystander).await;
}

/// 100,000 nested arrays, as a message, as a handshake and as a REST body.
#[tokio::test]
async fn deeply_nested_json() {
    let (server, mut bystander) = setup(Config::default()).await;
    let nested = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let mut client = RawClient::ready(&server, HUB, Format::Json).await;
    client.send_text(&format!("{nested}\x1e")).await;
    // The top level must be an object: the array is refused as such.
    assert_eq!(
        client.close_error().await,
        protocol_error("Unexpected JSON Token Type 'Array'. Expected a JSON Object.")
    );
    only_the_offender_closed(&server, &mut bystander).await;

    // Inside a message the service does not act on (a completion's result is only skipped,
    // without recursion): the client stays connected and keeps receiving.
    let mut client = RawClient::ready(&server, HUB, Format::Json).await;
    client
        .send_text(&format!(
            "{{\"type\":3,\"invocationId\":\"1\",\"result\":{nested}}}\x1e"
        ))
        .await;
    bystander.still_receives_everything(&server).await;
    match within("a broadcast", WAIT, client.try_next_message()).await {
        Some(HubMessage::Invocation { target, .. }) => assert_eq!(target, "seq"),
        other => panic!("after a nested completion: {other:?}"),
    }
    // Inside an invocation's arguments: only their shape is read; the invocation itself is
    // refused (serverless, no upstream).
    client
        .send_text(&format!(
            "{{\"type\":1,\"target\":\"t\",\"arguments\":[{nested}]}}\x1e"
        ))
        .await;
    assert_eq!(
        client.close_error().await,
        "Connection closed with an error. hub invocations from clients are not supported in \
         serverless mode without an upstream"
    );
    only_the_offender_closed(&server, &mut bystander).await;

    let mut client = RawClient::connect(&server, HUB, Format::Json).await;
    client.send_text(&format!("{nested}\x1e")).await;
    let refusal = client.handshake_refusal().await;
    assert!(
        refusal.starts_with("An unexpected error occurred during connection handshake.")
            && refusal.contains("recursion limit exceeded"),
        "{refusal}"
    );
    only_the_offender_closed(&server, &mut bystander).await;

    let response = rest(
        &server,
        "POST",
        "/api/hubs/chat/:send",
        Some("application/json"),
        format!("{{\"target\":\"t\",\"arguments\":[{nested}]}}").as_bytes(),
    )
    .await;
    assert_eq!(response.status, 400, "{response:?}");
    assert!(
        response
            .rest_message()
            .starts_with("the body is not valid JSON: recursion limit exceeded"),
        "{response:?}"
    );
    bystander.still_receives_everything(&server).await;
}

/// Invalid UTF-8 in a JSON frame: over WebSocket (a binary message, since text messages
/// must be UTF-8) and in a long-polling POST body.
#[tokio::test]
async fn invalid_utf8_in_json_frames() {
    let (server, mut bystander) = setup(Config::default()).await;
    let mut client = RawClient::ready(&server, HUB, Format::Json).await;
    client
        .send_binary(b"{\"type\":1,\"target\":\"\xFF\xFE\",\"arguments\":[]}\x1e")
        .await;
    let error = client.close_error().await;
    assert!(
        error.starts_with(&protocol_error("Error reading JSON: invalid unicode")),
        "{error}"
    );
    only_the_offender_closed(&server, &mut bystander).await;

    // Where the service itself does not read (arguments, properties it does not know), as
    // ASP.NET's reader does: refused, not passed on to an app server or upstream.
    for body in [
        &b"{\"type\":1,\"target\":\"echo\",\"arguments\":[\"\xFF\"]}\x1e"[..],
        b"{\"type\":6,\"extra\":\"\xC3\x28\"}\x1e",
    ] {
        let mut client = RawClient::ready(&server, HUB, Format::Json).await;
        client.send_binary(body).await;
        let error = client.close_error().await;
        assert!(
            error.starts_with(&protocol_error("Error reading JSON: invalid unicode")),
            "{error}"
        );
        only_the_offender_closed(&server, &mut bystander).await;
    }

    // Long polling: the POST is accepted, the poll then returns the Close message.
    let token = server.token(HUB, None);
    let negotiated = switchyard_client::negotiate(&server.client_url(HUB), &token, 1)
        .await
        .unwrap();
    let url = format!("{}&id={}", server.client_url(HUB), negotiated.id_value);
    let http = reqwest::Client::new();
    let first = http.get(&url).bearer_auth(&token).send().await.unwrap();
    assert_eq!(first.status(), 200);
    let mut body = handshake::encode_request("json", 1);
    body.extend_from_slice(b"{\"type\":1,\"target\":\"\xC3\x28\",\"arguments\":[]}\x1e");
    let posted = http
        .post(&url)
        .bearer_auth(&token)
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(posted.status(), 200);
    let mut received = Vec::new();
    loop {
        let poll = within(
            "a long poll",
            WAIT,
            http.get(&url).bearer_auth(&token).send(),
        )
        .await
        .unwrap();
        if poll.status() != 200 {
            assert_eq!(poll.status(), 204);
            break;
        }
        received.extend_from_slice(&poll.bytes().await.unwrap());
    }
    let (error, consumed) = handshake::parse_response(&received).unwrap().unwrap();
    assert_eq!(error, None);
    let mut rest_bytes = BytesMut::from(&received[consumed..]);
    let frame = FrameSplitter::new(Format::Json, usize::MAX)
        .next_frame(&mut rest_bytes)
        .unwrap()
        .expect("a Close message");
    match switchyard_client::decode(Format::Json, frame.body()).unwrap() {
        HubMessage::Close { error, .. } => {
            let error = error.expect("an error");
            assert!(
                error.starts_with(&protocol_error("Error reading JSON: invalid unicode")),
                "{error}"
            );
        }
        other => panic!("expected a Close message, got {other:?}"),
    }
    only_the_offender_closed(&server, &mut bystander).await;
}

/// Unknown message types are ignored (the protocol's forward compatibility); a type that is
/// not a number, and invocations in serverless mode without an upstream, close.
#[tokio::test]
async fn unknown_message_types() {
    let (server, mut bystander) = setup(Config::default()).await;
    for format in [Format::Json, Format::MessagePack] {
        let mut client = RawClient::ready(&server, HUB, format).await;
        let unknown = match format {
            Format::Json => b"{\"type\":99,\"what\":[1]}\x1e{\"type\":0}\x1e".to_vec(),
            Format::MessagePack => vec![0x02, 0x91, 0x63, 0x02, 0x91, 0x00],
        };
        client.send_raw(&unknown).await;
        // Still connected: it receives the broadcast like the bystander.
        bystander.still_receives_everything(&server).await;
        match within("a broadcast", WAIT, client.try_next_message()).await {
            Some(HubMessage::Invocation { target, .. }) => assert_eq!(target, "seq"),
            other => panic!("{format:?} client after an unknown type: {other:?}"),
        }
        assert_eq!(server.node.client_connection_count(), 2);
        let _ = client.ws.close(None).await;
        eventually("the client gone", WAIT, || {
            server.node.client_connection_count() == 1
        })
        .await;
    }

    let mut client = RawClient::ready(&server, HUB, Format::Json).await;
    client.send_text("{\"type\":\"ping\"}\x1e").await;
    let error = client.close_error().await;
    assert!(error.starts_with(&protocol_error("")), "{error}");
    assert!(error.contains("type"), "{error}");
    only_the_offender_closed(&server, &mut bystander).await;

    let mut client = RawClient::ready(&server, HUB, Format::Json).await;
    client
        .send_text("{\"type\":1,\"target\":\"echo\",\"arguments\":[]}\x1e")
        .await;
    assert_eq!(
        client.close_error().await,
        "Connection closed with an error. hub invocations from clients are not supported in \
         serverless mode without an upstream"
    );
    only_the_offender_closed(&server, &mut bystander).await;
}

/// No handshake within the (short) handshake timeout: refused as ASP.NET does, then closed.
#[tokio::test]
async fn handshake_never_sent() {
    let mut config = Config::default();
    config.timeouts.handshake_timeout = Duration::from_millis(400);
    let (server, mut bystander) = setup(config).await;
    let client = RawClient::connect(&server, HUB, Format::Json).await;
    assert_eq!(client.handshake_refusal().await, "Handshake was canceled.");
    only_the_offender_closed(&server, &mut bystander).await;
}

/// A second handshake is read as a hub message without a type.
#[tokio::test]
async fn handshake_twice() {
    let (server, mut bystander) = setup(Config::default()).await;
    let mut client = RawClient::ready(&server, HUB, Format::Json).await;
    client
        .send_text("{\"protocol\":\"json\",\"version\":1}\x1e")
        .await;
    let error = client.close_error().await;
    assert!(error.starts_with(&protocol_error("")), "{error}");
    assert!(error.contains("type"), "{error}");
    only_the_offender_closed(&server, &mut bystander).await;

    // MessagePack: the second handshake's `{` (0x7B) is read as a 123-byte length prefix;
    // once 123 bytes have come, they are not a MessagePack message.
    let mut client = RawClient::ready(&server, HUB, Format::MessagePack).await;
    let again = b"{\"protocol\":\"messagepack\",\"version\":1}\x1e";
    client.send_binary(again).await;
    bystander.still_receives_everything(&server).await;
    assert_eq!(
        server.node.client_connection_count(),
        2,
        "a partial frame is pending"
    );
    client.send_binary(&vec![b' '; 1 + 123 - again.len()]).await;
    let error = client.close_error().await;
    assert!(error.starts_with(&protocol_error("")), "{error}");
    only_the_offender_closed(&server, &mut bystander).await;
}

/// A refused handshake, then a valid one in a later read (here a second long-polling POST):
/// the closing connection takes nothing more, it never joins the hub.
#[tokio::test]
async fn a_handshake_after_a_refused_one() {
    let (server, mut bystander) = setup(Config::default()).await;
    let token = server.token(HUB, None);
    let negotiated = switchyard_client::negotiate(&server.client_url(HUB), &token, 1)
        .await
        .unwrap();
    let url = format!("{}&id={}", server.client_url(HUB), negotiated.id_value);
    let http = reqwest::Client::new();
    let first = http.get(&url).bearer_auth(&token).send().await.unwrap();
    assert_eq!(first.status(), 200);
    for body in [
        handshake::encode_request("nope", 1),
        handshake::encode_request("json", 1),
    ] {
        let posted = http
            .post(&url)
            .bearer_auth(&token)
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(posted.status(), 200);
    }
    let hub = switchyard_core::HubName::new(HUB, None).unwrap();
    let exists = switchyard_node::Check::connection(&negotiated.connection_id).unwrap();
    assert!(
        server.node.executor().execute(&hub, exists).await.is_err(),
        "joined the hub"
    );
    let poll = within(
        "a long poll",
        WAIT,
        http.get(&url).bearer_auth(&token).send(),
    )
    .await
    .unwrap();
    assert_eq!(poll.status(), 200);
    let body = poll.bytes().await.unwrap();
    assert_eq!(
        handshake::parse_response(&body).unwrap(),
        Some((
            Some("The protocol 'nope' is not supported.".to_string()),
            body.len()
        )),
        "only the refusal, nothing after it"
    );
    // The client polls once more, as clients do, and learns the connection is over.
    let last = within(
        "the last poll",
        WAIT,
        http.get(&url).bearer_auth(&token).send(),
    )
    .await
    .unwrap();
    assert_eq!(last.status(), 204);
    only_the_offender_closed(&server, &mut bystander).await;
}

/// Messages before the handshake: the first record is read as the handshake and refused.
#[tokio::test]
async fn messages_before_the_handshake() {
    let mut config = Config::default();
    config.timeouts.handshake_timeout = Duration::from_millis(400);
    let (server, mut bystander) = setup(config).await;
    let mut client = RawClient::connect(&server, HUB, Format::Json).await;
    client
        .send_text("{\"type\":1,\"target\":\"t\",\"arguments\":[]}\x1e")
        .await;
    let refusal = client.handshake_refusal().await;
    assert!(
        refusal.starts_with("An unexpected error occurred during connection handshake.")
            && refusal.contains("Missing required property 'protocol'"),
        "{refusal}"
    );
    only_the_offender_closed(&server, &mut bystander).await;

    let mut client = RawClient::connect(&server, HUB, Format::MessagePack).await;
    client.send_binary(&[0x02, 0x91, 0x06]).await;
    // Without a record separator the bytes are not a handshake yet: the handshake timeout
    // ends it.
    assert_eq!(client.handshake_refusal().await, "Handshake was canceled.");
    only_the_offender_closed(&server, &mut bystander).await;
}

/// 500 negotiates and WebSocket connects at once, then a flood of messages from one client.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn floods_of_connects_and_sends() {
    let (server, mut bystander) = setup(Config::default()).await;
    let server = std::sync::Arc::new(server);
    let tasks: Vec<_> = (0..500)
        .map(|_| {
            let server = server.clone();
            tokio::spawn(async move { RawClient::ready(&server, HUB, Format::Json).await })
        })
        .collect();
    let mut clients = Vec::new();
    for task in tasks {
        clients.push(
            within("a connect of the flood", Duration::from_secs(60), task)
                .await
                .unwrap(),
        );
    }
    assert_eq!(server.node.client_connection_count(), 501);
    bystander.still_receives_everything(&server).await;
    for client in &mut clients {
        for i in 0..BROADCASTS {
            match within("a broadcast to the flood", WAIT, client.try_next_message()).await {
                Some(HubMessage::Invocation { arguments, .. }) => {
                    assert_eq!(arguments[1], json!(i))
                }
                other => panic!("a flood client got {other:?}"),
            }
        }
    }
    for mut client in clients {
        let _ = client.ws.close(None).await;
    }
    eventually("the flood gone", WAIT, || {
        server.node.client_connection_count() == 1
    })
    .await;

    // One client sends 20,000 messages as fast as it can: pings, completions and unknown
    // types, in batches. It stays connected; so does the bystander.
    let mut flooder = RawClient::ready(&server, HUB, Format::Json).await;
    let batch =
        "{\"type\":6}\x1e{\"type\":3,\"invocationId\":\"1\",\"result\":1}\x1e{\"type\":42}\x1e"
            .repeat(100);
    for _ in 0..67 {
        flooder.send_text(&batch).await;
    }
    bystander.still_receives_everything(&server).await;
    assert_eq!(server.node.client_connection_count(), 2);
    match within(
        "a broadcast to the flooder",
        WAIT,
        flooder.try_next_message(),
    )
    .await
    {
        Some(HubMessage::Invocation { target, .. }) => assert_eq!(target, "seq"),
        other => panic!("the flooder got {other:?}"),
    }
}

/// A flood of negotiates over the pending limit, then of connects over the connection limit:
/// the excess is refused with 429 and a text, and negotiated-but-unconnected connections never
/// count as clients (audit finding 7: they used to lock everyone else out).
#[tokio::test]
async fn a_flood_over_the_connection_limits_is_refused() {
    let mut config = Config::default();
    config.limits.max_client_connections = 20;
    config.limits.max_pending_negotiations = 40;
    let (server, mut bystander) = setup(config).await;
    let token = server.token(HUB, None);
    let http = reqwest::Client::new();
    let negotiate = || {
        http.post(format!(
            "{}/client/negotiate?hub={HUB}&negotiateVersion=1",
            server.http()
        ))
        .bearer_auth(&token)
        .send()
    };
    let responses = futures_util::future::join_all((0..100).map(|_| negotiate())).await;
    let mut ids = Vec::new();
    for response in responses {
        let response = response.unwrap();
        match response.status().as_u16() {
            200 => {
                let body: serde_json::Value = response.json().await.unwrap();
                ids.push(body["connectionToken"].as_str().unwrap().to_string());
            }
            429 => assert!(response
                .text()
                .await
                .unwrap()
                .contains("too many negotiated connections are waiting to connect"),),
            other => panic!("negotiate in a flood: {other}"),
        }
    }
    assert_eq!(ids.len(), 40, "the pending limit, not the connection limit");
    // Connecting them: 19 fit beside the bystander; the others are refused at connect.
    let mut connected = Vec::new();
    let mut refused = 0;
    for id in &ids {
        let url = format!("{}&id={id}", server.ws_url(HUB, None));
        match switchyard_client::WsClient::connect(&url, Some(&token), Format::Json).await {
            Ok(client) => connected.push(client),
            Err(switchyard_client::ClientError::WebSocket(WsError::Http(response))) => {
                assert_eq!(response.status().as_u16(), 429);
                refused += 1;
            }
            Err(other) => panic!("connect in a flood: {other}"),
        }
    }
    assert_eq!(
        connected.len(),
        19,
        "the connection limit counts the bystander"
    );
    assert_eq!(refused, 21);
    // A full service refuses negotiate at once.
    assert_eq!(negotiate().await.unwrap().status(), 429);
    bystander.still_receives_everything(&server).await;
}

// ---------------------------------------------------------------------------------------
// REST
// ---------------------------------------------------------------------------------------

/// Bodies over the limit (declared or streamed), malformed JSON, wrong content types.
#[tokio::test]
async fn rest_bodies() {
    let mut config = Config::default();
    config.limits.max_request_body_size = 4096;
    let (server, mut bystander) = setup(config).await;
    let send = "/api/hubs/chat/:send";
    let huge = format!(
        "{{\"target\":\"t\",\"arguments\":[\"{}\"]}}",
        "x".repeat(5000)
    );
    let response = rest(
        &server,
        "POST",
        send,
        Some("application/json"),
        huge.as_bytes(),
    )
    .await;
    assert_eq!(response.status, 413, "{response:?}");
    assert_eq!(
        response.rest_message(),
        "the request body is larger than the limit of 4096 bytes"
    );
    // Streamed without a length.
    let path = send;
    let stream = futures_util::stream::iter(
        (0..10).map(|_| Ok::<_, std::io::Error>(Bytes::from(vec![b' '; 1000]))),
    );
    let response = reqwest::Client::new()
        .post(format!("{}{path}", server.http()))
        .bearer_auth(rest_token(&server, path))
        .header("content-type", "application/json")
        .body(reqwest::Body::wrap_stream(stream))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 413);
    assert!(response
        .text()
        .await
        .unwrap()
        .contains("larger than the limit of 4096 bytes"));

    for (content_type, body, message) in [
        (
            Some("application/json"),
            &b"{\"target\":\"t\",\"arguments\":[1,]}"[..],
            "the body is not valid JSON: ",
        ),
        (
            Some("application/json"),
            b"",
            "a JSON body {\"target\":\"method\",\"arguments\":[…]} is required",
        ),
        (
            Some("application/json"),
            b"[\"t\"]",
            "the body must be a JSON object",
        ),
        (
            Some("application/json"),
            b"{\"target\":5}",
            "'target' must be a string",
        ),
        (
            Some("application/json"),
            b"{\"target\":\"t\",\"arguments\":{}}",
            "'arguments' must be an array",
        ),
        (
            Some("application/json"),
            b"{\"target\":\"\xFF\"}",
            "the body is not valid JSON: invalid unicode",
        ),
        (
            Some("application/xml"),
            b"<send target=\"t\"/>",
            "the body is not valid JSON: ",
        ),
        (
            Some("application/x-msgpack"),
            b"{\"target\":\"t\",\"arguments\":[]}",
            "invalid MessagePack payloads body: ",
        ),
        (
            Some("application/octet-stream"),
            b"\xC1",
            "invalid MessagePack payloads body: ",
        ),
    ] {
        let response = rest(&server, "POST", send, content_type, body).await;
        assert_eq!(
            response.status, 400,
            "{content_type:?} {body:?}: {response:?}"
        );
        let text = response.rest_message();
        assert!(text.starts_with(message), "{content_type:?}: {text}");
    }
    // Any other type is read as JSON (as Azure does): a JSON body under text/plain is sent.
    let response = rest(
        &server,
        "POST",
        send,
        Some("text/plain"),
        b"{\"target\":\"seq\",\"arguments\":[0,-1]}",
    )
    .await;
    assert_eq!(response.status, 202, "{response:?}");
    match within(
        "the text/plain send",
        WAIT,
        bystander.client.try_next_message(),
    )
    .await
    {
        Some(HubMessage::Invocation { arguments, .. }) => {
            assert_eq!(arguments, [json!(0), json!(-1)])
        }
        other => panic!("{other:?}"),
    }
    bystander.still_receives_everything(&server).await;
    assert_eq!(server.node.client_connection_count(), 1);
}

/// Path traversal and odd names in REST paths: 400 or 404 with a text naming the problem
/// (401 where no token can name the path), never a 500.
#[tokio::test]
async fn rest_paths_and_names() {
    let (server, mut bystander) = setup(Config::default()).await;
    let long = "u".repeat(1025);
    let long_hub = format!("h{}", "a".repeat(128));
    let cases: Vec<(&str, String, u16, &str)> = vec![
        // Dot segments, literal or encoded, are refused alike: never resolved.
        (
            "POST",
            "/api/hubs/chat/../chat/:send".into(),
            400,
            "'.' or '..' segment",
        ),
        (
            "POST",
            "/api/../api/hubs/chat/:send".into(),
            400,
            "'.' or '..' segment",
        ),
        (
            "GET",
            "/api/hubs/chat/groups/../../../../etc/passwd".into(),
            400,
            "'.' or '..' segment",
        ),
        (
            "POST",
            "/api/hubs/%2e%2e/:send".into(),
            400,
            "'.' or '..' segment",
        ),
        (
            "POST",
            "/api/hubs/chat/users/%2E%2E/:send".into(),
            400,
            "'.' or '..' segment",
        ),
        (
            "POST",
            "/api/hubs/chat/groups/%2e/:send".into(),
            400,
            "'.' or '..' segment",
        ),
        // Names that are not valid.
        (
            "POST",
            "/api/hubs/1chat/:send".into(),
            400,
            "invalid hub '1chat': must start with a letter",
        ),
        (
            "POST",
            "/api/hubs/ch%2Fat/:send".into(),
            400,
            "invalid hub 'ch/at': may contain only letters",
        ),
        (
            "POST",
            "/api/hubs/ch%00at/:send".into(),
            400,
            "invalid hub 'ch\u{0}at': may contain only letters",
        ),
        (
            "POST",
            "/api/hubs/ch%C3%A4t/:send".into(),
            400,
            "invalid hub 'chät': may contain only letters",
        ),
        (
            "POST",
            format!("/api/hubs/{long_hub}/:send"),
            400,
            "must be at most 128 characters",
        ),
        (
            "POST",
            "/api/hubs//:send".into(),
            400,
            "invalid hub '': must not be empty",
        ),
        (
            "POST",
            "/api/hubs/chat/:send?application=..".into(),
            400,
            "invalid application '..'",
        ),
        (
            "POST",
            format!("/api/hubs/chat/users/{long}/:send"),
            400,
            "must be at most 1024 characters",
        ),
        (
            "POST",
            "/api/hubs/chat/groups/%20%09/:send".into(),
            400,
            "must not be only white space",
        ),
        (
            "GET",
            "/api/hubs/chat/groups//connections".into(),
            400,
            "invalid group '': must not be empty",
        ),
        ("POST", "/api/hubs/chat/:send?excluded=".into(), 202, ""),
        (
            "POST",
            format!("/api/hubs/chat/:send?excluded={}", "c".repeat(1025)),
            400,
            "invalid connection id",
        ),
        (
            "PUT",
            "/api/hubs/chat/users/u/groups/g?ttl=-5".into(),
            400,
            "'ttl' must be a whole number",
        ),
        (
            "GET",
            "/api/hubs/chat/groups/g/connections?maxpagesize=0".into(),
            400,
            "'maxpagesize' must be an integer from 1 to 200",
        ),
        (
            "GET",
            "/api/hubs/chat/users/%FF".into(),
            400,
            "the path is not valid percent-encoded UTF-8",
        ),
        (
            "GET",
            "/api/hubs/chat/connections/%E2%80%AE%F0%9F%98%80".into(),
            404,
            "does not exist",
        ),
        (
            "GET",
            "/api/hubs/chat/users/%0D%0Ax-injected:%201".into(),
            404,
            "has no connection",
        ),
        ("PATCH", "/api/hubs/chat/:send".into(), 405, "allowed: POST"),
        (
            "POST",
            "/api/hubs/chat/%3Asend%00".into(),
            404,
            "no REST API route matches this path",
        ),
        (
            "POST",
            "/api/v1-preview/hub/chat/users/a,,b".into(),
            400,
            "invalid user '': must not be empty",
        ),
        (
            "POST",
            "/api/v1-preview/hub/chat/groups/g%2C%20".into(),
            400,
            "invalid group '': must not be empty",
        ),
    ];
    for (method, target, status, text) in cases {
        let body: &[u8] = if method == "POST" {
            b"{\"target\":\"seq\",\"arguments\":[0,-1]}"
        } else {
            b""
        };
        let response = rest(&server, method, &target, Some("application/json"), body).await;
        assert_eq!(response.status, status, "{method} {target}: {response:?}");
        if status >= 400 {
            let message = response.rest_message();
            assert!(message.contains(text), "{method} {target}: {message}");
        } else {
            // The one accepted send reached the bystander.
            match within("the send", WAIT, bystander.client.try_next_message()).await {
                Some(HubMessage::Invocation { arguments, .. }) => {
                    assert_eq!(arguments, [json!(0), json!(-1)])
                }
                other => panic!("{other:?}"),
            }
        }
    }
    // Control characters the HTTP parser refuses before any route runs.
    for target in [
        "/api/hubs/chat/users/a\x01b/:send",
        "/api/hubs/chat/groups/a b/:send",
    ] {
        let response = rest(&server, "POST", target, None, b"{}").await;
        assert_eq!(response.status, 400, "{target:?}: {response:?}");
    }
    bystander.still_receives_everything(&server).await;
    assert_eq!(server.node.client_connection_count(), 1);
}

/// Odd hub names and ids on the client endpoint (negotiate and connect): 400 or 404 with a
/// plain-text reason.
#[tokio::test]
async fn client_endpoint_paths_and_names() {
    let (server, mut bystander) = setup(Config::default()).await;
    let token = server.token(HUB, None);
    let authorization = format!("Bearer {token}");
    let long_hub = format!("h{}", "a".repeat(128));
    let cases: Vec<(&str, String, u16, &str)> = vec![
        (
            "POST",
            "/client/negotiate?hub=../chat".into(),
            400,
            "invalid hub '../chat': must start with a letter",
        ),
        (
            "POST",
            "/client/negotiate?hub=%2e%2e%2fchat".into(),
            400,
            "invalid hub '../chat'",
        ),
        (
            "POST",
            "/client/negotiate?hub=ch%2Fat".into(),
            400,
            "invalid hub 'ch/at'",
        ),
        (
            "POST",
            "/client/negotiate?hub=ch%00at".into(),
            400,
            "may contain only letters",
        ),
        (
            "POST",
            "/client/negotiate?hub=%E2%80%AEchat".into(),
            400,
            "must start with a letter",
        ),
        (
            "POST",
            format!("/client/negotiate?hub={long_hub}"),
            400,
            "must be at most 128 characters",
        ),
        (
            "POST",
            "/client/negotiate?hub=".into(),
            400,
            "invalid hub '': must not be empty",
        ),
        (
            "POST",
            "/client/negotiate".into(),
            400,
            "exactly one 'hub' query parameter is required",
        ),
        (
            "POST",
            "/client/negotiate?hub=chat&hub=chat".into(),
            400,
            "exactly one 'hub' query parameter is required",
        ),
        (
            "POST",
            "/client/negotiate?hub=chat&negotiateVersion=1%00".into(),
            200,
            "non-integer protocol version",
        ),
        (
            "GET",
            "/client/negotiate?hub=chat".into(),
            405,
            "negotiate requires POST",
        ),
        (
            "POST",
            "/client/?hub=chat".into(),
            400,
            "Connection ID required",
        ),
        (
            "POST",
            "/client/?hub=chat&id=..%2F..%2Fx".into(),
            404,
            "No Connection with that ID",
        ),
        (
            "POST",
            "/client/?hub=chat&id=%00%0A".into(),
            404,
            "No Connection with that ID",
        ),
        (
            "DELETE",
            format!("/client/?hub=chat&id={}", "i".repeat(5000)),
            404,
            "No Connection with that ID",
        ),
        (
            "GET",
            "/client/?hub=ch%C3%A4t&id=x".into(),
            400,
            "invalid hub 'chät'",
        ),
    ];
    for (method, target, status, text) in cases {
        let response = raw_http(
            &server,
            method,
            &target,
            &[("authorization", authorization.as_str())],
            b"",
        )
        .await;
        assert_eq!(response.status, status, "{method} {target}: {response:?}");
        assert!(
            response.body.contains(text),
            "{method} {target}: {response:?}"
        );
    }
    // Path traversal around the client endpoint reaches no route.
    for target in [
        "/client/../client/negotiate?hub=chat",
        "/client/%2e%2e/server/?hub=chat",
    ] {
        let response = raw_http(
            &server,
            "POST",
            target,
            &[("authorization", authorization.as_str())],
            b"",
        )
        .await;
        assert_eq!(response.status, 404, "{target}: {response:?}");
        assert_eq!(response.body, "no route matches this path", "{target}");
    }
    bystander.still_receives_everything(&server).await;
    assert_eq!(server.node.client_connection_count(), 1);
}

// ---------------------------------------------------------------------------------------
// The app-server endpoint (see server_protocol.rs for the protocol itself)
// ---------------------------------------------------------------------------------------

async fn dial_server(server: &TestServer, hub: &str, token: &str) -> Result<Ws, WsError> {
    let url = format!("{}&cid=c1", server.server_ws_url(hub));
    common::dial_url(&url, Some(token), Some("bad-server")).await
}

/// Reads until the app-server connection is closed; the error of the HandshakeResponse it
/// got first.
async fn server_refusal(ws: &mut Ws) -> String {
    within("the app-server connection to close", WAIT, async {
        let mut buf = BytesMut::new();
        let mut refusal = None;
        loop {
            match ws.next().await {
                Some(Ok(WsMessage::Binary(data))) => buf.extend_from_slice(&data),
                Some(Ok(WsMessage::Close(_))) | None | Some(Err(_)) => break,
                Some(Ok(_)) => {}
            }
            while let Some(body) = FrameReader::new(usize::MAX).next_body(&mut buf).unwrap() {
                if let ServiceMessage::HandshakeResponse(response) = decode(&body).unwrap() {
                    refusal = Some(response.error_message);
                }
            }
        }
        refusal.expect("a HandshakeResponse before the close")
    })
    .await
}

/// Cross-checks on `/server`: a token for another audience, garbage instead of the
/// handshake, no handshake at all. The clients' hub is untouched (it stays serverless).
#[tokio::test]
async fn app_server_endpoint() {
    let mut config = Config::default();
    config.timeouts.server_handshake_timeout = Duration::from_millis(400);
    let (server, mut bystander) = setup(config).await;

    // A client token (audience /client/) is not an app-server token.
    let wrong = dial_server(&server, "apps", &server.token("apps", None)).await;
    match wrong {
        Err(WsError::Http(response)) => {
            assert_eq!(response.status().as_u16(), 401);
            let body =
                String::from_utf8_lossy(response.body().as_deref().unwrap_or_default()).to_string();
            assert!(body.contains("audience"), "{body}");
        }
        other => panic!(
            "a client token was accepted on /server: {:?}",
            other.map(|_| ())
        ),
    }

    // Garbage before the handshake: refused, the connection closed.
    let token = server.server_token("apps", "bad-server");
    let mut ws = dial_server(&server, "apps", &token).await.expect("upgrade");
    ws.send(WsMessage::Binary(Bytes::from_static(&[
        0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
    ])))
    .await
    .unwrap();
    let refusal = server_refusal(&mut ws).await;
    assert!(
        refusal.starts_with("Invalid handshake request: "),
        "{refusal}"
    );
    bystander.still_receives_everything(&server).await;

    let mut ws = dial_server(&server, "apps", &token).await.expect("upgrade");
    ws.send(WsMessage::Binary(Bytes::from_static(&[0x02, 0x91, 0x03])))
        .await
        .unwrap();
    assert_eq!(
        server_refusal(&mut ws).await,
        "Expected a handshake request as the first message, got Ping."
    );

    // A client's handshake (text) on the app-server endpoint.
    let mut ws = dial_server(&server, "apps", &token).await.expect("upgrade");
    ws.send(WsMessage::Text(
        "{\"protocol\":\"json\",\"version\":1}\x1e".into(),
    ))
    .await
    .unwrap();
    assert_eq!(
        server_refusal(&mut ws).await,
        "The service protocol uses binary WebSocket messages."
    );

    // No handshake within the server handshake timeout.
    let mut ws = dial_server(&server, "apps", &token).await.expect("upgrade");
    assert_eq!(
        server_refusal(&mut ws).await,
        "No handshake request was received in time."
    );
    eventually("no app-server connection left", WAIT, || {
        server.node.server_connection_count() == 0
    })
    .await;
    assert_eq!(server.node.client_connection_count(), 1);
    bystander.still_receives_everything(&server).await;
}
