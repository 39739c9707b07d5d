//! The app-server endpoint `/server/?hub=` (Azure's service protocol, Default mode) driven
//! with raw frames the way the .NET server SDK drives it, against a real node on port 0:
//! VarInt-framed MessagePack messages in binary WebSocket frames, sometimes split at odd
//! points, and SignalR clients (JSON and MessagePack) whose traffic the node relays.

mod common;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use common::{eventually, now, within, Http, TestServer};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use switchyard_auth::TokenBuilder;
use switchyard_hub_protocol::{
    encode_invocation, handshake, ping, Format, FrameSplitter, HubMessage,
};
use switchyard_node::config::ServiceMode;
use switchyard_node::Config;
use switchyard_service_protocol::{
    decode, encoded, AccessKeyRequest, Ack, BroadcastData, CheckConnectionExistenceWithAck,
    CheckGroupExistenceWithAck, CheckUserExistenceWithAck, CheckUserInGroupWithAck,
    ClientCompletion, ClientInvocation, CloseConnection, CloseConnectionWithAck,
    CloseGroupConnectionsWithAck, CloseUserConnectionsWithAck, ConnectionData, Extensions,
    FrameReader, GroupBroadcastData, GroupMemberQuery, HandshakeRequest, HandshakeResponse,
    JoinGroupWithAck, LeaveGroupWithAck, MultiConnectionData, MultiGroupBroadcastData,
    MultiUserData, OpenConnection, Payloads, Ping, ServiceEvent, ServiceMessage, UserData,
    UserJoinGroupWithAck, UserLeaveGroupWithAck,
};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::{Error as WsError, Message as WsMessage};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Bound for anything that should happen soon; generous so a loaded machine does not flake.
const WAIT: Duration = Duration::from_secs(5);
/// Every Ack must come this fast (the SDK itself gives up after 10 s).
const ACK_WAIT: Duration = Duration::from_secs(2);

/// TCP_NODELAY on the test's sockets, as the SDK's WebSocket has it (.NET disables Nagle).
const NO_DELAY: bool = true;

const OK: i32 = 1;
const NOT_FOUND: i32 = 2;

// ---------------------------------------------------------------------------------------
// The app-server side
// ---------------------------------------------------------------------------------------

/// Opens `/server/?hub=` with the SDK's headers. `server_id` goes into `X-ASRS-Server-Id`.
async fn dial(
    server: &TestServer,
    hub: &str,
    token: Option<&str>,
    server_id: Option<&str>,
) -> Result<Ws, WsError> {
    static CID: AtomicUsize = AtomicUsize::new(0);
    let cid = format!("cid-{}", CID.fetch_add(1, Ordering::Relaxed));
    dial_url(
        &format!("{}&cid={cid}", server.server_ws_url(hub)),
        token,
        server_id,
    )
    .await
}

async fn dial_url(url: &str, token: Option<&str>, server_id: Option<&str>) -> Result<Ws, WsError> {
    let mut request = url.into_client_request()?;
    let headers = request.headers_mut();
    if let Some(token) = token {
        headers.insert("authorization", format!("Bearer {token}").parse().unwrap());
    }
    if let Some(id) = server_id {
        headers.insert("x-asrs-server-id", id.parse().unwrap());
    }
    headers.insert(
        "asrs-user-agent",
        "Microsoft.Azure.SignalR/1.25.1 (.NET 8.0; Linux; X64)"
            .parse()
            .unwrap(),
    );
    headers.insert("x-requested-with", "XMLHttpRequest".parse().unwrap());
    let (ws, _) = tokio_tungstenite::connect_async_with_config(request, None, NO_DELAY).await?;
    Ok(ws)
}

/// The HTTP status of a refused upgrade.
fn refused_status(result: Result<Ws, WsError>) -> u16 {
    match result {
        Err(WsError::Http(response)) => response.status().as_u16(),
        Err(other) => panic!("expected an HTTP refusal, got {other}"),
        Ok(_) => panic!("expected an HTTP refusal, the upgrade succeeded"),
    }
}

/// The SDK's HandshakeRequest for a Default connection.
fn handshake_request(migration_level: i32) -> HandshakeRequest {
    HandshakeRequest {
        version: 1,
        connection_type: 0,
        target: String::new(),
        migration_level,
        ext: Extensions::default(),
        allow_stateful_reconnects: None,
    }
}

/// One app-server connection speaking raw service-protocol frames.
struct AppServer {
    ws: Ws,
    buf: BytesMut,
    /// Messages read while waiting for another one, in arrival order.
    pending: VecDeque<ServiceMessage>,
    /// Plain keep-alive pings (`[3]`) are dropped unless set.
    keep_alives: bool,
    echo: usize,
}

impl AppServer {
    fn new(ws: Ws) -> AppServer {
        AppServer {
            ws,
            buf: BytesMut::new(),
            pending: VecDeque::new(),
            keep_alives: false,
            echo: 0,
        }
    }

    /// A connected, handshaken Default connection of app server `server_id`.
    async fn open(server: &TestServer, hub: &str, server_id: &str) -> AppServer {
        Self::open_with(server, hub, server_id, 0).await
    }

    async fn open_with(
        server: &TestServer,
        hub: &str,
        server_id: &str,
        migration_level: i32,
    ) -> AppServer {
        let token = server.server_token(hub, server_id);
        let ws = dial(server, hub, Some(&token), Some(server_id))
            .await
            .expect("app server upgrade");
        let mut app = AppServer::new(ws);
        let response = app.handshake(handshake_request(migration_level)).await;
        assert_eq!(response.error_message, "", "handshake refused");
        app
    }

    async fn handshake(&mut self, request: HandshakeRequest) -> HandshakeResponse {
        self.send(request).await;
        match self.next().await {
            ServiceMessage::HandshakeResponse(response) => response,
            other => panic!("expected a HandshakeResponse, got {other:?}"),
        }
    }

    /// One message as one binary WebSocket frame.
    async fn send(&mut self, message: impl Into<ServiceMessage>) {
        let frame = encoded(&message.into());
        self.send_bytes(&frame).await;
    }

    async fn send_bytes(&mut self, bytes: &[u8]) {
        self.ws
            .send(WsMessage::Binary(Bytes::copy_from_slice(bytes)))
            .await
            .expect("app server write");
    }

    /// Reads one message off the socket; `None` once the service closed it.
    async fn read_message(&mut self) -> Option<ServiceMessage> {
        loop {
            if let Some(body) = FrameReader::new(usize::MAX)
                .next_body(&mut self.buf)
                .expect("the service's framing")
            {
                let message = decode(&body).expect("a message the service sent");
                if !self.keep_alives
                    && matches!(&message, ServiceMessage::Ping(p) if p.is_keep_alive())
                {
                    continue;
                }
                return Some(message);
            }
            match self.ws.next().await {
                Some(Ok(WsMessage::Binary(data))) => self.buf.extend_from_slice(&data),
                Some(Ok(WsMessage::Text(text))) => panic!("the service sent a text frame: {text}"),
                Some(Ok(WsMessage::Close(_))) | None | Some(Err(_)) => return None,
                Some(Ok(_)) => {}
            }
        }
    }

    /// The next message (earlier skipped ones first); `None` once closed.
    async fn recv(&mut self) -> Option<ServiceMessage> {
        match self.pending.pop_front() {
            Some(message) => Some(message),
            None => self.read_message().await,
        }
    }

    /// The next message; panics if none comes or the connection closes.
    async fn next(&mut self) -> ServiceMessage {
        within("a message from the service", WAIT, self.recv())
            .await
            .expect("the service closed the app-server connection")
    }

    /// The first message `pick` accepts; messages before it are kept for later.
    async fn take<T>(&mut self, what: &str, pick: impl FnMut(&ServiceMessage) -> Option<T>) -> T {
        self.take_within(what, WAIT, pick).await
    }

    async fn take_within<T>(
        &mut self,
        what: &str,
        limit: Duration,
        mut pick: impl FnMut(&ServiceMessage) -> Option<T>,
    ) -> T {
        if let Some(i) = self.pending.iter().position(|m| pick(m).is_some()) {
            let message = self.pending.remove(i).expect("found");
            return pick(&message).expect("matched before");
        }
        within(what, limit, async {
            loop {
                let message = self
                    .read_message()
                    .await
                    .unwrap_or_else(|| panic!("connection closed while waiting for {what}"));
                if let Some(found) = pick(&message) {
                    return found;
                }
                self.pending.push_back(message);
            }
        })
        .await
    }

    async fn open_connection(&mut self) -> OpenConnection {
        self.take("OpenConnection", |m| match m {
            ServiceMessage::OpenConnection(open) => Some(open.clone()),
            _ => None,
        })
        .await
    }

    async fn connection_data(&mut self, connection: &str) -> Bytes {
        self.take("ConnectionData", |m| match m {
            ServiceMessage::ConnectionData(d) if d.connection_id == connection => {
                Some(d.payload.clone())
            }
            _ => None,
        })
        .await
    }

    async fn close_connection(&mut self, connection: &str) -> CloseConnection {
        self.take("CloseConnection", |m| match m {
            ServiceMessage::CloseConnection(c) if c.connection_id == connection => Some(c.clone()),
            _ => None,
        })
        .await
    }

    /// The Ack for `ack_id`, within [`ACK_WAIT`].
    async fn ack(&mut self, ack_id: i32) -> Ack {
        self.take_within(&format!("Ack {ack_id}"), ACK_WAIT, |m| match m {
            ServiceMessage::Ack(a) if a.ack_id == ack_id => Some(a.clone()),
            _ => None,
        })
        .await
    }

    /// Sends a message that carries `ack_id` and returns the Ack's status.
    async fn acked(&mut self, message: impl Into<ServiceMessage>, ack_id: i32) -> i32 {
        self.send(message).await;
        self.ack(ack_id).await.status
    }

    /// The first ping carrying `key`.
    async fn ping(&mut self, key: &str) -> Ping {
        self.take(&format!("ping {key}"), |m| match m {
            ServiceMessage::Ping(p) if p.get(key).is_some() => Some(p.clone()),
            _ => None,
        })
        .await
    }

    /// An `echo` ping round trip: the connection is alive and processed everything before.
    async fn echo_round_trip(&mut self) {
        self.echo += 1;
        let tag = format!("probe-{}", self.echo);
        self.send(Ping::new(&[("echo", &tag)])).await;
        let back = self
            .take("echo", |m| match m {
                ServiceMessage::Ping(p) if p.get("echo") == Some(tag.as_str()) => Some(p.clone()),
                _ => None,
            })
            .await;
        assert_eq!(back.values, vec!["echo".to_string(), tag]);
    }

    /// Like [`Self::echo_round_trip`], and nothing else arrived before the echo.
    async fn assert_quiet(&mut self) {
        assert!(self.pending.is_empty(), "unexpected: {:?}", self.pending);
        self.echo += 1;
        let tag = format!("quiet-{}", self.echo);
        self.send(Ping::new(&[("echo", &tag)])).await;
        match self.next().await {
            ServiceMessage::Ping(p) if p.get("echo") == Some(tag.as_str()) => {}
            other => panic!("expected only the echo, got {other:?}"),
        }
    }

    /// Reads until the service closes the connection; returns what came before.
    async fn until_closed(&mut self) -> Vec<ServiceMessage> {
        let mut seen: Vec<ServiceMessage> = self.pending.drain(..).collect();
        within(
            "the service to close the app-server connection",
            WAIT,
            async {
                while let Some(message) = self.read_message().await {
                    seen.push(message);
                }
            },
        )
        .await;
        seen
    }

    async fn send_to(&mut self, connection: &str, payload: &[u8]) {
        self.send(ConnectionData {
            connection_id: connection.to_string(),
            payload: Bytes::copy_from_slice(payload),
            ext: Extensions::default(),
        })
        .await;
    }
}

// ---------------------------------------------------------------------------------------
// The SignalR client side
// ---------------------------------------------------------------------------------------

/// A SignalR client over a raw WebSocket: frames are compared byte for byte.
struct Client {
    ws: Ws,
    format: Format,
    buf: BytesMut,
    splitter: FrameSplitter,
}

impl Client {
    /// Negotiates (v1), opens the WebSocket and sends the handshake request; the response
    /// is read by [`Self::handshake_result`]. Returns the connection id.
    async fn start(
        server: &TestServer,
        hub: &str,
        token: &str,
        format: Format,
    ) -> (Client, String) {
        let negotiated = switchyard_client::negotiate(&server.client_url(hub), token, 1)
            .await
            .expect("negotiate");
        let client = Self::start_url(
            &server.ws_url(hub, Some(&negotiated.id_value)),
            token,
            format,
        )
        .await;
        (client, negotiated.connection_id)
    }

    /// Without negotiate: `ws://…/client/?hub=` with the token as a bearer header, the way
    /// Python clients connect after a redirect.
    async fn start_id_less(server: &TestServer, hub: &str, token: &str, format: Format) -> Client {
        Self::start_url(&server.ws_url(hub, None), token, format).await
    }

    async fn start_url(url: &str, token: &str, format: Format) -> Client {
        Self::start_url_as(url, token, format, format.name()).await
    }

    /// Like [`Self::start_url`] with the handshake naming `protocol`, framed as `format`.
    async fn start_url_as(url: &str, token: &str, format: Format, protocol: &str) -> Client {
        let mut request = url.into_client_request().unwrap();
        request
            .headers_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
        let (ws, _) = tokio_tungstenite::connect_async_with_config(request, None, NO_DELAY)
            .await
            .expect("client upgrade");
        let mut client = Client {
            ws,
            format,
            buf: BytesMut::new(),
            splitter: FrameSplitter::new(format, usize::MAX),
        };
        client
            .send_raw(&handshake::encode_request(protocol, 1))
            .await;
        client
    }

    async fn send_raw(&mut self, bytes: &[u8]) {
        let message = match self.format {
            Format::Json => WsMessage::Text(String::from_utf8(bytes.to_vec()).unwrap().into()),
            Format::MessagePack => WsMessage::Binary(Bytes::copy_from_slice(bytes)),
        };
        self.ws.send(message).await.expect("client write");
    }

    /// Reads one more WebSocket message into the buffer; false once closed.
    async fn read_more(&mut self) -> bool {
        loop {
            match self.ws.next().await {
                Some(Ok(WsMessage::Text(text))) => {
                    self.buf.extend_from_slice(text.as_bytes());
                    return true;
                }
                Some(Ok(WsMessage::Binary(data))) => {
                    self.buf.extend_from_slice(&data);
                    return true;
                }
                Some(Ok(WsMessage::Close(_))) | None | Some(Err(_)) => return false,
                Some(Ok(_)) => {}
            }
        }
    }

