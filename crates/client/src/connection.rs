//! A SignalR client connection over any of the three transports, started the way the
//! official clients start one: negotiate (following redirects), pick the transport, connect
//! with `id=`, hub-protocol handshake.
//!
//! # Shape
//! - [`connect`]: `url` is the hub URL as a user gives it to the official clients
//!   (`http://host/bench`, or the service's `http://host/client/?hub=bench`).
//! - [`Connection`]: send framed hub messages ([`Connection::send_raw`]) and receive message
//!   bodies ([`Connection::next_frame`], cancel-safe).
//! - WebSockets keep no task: the socket lives in the [`Connection`]. Server-Sent Events and
//!   long polling have one reader task each (the event stream, or the poll loop) feeding a
//!   small bounded channel; sends are `POST {url}?id=`.
//! - [`ConnectOptions::local_address`] binds every socket (negotiate, WebSocket, event
//!   stream, polls, sends) to one source address.
//!
//! Frames are split without copying where a transport read holds whole messages; only a
//! message that spans two reads is gathered into a buffer.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{Buf, Bytes, BytesMut};
use futures_util::{SinkExt, StreamExt};
use reqwest::header::{HeaderValue, ACCEPT, CONTENT_TYPE};
use serde_json::Value;
use switchyard_hub_protocol::{
    encode_close, encode_message, handshake, msgpack::read_varint, Format, FrameError,
    FrameSplitter, HubMessage, RECORD_SEPARATOR,
};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Message as WsMessage, Utf8Bytes};
use tokio_tungstenite::WebSocketStream;
use url::Url;

use crate::{decode, ClientError};

/// Negotiate redirects followed before giving up (the JS client's limit).
pub const MAX_REDIRECTS: usize = 100;
/// TCP connect timeout, for HTTP and WebSocket sockets.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Negotiate, send (`POST`) and `DELETE` requests: the JS client's HTTP timeout.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(100);
/// One long poll, above the server's 90 s poll timeout; a poll that times out is re-issued
/// (as the JS client does).
pub const POLL_TIMEOUT: Duration = Duration::from_secs(100);
/// Opening the transport and completing the hub-protocol handshake (the .NET, Java and Go
/// clients' handshake timeout).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(15);
/// How long [`Connection::close`] waits for the server's side of the close.
pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);
/// [`ConnectOptions::max_message_size`] by default (as [`crate::WsClient`]).
pub const DEFAULT_MAX_MESSAGE_SIZE: usize = 64 * 1024 * 1024;

/// tungstenite allocates its read buffer eagerly per socket (128 KiB by default); the
/// benchmark holds tens of thousands of sockets, so reads go through a small one (it grows
/// for a large message).
const WS_READ_BUFFER: usize = 4 * 1024;
/// Transport reads (event-stream events, poll bodies) queued ahead of the reader.
const CHANNEL_CAPACITY: usize = 8;

/// The three SignalR transports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    WebSockets,
    ServerSentEvents,
    LongPolling,
}

impl Transport {
    /// Every transport, in the order negotiate lists them.
    pub const ALL: [Transport; 3] = [
        Transport::WebSockets,
        Transport::ServerSentEvents,
        Transport::LongPolling,
    ];

    /// The name in negotiate's `availableTransports`.
    pub fn name(self) -> &'static str {
        match self {
            Transport::WebSockets => "WebSockets",
            Transport::ServerSentEvents => "ServerSentEvents",
            Transport::LongPolling => "LongPolling",
        }
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Transport::WebSockets => "websockets",
            Transport::ServerSentEvents => "serversentevents",
            Transport::LongPolling => "longpolling",
        })
    }
}

impl FromStr for Transport {
    type Err = String;

    /// `websockets`/`ws`, `serversentevents`/`sse`, `longpolling`/`lp`, any case.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.to_ascii_lowercase().as_str() {
            "websockets" | "ws" => Ok(Transport::WebSockets),
            "serversentevents" | "sse" => Ok(Transport::ServerSentEvents),
            "longpolling" | "lp" => Ok(Transport::LongPolling),
            _ => Err(format!(
                "'{text}' is not a transport (expected websockets|ws, serversentevents|sse or longpolling|lp)"
            )),
        }
    }
}

/// How to connect.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    pub transport: Transport,
    pub format: Format,
    /// Bearer token for negotiate (and everything after it unless a redirect brings its own
    /// `accessToken`, which then replaces it).
    pub access_token: Option<String>,
    /// Source address for every socket. The WebSocket is bound here; HTTP requests go
    /// through [`ConnectOptions::http`] when given (build it with
    /// [`http_client`]`(local_address)` so that it binds too), else through a client built
    /// with that address.
    pub local_address: Option<IpAddr>,
    /// HTTP client for negotiate, the event stream, polls and sends. Share one between
    /// connections: a client per connection means a connection pool per connection.
    pub http: Option<reqwest::Client>,
    /// Largest hub message accepted (body bytes, framing excluded).
    pub max_message_size: usize,
}

