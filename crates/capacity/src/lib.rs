//! Capacity planning: what a deployment must carry and what a benchmark showed it carries.
//!
//! # Layout
//! - [`report`]: the benchmark report (`switchyard-bench … --summary-json FILE`), shared by
//!   the writer (`switchyard-bench`) and the reader (`switchyard capacity`).
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

pub mod report;
