//! One fixed server-connection slot: dial, handshake, run the session, and redial
//! forever with the SDK's back-off (spec §1.1, §1.4, §1.10).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::{SinkExt, StreamExt};
use switchyard_service_protocol::{
    self as sp, Extensions, FrameReader, HandshakeRequest, Ping, ServiceMessage,
};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use super::config::new_guid;
use super::hub::Hub;
use super::link::{now_ms, Link, Out};
use super::methods::HubMethods;
use super::token::{server_token, server_url};
use super::AppServerError;

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// The SDK's handshake timeout.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(15);
/// Keep-alive: write a ping when nothing was written for this long.
const KEEP_ALIVE_MS: u64 = 5_000;
/// The service is considered gone after this long without a byte from it.
const SERVICE_TIMEOUT_MS: u64 = 30_000;
/// Largest service message accepted.
const MAX_MESSAGE: usize = 64 * 1024 * 1024;
/// The writer coalesces queued messages into WebSocket frames of up to this size.
const WRITE_BATCH: usize = 64 * 1024;

/// `Asrs-User-Agent`: `{package}/{version} ({runtime}; {OS}; {arch})`.
fn user_agent() -> String {
    format!(
        "switchyard-client/{} (Rust; {}; {})",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::OS,
        std::env::consts::ARCH
    )
}

/// Delay before retry `n` (0-based): 2^n s for n ≤ 5, then 60 s; plus up to 1 s jitter.
pub fn retry_delay(n: u32) -> Duration {
    let base = if n <= 5 { 1u64 << n } else { 60 };
    Duration::from_secs(base) + Duration::from_millis(rand::random::<u64>() % 1000)
}

/// Keeps slot `slot` of `hub` connected until the app server stops.
pub async fn run_slot(hub: Arc<Hub>, slot: usize, methods: Arc<dyn HubMethods>) {
    let mut stop = hub.info.stop_signal.subscribe();
    // Consecutive failed dials; the first retry (after a drop or a failure) waits 1 s.
    let mut failures = 0u32;
    while !hub.info.is_stopping() {
        let delay = match dial(&hub, None).await {
            Ok((socket, leftover, cid)) => {
                failures = 0;
                run_session(&hub, slot, socket, leftover, cid, &methods).await;
                retry_delay(0)
            }
            Err(e) => {
                tracing::warn!(hub = %hub.name, slot, "server connection failed: {e}");
                failures = failures.saturating_add(1);
                retry_delay(failures - 1)
            }
        };
        if hub.info.is_stopping() {
            break;
        }
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = stop.wait_for(|stopped| *stopped) => break,
        }
    }
}

/// A `["target", instance]` ping: opens one OnDemand connection to that service instance
/// (spec §1.6), unless the hub is at `max_hub_server_connections`. It is not redialled when
/// it drops, as the SDK does not.
pub(super) fn open_on_demand(hub: Arc<Hub>, instance: &str, methods: Arc<dyn HubMethods>) {
    if hub.info.is_stopping() {
        return;
    }
    let Some(slot) = hub.reserve_on_demand_slot() else {
        tracing::info!(hub = %hub.name, instance, "not opening an OnDemand connection: at the cap");
        return;
    };
    let instance = instance.to_owned();
    tokio::spawn(async move {
        match dial(&hub, Some(&instance)).await {
            Ok((socket, leftover, cid)) => {
                run_session(&hub, slot, socket, leftover, cid, &methods).await;
            }
            Err(e) => {
                // Expected when the instance is gone or refuses more connections.
                tracing::info!(hub = %hub.name, instance, "OnDemand connection not made: {e}");
            }
        }
        hub.release_on_demand_slot(slot);
    });
}