impl ConnectOptions {
    pub fn new(transport: Transport, format: Format) -> Self {
        ConnectOptions {
            transport,
            format,
            access_token: None,
            local_address: None,
            http: None,
            max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
        }
    }
}

impl Default for ConnectOptions {
    /// WebSockets, JSON, no token, no bound address.
    fn default() -> Self {
        ConnectOptions::new(Transport::WebSockets, Format::Json)
    }
}

/// An HTTP client for SignalR: pooled keep-alive connections, `TCP_NODELAY`, no proxy,
/// [`CONNECT_TIMEOUT`], sockets bound to `local_address` when given. No overall request
/// timeout (event streams and polls are long); requests that should end set their own.
pub fn http_client(local_address: Option<IpAddr>) -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .tcp_nodelay(true)
        .connect_timeout(CONNECT_TIMEOUT)
        .pool_idle_timeout(Duration::from_secs(90))
        // A load generator negotiating thousands of connections at once would otherwise keep
        // as many idle keep-alive sockets open at the server, each a file descriptor there.
        .pool_max_idle_per_host(64)
        .local_address(local_address)
        .build()
        .expect("an HTTP client with these settings always builds")
}

/// One started SignalR connection: negotiated, transport open, handshake accepted.
pub struct Connection {
    connection_id: String,
    format: Format,
    transport: Transport,
    frames: Reassembler,
    io: Io,
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("connection_id", &self.connection_id)
            .field("transport", &self.transport)
            .field("format", &self.format)
            .finish_non_exhaustive()
    }
}

enum Io {
    Ws(WebSocketStream<TcpStream>),
    Http(HttpIo),
}

/// Server-Sent Events or long polling.
struct HttpIo {
    client: reqwest::Client,
    /// The hub URL with `id=`: polls, sends and the DELETE go here.
    url: Url,
    token: Option<String>,
    /// Filled by the reader task; closed when the stream or the polling ended.
    incoming: mpsc::Receiver<Result<Bytes, ClientError>>,
    reader: AbortOnDrop,
}

/// The reader task ends with its connection.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Negotiates (following redirects), opens `options.transport` and completes the
/// handshake for `options.format`.
pub async fn connect(url: &str, options: &ConnectOptions) -> Result<Connection, ClientError> {
    if options.transport == Transport::ServerSentEvents && options.format.is_binary() {
        return Err(ClientError::Protocol(format!(
            "the '{}' protocol cannot be used over ServerSentEvents: the transport carries text only (use WebSockets or LongPolling)",
            options.format.name()
        )));
    }
    let client = options
        .http
        .clone()
        .unwrap_or_else(|| http_client(options.local_address));
    let negotiated = negotiate(&client, url, options.access_token.clone()).await?;
    negotiated.check_offers(options.transport, options.format)?;
    let mut target = negotiated.url.clone();
    if !negotiated.id.is_empty() {
        target.query_pairs_mut().append_pair("id", &negotiated.id);
    }
    let opening = async {
        let io = match options.transport {
            Transport::WebSockets => Io::Ws(
                open_websocket(
                    &target,
                    negotiated.token.as_deref(),
                    options.local_address,
                    options.max_message_size,
                )
                .await?,
            ),
            Transport::ServerSentEvents => {
                Io::Http(open_event_stream(client, target, negotiated.token.clone()).await?)
            }
            Transport::LongPolling => {
                Io::Http(start_polling(client, target, negotiated.token.clone()).await?)
            }
        };
        let mut connection = Connection {
            connection_id: negotiated.connection_id.clone(),
            format: options.format,
            transport: options.transport,
            frames: Reassembler::new(options.format, options.max_message_size),
            io,
        };
        connection.handshake().await?;
        Ok(connection)
    };
    tokio::time::timeout(HANDSHAKE_TIMEOUT, opening)
        .await
        .unwrap_or_else(|_| {
            Err(ClientError::Protocol(format!(
                "the {} transport did not open and complete the handshake within {} s",
                options.transport.name(),
                HANDSHAKE_TIMEOUT.as_secs()
            )))
        })
}

impl Connection {
    /// The connection id negotiate returned (empty if the server gave none).
    pub fn connection_id(&self) -> &str {
        &self.connection_id
    }

    pub fn format(&self) -> Format {
        self.format
    }

    pub fn transport(&self) -> Transport {
        self.transport
    }

    /// Sends one or more complete framed hub messages (JSON with the record separator,
    /// MessagePack with the length prefix): one WebSocket message (text for JSON, binary for
    /// MessagePack) or one `POST`.
    pub async fn send_raw(&mut self, frame: Bytes) -> Result<(), ClientError> {
        match &mut self.io {
            Io::Ws(socket) => {
                let message = match self.format {
                    Format::Json => WsMessage::Text(Utf8Bytes::try_from(frame).map_err(|_| {
                        ClientError::Protocol("a JSON hub message must be UTF-8".into())
                    })?),
                    Format::MessagePack => WsMessage::Binary(frame),
                };
                socket.send(message).await?;
                Ok(())
            }
            Io::Http(http) => http.post(self.format, frame).await,
        }
    }

