//! `switchyard-bench floor`: the least a server must do to move the bench's bytes, so that a
//! scenario's service CPU can be divided by what the machine itself needs for the same work.
//!
//! It speaks just enough of a plain SignalR server (the peer's surface: negotiate at
//! `/{hub}/negotiate`, WebSockets at `/{hub}`, REST at `/api/hubs/{hub}/:send`) for the
//! generator to run unchanged, and sends the same WebSocket frames Switchyard sends — but
//! with no routing, auth, JSON parsing or hub protocol beyond splicing bytes: each message's
//! frame is built once and written straight to every socket from the sender's task
//! ([`fanout`]). HTTP is hyper's; after the upgrade the raw TCP socket is used.
//!
//! What it serves: `Echo` (back to the caller), `Broadcast` (to everyone) and the REST
//! broadcast, over WebSockets with the JSON protocol; pings every 15 s as Switchyard does.
//! Everything else (groups, users, MessagePack, other transports) is refused or ignored:
//! run those scenarios against the service alone.

mod fanout;
mod frames;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{header, Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};

use fanout::Sockets;

/// Flags of `switchyard-bench floor`.
#[derive(Debug, Clone, clap::Args)]
pub struct FloorArgs {
    /// Address to bind; the printed URL names the bound port.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// The hub served at `/{hub}`.
    #[arg(long, default_value = "bench")]
    pub hub: String,
}

struct Floor {
    hub: String,
    sockets: Sockets,
    next_id: AtomicU64,
}

/// Serves until `shutdown` resolves. Prints `Peer listening on URL` once bound (the bench
/// starts it as a peer, see `--floor`).
pub async fn run_floor(
    args: &FloorArgs,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), String> {
    let listener = TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("bind {}: {e}", args.listen))?;
    let address = listener.local_addr().map_err(|e| e.to_string())?;
    println!("Peer listening on http://{address}");
    let floor = Arc::new(Floor {
        hub: args.hub.clone(),
        sockets: Sockets::default(),
        next_id: AtomicU64::new(1),
    });
    tokio::spawn(ping_every(floor.clone(), Duration::from_secs(15)));
    tokio::pin!(shutdown);
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(_) => continue,
            },
            _ = &mut shutdown => return Ok(()),
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(serve_http(floor.clone(), stream));
    }
}

/// The keep-alive ping Switchyard sends every 15 s, so idle runs move the same bytes.
async fn ping_every(floor: Arc<Floor>, every: Duration) {
    let ping = frames::text(&[b"{\"type\":6}\x1e"]);
    let mut tick = tokio::time::interval(every);
    tick.tick().await;
    loop {
        tick.tick().await;
        floor.sockets.send_all(&ping);
    }
}

async fn serve_http(floor: Arc<Floor>, stream: TcpStream) {
    let service = hyper::service::service_fn(move |request| answer(floor.clone(), request));
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades()
        .await;
}

type Answer = Response<Full<Bytes>>;

fn status(code: StatusCode, text: &'static str) -> Answer {
    let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    *response.status_mut() = code;
    response
}

async fn answer(floor: Arc<Floor>, request: Request<Incoming>) -> Result<Answer, Infallible> {
    let path = request.uri().path();
    let hub_path = format!("/{}", floor.hub);
    let rest_send = format!("/api/hubs/{}/:send", floor.hub);
    Ok(match (request.method(), path) {
        (&Method::POST, p) if p == format!("{hub_path}/negotiate") => negotiate(&floor),
        (&Method::GET, p) if p == hub_path => upgrade(floor, request),
        (&Method::POST, p) if p == rest_send => {
            let Ok(body) = request.into_body().collect().await else {
                return Ok(status(StatusCode::BAD_REQUEST, "body"));
            };
            match frames::measure_from_rest(&body.to_bytes()) {
                Some(frame) => {
                    floor.sockets.send_all(&frame);
                    status(StatusCode::ACCEPTED, "")
                }
                None => status(
                    StatusCode::BAD_REQUEST,
                    "the floor takes {target, arguments}",
                ),
            }
        }
        _ => status(
            StatusCode::NOT_FOUND,
            "the floor serves negotiate, WebSockets and the REST broadcast only",
        ),
    })
}

fn negotiate(floor: &Floor) -> Answer {
    let id = floor.next_id.fetch_add(1, Relaxed);
    let body = format!(
        "{{\"negotiateVersion\":1,\"connectionId\":\"f{id}\",\"connectionToken\":\"f{id}\",\
         \"availableTransports\":[{{\"transport\":\"WebSockets\",\"transferFormats\":[\"Text\",\"Binary\"]}}]}}"
    );
    let mut response = Response::new(Full::new(Bytes::from(body)));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    response
}

fn upgrade(floor: Arc<Floor>, mut request: Request<Incoming>) -> Answer {
    let key = request
        .headers()
        .get(header::SEC_WEBSOCKET_KEY)
        .map(|key| tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes()));
    let Some(accept) = key else {
        return status(StatusCode::BAD_REQUEST, "WebSockets only");
    };
    let upgrading = hyper::upgrade::on(&mut request);
    tokio::spawn(async move {
        let Ok(upgraded) = upgrading.await else {
            return;
        };
        // The raw socket (and what hyper read past the request) from here on.
        let Ok(parts) = upgraded.downcast::<TokioIo<TcpStream>>() else {
            return;
        };
        fanout::serve_socket(floor, parts.io.into_inner(), parts.read_buf).await;
    });
    let mut response = status(StatusCode::SWITCHING_PROTOCOLS, "");
    let headers = response.headers_mut();
    headers.insert(
        header::UPGRADE,
        header::HeaderValue::from_static("websocket"),
    );
    headers.insert(
        header::CONNECTION,
        header::HeaderValue::from_static("Upgrade"),
    );
    if let Ok(accept) = header::HeaderValue::from_str(&accept) {
        headers.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    }
    response
}
