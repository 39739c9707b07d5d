//! Capacity planning: what a deployment must carry and what a benchmark showed it carries.
//!
//! # Layout
//! - [`scenario`]: the benchmark's scenarios, defined once (the bench runs them, reports name
//!   them, plans take the ones the guide has figures for).
//! - [`report`]: the benchmark report (`switchyard-bench … --summary-json FILE`), shared by
//!   the writer (`switchyard-bench`) and the reader (`switchyard capacity`).
//! - [`guide`]: Azure SignalR Service's published per-unit figures (connections, inbound and
//!   outbound messages and bandwidth per use case) from its performance guide, as data; the
//!   current revision and the earlier seven-unit one.
//! - [`plan`]: the guide's formulas: a load's inbound/outbound messages and bandwidth, the
//!   smallest unit that carries one load or a mix, the unit a report's last passing step reaches
//!   ([`plan::azure_unit`]), and a load against a measurement.
//! - [`spec`]: loads written as `key=value,…` text, sizes and durations (`switchyard capacity`).
//! - [`format`]: numbers, bandwidths and memory as both tools print them.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

pub mod format;
pub mod guide;
pub mod plan;
pub mod report;
pub mod scenario;
pub mod spec;