    /// The handshake response: `Ok` or the error text.
    async fn handshake_result(&mut self) -> Result<(), String> {
        within("the client's handshake response", WAIT, async {
            loop {
                if let Some((error, consumed)) =
                    handshake::parse_response(&self.buf).expect("a handshake response")
                {
                    let _ = self.buf.split_to(consumed);
                    return match error {
                        Some(error) => Err(error),
                        None => Ok(()),
                    };
                }
                assert!(
                    self.read_more().await,
                    "closed before the handshake response"
                );
            }
        })
        .await
    }

    /// The next framed message that is not a ping; `None` once closed.
    async fn next_frame(&mut self) -> Option<Bytes> {
        loop {
            if let Some(frame) = self.splitter.next_frame(&mut self.buf).expect("framing") {
                if frame.framed == ping(self.format) {
                    continue;
                }
                return Some(frame.framed);
            }
            if !self.read_more().await {
                return None;
            }
        }
    }

    /// Receives exactly these bytes as the next message.
    async fn expect(&mut self, expected: &Msg) {
        let frame = within("a message to the client", WAIT, self.next_frame())
            .await
            .expect("the client was closed");
        assert_eq!(
            frame,
            expected.bytes(self.format),
            "{:?} client got {:?}",
            self.format,
            String::from_utf8_lossy(&frame)
        );
    }

    /// The next message, decoded.
    async fn next_message(&mut self) -> HubMessage<Value> {
        let frame = within("a message to the client", WAIT, self.next_frame())
            .await
            .expect("the client was closed");
        decode_frame(self.format, &frame)
    }

    /// Reads until the connection ends; returns the Close message if one came.
    async fn until_closed(&mut self) -> Option<HubMessage<Value>> {
        within("the client to be closed", WAIT, async {
            let mut close = None;
            while let Some(frame) = self.next_frame().await {
                let message = decode_frame(self.format, &frame);
                if matches!(message, HubMessage::Close { .. }) {
                    close = Some(message);
                }
            }
            close
        })
        .await
    }

    /// Closes the WebSocket and waits for the service's close.
    async fn close(mut self) {
        let _ = self.ws.close(None).await;
        let _ = within("the client's close", WAIT, async {
            while let Some(Ok(_)) = self.ws.next().await {}
        })
        .await;
    }
}

fn decode_frame(format: Format, framed: &[u8]) -> HubMessage<Value> {
    let mut buf = BytesMut::from(framed);
    let frame = FrameSplitter::new(format, usize::MAX)
        .next_frame(&mut buf)
        .unwrap()
        .unwrap();
    switchyard_client::decode(format, frame.body()).expect("a hub message")
}

/// One hub message encoded in both protocols, as the SDK puts it in a payloads map.
#[derive(Clone)]
struct Msg {
    json: Bytes,
    msgpack: Bytes,
}

impl Msg {
    fn invocation(target: &str, arguments: &[Value]) -> Msg {
        Msg {
            json: encode_invocation(Format::Json, target, arguments),
            msgpack: encode_invocation(Format::MessagePack, target, arguments),
        }
    }

    fn bytes(&self, format: Format) -> Bytes {
        match format {
            Format::Json => self.json.clone(),
            Format::MessagePack => self.msgpack.clone(),
        }
    }

    fn payloads(&self) -> Payloads {
        vec![
            ("json".to_string(), self.json.clone()),
            ("messagepack".to_string(), self.msgpack.clone()),
        ]
    }
}

/// A client of `hub` accepted by `app` the way the SDK does it: OpenConnection, then the
/// client's handshake request as ConnectionData, answered with `{}\x1e`.
async fn connect_client(
    server: &TestServer,
    app: &mut AppServer,
    hub: &str,
    token: &str,
    format: Format,
) -> (Client, String) {
    let (mut client, id) = Client::start(server, hub, token, format).await;
    let open = app.open_connection().await;
    assert_eq!(open.connection_id, id);
    let request = app.connection_data(&id).await;
    assert_eq!(request, handshake::encode_request(format.name(), 1));
    app.send_to(&id, handshake::RESPONSE_OK).await;
    client.handshake_result().await.expect("client handshake");
    (client, id)
}

/// A client token pinned to app server `server_id` (`asrs.s.ssticky=Required`).
fn sticky_token(server: &TestServer, hub: &str, user: &str, server_id: &str) -> String {
    server.token_with(
        hub,
        &[
            ("asrs.s.uid", user),
            ("asrs.s.sn", server_id),
            ("asrs.s.ssticky", "Required"),
        ],
    )
}

fn header<'a>(headers: &'a [(String, Vec<String>)], name: &str) -> Option<&'a [String]> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_slice())
}

fn default_mode() -> Config {
    Config {
        mode: ServiceMode::Default,
        ..Config::default()
    }
}

// ---------------------------------------------------------------------------------------
// 1. Auth
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn upgrade_requires_a_valid_server_token() {
    let server = TestServer::start().await;
    let key = server.key();
    let hub = "chat";

    assert_eq!(
        refused_status(dial(&server, hub, None, Some("s1")).await),
        401
    );

    let client_audience = TokenBuilder::new(server.client_url(hub))
        .claim("nameid", "s1")
        .sign(&key, now());
    assert_eq!(
        refused_status(dial(&server, hub, Some(&client_audience), Some("s1")).await),
        401
    );

    let expired = TokenBuilder::new(server.server_audience(hub))
        .claim("nameid", "s1")
        .lifetime(Duration::from_secs(3600))
        .sign(&key, now() - 7200);
    assert_eq!(
        refused_status(dial(&server, hub, Some(&expired), Some("s1")).await),
        401
    );

    let other_hub = server.server_token("other", "s1");
    assert_eq!(
        refused_status(dial(&server, hub, Some(&other_hub), Some("s1")).await),
        401
    );

    let wrong_key = TokenBuilder::new(server.server_audience(hub))
        .claim("nameid", "s1")
        .sign("not-the-key-not-the-key-not-the-key-0123", now());
    assert_eq!(
        refused_status(dial(&server, hub, Some(&wrong_key), Some("s1")).await),
        401
    );

    // The SDK's audience has no port; one with the port is accepted too.
    let without_port = server.server_token(hub, "s1");
    let ws = dial(&server, hub, Some(&without_port), Some("s1"))
        .await
        .expect("audience without port");
    let mut app = AppServer::new(ws);
    assert_eq!(app.handshake(handshake_request(0)).await.error_message, "");

    let with_port = TokenBuilder::new(format!("http://{}/server/?hub={hub}", server.addr))
        .claim("nameid", "s2")
        .sign(&key, now());
    let ws = dial(&server, hub, Some(&with_port), Some("s2"))
        .await
        .expect("audience with port");
    let mut app = AppServer::new(ws);
    assert_eq!(app.handshake(handshake_request(0)).await.error_message, "");
    eventually("both connections registered", WAIT, || {
        server.node.server_connection_count() == 2
    })
    .await;
}

#[tokio::test]
async fn the_server_id_is_the_header_else_the_token_nameid() {
    let server = TestServer::start().await;
    let hub = "chat";
    // Header wins over the token's nameid.
    let token = server.server_token(hub, "from-token");
    let mut first = AppServer::new(
        dial(&server, hub, Some(&token), Some("from-header"))
            .await
            .unwrap(),
    );
    assert_eq!(
        first.handshake(handshake_request(0)).await.error_message,
        ""
    );
    // No header: the token's nameid.
    let token = server.server_token(hub, "only-token");
    let mut second = AppServer::new(dial(&server, hub, Some(&token), None).await.unwrap());
    assert_eq!(
        second.handshake(handshake_request(0)).await.error_message,
        ""
    );

    first.send(Ping::new(&[("servers", "")])).await;
    let reply = first.ping("servers").await;
    let list = reply.get("servers").unwrap();
    let (_ticks, ids) = list.split_once(':').expect("<ticks>:<ids>");
    let mut ids: Vec<&str> = ids.split(';').collect();
    ids.sort();
    assert_eq!(ids, ["from-header", "only-token"]);
}

// ---------------------------------------------------------------------------------------
// 2. Handshake
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn handshake_is_accepted_with_an_empty_error_and_echoes_the_cid() {
    let server = TestServer::start().await;
    let token = server.server_token("chat", "s1");
    let url = format!("{}&cid=my-cid-1", server.server_ws_url("chat"));
    let mut app = AppServer::new(dial_url(&url, Some(&token), Some("s1")).await.unwrap());
    let response = app.handshake(handshake_request(1)).await;
    assert_eq!(response.error_message, "");
    assert!(response.is_success());
    assert_eq!(response.connection_id.as_deref(), Some("my-cid-1"));
    app.echo_round_trip().await;
}

#[tokio::test]
async fn handshake_and_messages_split_at_odd_points_and_batched() {
    let server = TestServer::start().await;
    let token = server.server_token("chat", "s1");
    let mut app = AppServer::new(
        dial(&server, "chat", Some(&token), Some("s1"))
            .await
            .unwrap(),
    );
    // The handshake in three frames, the last also carrying an echo and half of another.
    let mut stream = encoded(&handshake_request(0).into()).to_vec();
    stream.extend_from_slice(&encoded(&Ping::new(&[("echo", "one")]).into()));
    let second = encoded(&Ping::new(&[("echo", "two")]).into());
    stream.extend_from_slice(&second[..3]);
    app.send_bytes(&stream[..1]).await;
    app.send_bytes(&stream[1..4]).await;
    app.send_bytes(&stream[4..]).await;
    match app.next().await {
        ServiceMessage::HandshakeResponse(r) => assert_eq!(r.error_message, ""),
        other => panic!("expected the handshake response, got {other:?}"),
    }
    assert_eq!(app.ping("echo").await.get("echo"), Some("one"));
    // The rest of the second echo, one byte per frame.
    for byte in &second[3..] {
        app.send_bytes(&[*byte]).await;
    }
    assert_eq!(app.ping("echo").await.get("echo"), Some("two"));
}

/// Sends `first` (raw bytes) as the first frame and expects a refusing HandshakeResponse
/// containing `error_part`, then the close.
async fn expect_handshake_refused(server: &TestServer, first: &[u8], error_part: &str) {
    let token = server.server_token("chat", "s1");
    let mut app = AppServer::new(
        dial(server, "chat", Some(&token), Some("s1"))
            .await
            .unwrap(),
    );
    if !first.is_empty() {
        app.send_bytes(first).await;
    }
    let seen = app.until_closed().await;
    match seen.as_slice() {
        [ServiceMessage::HandshakeResponse(r)] => {
            assert!(
                r.error_message.contains(error_part),
                "error {:?} should mention {error_part:?}",
                r.error_message
            );
        }
        other => panic!("expected one refusing HandshakeResponse, got {other:?}"),
    }
}

#[tokio::test]
async fn handshake_with_version_2_is_refused() {
    let server = TestServer::start().await;
    let mut request = handshake_request(0);
    request.version = 2;
    expect_handshake_refused(&server, &encoded(&request.into()), "version 2").await;
    assert_eq!(server.node.server_connection_count(), 0);
}

#[tokio::test]
async fn handshake_with_an_unknown_connection_type_is_refused() {
    let server = TestServer::start().await;
    let mut request = handshake_request(0);
    request.connection_type = 7;
    expect_handshake_refused(&server, &encoded(&request.into()), "connection type 7").await;
}

#[tokio::test]
async fn a_first_message_that_is_not_a_handshake_is_refused() {
    let server = TestServer::start().await;
    let ping = encoded(&Ping::new(&[("echo", "x")]).into());
    expect_handshake_refused(&server, &ping, "handshake").await;
}

#[tokio::test]
async fn no_handshake_in_time_is_refused() {
    let mut config = Config::default();
    config.timeouts.server_handshake_timeout = Duration::from_millis(300);
    let server = TestServer::start_with(config).await;
    let started = tokio::time::Instant::now();
    expect_handshake_refused(&server, &[], "handshake").await;
    assert!(started.elapsed() >= Duration::from_millis(250));
}

#[tokio::test]
async fn serverless_mode_refuses_app_servers() {
    let server = TestServer::start_with(Config {
        mode: ServiceMode::Serverless,
        ..Config::default()
    })
    .await;
    expect_handshake_refused(
        &server,
        &encoded(&handshake_request(0).into()),
        "serverless",
    )
    .await;
    assert_eq!(server.node.server_connection_count(), 0);
}

/// `garbage` after the handshake: that connection gets a ServiceError and is closed (its
/// clients with it); another connection of the hub and its clients keep working.
async fn garbage_closes_only_that_connection(garbage: &[u8]) {
    let server = TestServer::start_with(default_mode()).await;
    let hub = "chat";
    let mut bad = AppServer::open(&server, hub, "bad").await;
    let mut good = AppServer::open(&server, hub, "good").await;
    let (mut bad_client, _) = connect_client(
        &server,
        &mut bad,
        hub,
        &sticky_token(&server, hub, "u-bad", "bad"),
        Format::Json,
    )
    .await;
    let (mut good_client, good_id) = connect_client(
        &server,
        &mut good,
        hub,
        &sticky_token(&server, hub, "u-good", "good"),
        Format::MessagePack,
    )
    .await;

    bad.send_bytes(garbage).await;
    let seen = bad.until_closed().await;
    assert!(
        matches!(seen.last(), Some(ServiceMessage::ServiceError(e)) if !e.error_message.is_empty()),
        "expected a ServiceError before the close, got {seen:?}"
    );
    assert!(bad_client.until_closed().await.is_some(), "Close message");

    // The other server connection and its client are untouched.
    good.echo_round_trip().await;
    let hello = Msg::invocation("hello", &[json!("still here")]);
    good.send(MultiConnectionData {
        connection_list: vec![good_id.clone()],
        payloads: hello.payloads(),
        ext: Extensions::default(),
    })
    .await;
    good_client.expect(&hello).await;
    let from_client = Msg::invocation("echo", &[json!(1)]);
    good_client.send_raw(&from_client.msgpack).await;
    assert_eq!(good.connection_data(&good_id).await, from_client.msgpack);
    assert_eq!(server.node.server_connection_count(), 1);
}

#[tokio::test]
async fn garbage_six_byte_varint_closes_only_that_connection() {
    garbage_closes_only_that_connection(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x01]).await;
}

