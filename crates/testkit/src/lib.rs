//! The harness every integration test of the workspace shares, so that new tests (the
//! cluster's among them) reuse it instead of copying it.
//!
//! # Layout
//! - [`server`]: [`TestServer`], a real node on port 0, its URLs and tokens, and
//!   [`TestServer::with_app_server`], a node with an SDK app server connected.
//! - [`wait`]: [`eventually`], [`within`], [`WAIT`], [`now`].
//! - [`http`]: [`Http`], raw long-polling and Server-Sent Events requests.
//! - [`app_server`]: [`AppServer`], raw service-protocol frames to `/server`.
//! - [`raw_client`]: [`RawClient`], a raw WebSocket SignalR client; [`Msg`].
//! - [`admin`]: [`Admin`], a session on a node's dashboard admin hub.
//! - [`redis`]: [`RedisServer`], a real `redis-server` on a free port; [`RedisCluster`], a
//!   real Redis Cluster of several.
//! - [`tls`]: [`tls::TestCa`], a certificate authority of the test's own and its leaves.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

pub mod admin;
pub mod app_server;
pub mod http;
pub mod raw_client;
pub mod redis;
pub mod server;
pub mod tls;
pub mod wait;

pub use admin::{hub_of, Admin};
pub use app_server::{
    dial, dial_url, handshake_request, refused_status, AppServer, Ws, ACK_WAIT, NOT_FOUND,
    NO_DELAY, OK,
};
pub use http::{Http, HANDSHAKE_JSON};
pub use raw_client::{
    connect_client, decode_frame, default_mode, header, sticky_token, Ending, Msg, RawClient,
};
pub use redis::{RedisCluster, RedisServer};
pub use server::TestServer;
pub use wait::{eventually, eventually_async, now, within, WAIT};
