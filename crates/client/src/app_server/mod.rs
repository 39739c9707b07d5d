//! A Rust app-server peer: connects to the service's `/server` endpoint the way the .NET
//! server SDK (Microsoft.Azure.SignalR) does, hosts clients routed to it, and runs the
//! application's hub ([`HubMethods`]) for them (spec §1, §2.1).
//!
//! # Layout
//! - [`config`]: [`AppServerConfig`], [`ShutdownMode`].
//! - `connection`: one fixed connection slot (dial, handshake, keep-alive, redial).
//! - `hub` / `client`: per-hub state and the clients pinned to this server.
//! - `dispatch`: what the service sends, and each client's invocations run in order.
//! - [`HubContext`]: sends, group operations and client results, as the SDK writes them.
//! - [`HubMethods`]: the application's hub, which the app server calls.
//! - [`ClientStream`]: a stream a client uploads.
//! - [`negotiate`]: the negotiate redirect document (HTTP is the caller's).
//! - [`token`]: URLs and tokens derived from the connection string.

mod acks;
mod client;
pub mod config;
mod connection;
mod context;
mod dispatch;
mod error;
mod hub;
mod link;
mod methods;
pub mod negotiate;
mod results;
pub mod token;
mod upload;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use switchyard_auth::ConnectionString;
use switchyard_service_protocol::Ping;
use tokio::task::JoinHandle;

pub use config::{default_server_id, AppServerConfig, ShutdownMode};
pub use connection::retry_delay;
pub use context::{payloads, HubContext};
pub use error::{AckError, AppServerError, InvokeError, NotConnected};
pub use methods::{Caller, HubMethods, ItemStream, MethodResult, StreamResult};
pub use negotiate::{Redirect, NOT_CONNECTED};
pub use upload::ClientStream;

use hub::{Hub, ServerInfo};

/// The SDK's graceful-shutdown bound.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);
/// `fin` is re-sent this often until `finack`.
const FIN_RESEND: Duration = Duration::from_secs(5);
/// `["status","1"]` period per hub.
const STATUS_INTERVAL: Duration = Duration::from_secs(10);

struct Shared {
    info: Arc<ServerInfo>,
    hubs: Vec<Arc<Hub>>,
}

impl Shared {
    fn hub(&self, name: &str) -> Option<&Arc<Hub>> {
        self.hubs.iter().find(|h| h.name.eq_ignore_ascii_case(name))
    }
}

/// A running app server. Dropping it aborts every connection (like [`AppServer::abort`]).
pub struct AppServer {
    handle: AppServerHandle,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

/// A cheap, clonable view of a running app server (for HTTP handlers and tests).
#[derive(Clone)]
pub struct AppServerHandle {
    shared: Arc<Shared>,
}

/// Why negotiate cannot redirect.
#[derive(Debug, thiserror::Error)]
pub enum NegotiateError {
    #[error("unknown hub '{0}'")]
    UnknownHub(String),
    /// No server connection of the hub is up: HTTP 500 with [`NOT_CONNECTED`].
    #[error("{}", NOT_CONNECTED)]
    NotConnected,
    #[error(transparent)]
    Token(#[from] AppServerError),
}

impl AppServer {
    /// Validates the configuration and starts dialling every connection; returns at once
    /// (see [`AppServer::ready`]). Clients' invocations go to `methods`.
    pub fn start(
        config: AppServerConfig,
        methods: Arc<dyn HubMethods>,
    ) -> Result<AppServer, AppServerError> {
        if config.hubs.is_empty() {
            return Err(AppServerError::NoHubs);
        }
        if config.connections_per_hub == 0 {
            return Err(AppServerError::NoConnections);
        }
        if config.connection_string.access_key.is_none() {
            return Err(AppServerError::NoAccessKey);
        }
        let info = Arc::new(ServerInfo::new(config));
        let hubs: Vec<Arc<Hub>> = info
            .config
            .hubs
            .iter()
            .map(|name| Arc::new(Hub::new(name.clone(), info.clone())))
            .collect();
        let mut tasks = Vec::new();
        for hub in &hubs {
            for slot in 0..hub.slot_count() {
                tasks.push(tokio::spawn(connection::run_slot(
                    hub.clone(),
                    slot,
                    methods.clone(),
                )));
            }
            tasks.push(tokio::spawn(status_pings(hub.clone())));
        }
        Ok(AppServer {
            handle: AppServerHandle {
                shared: Arc::new(Shared { info, hubs }),
            },
            tasks: Mutex::new(tasks),
        })
    }

    pub fn handle(&self) -> AppServerHandle {
        self.handle.clone()
    }

    pub fn server_id(&self) -> &str {
        self.handle.shared.info.server_id()
    }

    /// Clients currently connected to this app server, over all hubs.
    pub fn client_count(&self) -> usize {
        self.handle.client_count()
    }

    /// Sends for `hub` (round-robin over its connections).
    pub fn hub(&self, hub: &str) -> Option<HubContext> {
        self.handle.hub(hub)
    }

    /// Resolves once every configured connection is handshaken at the same time.
    pub async fn ready(&self) {
        self.handle.ready().await;
    }

