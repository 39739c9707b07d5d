//! `switchyard`: the service binary.
//!
//! # Layout
//! - `cli`: commands and flags (`serve`, `token`, `connection-string`, `config`, `upstream`,
//!   `capacity`); the settings are assembled by `switchyard_node::config::assemble`.
//! - `backplane`: the one match from `cluster.backplane`'s scheme to a backend crate.
//! - `capacity`: `switchyard capacity`, the capacity planner (loads, Azure units, bench reports).
//! - `config_cmd`: `config check` and `config print`.
//! - `settings`: the settings flags the commands share, and loading the settings with them.
//! - `upstream_init`: the sample config file `upstream init` writes.
//! - `upstream_import`: `upstream import`, the Emulator's settings.json as upstream templates.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

mod backplane;
mod capacity;
mod cli;
mod config_cmd;
mod settings;
mod upstream_import;
mod upstream_init;

use std::process::ExitCode;

/// jemalloc, not glibc's malloc: glibc's took ~17 % of the service's CPU in REST sends
/// (`_int_malloc` and `malloc_consolidate` on 2 KiB bodies and frames, arena locks between
/// the runtime's threads). Measured against glibc and mimalloc in docs/performance.md ("The
/// allocator"): 13 % less CPU per REST send, no more memory per connection (mimalloc: +20 %).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    match cli::run() {
        Ok(code) => code,
        Err(error) => {
            eprintln!("switchyard: error: {error}");
            ExitCode::from(2)
        }
    }
}
