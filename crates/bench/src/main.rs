//! `switchyard-bench`: load scenarios against Switchyard (or any SignalR server), and the
//! app-server peer they use in Default mode.
//!
//! Every scenario is one subcommand (`switchyard-bench echo …`); `compare` puts reports
//! side by side; `app-server` runs the benchmark hub; `worker` is internal (`--workers`).
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use switchyard_bench::scenario::{RunArgs, Scenario};
use switchyard_bench::{run_app_server, shutdown_signal, AppServerArgs};

#[derive(Debug, Parser)]
#[command(name = "switchyard-bench", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Every sender invokes Echo; the app server answers the caller (Default mode).
    Echo(RunArgs),
    /// Senders invoke Broadcast; every connection receives each message (Default mode).
    Broadcast(RunArgs),
    /// Senders invoke SendToGroup for their group: --group-size 10 (small) or --groups 10 (big).
    SendToGroup(RunArgs),
    /// Senders invoke SendToConnection for another connection (Default mode).
    SendToConnection(RunArgs),
    /// REST callers broadcast through the service's REST API (serverless).
    RestBroadcast(RunArgs),
    /// REST callers send to one user each through the REST API (serverless).
    RestSendToUser(RunArgs),
    /// REST callers send to groups (members join by REST): --group-size or --groups.
    RestSendToGroup(RunArgs),
    /// REST callers send to one connection each through the REST API (serverless).
    RestSendToConnection(RunArgs),
    /// REST callers add and remove one connection each to/from a group, each acknowledged.
    RestJoinLeaveGroup(RunArgs),
    /// Senders alternate JoinGroup and LeaveGroup, each acknowledged (Default mode).
    JoinLeaveGroup(RunArgs),
    /// dotNetify's chat rooms: rooms of --group-size (100); 10 % post every 11 s, 20 % every
    /// 59 s, to their room through the app server's SendToGroup (Default mode).
    ChatRoom(RunArgs),
    /// The chat rooms serverless: members join by REST, posts are REST sends to the room.
    RestChatRoom(RunArgs),
    /// Open connections on a timetable (--connect-rate) and measure connect latency.
    ConnectRate(RunArgs),
    /// Hold connections open and measure the service's memory per connection.
    Idle(RunArgs),
    /// Print reports (--summary-json files) side by side.
    Compare {
        /// Report files, e.g. Switchyard's then the peer's.
        #[arg(required = true, num_args = 1..)]
        reports: Vec<PathBuf>,
        /// Also write a side-by-side chart (SVG).
        #[arg(long)]
        chart: Option<PathBuf>,
    },
    /// Run an app server (benchmark hub + negotiate endpoint) against a service.
    AppServer(AppServerArgs),
    /// Serve the floor: the least server that moves a scenario's bytes (a run's `--floor`).
    Floor(switchyard_bench::floor::FloorArgs),
    /// Internal: one load-generator process of --workers N.
    #[command(hide = true)]
    Worker,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SWITCHYARD_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
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
    let scenario = |command: &Command| -> Option<(Scenario, RunArgs)> {
        Some(match command {
            Command::Echo(a) => (Scenario::Echo, a.clone()),
            Command::Broadcast(a) => (Scenario::Broadcast, a.clone()),
            Command::SendToGroup(a) => (Scenario::SendToGroup, a.clone()),
            Command::SendToConnection(a) => (Scenario::SendToConnection, a.clone()),
            Command::RestBroadcast(a) => (Scenario::RestBroadcast, a.clone()),
            Command::RestSendToUser(a) => (Scenario::RestSendToUser, a.clone()),
            Command::RestSendToGroup(a) => (Scenario::RestSendToGroup, a.clone()),
            Command::RestSendToConnection(a) => (Scenario::RestSendToConnection, a.clone()),
            Command::RestJoinLeaveGroup(a) => (Scenario::RestJoinLeaveGroup, a.clone()),
            Command::JoinLeaveGroup(a) => (Scenario::JoinLeaveGroup, a.clone()),
            Command::ChatRoom(a) => (Scenario::ChatRoom, a.clone()),
            Command::RestChatRoom(a) => (Scenario::RestChatRoom, a.clone()),
            Command::ConnectRate(a) => (Scenario::ConnectRate, a.clone()),
            Command::Idle(a) => (Scenario::Idle, a.clone()),
            _ => return None,
        })
    };
    let code = runtime.block_on(async {
        if let Some((scenario, args)) = scenario(&cli.command) {
            return match switchyard_bench::run::run(scenario, &args).await {
                Ok(report) if report.passed => ExitCode::SUCCESS,
                Ok(_) => ExitCode::from(1),
                Err(e) => {
                    eprintln!("switchyard-bench: error: {e}");
                    ExitCode::from(2)
                }
            };
        }
        let result = match &cli.command {
            Command::AppServer(args) => run_app_server(args, shutdown_signal())
                .await
                .map_err(|e| e.to_string()),
            Command::Floor(args) => {
                switchyard_bench::floor::run_floor(args, shutdown_signal()).await
            }
            Command::Worker => switchyard_bench::run::serve_worker()
                .await
                .map_err(|e| e.to_string()),
            Command::Compare { reports, chart } => compare(reports, chart.as_ref()),
            _ => unreachable!("scenarios are handled above"),
        };
        match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("switchyard-bench: error: {e}");
                ExitCode::from(2)
            }
        }
    });
    // Worker tasks may still hold sockets; do not wait for them.
    runtime.shutdown_background();
    code
}

fn compare(paths: &[PathBuf], chart: Option<&PathBuf>) -> Result<(), String> {
    let mut reports = Vec::new();
    for path in paths {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let report: switchyard_capacity::report::Report =
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        reports.push(report);
    }
    let refs: Vec<&_> = reports.iter().collect();
    println!("{}", switchyard_bench::report::compare_table(&refs));
    if let Some(path) = chart {
        switchyard_bench::chart::write_compare_svg(&refs, path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}