    /// Encodes and sends one hub message.
    pub async fn send(&mut self, message: &HubMessage<Value>) -> Result<(), ClientError> {
        self.send_raw(encode_message(self.format, message)).await
    }

    /// The body of the next hub message (no separator, no length prefix); pings included.
    ///
    /// Cancel-safe: dropping the future before it completes loses nothing; the next call
    /// carries on where this one stopped.
    pub async fn next_frame(&mut self) -> Result<Bytes, ClientError> {
        loop {
            if let Some(body) = self.frames.take_frame()? {
                return Ok(body);
            }
            // The only await: whatever it yields is stored before the next one.
            let chunk = self.io.read().await?;
            self.frames.push(chunk);
        }
    }

    /// The next hub message, decoded (MessagePack values as JSON values). Cancel-safe.
    pub async fn next(&mut self) -> Result<HubMessage<Value>, ClientError> {
        let body = self.next_frame().await?;
        decode(self.format, &body)
    }

    /// Ends the connection: a WebSocket close (1000); for long polling a `DELETE`; for
    /// Server-Sent Events (which has no DELETE: the service answers it 400, like ASP.NET)
    /// a hub Close message, then the stream is dropped. Errors are ignored.
    pub async fn close(self) {
        match self.io {
            Io::Ws(mut socket) => {
                let frame = CloseFrame {
                    code: CloseCode::Normal,
                    reason: Utf8Bytes::from_static(""),
                };
                if socket.close(Some(frame)).await.is_ok() {
                    // The server answers with its close frame, then ends TCP.
                    let _ = tokio::time::timeout(CLOSE_TIMEOUT, async {
                        while let Some(Ok(_)) = socket.next().await {}
                    })
                    .await;
                }
            }
            Io::Http(http) => {
                let HttpIo {
                    client,
                    url,
                    token,
                    incoming,
                    mut reader,
                } = http;
                // The reader stops at its next delivery instead of waiting for room.
                drop(incoming);
                match self.transport {
                    Transport::LongPolling => {
                        let request = authorized(client.delete(url), token.as_deref());
                        let _ = request.timeout(CLOSE_TIMEOUT).send().await;
                        // The pending poll is answered 204 and the loop ends.
                        let _ = tokio::time::timeout(CLOSE_TIMEOUT, &mut reader.0).await;
                    }
                    _ => {
                        let close = encode_close(self.format, None, false);
                        let request = authorized(client.post(url), token.as_deref())
                            .header(CONTENT_TYPE, content_type(self.format))
                            .body(close);
                        let _ = request.timeout(CLOSE_TIMEOUT).send().await;
                    }
                }
            }
        }
    }

    /// Sends the handshake request and reads the response; bytes after it stay buffered.
    async fn handshake(&mut self) -> Result<(), ClientError> {
        let request = handshake::encode_request(self.format.name(), 1);
        self.send_raw(Bytes::from(request)).await?;
        loop {
            if let Some(error) = self.frames.take_handshake_response()? {
                return match error {
                    Some(error) => Err(ClientError::HandshakeRefused(error)),
                    None => Ok(()),
                };
            }
            let chunk = self.io.read().await?;
            self.frames.push(chunk);
        }
    }
}

/// Cuts the server's byte stream, as the transport delivers it, into message bodies.
struct Reassembler {
    format: Format,
    max_message_size: usize,
    /// What is left of the last transport read, all of it unsplit.
    pending: Bytes,
    /// A message that spans reads (and whatever followed it in the same reads). Only used
    /// while `pending` is empty.
    partial: BytesMut,
    /// Leading bytes of `partial` known to hold no record separator.
    scanned: usize,
}

impl Reassembler {
    fn new(format: Format, max_message_size: usize) -> Self {
        Reassembler {
            format,
            max_message_size,
            pending: Bytes::new(),
            partial: BytesMut::new(),
            scanned: 0,
        }
    }

    /// Stores one transport read.
    fn push(&mut self, chunk: Bytes) {
        if chunk.is_empty() {
            return;
        }
        if self.partial.is_empty() && self.pending.is_empty() {
            self.pending = chunk;
        } else {
            // `take_frame` moves an unsplittable `pending` into `partial`, so a read that
            // continues a message always lands here.
            self.partial.extend_from_slice(&chunk);
        }
    }

