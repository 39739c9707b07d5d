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
/// idle memory. Measured on the real service at 10,000 idle connections (bench/runs/measure-idle.sh):
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
        Some(id) => {
            match clients.get_owned(&id, &hub, &token, client_ip(request, clients.config())) {
                Some(client) => client,
                None => return text_error(StatusCode::NOT_FOUND, "No Connection with that ID"),
            }
        }
        // No negotiate: skip-negotiation clients and Python clients after a redirect. This
        // is the connection's first request, so the connect rates apply here.
        None => match super::throttle_connect(&clients, request).and_then(|()| {
            create_client(
                &clients,
                &hub,
                token,
                false,
                client_ip(request, clients.config()),
            )
        }) {
            Ok(client) => client,
            Err(error) => return error.into_response(),
        },
    };
    // Stateful reconnect: the client is back on the same connection, maybe before the old
    // socket was noticed dead; it takes the connection over from that one.
    let generation = client.resume().map(|resume| {
        let generation = resume.lock().claim();
        client.connection.outbound().interrupt();
        generation
    });
    if generation.is_none() {
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
            move |_| match generation {
                // The client may try again within the window.
                Some(generation) => client.transport_ended(&clients, generation),
                None => clients.finish(&client),
            }
        })
        // The socket lives here, in the task, once: `run` and `close_socket` borrow it. Passed
        // by value, each async fn would keep its own copy in the task (368 B each).
        .on_upgrade(move |mut socket| async move {
            let ended = match generation {
                None => run(&clients, &client, &mut socket, 0).await,
                // Boxed: only returning clients pay for the replay's futures.
                Some(generation) => {
                    Box::pin(resume(&clients, &client, &mut socket, generation)).await
                }
            };
            if ended == Ended::Finished {
                clients.finish(&client);
            }
        })
}

/// How a transport task ended.
#[derive(Debug, PartialEq, Eq)]
enum Ended {
    /// The connection is over.
    Finished,
    /// Stateful reconnect: the socket is gone (or another took over) and the connection
    /// waits for its client.
    Detached,
}

