//! The Switchyard service as a library: everything one node does, over a bound listener.
//!
//! # Layout
//! - [`config`]: the settings tree with defaults and validation.
//! - [`node`]: [`Node`], the shared state of one service node, and its executor: every
//!   operation REST (and later the service protocol) performs goes through it.
//! - `client`: the client endpoint — negotiate, WebSockets, Server-Sent Events, long polling,
//!   and the hub-protocol session each transport feeds.
//! - `server`: Default mode — the app-server endpoint `/server` (Azure's service protocol),
//!   pinning clients to app-server connections and relaying their traffic.
//! - `upstream`: serverless upstream webhooks — client events and invocations POSTed to the
//!   app's endpoint, invocation results relayed back.
//! - `rest`: the data-plane REST API (2022-06-01, v1, v1-preview), thin adapters over the executor.
//! - [`metrics`]: every exported metric, served at `GET /metrics`.
//! - `cors`: cross-origin access for browsers, a middleware in front of every route.
//! - [`serve`]: runs the HTTP server on a listener until a shutdown future completes.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

mod client;
pub mod config;
mod cors;
/// Exists for the fuzz targets in `fuzz/` only (wrappers over crate-private parsers); not an API.
#[doc(hidden)]
pub mod fuzzing;
mod http;
pub mod metrics;
pub mod node;
mod rest;
mod server;
mod upstream;

pub use config::Config;
pub use node::Node;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router as HttpRouter;
use tokio::net::TcpListener;

/// How long shutdown waits for clients to receive their Close message.
const SHUTDOWN_DRAIN: Duration = Duration::from_secs(2);
/// How long in-flight responses may take after the drain before the server stops anyway.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

/// The service's HTTP routes for a node, behind the CORS middleware (which also answers
/// preflights for paths no route serves).
pub fn routes(node: Arc<Node>) -> HttpRouter {
    let cors = Arc::new(cors::CorsPolicy::new(&node.config().cors));
    HttpRouter::new()
        .merge(client::routes())
        .merge(rest::routes())
        .merge(server::routes())
        .route("/metrics", axum::routing::get(metrics))
        .fallback(no_route)
        .with_state(node)
        .layer(axum::middleware::from_fn_with_state(cors, cors::layer))
}

/// Any path no route serves (including `..` and other traversal attempts, which are not
/// resolved): a 404 that says so, rather than an empty body.
async fn no_route() -> axum::response::Response {
    http::text_error(
        axum::http::StatusCode::NOT_FOUND,
        "no route matches this path",
    )
}

/// Prometheus text exposition of the node's metrics.
async fn metrics(
    axum::extract::State(node): axum::extract::State<Arc<Node>>,
) -> impl axum::response::IntoResponse {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        node.metrics.encode(),
    )
}

/// Runs one node on `listener` until `shutdown` completes, then closes every client with an
/// allow-reconnect Close and returns.
pub async fn serve(
    listener: TcpListener,
    node: Arc<Node>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let heartbeat = tokio::spawn(node.clone().heartbeat());
    let app = routes(node.clone());
    let closing = node.clone();
    let (stopping, stopped) = tokio::sync::oneshot::channel::<()>();
    // The peer address reaches app servers as X-Forwarded-For (Default mode).
    let app = app.into_make_service_with_connect_info::<std::net::SocketAddr>();
    // Small frames go out at once: Nagle's algorithm would hold a frame written while an
    // earlier one is unacknowledged (up to the peer's delayed-ACK time).
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let server = axum::serve(listener, app).with_graceful_shutdown(async move {
        shutdown.await;
        closing.close_all_clients(SHUTDOWN_DRAIN).await;
        let _ = stopping.send(());
    });
    // Responses still in flight after the drain (e.g. an event stream to a client that stopped
    // reading) get a bounded grace period, then the server stops regardless.
    let result = tokio::select! {
        result = server => result,
        _ = async {
            if stopped.await.is_ok() {
                tokio::time::sleep(SHUTDOWN_GRACE).await;
            } else {
                std::future::pending::<()>().await;
            }
        } => Ok(()),
    };
    heartbeat.abort();
    result
}
