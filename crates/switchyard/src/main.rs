//! `switchyard`: the service binary.
//!
//! # Layout
//! - `cli`: commands and flags (`serve`, `token`).
//! - `settings`: the config tree assembled from defaults, the TOML file, `SWITCHYARD_*`
//!   variables and flags, in that order of precedence (later wins).
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

mod cli;
mod settings;

use std::process::ExitCode;

fn main() -> ExitCode {
    match cli::run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("switchyard: error: {error}");
            ExitCode::from(2)
        }
    }
}
