//! The Switchyard service as a library: everything one node does, over a bound listener.
//!
//! # Layout
//! - [`config`]: the settings tree with defaults and validation.
//! - [`node`]: [`Node`], the shared state of one service node, and its executor: every
//!   operation REST (and later the service protocol) performs goes through it.
//! - `client`: the client endpoint — negotiate, WebSockets, Server-Sent Events, long polling,
//!   and the hub-protocol session each transport feeds.
//! - `rest`: the data-plane REST API (2022-06-01, v1, v1-preview), thin adapters over the executor.
//! - [`serve`]: runs the HTTP server on a listener until a shutdown future completes.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

mod client;
pub mod config;
mod http;
pub mod node;
mod rest;

pub use config::Config;
pub use node::Node;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router as HttpRouter;
use tokio::net::TcpListener;

/// How long shutdown waits for clients to receive their Close message.
const SHUTDOWN_DRAIN: Duration = Duration::from_secs(2);

/// The service's HTTP routes for a node.
pub fn routes(node: Arc<Node>) -> HttpRouter {
    HttpRouter::new()
        .merge(client::routes())
        .merge(rest::routes())
        .with_state(node)
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
    let result = axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            shutdown.await;
            closing.close_all_clients(SHUTDOWN_DRAIN).await;
        })
        .await;
    heartbeat.abort();
    result
}
