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
//! # Layout
//! - here: [`Connection`], [`connect`], [`connect_direct`], options, the transport reads.
//! - `negotiate`: negotiate with redirects (also [`negotiate`] for one request).
//! - `websocket`, `sse`, `longpoll`: one file per transport.
//! - `reassemble`: the byte stream cut into message bodies.

mod longpoll;
mod negotiate;
mod reassemble;
mod sse;
mod websocket;

pub use negotiate::{negotiate, Negotiated};

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use reqwest::header::{HeaderValue, CONTENT_TYPE};
use serde_json::Value;
use switchyard_hub_protocol::{encode_close, encode_message, handshake, Format, HubMessage};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{Message as WsMessage, Utf8Bytes};
use tokio_tungstenite::WebSocketStream;
use url::Url;

use crate::{decode, ClientError};
use reassemble::Reassembler;

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
        // Below the service's idle keep-alive limit (timeouts.request_header_timeout, 10 s):
        // a pooled connection the server is closing at the moment of reuse fails the
        // request ("connection closed before message completed"), and a POST such as
        // negotiate is not retried.
        .pool_idle_timeout(Duration::from_secs(5))
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
pub(super) struct HttpIo {
    client: reqwest::Client,
    /// The hub URL with `id=`: polls, sends and the DELETE go here.
    url: Url,
    token: Option<String>,
    /// Filled by the reader task; closed when the stream or the polling ended.
    incoming: mpsc::Receiver<Result<Bytes, ClientError>>,
    reader: AbortOnDrop,
}

/// The reader task ends with its connection.
pub(super) struct AbortOnDrop(JoinHandle<()>);

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
    let negotiated =
        negotiate::negotiate_following(&client, url, options.access_token.clone()).await?;
    negotiated.check_offers(options.transport, options.format)?;
    let mut target = negotiated.url.clone();
    if !negotiated.id_value.is_empty() {
        target
            .query_pairs_mut()
            .append_pair("id", &negotiated.id_value);
    }
    let opening = async {
        let io = match options.transport {
            Transport::WebSockets => Io::Ws(
                websocket::open(
                    &target,
                    negotiated.token.as_deref(),
                    options.local_address,
                    options.max_message_size,
                )
                .await?,
            ),
            Transport::ServerSentEvents => {
                Io::Http(sse::open(client, target, negotiated.token.clone()).await?)
            }
            Transport::LongPolling => {
                Io::Http(longpoll::start(client, target, negotiated.token.clone()).await?)
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

/// Connects a WebSocket straight to `url` (`ws://` or `http://…/client/?hub=…[&id=…]`)
/// without negotiating (the official clients' `skipNegotiation`), then completes the
/// handshake for `format`.
pub async fn connect_direct(
    url: &str,
    token: Option<&str>,
    format: Format,
) -> Result<Connection, ClientError> {
    let mut target =
        Url::parse(url).map_err(|e| ClientError::Protocol(format!("URL '{url}': {e}")))?;
    if target.scheme() == "ws" {
        target
            .set_scheme("http")
            .map_err(|()| ClientError::Protocol(format!("cannot use '{url}'")))?;
    }
    let target = negotiate::check_http(target)?;
    let connection_id = target
        .query_pairs()
        .find(|(key, _)| key == "id")
        .map(|(_, value)| value.into_owned())
        .unwrap_or_default();
    let socket = websocket::open(&target, token, None, DEFAULT_MAX_MESSAGE_SIZE).await?;
    let mut connection = Connection {
        connection_id,
        format,
        transport: Transport::WebSockets,
        frames: Reassembler::new(format, DEFAULT_MAX_MESSAGE_SIZE),
        io: Io::Ws(socket),
    };
    tokio::time::timeout(HANDSHAKE_TIMEOUT, connection.handshake())
        .await
        .unwrap_or_else(|_| {
            Err(ClientError::Protocol(format!(
                "the handshake did not complete within {} s",
                HANDSHAKE_TIMEOUT.as_secs()
            )))
        })?;
    Ok(connection)
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

    /// The next message that is not a Ping.
    pub async fn next_non_ping(&mut self) -> Result<HubMessage<Value>, ClientError> {
        loop {
            let message = self.next().await?;
            if !matches!(message, HubMessage::Ping) {
                return Ok(message);
            }
        }
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

pub(super) fn authorized(
    request: reqwest::RequestBuilder,
    token: Option<&str>,
) -> reqwest::RequestBuilder {
    match token {
        Some(token) => request.bearer_auth(token),
        None => request,
    }
}

pub(super) fn unexpected(what: &str, status: u16, body: &str) -> ClientError {
    ClientError::Protocol(format!("{what} answered HTTP {status}: {}", body.trim()))
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
}
