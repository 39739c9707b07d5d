//! Candidate WebSocket echo servers for ADR 0001 (WebSocket library choice).
//!
//! Every candidate has the shape the real service will have: an HTTP/1.1
//! upgrade (hyper 1 or axum 0.8, except `tt-raw` which is a baseline without
//! hyper), then ONE reader task and ONE writer task per connection. The writer
//! is fed by a bounded per-connection `tokio::sync::mpsc` queue; the reader
//! pushes every text/binary message it receives into that queue (echo).
//!
//! Usage: `server <candidate> [port] [max_secs]`
//! Candidates: tt-raw, tt-hyper, tt-hyper-default, axum, axum-default,
//! fastws, tokio-ws. The process exits by itself after `max_secs`
//! (default 300) so a forgotten run cannot linger.

use std::{convert::Infallible, time::Duration};

use bytes::Bytes;
use futures_util::{Sink, SinkExt, StreamExt};
use http_body_util::Empty;
use hyper::{body::Incoming, header, server::conn::http1, service::service_fn, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::{
    io::{AsyncRead, AsyncWrite},
    net::TcpListener,
    sync::mpsc,
};
use tokio_tungstenite::{
    tungstenite::{handshake::derive_accept_key, protocol::Role, protocol::WebSocketConfig, Message},
    WebSocketStream,
};

#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Capacity of the per-connection outbound queue (messages, not bytes).
const QUEUE_CAP: usize = 64;
/// The "small buffer" setting for libraries whose buffers are configurable
/// (tungstenite / axum). Override with `WS_READ_BUF` / `WS_WRITE_BUF` (bytes).
const SMALL_BUF: usize = 4 * 1024;

fn env_size(name: &str) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(SMALL_BUF)
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Candidate {
    /// tokio-tungstenite, plain TcpListener + its own handshake (no hyper).
    TtRaw,
    /// tokio-tungstenite over a hyper 1 upgrade, small buffers.
    TtHyper,
    /// tokio-tungstenite over a hyper 1 upgrade, library default buffers.
    TtHyperDefault,
    /// axum 0.8 `WebSocketUpgrade` (tungstenite inside), small buffers.
    Axum,
    /// axum 0.8 `WebSocketUpgrade`, library default buffers.
    AxumDefault,
    /// fastwebsockets over a hyper 1 upgrade.
    Fastws,
    /// tokio-websockets over a hyper 1 upgrade.
    TokioWs,
}

impl Candidate {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "tt-raw" => Self::TtRaw,
            "tt-hyper" => Self::TtHyper,
            "tt-hyper-default" => Self::TtHyperDefault,
            "axum" => Self::Axum,
            "axum-default" => Self::AxumDefault,
            "fastws" => Self::Fastws,
            "tokio-ws" => Self::TokioWs,
            _ => return None,
        })
    }
}

/// tungstenite configuration with small read/write buffers.
fn small_tt_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(env_size("WS_READ_BUF"))
        .write_buffer_size(env_size("WS_WRITE_BUF"))
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let cand = args
        .get(1)
        .and_then(|s| Candidate::parse(s))
        .expect("usage: server <tt-raw|tt-hyper|tt-hyper-default|axum|axum-default|fastws|tokio-ws> [port] [max_secs]");
    let port: u16 = args.get(2).map_or(9001, |s| s.parse().expect("port"));
    let max_secs: u64 = args.get(3).map_or(300, |s| s.parse().expect("max_secs"));

    let listener = TcpListener::bind(("127.0.0.1", port)).await.expect("bind");
    println!("ready candidate={cand:?} pid={} port={port}", std::process::id());

    let serve = async move {
        match cand {
            Candidate::Axum | Candidate::AxumDefault => serve_axum(listener, cand == Candidate::Axum).await,
            Candidate::TtRaw => serve_tt_raw(listener).await,
            _ => serve_hyper(listener, cand).await,
        }
    };
    // Bounded lifetime: stop by ourselves even if the driver script dies.
    let _ = tokio::time::timeout(Duration::from_secs(max_secs), serve).await;
}

// ---------------------------------------------------------------------------
// Accept loops
// ---------------------------------------------------------------------------

async fn serve_tt_raw(listener: TcpListener) {
    loop {
        let Ok((tcp, _)) = listener.accept().await else { continue };
        let _ = tcp.set_nodelay(true);
        tokio::spawn(async move {
            if let Ok(ws) = tokio_tungstenite::accept_async_with_config(tcp, Some(small_tt_config())).await {
                tt_echo(ws).await;
            }
        });
    }
}

async fn serve_hyper(listener: TcpListener, cand: Candidate) {
    loop {
        let Ok((tcp, _)) = listener.accept().await else { continue };
        let _ = tcp.set_nodelay(true);
        tokio::spawn(async move {
            let svc = service_fn(move |req| upgrade(req, cand));
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(tcp), svc)
                .with_upgrades()
                .await;
        });
    }
}

async fn serve_axum(listener: TcpListener, small: bool) {
    use axum::{extract::ws::WebSocketUpgrade, response::Response, routing::get, serve::ListenerExt, Router};

    let (read_buf, write_buf) = (env_size("WS_READ_BUF"), env_size("WS_WRITE_BUF"));
    let app = Router::new().route(
        "/ws",
        get(move |ws: WebSocketUpgrade| async move {
            let ws = if small {
                ws.read_buffer_size(read_buf).write_buffer_size(write_buf)
            } else {
                ws
            };
            let resp: Response = ws.on_upgrade(axum_echo);
            resp
        }),
    );
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let _ = axum::serve(listener, app).await;
}

