//! WebSockets transport: one task per connection reads frames, drains the outbound queue in
//! batches, and pings when idle. Text frames for JSON, binary for MessagePack.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message as WsMessage, Utf8Bytes, WebSocket, WebSocketUpgrade};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::{FutureExt, SinkExt};
use switchyard_auth::VerifiedToken;
use switchyard_core::{CloseReason, HubName};
use switchyard_hub_protocol::{ping, Format};
use switchyard_router::Batch;
use tokio::time::{timeout, Instant};

use super::{create_client, ClientConnection, Clients, Transport};
use crate::http::{client_ip, text_error};

/// A single write that takes longer than this closes the connection (ASP.NET's default).
const SEND_TIMEOUT: Duration = Duration::from_secs(10);
/// How long to wait for the client's close frame after ours.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);
/// Socket buffers kept small: the read buffer is allocated whole per connection, so it sets
/// idle memory. Measured on the real service at 10,000 idle connections (scripts/measure-idle.sh):
/// 9,582 B per connection at 4 KiB, 6,499 B at 1 KiB, 5,869 B at 256 B. Serverless clients send
/// little (handshake, pings), so 1 KiB costs nothing there; a 2 KB client message takes two reads.
const READ_BUFFER: usize = 1024;
const WRITE_BUFFER: usize = 4 * 1024;
/// Bound on bytes the WebSocket layer may hold for a client that does not read.
const MAX_WRITE_BUFFER: usize = 16 * 1024 * 1024;

pub(super) fn connect(
    clients: Arc<Clients>,
    hub: HubName,
    token: VerifiedToken,
    id: Option<String>,
    upgrade: WebSocketUpgrade,
    request: &axum::http::request::Parts,
) -> Response {
    let id_less = id.is_none();
    let client = match id {
        Some(id) => match clients.get_owned(&id, &hub, &token) {
            Some(client) => client,
            None => return text_error(StatusCode::NOT_FOUND, "No Connection with that ID"),
        },
        // No negotiate: skip-negotiation clients and Python clients after a redirect.
        None => match create_client(
            &clients,
            &hub,
            token,
            false,
            client_ip(request, clients.config()),
        ) {
            Ok(client) => client,
            Err(error) => return error.into_response(),
        },
    };
    client.set_connect_info(&clients, request);
    if client
        .poll
        .websocket_active
        .swap(true, std::sync::atomic::Ordering::AcqRel)
    {
        return text_error(
            StatusCode::CONFLICT,
            "A WebSocket is already connected for this ID",
        );
    }
    if let Err(error) = client.start_transport(&clients, Transport::WebSockets) {
        if id_less {
            clients.finish(&client);
        }
        return error.into_response();
    }
    // One WebSocket message may batch several hub messages (the JS client does), so the
    // frame limit is looser than the per-message limit the splitter enforces.
    let max_message = clients
        .config()
        .limits
        .max_client_message_size
        .saturating_mul(4);
    upgrade
        .read_buffer_size(READ_BUFFER)
        .write_buffer_size(WRITE_BUFFER)
        .max_write_buffer_size(MAX_WRITE_BUFFER)
        .max_message_size(max_message)
        .max_frame_size(max_message)
        .on_failed_upgrade({
            let clients = clients.clone();
            let client = client.clone();
            move |_| clients.finish(&client)
        })
        // The socket lives here, in the task, once: `run` and `close_socket` borrow it. Passed
        // by value, each async fn would keep its own copy in the task (368 B each).
        .on_upgrade(move |mut socket| async move {
            run(&clients, &client, &mut socket).await;
            clients.finish(&client);
        })
}

/// Leaves the hub at once, then completes the WebSocket close handshake (bounded).
async fn close_socket(clients: &Clients, client: &Arc<ClientConnection>, socket: &mut WebSocket) {
    clients.finish(client);
    let _ = timeout(
        SEND_TIMEOUT,
        socket.send(WsMessage::Close(Some(CloseFrame {
            code: 1000,
            reason: Utf8Bytes::from_static(""),
        }))),
    )
    .await;
    // Wait for the client's close frame so the close is clean on its side.
    let _ = timeout(CLOSE_TIMEOUT, async {
        while let Some(Ok(message)) = socket.recv().await {
            if matches!(message, WsMessage::Close(_)) {
                break;
            }
        }
    })
    .await;
}