    /// The handshake response's error (`Some(None)`: accepted), once it is complete.
    fn take_handshake_response(&mut self) -> Result<Option<Option<String>>, ClientError> {
        if !self.pending.is_empty() {
            self.partial.extend_from_slice(&self.pending);
            self.pending = Bytes::new();
        }
        let parsed = handshake::parse_response(&self.partial)
            .map_err(|e| ClientError::Protocol(format!("handshake response: {e}")))?;
        let Some((error, consumed)) = parsed else {
            if self.partial.len() > self.max_message_size {
                return Err(ClientError::Protocol(
                    "the handshake response exceeds the maximum message size".into(),
                ));
            }
            return Ok(None);
        };
        self.partial.advance(consumed);
        if self.partial.is_empty() {
            self.partial = BytesMut::new();
        }
        Ok(Some(error))
    }

    /// Takes the next complete message body off what has been read, if there is one.
    fn take_frame(&mut self) -> Result<Option<Bytes>, ClientError> {
        if self.partial.is_empty() {
            if self.pending.is_empty() {
                return Ok(None);
            }
            match locate(self.format, self.max_message_size, &self.pending) {
                Ok(Some((start, end, next))) => {
                    let body = self.pending.slice(start..end);
                    if next == self.pending.len() {
                        // Let go of the transport's buffer.
                        self.pending = Bytes::new();
                    } else {
                        self.pending.advance(next);
                    }
                    return Ok(Some(body));
                }
                Ok(None) => {
                    self.partial.extend_from_slice(&self.pending);
                    self.pending = Bytes::new();
                    self.scanned = 0;
                    return Ok(None);
                }
                Err(e) => return Err(ClientError::Protocol(e.to_string())),
            }
        }
        let splitter = FrameSplitter::new(self.format, self.max_message_size);
        let frame = splitter
            .next_frame_resuming(&mut self.partial, &mut self.scanned)
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        if self.partial.is_empty() {
            self.partial = BytesMut::new();
            self.scanned = 0;
        }
        Ok(frame.map(|frame| frame.body_bytes()))
    }
}

/// Where the first message in `buf` is: `(body start, body end, start of the next)`, or
/// `None` if it is not complete yet.
fn locate(
    format: Format,
    max_message_size: usize,
    buf: &[u8],
) -> Result<Option<(usize, usize, usize)>, FrameError> {
    let too_large = FrameError::TooLarge {
        limit: max_message_size,
    };
    match format {
        Format::Json => {
            let window = buf.len().min(max_message_size.saturating_add(1));
            match buf[..window].iter().position(|&b| b == RECORD_SEPARATOR) {
                Some(end) => Ok(Some((0, end, end + 1))),
                None if buf.len() > max_message_size => Err(too_large),
                None => Ok(None),
            }
        }
        Format::MessagePack => {
            let Some((len, prefix)) = read_varint(buf)? else {
                return Ok(None);
            };
            let len = len as usize;
            if len > max_message_size {
                return Err(too_large);
            }
            if buf.len() - prefix < len {
                return Ok(None);
            }
            Ok(Some((prefix, prefix + len, prefix + len)))
        }
    }
}

impl Io {
    /// The next piece of the server's byte stream. Cancel-safe.
    async fn read(&mut self) -> Result<Bytes, ClientError> {
        match self {
            Io::Ws(socket) => loop {
                match socket.next().await {
                    Some(Ok(WsMessage::Text(text))) => return Ok(Bytes::from(text)),
                    Some(Ok(WsMessage::Binary(data))) => return Ok(data),
                    Some(Ok(WsMessage::Close(_))) | None => return Err(ClientError::Closed),
                    // Pings are answered by tungstenite.
                    Some(Ok(_)) => continue,
                    Some(Err(e)) => return Err(e.into()),
                }
            },
            Io::Http(http) => match http.incoming.recv().await {
                Some(result) => result,
                None => Err(ClientError::Closed),
            },
        }
    }
}

impl HttpIo {
    /// `POST {url}?id=` with the raw bytes.
    async fn post(&self, format: Format, body: Bytes) -> Result<(), ClientError> {
        let request = authorized(self.client.post(self.url.clone()), self.token.as_deref())
            .header(CONTENT_TYPE, content_type(format))
            .timeout(REQUEST_TIMEOUT)
            .body(body);
        let response = request.send().await?;
        let status = response.status().as_u16();
        // Read to the end so that the connection goes back to the pool.
        let text = response.text().await?;
        if status != 200 {
            return Err(unexpected("send (POST)", status, &text));
        }
        Ok(())
    }
}

fn content_type(format: Format) -> HeaderValue {
    HeaderValue::from_static(match format {
        Format::Json => "text/plain;charset=UTF-8",
        Format::MessagePack => "application/octet-stream",
    })
}

fn authorized(request: reqwest::RequestBuilder, token: Option<&str>) -> reqwest::RequestBuilder {
    match token {
        Some(token) => request.bearer_auth(token),
        None => request,
    }
}

fn unexpected(what: &str, status: u16, body: &str) -> ClientError {
    ClientError::Protocol(format!("{what} answered HTTP {status}: {}", body.trim()))
}

