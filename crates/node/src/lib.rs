//! The Switchyard service as a library: everything one node does, over a bound listener.
//!
//! # Layout
//! Modules are layered; each uses only those in lower layers (checked by
//! `scripts/module-cycles.py`):
//! 0. leaves: [`config`] (settings, validated once), [`metrics`] (with [`azure_metrics`],
//!    read at scrape time, and [`process`], the CPU and memory sampler), `budget` (node-wide
//!    allowances given back by guards), `http` (query parsing, token checks against the
//!    keys), `cors`, `throttle` (rates and work-in-progress bounds), `tls` (certificate
//!    files, reloaded in place), `logs` (the operator's log lines: stable names, refusals
//!    rate-limited), `trace` (the live trace: off, it costs one shared flag per message).
//! 1. the executor: [`command`] (what REST and app servers ask, as typed data, and the typed
//!    miss), `asks` (questions to other nodes, waiting for their answers), `members` (which
//!    nodes are alive, from their heartbeats), [`executor`] (applies commands through the
//!    router and the backplane, cluster-wide) and `forward` (passes HTTP requests on to the
//!    node they are for).
//! 2. features, written against narrow views of a client: `default_mode` (app-server
//!    connections, clients pinned to them, client results) and `upstream` (serverless
//!    webhooks).
//! 3. endpoints: `client` (negotiate, the three transports, the client table), `server` (the
//!    app-server endpoint `/server`), `rest` (the data-plane REST API), [`dashboard`] (the
//!    operator's page and its admin hub, reading the client table and the app servers).
//! 4. wiring, here: [`Node`], [`routes`], [`serve`].
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

mod asks;
pub mod azure_metrics;
mod budget;
mod client;
pub mod command;
pub mod config;
mod cors;
pub mod dashboard;
mod default_mode;
pub mod executor;
mod forward;
#[cfg(feature = "fuzzing")]
mod fuzz_support;
/// Exists for the fuzz targets in `fuzz/` only (wrappers over crate-private parsers); not an API.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod http;
mod listener;
mod logs;
mod members;
pub mod metrics;
pub mod process;
mod rest;
mod server;
mod throttle;
mod tls;
mod trace;
mod upstream;

pub use command::{Check, Command, Missing};
pub use config::{Config, ValidConfig};
pub use executor::Executor;

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router as HttpRouter;
use switchyard_auth::AccessKeys;
use switchyard_backplane::{Backplane, MemoryBackplane, NodeId};
use tokio::net::TcpListener;

use client::Clients;
use default_mode::DefaultMode;
use metrics::Metrics;
use server::AppServers;
use upstream::Upstream;

/// How long shutdown waits for clients to receive their Close message.
const SHUTDOWN_DRAIN: Duration = Duration::from_secs(2);
/// How long in-flight responses may take after the drain before the server stops anyway.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

/// One service node: the executor, and the endpoints and features over it.
pub struct Node {
    executor: Arc<Executor>,
    clients: Arc<Clients>,
    app_servers: Arc<AppServers>,
    dashboard: Arc<dashboard::Dashboard>,
    pub metrics: Arc<Metrics>,
    /// A backplane probe is in flight (at most one at a time).
    probing: AtomicBool,
    resync: parking_lot::Mutex<Resync>,
}

/// Where the user-group re-sync after an outage stands (see [`Node::resync_tick`]).
#[derive(Default)]
struct Resync {
    /// Joins and leaves made here are being noted.
    noting: bool,
    /// Counts the ticks that found the backplane failing.
    outage: u64,
    /// When the copy may start (the backplane answers again).
    due: Option<Instant>,
    running: bool,
    /// The backplane's count of lost publishes at the last tick.
    publish_errors: u64,
}

impl Node {
    /// A node on the in-memory backplane (a single-node deployment).
    pub fn new(config: ValidConfig) -> Arc<Node> {
        Node::with_backplane(config, Arc::new(MemoryBackplane::new()), "node-1".into())
    }

