//! The cluster: what this node shares with the other nodes through the backplane, below the
//! executor. On one node the backplane is in memory and most of this does nothing.
//!
//! # Layout
//! - `control`: the node-to-node control messages (asks, answers, heartbeats, live-trace
//!   events) and their encoding, carried as opaque `Message::Control` bodies.
//! - `question`: what a node asks the others and what they answer.
//! - `asks`: questions this node asked, waiting for their answers.
//! - `members`: which nodes are alive, from their heartbeats.
//! - `answer`: this node's answers from the router's state.
//! - `sink`: the node's inbox: data to the router, control decoded and answered; the
//!   interest that subscribes channels while they have local members.
//! - `sync`: the user-group table copied from the other nodes, at start and after an outage.
//! - `address`: where the other nodes reach this node over HTTP or HTTPS.
//! - `peer_tls`: how other nodes' certificates are checked when requests go to them over TLS.
//! - `proxy`: requests for connections another node holds, passed on to it.
//! - `assertion`: what the passing node vouches for (the client's token and address), which
//!   the owner checks instead of credentials; [`vouched_layer`] checks it on every request.
//! - here: [`Cluster`]: asking, publishing, and the node's questions about the others.
//!
//! A new node-to-node question is a variant in `question`, its answer in `answer` (or a
//! feature's, through `sink`), and a method here that asks it.

pub(crate) mod address;
mod answer;
mod asks;
pub(crate) mod assertion;
mod control;
pub(crate) mod members;
mod peer_tls;
pub(crate) mod proxy;
mod question;
mod sink;
mod sync;

pub(crate) use asks::Gathered;
pub(crate) use question::{Answer, Invocation, Question};
pub(crate) use sink::{RemoteInvocations, Views};

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use switchyard_backplane::{Backplane, NodeId};
use switchyard_core::{Channel, HubName, Message};
use switchyard_router::{GroupLimits, Router};

use crate::config::ValidConfig;
use crate::live_trace::Tracer;
use crate::metrics::Metrics;
use asks::Asks;
pub(crate) use control::Control;
use control::{node_wide_hub, Presence};
use members::Members;
use sink::{Answerers, BackplaneInterest, ClusterSink};

pub struct Cluster {
    backplane: Arc<dyn Backplane>,
    node_id: NodeId,
    router: Arc<Router>,
    asks: Arc<Asks>,
    members: Arc<Members>,
    /// Where other nodes reach this one over HTTP (set once the listener is bound).
    internal_url: Arc<OnceLock<String>>,
    answerers: Arc<Answerers>,
    metrics: Arc<Metrics>,
    /// How long an ask waits for the nodes it reached (`cluster.ask_timeout`).
    ask_timeout: Duration,
    /// Where the re-sync of the user-group table after an outage stands.
    resync: parking_lot::Mutex<sync::Resync>,
    proxy: proxy::Proxy,
    /// What this node's heartbeats say of its app servers.
    announcer: parking_lot::Mutex<members::Announcer>,
    /// How other nodes' certificates are checked when requests go to them over https.
    peer_trust: Arc<peer_tls::NodeVerifier>,
    /// The cluster's keys (as the backplane's): assertions between nodes are made with them.
    seal: switchyard_backplane::envelope::Seal,
}

// The backplane holds the node's sink (and so its router), and the router holds the
// backplane: without this a dropped node would never be freed.
impl Drop for Cluster {
    fn drop(&mut self) {
        self.backplane.detach(&self.node_id);
    }
}