/// Stateful reconnect, a returning client: waits for the old transport task to let go, then
/// replays what the client has not acknowledged and carries on as usual.
async fn resume(
    clients: &Clients,
    client: &Arc<ClientConnection>,
    socket: &mut WebSocket,
    generation: u64,
) -> Ended {
    let resume = client.resume().expect("only stateful connections resume");
    // The old task was interrupted; a write in progress may hold it up to SEND_TIMEOUT.
    let deadline = Instant::now() + SEND_TIMEOUT + Duration::from_secs(1);
    loop {
        {
            let mut resume = resume.lock();
            if !resume.owns(generation) {
                // A newer socket of the same client took over meanwhile.
                return Ended::Detached;
            }
            if resume.start_writer(generation) {
                break;
            }
        }
        if Instant::now() > deadline {
            tracing::warn!(connection = %client.connection.id(), "previous transport did not stop; reconnect refused");
            return Ended::Detached;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    client.inbound.lock().drop_partial();
    // Its silence while away does not count against it.
    client
        .last_received_ms
        .store(clients.now_ms(), std::sync::atomic::Ordering::Relaxed);
    let frames = resume.lock().replay();
    clients
        .metrics()
        .stateful_reconnects
        .get_or_create(&crate::metrics::KindLabel { kind: "resumed" })
        .inc();
    tracing::debug!(connection = %client.connection.id(), frames = frames.len(), "stateful reconnect");
    let binary = is_binary(client);
    for frame in frames {
        if !feed(socket, ws_message(binary, frame)).await {
            client.transport_ended(clients, generation);
            return Ended::Detached;
        }
    }
    if !flush(socket).await {
        client.transport_ended(clients, generation);
        return Ended::Detached;
    }
    run(clients, client, socket, generation).await
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
    /// Nothing was written for a keep-alive interval (or an Ack is due).
    Ping,
    /// The client closed: flush the close reply and stop.
    Stop,
    /// The socket ended without a close (or, on a stateful connection, failed): a stateful
    /// connection waits for its client, any other ends.
    Dropped,
    /// The queue was interrupted: a new socket may be taking the connection over.
    Look,
}

/// Stateful reconnect: what the client sent is acknowledged at most this often.
const ACK_INTERVAL: Duration = Duration::from_secs(1);

/// Reads, writes and pings until the connection ends.
///
/// This future lives in the connection's task for the connection's whole life, and a future
/// is as large as its largest state, so every state is kept small: the socket is borrowed
/// (owned, it would be stored again in each async fn that takes it), a plain function returns
/// the async block (an `async fn` stores its arguments twice), nothing the `select!` returns
/// is kept across an await, the inbound lock is synchronous, and the rare close path is boxed.
/// The writer's step is spelled out here, not called as `write_taken`: that async fn's four
/// arguments, stored twice, took every connection's task over a 128-byte allocation step
/// (1,152 to 1,280 bytes; dhat, 2,000 idle connections).
/// `generation`: this transport's number for stateful reconnect (0 for the first).
#[allow(clippy::manual_async_fn)] // on purpose: see above
fn run<'a>(
    clients: &'a Clients,
    client: &'a Arc<ClientConnection>,
    socket: &'a mut WebSocket,
    generation: u64,
) -> impl Future<Output = Ended> + Send + 'a {
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
                // Boxed: only a client whose app server or upstream is congested pays for this path.
                match Box::pin(hold(clients, client, socket, &mut batch, ping_due.as_mut())).await {
                    Held::Resume => {}
                    Held::Close(reason) => break reason,
                    Held::SocketGone => return dropped(clients, client, generation),
                    Held::Look => {
                        if let Some(ended) = look(client, generation) {
                            return ended;
                        }
                    }
                }
            }
            // Stateful reconnect: with too much unacknowledged, take nothing more until Acks.
            let take = !client
                .resume()
                .is_some_and(|resume| resume.lock().is_full());
            let step = tokio::select! {
                incoming = socket.recv() => match incoming {
                    Some(Ok(WsMessage::Text(text))) => {
                        receive(clients, client, &Bytes::from(text));
                        schedule_ack(client, ping_due.as_mut());
                        continue;
                    }
                    Some(Ok(WsMessage::Binary(data))) => {
                        receive(clients, client, &data);
                        schedule_ack(client, ping_due.as_mut());
                        continue;
                    }
                    Some(Ok(WsMessage::Ping(_) | WsMessage::Pong(_))) => continue,
                    Some(Ok(WsMessage::Close(_))) => Step::Stop,
                    None => Step::Dropped,
                    Some(Err(_)) if client.resume().is_some() => Step::Dropped,
                    Some(Err(error)) => {
                        break read_error(error, clients.config().limits.max_client_message_size)
                    }
                },
                next = client.connection.outbound().next_batch_gated(&mut batch, take) => match next {
                    Batch::Frames => Step::Write,
                    Batch::Close(reason) => break reason,
                    Batch::Interrupted => Step::Look,
                },
                _ = &mut ping_due, if client.may_ping() => Step::Ping,
            };
            match step {
                Step::Write => {
                    client.batch_taken(clients, &batch);
                    if !write_batch(socket, client, &mut batch).await {
                        return dropped(clients, client, generation);
                    }
                    client.batch_written();
                }
                Step::Ping => {
                    if !write_ping(socket, client).await {
                        return dropped(clients, client, generation);
                    }
                }
                Step::Stop => {
                    // Send the queued close reply so the client sees a clean 1000 close.
                    clients.finish(client);
                    let _ = flush(socket).await;
                    return Ended::Finished;
                }
                Step::Dropped => {
                    if client.resume().is_some() {
                        return dropped(clients, client, generation);
                    }
                    clients.finish(client);
                    return Ended::Finished;
                }
                Step::Look => {
                    if let Some(ended) = look(client, generation) {
                        return ended;
                    }
                    continue;
                }
            }
            ping_due.as_mut().reset(next_ping(clients, client));
        };
        // Boxed: only a closing connection pays for the close path's futures.
        Box::pin(close(clients, client, socket, reason)).await;
        Ended::Finished
    }
}

/// When the keep-alive ping is next due after a write, or the Ack stateful reconnect owes
/// the client if that is sooner.
fn next_ping(clients: &Clients, client: &ClientConnection) -> Instant {
    let next = Instant::now() + clients.config().timeouts.keep_alive_interval;
    let ack_due = client.resume().and_then(|resume| resume.lock().ack_due());
    ack_due.map_or(next, |due| due.min(next))
}

/// Stateful reconnect: after the client sent something, makes sure an Ack goes out within
/// [`ACK_INTERVAL`] (it rides on the keep-alive timer). The deadline is kept in the
/// connection's stateful state, not in this task, which every connection has.
fn schedule_ack(client: &ClientConnection, ping_due: std::pin::Pin<&mut tokio::time::Sleep>) {
    let Some(resume) = client.resume() else {
        return;
    };
    if let Some(due) = resume.lock().schedule_ack(Instant::now() + ACK_INTERVAL) {
        if due < ping_due.deadline() {
            ping_due.reset(due);
        }
    }
}

/// The socket is gone without a close: a stateful connection waits for its client to come
/// back; any other ends.
fn dropped(clients: &Clients, client: &ClientConnection, generation: u64) -> Ended {
    if client.resume().is_none() || client.connection.outbound().is_closing() {
        // A write failed or stalled past SEND_TIMEOUT (a reason given earlier stays).
        client.connection.close(CloseReason::SocketError(
            "writing to the socket failed".into(),
        ));
        return Ended::Finished;
    }
    client.transport_ended(clients, generation);
    Ended::Detached
}