    /// Graceful stop: no more redials; unless the mode is [`ShutdownMode::Off`], send
    /// `["shutdown","fin:N"]` on each connection until `finack`, then wait for clients to
    /// migrate or leave (all bounded by 30 s); then close the sockets.
    pub async fn stop(&self) {
        let shared = &self.handle.shared;
        let info = &shared.info;
        if info.stopping.swap(true, Ordering::SeqCst) {
            return;
        }
        info.stop_signal.send_replace(true);
        let deadline = tokio::time::Instant::now() + SHUTDOWN_TIMEOUT;
        let mode = info.config.graceful_shutdown;
        if mode != ShutdownMode::Off {
            let fin = format!("fin:{}", mode.fin_code());
            let links: Vec<_> = shared.hubs.iter().flat_map(|h| h.links()).collect();
            let finacks = links.iter().map(|link| {
                let fin = fin.clone();
                async move {
                    loop {
                        link.send(Ping::new(&[("shutdown", &fin)]));
                        if tokio::time::timeout(FIN_RESEND, link.wait_finack())
                            .await
                            .is_ok()
                        {
                            return;
                        }
                    }
                }
            });
            let _ =
                tokio::time::timeout_at(deadline, futures_util::future::join_all(finacks)).await;
            while self.client_count() > 0 && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        for hub in &shared.hubs {
            for link in hub.links() {
                link.close();
            }
        }
        let tasks: Vec<_> = std::mem::take(&mut *self.tasks.lock());
        let wait = tokio::time::Instant::now() + Duration::from_secs(5);
        for mut task in tasks {
            if tokio::time::timeout_at(wait, &mut task).await.is_err() {
                task.abort();
            }
        }
        self.clear();
    }

    /// Drops every socket at once, without Close frames or shutdown handshake (a crashed
    /// app server, as the service sees it).
    pub fn abort(&self) {
        let info = &self.handle.shared.info;
        info.stopping.store(true, Ordering::SeqCst);
        info.stop_signal.send_replace(true);
        for task in self.tasks.lock().drain(..) {
            task.abort();
        }
        self.clear();
    }

    fn clear(&self) {
        let shared = &self.handle.shared;
        for hub in &shared.hubs {
            hub.clear();
        }
        shared.info.live.send_replace(0);
    }
}

impl Drop for AppServer {
    fn drop(&mut self) {
        // Also clears the client table: client tasks hold the hub, so they would
        // otherwise keep each other alive.
        self.abort();
    }
}

impl AppServerHandle {
    pub fn server_id(&self) -> &str {
        self.shared.info.server_id()
    }

    pub fn config(&self) -> &AppServerConfig {
        &self.shared.info.config
    }

    pub fn connection_string(&self) -> &ConnectionString {
        &self.shared.info.config.connection_string
    }

    /// Hub names as configured.
    pub fn hubs(&self) -> impl Iterator<Item = &str> {
        self.shared.hubs.iter().map(|h| h.name.as_str())
    }

    pub fn client_count(&self) -> usize {
        self.shared.info.clients.load(Ordering::Relaxed)
    }

    /// Handshaken server connections over all hubs.
    pub fn live_connections(&self) -> usize {
        *self.shared.info.live.borrow()
    }

    /// Whether `hub` (any case) has a usable server connection.
    pub fn is_connected(&self, hub: &str) -> bool {
        self.shared.hub(hub).is_some_and(|h| h.has_link())
    }

    pub fn hub(&self, hub: &str) -> Option<HubContext> {
        self.shared.hub(hub).map(|hub| HubContext {
            hub: hub.clone(),
            scope: None,
        })
    }

    pub async fn ready(&self) {
        let total: usize = self.shared.hubs.iter().map(|h| h.slot_count()).sum();
        let mut live = self.shared.info.live.subscribe();
        let _ = live.wait_for(|n| *n >= total).await;
    }

    /// The negotiate redirect for `/{hub_path}/negotiate?{query}` (spec §2.1).
    pub fn negotiate(
        &self,
        hub_path: &str,
        query: &str,
        user: Option<&str>,
    ) -> Result<Redirect, NegotiateError> {
        let hub = self
            .shared
            .hub(hub_path)
            .ok_or_else(|| NegotiateError::UnknownHub(hub_path.to_owned()))?;
        if !hub.has_link() {
            return Err(NegotiateError::NotConnected);
        }
        Ok(negotiate::redirect(
            self.connection_string(),
            hub_path,
            query,
            user,
            self.server_id(),
        )?)
    }
}

/// `["status","1"]` every 10 s per hub, first after 10 s; replies are ignored.
async fn status_pings(hub: Arc<Hub>) {
    let start = tokio::time::Instant::now() + STATUS_INTERVAL;
    let mut interval = tokio::time::interval_at(start, STATUS_INTERVAL);
    let mut stop = hub.info.stop_signal.subscribe();
    loop {
        tokio::select! {
            _ = interval.tick() => {}
            _ = stop.wait_for(|stopped| *stopped) => return,
        }
        if let Some(link) = hub.any_link() {
            link.send(Ping::new(&[("status", "1")]));
        }
    }
}