/// Opens the WebSocket and completes the service handshake (an OnDemand one with `target`).
/// Returns the socket, bytes read past the HandshakeResponse, and the `cid`.
async fn dial(
    hub: &Hub,
    target: Option<&str>,
) -> Result<(Socket, BytesMut, String), AppServerError> {
    let config = &hub.info.config;
    let cs = &config.connection_string;
    let cid = new_guid();
    let token = server_token(cs, &hub.name, &config.server_id)?;
    let mut url = server_url(cs, &hub.name, &cid);
    if let Some(target) = target {
        url.push_str("&target=");
        url.push_str(&urlencoding_of(target));
    }
    let mut request = url.into_client_request()?;
    let headers = request.headers_mut();
    let value = |text: String| {
        HeaderValue::from_str(&text).map_err(|_| AppServerError::Protocol("bad header".into()))
    };
    headers.insert("Authorization", value(format!("Bearer {token}"))?);
    headers.insert("X-ASRS-Server-Id", value(config.server_id.clone())?);
    headers.insert("Asrs-User-Agent", value(user_agent())?);
    headers.insert(
        "X-Requested-With",
        HeaderValue::from_static("XMLHttpRequest"),
    );

    let handshake = async {
        // No Nagle, as .NET's socket handler: with it, each small message waits for the
        // service's delayed ACK (measured: p99 7 ms → 3 ms at 1,000 echoes/s, max 45 → 8.5 ms).
        let (mut socket, _) = tokio_tungstenite::connect_async_tls_with_config(
            request,
            Some(socket_config()),
            true,
            Some(tokio_tungstenite::Connector::Rustls(
                config.tls_roots.rustls(),
            )),
        )
        .await?;
        let request = HandshakeRequest {
            version: sp::VERSION,
            connection_type: match target {
                Some(_) => HandshakeRequest::CONNECTION_TYPE_ONDEMAND,
                None => HandshakeRequest::CONNECTION_TYPE_DEFAULT,
            },
            target: target.unwrap_or_default().to_owned(),
            migration_level: config.graceful_shutdown.migration_level(),
            ext: Extensions::default(),
            allow_stateful_reconnects: config.allow_stateful_reconnects.then_some(true),
        };
        socket
            .send(WsMessage::Binary(sp::encoded(&request.into())))
            .await?;
        let reader = FrameReader::new(MAX_MESSAGE);
        let mut buffer = BytesMut::new();
        loop {
            if let Some(body) = reader
                .next_body(&mut buffer)
                .map_err(|e| AppServerError::Protocol(e.to_string()))?
            {
                return match sp::decode(&body) {
                    Ok(ServiceMessage::HandshakeResponse(r)) if r.error_message.is_empty() => {
                        Ok((socket, buffer))
                    }
                    Ok(ServiceMessage::HandshakeResponse(r)) => {
                        let _ = socket.close(None).await;
                        Err(AppServerError::HandshakeRefused(r.error_message))
                    }
                    Ok(other) => Err(AppServerError::Protocol(format!(
                        "expected HandshakeResponse, got {}",
                        other.name()
                    ))),
                    Err(e) => Err(AppServerError::Protocol(e.to_string())),
                };
            }
            match socket.next().await {
                Some(Ok(WsMessage::Binary(data))) => buffer.extend_from_slice(&data),
                Some(Ok(WsMessage::Text(text))) => buffer.extend_from_slice(text.as_bytes()),
                Some(Ok(WsMessage::Close(_))) | None => return Err(AppServerError::Closed),
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e.into()),
            }
        }
    };
    let (socket, leftover) = tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake)
        .await
        .map_err(|_| AppServerError::Timeout("service handshake"))??;
    Ok((socket, leftover, cid))
}

/// Runs a handshaken connection until it drops, the service goes silent, a
/// ServiceError arrives, or the app server stops.
async fn run_session(
    hub: &Arc<Hub>,
    slot: usize,
    socket: Socket,
    leftover: BytesMut,
    cid: String,
    methods: &Arc<dyn HubMethods>,
) {
    let (sink, mut stream) = socket.split();
    let (tx, rx) = mpsc::unbounded_channel();
    let link = Arc::new(Link::new(hub.info.next_link_id(), cid, tx));
    hub.attach(slot, link.clone());
    tracing::debug!(hub = %hub.name, slot, cid = %link.cid, "server connection up");

    let writer = write_loop(sink, rx, link.clone());
    tokio::pin!(writer);
    let reader = async {
        let frames = FrameReader::new(MAX_MESSAGE);
        let mut buffer = leftover;
        let mut last_read = now_ms();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        if !dispatch(hub, &link, &frames, &mut buffer, methods) {
            return;
        }
        loop {
            tokio::select! {
                message = stream.next() => {
                    match message {
                        Some(Ok(WsMessage::Binary(data))) => buffer.extend_from_slice(&data),
                        Some(Ok(WsMessage::Text(text))) => buffer.extend_from_slice(text.as_bytes()),
                        Some(Ok(WsMessage::Close(_))) | None | Some(Err(_)) => return,
                        Some(Ok(_)) => continue,
                    }
                    last_read = now_ms();
                    if !dispatch(hub, &link, &frames, &mut buffer, methods) {
                        return;
                    }
                    keep_alive(hub, &link);
                }
                _ = tick.tick() => {
                    if now_ms().saturating_sub(last_read) > SERVICE_TIMEOUT_MS {
                        tracing::warn!(hub = %hub.name, cid = %link.cid, "service silent for 30 s; reconnecting");
                        return;
                    }
                    keep_alive(hub, &link);
                }
                _ = link.kill.notified() => return,
            }
        }
    };
    tokio::pin!(reader);
    tokio::select! {
        _ = &mut reader => {}
        _ = &mut writer => {
            // Graceful close: give the service a moment to answer the Close frame.
            let _ = tokio::time::timeout(Duration::from_secs(1), &mut reader).await;
        }
    }
    hub.detach(slot, &link);
    tracing::debug!(hub = %hub.name, slot, cid = %link.cid, "server connection down");
}

