//! The executor: applies [`Command`]s, whoever sent them, and answers lookups. It knows the
//! router and the backplane, and nothing of clients, app servers or HTTP.
//!
//! Mutations and sends are published on the backplane (even on one node), so a cluster
//! backplane changes where messages go without changing any caller. What needs an answer from
//! the node holding a connection (membership changes, closes and checks of connections held
//! elsewhere, user-group joins, group listings) is asked on the channel of what it concerns,
//! and the answers of the nodes listening there decide ([`crate::asks`]).

use std::collections::BTreeSet;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use futures_util::FutureExt;

use switchyard_auth::AccessKeys;
use switchyard_backplane::{Backplane, NodeId, Sink};
use switchyard_core::{
    user_group_key, Answer, Channel, CloseReason, ConnectionId, GroupName, HubName, Message,
    Payloads, Protocol, Question, Target, UserGroupEntry, UserGroupKey,
};
use switchyard_hub_protocol::{encode_invocation, Format};
use switchyard_router::{Connection, GroupLimits, GroupMember, Interest, Router};

use crate::asks::{Asks, Gathered};
use crate::command::{Check, Command, Missing};
use crate::config::ValidConfig;
use crate::http::Auth;
use crate::members::Members;
use crate::metrics::Metrics;
use crate::throttle::Throttle;
use crate::trace::{bodies, describe_target, TraceEvent, Tracer};

/// Takes a client invocation another node passed on (see [`Question::Invoke`]); implemented
/// by Default mode, which the executor does not know.
pub(crate) trait RemoteInvocations: Send + Sync {
    /// Whether this node took the invocation (it holds the client and a connection from the
    /// caller to answer on).
    fn take(&self, hub: &HubName, question: &Question) -> bool;
}

type InvocationsSlot = Arc<OnceLock<Arc<dyn RemoteInvocations>>>;

/// What a node shows of itself to a dashboard open on another node ([`Question::View`]).
pub(crate) trait Views: Send + Sync {
    /// The answer (JSON) to a request (JSON).
    fn view(&self, request: &str) -> String;
}

type ViewsSlot = Arc<OnceLock<Arc<dyn Views>>>;

pub struct Executor {
    config: ValidConfig,
    auth: Auth,
    node_id: NodeId,
    router: Arc<Router>,
    backplane: Arc<dyn Backplane>,
    metrics: Arc<Metrics>,
    asks: Arc<Asks>,
    /// Where other nodes reach this one over HTTP (set once the listener is bound).
    internal_url: Arc<OnceLock<String>>,
    members: Arc<Members>,
    invocations: InvocationsSlot,
    views: ViewsSlot,
    throttle: Throttle,
    tracer: Arc<Tracer>,
    /// Refused connects' log lines (an outsider can cause them at will).
    refusal_log: crate::logs::Gate,
}

/// Subscribes this node to a channel while it has a local member.
struct BackplaneInterest {
    backplane: Arc<dyn Backplane>,
    node_id: NodeId,
    /// Longest a joining client is held for its subscriptions (`cluster.ask_timeout`): with
    /// the backplane unreachable it is served locally rather than not at all.
    settle_timeout: Duration,
}

impl Interest for BackplaneInterest {
    fn changed(&self, channel: Channel, interested: bool) {
        if interested {
            self.backplane.subscribe(&self.node_id, &channel);
        } else {
            self.backplane.unsubscribe(&self.node_id, &channel);
        }
    }

    fn joined(&self, connection: &Arc<Connection>) {
        let mut barrier = self.backplane.barrier(&self.node_id);
        if (&mut barrier).now_or_never().is_some() {
            connection.outbound().release();
            return;
        }
        let (connection, limit) = (connection.clone(), self.settle_timeout);
        tokio::spawn(async move {
            let _ = tokio::time::timeout(limit, barrier).await;
            connection.outbound().release();
        });
    }
}

/// Applies what the backplane delivers to this node's router, and answers other nodes'
/// questions.
struct RouterSink {
    router: Arc<Router>,
    metrics: Arc<Metrics>,
    node_id: NodeId,
    backplane: Arc<dyn Backplane>,
    asks: Arc<Asks>,
    internal_url: Arc<OnceLock<String>>,
    members: Arc<Members>,
    invocations: InvocationsSlot,
    views: ViewsSlot,
    tracer: Arc<Tracer>,
}

