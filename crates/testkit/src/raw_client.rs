//! [`RawClient`]: a SignalR client over a raw WebSocket whose frames are compared byte for
//! byte, and [`Msg`], one hub message in both protocols.

use bytes::{Bytes, BytesMut};
use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use switchyard_hub_protocol::{
    encode_invocation, handshake, ping, Format, FrameSplitter, HubMessage,
};
use switchyard_node::config::ServiceMode;
use switchyard_node::Config;
use switchyard_service_protocol::Payloads;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message as WsMessage;

use crate::app_server::{AppServer, Ws, NO_DELAY};
use crate::{within, TestServer, WAIT};

/// A SignalR client over a raw WebSocket: frames are compared byte for byte, and any bytes
/// a test needs can be sent (the bad-input catalogue sends broken ones).
pub struct RawClient {
    pub ws: Ws,
    pub format: Format,
    buf: BytesMut,
    splitter: FrameSplitter,
    handshake_done: bool,
    /// The WebSocket close frame's code, once one came.
    close_code: Option<u16>,
}

/// How a client connection ended, as the client saw it ([`RawClient::ending`]).
#[derive(Debug, Default)]
pub struct Ending {
    /// The error of a refused handshake.
    pub handshake_error: Option<String>,
    /// The Close message's error and allowReconnect, if one came.
    pub close: Option<(Option<String>, bool)>,
    /// The WebSocket close frame's code, if one came.
    pub ws_close_code: Option<u16>,
}

impl RawClient {
    /// A client over an open WebSocket that has sent nothing yet.
    pub fn from_socket(ws: Ws, format: Format) -> RawClient {
        RawClient {
            ws,
            format,
            buf: BytesMut::new(),
            splitter: FrameSplitter::new(format, usize::MAX),
            handshake_done: false,
            close_code: None,
        }
    }

    /// Negotiates (v1, a token without a user) and opens the WebSocket; sends nothing, so a
    /// test can send any handshake, or none.
    pub async fn connect(server: &TestServer, hub: &str, format: Format) -> RawClient {
        let token = server.token(hub, None);
        let negotiated = switchyard_client::negotiate(&server.client_url(hub), &token, 1)
            .await
            .expect("negotiate");
        let mut request = server
            .ws_url(hub, Some(&negotiated.id_value))
            .into_client_request()
            .unwrap();
        request
            .headers_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
        let (ws, _) = tokio_tungstenite::connect_async_with_config(request, None, NO_DELAY)
            .await
            .expect("client upgrade");
        RawClient::from_socket(ws, format)
    }

    /// [`Self::connect`], then the handshake, accepted.
    pub async fn ready(server: &TestServer, hub: &str, format: Format) -> RawClient {
        let mut client = Self::connect(server, hub, format).await;
        client
            .send_raw(&handshake::encode_request(format.name(), 1))
            .await;
        client.handshake_result().await.expect("handshake refused");
        client
    }