/// After an interrupt: `Some` if this transport must stop, because a newer socket took the
/// connection over or the connection was finished.
fn look(client: &ClientConnection, generation: u64) -> Option<Ended> {
    if client.is_finished() {
        return Some(Ended::Finished);
    }
    let resume = client.resume()?;
    let mut resume = resume.lock();
    if resume.owns(generation) {
        return None;
    }
    // Handing over: the new task starts once this one is marked gone.
    resume.writer_ended(generation, 0);
    Some(Ended::Detached)
}

/// How a pause in reading ended.
enum Held {
    /// The app server has room again: read on.
    Resume,
    /// The connection must close for this reason.
    Close(CloseReason),
    /// A write failed: the socket is gone.
    SocketGone,
    /// The queue was interrupted (see [`Step::Look`]).
    Look,
}

/// The app server's connection (Default mode) or the client's upstream queue (serverless)
/// congested by what this client sent: reading stops (TCP pushes back on the client) until
/// there is room, while the client still gets its messages and pings.
async fn hold(
    clients: &Clients,
    client: &Arc<ClientConnection>,
    socket: &mut WebSocket,
    batch: &mut Vec<Bytes>,
    mut ping_due: std::pin::Pin<&mut tokio::time::Sleep>,
) -> Held {
    loop {
        let take = !client
            .resume()
            .is_some_and(|resume| resume.lock().is_full());
        let step = tokio::select! {
            _ = client.room_for_sends() => return Held::Resume,
            next = client.connection.outbound().next_batch_gated(batch, take) => match next {
                Batch::Frames => Step::Write,
                Batch::Close(reason) => return Held::Close(reason),
                Batch::Interrupted => return Held::Look,
            },
            _ = &mut ping_due, if client.may_ping() => Step::Ping,
        };
        let written = match step {
            Step::Ping => write_ping(socket, client).await,
            _ => write_taken(clients, client, socket, batch).await,
        };
        if !written {
            return Held::SocketGone;
        }
        let keep_alive = clients.config().timeouts.keep_alive_interval;
        ping_due.as_mut().reset(Instant::now() + keep_alive);
    }
}

/// Writes a batch taken from the queue (see the writer's step, `writer.rs`); false if the
/// socket failed. For the boxed held path; `run` spells it out (see there).
async fn write_taken(
    clients: &Clients,
    client: &ClientConnection,
    socket: &mut WebSocket,
    batch: &mut Vec<Bytes>,
) -> bool {
    client.batch_taken(clients, batch);
    if !write_batch(socket, client, batch).await {
        return false;
    }
    client.batch_written();
    true
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

/// Writes a keep-alive ping, or the Ack a stateful connection owes (any message keeps the
/// client's timeout at bay); false if the socket failed.
async fn write_ping(socket: &mut WebSocket, client: &ClientConnection) -> bool {
    let binary = is_binary(client);
    let format = if binary {
        Format::MessagePack
    } else {
        Format::Json
    };
    let frame = client
        .resume()
        .and_then(|resume| resume.lock().take_ack())
        .unwrap_or_else(|| ping(format));
    feed(socket, ws_message(binary, frame)).await && flush(socket).await
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
    // The reason the loop found is the connection's (the first given wins), so that its end
    // is logged and counted with it.
    client.connection.close(reason.clone());
    if let CloseReason::SocketError(_) = reason {
        // Nobody is there to read a Close message or answer a close handshake.
        clients.finish(client);
        return;
    }
    if let Some(close) = client.close_frame(&reason) {
        if !feed(socket, ws_message(is_binary(client), close)).await {
            return;
        }
    }
    close_socket(clients, client, socket).await;
}

/// Why a read failed: the socket (network or TLS error, a peer gone without a close frame),
/// a frame over the limit (`limit`: the configured message limit), or what else the peer
/// sent wrong (a bad frame, bad UTF-8).
fn read_error(error: axum::Error, limit: usize) -> CloseReason {
    use tungstenite::error::{CapacityError, ProtocolError};
    use tungstenite::Error;
    let error = error.into_inner();
    // A frame over the WebSocket limit (a multiple of the message limit, as one frame may
    // batch messages): a message too large, whichever layer saw it first.
    if let Some(Error::Capacity(CapacityError::MessageTooLong { .. })) =
        error.downcast_ref::<Error>()
    {
        return CloseReason::MessageTooLarge { limit };
    }
    let socket = match error.downcast_ref::<Error>() {
        Some(Error::Io(_) | Error::Tls(_) | Error::ConnectionClosed | Error::AlreadyClosed) => true,
        Some(Error::Protocol(ProtocolError::ResetWithoutClosingHandshake)) => true,
        _ => error.downcast_ref::<std::io::Error>().is_some(),
    };
    match socket {
        true => CloseReason::SocketError(error.to_string()),
        false => CloseReason::ProtocolError(error.to_string()),
    }
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