#[tokio::test]
async fn garbage_invalid_msgpack_body_closes_only_that_connection() {
    // A valid prefix (3 bytes) with a body that is not a valid message: 0xc1 is never used.
    garbage_closes_only_that_connection(&[0x03, 0x92, 0x06, 0xc1]).await;
}

#[tokio::test]
async fn garbage_non_array_body_closes_the_connection() {
    let server = TestServer::start().await;
    let mut app = AppServer::open(&server, "chat", "s1").await;
    app.send_bytes(&[0x02, 0xa1, b'x']).await;
    let seen = app.until_closed().await;
    assert!(
        matches!(seen.last(), Some(ServiceMessage::ServiceError(_))),
        "got {seen:?}"
    );
}

// ---------------------------------------------------------------------------------------
// 3. Pings
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn pings_echo_status_and_shutdown() {
    let server = TestServer::start().await;
    let mut app = AppServer::open(&server, "chat", "s1").await;

    let echo = Ping::new(&[("echo", "638400000000000000")]);
    app.send(echo.clone()).await;
    match app.next().await {
        ServiceMessage::Ping(p) => assert_eq!(p, echo),
        other => panic!("expected the echo, got {other:?}"),
    }

    app.send(Ping::new(&[("status", "1")])).await;
    match app.next().await {
        ServiceMessage::Ping(p) => assert_eq!(p.values, ["status", "1"]),
        other => panic!("expected the status answer, got {other:?}"),
    }

    // The SDK's real keep-alive carries client counts; it needs no answer.
    app.send(Ping::new(&[("#clientInHub", "0"), ("#client", "0")]))
        .await;
    app.send(Ping::keep_alive()).await;
    app.assert_quiet().await;

    app.send(Ping::new(&[("shutdown", "fin:0")])).await;
    match app.next().await {
        ServiceMessage::Ping(p) => assert_eq!(p.values, ["shutdown", "finack"]),
        other => panic!("expected finack, got {other:?}"),
    }
    app.echo_round_trip().await;
}