// ---- negotiate ----

/// The outcome of negotiate after any redirects.
struct Negotiation {
    /// The hub URL the connection is made to (the last redirect's, or the one given).
    url: Url,
    token: Option<String>,
    connection_id: String,
    /// `connectionToken` (v1), else the connection id.
    id: String,
    /// `(transport, transfer formats)` as listed.
    transports: Vec<(String, Vec<String>)>,
}

impl Negotiation {
    fn check_offers(&self, transport: Transport, format: Format) -> Result<(), ClientError> {
        let Some((_, formats)) = self
            .transports
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(transport.name()))
        else {
            let offered: Vec<&str> = self.transports.iter().map(|(n, _)| n.as_str()).collect();
            return Err(ClientError::Protocol(format!(
                "the server does not offer the {} transport (it offers: {})",
                transport.name(),
                if offered.is_empty() {
                    "none".to_string()
                } else {
                    offered.join(", ")
                }
            )));
        };
        let needed = if format.is_binary() { "Binary" } else { "Text" };
        if !formats.iter().any(|f| f.eq_ignore_ascii_case(needed)) {
            return Err(ClientError::Protocol(format!(
                "the server does not offer the {needed} transfer format (protocol '{}') over {}",
                format.name(),
                transport.name()
            )));
        }
        Ok(())
    }
}

/// `POST {url}/negotiate?…&negotiateVersion=1`, then again at each redirect's `url` with its
/// `accessToken`, up to [`MAX_REDIRECTS`] negotiates in all.
async fn negotiate(
    client: &reqwest::Client,
    url: &str,
    mut token: Option<String>,
) -> Result<Negotiation, ClientError> {
    let mut url = parse_http_url(url)?;
    for _ in 0..MAX_REDIRECTS {
        let request =
            authorized(client.post(negotiate_url(&url)), token.as_deref()).timeout(REQUEST_TIMEOUT);
        let response = request.send().await?;
        let status = response.status().as_u16();
        let body = response.text().await?;
        if status != 200 {
            return Err(ClientError::Negotiate { status, body });
        }
        let raw: Value = serde_json::from_str(&body)
            .map_err(|e| ClientError::Protocol(format!("negotiate response: {e}")))?;
        if let Some(error) = raw.get("error").and_then(Value::as_str) {
            return Err(ClientError::Negotiate {
                status,
                body: error.to_string(),
            });
        }
        if raw.get("ProtocolVersion").is_some() {
            return Err(ClientError::Protocol(
                "the server is an ASP.NET SignalR (not ASP.NET Core SignalR) server".into(),
            ));
        }
        if let Some(next) = raw.get("url").and_then(Value::as_str) {
            url = url
                .join(next)
                .map_err(|e| ClientError::Protocol(format!("negotiate redirect '{next}': {e}")))
                .and_then(check_http)?;
            if let Some(next_token) = raw.get("accessToken").and_then(Value::as_str) {
                token = Some(next_token.to_string());
            }
            continue;
        }
        let connection_id = raw["connectionId"].as_str().unwrap_or_default().to_string();
        let version = raw["negotiateVersion"].as_i64().unwrap_or(0);
        let id = match raw.get("connectionToken").and_then(Value::as_str) {
            Some(connection_token) if version >= 1 => connection_token.to_string(),
            _ => connection_id.clone(),
        };
        let transports = raw["availableTransports"]
            .as_array()
            .map(|list| {
                list.iter()
                    .filter_map(|t| {
                        let name = t["transport"].as_str()?.to_string();
                        let formats = t["transferFormats"]
                            .as_array()
                            .map(|f| {
                                f.iter()
                                    .filter_map(Value::as_str)
                                    .map(str::to_string)
                                    .collect()
                            })
                            .unwrap_or_default();
                        Some((name, formats))
                    })
                    .collect()
            })
            .unwrap_or_default();
        return Ok(Negotiation {
            url,
            token,
            connection_id,
            id,
            transports,
        });
    }
    Err(ClientError::Protocol(format!(
        "Negotiate redirection limit exceeded ({MAX_REDIRECTS} negotiate requests)."
    )))
}

fn parse_http_url(text: &str) -> Result<Url, ClientError> {
    Url::parse(text)
        .map_err(|e| ClientError::Protocol(format!("hub URL '{text}': {e}")))
        .and_then(check_http)
}

fn check_http(url: Url) -> Result<Url, ClientError> {
    match url.scheme() {
        "http" | "https" => Ok(url),
        other => Err(ClientError::Protocol(format!(
            "hub URL '{url}': expected http or https, not {other}"
        ))),
    }
}

/// The path gets `/negotiate` (no doubled `/`), the query is kept and gets
/// `negotiateVersion=1` unless it names a version already.
fn negotiate_url(hub: &Url) -> Url {
    let mut url = hub.clone();
    url.set_fragment(None);
    let path = format!("{}/negotiate", hub.path().trim_end_matches('/'));
    url.set_path(&path);
    if !url.query_pairs().any(|(k, _)| k == "negotiateVersion") {
        url.query_pairs_mut().append_pair("negotiateVersion", "1");
    }
    url
}

