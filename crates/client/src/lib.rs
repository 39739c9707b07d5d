//! A small SignalR client over WebSockets for tests and the benchmark: negotiate, handshake,
//! send and receive hub messages in JSON or MessagePack. Payload values surface as
//! `serde_json::Value` whatever the protocol (MessagePack binary becomes base64 text).
//!
//! # Layout
//! - [`negotiate`]: `POST {base}/negotiate`.
//! - [`WsClient`]: one WebSocket connection with the hub-protocol handshake done.
//! - [`connection`]: [`connect`] / [`Connection`], a connection over any of the three
//!   transports, started like the official clients (negotiate redirects followed), with an
//!   optional source address.
//! - [`app_server`]: the other side: an app server connected to the service the way the
//!   .NET server SDK is, hosting the benchmark hub.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

pub mod app_server;
pub mod connection;

pub use connection::{connect, http_client, ConnectOptions, Connection, Transport};

use base64::Engine;
use bytes::BytesMut;
use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use switchyard_hub_protocol::{
    encode_message, handshake, json, msgpack, Format, FrameSplitter, HubMessage,
};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("http: {0}")]
    Http(#[from] reqwest::Error),
    #[error("negotiate failed with status {status}: {body}")]
    Negotiate { status: u16, body: String },
    #[error("websocket: {0}")]
    WebSocket(#[from] tokio_tungstenite::tungstenite::Error),
    #[error("handshake refused: {0}")]
    HandshakeRefused(String),
    #[error("protocol: {0}")]
    Protocol(String),
    #[error("connection closed")]
    Closed,
}

/// What negotiate returned.
#[derive(Debug, Clone)]
pub struct Negotiated {
    pub version: i64,
    pub connection_id: String,
    /// `connectionToken` (v1), else the connection id: the value to put in `id=`.
    pub id_value: String,
    pub transports: Vec<String>,
    pub raw: Value,
}

/// `POST {base}/negotiate` where `base` is like `http://host:port/client/?hub=chat`.
pub async fn negotiate(base: &str, token: &str, version: u8) -> Result<Negotiated, ClientError> {
    let (path, query) = base.split_once('?').unwrap_or((base, ""));
    let mut url = format!("{}/negotiate?{query}", path.trim_end_matches('/'));
    if version > 0 {
        url.push_str(&format!("&negotiateVersion={version}"));
    }
    let response = reqwest::Client::new()
        .post(url)
        .bearer_auth(token)
        .send()
        .await?;
    let status = response.status().as_u16();
    let body = response.text().await?;
    if status != 200 {
        return Err(ClientError::Negotiate { status, body });
    }
    let raw: Value = serde_json::from_str(&body)
        .map_err(|e| ClientError::Protocol(format!("negotiate body: {e}")))?;
    if let Some(error) = raw.get("error").and_then(Value::as_str) {
        return Err(ClientError::Negotiate {
            status,
            body: error.to_string(),
        });
    }
    let connection_id = raw["connectionId"].as_str().unwrap_or_default().to_string();
    let version = raw["negotiateVersion"].as_i64().unwrap_or(0);
    let id_value = match raw.get("connectionToken").and_then(Value::as_str) {
        Some(token) if version >= 1 => token.to_string(),
        _ => connection_id.clone(),
    };
    let transports = raw["availableTransports"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|t| t["transport"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    Ok(Negotiated {
        version,
        connection_id,
        id_value,
        transports,
        raw,
    })
}

/// One WebSocket client connection after a successful hub-protocol handshake.
pub struct WsClient {
    socket: WebSocketStream<MaybeTlsStream<TcpStream>>,
    format: Format,
    buffer: BytesMut,
    splitter: FrameSplitter,
}

impl WsClient {
    /// Connects to `url` (`ws://…/client/?hub=…[&id=…]`), sends the handshake for `format`,
    /// and waits for the response.
    pub async fn connect(
        url: &str,
        token: Option<&str>,
        format: Format,
    ) -> Result<Self, ClientError> {
        let mut request = url.into_client_request()?;
        if let Some(token) = token {
            request.headers_mut().insert(
                "authorization",
                format!("Bearer {token}")
                    .parse()
                    .map_err(|_| ClientError::Protocol("token is not a header value".into()))?,
            );
        }
        // No Nagle: a small message must not wait for the service's delayed ACK.
        let (socket, _) = tokio_tungstenite::connect_async_with_config(request, None, true).await?;
        let mut client = WsClient {
            socket,
            format,
            buffer: BytesMut::new(),
            splitter: FrameSplitter::new(format, 64 * 1024 * 1024),
        };
        client
            .send_raw(&handshake::encode_request(format.name(), 1))
            .await?;
        loop {
            if let Some((error, consumed)) = handshake::parse_response(&client.buffer)
                .map_err(|e| ClientError::Protocol(e.to_string()))?
            {
                let _ = client.buffer.split_to(consumed);
                return match error {
                    Some(error) => Err(ClientError::HandshakeRefused(error)),
                    None => Ok(client),
                };
            }
            client.read_more().await?;
        }
    }

    pub fn format(&self) -> Format {
        self.format
    }

    /// Sends bytes as one WebSocket message (text for JSON, binary for MessagePack).
    pub async fn send_raw(&mut self, bytes: &[u8]) -> Result<(), ClientError> {
        let message = match self.format {
            Format::Json => WsMessage::Text(String::from_utf8_lossy(bytes).into_owned().into()),
            Format::MessagePack => WsMessage::Binary(bytes.to_vec().into()),
        };
        self.socket.send(message).await?;
        Ok(())
    }

    pub async fn send(&mut self, message: &HubMessage<Value>) -> Result<(), ClientError> {
        let bytes = encode_message(self.format, message);
        self.send_raw(&bytes).await
    }

    async fn read_more(&mut self) -> Result<(), ClientError> {
        loop {
            match self.socket.next().await {
                Some(Ok(WsMessage::Text(text))) => {
                    self.buffer.extend_from_slice(text.as_bytes());
                    return Ok(());
                }
                Some(Ok(WsMessage::Binary(data))) => {
                    self.buffer.extend_from_slice(&data);
                    return Ok(());
                }
                Some(Ok(WsMessage::Close(_))) | None => return Err(ClientError::Closed),
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Err(e.into()),
            }
        }
    }

    /// The next hub message (pings included).
    pub async fn next(&mut self) -> Result<HubMessage<Value>, ClientError> {
        loop {
            if let Some(frame) = self
                .splitter
                .next_frame(&mut self.buffer)
                .map_err(|e| ClientError::Protocol(e.to_string()))?
            {
                return decode(self.format, frame.body());
            }
            self.read_more().await?;
        }
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

    /// Closes the WebSocket (no hub Close message).
    pub async fn close(mut self) {
        let _ = self.socket.close(None).await;
    }
}

/// Decodes one body; MessagePack values are converted to JSON values.
pub fn decode(format: Format, body: &[u8]) -> Result<HubMessage<Value>, ClientError> {
    match format {
        Format::Json => json::decode(body).map_err(|e| ClientError::Protocol(e.to_string())),
        Format::MessagePack => msgpack::decode(body)
            .map(|m| m.map_values(|v| msgpack_to_json(&v)))
            .map_err(|e| ClientError::Protocol(e.to_string())),
    }
}

/// A lossy view of a MessagePack value as JSON (binary as base64, ext as null).
pub fn msgpack_to_json(value: &rmpv::Value) -> Value {
    use rmpv::Value as M;
    match value {
        M::Nil => Value::Null,
        M::Boolean(b) => Value::Bool(*b),
        M::Integer(i) => i
            .as_i64()
            .map(Value::from)
            .or_else(|| i.as_u64().map(Value::from))
            .unwrap_or(Value::Null),
        M::F32(f) => serde_json::Number::from_f64(f64::from(*f)).map_or(Value::Null, Value::Number),
        M::F64(f) => serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number),
        M::String(s) => Value::String(s.as_str().unwrap_or_default().to_string()),
        M::Binary(b) => Value::String(base64::engine::general_purpose::STANDARD.encode(b)),
        M::Array(items) => Value::Array(items.iter().map(msgpack_to_json).collect()),
        M::Map(pairs) => Value::Object(
            pairs
                .iter()
                .map(|(k, v)| {
                    let key = match k {
                        M::String(s) => s.as_str().unwrap_or_default().to_string(),
                        other => other.to_string(),
                    };
                    (key, msgpack_to_json(v))
                })
                .collect(),
        ),
        M::Ext(_, _) => Value::Null,
    }
}
