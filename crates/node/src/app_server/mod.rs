//! App servers: Azure's service protocol at `/server/?hub=`, and Default mode, in which the
//! app servers connected there carry this node's clients (one thing, seen from its two ends).
//!
//! # Layout
//! - `endpoint`: the route, its checks, and passing a connection meant for another node on.
//! - `session`: one app-server connection's task: handshake, reading, writing, keep-alive.
//! - `commands`: what each message from an app server does (one file per kind).
//! - `error`: [`error::LinkError`], why a server connection ended and whose fault it was.
//! - `servers`: [`ServerConnection`] (one app-server WebSocket after its handshake) and the
//!   [`Servers`] registry that pins clients to them.
//! - `link`: the client side: what a client keeps to reach its app server ([`DefaultLink`]),
//!   and the relay of the app server's bytes back to it.
//! - `invocations`: client results (`ClientInvocation` and its completions) between servers.
//! - `nodes`: across nodes: `target` and `offline` pings, invocations passed between nodes.
//! - `default_mode`: [`DefaultMode`], the feature's state on one node, and [`LinkedClient`],
//!   the narrow view of a client it is written against.
//! - here: [`AppServers`], the endpoint's state, and its routes.

mod commands;
mod default_mode;
mod endpoint;
mod error;
mod invocations;
mod link;
mod nodes;
mod servers;
mod session;

pub(crate) use default_mode::{DefaultMode, LinkedClient};
pub(crate) use link::{ConnectInfo, DefaultLink};
pub(crate) use servers::{ConnectionKind, Forwarded, ServerConnection, Servers};

use std::sync::Arc;

use axum::routing::any;

use crate::cluster::Cluster;
use crate::executor::Executor;
use crate::shared::Shared;

/// What the app-server endpoint works with.
pub(crate) struct AppServers {
    pub(crate) shared: Arc<Shared>,
    pub(crate) executor: Arc<Executor>,
    pub(crate) cluster: Arc<Cluster>,
    pub(crate) default_mode: Arc<DefaultMode>,
}

pub(crate) fn routes() -> axum::Router<Arc<AppServers>> {
    axum::Router::new()
        .route("/server", any(endpoint::connect))
        .route("/server/", any(endpoint::connect))
}