// ---- WebSockets ----

async fn open_websocket(
    target: &Url,
    token: Option<&str>,
    local_address: Option<IpAddr>,
    max_message_size: usize,
) -> Result<WebSocketStream<TcpStream>, ClientError> {
    let mut url = target.clone();
    url.set_fragment(None);
    if url.scheme() == "https" {
        return Err(ClientError::Protocol(
            "WebSockets over TLS (wss://) is not supported by this client".into(),
        ));
    }
    url.set_scheme("ws")
        .map_err(|()| ClientError::Protocol(format!("cannot make a ws:// URL of '{url}'")))?;
    let stream = tcp_connect(&url, local_address)
        .await
        .map_err(|e| ClientError::WebSocket(e.into()))?;
    let mut request = url.as_str().into_client_request()?;
    if let Some(token) = token {
        let value = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| ClientError::Protocol("the access token is not a header value".into()))?;
        request.headers_mut().insert("authorization", value);
    }
    let config = WebSocketConfig::default()
        .read_buffer_size(WS_READ_BUFFER)
        // Each message is written at once (a send flushes anyway).
        .write_buffer_size(0)
        .max_message_size(Some(max_message_size.max(DEFAULT_MAX_MESSAGE_SIZE)));
    let (socket, _) =
        tokio_tungstenite::client_async_with_config(request, stream, Some(config)).await?;
    Ok(socket)
}

/// A TCP connection to `url`'s host, from `local_address` if given, without Nagle.
async fn tcp_connect(url: &Url, local_address: Option<IpAddr>) -> std::io::Result<TcpStream> {
    use std::io::{Error, ErrorKind};
    let port = url
        .port_or_known_default()
        .ok_or_else(|| Error::new(ErrorKind::InvalidInput, "the URL has no port"))?;
    let addrs: Vec<SocketAddr> = match url.host() {
        Some(url::Host::Ipv4(ip)) => vec![SocketAddr::new(ip.into(), port)],
        Some(url::Host::Ipv6(ip)) => vec![SocketAddr::new(ip.into(), port)],
        Some(url::Host::Domain(name)) => tokio::net::lookup_host((name, port)).await?.collect(),
        None => return Err(Error::new(ErrorKind::InvalidInput, "the URL has no host")),
    };
    let mut last_error = None;
    for addr in addrs {
        if local_address.is_some_and(|local| local.is_ipv4() != addr.is_ipv4()) {
            continue;
        }
        let socket = if addr.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        if let Some(local) = local_address {
            socket.bind(SocketAddr::new(local, 0))?;
        }
        match tokio::time::timeout(CONNECT_TIMEOUT, socket.connect(addr)).await {
            Ok(Ok(stream)) => {
                stream.set_nodelay(true)?;
                return Ok(stream);
            }
            Ok(Err(e)) => last_error = Some(e),
            Err(_) => {
                last_error = Some(Error::new(
                    ErrorKind::TimedOut,
                    format!("connecting to {addr} timed out"),
                ))
            }
        }
    }
    Err(last_error.unwrap_or_else(|| {
        Error::new(
            ErrorKind::AddrNotAvailable,
            format!(
                "no address of {} can be reached from {}",
                url.host_str().unwrap_or_default(),
                local_address.map(|a| a.to_string()).unwrap_or_default()
            ),
        )
    }))
}

// ---- Server-Sent Events ----

/// `GET {url}?id=` with `Accept: text/event-stream`; a task turns events into reads.
async fn open_event_stream(
    client: reqwest::Client,
    url: Url,
    token: Option<String>,
) -> Result<HttpIo, ClientError> {
    let request = authorized(client.get(url.clone()), token.as_deref())
        .header(ACCEPT, HeaderValue::from_static("text/event-stream"));
    let response = request.send().await?;
    let status = response.status().as_u16();
    if status != 200 {
        let body = response.text().await.unwrap_or_default();
        return Err(unexpected("the event stream (GET)", status, &body));
    }
    let (tx, incoming) = mpsc::channel(CHANNEL_CAPACITY);
    let reader = AbortOnDrop(tokio::spawn(read_events(response, tx)));
    Ok(HttpIo {
        client,
        url,
        token,
        incoming,
        reader,
    })
}

async fn read_events(
    mut response: reqwest::Response,
    tx: mpsc::Sender<Result<Bytes, ClientError>>,
) {
    let mut parser = EventParser::default();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                parser.feed(&chunk);
                while let Some(data) = parser.events.pop_front() {
                    if tx.send(Ok(data)).await.is_err() {
                        return;
                    }
                }
            }
            // The server ended the stream: the channel closes, reads see `Closed`.
            Ok(None) => return,
            Err(e) => {
                let _ = tx.send(Err(e.into())).await;
                return;
            }
        }
    }
}

