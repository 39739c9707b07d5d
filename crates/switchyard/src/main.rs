//! `switchyard`: the service binary.
//!
//! # Layout
//! - `cli`: commands and flags (`serve`, `token`, `upstream init`, `capacity`).
//! - `backplane`: the one match from `cluster.backplane`'s scheme to a backend crate.
//! - `capacity`: `switchyard capacity`, the capacity planner (loads, Azure units, bench reports).
//! - `settings`: the config tree assembled from defaults, the TOML file, `SWITCHYARD_*`
//!   variables and flags, in that order of precedence (later wins).
//! - `upstream_init`: the sample config file `upstream init` writes.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

mod backplane;
mod capacity;
mod cli;
mod settings;
mod upstream_init;

use std::process::ExitCode;

fn main() -> ExitCode {
    match cli::run() {
        Ok(code) => code,
        Err(error) => {
            eprintln!("switchyard: error: {error}");
            ExitCode::from(2)
        }
    }
}
