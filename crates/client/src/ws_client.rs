//! [`WsClient`]: a WebSocket [`Connection`] made straight to a URL (no negotiate), with the
//! conveniences raw protocol tests use.

use bytes::Bytes;
use serde_json::Value;
use switchyard_hub_protocol::{Format, HubMessage};

use crate::{connect_direct, ClientError, Connection};

/// One WebSocket client connection after a successful hub-protocol handshake.
pub struct WsClient {
    connection: Connection,
}

impl WsClient {
    /// Connects to `url` (`ws://…/client/?hub=…[&id=…]`), sends the handshake for `format`,
    /// and waits for the response.
    pub async fn connect(
        url: &str,
        token: Option<&str>,
        format: Format,
    ) -> Result<Self, ClientError> {
        Ok(WsClient {
            connection: connect_direct(url, token, format).await?,
        })
    }

    pub fn format(&self) -> Format {
        self.connection.format()
    }

    /// Sends bytes as one WebSocket message (text for JSON, made valid UTF-8 if it is not;
    /// binary for MessagePack).
    pub async fn send_raw(&mut self, bytes: &[u8]) -> Result<(), ClientError> {
        let frame = match self.format() {
            Format::Json => Bytes::from(String::from_utf8_lossy(bytes).into_owned()),
            Format::MessagePack => Bytes::copy_from_slice(bytes),
        };
        self.connection.send_raw(frame).await
    }

    pub async fn send(&mut self, message: &HubMessage<Value>) -> Result<(), ClientError> {
        self.connection.send(message).await
    }

    /// The next hub message (pings included).
    pub async fn next(&mut self) -> Result<HubMessage<Value>, ClientError> {
        self.connection.next().await
    }

    /// The next message that is not a Ping.
    pub async fn next_non_ping(&mut self) -> Result<HubMessage<Value>, ClientError> {
        self.connection.next_non_ping().await
    }

    /// Closes the WebSocket (no hub Close message).
    pub async fn close(self) {
        self.connection.close().await
    }
}