#[tokio::test]
async fn keep_alives_are_sent_when_quiet() {
    let mut config = Config::default();
    config.timeouts.server_keep_alive_interval = Duration::from_millis(200);
    let server = TestServer::start_with(config).await;
    let mut app = AppServer::open(&server, "chat", "s1").await;
    app.keep_alives = true;
    for _ in 0..3 {
        match app.next().await {
            ServiceMessage::Ping(p) => assert!(p.is_keep_alive(), "got {p:?}"),
            other => panic!("expected a keep-alive, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_silent_app_server_is_closed_and_a_chatty_one_is_not() {
    let mut config = Config::default();
    config.timeouts.server_keep_alive_interval = Duration::from_millis(100);
    config.timeouts.server_timeout = Duration::from_millis(500);
    let server = TestServer::start_with(config).await;
    let mut silent = AppServer::open(&server, "chat", "silent").await;
    let mut chatty = AppServer::open(&server, "chat", "chatty").await;

    /// Sends a keep-alive every 100 ms for `total`.
    async fn keep_talking(app: &mut AppServer, total: Duration) {
        let end = tokio::time::Instant::now() + total;
        while tokio::time::Instant::now() < end {
            app.send(Ping::keep_alive()).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    let started = tokio::time::Instant::now();
    let (seen, ()) = tokio::join!(silent.until_closed(), async {
        // Longer than the timeout plus the silent one's closing.
        keep_talking(&mut chatty, Duration::from_millis(1500)).await;
    });
    assert!(started.elapsed() >= Duration::from_millis(450));
    match seen.last() {
        Some(ServiceMessage::ServiceError(e)) => {
            assert!(e.error_message.contains("500ms"), "{:?}", e.error_message)
        }
        other => panic!("expected a ServiceError, got {other:?}"),
    }
    chatty.echo_round_trip().await;
    assert_eq!(server.node.server_connection_count(), 1);
}

// ---------------------------------------------------------------------------------------
// 4. Client lifecycle
// ---------------------------------------------------------------------------------------

async fn client_lifecycle(format: Format) {
    let server = TestServer::start_with(default_mode()).await;
    let hub = "chat";
    let mut app = AppServer::open(&server, hub, "s1").await;
    let token = server.token(hub, Some("alice"));
    let (mut client, id) = Client::start(&server, hub, &token, format).await;

    let open = app.open_connection().await;
    assert_eq!(open.connection_id, id);
    assert!(
        open.claims
            .iter()
            .any(|(t, v)| t == "asrs.s.uid" && v == "alice"),
        "claims: {:?}",
        open.claims
    );
    assert_eq!(open.ext.protocol.as_deref(), Some(format.name()));
    let query = open.query_string.as_deref().expect("query string");
    assert!(query.contains("hub=chat"), "query {query:?}");
    assert!(!query.contains("access_token"), "query {query:?}");
    assert!(header(&open.headers, "authorization").is_none());
    // The SDK takes the client's address from the first X-Forwarded-For entry.
    assert_eq!(
        header(&open.headers, "X-Forwarded-For"),
        Some(&["127.0.0.1".to_string()][..])
    );

    let request = app.connection_data(&id).await;
    assert_eq!(request, handshake::encode_request(format.name(), 1));
    app.send_to(&id, handshake::RESPONSE_OK).await;
    client.handshake_result().await.expect("handshake");

    // Client → app server: the exact bytes.
    let invocation = Msg::invocation("send", &[json!("hi"), json!({"n": 1})]);
    client.send_raw(&invocation.bytes(format)).await;
    assert_eq!(app.connection_data(&id).await, invocation.bytes(format));

    // App server → client: two messages over two ConnectionData split at odd bytes.
    let first = Msg::invocation("first", &[json!("a".repeat(40))]).bytes(format);
    let second = Msg::invocation("second", &[json!(2)]).bytes(format);
    let mut both = first.to_vec();
    both.extend_from_slice(&second);
    for split in [1, 5, first.len() - 1, first.len() + 1, both.len() - 1] {
        app.send_to(&id, &both[..split]).await;
        app.send_to(&id, &both[split..]).await;
        let got_first = within("first", WAIT, client.next_frame()).await.unwrap();
        assert_eq!(got_first, first, "split at {split}");
        let got_second = within("second", WAIT, client.next_frame()).await.unwrap();
        assert_eq!(got_second, second, "split at {split}");
    }

    // The client leaves: the app server is told.
    client.close().await;
    let close = app.close_connection(&id).await;
    assert_eq!(close.error_message, "");
    eventually("client gone", WAIT, || {
        server.node.client_connection_count() == 0
    })
    .await;
}

#[tokio::test]
async fn client_lifecycle_json() {
    client_lifecycle(Format::Json).await;
}

#[tokio::test]
async fn client_lifecycle_messagepack() {
    client_lifecycle(Format::MessagePack).await;
}

#[tokio::test]
async fn app_server_close_connection_closes_the_client() {
    let server = TestServer::start().await;
    let hub = "chat";
    let mut app = AppServer::open(&server, hub, "s1").await;
    for format in [Format::Json, Format::MessagePack] {
        let token = server.token(hub, Some("bob"));
        let (mut client, id) = connect_client(&server, &mut app, hub, &token, format).await;
        app.send(CloseConnection {
            connection_id: id.clone(),
            error_message: "bye".into(),
            headers: Vec::new(),
            ext: Extensions::default(),
        })
        .await;
        match client.until_closed().await {
            Some(HubMessage::Close { error, .. }) => {
                assert!(error.unwrap_or_default().contains("bye"))
            }
            other => panic!("expected a Close message, got {other:?}"),
        }
    }
    eventually("clients gone", WAIT, || {
        server.node.client_connection_count() == 0
    })
    .await;
}

#[tokio::test]
async fn default_mode_without_app_server_refuses_the_client_handshake() {
    let server = TestServer::start_with(default_mode()).await;
    let token = server.token("chat", Some("alice"));
    for format in [Format::Json, Format::MessagePack] {
        let (mut client, _) = Client::start(&server, "chat", &token, format).await;
        let error = client.handshake_result().await.expect_err("refused");
        assert!(
            error.contains("app servers are not connected"),
            "error {error:?}"
        );
        client.until_closed().await;
    }
}

#[tokio::test]
async fn default_mode_app_server_gone_refuses_new_clients() {
    let server = TestServer::start_with(default_mode()).await;
    let app = AppServer::open(&server, "chat", "s1").await;
    drop(app);
    eventually("app server gone", WAIT, || {
        server.node.server_connection_count() == 0
    })
    .await;
    let token = server.token("chat", None);
    let (mut client, _) = Client::start(&server, "chat", &token, Format::Json).await;
    let error = client.handshake_result().await.expect_err("refused");
    assert!(error.contains("app servers are not connected"), "{error:?}");
}

#[tokio::test]
async fn auto_mode_hub_without_app_server_stays_serverless() {
    let server = TestServer::start().await;
    let mut app = AppServer::open(&server, "withserver", "s1").await;
    let token = server.token("alone", Some("alice"));
    let (mut client, _) = Client::start(&server, "alone", &token, Format::Json).await;
    client
        .handshake_result()
        .await
        .expect("answered by the service");
    // The service serves it: a broadcast through the node arrives.
    eventually("joined", WAIT, || {
        server.node.client_connection_count() == 1
    })
    .await;
    server.broadcast("alone", "news", &[json!(1)]);
    match client.next_message().await {
        HubMessage::Invocation { target, .. } => assert_eq!(target, "news"),
        other => panic!("expected an invocation, got {other:?}"),
    }
    // And the app server of the other hub heard nothing of it.
    app.assert_quiet().await;

    // A client of the hub that has an app server goes to it.
    let token = server.token("withserver", None);
    let (_client, _) = connect_client(&server, &mut app, "withserver", &token, Format::Json).await;
}

#[tokio::test]
async fn id_less_websocket_works_in_default_mode() {
    let server = TestServer::start_with(default_mode()).await;
    let hub = "chat";
    let mut app = AppServer::open(&server, hub, "s1").await;
    let token = server.token(hub, Some("py"));
    let mut client = Client::start_id_less(&server, hub, &token, Format::Json).await;
    let open = app.open_connection().await;
    let id = open.connection_id.clone();
    assert!(open
        .claims
        .iter()
        .any(|(t, v)| t == "asrs.s.uid" && v == "py"));
    assert_eq!(
        app.connection_data(&id).await,
        handshake::encode_request("json", 1)
    );
    app.send_to(&id, handshake::RESPONSE_OK).await;
    client.handshake_result().await.expect("handshake");
    let up = Msg::invocation("up", &[json!(1)]);
    client.send_raw(&up.json).await;
    assert_eq!(app.connection_data(&id).await, up.json);
    let down = Msg::invocation("down", &[json!(2)]);
    app.send_to(&id, &down.json).await;
    client.expect(&down).await;
}

#[tokio::test]
async fn app_server_handshake_error_reaches_the_client() {
    let server = TestServer::start().await;
    let hub = "chat";
    let mut app = AppServer::open(&server, hub, "s1").await;
    let token = server.token(hub, None);
    let (mut client, id) = Client::start(&server, hub, &token, Format::Json).await;
    app.open_connection().await;
    app.connection_data(&id).await;
    app.send_to(&id, &handshake::encode_error_response("nope from the app"))
        .await;
    assert_eq!(
        client.handshake_result().await,
        Err("nope from the app".to_string())
    );
}

// ---------------------------------------------------------------------------------------
// 5. Routing with acks
// ---------------------------------------------------------------------------------------

/// An app server with three clients: JSON user u1, MessagePack user u2, JSON user u3.
struct Three {
    server: TestServer,
    app: AppServer,
    clients: Vec<Client>,
    ids: Vec<String>,
}

async fn three() -> Three {
    let server = TestServer::start_with(default_mode()).await;
    let mut app = AppServer::open(&server, "chat", "s1").await;
    let mut clients = Vec::new();
    let mut ids = Vec::new();
    for (user, format) in [
        ("u1", Format::Json),
        ("u2", Format::MessagePack),
        ("u3", Format::Json),
    ] {
        let token = server.token("chat", Some(user));
        let (client, id) = connect_client(&server, &mut app, "chat", &token, format).await;
        clients.push(client);
        ids.push(id);
    }
    Three {
        server,
        app,
        clients,
        ids,
    }
}

impl Three {
    /// A marker broadcast to everyone: a client whose next message is the marker got nothing
    /// in between.
    async fn marker(&mut self, n: i64) -> Msg {
        let marker = Msg::invocation("marker", &[json!(n)]);
        self.app
            .send(BroadcastData {
                excluded_list: Vec::new(),
                payloads: marker.payloads(),
                ext: Extensions::default(),
            })
            .await;
        marker
    }

    /// Each client's next message: `got[i]` true = `msg`, false = the marker.
    async fn expect_delivery(&mut self, msg: &Msg, got: [bool; 3], n: i64) {
        let marker = self.marker(n).await;
        for (i, client) in self.clients.iter_mut().enumerate() {
            if got[i] {
                client.expect(msg).await;
            }
            client.expect(&marker).await;
        }
    }

    fn id(&self, i: usize) -> String {
        self.ids[i].clone()
    }
}

fn ext() -> Extensions {
    Extensions::default()
}

#[tokio::test]
async fn multi_connection_data_gives_each_client_its_own_protocol() {
    let mut t = three().await;
    let msg = Msg::invocation("m", &[json!("x"), json!([1, 2, 3]), json!({"k": null})]);
    t.app
        .send(MultiConnectionData {
            connection_list: vec![t.id(0), t.id(1)],
            payloads: msg.payloads(),
            ext: ext(),
        })
        .await;
    t.expect_delivery(&msg, [true, true, false], 1).await;
    // Payload keys are matched case-insensitively.
    let upper = Msg::invocation("upper", &[json!(1)]);
    t.app
        .send(MultiConnectionData {
            connection_list: vec![t.id(1), t.id(2)],
            payloads: vec![
                ("JSON".into(), upper.json.clone()),
                ("MessagePack".into(), upper.msgpack.clone()),
            ],
            ext: ext(),
        })
        .await;
    t.expect_delivery(&upper, [false, true, true], 2).await;
}

#[tokio::test]
async fn user_data_and_multi_user_data() {
    let mut t = three().await;
    let msg = Msg::invocation("user", &[json!(1)]);
    t.app
        .send(UserData {
            user_id: "u2".into(),
            payloads: msg.payloads(),
            ext: ext(),
        })
        .await;
    t.expect_delivery(&msg, [false, true, false], 1).await;
    let msg = Msg::invocation("users", &[json!(2)]);
    t.app
        .send(MultiUserData {
            user_list: vec!["u1".into(), "u3".into(), "nobody".into()],
            payloads: msg.payloads(),
            ext: ext(),
        })
        .await;
    t.expect_delivery(&msg, [true, false, true], 2).await;
}

#[tokio::test]
async fn broadcast_with_excluded_connections() {
    let mut t = three().await;
    let msg = Msg::invocation("all", &[json!("everyone but u2")]);
    t.app
        .send(BroadcastData {
            excluded_list: vec![t.id(1)],
            payloads: msg.payloads(),
            ext: ext(),
        })
        .await;
    t.expect_delivery(&msg, [true, false, true], 1).await;
}

#[tokio::test]
async fn groups_join_leave_and_group_broadcast_with_exclusions() {
    let mut t = three().await;
    for (i, ack_id) in [(0, 1), (1, 2), (2, 3)] {
        let status = t
            .app
            .acked(
                JoinGroupWithAck {
                    connection_id: t.id(i),
                    group_name: "g".into(),
                    ack_id,
                    ext: ext(),
                },
                ack_id,
            )
            .await;
        assert_eq!(status, OK);
    }
    let unknown = t
        .app
        .acked(
            JoinGroupWithAck {
                connection_id: "no-such-connection".into(),
                group_name: "g".into(),
                ack_id: 4,
                ext: ext(),
            },
            4,
        )
        .await;
    assert_eq!(unknown, NOT_FOUND);

    let msg = Msg::invocation("group", &[json!("g")]);
    t.app
        .send(GroupBroadcastData {
            group_name: "g".into(),
            excluded_list: Vec::new(),
            payloads: msg.payloads(),
            ext: ext(),
            excluded_user_list: Vec::new(),
            caller_user_id: None,
        })
        .await;
    t.expect_delivery(&msg, [true, true, true], 1).await;

    let msg = Msg::invocation("group", &[json!("only u3")]);
    t.app
        .send(GroupBroadcastData {
            group_name: "g".into(),
            excluded_list: vec![t.id(0)],
            payloads: msg.payloads(),
            ext: ext(),
            excluded_user_list: vec!["u2".into()],
            caller_user_id: Some("u1".into()),
        })
        .await;
    t.expect_delivery(&msg, [false, false, true], 2).await;

    let status = t
        .app
        .acked(
            LeaveGroupWithAck {
                connection_id: t.id(2),
                group_name: Some("g".into()),
                ack_id: 5,
                ext: ext(),
            },
            5,
        )
        .await;
    assert_eq!(status, OK);
    let status = t
        .app
        .acked(
            LeaveGroupWithAck {
                connection_id: "no-such-connection".into(),
                group_name: Some("g".into()),
                ack_id: 6,
                ext: ext(),
            },
            6,
        )
        .await;
    assert_eq!(status, NOT_FOUND);
    let msg = Msg::invocation("group", &[json!("u1 and u2")]);
    t.app
        .send(GroupBroadcastData {
            group_name: "g".into(),
            excluded_list: Vec::new(),
            payloads: msg.payloads(),
            ext: ext(),
            excluded_user_list: Vec::new(),
            caller_user_id: None,
        })
        .await;
    t.expect_delivery(&msg, [true, true, false], 3).await;
}

#[tokio::test]
async fn multi_group_broadcast_and_leave_all_groups() {
    let mut t = three().await;
    let joins = [(0, "g1"), (0, "g2"), (1, "g2"), (2, "g3")];
    for (n, (i, group)) in joins.iter().enumerate() {
        let ack_id = 10 + n as i32;
        let status = t
            .app
            .acked(
                JoinGroupWithAck {
                    connection_id: t.id(*i),
                    group_name: group.to_string(),
                    ack_id,
                    ext: ext(),
                },
                ack_id,
            )
            .await;
        assert_eq!(status, OK);
    }
    let msg = Msg::invocation("groups", &[json!(1)]);
    t.app
        .send(MultiGroupBroadcastData {
            group_list: vec!["g2".into(), "nothing".into()],
            payloads: msg.payloads(),
            ext: ext(),
        })
        .await;
    t.expect_delivery(&msg, [true, true, false], 1).await;

    // LeaveGroupWithAck with a nil group: every group.
    let status = t
        .app
        .acked(
            LeaveGroupWithAck {
                connection_id: t.id(0),
                group_name: None,
                ack_id: 20,
                ext: ext(),
            },
            20,
        )
        .await;
    assert_eq!(status, OK);
    for (group, ack_id, expected) in [
        ("g1", 21, NOT_FOUND),
        ("g2", 22, OK),
        ("g3", 23, OK),
        ("never", 24, NOT_FOUND),
    ] {
        let status = t
            .app
            .acked(
                CheckGroupExistenceWithAck {
                    group_name: group.into(),
                    ack_id,
                    ext: ext(),
                },
                ack_id,
            )
            .await;
        assert_eq!(status, expected, "group {group}");
    }
    let msg = Msg::invocation("groups", &[json!(2)]);
    t.app
        .send(MultiGroupBroadcastData {
            group_list: vec!["g1".into(), "g2".into(), "g3".into()],
            payloads: msg.payloads(),
            ext: ext(),
        })
        .await;
    t.expect_delivery(&msg, [false, true, true], 2).await;
}

#[tokio::test]
async fn user_groups_with_ttl_and_checks() {
    let mut t = three().await;
    let mut ttl = ext();
    ttl.ttl = Some(60);
    let status = t
        .app
        .acked(
            UserJoinGroupWithAck {
                user_id: "u1".into(),
                group_name: "ug".into(),
                ack_id: 1,
                ext: ttl,
            },
            1,
        )
        .await;
    assert_eq!(status, OK);
    let check = |user: &str, ack_id| CheckUserInGroupWithAck {
        user_id: user.into(),
        group_name: "ug".into(),
        ack_id,
        ext: ext(),
    };
    assert_eq!(t.app.acked(check("u1", 2), 2).await, OK);
    assert_eq!(t.app.acked(check("u2", 3), 3).await, NOT_FOUND);
    let msg = Msg::invocation("ug", &[json!(1)]);
    t.app
        .send(GroupBroadcastData {
            group_name: "ug".into(),
            excluded_list: Vec::new(),
            payloads: msg.payloads(),
            ext: ext(),
            excluded_user_list: Vec::new(),
            caller_user_id: None,
        })
        .await;
    t.expect_delivery(&msg, [true, false, false], 1).await;

    let status = t
        .app
        .acked(
            UserLeaveGroupWithAck {
                user_id: "u1".into(),
                group_name: Some("ug".into()),
                ack_id: 4,
                ext: ext(),
            },
            4,
        )
        .await;
    assert_eq!(status, OK);
    assert_eq!(t.app.acked(check("u1", 5), 5).await, NOT_FOUND);

    // Nil group: leave every group.
    for (group, ack_id) in [("a", 6), ("b", 7)] {
        let status = t
            .app
            .acked(
                UserJoinGroupWithAck {
                    user_id: "u3".into(),
                    group_name: group.into(),
                    ack_id,
                    ext: ext(),
                },
                ack_id,
            )
            .await;
        assert_eq!(status, OK);
    }
    let status = t
        .app
        .acked(
            UserLeaveGroupWithAck {
                user_id: "u3".into(),
                group_name: None,
                ack_id: 8,
                ext: ext(),
            },
            8,
        )
        .await;
    assert_eq!(status, OK);
    for (group, ack_id) in [("a", 9), ("b", 10)] {
        let status = t
            .app
            .acked(
                CheckUserInGroupWithAck {
                    user_id: "u3".into(),
                    group_name: group.into(),
                    ack_id,
                    ext: ext(),
                },
                ack_id,
            )
            .await;
        assert_eq!(status, NOT_FOUND, "group {group}");
    }

    // A membership with a 1 s ttl ends by itself.
    let mut short = ext();
    short.ttl = Some(1);
    let status = t
        .app
        .acked(
            UserJoinGroupWithAck {
                user_id: "u2".into(),
                group_name: "ug".into(),
                ack_id: 11,
                ext: short,
            },
            11,
        )
        .await;
    assert_eq!(status, OK);
    assert_eq!(t.app.acked(check("u2", 12), 12).await, OK);
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut ack_id = 13;
    loop {
        if t.app.acked(check("u2", ack_id), ack_id).await == NOT_FOUND {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the ttl membership never ended"
        );
        ack_id += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn existence_checks() {
    let mut t = three().await;
    let status = t
        .app
        .acked(
            JoinGroupWithAck {
                connection_id: t.id(0),
                group_name: "exists".into(),
                ack_id: 1,
                ext: ext(),
            },
            1,
        )
        .await;
    assert_eq!(status, OK);
    let cases: Vec<(ServiceMessage, i32, i32)> = vec![
        (
            CheckConnectionExistenceWithAck {
                connection_id: t.id(1),
                ack_id: 2,
                ext: ext(),
            }
            .into(),
            2,
            OK,
        ),
        (
            CheckConnectionExistenceWithAck {
                connection_id: "nope".into(),
                ack_id: 3,
                ext: ext(),
            }
            .into(),
            3,
            NOT_FOUND,
        ),
        (
            CheckUserExistenceWithAck {
                user_id: "u3".into(),
                ack_id: 4,
                ext: ext(),
            }
            .into(),
            4,
            OK,
        ),
        (
            CheckUserExistenceWithAck {
                user_id: "nobody".into(),
                ack_id: 5,
                ext: ext(),
            }
            .into(),
            5,
            NOT_FOUND,
        ),
        (
            CheckGroupExistenceWithAck {
                group_name: "exists".into(),
                ack_id: 6,
                ext: ext(),
            }
            .into(),
            6,
            OK,
        ),
        (
            CheckGroupExistenceWithAck {
                group_name: "empty".into(),
                ack_id: 7,
                ext: ext(),
            }
            .into(),
            7,
            NOT_FOUND,
        ),
        (
            CheckUserInGroupWithAck {
                user_id: "u1".into(),
                group_name: "exists".into(),
                ack_id: 8,
                ext: ext(),
            }
            .into(),
            8,
            OK,
        ),
        (
            CheckUserInGroupWithAck {
                user_id: "u2".into(),
                group_name: "exists".into(),
                ack_id: 9,
                ext: ext(),
            }
            .into(),
            9,
            NOT_FOUND,
        ),
    ];
    for (message, ack_id, expected) in cases {
        let name = message.name();
        assert_eq!(t.app.acked(message, ack_id).await, expected, "{name}");
    }
}

#[tokio::test]
async fn close_with_acks() {
    let mut t = three().await;
    // Two more clients: u4 and a second connection of u2.
    let mut more = Vec::new();
    for (user, format) in [("u4", Format::Json), ("u2", Format::Json)] {
        let token = t.server.token("chat", Some(user));
        let (client, id) = connect_client(&t.server, &mut t.app, "chat", &token, format).await;
        more.push((client, id));
    }
    let (mut c4, id4) = more.remove(0);
    let (mut c2b, id2b) = more.remove(0);

    // CloseConnectionWithAck.
    let status = t
        .app
        .acked(
            CloseConnectionWithAck {
                connection_id: t.id(0),
                reason: Some("r1".into()),
                ack_id: 1,
                ext: ext(),
            },
            1,
        )
        .await;
    assert_eq!(status, OK);
    match t.clients[0].until_closed().await {
        Some(HubMessage::Close { error, .. }) => assert_eq!(error.as_deref(), Some("r1")),
        other => panic!("expected a Close, got {other:?}"),
    }
    t.app.close_connection(&t.id(0)).await;
    let status = t
        .app
        .acked(
            CloseConnectionWithAck {
                connection_id: "nope".into(),
                reason: None,
                ack_id: 2,
                ext: ext(),
            },
            2,
        )
        .await;
    assert_eq!(status, NOT_FOUND);

    // CloseUserConnectionsWithAck, sparing one of u2's connections.
    let status = t
        .app
        .acked(
            CloseUserConnectionsWithAck {
                user_id: "u2".into(),
                reason: Some("r2".into()),
                ack_id: 3,
                excluded_list: vec![id2b.clone()],
                ext: ext(),
            },
            3,
        )
        .await;
    assert_eq!(status, OK);
    assert!(t.clients[1].until_closed().await.is_some());
    t.app.close_connection(&t.id(1)).await;

    // CloseGroupConnectionsWithAck, sparing u3.
    for (id, ack_id) in [(t.id(2), 4), (id4.clone(), 5)] {
        let status = t
            .app
            .acked(
                JoinGroupWithAck {
                    connection_id: id,
                    group_name: "closing".into(),
                    ack_id,
                    ext: ext(),
                },
                ack_id,
            )
            .await;
        assert_eq!(status, OK);
    }
    let status = t
        .app
        .acked(
            CloseGroupConnectionsWithAck {
                group_name: "closing".into(),
                reason: None,
                ack_id: 6,
                excluded_list: vec![t.id(2)],
                ext: ext(),
            },
            6,
        )
        .await;
    assert_eq!(status, OK);
    assert!(c4.until_closed().await.is_some());
    t.app.close_connection(&id4).await;

    // The spared connections still receive.
    let msg = Msg::invocation("survivors", &[json!(1)]);
    t.app
        .send(BroadcastData {
            excluded_list: Vec::new(),
            payloads: msg.payloads(),
            ext: ext(),
        })
        .await;
    t.clients[2].expect(&msg).await;
    c2b.expect(&msg).await;
    assert_eq!(t.server.node.client_connection_count(), 2);
    let status = t
        .app
        .acked(
            CheckConnectionExistenceWithAck {
                connection_id: id2b,
                ack_id: 7,
                ext: ext(),
            },
            7,
        )
        .await;
    assert_eq!(status, OK);
}

/// Decodes a GroupMemberQuery page: `([(connection, user|None)], token|None)`.
fn members_page(payload: &[u8]) -> (Vec<(String, Option<String>)>, Option<String>) {
    let value = rmpv::decode::read_value(&mut &payload[..]).expect("msgpack payload");
    let parts = value.as_array().expect("array");
    assert_eq!(parts.len(), 2, "{value}");
    let members = parts[0]
        .as_array()
        .expect("member list")
        .iter()
        .map(|m| {
            let pair = m.as_array().expect("member pair");
            assert_eq!(pair.len(), 2);
            (
                pair[0].as_str().expect("connection id").to_string(),
                if pair[1].is_nil() {
                    None
                } else {
                    Some(pair[1].as_str().expect("user id").to_string())
                },
            )
        })
        .collect();
    let token = if parts[1].is_nil() {
        None
    } else {
        Some(parts[1].as_str().expect("token").to_string())
    };
    (members, token)
}

#[tokio::test]
async fn group_member_query_pages() {
    let mut t = three().await;
    // A fourth client without a user id.
    let token = t.server.token("chat", None);
    let (_anonymous, anon_id) =
        connect_client(&t.server, &mut t.app, "chat", &token, Format::Json).await;
    let mut expected = vec![
        (t.id(0), Some("u1".to_string())),
        (t.id(2), Some("u3".to_string())),
        (anon_id.clone(), None),
    ];
    for (n, (id, _)) in expected.clone().iter().enumerate() {
        let ack_id = 100 + n as i32;
        let status = t
            .app
            .acked(
                JoinGroupWithAck {
                    connection_id: id.clone(),
                    group_name: "members".into(),
                    ack_id,
                    ext: ext(),
                },
                ack_id,
            )
            .await;
        assert_eq!(status, OK);
    }
    expected.sort();

    let query = |ack_id, max, token: Option<String>, group: &str| GroupMemberQuery {
        ext: ext(),
        group_name: group.into(),
        ack_id,
        max,
        continuation_token: token,
    };
    t.app.send(query(1, 100, None, "members")).await;
    let ack = t.app.ack(1).await;
    assert_eq!(ack.status, OK);
    let (mut all, token) = members_page(&ack.payload.expect("payload"));
    all.sort();
    assert_eq!(all, expected);
    assert_eq!(token, None);

    // One per page, following the continuation token.
    let mut paged = Vec::new();
    let mut token = None;
    for ack_id in 2..10 {
        t.app.send(query(ack_id, 1, token.clone(), "members")).await;
        let ack = t.app.ack(ack_id).await;
        assert_eq!(ack.status, OK);
        let (page, next) = members_page(&ack.payload.expect("payload"));
        assert!(page.len() <= 1);
        paged.extend(page);
        token = next;
        if token.is_none() {
            break;
        }
    }
    paged.sort();
    assert_eq!(paged, expected);

    t.app.send(query(20, 10, None, "nobody-here")).await;
    let ack = t.app.ack(20).await;
    assert_eq!(members_page(&ack.payload.expect("payload")), (vec![], None));
}

#[tokio::test]
async fn access_key_request_gets_an_error_response() {
    let server = TestServer::start().await;
    let mut app = AppServer::open(&server, "chat", "s1").await;
    app.send(AccessKeyRequest {
        token: "entra-id-token".into(),
        kid: Some("kid-1".into()),
        ext: ext(),
    })
    .await;
    let response = app
        .take("AccessKeyResponse", |m| match m {
            ServiceMessage::AccessKeyResponse(r) => Some(r.clone()),
            _ => None,
        })
        .await;
    assert!(response.access_key.is_none());
    assert!(!response.error_message.unwrap_or_default().is_empty());
    assert!(!response.error_type.unwrap_or_default().is_empty());
    app.echo_round_trip().await;
}

// ---------------------------------------------------------------------------------------
// 6. Server connection loss and migration
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn losing_a_server_connection_closes_only_its_clients() {
    let server = TestServer::start_with(default_mode()).await;
    let hub = "chat";
    let mut s1 = AppServer::open(&server, hub, "s1").await;
    let mut s2 = AppServer::open(&server, hub, "s2").await;
    let mut on_s1 = Vec::new();
    let mut on_s2 = Vec::new();
    for (i, format) in [Format::Json, Format::MessagePack].into_iter().enumerate() {
        let token = sticky_token(&server, hub, &format!("a{i}"), "s1");
        on_s1.push(connect_client(&server, &mut s1, hub, &token, format).await);
        let token = sticky_token(&server, hub, &format!("b{i}"), "s2");
        on_s2.push(connect_client(&server, &mut s2, hub, &token, format).await);
    }
    // Abruptly: no close frame.
    drop(s1);
    for (client, _) in on_s1.iter_mut() {
        match client.until_closed().await {
            Some(HubMessage::Close {
                allow_reconnect, ..
            }) => assert!(allow_reconnect),
            other => panic!("expected a Close, got {other:?}"),
        }
    }
    let msg = Msg::invocation("still", &[json!("here")]);
    s2.send(BroadcastData {
        excluded_list: Vec::new(),
        payloads: msg.payloads(),
        ext: ext(),
    })
    .await;
    for (client, id) in on_s2.iter_mut() {
        client.expect(&msg).await;
        let up = Msg::invocation("up", &[json!(id.clone())]);
        client.send_raw(&up.bytes(client.format)).await;
        assert_eq!(s2.connection_data(id).await, up.bytes(client.format));
    }
    eventually("s1's clients gone", WAIT, || {
        server.node.client_connection_count() == 2
    })
    .await;
}

#[tokio::test]
async fn with_migration_a_lost_connection_moves_clients_to_a_sibling() {
    let server = TestServer::start_with(default_mode()).await;
    let hub = "chat";
    let mut a = AppServer::open_with(&server, hub, "srv", 1).await;
    let token = server.token(hub, Some("mover"));
    // Only `a` exists yet: the client is pinned to it.
    let (mut client, id) = connect_client(&server, &mut a, hub, &token, Format::Json).await;
    let mut b = AppServer::open_with(&server, hub, "srv", 1).await;

    drop(a);
    let open = b.open_connection().await;
    assert_eq!(open.connection_id, id);
    assert_eq!(
        header(&open.headers, "Asrs-Migrate-From"),
        Some(&["srv".to_string()][..])
    );
    assert_eq!(open.ext.protocol.as_deref(), Some("json"));
    assert!(open
        .claims
        .iter()
        .any(|(t, v)| t == "asrs.s.uid" && v == "mover"));

    // The client stays connected; its bytes now go to `b`, and `b` reaches it.
    let up = Msg::invocation("up", &[json!(1)]);
    client.send_raw(&up.json).await;
    assert_eq!(b.connection_data(&id).await, up.json);
    let down = Msg::invocation("down", &[json!(2)]);
    b.send_to(&id, &down.json).await;
    client.expect(&down).await;
}

#[tokio::test]
async fn without_migration_a_lost_connection_closes_clients_even_with_a_sibling() {
    let server = TestServer::start_with(default_mode()).await;
    let hub = "chat";
    let mut a = AppServer::open_with(&server, hub, "srv", 0).await;
    let token = server.token(hub, None);
    let (mut client, _) = connect_client(&server, &mut a, hub, &token, Format::Json).await;
    let mut b = AppServer::open_with(&server, hub, "srv", 0).await;
    drop(a);
    assert!(client.until_closed().await.is_some());
    b.assert_quiet().await;
}

#[tokio::test]
async fn graceful_shutdown_fin1_migrates_clients_to_another_server() {
    let server = TestServer::start_with(default_mode()).await;
    let hub = "chat";
    let mut old = AppServer::open_with(&server, hub, "old", 1).await;
    let mut clients = Vec::new();
    for format in [Format::Json, Format::MessagePack] {
        let token = server.token(hub, None);
        clients.push(connect_client(&server, &mut old, hub, &token, format).await);
    }
    let mut new = AppServer::open_with(&server, hub, "new", 1).await;

    old.send(Ping::new(&[("shutdown", "fin:1")])).await;
    let finack = old.ping("shutdown").await;
    assert_eq!(finack.values, ["shutdown", "finack"]);
    for (client, id) in clients.iter_mut() {
        let close = old.close_connection(id).await;
        assert_eq!(
            header(&close.headers, "Asrs-Migrate-To"),
            Some(&["new".to_string()][..])
        );
        // Clients move in no particular order.
        let open = new
            .take("OpenConnection", |m| match m {
                ServiceMessage::OpenConnection(o) if &o.connection_id == id => Some(o.clone()),
                _ => None,
            })
            .await;
        assert_eq!(
            header(&open.headers, "Asrs-Migrate-From"),
            Some(&["old".to_string()][..])
        );
        // Traffic now flows through `new`.
        let up = Msg::invocation("up", &[json!(id.clone())]);
        client.send_raw(&up.bytes(client.format)).await;
        assert_eq!(new.connection_data(id).await, up.bytes(client.format));
        let down = Msg::invocation("down", &[json!(id.clone())]);
        new.send_to(id, &down.bytes(client.format)).await;
        client.expect(&down).await;
    }
    // New clients skip the draining server.
    let token = server.token(hub, None);
    let (_late, late_id) = connect_client(&server, &mut new, hub, &token, Format::Json).await;
    assert!(!late_id.is_empty());
    old.assert_quiet().await;
}

// ---------------------------------------------------------------------------------------
// 7. Client invocation across servers
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn client_invocation_routed_through_another_server() {
    let server = TestServer::start_with(default_mode()).await;
    let hub = "chat";
    let mut a = AppServer::open(&server, hub, "A").await;
    let mut b = AppServer::open(&server, hub, "B").await;
    let token = sticky_token(&server, hub, "target", "B");
    let (mut client, id) = connect_client(&server, &mut b, hub, &token, Format::Json).await;

    let invocation_id = format!("{id}-mgr-1");
    let json_payload = switchyard_hub_protocol::encode_message(
        Format::Json,
        &HubMessage::Invocation {
            headers: Default::default(),
            invocation_id: Some(invocation_id.clone()),
            target: "getResult".into(),
            arguments: vec![json!(41)],
            stream_ids: None,
        },
    );
    let msgpack_payload = switchyard_hub_protocol::encode_message(
        Format::MessagePack,
        &HubMessage::Invocation {
            headers: Default::default(),
            invocation_id: Some(invocation_id.clone()),
            target: "getResult".into(),
            arguments: vec![json!(41)],
            stream_ids: None,
        },
    );
    let call = ClientInvocation {
        invocation_id: invocation_id.clone(),
        connection_id: id.clone(),
        caller_server_id: "A".into(),
        payloads: vec![
            ("json".into(), json_payload.clone()),
            ("messagepack".into(), msgpack_payload),
        ],
        ext: ext(),
    };
    a.send(call.clone()).await;

    let frame = within("the invocation", WAIT, client.next_frame())
        .await
        .unwrap();
    assert_eq!(frame, json_payload);
    let mapping = a
        .take("ServiceMapping", |m| match m {
            ServiceMessage::ServiceMapping(s) => Some(s.clone()),
            _ => None,
        })
        .await;
    assert_eq!(mapping.invocation_id, invocation_id);
    assert_eq!(mapping.connection_id, id);
    assert!(!mapping.instance_id.is_empty());
    let routed = b
        .take("ClientInvocation", |m| match m {
            ServiceMessage::ClientInvocation(c) => Some(c.clone()),
            _ => None,
        })
        .await;
    assert_eq!(routed, call);

    // The client answers through B; B routes the completion back; A receives it.
    let completion = switchyard_hub_protocol::encode_completion(
        Format::Json,
        &invocation_id,
        switchyard_hub_protocol::CompletionResult::Value(json!(42)),
    );
    client.send_raw(&completion).await;
    assert_eq!(b.connection_data(&id).await, completion);
    let done = ClientCompletion {
        invocation_id: invocation_id.clone(),
        connection_id: id.clone(),
        caller_server_id: "A".into(),
        protocol: "json".into(),
        payload: completion.clone(),
        ext: ext(),
    };
    b.send(done.clone()).await;
    let received = a
        .take("ClientCompletion", |m| match m {
            ServiceMessage::ClientCompletion(c) => Some(c.clone()),
            _ => None,
        })
        .await;
    assert_eq!(received, done);
}

#[tokio::test]
async fn client_invocation_for_an_unknown_connection_fails() {
    let server = TestServer::start().await;
    let mut a = AppServer::open(&server, "chat", "A").await;
    a.send(ClientInvocation {
        invocation_id: "inv-1".into(),
        connection_id: "no-such-connection".into(),
        caller_server_id: "A".into(),
        payloads: Msg::invocation("x", &[]).payloads(),
        ext: ext(),
    })
    .await;
    let error = a
        .take("ErrorCompletion", |m| match m {
            ServiceMessage::ErrorCompletion(e) => Some(e.clone()),
            _ => None,
        })
        .await;
    assert_eq!(error.invocation_id, "inv-1");
    assert_eq!(error.connection_id, "no-such-connection");
    assert_eq!(error.caller_server_id, "A");
    assert!(!error.error.is_empty());
}

#[tokio::test]
async fn client_leaving_fails_a_routed_invocation() {
    let server = TestServer::start_with(default_mode()).await;
    let hub = "chat";
    let mut a = AppServer::open(&server, hub, "A").await;
    let mut b = AppServer::open(&server, hub, "B").await;
    let token = sticky_token(&server, hub, "target", "B");
    let (client, id) = connect_client(&server, &mut b, hub, &token, Format::Json).await;
    a.send(ClientInvocation {
        invocation_id: "inv-2".into(),
        connection_id: id.clone(),
        caller_server_id: "A".into(),
        payloads: Msg::invocation("x", &[]).payloads(),
        ext: ext(),
    })
    .await;
    a.take("ServiceMapping", |m| {
        matches!(m, ServiceMessage::ServiceMapping(_)).then_some(())
    })
    .await;
    client.close().await;
    let error = a
        .take("ErrorCompletion", |m| match m {
            ServiceMessage::ErrorCompletion(e) => Some(e.clone()),
            _ => None,
        })
        .await;
    assert_eq!(error.invocation_id, "inv-2");
    assert_eq!(error.connection_id, id);
}

// ---------------------------------------------------------------------------------------
// 8. Messages an app server should not (or not yet) send
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn unknown_types_and_stray_acks_are_ignored() {
    let server = TestServer::start().await;
    let hub = "chat";
    let mut app = AppServer::open(&server, hub, "s1").await;
    let token = server.token(hub, None);
    let (mut client, id) = connect_client(&server, &mut app, hub, &token, Format::Json).await;

    // Type 99 with a well-formed array: [99, "x", {1: 2}, [1, 2]].
    let mut body = Vec::new();
    rmp::encode::write_array_len(&mut body, 4).unwrap();
    rmp::encode::write_sint(&mut body, 99).unwrap();
    rmp::encode::write_str(&mut body, "x").unwrap();
    rmp::encode::write_map_len(&mut body, 1).unwrap();
    rmp::encode::write_sint(&mut body, 1).unwrap();
    rmp::encode::write_sint(&mut body, 2).unwrap();
    rmp::encode::write_array_len(&mut body, 2).unwrap();
    rmp::encode::write_sint(&mut body, 1).unwrap();
    rmp::encode::write_sint(&mut body, 2).unwrap();
    let mut frame = vec![body.len() as u8];
    frame.extend_from_slice(&body);
    app.send_bytes(&frame).await;
    // Type 41 (RefreshAuth, layout unknown) too.
    app.send_bytes(&[0x02, 0x91, 41]).await;
    // An Ack from the app server for an id nobody waits for.
    app.send(Ack::new(
        12345,
        switchyard_service_protocol::AckStatus::Ok,
        "",
    ))
    .await;
    app.assert_quiet().await;

    // Still fully working.
    let msg = Msg::invocation("after", &[json!(1)]);
    app.send(MultiConnectionData {
        connection_list: vec![id.clone()],
        payloads: msg.payloads(),
        ext: ext(),
    })
    .await;
    client.expect(&msg).await;
    assert_eq!(server.node.server_connection_count(), 1);
}

// ---------------------------------------------------------------------------------------
// 9. Order
// ---------------------------------------------------------------------------------------

fn numbered(i: usize) -> Msg {
    Msg::invocation("n", &[json!(i)])
}

fn to_connection(id: &str, msg: &Msg) -> ServiceMessage {
    MultiConnectionData {
        connection_list: vec![id.to_string()],
        payloads: msg.payloads(),
        ext: ext(),
    }
    .into()
}

/// One client pinned to connection `a`; an app server with connections `a` and `b` (same
/// server id) sends it 2,000 messages alternating between them. Before switching connection
/// the app server waits for an `echo` round trip on the connection it just used: the service
/// acts on a connection's messages in arrival order and answers the echo after them, so the
/// message has been taken in. The service must not reorder what it has taken in, whichever
/// connection brought it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn order_is_kept_across_two_connections_of_one_server() {
    const COUNT: usize = 2_000;
    let server = TestServer::start_with(default_mode()).await;
    let hub = "chat";
    let mut a = AppServer::open(&server, hub, "srv").await;
    let token = server.token(hub, None);
    let (mut client, id) = connect_client(&server, &mut a, hub, &token, Format::Json).await;
    let mut b = AppServer::open(&server, hub, "srv").await;

    let sender = tokio::spawn({
        let id = id.clone();
        async move {
            for i in 0..COUNT {
                let app = if i % 2 == 0 { &mut a } else { &mut b };
                app.send(to_connection(&id, &numbered(i))).await;
                app.echo_round_trip().await;
            }
            (a, b)
        }
    });
    for i in 0..COUNT {
        client.expect(&numbered(i)).await;
    }
    let _ = within("sender", WAIT, sender).await.unwrap();
}

/// The brief's stricter form: alternate connections after each socket write completes,
/// without waiting for the service to take the message in. A completed write only means
/// the bytes reached the local socket buffer; the service reads two independent TCP
/// streams, so nothing orders a message on `a` before the next one on `b` (the sender
/// outruns the service and each connection's backlog is read as one batch). Azure gives
/// no such guarantee either: the SDK keeps a client's messages on one server connection
/// (ClientConnectionScope) when order matters. Fails nearly every run, at the first
/// messages (seen: `[1, 3, 5, …, 105, 0, 2, 4, …]`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "impossible across two TCP connections without waiting for the service; see the doc comment"]
async fn order_across_two_connections_with_write_completion_only() {
    const COUNT: usize = 2_000;
    let server = TestServer::start_with(default_mode()).await;
    let hub = "chat";
    let mut a = AppServer::open(&server, hub, "srv").await;
    let token = server.token(hub, None);
    let (mut client, id) = connect_client(&server, &mut a, hub, &token, Format::Json).await;
    let mut b = AppServer::open(&server, hub, "srv").await;

    let sender = tokio::spawn({
        let id = id.clone();
        async move {
            for i in 0..COUNT {
                let app = if i % 2 == 0 { &mut a } else { &mut b };
                app.send(to_connection(&id, &numbered(i))).await;
            }
            (a, b)
        }
    });
    for i in 0..COUNT {
        client.expect(&numbered(i)).await;
    }
    let _ = within("sender", WAIT, sender).await.unwrap();
}

#[tokio::test]
async fn order_is_kept_for_10000_messages_over_one_connection() {
    const COUNT: usize = 10_000;
    let server = TestServer::start_with(default_mode()).await;
    let hub = "chat";
    let mut app = AppServer::open(&server, hub, "srv").await;
    let token = server.token(hub, None);
    let (mut client, id) =
        connect_client(&server, &mut app, hub, &token, Format::MessagePack).await;

    let sender = tokio::spawn({
        let id = id.clone();
        async move {
            // Batched into frames of 1,000 bytes, cutting messages at arbitrary points.
            let mut stream = Vec::new();
            for i in 0..COUNT {
                stream.extend_from_slice(&encoded(&to_connection(&id, &numbered(i))));
            }
            for chunk in stream.chunks(1_000) {
                app.send_bytes(chunk).await;
            }
            app
        }
    });
    for i in 0..COUNT {
        client.expect(&numbered(i)).await;
    }
    let mut app = within("sender", WAIT, sender).await.unwrap();
    app.echo_round_trip().await;
}

// ---------------------------------------------------------------------------------------
// 10. More edges of the relay and the connection types
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn handshake_response_split_and_followed_by_messages() {
    let server = TestServer::start().await;
    let hub = "chat";
    let mut app = AppServer::open(&server, hub, "s1").await;
    for format in [Format::Json, Format::MessagePack] {
        let token = server.token(hub, None);
        let (mut client, id) = Client::start(&server, hub, &token, format).await;
        app.open_connection().await;
        app.connection_data(&id).await;
        // `{` alone, then `}\x1e` with the first message and half of the second.
        let first = Msg::invocation("first", &[json!(1)]).bytes(format);
        let second = Msg::invocation("second", &[json!(2)]).bytes(format);
        app.send_to(&id, b"{").await;
        let mut rest = b"}\x1e".to_vec();
        rest.extend_from_slice(&first);
        rest.extend_from_slice(&second[..2]);
        app.send_to(&id, &rest).await;
        client.handshake_result().await.expect("handshake");
        let got = within("first", WAIT, client.next_frame()).await.unwrap();
        assert_eq!(got, first);
        app.send_to(&id, &second[2..]).await;
        let got = within("second", WAIT, client.next_frame()).await.unwrap();
        assert_eq!(got, second);
    }
}

#[tokio::test]
async fn client_bytes_reach_the_app_server_as_whole_messages() {
    let server = TestServer::start().await;
    let hub = "chat";
    let mut app = AppServer::open(&server, hub, "s1").await;
    for format in [Format::Json, Format::MessagePack] {
        let token = server.token(hub, None);
        let (mut client, id) = Client::start(&server, hub, &token, format).await;
        app.open_connection().await;
        app.connection_data(&id).await;
        app.send_to(&id, handshake::RESPONSE_OK).await;
        client.handshake_result().await.unwrap();

        // Two messages in one frame, then one split over two frames.
        let one = Msg::invocation("one", &[json!(1)]).bytes(format);
        let two = Msg::invocation("two", &[json!(2)]).bytes(format);
        let three = Msg::invocation("three", &[json!("x".repeat(100))]).bytes(format);
        let mut batch = one.to_vec();
        batch.extend_from_slice(&two);
        client.send_raw(&batch).await;
        client.send_raw(&three[..7]).await;
        client.send_raw(&three[7..]).await;
        let mut expected = batch.clone();
        expected.extend_from_slice(&three);
        let mut received = Vec::new();
        while received.len() < expected.len() {
            let chunk = app.connection_data(&id).await;
            // Never half a message.
            let mut rest = BytesMut::from(&chunk[..]);
            let frames = FrameSplitter::new(format, usize::MAX)
                .split_all(&mut rest)
                .unwrap();
            assert!(!frames.is_empty() && rest.is_empty(), "partial: {chunk:?}");
            received.extend_from_slice(&chunk);
        }
        assert_eq!(received, expected);
    }
}

#[tokio::test]
async fn client_close_message_is_forwarded_then_close_connection() {
    let server = TestServer::start().await;
    let hub = "chat";
    let mut app = AppServer::open(&server, hub, "s1").await;
    let token = server.token(hub, None);
    let (mut client, id) = connect_client(&server, &mut app, hub, &token, Format::Json).await;
    let close = switchyard_hub_protocol::encode_close(Format::Json, None, false);
    client.send_raw(&close).await;
    assert_eq!(app.connection_data(&id).await, close);
    let gone = app.close_connection(&id).await;
    assert_eq!(gone.error_message, "");
    client.until_closed().await;
}

#[tokio::test]
async fn client_sending_before_the_handshake_answer_is_forwarded_in_order() {
    let server = TestServer::start().await;
    let hub = "chat";
    let mut app = AppServer::open(&server, hub, "s1").await;
    let token = server.token(hub, None);
    let negotiated = switchyard_client::negotiate(&server.client_url(hub), &token, 1)
        .await
        .unwrap();
    let id = negotiated.connection_id.clone();
    let mut request = server
        .ws_url(hub, Some(&negotiated.id_value))
        .into_client_request()
        .unwrap();
    request
        .headers_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    let (ws, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    let mut client = Client {
        ws,
        format: Format::Json,
        buf: BytesMut::new(),
        splitter: FrameSplitter::new(Format::Json, usize::MAX),
    };
    // The handshake request and an invocation in one frame.
    let early = Msg::invocation("early", &[json!(0)]);
    let mut frame = handshake::encode_request("json", 1);
    frame.extend_from_slice(&early.json);
    client.send_raw(&frame).await;
    app.open_connection().await;
    assert_eq!(
        app.connection_data(&id).await,
        handshake::encode_request("json", 1)
    );
    assert_eq!(app.connection_data(&id).await, early.json);
    app.send_to(&id, handshake::RESPONSE_OK).await;
    client.handshake_result().await.unwrap();
}

#[tokio::test]
async fn large_message_in_many_chunks_reaches_a_messagepack_client() {
    let server = TestServer::start().await;
    let hub = "chat";
    let mut app = AppServer::open(&server, hub, "s1").await;
    let token = server.token(hub, None);
    let (mut client, id) =
        connect_client(&server, &mut app, hub, &token, Format::MessagePack).await;
    let big = Msg::invocation("big", &[json!("z".repeat(200_000))]).msgpack;
    let small = Msg::invocation("small", &[json!(1)]).msgpack;
    let mut stream = big.to_vec();
    stream.extend_from_slice(&small);
    for chunk in stream.chunks(999) {
        app.send_to(&id, chunk).await;
    }
    assert_eq!(within("big", WAIT, client.next_frame()).await.unwrap(), big);
    assert_eq!(
        within("small", WAIT, client.next_frame()).await.unwrap(),
        small
    );
}

#[tokio::test]
async fn connection_data_and_multi_connection_data_keep_their_order() {
    let server = TestServer::start().await;
    let hub = "chat";
    let mut app = AppServer::open(&server, hub, "s1").await;
    let token = server.token(hub, None);
    let (mut client, id) = connect_client(&server, &mut app, hub, &token, Format::Json).await;
    for i in 0..500 {
        let msg = numbered(i);
        if i % 2 == 0 {
            app.send_to(&id, &msg.json).await;
        } else {
            app.send(to_connection(&id, &msg)).await;
        }
    }
    for i in 0..500 {
        client.expect(&numbered(i)).await;
    }
}

#[tokio::test]
async fn data_for_unknown_connections_is_ignored() {
    let server = TestServer::start().await;
    let mut app = AppServer::open(&server, "chat", "s1").await;
    app.send_to("no-such-connection", b"{}\x1e").await;
    app.send(CloseConnection {
        connection_id: "no-such-connection".into(),
        error_message: String::new(),
        headers: Vec::new(),
        ext: ext(),
    })
    .await;
    app.send(to_connection("no-such-connection", &numbered(1)))
        .await;
    app.assert_quiet().await;
}

#[tokio::test]
async fn a_payload_map_without_the_clients_protocol_skips_it() {
    let mut t = three().await;
    let msg = Msg::invocation("json-only", &[json!(1)]);
    t.app
        .send(BroadcastData {
            excluded_list: Vec::new(),
            payloads: vec![("json".into(), msg.json.clone())],
            ext: ext(),
        })
        .await;
    t.expect_delivery(&msg, [true, false, true], 1).await;
}

#[tokio::test]
async fn group_and_user_group_messages_without_ack() {
    use switchyard_service_protocol::{JoinGroup, LeaveGroup, UserJoinGroup, UserLeaveGroup};
    let mut t = three().await;
    t.app
        .send(JoinGroup {
            connection_id: t.id(0),
            group_name: "plain".into(),
            ext: ext(),
        })
        .await;
    t.app
        .send(UserJoinGroup {
            user_id: "u2".into(),
            group_name: "plain".into(),
            ext: ext(),
        })
        .await;
    let msg = Msg::invocation("plain", &[json!(1)]);
    t.app
        .send(GroupBroadcastData {
            group_name: "plain".into(),
            excluded_list: Vec::new(),
            payloads: msg.payloads(),
            ext: ext(),
            excluded_user_list: Vec::new(),
            caller_user_id: None,
        })
        .await;
    t.expect_delivery(&msg, [true, true, false], 1).await;
    t.app
        .send(LeaveGroup {
            connection_id: t.id(0),
            group_name: Some("plain".into()),
            ext: ext(),
        })
        .await;
    t.app
        .send(UserLeaveGroup {
            user_id: "u2".into(),
            group_name: None,
            ext: ext(),
        })
        .await;
    let status = t
        .app
        .acked(
            CheckGroupExistenceWithAck {
                group_name: "plain".into(),
                ack_id: 1,
                ext: ext(),
            },
            1,
        )
        .await;
    assert_eq!(status, NOT_FOUND);
}

#[tokio::test]
async fn close_connections_with_ack_closes_the_hub_but_the_excluded() {
    use switchyard_service_protocol::CloseConnectionsWithAck;
    let mut t = three().await;
    let status = t
        .app
        .acked(
            CloseConnectionsWithAck {
                reason: Some("everyone out".into()),
                ack_id: 1,
                excluded_list: vec![t.id(1)],
                ext: ext(),
            },
            1,
        )
        .await;
    assert_eq!(status, OK);
    for i in [0, 2] {
        match t.clients[i].until_closed().await {
            Some(HubMessage::Close { error, .. }) => {
                assert_eq!(error.as_deref(), Some("everyone out"))
            }
            other => panic!("expected a Close, got {other:?}"),
        }
    }
    let msg = Msg::invocation("left", &[json!(1)]);
    t.app
        .send(BroadcastData {
            excluded_list: Vec::new(),
            payloads: msg.payloads(),
            ext: ext(),
        })
        .await;
    t.clients[1].expect(&msg).await;
}

#[tokio::test]
async fn weak_connections_carry_no_clients_but_can_send() {
    let server = TestServer::start_with(default_mode()).await;
    let hub = "chat";
    let token = server.server_token(hub, "mgmt");
    let mut weak = AppServer::new(
        dial(&server, hub, Some(&token), Some("mgmt"))
            .await
            .unwrap(),
    );
    let mut request = handshake_request(0);
    request.connection_type = 2;
    assert_eq!(weak.handshake(request).await.error_message, "");
    // Only a weak connection: no app server can take the client.
    let client_token = server.token(hub, Some("u"));
    let (mut refused, _) = Client::start(&server, hub, &client_token, Format::Json).await;
    let error = refused.handshake_result().await.expect_err("refused");
    assert!(error.contains("app servers are not connected"), "{error}");

    // With a Default connection the client goes there, and the weak one can still send.
    let mut app = AppServer::open(&server, hub, "s1").await;
    let (mut client, id) =
        connect_client(&server, &mut app, hub, &client_token, Format::Json).await;
    let msg = Msg::invocation("from-weak", &[json!(1)]);
    weak.send(UserData {
        user_id: "u".into(),
        payloads: msg.payloads(),
        ext: ext(),
    })
    .await;
    client.expect(&msg).await;
    let status = weak
        .acked(
            CheckConnectionExistenceWithAck {
                connection_id: id,
                ack_id: 1,
                ext: ext(),
            },
            1,
        )
        .await;
    assert_eq!(status, OK);
}

#[tokio::test]
async fn on_demand_connections_carry_clients() {
    let server = TestServer::start_with(default_mode()).await;
    let hub = "chat";
    let token = server.server_token(hub, "s1");
    let mut app = AppServer::new(dial(&server, hub, Some(&token), Some("s1")).await.unwrap());
    let mut request = handshake_request(0);
    request.connection_type = 1;
    request.target = "instance-1".into();
    assert_eq!(app.handshake(request).await.error_message, "");
    let client_token = server.token(hub, None);
    connect_client(&server, &mut app, hub, &client_token, Format::Json).await;
}

#[tokio::test]
async fn a_draining_server_gets_no_new_clients() {
    let server = TestServer::start_with(default_mode()).await;
    let hub = "chat";
    let mut old = AppServer::open(&server, hub, "old").await;
    old.send(Ping::new(&[("shutdown", "fin:0")])).await;
    old.ping("shutdown").await;
    let token = server.token(hub, None);
    let (mut refused, _) = Client::start(&server, hub, &token, Format::Json).await;
    assert!(refused.handshake_result().await.is_err());
    let mut new = AppServer::open(&server, hub, "new").await;
    connect_client(&server, &mut new, hub, &token, Format::Json).await;
    old.assert_quiet().await;
}

#[tokio::test]
async fn fin1_without_another_server_keeps_the_clients() {
    let server = TestServer::start_with(default_mode()).await;
    let hub = "chat";
    let mut app = AppServer::open_with(&server, hub, "only", 1).await;
    let token = server.token(hub, None);
    let (mut client, id) = connect_client(&server, &mut app, hub, &token, Format::Json).await;
    app.send(Ping::new(&[("shutdown", "fin:1")])).await;
    assert_eq!(app.ping("shutdown").await.values, ["shutdown", "finack"]);
    app.assert_quiet().await;
    let msg = Msg::invocation("still", &[json!(1)]);
    app.send_to(&id, &msg.json).await;
    client.expect(&msg).await;
}

#[tokio::test]
async fn a_graceful_close_of_the_app_server_closes_its_clients() {
    let server = TestServer::start_with(default_mode()).await;
    let hub = "chat";
    let mut app = AppServer::open(&server, hub, "s1").await;
    let token = server.token(hub, None);
    let (mut client, _) = connect_client(&server, &mut app, hub, &token, Format::MessagePack).await;
    app.ws.close(None).await.unwrap();
    assert!(client.until_closed().await.is_some());
    eventually("app server gone", WAIT, || {
        server.node.server_connection_count() == 0
    })
    .await;
}

#[tokio::test]
async fn oversized_and_text_frames_close_the_connection() {
    let mut config = Config::default();
    config.limits.max_server_message_size = 1024;
    let server = TestServer::start_with(config).await;
    let mut app = AppServer::open(&server, "chat", "s1").await;
    // A prefix announcing 2,000 bytes: refused on the prefix alone.
    app.send_bytes(&[0xd0, 0x0f]).await;
    let seen = app.until_closed().await;
    assert!(
        matches!(seen.last(), Some(ServiceMessage::ServiceError(_))),
        "got {seen:?}"
    );

    let mut app = AppServer::open(&server, "chat", "s1").await;
    app.ws
        .send(WsMessage::Text("not binary".into()))
        .await
        .unwrap();
    let seen = app.until_closed().await;
    assert!(
        matches!(seen.last(), Some(ServiceMessage::ServiceError(_))),
        "got {seen:?}"
    );
}

#[tokio::test]
async fn client_invocation_for_a_client_of_the_caller_itself() {
    let server = TestServer::start().await;
    let hub = "chat";
    let mut a = AppServer::open(&server, hub, "A").await;
    let token = server.token(hub, None);
    let (mut client, id) = connect_client(&server, &mut a, hub, &token, Format::MessagePack).await;
    let payload = switchyard_hub_protocol::encode_message(
        Format::MessagePack,
        &HubMessage::Invocation {
            headers: Default::default(),
            invocation_id: Some("1".into()),
            target: "ask".into(),
            arguments: vec![],
            stream_ids: None,
        },
    );
    a.send(ClientInvocation {
        invocation_id: format!("{id}-m-1"),
        connection_id: id.clone(),
        caller_server_id: "A".into(),
        payloads: vec![("messagepack".into(), payload.clone())],
        ext: ext(),
    })
    .await;
    assert_eq!(
        within("invocation", WAIT, client.next_frame())
            .await
            .unwrap(),
        payload
    );
    // No mapping: the caller hosts the client and sees the answer itself.
    let answer = switchyard_hub_protocol::encode_completion(
        Format::MessagePack,
        "1",
        switchyard_hub_protocol::CompletionResult::Value(json!(true)),
    );
    client.send_raw(&answer).await;
    assert_eq!(a.connection_data(&id).await, answer);
    a.send(ClientCompletion {
        invocation_id: format!("{id}-m-1"),
        connection_id: id.clone(),
        caller_server_id: "A".into(),
        protocol: "messagepack".into(),
        payload: Bytes::new(),
        ext: ext(),
    })
    .await;
    a.assert_quiet().await;
}

#[tokio::test]
async fn app_server_never_answering_the_client_handshake_times_it_out() {
    let mut config = default_mode();
    config.timeouts.handshake_timeout = Duration::from_millis(300);
    let server = TestServer::start_with(config).await;
    let hub = "chat";
    let mut app = AppServer::open(&server, hub, "s1").await;
    let token = server.token(hub, None);
    let (mut client, id) = Client::start(&server, hub, &token, Format::Json).await;
    app.open_connection().await;
    app.connection_data(&id).await;
    let error = client.handshake_result().await.expect_err("timed out");
    assert!(error.contains("canceled"), "{error}");
    app.close_connection(&id).await;
}

#[tokio::test]
async fn auto_mode_hub_whose_app_servers_left_refuses_clients() {
    let server = TestServer::start().await;
    let app = AppServer::open(&server, "chat", "s1").await;
    drop(app);
    eventually("app server gone", WAIT, || {
        server.node.server_connection_count() == 0
    })
    .await;
    let token = server.token("chat", None);
    let (mut client, _) = Client::start(&server, "chat", &token, Format::Json).await;
    let error = client.handshake_result().await.expect_err("refused");
    assert!(error.contains("app servers are not connected"), "{error}");
}

#[tokio::test]
async fn error_completion_from_the_router_reaches_the_caller() {
    use switchyard_service_protocol::ErrorCompletion;
    let server = TestServer::start_with(default_mode()).await;
    let hub = "chat";
    let mut a = AppServer::open(&server, hub, "A").await;
    let mut b = AppServer::open(&server, hub, "B").await;
    let token = sticky_token(&server, hub, "target", "B");
    let (_client, id) = connect_client(&server, &mut b, hub, &token, Format::Json).await;
    a.send(ClientInvocation {
        invocation_id: "inv-3".into(),
        connection_id: id.clone(),
        caller_server_id: "A".into(),
        payloads: Msg::invocation("x", &[]).payloads(),
        ext: ext(),
    })
    .await;
    b.take("ClientInvocation", |m| {
        matches!(m, ServiceMessage::ClientInvocation(_)).then_some(())
    })
    .await;
    let failed = ErrorCompletion {
        invocation_id: "inv-3".into(),
        connection_id: id.clone(),
        caller_server_id: "A".into(),
        error: "the client said no".into(),
        ext: ext(),
    };
    b.send(failed.clone()).await;
    let received = a
        .take("ErrorCompletion", |m| match m {
            ServiceMessage::ErrorCompletion(e) => Some(e.clone()),
            _ => None,
        })
        .await;
    assert_eq!(received, failed);
}

#[tokio::test]
async fn long_polling_client_in_default_mode() {
    let server = TestServer::start_with(default_mode()).await;
    let hub = "chat";
    let mut app = AppServer::open(&server, hub, "s1").await;
    let http = Http::for_user(&server, hub, "lp");
    for format in [Format::Json, Format::MessagePack] {
        let negotiated = switchyard_client::negotiate(&http.base, &http.token, 1)
            .await
            .unwrap();
        let (key, id) = (negotiated.id_value, negotiated.connection_id);
        assert_eq!(http.poll(&key).await.status(), 200);
        let request = handshake::encode_request(format.name(), 1);
        assert_eq!(http.post(&key, &request).await.status(), 200);
        let open = app.open_connection().await;
        assert_eq!(open.connection_id, id);
        assert_eq!(open.ext.protocol.as_deref(), Some(format.name()));
        assert_eq!(app.connection_data(&id).await, request);
        // The answer and a message, split oddly.
        let msg = Msg::invocation("lp", &[json!(1)]).bytes(format);
        let mut stream = handshake::RESPONSE_OK.to_vec();
        stream.extend_from_slice(&msg);
        app.send_to(&id, &stream[..4]).await;
        app.send_to(&id, &stream[4..]).await;
        let mut body = Vec::new();
        while body.len() < stream.len() {
            let chunk = within("poll", WAIT, http.poll(&key)).await;
            assert_eq!(chunk.status(), 200);
            body.extend_from_slice(&chunk.bytes().await.unwrap());
        }
        assert_eq!(body, stream);
        let up = Msg::invocation("up", &[json!(2)]).bytes(format);
        assert_eq!(http.post(&key, &up).await.status(), 200);
        assert_eq!(app.connection_data(&id).await, up);
        let deleted = http
            .client
            .delete(http.url(&key))
            .bearer_auth(&http.token)
            .send()
            .await
            .unwrap();
        assert_eq!(deleted.status(), 202);
        app.close_connection(&id).await;
    }
}

#[tokio::test]
async fn server_sent_events_client_in_default_mode() {
    let server = TestServer::start_with(default_mode()).await;
    let hub = "chat";
    let mut app = AppServer::open(&server, hub, "s1").await;
    let http = Http::for_user(&server, hub, "sse");
    let negotiated = switchyard_client::negotiate(&http.base, &http.token, 1)
        .await
        .unwrap();
    let (key, id) = (negotiated.id_value, negotiated.connection_id);
    let response = http
        .client
        .get(http.url(&key))
        .bearer_auth(&http.token)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut events = Box::pin(response.bytes_stream());
    let mut received: Vec<u8> = Vec::new();
    let request = handshake::encode_request("json", 1);
    assert_eq!(http.post(&key, &request).await.status(), 200);
    app.open_connection().await;
    assert_eq!(app.connection_data(&id).await, request);
    let msg = Msg::invocation("sse", &[json!("hi")]);
    let mut stream = handshake::RESPONSE_OK.to_vec();
    stream.extend_from_slice(&msg.json);
    app.send_to(&id, &stream[..2]).await;
    app.send_to(&id, &stream[2..]).await;
    // Event data, concatenated, is the byte stream (events may batch messages).
    let data_of = |events: &[u8]| -> Vec<u8> {
        let text = String::from_utf8_lossy(events);
        let mut data = Vec::new();
        for event in text.split("\r\n\r\n") {
            for line in event.split("\r\n") {
                if let Some(rest) = line.strip_prefix("data: ") {
                    data.extend_from_slice(rest.as_bytes());
                }
            }
        }
        data
    };
    while data_of(&received) != stream {
        let chunk = tokio::time::timeout(WAIT, events.next())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "timed out; the event stream so far: {:?}",
                    String::from_utf8_lossy(&received)
                )
            })
            .expect("stream open")
            .unwrap();
        received.extend_from_slice(&chunk);
    }
    app.send(CloseConnection {
        connection_id: id.clone(),
        error_message: String::new(),
        headers: Vec::new(),
        ext: ext(),
    })
    .await;
    within("the event stream to end", WAIT, async {
        while let Some(Ok(_)) = events.next().await {}
    })
    .await;
}

/// A Weak connection (Management SDK persistent mode, spec §1.10/§4.5) on `hub`.
async fn open_weak(server: &TestServer, hub: &str, server_id: &str) -> AppServer {
    let token = server.server_token(hub, server_id);
    let mut weak = AppServer::new(
        dial(server, hub, Some(&token), Some(server_id))
            .await
            .unwrap(),
    );
    let mut request = handshake_request(0);
    request.connection_type = 2;
    let response = weak.handshake(request).await;
    assert_eq!(response.error_message, "", "weak connection refused");
    weak
}

/// The Management SDK's persistent transport speaks the service protocol over Weak
/// connections and is used by serverless apps (Azure Functions); it carries no clients, so
/// serverless mode must accept it.
#[tokio::test]
async fn serverless_mode_accepts_weak_connections_for_the_management_sdk() {
    let server = TestServer::start_with(Config {
        mode: ServiceMode::Serverless,
        ..Config::default()
    })
    .await;
    let hub = "chat";
    let mut weak = open_weak(&server, hub, "mgmt").await;
    let token = server.token(hub, Some("u"));
    let (mut client, id) = Client::start(&server, hub, &token, Format::Json).await;
    client
        .handshake_result()
        .await
        .expect("served by the service");
    eventually("joined", WAIT, || {
        server.node.client_connection_count() == 1
    })
    .await;
    let msg = Msg::invocation("from-mgmt", &[json!(1)]);
    weak.send(UserData {
        user_id: "u".into(),
        payloads: msg.payloads(),
        ext: ext(),
    })
    .await;
    client.expect(&msg).await;
    let status = weak
        .acked(
            CheckConnectionExistenceWithAck {
                connection_id: id,
                ack_id: 1,
                ext: ext(),
            },
            1,
        )
        .await;
    assert_eq!(status, OK);
}

/// In `mode = auto` a Weak connection is not an app server that can take clients: the hub
/// stays serverless (otherwise a serverless app using the Management SDK's persistent
/// transport would get its clients refused with "app servers are not connected").
#[tokio::test]
async fn auto_mode_weak_connection_keeps_the_hub_serverless() {
    let server = TestServer::start().await;
    let hub = "chat";
    let mut weak = open_weak(&server, hub, "mgmt").await;
    let token = server.token(hub, Some("u"));
    let (mut client, _) = Client::start(&server, hub, &token, Format::MessagePack).await;
    client
        .handshake_result()
        .await
        .expect("served by the service");
    eventually("joined", WAIT, || {
        server.node.client_connection_count() == 1
    })
    .await;
    let msg = Msg::invocation("from-mgmt", &[json!(2)]);
    weak.send(BroadcastData {
        excluded_list: Vec::new(),
        payloads: msg.payloads(),
        ext: ext(),
    })
    .await;
    client.expect(&msg).await;
    weak.assert_quiet().await;
}

/// Blazor Server clients speak `blazorpack` (MessagePack framing and encoding under another
/// name); in Default mode the service only relays their bytes, so it must carry them.
#[tokio::test]
async fn blazorpack_clients_are_relayed_in_default_mode() {
    let server = TestServer::start().await;
    let hub = "componenthub";
    let mut app = AppServer::open(&server, hub, "blazor").await;
    let token = server.token(hub, None);
    let negotiated = switchyard_client::negotiate(&server.client_url(hub), &token, 1)
        .await
        .unwrap();
    let id = negotiated.connection_id.clone();
    let mut client = Client::start_url_as(
        &server.ws_url(hub, Some(&negotiated.id_value)),
        &token,
        Format::MessagePack,
        "blazorpack",
    )
    .await;
    let open = app.open_connection().await;
    assert_eq!(open.connection_id, id);
    assert_eq!(open.ext.protocol.as_deref(), Some("blazorpack"));
    assert_eq!(
        app.connection_data(&id).await,
        handshake::encode_request("blazorpack", 1)
    );
    app.send_to(&id, handshake::RESPONSE_OK).await;
    client.handshake_result().await.expect("handshake");

    // Both ways, byte for byte, over binary frames.
    let up = Msg::invocation("StartCircuit", &[json!("x")]).msgpack;
    client.send_raw(&up).await;
    assert_eq!(app.connection_data(&id).await, up);
    let down = Msg::invocation("JS.RenderBatch", &[json!(1)]).msgpack;
    app.send_to(&id, &down[..3]).await;
    app.send_to(&id, &down[3..]).await;
    assert_eq!(
        within("down", WAIT, client.next_frame()).await.unwrap(),
        down
    );
    let multi = Msg::invocation("JS.Other", &[json!(2)]).msgpack;
    app.send(MultiConnectionData {
        connection_list: vec![id.clone()],
        payloads: vec![("blazorpack".into(), multi.clone())],
        ext: ext(),
    })
    .await;
    assert_eq!(
        within("multi", WAIT, client.next_frame()).await.unwrap(),
        multi
    );

    // Closed by the app server: the client gets a Close message it can read.
    app.send(CloseConnection {
        connection_id: id.clone(),
        error_message: "bye".into(),
        headers: Vec::new(),
        ext: ext(),
    })
    .await;
    assert!(client.until_closed().await.is_some(), "Close message");
}

#[tokio::test]
async fn clients_stick_to_the_server_named_in_their_token() {
    let server = TestServer::start_with(default_mode()).await;
    let hub = "chat";
    let mut s1 = AppServer::open(&server, hub, "s1").await;
    let mut s2 = AppServer::open(&server, hub, "s2").await;
    // Preferred (asrs.s.sn without ssticky): every client goes to s2 although s1 is idle.
    for i in 0..3 {
        let token = server.token_with(
            hub,
            &[("asrs.s.sn", "s2"), ("asrs.s.uid", &format!("p{i}"))],
        );
        connect_client(&server, &mut s2, hub, &token, Format::Json).await;
    }
    s1.assert_quiet().await;
    // Preferred but absent: any server.
    let token = server.token_with(hub, &[("asrs.s.sn", "gone")]);
    let (mut client, id) = Client::start(&server, hub, &token, Format::Json).await;
    let on_s1 = tokio::select! {
        open = s1.open_connection() => { assert_eq!(open.connection_id, id); true }
        open = s2.open_connection() => { assert_eq!(open.connection_id, id); false }
    };
    let app = if on_s1 { &mut s1 } else { &mut s2 };
    app.connection_data(&id).await;
    app.send_to(&id, handshake::RESPONSE_OK).await;
    client.handshake_result().await.unwrap();
    // Required and absent: refused with the server named.
    let token = sticky_token(&server, hub, "u", "gone");
    let (mut refused, _) = Client::start(&server, hub, &token, Format::Json).await;
    let error = refused.handshake_result().await.expect_err("refused");
    assert!(error.contains("gone"), "{error}");
}

#[tokio::test]
async fn server_endpoint_http_errors() {
    let server = TestServer::start().await;
    let token = server.server_token("chat", "s1");
    // No hub: 400 (not an auth failure).
    let url = format!("ws://{}/server/", server.addr);
    assert_eq!(
        refused_status(dial_url(&url, Some(&token), Some("s1")).await),
        400
    );
    // A plain GET with a valid token: 400, an upgrade is required.
    let response = reqwest::Client::new()
        .get(format!("http://{}/server/?hub=chat", server.addr))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    // Without the trailing slash too.
    let url = format!("ws://{}/server?hub=chat", server.addr);
    let mut app = AppServer::new(dial_url(&url, Some(&token), Some("s1")).await.unwrap());
    assert_eq!(app.handshake(handshake_request(0)).await.error_message, "");
}

// ---------------------------------------------------------------------------------------
// Review regressions: handshake ordering, cross-hub isolation
// ---------------------------------------------------------------------------------------

/// Broadcasts (from the app server or through the node) made while the app server has not
/// yet answered a client's handshake must not reach that client before its handshake
/// response: the client would read them as a malformed response.
#[tokio::test]
async fn nothing_reaches_a_client_before_its_handshake_response() {
    let server = TestServer::start_with(default_mode()).await;
    let hub = "chat";
    let mut app = AppServer::open(&server, hub, "s1").await;
    let token = server.token(hub, Some("early"));
    for format in [Format::Json, Format::MessagePack] {
        let (mut client, id) = Client::start(&server, hub, &token, format).await;
        app.open_connection().await;
        app.connection_data(&id).await;
        let early = Msg::invocation("early", &[json!(1)]);
        app.send(BroadcastData {
            excluded_list: Vec::new(),
            payloads: early.payloads(),
            ext: ext(),
        })
        .await;
        app.send(UserData {
            user_id: "early".into(),
            payloads: early.payloads(),
            ext: ext(),
        })
        .await;
        server.broadcast(hub, "early", &[json!(2)]);
        app.echo_round_trip().await;
        app.send_to(&id, handshake::RESPONSE_OK).await;
        client.handshake_result().await.expect("handshake");
        let after = Msg::invocation("after", &[json!(3)]);
        app.send(BroadcastData {
            excluded_list: Vec::new(),
            payloads: after.payloads(),
            ext: ext(),
        })
        .await;
        client.expect(&after).await;
        client.close().await;
    }
}

/// A client still waiting for its handshake response that the app server closes, or whose
/// app-server connection is lost, reads the reason as a handshake error, not a Close message.
#[tokio::test]
async fn a_client_awaiting_its_handshake_response_gets_the_reason_as_a_handshake_error() {
    let server = TestServer::start_with(default_mode()).await;
    let mut app = AppServer::open(&server, "chat", "s1").await;
    let token = server.token("chat", None);
    let (mut client, id) = Client::start(&server, "chat", &token, Format::MessagePack).await;
    app.open_connection().await;
    app.connection_data(&id).await;
    app.send(CloseConnection {
        connection_id: id.clone(),
        error_message: "go away".into(),
        headers: Vec::new(),
        ext: Extensions::default(),
    })
    .await;
    assert_eq!(client.handshake_result().await, Err("go away".to_string()));

    let mut lost = AppServer::open(&server, "other", "s2").await;
    let token = server.token("other", None);
    let (mut client, id) = Client::start(&server, "other", &token, Format::Json).await;
    lost.open_connection().await;
    lost.connection_data(&id).await;
    drop(lost);
    let error = client.handshake_result().await.expect_err("refused");
    assert!(error.contains("app server"), "{error}");
    eventually("clients gone", WAIT, || {
        server.node.client_connection_count() == 0
    })
    .await;
}

/// An app server of another hub cannot complete (or hijack) a routed client invocation by
/// reusing its id.
#[tokio::test]
async fn a_completion_from_another_hub_does_not_reach_the_caller() {
    let server = TestServer::start_with(default_mode()).await;
    let hub = "chat";
    let mut a = AppServer::open(&server, hub, "A").await;
    let mut b = AppServer::open(&server, hub, "B").await;
    let mut intruder = AppServer::open(&server, "elsewhere", "X").await;
    let token = sticky_token(&server, hub, "target", "B");
    let (_client, id) = connect_client(&server, &mut b, hub, &token, Format::Json).await;
    let invocation_id = format!("{id}-mgr-1");
    a.send(ClientInvocation {
        invocation_id: invocation_id.clone(),
        connection_id: id.clone(),
        caller_server_id: "A".into(),
        payloads: Msg::invocation("x", &[]).payloads(),
        ext: ext(),
    })
    .await;
    a.take("ServiceMapping", |m| {
        matches!(m, ServiceMessage::ServiceMapping(_)).then_some(())
    })
    .await;
    let completion = |payload: &[u8]| ClientCompletion {
        invocation_id: invocation_id.clone(),
        connection_id: id.clone(),
        caller_server_id: "A".into(),
        protocol: "json".into(),
        payload: Bytes::copy_from_slice(payload),
        ext: ext(),
    };
    intruder.send(completion(b"forged")).await;
    intruder.echo_round_trip().await;
    a.assert_quiet().await;
    let genuine = completion(b"genuine");
    b.send(genuine.clone()).await;
    let received = a
        .take("ClientCompletion", |m| match m {
            ServiceMessage::ClientCompletion(c) => Some(c.clone()),
            _ => None,
        })
        .await;
    assert_eq!(received, genuine);
}

#[tokio::test]
async fn only_the_pinned_app_server_may_write_to_a_client() {
    let server = TestServer::start_with(default_mode()).await;
    let hub = "chat";
    let mut s1 = AppServer::open(&server, hub, "s1").await;
    let mut s2 = AppServer::open(&server, hub, "s2").await;
    let token = sticky_token(&server, hub, "u", "s1");
    let (mut client, id) = connect_client(&server, &mut s1, hub, &token, Format::Json).await;
    // Half a message from another app server must not reach (or corrupt) the client's stream.
    let intruder = Msg::invocation("intruder", &[json!(1)]);
    let bytes = intruder.bytes(Format::Json);
    s2.send(ConnectionData {
        connection_id: id.clone(),
        payload: Bytes::copy_from_slice(&bytes[..bytes.len() / 2]),
        ext: ext(),
    })
    .await;
    let own = Msg::invocation("own", &[json!(2)]);
    s1.send(ConnectionData {
        connection_id: id.clone(),
        payload: own.bytes(Format::Json),
        ext: ext(),
    })
    .await;
    client.expect(&own).await;
    // A whole message from another app server is not delivered either.
    s2.send(ConnectionData {
        connection_id: id.clone(),
        payload: intruder.bytes(Format::Json),
        ext: ext(),
    })
    .await;
    let after = Msg::invocation("after", &[json!(3)]);
    s1.send(ConnectionData {
        connection_id: id,
        payload: after.bytes(Format::Json),
        ext: ext(),
    })
    .await;
    client.expect(&after).await;
}

#[tokio::test]
async fn a_slow_client_is_cut_off_and_its_app_server_told_buffer_full() {
    let mut config = default_mode();
    config.limits.max_pending_bytes_per_connection = 1024;
    let server = TestServer::start_with(config).await;
    let hub = "chat";
    let mut app = AppServer::open(&server, hub, "s1").await;
    let token = sticky_token(&server, hub, "u", "s1");
    let (_client, id) = connect_client(&server, &mut app, hub, &token, Format::Json).await;
    // 200 messages of ~600 bytes in one WebSocket frame: they are queued in one go, far past
    // the 1 KiB budget, faster than the client's writer can drain them.
    let msg = Msg::invocation("bulk", &[json!("x".repeat(600))]);
    let mut frame = Vec::new();
    for _ in 0..200 {
        frame.extend_from_slice(&encoded(&ServiceMessage::MultiConnectionData(
            MultiConnectionData {
                connection_list: vec![id.clone()],
                payloads: msg.payloads(),
                ext: ext(),
            },
        )));
    }
    app.send_bytes(&frame).await;
    let event = app
        .take("a BufferFull event", |m| match m {
            ServiceMessage::ServiceEvent(e) => Some(e.clone()),
            _ => None,
        })
        .await;
    assert_eq!(event.object_type, ServiceEvent::OBJECT_CONNECTION);
    assert_eq!(event.id, id);
    assert_eq!(event.kind, ServiceEvent::KIND_BUFFER_FULL);
    assert!(event.message.contains("slow consumer"), "{}", event.message);
    let close = app
        .take("CloseConnection", |m| match m {
            ServiceMessage::CloseConnection(c) if c.connection_id == id => Some(c.clone()),
            _ => None,
        })
        .await;
    assert!(
        close.error_message.contains("slow consumer"),
        "{}",
        close.error_message
    );
}