/// What the select loop found to do, carried out once its futures are gone.
enum Step {
    /// The outbound queue handed over a batch.
    Write,
    /// Nothing was written for a keep-alive interval.
    Ping,
    /// The client closed (or went away): flush the close reply and stop.
    Stop,
}

/// Reads, writes and pings until the connection ends.
///
/// This future lives in the connection's task for the connection's whole life, and a future
/// is as large as its largest state, so every state is kept small: the socket is borrowed
/// (owned, it would be stored again in each async fn that takes it), a plain function returns
/// the async block (an `async fn` stores its arguments twice), nothing the `select!` returns
/// is kept across an await, the inbound lock is synchronous, and the rare close path is boxed.
#[allow(clippy::manual_async_fn)] // on purpose: see above
fn run<'a>(
    clients: &'a Clients,
    client: &'a Arc<ClientConnection>,
    socket: &'a mut WebSocket,
) -> impl Future<Output = ()> + Send + 'a {
    async move {
        // Empty between batches: `next_batch` hands over the queue's own allocation, and it is
        // dropped once written, so an idle connection keeps no frame buffer.
        let mut batch = Vec::new();
        let ping_due = tokio::time::sleep(clients.config().timeouts.keep_alive_interval);
        tokio::pin!(ping_due);
        let reason = loop {
            if client
                .hold_reading
                .load(std::sync::atomic::Ordering::Acquire)
            {
                // Boxed: only a client whose app server is congested pays for this path.
                match Box::pin(hold(clients, client, socket, &mut batch, ping_due.as_mut())).await {
                    Held::Resume => {}
                    Held::Close(reason) => break reason,
                    Held::SocketGone => return,
                }
            }
            let step = tokio::select! {
                incoming = socket.recv() => match incoming {
                    Some(Ok(WsMessage::Text(text))) => {
                        receive(clients, client, &Bytes::from(text));
                        continue;
                    }
                    Some(Ok(WsMessage::Binary(data))) => {
                        receive(clients, client, &data);
                        continue;
                    }
                    Some(Ok(WsMessage::Ping(_) | WsMessage::Pong(_))) => continue,
                    Some(Ok(WsMessage::Close(_))) | None => Step::Stop,
                    Some(Err(error)) => break CloseReason::ProtocolError(error.to_string()),
                },
                next = client.connection.outbound().next_batch(&mut batch) => match next {
                    Batch::Frames => Step::Write,
                    Batch::Close(reason) => break reason,
                },
                _ = &mut ping_due, if client.may_ping() => Step::Ping,
            };
            match step {
                Step::Write => {
                    if !write_batch(socket, client, &mut batch).await {
                        return;
                    }
                }
                Step::Ping => {
                    if !write_ping(socket, client).await {
                        return;
                    }
                }
                Step::Stop => {
                    // Send the queued close reply so the client sees a clean 1000 close.
                    clients.finish(client);
                    let _ = flush(socket).await;
                    return;
                }
            }
            let keep_alive = clients.config().timeouts.keep_alive_interval;
            ping_due.as_mut().reset(Instant::now() + keep_alive);
        };
        // Boxed: only a closing connection pays for the close path's futures.
        Box::pin(close(clients, client, socket, reason)).await;
    }
}

/// How a pause in reading ended.
enum Held {
    /// The app server has room again: read on.
    Resume,
    /// The connection must close for this reason.
    Close(CloseReason),
    /// A write failed: the socket is gone.
    SocketGone,
}