    /// A node on the given backplane; several nodes may share one.
    pub fn with_backplane(
        config: ValidConfig,
        backplane: Arc<dyn Backplane>,
        node_id: NodeId,
    ) -> Arc<Node> {
        let metrics = Arc::new(Metrics::default());
        let executor = Arc::new(Executor::new(config, backplane, node_id, metrics.clone()));
        let settings = executor.config();
        metrics.azure.watch(
            executor.router().clone(),
            settings.metrics.max_hub_series,
            settings.limits.max_client_connections,
        );
        let instance = executor.members().instance().to_string();
        let default_mode = Arc::new(DefaultMode::new(
            executor.config(),
            instance,
            &metrics,
            executor.tracer().clone(),
        ));
        executor.set_remote_invocations(default_mode.clone());
        let settle: upstream::Settle = {
            let executor = executor.clone();
            Arc::new(move || executor.settle())
        };
        let upstream = Upstream::new(
            executor.config(),
            executor.keys().clone(),
            metrics.clone(),
            executor.tracer().clone(),
            settle,
        );
        let clients = Arc::new(Clients::new(
            executor.clone(),
            default_mode.clone(),
            upstream,
        ));
        let app_servers = Arc::new(AppServers {
            executor: executor.clone(),
            default_mode,
            forwarder: forward::Forwarder::new(),
        });
        let dashboard = Arc::new(dashboard::Dashboard::new(
            executor.clone(),
            clients.clone(),
            app_servers.clone(),
        ));
        executor.set_views(Arc::new(dashboard::RemoteViews(Arc::downgrade(&dashboard))));
        Arc::new(Node {
            executor,
            clients,
            app_servers,
            dashboard,
            metrics,
            probing: AtomicBool::new(false),
            resync: parking_lot::Mutex::default(),
        })
    }

    pub fn config(&self) -> &ValidConfig {
        self.executor.config()
    }

    pub fn keys(&self) -> &AccessKeys {
        self.executor.keys()
    }

    /// What REST and app servers call: sends, closes, groups, checks.
    pub fn executor(&self) -> &Executor {
        &self.executor
    }

    pub fn client_connection_count(&self) -> usize {
        self.clients.count()
    }

    /// App-server connections on this node, all hubs.
    pub fn server_connection_count(&self) -> usize {
        self.app_servers.default_mode.servers.count()
    }

    /// Closes every client (allow-reconnect) and waits up to `drain` for them to go.
    pub async fn close_all_clients(&self, drain: Duration) {
        self.clients.close_all(drain).await;
    }

    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn clients(&self) -> &Arc<Clients> {
        &self.clients
    }

    #[cfg(feature = "fuzzing")]
    pub(crate) fn default_mode(&self) -> &Arc<DefaultMode> {
        &self.app_servers.default_mode
    }