impl Cluster {
    /// Joins `backplane` as `node_id`, with a router whose channels it subscribes.
    pub(crate) fn new(
        config: &ValidConfig,
        backplane: Arc<dyn Backplane>,
        node_id: NodeId,
        metrics: Arc<Metrics>,
        tracer: Arc<Tracer>,
    ) -> Cluster {
        let router = Arc::new(Router::with_limits(
            Arc::new(BackplaneInterest {
                backplane: backplane.clone(),
                node_id: node_id.clone(),
                settle_timeout: config.cluster.ask_timeout,
            }),
            GroupLimits {
                per_connection: config.limits.max_groups_per_connection,
                per_user: config.limits.max_groups_per_user,
            },
        ));
        let asks = Arc::new(Asks::default());
        let internal_url = Arc::new(OnceLock::new());
        let members = Arc::new(Members::new(
            node_id.clone(),
            members::new_instance(&node_id),
        ));
        let answerers = Arc::new(Answerers::default());
        backplane.attach(
            &node_id,
            Arc::new(ClusterSink {
                router: router.clone(),
                metrics: metrics.clone(),
                node_id: node_id.clone(),
                backplane: backplane.clone(),
                asks: asks.clone(),
                internal_url: internal_url.clone(),
                members: members.clone(),
                answerers: answerers.clone(),
                tracer,
            }),
        );
        let peer_trust = peer_tls::NodeVerifier::new(config);
        Cluster {
            proxy: proxy::Proxy::new(
                &config.timeouts,
                peer_tls::client_config(peer_trust.clone()),
            ),
            peer_trust,
            seal: config.cluster_seal(),
            resync: parking_lot::Mutex::default(),
            announcer: parking_lot::Mutex::default(),
            ask_timeout: config.cluster.ask_timeout,
            backplane,
            node_id,
            router,
            asks,
            members,
            internal_url,
            answerers,
            metrics,
        }
    }

    pub fn node_id(&self) -> &NodeId {
        &self.node_id
    }

    pub(crate) fn seal(&self) -> &switchyard_backplane::envelope::Seal {
        &self.seal
    }

    /// Whether other processes' nodes share this node's backplane.
    pub fn in_cluster(&self) -> bool {
        self.backplane.spans_processes()
    }

    /// What the backplane carried between processes so far.
    pub fn backplane_traffic(&self) -> switchyard_backplane::Traffic {
        self.backplane.stats()
    }

    /// Resolves once this node's subscriptions so far are live on the backplane: a message
    /// any node publishes after that reaches them.
    pub async fn barrier(&self) {
        self.backplane.barrier(&self.node_id).await;
    }

    /// [`Cluster::barrier`] bounded by `cluster.ask_timeout`: a backplane that does not
    /// answer delays what waits for it, but never stops it.
    pub(crate) fn settle(&self) -> switchyard_backplane::Barrier {
        let barrier = self.backplane.barrier(&self.node_id);
        let limit = self.ask_timeout;
        Box::pin(async move {
            let _ = tokio::time::timeout(limit, barrier).await;
        })
    }

    /// Waits for this node's subscriptions to be live, up to `cluster.ask_timeout`; false when
    /// they were not confirmed in time.
    async fn settle_within_timeout(&self) -> bool {
        tokio::time::timeout(self.ask_timeout, self.barrier())
            .await
            .is_ok()
    }

    /// The router whose channels this node subscribes.
    pub(crate) fn router(&self) -> &Arc<Router> {
        &self.router
    }

    /// The cluster's live nodes as this node hears them.
    pub(crate) fn members(&self) -> &Members {
        &self.members
    }

    /// Passes requests for other nodes' connections on to them.
    pub(crate) fn proxy(&self) -> &proxy::Proxy {
        &self.proxy
    }

    /// Where client invocations passed on by other nodes go (set once, by Default mode).
    pub(crate) fn set_remote_invocations(&self, invocations: Arc<dyn RemoteInvocations>) {
        let _ = self.answerers.invocations.set(invocations);
    }

    /// Who answers other nodes' dashboards here.
    pub(crate) fn set_views(&self, views: Arc<dyn Views>) {
        let _ = self.answerers.views.set(views);
    }

    /// Other nodes are trusted by the listener's certificate as it is now, reloads included
    /// (unless `cluster.ca_file` names the roots).
    pub(crate) fn trust_like(&self, certificates: Arc<crate::tls::Certificates>) {
        self.peer_trust.follow(certificates);
    }

    /// Where other nodes reach this node over HTTP; set once, when the listener is bound.
    pub(crate) fn set_internal_url(&self, url: String) {
        let _ = self.internal_url.set(url);
    }