impl Sink for RouterSink {
    fn receive(&self, message: &Arc<Message>) {
        match &**message {
            Message::Ask {
                hub,
                from,
                id,
                question,
            } => self.answer(hub, from, *id, question),
            Message::Answer { id, answer, .. } => self.asks.answered(*id, answer.clone()),
            Message::Presence(presence) => self.members.heard(presence, Instant::now()),
            Message::Trace { hub, events, .. } => {
                self.tracer.forwarded(hub, events);
            }
            _ => {
                let delivered = self.router.apply(message);
                self.metrics.frames_delivered.inc_by(delivered as u64);
            }
        }
    }
}

impl RouterSink {
    fn answer(&self, hub: &HubName, from: &NodeId, id: u64, question: &Question) {
        let answer = if let Question::View(request) = question {
            match self.views.get() {
                Some(views) => Answer::View(views.view(request)),
                None => Answer::No,
            }
        } else if let Question::Invoke { .. } = question {
            let taken = self
                .invocations
                .get()
                .is_some_and(|invocations| invocations.take(hub, question));
            if taken {
                Answer::Yes
            } else {
                Answer::No
            }
        } else {
            self.router.answer(hub, question)
        };
        let answer = match (question, answer) {
            (Question::Address, Answer::Yes) => match self.internal_url.get() {
                Some(url) => Answer::At(url.clone()),
                None => Answer::No,
            },
            (_, answer) => answer,
        };
        // A change that made this node subscribe is answered once the subscription is live,
        // so the asker's next send reaches the connection.
        let wait = answer == Answer::Yes
            && matches!(
                question,
                Question::AddToGroup { .. } | Question::UserJoinGroup { .. }
            );
        let reply = Arc::new(Message::Answer {
            hub: hub.clone(),
            id,
            answer,
        });
        let to = [Channel::Node(from.clone())];
        let mut barrier = self.backplane.barrier(&self.node_id);
        if !wait || (&mut barrier).now_or_never().is_some() {
            self.backplane.publish(&to, reply);
            return;
        }
        let backplane = self.backplane.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    barrier.await;
                    backplane.publish(&to, reply);
                });
            }
            Err(_) => backplane.publish(&to, reply),
        }
    }
}

// The backplane holds the node's sink (and so its router), and the router holds the
// backplane: without this a dropped node would never be freed.
impl Drop for Executor {
    fn drop(&mut self) {
        self.backplane.detach(&self.node_id);
    }
}