/// Decodes every complete message in `buffer`; `false` when the stream is unusable.
fn dispatch(
    hub: &Arc<Hub>,
    link: &Arc<Link>,
    frames: &FrameReader,
    buffer: &mut BytesMut,
    methods: &Arc<dyn HubMethods>,
) -> bool {
    loop {
        match frames.next_body(buffer) {
            Ok(Some(body)) => match sp::decode(&body) {
                Ok(message) => hub.on_message(link, message, methods),
                Err(e) => tracing::warn!(hub = %hub.name, "undecodable service message: {e}"),
            },
            Ok(None) => return true,
            Err(e) => {
                tracing::warn!(hub = %hub.name, "service stream broken: {e}");
                return false;
            }
        }
    }
}

/// Percent-encodes everything but unreserved characters (RFC 3986), as the SDK's
/// `WebUtility.UrlEncode` does for instance ids.
fn urlencoding_of(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Writes `["#clientInHub", n, "#client", m]` when nothing was written for 5 s.
fn keep_alive(hub: &Hub, link: &Link) {
    if now_ms().saturating_sub(link.last_write_ms.load(Ordering::Relaxed)) > KEEP_ALIVE_MS {
        let ping: Ping = hub.keep_alive_ping(link);
        link.send(ping);
    }
}

/// Writes queued messages, coalescing what is already queued into one binary frame.
async fn write_loop<S>(mut sink: S, mut rx: mpsc::UnboundedReceiver<Out>, link: Arc<Link>)
where
    S: futures_util::Sink<WsMessage> + Unpin,
{
    while let Some(out) = rx.recv().await {
        let first = match out {
            Out::Data(bytes) => bytes,
            Out::Close => {
                let _ = sink.send(WsMessage::Close(None)).await;
                return;
            }
        };
        let mut close_after = false;
        let frame: Bytes = if first.len() >= WRITE_BATCH {
            first
        } else {
            let mut batch = BytesMut::from(&first[..]);
            while batch.len() < WRITE_BATCH {
                match rx.try_recv() {
                    Ok(Out::Data(more)) => batch.extend_from_slice(&more),
                    Ok(Out::Close) => {
                        close_after = true;
                        break;
                    }
                    Err(_) => break,
                }
            }
            batch.freeze()
        };
        let len = frame.len();
        if sink.send(WsMessage::Binary(frame)).await.is_err() {
            return;
        }
        link.wrote(len);
        link.last_write_ms.store(now_ms(), Ordering::Relaxed);
        if close_after {
            let _ = sink.send(WsMessage::Close(None)).await;
            return;
        }
    }
}

/// tungstenite zero-fills the free part of its read buffer before every read; its 128 KiB
/// default makes that memset dominate small reads. 16 KiB still takes a burst in one read.
fn socket_config() -> tokio_tungstenite::tungstenite::protocol::WebSocketConfig {
    tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default().read_buffer_size(16 * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn back_off_doubles_then_caps_at_a_minute() {
        for (n, secs) in [(0, 1), (1, 2), (2, 4), (5, 32), (6, 60), (40, 60)] {
            let d = retry_delay(n);
            assert!(d >= Duration::from_secs(secs), "{n}: {d:?}");
            assert!(d < Duration::from_secs(secs + 1), "{n}: {d:?}");
        }
    }
}
