//! A small SignalR client for tests and the benchmark: negotiate, handshake, send and
//! receive hub messages in JSON or MessagePack over any transport. Payload values surface as
//! `serde_json::Value` whatever the protocol (MessagePack binary becomes base64 text).
//!
//! # Layout
//! - [`connection`]: [`connect`] / [`Connection`], a connection over any of the three
//!   transports, started like the official clients (negotiate redirects followed), with an
//!   optional source address and stateful reconnect (WebSockets); [`connect_direct`] skips
//!   negotiation; [`negotiate`] alone.
//! - [`WsClient`]: a WebSocket [`Connection`] made straight to a URL, for raw tests.
//! - [`app_server`]: the other side: an app server connected to the service the way the
//!   .NET server SDK is, running the application's hub methods ([`app_server::HubMethods`]).
//! - [`TlsRoots`]: the certificate authorities https and wss connections trust.
//! - `error`, `message`: [`ClientError`], and [`decode`] (values as JSON).
// One audited `unsafe` (a setsockopt in connection::websocket); none elsewhere.
#![deny(unsafe_code)]
#![deny(rust_2018_idioms)]

pub mod app_server;
pub mod connection;
mod error;
mod message;
mod tls;
mod ws_client;

pub use connection::{
    connect, connect_direct, http_client, http_client_trusting, negotiate, ConnectOptions,
    Connection, Negotiated, StatefulStats, Transport,
};
pub use error::{with_causes, ClientError};
pub use message::{decode, msgpack_to_json};
pub use tls::TlsRoots;
pub use ws_client::WsClient;
