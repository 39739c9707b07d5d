//! Benchmark tooling for Switchyard, as a library so tests and load scenarios can embed
//! what the `switchyard-bench` binary runs.
//!
//! # Layout
//! - [`app_server`]: the `app-server` command: flags, start/stop of the peer
//!   ([`switchyard_client::app_server`]) together with its HTTP side.
//! - [`hub`]: [`hub::BenchHub`], the hub methods that app server runs (Azure's bench tool's
//!   `Measure` methods, and what tests need to reach every service-protocol send).
//! - [`negotiate`]: the HTTP negotiate redirect (`POST /{hub}/negotiate`) with CORS.
//! - [`scenario`]: the scenarios' flags and the [`scenario::Plan`] workers follow (the
//!   scenarios themselves are `switchyard_capacity::scenario`).
//! - [`run`]: the coordinator: target set-up, workers, the connect and sending phases,
//!   merging, stop rule, outputs (one file each under `run/`).
//! - [`worker`]: one load-generator process: connections, timetables, counting (`worker/`:
//!   connect, send, REST, soak tasks).
//! - [`wire`]: payload tags and the fast `Measure` decoder (no I/O).
//! - [`stats`]: histograms, counts and per-sender sequence tracking.
//! - [`procstat`]: CPU and memory of the target from `/proc`; [`cluster`]: what the
//!   coordinator samples from the nodes and Redis (processes, backplane counters, `INFO`).
//! - [`dashboard`]: `--dashboard`, an operator's dashboard (and `--trace`) open during a run.
//! - [`floor`]: `switchyard-bench floor`, the least server that moves the same bytes for the
//!   same generator (`--floor`), so a run's service CPU can be divided by the machine's own.
//! - [`children`]: the processes the tool starts (service, app server, peer), and a soak's
//!   kills and restarts of nodes and Redis.
//! - [`soak`]: a soak's per-phase accounting (what a receiver should have had while nodes
//!   and Redis failed), reconnect times and the memory series.
//! - [`report`], [`chart`]: the printed tables (one run, runs compared), Azure-style counters,
//!   latency histograms, and the SVG charts. Numbers are formatted by
//!   `switchyard_capacity::format`, as `switchyard capacity` formats them.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

pub mod app_server;
pub mod chart;
pub mod children;
pub mod cluster;
pub mod dashboard;
pub mod floor;
pub mod hub;
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
