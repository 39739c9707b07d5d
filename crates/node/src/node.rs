//! One service node: its parts wired together, and its life: the once-a-second heartbeat
//! (timers, sweeps, and in a cluster presence, the backplane probe and the user-group
//! re-sync) and what it does on the way out.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use switchyard_auth::AccessKeys;
use switchyard_backplane::{Backplane, MemoryBackplane, NodeId};

use crate::app_server::{AppServers, DefaultMode};
use crate::client::Clients;
use crate::cluster::Cluster;
use crate::config::ValidConfig;
use crate::dashboard::{self, Dashboard};
use crate::executor::Executor;
use crate::metrics::{self, Metrics};
use crate::rest::Rest;
use crate::shared::Shared;
use crate::upstream::{self, Upstream};
use crate::{logs, process};

/// How long shutdown waits for clients to receive their Close message.
pub(crate) const SHUTDOWN_DRAIN: Duration = Duration::from_secs(2);

/// How long a shutting-down node gives other nodes' publishers to hand over what they
/// accepted before it began (they publish as soon as they accept; this covers a busy queue).
const PUBLISH_GRACE: Duration = Duration::from_millis(250);

/// How long the backplane has to answer the once-a-second probe before the node counts it down.
const BACKPLANE_PROBE: Duration = Duration::from_secs(1);

/// One service node: the cluster and the executor, and the endpoints and features over them.
pub struct Node {
    pub(crate) shared: Arc<Shared>,
    pub(crate) cluster: Arc<Cluster>,
    executor: Arc<Executor>,
    pub(crate) clients: Arc<Clients>,
    pub(crate) app_servers: Arc<AppServers>,
    pub(crate) rest: Arc<Rest>,
    pub(crate) dashboard: Arc<Dashboard>,
    pub metrics: Arc<Metrics>,
    /// A backplane probe is in flight (at most one at a time).
    probing: AtomicBool,
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
        let shared = Arc::new(Shared::new(config, metrics.clone()));
        let (config, tracer) = (&shared.config, &shared.tracer);
        let cluster = Arc::new(Cluster::new(
            config,
            backplane,
            node_id,
            metrics.clone(),
            tracer.clone(),
        ));
        let executor = Arc::new(Executor::new(
            cluster.clone(),
            metrics.clone(),
            tracer.clone(),
            config.limits.max_groups_per_connection,
        ));
        metrics.azure.watch(
            cluster.router().clone(),
            config.metrics.max_hub_series,
            config.limits.max_client_connections,
        );
        let instance = cluster.members().instance().to_string();
        let default_mode = Arc::new(DefaultMode::new(config, instance, &metrics, tracer.clone()));
        cluster.set_remote_invocations(default_mode.clone());
        let settle: upstream::Settle = {
            let cluster = cluster.clone();
            Arc::new(move || cluster.settle())
        };
        let upstream = Upstream::new(
            config,
            shared.keys().clone(),
            metrics.clone(),
            tracer.clone(),
            settle,
        );
        let clients = Arc::new(Clients::new(
            shared.clone(),
            cluster.clone(),
            default_mode.clone(),
            upstream,
        ));
        let app_servers = Arc::new(AppServers {
            shared: shared.clone(),
            executor: executor.clone(),
            cluster: cluster.clone(),
            default_mode,
        });
        let rest = Arc::new(Rest {
            shared: shared.clone(),
            executor: executor.clone(),
            cluster: cluster.clone(),
        });
        let dashboard = Arc::new(Dashboard::new(
            shared.clone(),
            executor.clone(),
            cluster.clone(),
            clients.clone(),
            app_servers.clone(),
        ));
        cluster.set_views(Arc::new(dashboard::RemoteViews(Arc::downgrade(&dashboard))));
        Arc::new(Node {
            shared,
            cluster,
            executor,
            clients,
            app_servers,
            rest,
            dashboard,
            metrics,
            probing: AtomicBool::new(false),
        })
    }

    pub fn config(&self) -> &ValidConfig {
        &self.shared.config
    }

    pub fn keys(&self) -> &AccessKeys {
        self.shared.keys()
    }

    /// What REST and app servers call: sends, closes, groups, checks.
    pub fn executor(&self) -> &Executor {
        &self.executor
    }

    /// This node's place in its cluster: its id, the backplane's barrier and traffic.
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
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

    /// Whether this node's backplane answers (always, on one node).
    pub fn backplane_healthy(&self) -> bool {
        self.cluster.members().backplane_healthy()
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
    pub(crate) async fn heartbeat(self: Arc<Self>) {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            process::update();
            self.clients.check_timers();
            self.shared.throttle.sweep();
            self.shared.tracer.sweep(Instant::now());
            logs::refusals_left_out(&self.shared.refusals);
            let now = Instant::now();
            self.cluster.router().sweep(now);
            self.app_servers.default_mode.sweep(now);
            if self.cluster.in_cluster() {
                self.metrics
                    .record_backplane(&self.cluster.backplane_traffic());
                self.cluster_tick(now);
            }
        }
    }

    /// Once a second in a cluster: say this node is alive, find the nodes that are not, tell
    /// app servers about both, check that this node's own backplane still answers, and
    /// re-sync the user groups after it did not.
    fn cluster_tick(self: &Arc<Self>, now: Instant) {
        let (cluster, metrics) = (&self.cluster, &self.metrics);
        let members = cluster.members();
        let default_mode = &self.app_servers.default_mode;
        let node_timeout = self.config().cluster.node_timeout;
        members.expire(now, node_timeout);
        for gone in members.take_gone() {
            let told = default_mode.announce_offline(&gone.instance);
            metrics.cluster_nodes_lost.inc();
            metrics
                .cluster_server_pings
                .get_or_create(&metrics::KindLabel { kind: "offline" })
                .inc_by(told as u64);
            tracing::warn!(node = %gone.node, instance = %gone.instance, told, "a node is gone; app servers are told it is offline");
        }
        default_mode.announce(cluster, now);
        metrics.cluster_nodes.set(members.count() as i64);
        let healthy = members.backplane_healthy();
        metrics.cluster_backplane_up.set(i64::from(healthy));
        cluster.resync_tick(healthy, now, node_timeout);
        if !self.probing.swap(true, Ordering::AcqRel) {
            let node = self.clone();
            tokio::spawn(async move {
                let answered = node.probe().await;
                match node
                    .cluster
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
        let cluster = &self.cluster;
        let both = async {
            let (ping, round_trip) = tokio::join!(cluster.probe_backplane(), cluster.ask_self());
            ping && round_trip
        };
        tokio::time::timeout(BACKPLANE_PROBE, both)
            .await
            .unwrap_or(false)
    }

    /// Tells the other nodes this node is shutting down, so they forget it at once; its
    /// heartbeats say so until it stops.
    pub(crate) fn leave(&self) {
        if self.cluster.in_cluster() {
            self.cluster.members().set_leaving();
            let servers = self.app_servers.default_mode.server_list();
            self.cluster.publish_presence(servers);
        }
    }

    /// Before a shutdown closes the clients: what other nodes accepted for them before the
    /// shutdown began is in flight through Redis. Waits a moment for their publishers to hand
    /// it over, then until a question this node asks itself comes back through Redis, by
    /// when everything published before the question has been read and queued to clients.
    pub(crate) async fn read_what_was_sent(&self) {
        if !self.cluster.in_cluster() {
            return;
        }
        tokio::time::sleep(PUBLISH_GRACE).await;
        let _ = tokio::time::timeout(SHUTDOWN_DRAIN, self.cluster.ask_self()).await;
    }
}