    /// Every second: timeouts, inactivity, expired tokens, expired user-group memberships,
    /// client invocations that waited too long.
    async fn heartbeat(self: Arc<Self>) {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            process::update();
            self.clients.check_timers();
            self.executor.throttle().sweep();
            self.executor.tracer().sweep(Instant::now());
            logs::refusals_left_out(self.executor.refusal_log());
            let now = Instant::now();
            self.executor.sweep(now);
            self.app_servers.default_mode.sweep(now);
            if self.executor.in_cluster() {
                self.metrics
                    .record_backplane(&self.executor.backplane_traffic());
                self.cluster_tick(now);
            }
        }
    }

    /// Once a second in a cluster: say this node is alive, find the nodes that are not, tell
    /// app servers about both, check that this node's own backplane still answers, and
    /// re-sync the user groups after it did not.
    fn cluster_tick(self: &Arc<Self>, now: Instant) {
        let (executor, metrics) = (&self.executor, &self.metrics);
        let members = executor.members();
        let default_mode = &self.app_servers.default_mode;
        members.expire(now, self.config().cluster.node_timeout);
        for gone in members.take_gone() {
            let told = default_mode.announce_offline(&gone.instance);
            metrics.cluster_nodes_lost.inc();
            metrics
                .cluster_server_pings
                .get_or_create(&metrics::KindLabel { kind: "offline" })
                .inc_by(told as u64);
            tracing::warn!(node = %gone.node, instance = %gone.instance, told, "a node is gone; app servers are told it is offline");
        }
        default_mode.announce(executor, now);
        metrics.cluster_nodes.set(members.count() as i64);
        let healthy = members.backplane_healthy();
        metrics.cluster_backplane_up.set(i64::from(healthy));
        self.resync_tick(healthy, now);
        if !self.probing.swap(true, Ordering::AcqRel) {
            let node = self.clone();
            tokio::spawn(async move {
                let answered = node.probe().await;
                match node
                    .executor
                    .members()
                    .backplane_answered(answered, Instant::now())
                {
                    Some(false) => {
                        tracing::warn!("the backplane does not answer; serving local traffic only")
                    }
                    Some(true) => tracing::info!("the backplane answers again"),
                    None => {}
                }
                node.probing.store(false, Ordering::Release);
            });
        }
    }

    /// Whether the backplane answers end to end, within [`BACKPLANE_PROBE`]: every
    /// connection answers a PING, and a question this node asks itself through Redis comes
    /// back through its own reader (a reader far behind counts as not hearing the cluster:
    /// silence it reads late must not make other nodes look dead).
    async fn probe(&self) -> bool {
        let executor = &self.executor;
        let both = async {
            let (ping, round_trip) = tokio::join!(executor.probe_backplane(), executor.ask_self());
            ping && round_trip
        };
        tokio::time::timeout(BACKPLANE_PROBE, both)
            .await
            .unwrap_or(false)
    }

    /// The user-group re-sync after an outage. While the backplane fails (the probe, or any
    /// publish Redis did not take) this node notes the joins and leaves it makes; once it
    /// answers again, the node waits `cluster.node_timeout` for the others to be back too,
    /// then copies their tables (what it noted wins). A new outage during the copy keeps the
    /// notes for the next copy.
    fn resync_tick(self: &Arc<Self>, healthy: bool, now: Instant) {
        let errors = self.executor.backplane_traffic().publish_errors;
        let mut resync = self.resync.lock();
        let failing = !healthy || errors > resync.publish_errors;
        resync.publish_errors = errors;
        if failing {
            if !resync.noting {
                self.executor.backplane_lost();
                resync.noting = true;
            }
            resync.outage += 1;
            resync.due = None;
            return;
        }
        if !resync.noting || resync.running {
            return;
        }
        let due = *resync
            .due
            .get_or_insert(now + self.config().cluster.node_timeout);
        if now < due {
            return;
        }
        resync.due = None;
        resync.running = true;
        let outage = resync.outage;
        let node = self.clone();
        tokio::spawn(async move {
            let copied = node.executor.copy_user_groups_again().await;
            let mut resync = node.resync.lock();
            resync.running = false;
            if resync.outage == outage {
                node.executor.end_noting();
                resync.noting = false;
                tracing::info!(
                    copied,
                    "user-group memberships taken on from the other nodes after the outage"
                );
            }
        });
    }

    /// Tells the other nodes this node is shutting down, so they forget it at once; its
    /// heartbeats say so until it stops.
    fn leave(&self) {
        if self.executor.in_cluster() {
            self.executor.members().set_leaving();
            let servers = self.app_servers.default_mode.server_list();
            self.executor.publish_presence(servers, true);
        }
    }

    /// Before a shutdown closes the clients: what other nodes accepted for them before the
    /// shutdown began is in flight through Redis. Waits a moment for their publishers to hand
    /// it over, then until a question this node asks itself comes back through Redis, by
    /// when everything published before the question has been read and queued to clients.
    async fn read_what_was_sent(&self) {
        if !self.executor.in_cluster() {
            return;
        }
        tokio::time::sleep(PUBLISH_GRACE).await;
        let _ = tokio::time::timeout(SHUTDOWN_DRAIN, self.executor.ask_self()).await;
    }

    /// Whether this node's backplane answers (always, on one node).
    pub fn backplane_healthy(&self) -> bool {
        self.executor.members().backplane_healthy()
    }
}

