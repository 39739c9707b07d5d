//! Benchmark tooling for Switchyard, as a library so tests and load scenarios can embed
//! what the `switchyard-bench` binary runs.
//!
//! # Layout
//! - [`app_server`]: the `app-server` command: flags, start/stop of the peer
//!   ([`switchyard_client::app_server`]) together with its HTTP side.
//! - [`negotiate`]: the HTTP negotiate redirect (`POST /{hub}/negotiate`) with CORS.
//! - [`scenario`]: the scenarios, their flags, and the [`scenario::Plan`] workers follow.
//! - [`run`]: the coordinator: target set-up, workers, merging, stop rule, outputs.
//! - [`worker`]: one load-generator process: connections, timetables, counting.
//! - [`wire`]: payload tags and the fast `Measure` decoder (no I/O).
//! - [`stats`]: histograms, counts and per-sender sequence tracking.
//! - [`procstat`]: CPU and memory of the target from `/proc`.
//! - [`children`]: the processes the tool starts (service, app server, peer), and a soak's
//!   kills and restarts of nodes and Redis.
//! - [`soak`]: a soak's per-phase accounting (what a receiver should have had while nodes
//!   and Redis failed), reconnect times and the memory series.
//! - [`report`], [`chart`]: the printed tables, Azure-style counters and the SVG chart.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

pub mod app_server;
pub mod chart;
pub mod children;
pub mod cluster;
pub mod dashboard;
pub mod negotiate;
pub mod procstat;
pub mod report;
pub mod run;
pub mod scenario;
pub mod soak;
pub mod stats;
pub mod wire;
pub mod worker;

pub use app_server::{
    run_app_server, shutdown_signal, start_app_server, AppServerArgs, BenchError, GracefulShutdown,
    RunningAppServer,
};