/// hyper 1 request handler: answer 101 and hand the upgraded IO to the
/// candidate's connection handler (which becomes the reader task).
async fn upgrade(mut req: Request<Incoming>, cand: Candidate) -> Result<Response<Empty<Bytes>>, Infallible> {
    if cand == Candidate::Fastws {
        return Ok(match fastwebsockets::upgrade::upgrade(&mut req) {
            Ok((resp, fut)) => {
                tokio::spawn(async move {
                    if let Ok(ws) = fut.await {
                        fastws_echo(ws).await;
                    }
                });
                resp
            }
            Err(_) => bad_request(),
        });
    }

    let Some(key) = req.headers().get(header::SEC_WEBSOCKET_KEY) else {
        return Ok(bad_request());
    };
    let accept = derive_accept_key(key.as_bytes());
    let on_upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let Ok(upgraded) = on_upgrade.await else { return };
        let io = TokioIo::new(upgraded);
        match cand {
            Candidate::TtHyper | Candidate::TtHyperDefault => {
                let cfg = if cand == Candidate::TtHyper { small_tt_config() } else { WebSocketConfig::default() };
                tt_echo(WebSocketStream::from_raw_socket(io, Role::Server, Some(cfg)).await).await;
            }
            Candidate::TokioWs => tokio_ws_echo(tokio_websockets::ServerBuilder::new().serve(io)).await,
            _ => unreachable!(),
        }
    });
    let resp = Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header(header::CONNECTION, "Upgrade")
        .header(header::UPGRADE, "websocket")
        .header(header::SEC_WEBSOCKET_ACCEPT, accept)
        .body(Empty::new())
        .expect("static response");
    Ok(resp)
}

fn bad_request() -> Response<Empty<Bytes>> {
    let mut resp = Response::new(Empty::new());
    *resp.status_mut() = StatusCode::BAD_REQUEST;
    resp
}

// ---------------------------------------------------------------------------
// Per-connection echo: reader task (the current task) + spawned writer task
// ---------------------------------------------------------------------------

/// Writer task for Sink-based libraries: drain everything queued, then flush
/// once, so a burst of messages costs one flush (write syscall) where possible.
async fn sink_writer<M, S>(mut sink: S, mut rx: mpsc::Receiver<M>)
where
    S: Sink<M> + Unpin,
{
    while let Some(m) = rx.recv().await {
        if sink.feed(m).await.is_err() {
            return;
        }
        while let Ok(m) = rx.try_recv() {
            if sink.feed(m).await.is_err() {
                return;
            }
        }
        if sink.flush().await.is_err() {
            return;
        }
    }
    let _ = sink.close().await;
}

async fn tt_echo<S>(ws: WebSocketStream<S>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sink, mut stream) = ws.split();
    let (tx, rx) = mpsc::channel::<Message>(QUEUE_CAP);
    tokio::spawn(sink_writer(sink, rx));
    // Pings are answered by tungstenite itself.
    while let Some(Ok(msg)) = stream.next().await {
        if matches!(msg, Message::Close(_)) {
            break;
        }
        if matches!(msg, Message::Text(_) | Message::Binary(_)) && tx.send(msg).await.is_err() {
            break;
        }
    }
}

async fn axum_echo(ws: axum::extract::ws::WebSocket) {
    use axum::extract::ws::Message;
    let (sink, mut stream) = ws.split();
    let (tx, rx) = mpsc::channel::<Message>(QUEUE_CAP);
    tokio::spawn(sink_writer(sink, rx));
    while let Some(Ok(msg)) = stream.next().await {
        if matches!(msg, Message::Close(_)) {
            break;
        }
        if matches!(msg, Message::Text(_) | Message::Binary(_)) && tx.send(msg).await.is_err() {
            break;
        }
    }
}

async fn tokio_ws_echo<S>(ws: tokio_websockets::WebSocketStream<S>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sink, mut stream) = ws.split();
    let (tx, rx) = mpsc::channel::<tokio_websockets::Message>(QUEUE_CAP);
    tokio::spawn(sink_writer(sink, rx));
    while let Some(Ok(msg)) = stream.next().await {
        if msg.is_close() {
            break;
        }
        if (msg.is_text() || msg.is_binary()) && tx.send(msg).await.is_err() {
            break;
        }
    }
}

async fn fastws_echo(ws: fastwebsockets::WebSocket<TokioIo<hyper::upgrade::Upgraded>>) {
    use fastwebsockets::{Frame, FragmentCollectorRead, OpCode, Payload};

    let (rd, mut wr) = ws.split(tokio::io::split);
    let mut rd = FragmentCollectorRead::new(rd);
    let (tx, mut rx) = mpsc::channel::<(OpCode, Bytes)>(QUEUE_CAP);

    // fastwebsockets writes each frame straight to the socket (no write buffer).
    tokio::spawn(async move {
        while let Some((op, data)) = rx.recv().await {
            let frame = Frame::new(true, op, None, Payload::Borrowed(&data));
            if wr.write_frame(frame).await.is_err() || op == OpCode::Close {
                return;
            }
        }
    });

    // Control frames the library must answer (pong, close) go through the queue too.
    let ctl_tx = tx.clone();
    let mut send_fn = move |f: Frame<'_>| {
        let tx = ctl_tx.clone();
        let item = (f.opcode, Bytes::copy_from_slice(&f.payload));
        async move { tx.send(item).await.map_err(|_| "writer gone") }
    };
    while let Ok(frame) = rd.read_frame(&mut send_fn).await {
        match frame.opcode {
            OpCode::Text | OpCode::Binary => {
                let data = match frame.payload {
                    Payload::Bytes(b) => b.freeze(),
                    p => Bytes::copy_from_slice(&p),
                };
                if tx.send((frame.opcode, data)).await.is_err() {
                    break;
                }
            }
            OpCode::Close => break,
            _ => {}
        }
    }
}