/// Default mode, the app server's connection congested by what this client sent: reading
/// stops (TCP pushes back on the client) until there is room, while the client still gets
/// its messages and pings.
async fn hold(
    clients: &Clients,
    client: &Arc<ClientConnection>,
    socket: &mut WebSocket,
    batch: &mut Vec<Bytes>,
    mut ping_due: std::pin::Pin<&mut tokio::time::Sleep>,
) -> Held {
    loop {
        let step = tokio::select! {
            _ = client.room_for_sends() => return Held::Resume,
            next = client.connection.outbound().next_batch(batch) => match next {
                Batch::Frames => Step::Write,
                Batch::Close(reason) => return Held::Close(reason),
            },
            _ = &mut ping_due, if client.may_ping() => Step::Ping,
        };
        let written = match step {
            Step::Ping => write_ping(socket, client).await,
            _ => write_batch(socket, client, batch).await,
        };
        if !written {
            return Held::SocketGone;
        }
        let keep_alive = clients.config().timeouts.keep_alive_interval;
        ping_due.as_mut().reset(Instant::now() + keep_alive);
    }
}

/// Writes a drained batch and flushes; false if the socket failed.
async fn write_batch(
    socket: &mut WebSocket,
    client: &ClientConnection,
    batch: &mut Vec<Bytes>,
) -> bool {
    let binary = is_binary(client);
    for frame in batch.iter_mut() {
        if !feed(socket, ws_message(binary, std::mem::take(frame))).await {
            return false;
        }
    }
    *batch = Vec::new();
    flush(socket).await
}

/// Writes a keep-alive ping; false if the socket failed.
async fn write_ping(socket: &mut WebSocket, client: &ClientConnection) -> bool {
    let binary = is_binary(client);
    let format = if binary {
        Format::MessagePack
    } else {
        Format::Json
    };
    feed(socket, ws_message(binary, ping(format))).await && flush(socket).await
}

/// Hands what the client sent to the hub-protocol side; a protocol error closes the connection.
fn receive(clients: &Clients, client: &Arc<ClientConnection>, data: &[u8]) {
    let result = client.receive(clients, &mut client.inbound.lock(), data);
    if let Err(reason) = result {
        client.connection.close(reason);
    }
}

/// Sends the Close message (if the handshake was done), then closes the socket.
async fn close(
    clients: &Clients,
    client: &Arc<ClientConnection>,
    socket: &mut WebSocket,
    reason: CloseReason,
) {
    tracing::debug!(connection = %client.connection.id(), reason = reason.code(), "closing websocket");
    if let Some(close) = client.close_frame(&reason) {
        if !feed(socket, ws_message(is_binary(client), close)).await {
            return;
        }
    }
    close_socket(clients, client, socket).await;
}

/// Whether this connection's frames go out binary: MessagePack-framed connections (also
/// `blazorpack` in Default mode), from the handshake response on (ASP.NET sets the transfer format before answering the handshake).
fn is_binary(client: &ClientConnection) -> bool {
    client.connection.protocol().and_then(Format::for_relay) == Some(Format::MessagePack)
}

fn ws_message(binary: bool, frame: Bytes) -> WsMessage {
    if binary {
        WsMessage::Binary(frame)
    } else {
        WsMessage::Text(text_frame(frame))
    }
}

/// JSON frames are UTF-8 by construction (handshake, service-encoded JSON, app payloads that a
/// JSON client accepts); anything else is sent lossily rather than panicking.
fn text_frame(frame: Bytes) -> Utf8Bytes {
    match Utf8Bytes::try_from(frame.clone()) {
        Ok(text) => text,
        Err(_) => Utf8Bytes::from(String::from_utf8_lossy(&frame).into_owned()),
    }
}

/// Plain functions, not `async fn`: an `async fn` would hold `message` a second time beside
/// the `Feed` future that owns it.
fn feed(socket: &mut WebSocket, message: WsMessage) -> impl Future<Output = bool> + '_ {
    timeout(SEND_TIMEOUT, socket.feed(message)).map(|sent| matches!(sent, Ok(Ok(()))))
}

fn flush(socket: &mut WebSocket) -> impl Future<Output = bool> + '_ {
    timeout(SEND_TIMEOUT, socket.flush()).map(|sent| matches!(sent, Ok(Ok(()))))
}
