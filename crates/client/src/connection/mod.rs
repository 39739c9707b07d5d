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
//! - here: [`Connection`], [`connect`], [`connect_direct`], sends and reads.
//! - `options`: [`Transport`], [`ConnectOptions`], [`http_client`].
//! - `negotiate`: negotiate with redirects (also [`negotiate`] for one request).
//! - `io`: the transport under a connection: one frame written, the byte stream read.
//! - `websocket`, `sse`, `longpoll`: one file per transport.
//! - `resume`: stateful reconnect's I/O (a new socket, the replay, the Acks).
//! - `reassemble`: the byte stream cut into message bodies.
//! - `stateful`: stateful reconnect's numbering, buffer and acknowledgements (no I/O).
//!
//! # Stateful reconnect
//! With [`ConnectOptions::stateful_reconnect`] over WebSockets, negotiate asks
//! `useStatefulReconnect=true` and, if the server agrees, the handshake uses version 2. The
//! connection then keeps what it sent until the server acknowledges it, acknowledges what it
//! received about a second later (from [`Connection::next_frame`], which races its read
//! against that deadline, or piggy-backed on a send), and takes Acks, Sequences and
//! duplicates out of what [`Connection::next_frame`] returns. When a read or a write fails
//! without a WebSocket close, the next call opens a new socket to the same URL with the same
//! token (retrying for [`ConnectOptions::stateful_reconnect_window`]), writes its Sequence
//! and the unacknowledged frames, and carries on; the caller sees nothing but
//! [`Connection::stateful_stats`]. Other transports ignore the option (as the official
//! clients do): negotiate does not ask and the handshake stays at version 1.

mod io;
mod longpoll;
mod negotiate;
mod options;
mod reassemble;
mod resume;
mod sse;
mod stateful;
mod websocket;

pub use negotiate::{negotiate, Negotiated};
pub use options::{http_client, http_client_trusting, ConnectOptions, Transport};
pub use stateful::StatefulStats;

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt as _;
use reqwest::header::CONTENT_TYPE;
use serde_json::Value;
use switchyard_hub_protocol::{encode_close, encode_message, handshake, Format, HubMessage};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Utf8Bytes;
use url::Url;

use crate::{decode, ClientError, TlsRoots};
use io::{authorized, content_type, unexpected, write, AbortOnDrop, HttpIo, Io};
use reassemble::Reassembler;
use stateful::{Stateful, Verdict};

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
/// [`ConnectOptions::stateful_buffer_size`] by default (the official clients' default).
pub const DEFAULT_STATEFUL_BUFFER_SIZE: usize = 100_000;
/// [`ConnectOptions::stateful_reconnect_window`] by default: the service's
/// `stateful_reconnect.window` (ASP.NET Core's disconnect timeout).
pub const DEFAULT_STATEFUL_RECONNECT_WINDOW: Duration = Duration::from_secs(15);

/// tungstenite allocates its read buffer eagerly per socket (128 KiB by default); the
/// benchmark holds tens of thousands of sockets, so reads go through a small one (it grows
/// for a large message).
const WS_READ_BUFFER: usize = 4 * 1024;
/// Transport reads (event-stream events, poll bodies) queued ahead of the reader.
const CHANNEL_CAPACITY: usize = 8;