    /// Where a networked backplane's first server is: the network the nodes share.
    pub(crate) fn peer_address_hint(&self) -> Option<(String, u16)> {
        self.backplane.peer_address_hint()
    }

    pub(crate) fn publish(&self, channels: Vec<Channel>, message: Message) {
        self.backplane.publish(&channels, Arc::new(message));
    }

    fn publish_control(&self, channels: Vec<Channel>, hub: HubName, control: Control) {
        self.publish(channels, control.into_message(hub));
    }

    /// Asks the nodes listening on `channel` and gathers their answers; `settles` says
    /// whether one answer decides.
    pub(crate) async fn ask(
        &self,
        hub: &HubName,
        channel: Channel,
        question: Question,
        settles: fn(&Answer) -> bool,
    ) -> Gathered {
        let waiting = self.asks.start(settles);
        let control = Control::Ask {
            from: self.node_id.clone(),
            id: waiting.id(),
            question,
        };
        let message = Arc::new(control.into_message(hub.clone()));
        let reached = self.backplane.ask(&channel, message).await;
        let gathered = waiting.gather(reached, self.ask_timeout).await;
        if !gathered.complete {
            self.metrics.cluster_asks_incomplete.inc();
            tracing::debug!(channel = %channel.key(), ?reached, "an ask was not answered by every node in time");
        }
        gathered
    }

    /// In a cluster, waits until every node listening on `channels` has read what this node
    /// published before: they read a question after it (one publisher, one order) and answer
    /// it, so once they have, what the publish did holds for messages from any node.
    pub(crate) async fn settled_on(&self, hub: &HubName, channels: Vec<Channel>) {
        if !self.in_cluster() {
            return;
        }
        let asks = channels
            .into_iter()
            .map(|channel| self.ask(hub, channel, Question::Address, |_| false));
        futures_util::future::join_all(asks).await;
    }

    /// Whether this node's backplane answers a round trip now (may hang: bound it).
    pub(crate) async fn probe_backplane(&self) -> bool {
        self.backplane.probe(&self.node_id).await
    }

    /// Whether a question this node asks itself comes back through the backplane and its
    /// reader.
    pub(crate) async fn ask_self(&self) -> bool {
        let channel = Channel::Node(self.node_id.clone());
        let gathered = self
            .ask(&node_wide_hub(), channel, Question::Address, |_| true)
            .await;
        !gathered.answers.is_empty()
    }

    /// Whether another live node of the cluster uses this node's id: it would answer on this
    /// node's channel with its address. Called before this node serves, while it has no
    /// address to answer with itself. Decided by answers, not by counting readers: a crashed
    /// node's subscription can linger in Redis, and pattern subscribers count too.
    pub async fn id_in_use_elsewhere(&self) -> bool {
        if !self.in_cluster() {
            return false;
        }
        self.settle_within_timeout().await;
        let channel = Channel::Node(self.node_id.clone());
        let gathered = self
            .ask(&node_wide_hub(), channel, Question::Address, |a| {
                matches!(a, Answer::At(_))
            })
            .await;
        gathered
            .answers
            .iter()
            .any(|answer| matches!(answer, Answer::At(_)))
    }

    /// The URL other nodes reach `node` at over HTTP.
    pub(crate) async fn address_of(&self, hub: &HubName, node: &str) -> Lookup {
        let channel = Channel::Node(node.to_string());
        // Only an origin settles it: a forged answer must not cut the real one off.
        let gathered = self
            .ask(
                hub,
                channel,
                Question::Address,
                |a| matches!(a, Answer::At(url) if address::is_node_origin(url)),
            )
            .await;
        let found = gathered.answers.into_iter().find_map(|a| match a {
            Answer::At(url) if address::is_node_origin(&url) => Some(url),
            Answer::At(url) => {
                address::refused(node, &url);
                self.metrics.cluster_addresses_refused.inc();
                None
            }
            _ => None,
        });
        match (found, gathered.complete) {
            (Some(url), _) => Lookup::At(url),
            (None, true) => Lookup::Nobody,
            (None, false) => Lookup::Unknown,
        }
    }