/// How long a shutting-down node gives other nodes' publishers to hand over what they
/// accepted before it began (they publish as soon as they accept; this covers a busy queue).
const PUBLISH_GRACE: Duration = Duration::from_millis(250);

/// How long the backplane has to answer the once-a-second probe before the node counts it down.
const BACKPLANE_PROBE: Duration = Duration::from_secs(1);

/// The service's HTTP routes for a node, behind the CORS middleware (which also answers
/// preflights for paths no route serves).
pub fn routes(node: Arc<Node>) -> HttpRouter {
    app_routes(&node, true)
}

/// The routes, with or without `/metrics` (which moves to the admin listener when one is
/// configured).
fn app_routes(node: &Arc<Node>, with_metrics: bool) -> HttpRouter {
    let config = node.config();
    let cors = Arc::new(cors::CorsPolicy::new(
        &config.cors,
        config.development_mode(),
    ));
    let mut router = HttpRouter::new()
        .merge(client::routes().with_state(node.clients.clone()))
        .merge(rest::routes().with_state(node.executor.clone()))
        .merge(server::routes().with_state(node.app_servers.clone()));
    if with_metrics {
        router = router.merge(metrics_routes(node));
    }
    if config.dashboard.enabled {
        router = router.merge(dashboard::routes().with_state(node.dashboard.clone()));
    }
    router
        .fallback(no_route)
        .layer(axum::middleware::from_fn_with_state(cors, cors::layer))
}

/// `/metrics` (Prometheus text).
fn metrics_routes(node: &Arc<Node>) -> HttpRouter {
    HttpRouter::new().route(
        "/metrics",
        axum::routing::get(metrics).with_state(node.metrics.clone()),
    )
}

/// What the admin listener serves: metrics and health.
fn admin_routes(node: &Arc<Node>) -> HttpRouter {
    metrics_routes(node)
        .route("/api/health", axum::routing::get(|| async { "" }))
        .fallback(no_route)
}

/// Any path no route serves (including `..` and other traversal attempts, which are not
/// resolved): a 404 that says so, rather than an empty body.
async fn no_route() -> axum::response::Response {
    http::text_error(
        axum::http::StatusCode::NOT_FOUND,
        "no route matches this path",
    )
}

/// Prometheus text exposition of the node's metrics.
async fn metrics(
    axum::extract::State(metrics): axum::extract::State<Arc<Metrics>>,
) -> impl axum::response::IntoResponse {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        metrics.encode(),
    )
}

/// Where the other nodes reach this node: the setting, else the bound address; for an
/// address bound on every interface, the one this host routes to Redis from (the network
/// the nodes share).
fn internal_url(config: &ValidConfig, bound: std::net::SocketAddr) -> String {
    if let Some(url) = &config.cluster.internal_url {
        return url.trim_end_matches('/').to_string();
    }
    let mut address = bound;
    if bound.ip().is_unspecified() {
        let redis_host = config.cluster.redis.as_deref().and_then(first_redis_host);
        let routed = redis_host.and_then(|(host, port)| {
            let socket = std::net::UdpSocket::bind((bound.ip(), 0)).ok()?;
            socket.connect((host.as_str(), port)).ok()?;
            socket.local_addr().ok()
        });
        match routed {
            Some(local) => address.set_ip(local.ip()),
            None => {
                tracing::warn!(
                    "cannot tell which address other nodes reach this node at; set \
                     cluster.internal_url (requests other nodes pass on will fail)"
                );
                address.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
            }
        }
    }
    format!("http://{address}")
}