/// The `text/event-stream` format, as far as SignalR uses it: `data:` lines (joined with
/// `\n`), comments, blank line ends an event; other fields are ignored.
#[derive(Default)]
struct EventParser {
    /// An incomplete line.
    line: BytesMut,
    /// The data of the event being read.
    data: BytesMut,
    has_data: bool,
    /// Complete events' data.
    events: std::collections::VecDeque<Bytes>,
}

impl EventParser {
    fn feed(&mut self, mut chunk: &[u8]) {
        while let Some(end) = chunk.iter().position(|&b| b == b'\n') {
            if self.line.is_empty() {
                self.line_done(&chunk[..end]);
            } else {
                self.line.extend_from_slice(&chunk[..end]);
                let line = std::mem::take(&mut self.line);
                self.line_done(&line);
            }
            chunk = &chunk[end + 1..];
        }
        self.line.extend_from_slice(chunk);
    }

    fn line_done(&mut self, line: &[u8]) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            if self.has_data && !self.data.is_empty() {
                self.events.push_back(self.data.split().freeze());
            }
            self.data.clear();
            self.has_data = false;
            return;
        }
        if line[0] == b':' {
            return;
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        if field == b"data" {
            if self.has_data {
                self.data.extend_from_slice(b"\n");
            }
            self.data.extend_from_slice(value);
            self.has_data = true;
        }
    }
}

// ---- long polling ----

/// The first poll (answered at once: it starts the transport), then a task that polls.
async fn start_polling(
    client: reqwest::Client,
    url: Url,
    token: Option<String>,
) -> Result<HttpIo, ClientError> {
    let response = authorized(client.get(poll_url(&url)), token.as_deref())
        .timeout(REQUEST_TIMEOUT)
        .send()
        .await?;
    let status = response.status().as_u16();
    let body = response.bytes().await?;
    if status != 200 {
        return Err(unexpected(
            "the first poll (GET)",
            status,
            &String::from_utf8_lossy(&body),
        ));
    }
    let (tx, incoming) = mpsc::channel(CHANNEL_CAPACITY);
    if !body.is_empty() {
        let _ = tx.try_send(Ok(body));
    }
    let reader = AbortOnDrop(tokio::spawn(poll(
        client.clone(),
        url.clone(),
        token.clone(),
        tx,
    )));
    Ok(HttpIo {
        client,
        url,
        token,
        incoming,
        reader,
    })
}

/// Polls until the server answers 204 (closed), the connection is dropped, or an error.
async fn poll(
    client: reqwest::Client,
    url: Url,
    token: Option<String>,
    tx: mpsc::Sender<Result<Bytes, ClientError>>,
) {
    loop {
        let request =
            authorized(client.get(poll_url(&url)), token.as_deref()).timeout(POLL_TIMEOUT);
        let result = match request.send().await {
            Ok(response) => {
                let status = response.status().as_u16();
                match response.bytes().await {
                    Ok(body) => Ok((status, body)),
                    Err(e) => Err(e),
                }
            }
            Err(e) => Err(e),
        };
        let delivery = match result {
            Ok((200, body)) if body.is_empty() => continue,
            Ok((200, body)) => Ok(body),
            Ok((204, _)) => return,
            Ok((status, body)) => Err(unexpected(
                "a poll (GET)",
                status,
                &String::from_utf8_lossy(&body),
            )),
            // Nothing came within our own poll timeout: poll again.
            Err(e) if e.is_timeout() => continue,
            Err(e) => Err(e.into()),
        };
        let failed = delivery.is_err();
        if tx.send(delivery).await.is_err() || failed {
            return;
        }
    }
}