impl Executor {
    pub(crate) fn new(
        config: ValidConfig,
        backplane: Arc<dyn Backplane>,
        node_id: NodeId,
        metrics: Arc<Metrics>,
    ) -> Executor {
        let keys = AccessKeys::new(
            config
                .access_key
                .clone()
                .unwrap_or_else(|| switchyard_auth::EMULATOR_ACCESS_KEY.to_string()),
            config.secondary_access_key.clone(),
        );
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
            crate::members::new_instance(&node_id),
        ));
        let invocations: InvocationsSlot = Arc::new(OnceLock::new());
        let views: ViewsSlot = Arc::new(OnceLock::new());
        let tracer = Arc::new(Tracer::new(&config.dashboard));
        backplane.attach(
            &node_id,
            Arc::new(RouterSink {
                router: router.clone(),
                metrics: metrics.clone(),
                node_id: node_id.clone(),
                backplane: backplane.clone(),
                asks: asks.clone(),
                internal_url: internal_url.clone(),
                members: members.clone(),
                invocations: invocations.clone(),
                views: views.clone(),
                tracer: tracer.clone(),
            }),
        );
        Executor {
            auth: Auth::new(keys, &config),
            throttle: Throttle::new(&config.throttling),
            tracer,
            refusal_log: crate::logs::Gate::new(crate::logs::REFUSALS_PER_SECOND),
            config,
            node_id,
            router,
            backplane,
            metrics,
            asks,
            internal_url,
            members,
            invocations,
            views,
        }
    }

    /// The cluster's live nodes as this node hears them.
    pub(crate) fn members(&self) -> &Arc<Members> {
        &self.members
    }

    /// Where client invocations passed on by other nodes go (set once, by Default mode).
    pub(crate) fn set_remote_invocations(&self, invocations: Arc<dyn RemoteInvocations>) {
        let _ = self.invocations.set(invocations);
    }

    /// Who answers other nodes' dashboards here.
    pub(crate) fn set_views(&self, views: Arc<dyn Views>) {
        let _ = self.views.set(views);
    }

    /// The other nodes' answers to a dashboard request (JSON), those that came within
    /// `cluster.ask_timeout`; none on a node of its own.
    pub(crate) async fn views(&self, request: String) -> Vec<String> {
        if !self.in_cluster() {
            return Vec::new();
        }
        let hub = HubName::new("switchyard", None).expect("a valid hub name");
        let gathered = self
            .ask(&hub, Channel::All, Question::View(request), |_| false)
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

    /// Passes live-trace events of `hub` (the dashboard's JSON) to the nodes `to`, whose
    /// dashboards trace it.
    pub(crate) fn publish_trace(&self, to: &[NodeId], hub: &HubName, events: String) {
        if to.is_empty() {
            return;
        }
        let message = Message::Trace {
            hub: hub.clone(),
            from: self.node_id.clone(),
            events,
        };
        let channels = to.iter().map(|node| Channel::Node(node.clone())).collect();
        self.publish(channels, message);
    }

    /// Tells the other nodes this node is alive (or leaving), and which app servers it holds
    /// connections from.
    pub(crate) fn publish_presence(&self, servers: Vec<(HubName, Vec<String>)>, leaving: bool) {
        let presence = switchyard_core::Presence {
            hub: HubName::new("switchyard", None).expect("a valid hub name"),
            node: self.node_id.clone(),
            instance: self.members.instance().to_string(),
            leaving,
            servers,
        };
        self.publish(vec![Channel::All], Message::Presence(presence));
    }

    /// Passes a client invocation to the node holding its connection; true when that node
    /// took it (see [`Question::Invoke`]).
    pub(crate) async fn invoke_elsewhere(&self, hub: &HubName, question: Question) -> bool {
        let Question::Invoke { connection, .. } = &question else {
            return false;
        };
        let channel = self.owner_of(hub, connection);
        let gathered = self
            .ask(hub, channel, question, |a| *a == Answer::Yes)
            .await;
        gathered.answers.contains(&Answer::Yes)
    }

    /// Where other nodes reach this node over HTTP; set once, when the listener is bound.
    pub(crate) fn set_internal_url(&self, url: String) {
        let _ = self.internal_url.set(url);
    }

    pub fn config(&self) -> &ValidConfig {
        &self.config
    }

    pub fn keys(&self) -> &AccessKeys {
        self.auth.keys()
    }

    /// Token checks against this service's keys, origins and token lifetime cap.
    pub(crate) fn auth(&self) -> &Auth {
        &self.auth
    }

    /// The live trace (off unless an operator switched it on for a hub).
    pub(crate) fn tracer(&self) -> &Arc<Tracer> {
        &self.tracer
    }

    /// Connect and REST rates, negotiates and handshakes in progress.
    /// Lets through a few refused-connect log lines a second.
    pub(crate) fn refusal_log(&self) -> &crate::logs::Gate {
        &self.refusal_log
    }

    pub(crate) fn throttle(&self) -> &Throttle {
        &self.throttle
    }

    pub fn node_id(&self) -> &NodeId {
        &self.node_id
    }

    /// What the backplane carried between processes so far.
    pub fn backplane_traffic(&self) -> switchyard_backplane::Traffic {
        self.backplane.stats()
    }

    /// Whether other processes' nodes share this node's backplane (a cluster).
    pub fn in_cluster(&self) -> bool {
        self.backplane.spans_processes()
    }

    /// Resolves once this node's subscriptions so far are live on the backplane: a message
    /// any node publishes after that reaches them.
    pub async fn barrier(&self) {
        self.backplane.barrier(&self.node_id).await;
    }

    /// [`Executor::barrier`] bounded by `cluster.ask_timeout`: a backplane that does not
    /// answer delays what waits for it, but never stops it.
    pub(crate) fn settle(&self) -> switchyard_backplane::Barrier {
        let barrier = self.backplane.barrier(&self.node_id);
        let limit = self.config.cluster.ask_timeout;
        Box::pin(async move {
            let _ = tokio::time::timeout(limit, barrier).await;
        })
    }

    /// Whether this node's backplane answers a round trip now (may hang: bound it).
    pub(crate) async fn probe_backplane(&self) -> bool {
        self.backplane.probe(&self.node_id).await
    }

    pub fn router(&self) -> &Arc<Router> {
        &self.router
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Applies one command to the hub, wherever in the cluster what it names is. `Err` names
    /// what the command needed and did not find; nothing was changed then. When this returns,
    /// the change is live: a send published after it reaches the connections it changed.
    pub async fn execute(&self, hub: &HubName, command: Command) -> Result<(), Missing> {
        match command {
            Command::Send { target, payloads } => {
                self.send(hub, target, payloads);
                Ok(())
            }
            Command::Close {
                target: Target::Connection(connection),
                excluded,
                reason,
            } if !self.holds(hub, &connection) => {
                if excluded.contains(&connection) {
                    return Ok(());
                }
                let question = Question::CloseConnection {
                    connection: connection.clone(),
                    reason,
                };
                self.ask_owner(hub, &connection, question).await
            }
            Command::Close {
                target,
                excluded,
                reason,
            } => {
                let channels = self.channels_for(hub, &target);
                self.publish(
                    channels.clone(),
                    Message::Close {
                        hub: hub.clone(),
                        target,
                        excluded,
                        reason: CloseReason::ClosedByApi(reason),
                    },
                );
                self.settled_on(hub, channels).await;
                Ok(())
            }
            Command::AddToGroup { connection, group } => {
                if !self.holds(hub, &connection) {
                    let question = Question::AddToGroup {
                        connection: connection.clone(),
                        group,
                    };
                    let joined = self.ask_owner(hub, &connection, question).await;
                    if matches!(joined, Err(Missing::ConnectionGroupsFull(..))) {
                        self.metrics.refused("groups_per_connection");
                    }
                    return joined;
                }
                // Checked before the join goes out in order with what this node publishes;
                // the router keeps the same bound in case the connection joined meanwhile.
                let max = self.config.limits.max_groups_per_connection;
                let full = self
                    .router
                    .find_hub(hub)
                    .and_then(|h| h.connection(&connection))
                    .is_some_and(|c| max != 0 && !c.in_group(&group) && c.group_count() >= max);
                if full {
                    self.metrics.refused("groups_per_connection");
                    return Err(Missing::ConnectionGroupsFull(connection, max as u64));
                }
                self.publish(
                    vec![self.owner_of(hub, &connection)],
                    Message::AddToGroup {
                        hub: hub.clone(),
                        connection,
                        group,
                    },
                );
                self.barrier().await;
                Ok(())
            }
            Command::RemoveFromGroup { connection, group } => {
                if !self.holds(hub, &connection) {
                    let question = Question::RemoveFromGroup {
                        connection: connection.clone(),
                        group,
                    };
                    return self.ask_owner(hub, &connection, question).await;
                }
                self.publish(
                    vec![self.owner_of(hub, &connection)],
                    Message::RemoveFromGroup {
                        hub: hub.clone(),
                        connection,
                        group,
                    },
                );
                Ok(())
            }
            Command::UserJoinGroup { user, group, ttl } => {
                // Every node keeps the same table, so this node's copy decides the limit.
                if ttl != Some(Duration::ZERO) {
                    if let Some(h) = self.router.find_hub(hub) {
                        if let Err(max) = h.user_may_join(&user, &group, Instant::now()) {
                            self.metrics.refused("groups_per_user");
                            return Err(Missing::UserGroupsFull(user, max as u64));
                        }
                    }
                }
                // Every node keeps the whole user-group table, for the user's later
                // connections; the nodes holding the user's connections now answer once
                // those are in the group.
                self.publish(
                    vec![Channel::All],
                    Message::UserJoinGroup {
                        hub: hub.clone(),
                        user: user.clone(),
                        group: group.clone(),
                        ttl,
                    },
                );
                let channel = Channel::User(hub.clone(), user.clone());
                let question = Question::UserJoinGroup { user, group, ttl };
                self.ask(hub, channel, question, |_| false).await;
                Ok(())
            }
            Command::UserLeaveGroup { user, group } => {
                self.publish(
                    vec![Channel::All],
                    Message::UserLeaveGroup {
                        hub: hub.clone(),
                        user: user.clone(),
                        group,
                    },
                );
                // Once the nodes holding the user's connections answered, a group send from
                // any node no longer reaches the user.
                self.settled_on(hub, vec![Channel::User(hub.clone(), user)])
                    .await;
                Ok(())
            }
            Command::Check(check) => self.check(hub, check).await,
        }
    }

    /// Answers from this node when it holds the answer, else from the nodes listening on the
    /// channel of what is checked.
    async fn check(&self, hub: &HubName, check: Check) -> Result<(), Missing> {
        let question = match &check {
            Check::Connection(id) => Question::ConnectionExists(id.clone()),
            Check::User(user) => Question::UserExists(user.clone()),
            Check::Group(group) => Question::GroupExists(group.clone()),
            Check::UserInGroup(user, group) => Question::UserInGroup(user.clone(), group.clone()),
        };
        if self.router.answer(hub, &question) == Answer::Yes {
            return Ok(());
        }
        let channel = match &check {
            Check::Connection(id) => self.owner_of(hub, id),
            Check::User(user) | Check::UserInGroup(user, _) => {
                Channel::User(hub.clone(), user.clone())
            }
            Check::Group(group) => Channel::Group(hub.clone(), group.clone()),
        };
        let gathered = self
            .ask(hub, channel, question, |a| *a == Answer::Yes)
            .await;
        if gathered.answers.contains(&Answer::Yes) {
            return Ok(());
        }
        Err(match check {
            Check::Connection(id) => Missing::Connection(id),
            Check::User(user) => Missing::User(user),
            Check::Group(group) => Missing::Group(group),
            Check::UserInGroup(user, group) => Missing::UserInGroup(user, group),
        })
    }

    /// Whether this node holds the connection (its handshake done).
    fn holds(&self, hub: &HubName, id: &ConnectionId) -> bool {
        self.router
            .find_hub(hub)
            .is_some_and(|h| h.connection_exists(id))
    }

    /// Has the node holding `connection` apply `question`; a miss when no node holds it.
    async fn ask_owner(
        &self,
        hub: &HubName,
        connection: &ConnectionId,
        question: Question,
    ) -> Result<(), Missing> {
        let channel = self.owner_of(hub, connection);
        let gathered = self
            .ask(hub, channel, question, |a| {
                matches!(a, Answer::Yes | Answer::Full(_))
            })
            .await;
        if gathered.answers.contains(&Answer::Yes) {
            return Ok(());
        }
        match gathered.answers.iter().find_map(|a| match a {
            Answer::Full(max) => Some(*max),
            _ => None,
        }) {
            Some(max) => Err(Missing::ConnectionGroupsFull(connection.clone(), max)),
            None => Err(Missing::Connection(connection.clone())),
        }
    }

    /// Asks the nodes listening on `channel` and gathers their answers; `settles` says
    /// whether one answer decides.
    async fn ask(
        &self,
        hub: &HubName,
        channel: Channel,
        question: Question,
        settles: fn(&Answer) -> bool,
    ) -> Gathered {
        let waiting = self.asks.start(settles);
        let message = Arc::new(Message::Ask {
            hub: hub.clone(),
            from: self.node_id.clone(),
            id: waiting.id(),
            question,
        });
        let reached = self.backplane.ask(&channel, message).await;
        let gathered = waiting
            .gather(reached, self.config.cluster.ask_timeout)
            .await;
        if !gathered.complete {
            self.metrics.cluster_asks_incomplete.inc();
            tracing::debug!(channel = %channel.key(), ?reached, "an ask was not answered by every node in time");
        }
        gathered
    }

    /// Copies the user-group memberships from the nodes already running (each keeps the
    /// whole table), page by page; returns how many it took on. Called once, before the node
    /// serves: changes made from then on reach it as they happen, and win over the copy.
    pub async fn copy_user_groups(&self) -> usize {
        if !self.in_cluster() {
            return 0;
        }
        self.router.begin_copy();
        if !self.settle_within_timeout().await {
            tracing::warn!("the backplane did not confirm this node's subscriptions in time");
        }
        let copied = self.copy_user_group_pages().await;
        self.router.end_copy();
        copied
    }

    /// This node's backplane stopped answering: joins and leaves of user groups made from
    /// now on may not reach the other nodes (nor theirs this one). Each is noted, so that the
    /// copy made once it answers again ([`Executor::copy_user_groups_again`]) does not undo
    /// them.
    pub(crate) fn backplane_lost(&self) {
        self.router.begin_copy();
    }

    /// The backplane answers again: takes on the memberships other nodes made meanwhile (a
    /// union; what this node changed meanwhile wins). Leaves made on another node during the
    /// outage are not learnt: see docs/cluster.md, "Failures". The notes stay until
    /// [`Executor::end_noting`].
    pub(crate) async fn copy_user_groups_again(&self) -> usize {
        self.copy_user_group_pages().await
    }

    /// Stops noting joins and leaves (the copy after an outage is done).
    pub(crate) fn end_noting(&self) {
        self.router.end_copy();
    }

    /// Whether a question this node asks itself comes back through Redis and its reader.
    pub(crate) async fn ask_self(&self) -> bool {
        let hub = HubName::new("switchyard", None).expect("a valid hub name");
        let channel = Channel::Node(self.node_id.clone());
        let gathered = self.ask(&hub, channel, Question::Address, |_| true).await;
        !gathered.answers.is_empty()
    }

    async fn copy_user_group_pages(&self) -> usize {
        const PAGE: u32 = 1000;
        const TRIES: usize = 3;
        let hub = HubName::new("switchyard", None).expect("a valid hub name");
        let mut after: Option<UserGroupKey> = None;
        let mut copied = 0;
        loop {
            let mut gathered = Gathered::default();
            for _ in 0..TRIES {
                let question = Question::UserGroups {
                    after: after.clone(),
                    max: PAGE,
                };
                gathered = self.ask(&hub, Channel::All, question, |_| false).await;
                if gathered.complete {
                    break;
                }
            }
            if !gathered.complete {
                tracing::warn!(
                    copied,
                    "not every node listed its user groups in time; the copy may miss some"
                );
            }
            let floor = after.as_ref().map(user_group_key);
            let mut more = false;
            let mut page: Vec<UserGroupEntry> = Vec::new();
            for answer in gathered.answers {
                if let Answer::UserGroups(entries) = answer {
                    more |= entries.len() >= PAGE as usize;
                    page.extend(
                        entries
                            .into_iter()
                            .filter(|e| floor.is_none_or(|f| e.key() > f)),
                    );
                }
            }
            page.sort_unstable_by(|a, b| a.key().cmp(&b.key()));
            // Of entries listed twice, the longer-lived is kept (no ttl sorts last).
            page.dedup_by(|later, earlier| {
                let same = later.key() == earlier.key();
                if same && (later.ttl.is_none() || earlier.ttl.is_some_and(|t| Some(t) < later.ttl))
                {
                    earlier.ttl = later.ttl;
                }
                same
            });
            more |= page.len() > PAGE as usize;
            page.truncate(PAGE as usize);
            self.router.restore_user_groups(&page);
            copied += page.len();
            match page.pop() {
                Some(last) if more => after = Some((last.hub, last.user, last.group)),
                _ => break,
            }
        }
        copied
    }

    /// In a cluster, waits until every node listening on `channels` has read what this node
    /// published before: they read a question after it (one publisher, one order) and answer
    /// it, so once they have, what the publish did holds for messages from any node.
    async fn settled_on(&self, hub: &HubName, channels: Vec<Channel>) {
        if !self.in_cluster() {
            return;
        }
        let asks = channels
            .into_iter()
            .map(|channel| self.ask(hub, channel, Question::Address, |_| false));
        futures_util::future::join_all(asks).await;
    }

    /// Waits for this node's subscriptions to be live, up to `cluster.ask_timeout`; false when
    /// they were not confirmed in time.
    async fn settle_within_timeout(&self) -> bool {
        tokio::time::timeout(self.config.cluster.ask_timeout, self.barrier())
            .await
            .is_ok()
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
        let hub = HubName::new("switchyard", None).expect("a valid hub name");
        let channel = Channel::Node(self.node_id.clone());
        let gathered = self
            .ask(&hub, channel, Question::Address, |a| {
                matches!(a, Answer::At(_))
            })
            .await;
        gathered
            .answers
            .iter()
            .any(|answer| matches!(answer, Answer::At(_)))
    }

    /// The URL other nodes reach `node` at over HTTP: `Ok(None)` when no such node answers
    /// for sure (nobody reads its channel), `Err(())` when that could not be told (the
    /// backplane did not take the question, or a reader did not answer in time).
    pub(crate) async fn address_of(&self, hub: &HubName, node: &str) -> Result<Option<String>, ()> {
        let channel = Channel::Node(node.to_string());
        let gathered = self
            .ask(hub, channel, Question::Address, |a| {
                matches!(a, Answer::At(_))
            })
            .await;
        let found = gathered.answers.into_iter().find_map(|a| match a {
            Answer::At(url) => Some(url),
            _ => None,
        });
        match (found, gathered.complete) {
            (Some(url), _) => Ok(Some(url)),
            (None, true) => Ok(None),
            (None, false) => Err(()),
        }
    }

    /// Sends pre-encoded payloads to the target (the hot path of every send).
    pub fn send(&self, hub: &HubName, target: Target, payloads: Payloads) {
        if payloads.is_empty() {
            return;
        }
        if self.tracer.on() {
            self.trace_send(hub, &target, &payloads);
        }
        // A connection this node holds is its channel's only reader: the copy through Redis
        // would only come back to be dropped (measured: ~25 µs of service and ~15 µs of Redis
        // CPU per message). Delivered here, in order with everything else this node publishes,
        // whose local deliveries also happen at publish time. (App servers send to one
        // connection as a list of one.)
        // (On one node there is no Redis to skip: no lookup.)
        let local = self.in_cluster()
            && match &target {
                Target::Connection(id) => self.holds(hub, id),
                Target::Connections(ids) => ids.iter().all(|id| self.holds(hub, id)),
                _ => false,
            };
        if local {
            let message = Message::Send {
                hub: hub.clone(),
                target,
                payloads,
            };
            let delivered = self.router.apply(&message);
            self.metrics.frames_delivered.inc_by(delivered as u64);
            return;
        }
        let channels = self.channels_for(hub, &target);
        self.publish(
            channels,
            Message::Send {
                hub: hub.clone(),
                target,
                payloads,
            },
        );
    }

    /// A send, in the live trace of its hub (one event for all its recipients).
    #[cold]
    fn trace_send(&self, hub: &HubName, target: &Target, payloads: &Payloads) {
        // One protocol's encoding tells what was sent; JSON reads best.
        let shown = [Format::Json, Format::MessagePack]
            .into_iter()
            .find_map(|format| Some((format, payloads.get(&format.protocol())?)));
        let Some((format, payload)) = shown else {
            return;
        };
        for body in bodies(format, payload) {
            self.tracer.emit(hub, || {
                let mut event = TraceEvent::new("message");
                event.direction = Some("out");
                event.to = Some(describe_target(target));
                self.tracer.describe(&mut event, format, body);
                event
            });
        }
    }

    /// Encodes a non-blocking invocation once for each service-encoded protocol that the hub's
    /// connections use (both, when other processes' nodes may hold connections).
    pub fn encode_invocation(
        &self,
        hub: &HubName,
        method: &str,
        arguments: &[serde_json::Value],
    ) -> Payloads {
        let (json, messagepack) = if self.in_cluster() {
            (true, true)
        } else {
            self.router
                .find_hub(hub)
                .map_or((false, false), |h| h.protocols_in_use())
        };
        let mut payloads = Payloads::new();
        if json {
            payloads.insert(
                Protocol::Json,
                encode_invocation(Format::Json, method, arguments),
            );
        }
        if messagepack {
            payloads.insert(
                Protocol::MessagePack,
                encode_invocation(Format::MessagePack, method, arguments),
            );
        }
        payloads
    }

    /// A page of the group's members on every node, ordered by connection id, after the
    /// continuation point: each node sends its first `max`, and the first `max` of their
    /// union are the page.
    pub async fn group_members(
        &self,
        hub: &HubName,
        group: &GroupName,
        after: Option<&str>,
        max: usize,
    ) -> Vec<GroupMember> {
        let question = Question::GroupMembers {
            group: group.clone(),
            after: after.map(str::to_string),
            max: u32::try_from(max).unwrap_or(u32::MAX),
        };
        let channel = Channel::Group(hub.clone(), group.clone());
        let gathered = self.ask(hub, channel, question, |_| false).await;
        let mut members: Vec<GroupMember> = gathered
            .answers
            .into_iter()
            .flat_map(|answer| match answer {
                Answer::Members(members) => members,
                _ => Vec::new(),
            })
            .map(|(connection, user)| GroupMember { connection, user })
            .collect();
        members.sort_by(|a, b| a.connection.cmp(&b.connection));
        members.dedup_by(|a, b| a.connection == b.connection);
        members.truncate(max);
        members
    }

    /// Expires user-group memberships whose ttl has passed.
    pub(crate) fn sweep(&self, now: Instant) {
        self.router.sweep(now);
    }

    fn publish(&self, channels: Vec<Channel>, message: Message) {
        self.backplane.publish(&channels, Arc::new(message));
    }

    /// Where a connection's owner listens: the node holding a connection subscribes to its
    /// channel, so any node can address it without knowing which node that is.
    fn owner_of(&self, hub: &HubName, connection: &ConnectionId) -> Channel {
        Channel::Connection(hub.clone(), connection.clone())
    }

    fn channels_for(&self, hub: &HubName, target: &Target) -> Vec<Channel> {
        let unique = |channels: Vec<Channel>| -> Vec<Channel> {
            channels
                .into_iter()
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect()
        };
        match target {
            Target::All { .. } => vec![Channel::Hub(hub.clone())],
            Target::Connection(id) => vec![self.owner_of(hub, id)],
            Target::Connections(ids) => {
                unique(ids.iter().map(|id| self.owner_of(hub, id)).collect())
            }
            Target::User(user) => vec![Channel::User(hub.clone(), user.clone())],
            Target::Users(users) => unique(
                users
                    .iter()
                    .map(|u| Channel::User(hub.clone(), u.clone()))
                    .collect(),
            ),
            Target::Group { group, .. } => vec![Channel::Group(hub.clone(), group.clone())],
            Target::Groups(groups) => unique(
                groups
                    .iter()
                    .map(|g| Channel::Group(hub.clone(), g.clone()))
                    .collect(),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use switchyard_backplane::MemoryBackplane;

    use super::*;
    use crate::config::Config;
    use switchyard_core::UserId;

    fn executor() -> Executor {
        Executor::new(
            Config::default().validate().unwrap(),
            Arc::new(MemoryBackplane::new()),
            "n1".into(),
            Arc::new(Metrics::default()),
        )
    }

    /// The router and the backplane refer to each other; dropping the executor must free both
    /// (found by the fuzz targets, which make a node per input).
    #[test]
    fn a_dropped_executor_is_freed() {
        let backplane: Arc<dyn Backplane> = Arc::new(MemoryBackplane::new());
        let executor = Executor::new(
            Config::default().validate().unwrap(),
            backplane.clone(),
            "n1".into(),
            Arc::new(Metrics::default()),
        );
        let router = Arc::downgrade(&executor.router);
        drop(executor);
        assert!(router.upgrade().is_none(), "the router outlived its node");
        drop(backplane);
    }

    #[tokio::test]
    async fn misses_name_what_is_missing() {
        let executor = executor();
        let hub = HubName::new("chat", None).unwrap();
        assert_eq!(
            executor
                .execute(&hub, Command::add_to_group("c1", "g").unwrap())
                .await,
            Err(Missing::Connection(ConnectionId::new("c1").unwrap()))
        );
        assert_eq!(
            executor
                .execute(&hub, Check::user_in_group("u", "g").unwrap())
                .await,
            Err(Missing::UserInGroup(
                UserId::new("u").unwrap(),
                GroupName::new("g").unwrap()
            ))
        );
        // A user-group membership needs no connection.
        assert_eq!(
            executor
                .execute(&hub, Command::user_join_group("u", "g", None).unwrap())
                .await,
            Ok(())
        );
        assert_eq!(
            executor
                .execute(&hub, Check::user_in_group("u", "g").unwrap())
                .await,
            Ok(())
        );
        assert_eq!(executor.asks.in_flight(), 0);
    }
}
