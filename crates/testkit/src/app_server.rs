//! [`AppServer`]: an app server speaking raw service-protocol frames to `/server`, the way
//! the .NET server SDK does (VarInt-framed MessagePack in binary WebSocket frames).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::{SinkExt, StreamExt};
use switchyard_service_protocol::*;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::{Error as WsError, Message as WsMessage};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::{within, TestServer, WAIT};

pub type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Every Ack must come this fast (the SDK itself gives up after 10 s).
pub const ACK_WAIT: Duration = Duration::from_secs(2);

/// TCP_NODELAY on the test's sockets, as the SDK's WebSocket has it (.NET disables Nagle).
pub const NO_DELAY: bool = true;

/// Ack statuses.
pub const OK: i32 = 1;
pub const NOT_FOUND: i32 = 2;

/// Opens `/server/?hub=` with the SDK's headers. `server_id` goes into `X-ASRS-Server-Id`.
pub async fn dial(
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

pub async fn dial_url(
    url: &str,
    token: Option<&str>,
    server_id: Option<&str>,
) -> Result<Ws, WsError> {
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
pub fn refused_status(result: Result<Ws, WsError>) -> u16 {
    match result {
        Err(WsError::Http(response)) => response.status().as_u16(),
        Err(other) => panic!("expected an HTTP refusal, got {other}"),
        Ok(_) => panic!("expected an HTTP refusal, the upgrade succeeded"),
    }
}

/// The SDK's HandshakeRequest for a Default connection.
pub fn handshake_request(migration_level: i32) -> HandshakeRequest {
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
pub struct AppServer {
    pub ws: Ws,
    buf: BytesMut,
    /// Messages read while waiting for another one, in arrival order.
    pending: VecDeque<ServiceMessage>,
    /// Plain keep-alive pings (`[3]`) are dropped unless set.
    pub keep_alives: bool,
    echo: usize,
}

impl AppServer {
    pub fn new(ws: Ws) -> AppServer {
        AppServer {
            ws,
            buf: BytesMut::new(),
            pending: VecDeque::new(),
            keep_alives: false,
            echo: 0,
        }
    }

    /// A connected, handshaken Default connection of app server `server_id`.
    pub async fn open(server: &TestServer, hub: &str, server_id: &str) -> AppServer {
        Self::open_with(server, hub, server_id, 0).await
    }

    pub async fn open_with(
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

    pub async fn handshake(&mut self, request: HandshakeRequest) -> HandshakeResponse {
        self.send(request).await;
        match self.next().await {
            ServiceMessage::HandshakeResponse(response) => response,
            other => panic!("expected a HandshakeResponse, got {other:?}"),
        }
    }

    /// One message as one binary WebSocket frame.
    pub async fn send(&mut self, message: impl Into<ServiceMessage>) {
        let frame = encoded(&message.into());
        self.send_bytes(&frame).await;
    }

    pub async fn send_bytes(&mut self, bytes: &[u8]) {
        self.ws
            .send(WsMessage::Binary(Bytes::copy_from_slice(bytes)))
            .await
            .expect("app server write");
    }

    /// Reads one message off the socket; `None` once the service closed it.
    pub async fn read_message(&mut self) -> Option<ServiceMessage> {
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
    pub async fn recv(&mut self) -> Option<ServiceMessage> {
        match self.pending.pop_front() {
            Some(message) => Some(message),
            None => self.read_message().await,
        }
    }

    /// The next message; panics if none comes or the connection closes.
    pub async fn next(&mut self) -> ServiceMessage {
        within("a message from the service", WAIT, self.recv())
            .await
            .expect("the service closed the app-server connection")
    }

    /// The first message `pick` accepts; messages before it are kept for later.
    pub async fn take<T>(
        &mut self,
        what: &str,
        pick: impl FnMut(&ServiceMessage) -> Option<T>,
    ) -> T {
        self.take_within(what, WAIT, pick).await
    }

    pub async fn take_within<T>(
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

    pub async fn open_connection(&mut self) -> OpenConnection {
        self.take("OpenConnection", |m| match m {
            ServiceMessage::OpenConnection(open) => Some(open.clone()),
            _ => None,
        })
        .await
    }

    pub async fn connection_data(&mut self, connection: &str) -> Bytes {
        self.take("ConnectionData", |m| match m {
            ServiceMessage::ConnectionData(d) if d.connection_id == connection => {
                Some(d.payload.clone())
            }
            _ => None,
        })
        .await
    }

    pub async fn close_connection(&mut self, connection: &str) -> CloseConnection {
        self.take("CloseConnection", |m| match m {
            ServiceMessage::CloseConnection(c) if c.connection_id == connection => Some(c.clone()),
            _ => None,
        })
        .await
    }

    /// The Ack for `ack_id`, within [`ACK_WAIT`].
    pub async fn ack(&mut self, ack_id: i32) -> Ack {
        self.take_within(&format!("Ack {ack_id}"), ACK_WAIT, |m| match m {
            ServiceMessage::Ack(a) if a.ack_id == ack_id => Some(a.clone()),
            _ => None,
        })
        .await
    }

    /// Sends a message that carries `ack_id` and returns the Ack's status.
    pub async fn acked(&mut self, message: impl Into<ServiceMessage>, ack_id: i32) -> i32 {
        self.send(message).await;
        self.ack(ack_id).await.status
    }

    /// The first ping carrying `key`.
    pub async fn ping(&mut self, key: &str) -> Ping {
        self.take(&format!("ping {key}"), |m| match m {
            ServiceMessage::Ping(p) if p.get(key).is_some() => Some(p.clone()),
            _ => None,
        })
        .await
    }

    /// An `echo` ping round trip: the connection is alive and processed everything before.
    pub async fn echo_round_trip(&mut self) {
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
    pub async fn assert_quiet(&mut self) {
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
    pub async fn until_closed(&mut self) -> Vec<ServiceMessage> {
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

    pub async fn send_to(&mut self, connection: &str, payload: &[u8]) {
        self.send(ConnectionData {
            connection_id: connection.to_string(),
            payload: Bytes::copy_from_slice(payload),
            ext: Extensions::default(),
        })
        .await;
    }
}
