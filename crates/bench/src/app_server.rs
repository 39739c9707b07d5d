//! The `app-server` command: an app-server peer connected to the service plus its
//! negotiate endpoint, until a signal (or the caller) stops it gracefully.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use switchyard_auth::{ConnectionString, ConnectionStringError};
use switchyard_client::app_server::{
    default_server_id, AppServer, AppServerConfig, AppServerError, AppServerHandle, ShutdownMode,
};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::hub::BenchHub;

/// How long `run_app_server` waits for every server connection before printing its
/// address anyway (the peer keeps redialling in the background).
const READY_WAIT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("connection string: {0}")]
    ConnectionString(#[from] ConnectionStringError),
    #[error(transparent)]
    AppServer(#[from] AppServerError),
    #[error("listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// `--graceful-shutdown` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum GracefulShutdown {
    /// Just close the server connections.
    #[default]
    Off,
    /// Ask the service to move clients to other app servers (`fin:1`).
    Migrate,
    /// Wait (up to 30 s) for clients to leave (`fin:2`).
    Wait,
}

impl From<GracefulShutdown> for ShutdownMode {
    fn from(value: GracefulShutdown) -> Self {
        match value {
            GracefulShutdown::Off => ShutdownMode::Off,
            GracefulShutdown::Migrate => ShutdownMode::MigrateClients,
            GracefulShutdown::Wait => ShutdownMode::WaitForClientsClose,
        }
    }
}

/// Flags of `switchyard-bench app-server`.
#[derive(Debug, Clone, clap::Args)]
pub struct AppServerArgs {
    /// `Endpoint=…;AccessKey=…;Version=1.0;` of the service.
    #[arg(long, env = "Azure__SignalR__ConnectionString")]
    pub connection_string: String,
    /// Where the negotiate endpoint listens (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:5050")]
    pub listen: SocketAddr,
    /// Hub name; repeat for several hubs.
    #[arg(long = "hub", default_values_t = vec!["bench".to_owned()])]
    pub hubs: Vec<String>,
    /// Server connections per hub.
    #[arg(long, default_value_t = 5)]
    pub connections: usize,
    /// Server id (default `{hostname}_{random hex}`).
    #[arg(long)]
    pub server_id: Option<String>,
    #[arg(long, value_enum, default_value_t = GracefulShutdown::Off)]
    pub graceful_shutdown: GracefulShutdown,
    /// Let the service offer stateful reconnect to this app server's clients.
    #[arg(long)]
    pub allow_stateful_reconnects: bool,
}

impl AppServerArgs {
    /// Arguments for an embedded peer with defaults for everything but the connection
    /// string (listening on a free local port).
    pub fn new(connection_string: impl Into<String>) -> Self {
        AppServerArgs {
            connection_string: connection_string.into(),
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            hubs: vec!["bench".to_owned()],
            connections: 5,
            server_id: None,
            graceful_shutdown: GracefulShutdown::Off,
            allow_stateful_reconnects: false,
        }
    }

    pub fn config(&self) -> Result<AppServerConfig, BenchError> {
        let cs: ConnectionString = self.connection_string.parse()?;
        let mut config = AppServerConfig::new(cs);
        config.hubs = self.hubs.clone();
        config.connections_per_hub = self.connections;
        config.server_id = self.server_id.clone().unwrap_or_else(default_server_id);
        config.graceful_shutdown = self.graceful_shutdown.into();
        config.allow_stateful_reconnects = self.allow_stateful_reconnects;
        Ok(config)
    }
}

/// A peer and its HTTP endpoint, running.
pub struct RunningAppServer {
    /// The address the negotiate endpoint is bound to.
    pub addr: SocketAddr,
    pub server: Arc<AppServer>,
    http_stop: Option<oneshot::Sender<()>>,
    http: Option<JoinHandle<()>>,
}

impl RunningAppServer {
    pub fn handle(&self) -> AppServerHandle {
        self.server.handle()
    }

    /// `http://ADDR/{hub}/negotiate`.
    pub fn negotiate_url(&self, hub: &str) -> String {
        format!("http://{}/{hub}/negotiate", self.addr)
    }

    /// Graceful stop of the peer, then of the HTTP endpoint.
    pub async fn stop(mut self) {
        self.server.stop().await;
        self.stop_http().await;
    }

    /// Drops every server connection at once (a crashed app server); HTTP stops too.
    pub async fn abort(mut self) {
        self.server.abort();
        self.stop_http().await;
    }

    async fn stop_http(&mut self) {
        if let Some(stop) = self.http_stop.take() {
            let _ = stop.send(());
        }
        if let Some(http) = self.http.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), http).await;
        }
    }
}

impl Drop for RunningAppServer {
    fn drop(&mut self) {
        if let Some(stop) = self.http_stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Starts the peer and binds its negotiate endpoint; returns at once (the server
/// connections come up in the background, see [`AppServer::ready`]).
pub async fn start_app_server(args: &AppServerArgs) -> Result<RunningAppServer, BenchError> {
    let config = args.config()?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|source| BenchError::Listen {
            addr: args.listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| BenchError::Listen {
        addr: args.listen,
        source,
    })?;
    let server = Arc::new(AppServer::start(config, Arc::new(BenchHub))?);
    let router = crate::negotiate::router(server.handle());
    let (http_stop, stopped) = oneshot::channel::<()>();
    let http = tokio::spawn(async move {
        let serving = axum::serve(listener, router).with_graceful_shutdown(async {
            let _ = stopped.await;
        });
        if let Err(e) = serving.await {
            tracing::error!("negotiate endpoint failed: {e}");
        }
    });
    Ok(RunningAppServer {
        addr,
        server,
        http_stop: Some(http_stop),
        http: Some(http),
    })
}

/// What the binary does: start, wait (bounded) for the server connections, print
/// `App server listening on http://ADDR` and one `Negotiate: …` line per hub, run until
/// `shutdown` resolves, then stop gracefully.
pub async fn run_app_server(
    args: &AppServerArgs,
    shutdown: impl Future<Output = ()>,
) -> Result<(), BenchError> {
    let running = start_app_server(args).await?;
    if tokio::time::timeout(READY_WAIT, running.server.ready())
        .await
        .is_err()
    {
        tracing::warn!(
            "not every server connection is up after {READY_WAIT:?}; still trying in the background"
        );
    }
    println!("App server listening on http://{}", running.addr);
    for hub in &args.hubs {
        println!("Negotiate: {}", running.negotiate_url(hub));
    }
    shutdown.await;
    tracing::info!("stopping");
    running.stop().await;
    Ok(())
}

/// Resolves on SIGINT or (on Unix) SIGTERM.
pub async fn shutdown_signal() {
    let interrupt = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = interrupt => {}
        _ = terminate => {}
    }
}
