//! The Switchyard service as a library: everything one node does, over a bound listener.
//!
//! # Layout
//! Modules are layered; each uses only those in lower layers (checked by
//! `scripts/module-cycles.py --top-level`, which prints the layers with `--verbose`):
//! 1. leaves: `budget` (node-wide allowances given back by guards), [`command`] (what REST
//!    and app servers ask, as typed data, and the typed miss), `logs` (the operator's log
//!    lines: stable names, refusals rate-limited), [`process`] (CPU and memory), then
//!    [`metrics`] (with [`azure_metrics`], read at scrape time), `tls` (certificate files,
//!    reloaded in place), [`config`] (settings, validated once), `live_trace` (the dashboard's
//!    live trace: off, it costs one shared flag per message), `throttle`, `listener`, `http`
//!    (query, errors, client address) and `auth` (token checks against the keys).
//! 2. `shared`: what every endpoint reads (settings, token checks, throttles, metrics).
//! 3. `cluster`: what this node shares with the others: the backplane's inbox, the control
//!    plane (questions, answers, presence), user-group sync, passing requests to other nodes
//!    (over TLS, checked by `cluster::peer_tls`, when their internal URLs are https).
//! 4. [`executor`]: applies commands through the router and the cluster.
//! 5. features and endpoints, written against narrow views of each other: `upstream`
//!    (serverless webhooks), `cors`, `app_server` (the `/server` endpoint and Default mode),
//!    `client` (negotiate, the three transports, the client table), `rest` (the data-plane
//!    REST API), [`dashboard`] (the operator's page and its admin hub), `home` (what `/`
//!    answers), `dev_host` (development mode's `Host` check against DNS rebinding).
//! 6. wiring: `node` ([`Node`]: the parts and their heartbeat) and `serve` ([`routes`],
//!    [`serve`]).
//!
//! # Lock order
//! Within the node, a path that takes several of these takes them in this order, and holds
//! none across `.await`: `ClientConnection::inbound` → `ClientConnection::link` →
//! `ServerConnection::clients` → the router's locks (`switchyard_router`'s own order) →
//! `Outbound`. `Servers::hubs` is taken before a `ServerConnection::clients`, and
//! `Clients::table` is never held while a link is. Everything else (the asks, members,
//! caches and budgets) is a leaf: held alone, briefly.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

mod app_server;
mod auth;
pub mod azure_metrics;
mod budget;
mod client;
pub mod cluster;
pub mod command;
pub mod config;
mod cors;
pub mod dashboard;
mod dev_host;
pub mod executor;
#[cfg(feature = "fuzzing")]
mod fuzz_support;
/// Exists for the fuzz targets in `fuzz/` only (wrappers over crate-private parsers); not an API.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod home;
mod http;
mod listener;
mod live_trace;
mod logs;
pub mod metrics;
mod node;
pub mod process;
mod rest;
mod serve;
mod shared;
mod throttle;
mod tls;
mod upstream;

pub use cluster::Cluster;
pub use command::{Check, Command, Missing};
pub use config::{Config, ValidConfig};
pub use executor::Executor;
pub use node::Node;
pub use serve::{routes, serve, serve_listeners};