/// One started SignalR connection: negotiated, transport open, handshake accepted.
pub struct Connection {
    connection_id: String,
    format: Format,
    transport: Transport,
    frames: Reassembler,
    io: Io,
    /// Stateful reconnect, when the handshake agreed to it (boxed: the benchmark holds tens
    /// of thousands of connections without it).
    stateful: Option<Box<Stateful>>,
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
        .unwrap_or_else(|| http_client_trusting(options.local_address, &options.tls_roots));
    let ask_stateful = options.stateful_reconnect && options.transport == Transport::WebSockets;
    let negotiated =
        negotiate::negotiate_following(&client, url, options.access_token.clone(), ask_stateful)
            .await?;
    let stateful = ask_stateful && negotiated.raw["useStatefulReconnect"] == Value::Bool(true);
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
                    &options.tls_roots,
                )
                .await?,
            ),
            Transport::ServerSentEvents => {
                Io::Http(sse::open(client, target.clone(), negotiated.token.clone()).await?)
            }
            Transport::LongPolling => {
                Io::Http(longpoll::start(client, target.clone(), negotiated.token.clone()).await?)
            }
        };
        let mut connection = Connection {
            connection_id: negotiated.connection_id.clone(),
            format: options.format,
            transport: options.transport,
            frames: Reassembler::new(options.format, options.max_message_size),
            io,
            stateful: None,
        };
        connection.handshake(if stateful { 2 } else { 1 }).await?;
        if stateful {
            connection.stateful = Some(Box::new(Stateful::new(
                target.clone(),
                negotiated.token.clone(),
                options.local_address,
                options.tls_roots.clone(),
                options.max_message_size,
                options.stateful_reconnect_window,
                options.stateful_buffer_size,
            )));
        }
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
    let socket = websocket::open(
        &target,
        token,
        None,
        DEFAULT_MAX_MESSAGE_SIZE,
        &TlsRoots::default(),
    )
    .await?;
    let mut connection = Connection {
        connection_id,
        format,
        transport: Transport::WebSockets,
        frames: Reassembler::new(format, DEFAULT_MAX_MESSAGE_SIZE),
        io: Io::Ws(socket),
        stateful: None,
    };
    tokio::time::timeout(HANDSHAKE_TIMEOUT, connection.handshake(1))
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
    ///
    /// Not cancel-safe: a send dropped half-way may or may not reach the server (and under
    /// stateful reconnect may leave the numbering of later messages off).
    pub async fn send_raw(&mut self, frame: Bytes) -> Result<(), ClientError> {
        if self.stateful.is_none() {
            return write(&mut self.io, self.format, frame).await;
        }
        // Checked before the loop: only transport failures may lead to a reconnect.
        if self.format == Format::Json && std::str::from_utf8(&frame).is_err() {
            return Err(ClientError::Protocol(
                "a JSON hub message must be UTF-8".into(),
            ));
        }
        loop {
            self.restore().await?;
            // An Ack that came due while the caller was only sending goes first.
            if let Err(e) = self.write_due_ack().await {
                self.transport_failed(e)?;
                continue;
            }
            match write(&mut self.io, self.format, frame.clone()).await {
                Ok(()) => {
                    // Kept only once written: a frame whose write failed is written again
                    // after the replay, and if the server had it after all, its Sequence
                    // makes it a duplicate that it drops.
                    if let Some(state) = self.stateful.as_deref_mut() {
                        state.track(self.format, &frame);
                    }
                    return Ok(());
                }
                Err(e) => self.transport_failed(e)?,
            }
        }
    }

    /// Encodes and sends one hub message.
    pub async fn send(&mut self, message: &HubMessage<Value>) -> Result<(), ClientError> {
        self.send_raw(encode_message(self.format, message)).await
    }

    /// The body of the next hub message (no separator, no length prefix); pings included.
    /// Under stateful reconnect, Acks, Sequences and duplicates are left out, and a dropped
    /// socket is replaced here.
    ///
    /// Cancel-safe: dropping the future before it completes loses nothing; the next call
    /// carries on where this one stopped.
    pub async fn next_frame(&mut self) -> Result<Bytes, ClientError> {
        if self.stateful.is_none() {
            loop {
                if let Some(body) = self.frames.take_frame()? {
                    return Ok(body);
                }
                // The only await: whatever it yields is stored before the next one.
                let chunk = self.io.read().await.map_err(|(e, _)| e)?;
                self.frames.push(chunk);
            }
        }
        // Stateful: every await below either completes a step whose result is stored (a new
        // socket, a read) or can be repeated harmlessly (the replay, an Ack).
        loop {
            self.restore().await?;
            if let Err(e) = self.write_due_ack().await {
                self.transport_failed(e)?;
                continue;
            }
            if let Some(body) = self.frames.take_frame()? {
                let state = self.stateful.as_deref_mut().expect("stateful");
                match state.incoming(self.format, &body)? {
                    Verdict::Deliver => return Ok(body),
                    Verdict::Skip => continue,
                }
            }
            let due = self.stateful.as_deref().and_then(|state| state.ack_due);
            let read = match due {
                Some(due) => tokio::select! {
                    biased;
                    read = self.io.read() => read,
                    _ = tokio::time::sleep_until(due) => continue,
                },
                None => self.io.read().await,
            };
            match read {
                Ok(chunk) => self.frames.push(chunk),
                Err((e, true)) => return Err(e),
                Err((e, false)) => self.transport_failed(e)?,
            }
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
            Io::Gone => {}
        }
    }

    /// Drops the transport abruptly, as a network failure would: the WebSocket's TCP
    /// connection is closed without a close frame (an HTTP transport's reader is stopped).
    /// Under stateful reconnect the next [`Connection::next_frame`] or
    /// [`Connection::send_raw`] reconnects; otherwise they fail. For tests and the
    /// benchmark.
    pub fn abort_transport(&mut self) {
        self.io = Io::Gone;
    }

    /// Whether the handshake agreed to stateful reconnect.
    pub fn is_stateful(&self) -> bool {
        self.stateful.is_some()
    }

    /// Stateful reconnect's counters (`None` without it).
    pub fn stateful_stats(&self) -> Option<StatefulStats> {
        self.stateful.as_deref().map(|state| state.stats)
    }

    /// Bytes sent and kept until the server acknowledges them (0 without stateful reconnect).
    pub fn stateful_buffered_bytes(&self) -> usize {
        self.stateful.as_deref().map_or(0, Stateful::kept_bytes)
    }

    /// Whether more than [`ConnectOptions::stateful_buffer_size`] is unacknowledged.
    pub fn stateful_is_full(&self) -> bool {
        self.stateful.as_deref().is_some_and(Stateful::is_full)
    }

    /// Sends the handshake request and reads the response; bytes after it stay buffered.
    async fn handshake(&mut self, version: u32) -> Result<(), ClientError> {
        let request = handshake::encode_request(self.format.name(), version);
        self.send_raw(Bytes::from(request)).await?;
        loop {
            if let Some(error) = self.frames.take_handshake_response()? {
                return match error {
                    Some(error) => Err(ClientError::HandshakeRefused(error)),
                    None => Ok(()),
                };
            }
            let chunk = self.io.read().await.map_err(|(e, _)| e)?;
            self.frames.push(chunk);
        }
    }
}