/// The host and port of a Redis URL's first server (`redis://h:p`, `redis-cluster://h1:p1,h2:p2`).
fn first_redis_host(url: &str) -> Option<(String, u16)> {
    let rest = url.split_once("://")?.1;
    let rest = rest.rsplit_once('@').map_or(rest, |(_, hosts)| hosts);
    let first = rest.split([',', '/', '?']).next()?;
    let parsed = url::Url::parse(&format!("redis://{first}")).ok()?;
    Some((
        parsed.host_str()?.to_string(),
        parsed.port().unwrap_or(6379),
    ))
}

/// Runs one node on `listener` until `shutdown` completes, then closes every client with an
/// allow-reconnect Close and returns. With `admin_listen` configured, `/metrics` is served on
/// that address instead.
pub async fn serve(
    listener: TcpListener,
    node: Arc<Node>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let admin = match node.config().admin_listen {
        Some(address) => Some(TcpListener::bind(address).await?),
        None => None,
    };
    serve_listeners(listener, admin, node, shutdown).await
}

/// [`serve`] with the admin listener (metrics and health) already bound, or none.
pub async fn serve_listeners(
    listener: TcpListener,
    admin: Option<TcpListener>,
    node: Arc<Node>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let config = node.config().clone();
    if node.executor.in_cluster() {
        let url = internal_url(&config, listener.local_addr()?);
        tracing::info!(%url, "other nodes reach this node at this address");
        node.executor.set_internal_url(url);
        let copied = node.executor.copy_user_groups().await;
        tracing::info!(copied, "user-group memberships copied from the other nodes");
    }
    let heartbeat = tokio::spawn(node.clone().heartbeat());
    let (stop_admin, admin_stopped) = tokio::sync::oneshot::channel::<()>();
    let admin_task = admin.map(|admin| {
        let (router, config, metrics) = (admin_routes(&node), config.clone(), node.metrics.clone());
        tokio::spawn(async move {
            let stopped = async {
                let _ = admin_stopped.await;
            };
            listener::run(
                admin,
                None,
                router,
                &config,
                metrics,
                stopped,
                || async {},
                SHUTDOWN_GRACE,
            )
            .await
        })
    });
    if node.executor.in_cluster() && config.tls.enabled() {
        // Forwarded requests go to cluster.internal_url over plain HTTP.
        tracing::warn!(
            "tls is on in a cluster: transport requests a balancer sends to the wrong node cannot \
             be passed on (cluster.internal_url is plain HTTP); use sticky sessions or terminate \
             TLS at the balancer"
        );
    }
    let (tls, certificate_watch) = match config.tls_key() {
        Some(key) => {
            let certificates = tls::Certificates::new(key.clone());
            let paths = config.tls.cert.clone().zip(config.tls.key.clone());
            let watch = paths.map(|(cert, key)| {
                tokio::spawn(tls::watch(
                    certificates.clone(),
                    cert,
                    key,
                    config.tls.reload_interval,
                    node.metrics.clone(),
                ))
            });
            (Some(certificates.acceptor()), watch)
        }
        None => (None, None),
    };
    let closing = node.clone();
    let result = listener::run(
        listener,
        tls,
        app_routes(&node, admin_task.is_none()),
        &config,
        node.metrics.clone(),
        shutdown,
        move || async move {
            closing.leave();
            closing.read_what_was_sent().await;
            closing.close_all_clients(SHUTDOWN_DRAIN).await
        },
        SHUTDOWN_GRACE,
    )
    .await;
    let _ = stop_admin.send(());
    if let Some(task) = admin_task {
        let _ = task.await;
    }
    heartbeat.abort();
    if let Some(watch) = certificate_watch {
        watch.abort();
    }
    result
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_first_redis_host_of_any_url_form() {
        let first = |url| super::first_redis_host(url);
        assert_eq!(first("redis://r:7000"), Some(("r".into(), 7000)));
        assert_eq!(first("rediss://u:p@r/0"), Some(("r".into(), 6379)));
        assert_eq!(
            first("redis-cluster://:pw@10.0.0.1:7001,10.0.0.2:7002"),
            Some(("10.0.0.1".into(), 7001))
        );
        assert_eq!(first("nonsense"), None);
    }
}