    /// Tells the other nodes this node is alive (or leaving), and which app servers it holds
    /// connections from.
    pub(crate) fn publish_presence(&self, servers: Vec<(HubName, Vec<String>)>) {
        let others = self.members.other_instances();
        let healthy = self.members.backplane_healthy();
        let (generation, servers) =
            self.announcer
                .lock()
                .next(servers, &others, healthy, std::time::Instant::now());
        let presence = Presence {
            node: self.node_id.clone(),
            instance: self.members.instance().to_string(),
            leaving: self.members.is_leaving(),
            generation,
            servers,
        };
        self.publish_control(
            vec![Channel::All],
            node_wide_hub(),
            Control::Presence(presence),
        );
    }

    /// Passes live-trace events of `hub` (the dashboard's JSON) to the nodes `to`, whose
    /// dashboards trace it.
    pub(crate) fn publish_trace(&self, to: &[NodeId], hub: &HubName, events: String) {
        if to.is_empty() {
            return;
        }
        let control = Control::Trace {
            from: self.node_id.clone(),
            events,
        };
        let channels = to.iter().map(|node| Channel::Node(node.clone())).collect();
        self.publish_control(channels, hub.clone(), control);
    }

    /// The other nodes' answers to a dashboard request (JSON), those that came within
    /// `cluster.ask_timeout`; none on a node of its own.
    pub(crate) async fn views(&self, request: String) -> Vec<String> {
        if !self.in_cluster() {
            return Vec::new();
        }
        let gathered = self
            .ask(
                &node_wide_hub(),
                Channel::All,
                Question::View(request),
                |_| false,
            )
            .await;
        gathered
            .answers
            .into_iter()
            .filter_map(|answer| match answer {
                Answer::View(json) => Some(json),
                _ => None,
            })
            .collect()
    }

    /// Passes a client invocation to the node holding its connection; true when that node
    /// took it.
    pub(crate) async fn invoke_elsewhere(&self, hub: &HubName, invocation: Invocation) -> bool {
        let channel = Channel::Connection(hub.clone(), invocation.connection.clone());
        let gathered = self
            .ask(hub, channel, Question::Invoke(invocation), |a| {
                *a == Answer::Yes
            })
            .await;
        gathered.answers.contains(&Answer::Yes)
    }

    /// Asks in flight (tests).
    #[cfg(test)]
    pub(crate) fn asks_in_flight(&self) -> usize {
        self.asks.in_flight()
    }
}

/// Where a node is, as far as the cluster could tell.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Lookup {
    At(String),
    /// No node answers for it, for sure (nobody reads its channel).
    Nobody,
    /// Could not be told: the backplane did not take the question, or a reader did not answer
    /// in time.
    Unknown,
}

/// Every request: one marked as passed on by another node (`x-switchyard-forwarded-by`)
/// counts only with that node's assertion, which then stands in for the client's token and
/// address (a [`assertion::Vouched`] extension); without one it is refused with 403, as the
/// mark is anyone's to send. Outside a cluster the mark means nothing and is dropped.
pub(crate) async fn vouched_layer(
    axum::extract::State(cluster): axum::extract::State<Arc<Cluster>>,
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let checked = request.headers().get(proxy::FORWARDED_BY).map(|by| {
        assertion::check(
            &cluster.seal,
            by.to_str().unwrap_or(""),
            request.method(),
            request.uri().path_and_query().map_or("/", |p| p.as_str()),
            request.headers().get(assertion::ASSERTION),
            assertion::unix_now(),
        )
    });
    match checked {
        None => {}
        Some(_) if !cluster.in_cluster() => {
            request.headers_mut().remove(proxy::FORWARDED_BY);
        }
        Some(Ok(vouched)) => {
            let extensions = request.extensions_mut();
            extensions.insert(crate::http::VouchedClient(vouched.client));
            extensions.insert(vouched);
        }
        Some(Err(why)) => {
            tracing::debug!(why, "refusing a request marked as passed on by a node");
            return crate::http::text_error(
                axum::http::StatusCode::FORBIDDEN,
                format!(
                    "{} is only for requests one node passes to another: {why}",
                    proxy::FORWARDED_BY
                ),
            );
        }
    }
    next.run(request).await
}
