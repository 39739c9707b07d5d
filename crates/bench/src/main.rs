//! `switchyard-bench`: benchmark tooling for Switchyard.
//!
//! Subcommands:
//! - `app-server`: an app server connected to the service the way the .NET server SDK
//!   is, serving the benchmark hub and its negotiate redirect.
//!
//! Load scenarios are added as further subcommands of [`Command`].
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use switchyard_bench::{run_app_server, shutdown_signal, AppServerArgs};

#[derive(Debug, Parser)]
#[command(name = "switchyard-bench", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run an app server (benchmark hub + negotiate endpoint) against a service.
    AppServer(AppServerArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SWITCHYARD_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("switchyard-bench: error: {e}");
            return ExitCode::from(2);
        }
    };
    let result = runtime.block_on(async {
        match &cli.command {
            Command::AppServer(args) => run_app_server(args, shutdown_signal()).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("switchyard-bench: error: {e}");
            ExitCode::from(2)
        }
    }
}