/// The poll URL with the clients' cache-buster `_=<epoch ms>`.
fn poll_url(url: &Url) -> Url {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let mut url = url.clone();
    url.query_pairs_mut().append_pair("_", &ms.to_string());
    url
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transport_names() {
        for (text, transport) in [
            ("websockets", Transport::WebSockets),
            ("WS", Transport::WebSockets),
            ("ServerSentEvents", Transport::ServerSentEvents),
            ("sse", Transport::ServerSentEvents),
            ("LongPolling", Transport::LongPolling),
            ("lp", Transport::LongPolling),
        ] {
            assert_eq!(text.parse::<Transport>(), Ok(transport));
        }
        assert!("http".parse::<Transport>().is_err());
        assert_eq!(Transport::ServerSentEvents.to_string(), "serversentevents");
        assert_eq!(Transport::LongPolling.name(), "LongPolling");
        for t in Transport::ALL {
            assert_eq!(t.to_string().parse::<Transport>(), Ok(t));
        }
    }

    #[test]
    fn negotiate_urls() {
        let cases = [
            (
                "http://127.0.0.1:5050/bench",
                "http://127.0.0.1:5050/bench/negotiate?negotiateVersion=1",
            ),
            (
                "http://127.0.0.1:8080/client/?hub=bench",
                "http://127.0.0.1:8080/client/negotiate?hub=bench&negotiateVersion=1",
            ),
            (
                "http://h/client/?hub=a&asrs.op=%2Fa&negotiateVersion=0",
                "http://h/client/negotiate?hub=a&asrs.op=%2Fa&negotiateVersion=0",
            ),
        ];
        for (hub, expected) in cases {
            assert_eq!(negotiate_url(&Url::parse(hub).unwrap()).as_str(), expected);
        }
    }

    #[test]
    fn event_parser() {
        let mut parser = EventParser::default();
        let stream = b":\r\ndata: {\"type\":6}\x1e\r\n\r\ndata: a\r\ndata: b\r\n\r\n\r\nevent: x\ndata:c\n\n";
        // Byte by byte: lines and events may be cut anywhere.
        for b in stream.iter() {
            parser.feed(std::slice::from_ref(b));
        }
        let events: Vec<Bytes> = parser.events.drain(..).collect();
        assert_eq!(
            events,
            [
                Bytes::from_static(b"{\"type\":6}\x1e"),
                Bytes::from_static(b"a\nb"),
                Bytes::from_static(b"c"),
            ]
        );
    }

    /// Every way of cutting a stream of messages into three reads yields the same bodies.
    #[test]
    fn reassembly_across_reads() {
        let json: Vec<Bytes> = [
            "{\"type\":6}",
            "{\"type\":1,\"target\":\"x\",\"arguments\":[]}",
            "{}",
        ]
        .iter()
        .map(|b| Bytes::from(b.to_string()))
        .collect();
        let msgpack: Vec<Bytes> = [&b"\x91\x06"[..], &[0xa5; 200][..], b"\x90"]
            .iter()
            .map(|b| Bytes::copy_from_slice(b))
            .collect();
        for (format, bodies) in [(Format::Json, json), (Format::MessagePack, msgpack)] {
            let mut stream = Vec::new();
            for body in &bodies {
                match format {
                    Format::Json => {
                        stream.extend_from_slice(body);
                        stream.push(RECORD_SEPARATOR);
                    }
                    Format::MessagePack => {
                        switchyard_hub_protocol::msgpack::write_varint(body.len(), &mut stream);
                        stream.extend_from_slice(body);
                    }
                }
            }
            for a in 0..=stream.len() {
                for b in a..=stream.len() {
                    let mut frames = Reassembler::new(format, 1024);
                    let mut out = Vec::new();
                    for piece in [&stream[..a], &stream[a..b], &stream[b..]] {
                        frames.push(Bytes::copy_from_slice(piece));
                        while let Some(body) = frames.take_frame().unwrap() {
                            out.push(body);
                        }
                    }
                    assert_eq!(out, bodies, "{format:?} cut at {a} and {b}");
                    assert!(frames.pending.is_empty() && frames.partial.is_empty());
                }
            }
        }
    }

    #[test]
    fn handshake_response_then_messages() {
        let mut frames = Reassembler::new(Format::Json, 1024);
        frames.push(Bytes::from_static(b"{}"));
        assert_eq!(frames.take_handshake_response().unwrap(), None);
        frames.push(Bytes::from_static(b"\x1e{\"type\":6}\x1e{\"ty"));
        assert_eq!(frames.take_handshake_response().unwrap(), Some(None));
        assert_eq!(
            frames.take_frame().unwrap(),
            Some(Bytes::from_static(b"{\"type\":6}"))
        );
        assert_eq!(frames.take_frame().unwrap(), None);
        frames.push(Bytes::from_static(b"pe\":6}\x1e"));
        assert_eq!(
            frames.take_frame().unwrap(),
            Some(Bytes::from_static(b"{\"type\":6}"))
        );
        let mut refused = Reassembler::new(Format::Json, 1024);
        refused.push(Bytes::from_static(b"{\"error\":\"no\"}\x1e"));
        assert_eq!(
            refused.take_handshake_response().unwrap(),
            Some(Some("no".to_string()))
        );
    }

    #[test]
    fn locating_frames() {
        assert_eq!(locate(Format::Json, 10, b"{}\x1e{"), Ok(Some((0, 2, 3))));
        assert_eq!(locate(Format::Json, 10, b"{}"), Ok(None));
        assert!(locate(Format::Json, 2, b"{}}").is_err());
        assert_eq!(
            locate(Format::MessagePack, 10, b"\x02ab\x01"),
            Ok(Some((1, 3, 3)))
        );
        assert_eq!(locate(Format::MessagePack, 10, b"\x03ab"), Ok(None));
        assert_eq!(locate(Format::MessagePack, 10, b""), Ok(None));
        assert!(locate(Format::MessagePack, 2, b"\x03abc").is_err());
    }
}