    /// Negotiates (v1), opens the WebSocket and sends the handshake request; the response
    /// is read by [`Self::handshake_result`]. Returns the connection id.
    pub async fn start(
        server: &TestServer,
        hub: &str,
        token: &str,
        format: Format,
    ) -> (RawClient, String) {
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
    pub async fn start_id_less(
        server: &TestServer,
        hub: &str,
        token: &str,
        format: Format,
    ) -> RawClient {
        Self::start_url(&server.ws_url(hub, None), token, format).await
    }

    pub async fn start_url(url: &str, token: &str, format: Format) -> RawClient {
        Self::start_url_as(url, token, format, format.name()).await
    }

    /// Like [`Self::start_url`] with the handshake naming `protocol`, framed as `format`.
    pub async fn start_url_as(url: &str, token: &str, format: Format, protocol: &str) -> RawClient {
        let mut request = url.into_client_request().unwrap();
        request
            .headers_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
        let (ws, _) = tokio_tungstenite::connect_async_with_config(request, None, NO_DELAY)
            .await
            .expect("client upgrade");
        let mut client = RawClient::from_socket(ws, format);
        client
            .send_raw(&handshake::encode_request(protocol, 1))
            .await;
        client
    }

    /// Sends in the connection's format: a text message for JSON, binary for MessagePack.
    pub async fn send_raw(&mut self, bytes: &[u8]) {
        match self.format {
            Format::Json => self.send_text(std::str::from_utf8(bytes).unwrap()).await,
            Format::MessagePack => self.send_binary(bytes).await,
        }
    }

    pub async fn send_text(&mut self, text: &str) {
        self.ws
            .send(WsMessage::Text(text.to_string().into()))
            .await
            .expect("client write");
    }

    pub async fn send_binary(&mut self, bytes: &[u8]) {
        self.ws
            .send(WsMessage::Binary(Bytes::copy_from_slice(bytes)))
            .await
            .expect("client write");
    }

    /// Reads one more WebSocket message into the buffer; false once closed (a close frame's
    /// code is kept for [`Self::ending`]).
    pub async fn read_more(&mut self) -> bool {
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
                Some(Ok(WsMessage::Close(frame))) => {
                    self.close_code = frame.map(|f| u16::from(f.code));
                    return false;
                }
                None | Some(Err(_)) => return false,
                Some(Ok(_)) => {}
            }
        }
    }

    /// The handshake response, if a whole one is buffered: `Some(error)` if refused.
    fn take_handshake_response(&mut self) -> Option<Option<String>> {
        let (error, consumed) =
            handshake::parse_response(&self.buf).expect("a handshake response")?;
        let _ = self.buf.split_to(consumed);
        self.handshake_done = error.is_none();
        Some(error)
    }

    /// The handshake response: `Ok` or the error text.
    pub async fn handshake_result(&mut self) -> Result<(), String> {
        within("the client's handshake response", WAIT, async {
            loop {
                if let Some(error) = self.take_handshake_response() {
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
    pub async fn next_frame(&mut self) -> Option<Bytes> {
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
    pub async fn expect(&mut self, expected: &Msg) {
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
    pub async fn next_message(&mut self) -> HubMessage<Value> {
        let frame = within("a message to the client", WAIT, self.next_frame())
            .await
            .expect("the client was closed");
        decode_frame(self.format, &frame)
    }

    /// Reads until the connection ends; returns the Close message if one came.
    pub async fn until_closed(&mut self) -> Option<HubMessage<Value>> {
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

    /// Reads until the service closes the connection: the handshake error, the Close
    /// message and the WebSocket close code, whichever came.
    pub async fn ending(mut self) -> Ending {
        within("the service to close the connection", WAIT, async {
            let mut ending = Ending::default();
            loop {
                if !self.handshake_done {
                    if let Some(error) = self.take_handshake_response() {
                        ending.handshake_error = error;
                    }
                }
                if self.handshake_done {
                    while let Ok(Some(frame)) = self.splitter.next_frame(&mut self.buf) {
                        if let Ok(HubMessage::Close {
                            error,
                            allow_reconnect,
                        }) = switchyard_client::decode(self.format, frame.body())
                        {
                            ending.close = Some((error, allow_reconnect));
                        }
                    }
                }
                if !self.read_more().await {
                    ending.ws_close_code = self.close_code;
                    return ending;
                }
            }
        })
        .await
    }

    /// The Close message's error text (the connection must end with one).
    pub async fn close_error(self) -> String {
        let ending = self.ending().await;
        let shown = format!("{ending:?}");
        let (error, _) = ending
            .close
            .unwrap_or_else(|| panic!("no Close message: {shown}"));
        error.expect("a Close message with an error")
    }

    /// The handshake error (the connection must end with one).
    pub async fn handshake_refusal(self) -> String {
        let ending = self.ending().await;
        let shown = format!("{ending:?}");
        ending
            .handshake_error
            .unwrap_or_else(|| panic!("no handshake error: {shown}"))
    }

    /// The next message that is not a ping, decoded; `None` once closed.
    pub async fn try_next_message(&mut self) -> Option<HubMessage<Value>> {
        let frame = self.next_frame().await?;
        Some(decode_frame(self.format, &frame))
    }

    /// Closes the WebSocket and waits for the service's close.
    pub async fn close(mut self) {
        let _ = self.ws.close(None).await;
        let _ = within("the client's close", WAIT, async {
            while let Some(Ok(_)) = self.ws.next().await {}
        })
        .await;
    }
}

pub fn decode_frame(format: Format, framed: &[u8]) -> HubMessage<Value> {
    let mut buf = BytesMut::from(framed);
    let frame = FrameSplitter::new(format, usize::MAX)
        .next_frame(&mut buf)
        .unwrap()
        .unwrap();
    switchyard_client::decode(format, frame.body()).expect("a hub message")
}

/// One hub message encoded in both protocols, as the SDK puts it in a payloads map.
#[derive(Clone)]
pub struct Msg {
    pub json: Bytes,
    pub msgpack: Bytes,
}

impl Msg {
    pub fn invocation(target: &str, arguments: &[Value]) -> Msg {
        Msg {
            json: encode_invocation(Format::Json, target, arguments),
            msgpack: encode_invocation(Format::MessagePack, target, arguments),
        }
    }

    pub fn bytes(&self, format: Format) -> Bytes {
        match format {
            Format::Json => self.json.clone(),
            Format::MessagePack => self.msgpack.clone(),
        }
    }

    pub fn payloads(&self) -> Payloads {
        vec![
            ("json".to_string(), self.json.clone()),
            ("messagepack".to_string(), self.msgpack.clone()),
        ]
    }
}

/// A client of `hub` accepted by `app` the way the SDK does it: OpenConnection, then the
/// client's handshake request as ConnectionData, answered with `{}\x1e`.
pub async fn connect_client(
    server: &TestServer,
    app: &mut AppServer,
    hub: &str,
    token: &str,
    format: Format,
) -> (RawClient, String) {
    let (mut client, id) = RawClient::start(server, hub, token, format).await;
    let open = app.open_connection().await;
    assert_eq!(open.connection_id, id);
    let request = app.connection_data(&id).await;
    assert_eq!(request, handshake::encode_request(format.name(), 1));
    app.send_to(&id, handshake::RESPONSE_OK).await;
    client.handshake_result().await.expect("client handshake");
    (client, id)
}

/// A client token pinned to app server `server_id` (`asrs.s.ssticky=Required`).
pub fn sticky_token(server: &TestServer, hub: &str, user: &str, server_id: &str) -> String {
    server.token_with(
        hub,
        &[
            ("asrs.s.uid", user),
            ("asrs.s.sn", server_id),
            ("asrs.s.ssticky", "Required"),
        ],
    )
}

pub fn header<'a>(headers: &'a [(String, Vec<String>)], name: &str) -> Option<&'a [String]> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_slice())
}

pub fn default_mode() -> Config {
    Config {
        mode: ServiceMode::Default,
        ..Config::default()
    }
}
