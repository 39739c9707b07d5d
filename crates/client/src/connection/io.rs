//! The transport under a [`Connection`](super::Connection): a WebSocket, or an HTTP
//! transport (Server-Sent Events or long polling) with its reader task; one frame written,
//! the next piece of the byte stream read.

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use reqwest::header::{HeaderValue, CONTENT_TYPE};
use switchyard_hub_protocol::Format;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::{Message as WsMessage, Utf8Bytes};
use tokio_tungstenite::WebSocketStream;
use url::Url;

use super::{websocket, REQUEST_TIMEOUT};
use crate::ClientError;

pub(super) enum Io {
    Ws(WebSocketStream<websocket::Stream>),
    Http(HttpIo),
    /// Dropped by [`Connection::abort_transport`], or by a failure under stateful reconnect:
    /// reads and writes fail as on a socket that broke.
    Gone,
}

/// Server-Sent Events or long polling.
pub(super) struct HttpIo {
    pub(super) client: reqwest::Client,
    /// The hub URL with `id=`: polls, sends and the DELETE go here.
    pub(super) url: Url,
    pub(super) token: Option<String>,
    /// Filled by the reader task; closed when the stream or the polling ended.
    pub(super) incoming: mpsc::Receiver<Result<Bytes, ClientError>>,
    pub(super) reader: AbortOnDrop,
}

/// The reader task ends with its connection.
pub(super) struct AbortOnDrop(pub(super) JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Writes one frame: a WebSocket message (text for JSON, binary for MessagePack) or a POST.
pub(super) async fn write(io: &mut Io, format: Format, frame: Bytes) -> Result<(), ClientError> {
    match io {
        Io::Ws(socket) => {
            let message = match format {
                Format::Json => WsMessage::Text(Utf8Bytes::try_from(frame).map_err(|_| {
                    ClientError::Protocol("a JSON hub message must be UTF-8".into())
                })?),
                Format::MessagePack => WsMessage::Binary(frame),
            };
            socket.send(message).await?;
            Ok(())
        }
        Io::Http(http) => http.post(format, frame).await,
        Io::Gone => Err(gone()),
    }
}

/// What a dropped transport answers.
pub(super) fn gone() -> ClientError {
    ClientError::WebSocket(tokio_tungstenite::tungstenite::Error::ConnectionClosed)
}

impl Io {
    /// The next piece of the server's byte stream. Cancel-safe. An error comes with whether
    /// the server closed cleanly (a WebSocket close; for HTTP transports every end counts as
    /// clean, as they never reconnect).
    pub(super) async fn read(&mut self) -> Result<Bytes, (ClientError, bool)> {
        match self {
            Io::Ws(socket) => loop {
                match socket.next().await {
                    Some(Ok(WsMessage::Text(text))) => return Ok(Bytes::from(text)),
                    Some(Ok(WsMessage::Binary(data))) => return Ok(data),
                    Some(Ok(WsMessage::Close(_))) => return Err((ClientError::Closed, true)),
                    None => return Err((ClientError::Closed, false)),
                    // Pings are answered by tungstenite.
                    Some(Ok(_)) => continue,
                    Some(Err(e)) => return Err((e.into(), false)),
                }
            },
            Io::Http(http) => match http.incoming.recv().await {
                Some(result) => result.map_err(|e| (e, true)),
                None => Err((ClientError::Closed, true)),
            },
            Io::Gone => Err((gone(), false)),
        }
    }
}

impl HttpIo {
    /// `POST {url}?id=` with the raw bytes.
    pub(super) async fn post(&self, format: Format, body: Bytes) -> Result<(), ClientError> {
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

pub(super) fn content_type(format: Format) -> HeaderValue {
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
