//! Benchmark tooling for Switchyard, as a library so tests and load scenarios can embed
//! what the `switchyard-bench` binary runs.
//!
//! # Layout
//! - [`app_server`]: the `app-server` command: flags, start/stop of the peer
//!   ([`switchyard_client::app_server`]) together with its HTTP side.
//! - [`negotiate`]: the HTTP negotiate redirect (`POST /{hub}/negotiate`) with CORS.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

pub mod app_server;
pub mod negotiate;

pub use app_server::{
    run_app_server, shutdown_signal, start_app_server, AppServerArgs, BenchError, GracefulShutdown,
    RunningAppServer,
};
