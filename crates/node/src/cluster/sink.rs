//! What the backplane delivers to this node, and what makes it subscribe: data messages go to
//! the router, control messages are decoded here and answered, and the router's first and
//! last local members of a channel subscribe and unsubscribe it.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use switchyard_backplane::{Backplane, NodeId, Sink};
use switchyard_core::{Channel, HubName, Message};
use switchyard_router::{Connection, Interest, Router};

use super::answer;
use super::asks::Asks;
use super::control::Control;
use super::members::Members;
use super::question::{Answer, Invocation, Question};
use crate::live_trace::Tracer;
use crate::metrics::Metrics;

/// Takes a client invocation another node passed on (see [`Question::Invoke`]); implemented
/// by Default mode, which sits above the cluster.
pub(crate) trait RemoteInvocations: Send + Sync {
    /// Whether this node took the invocation (it holds the client and a connection from the
    /// caller to answer on).
    fn take(&self, hub: &HubName, invocation: &Invocation) -> bool;
}

/// What a node shows of itself to a dashboard open on another node ([`Question::View`]);
/// implemented by the dashboard.
pub(crate) trait Views: Send + Sync {
    /// The answer (JSON) to a request (JSON).
    fn view(&self, request: &str) -> String;
}

/// The features above the cluster that answer questions, each set once after they are built
/// (they are built on the cluster).
#[derive(Default)]
pub(super) struct Answerers {
    pub(super) invocations: OnceLock<Arc<dyn RemoteInvocations>>,
    pub(super) views: OnceLock<Arc<dyn Views>>,
}

/// Subscribes this node to a channel while it has a local member.
pub(super) struct BackplaneInterest {
    pub(super) backplane: Arc<dyn Backplane>,
    pub(super) node_id: NodeId,
    /// Longest a joining client is held for its subscriptions (`cluster.ask_timeout`): with
    /// the backplane unreachable it is served locally rather than not at all.
    pub(super) settle_timeout: Duration,
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

/// The node's inbox on the backplane. Holds no [`super::Cluster`]: the backplane holds the
/// sink, and the cluster frees the node by detaching it.
pub(super) struct ClusterSink {
    pub(super) router: Arc<Router>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) node_id: NodeId,
    pub(super) backplane: Arc<dyn Backplane>,
    pub(super) asks: Arc<Asks>,
    pub(super) internal_url: Arc<OnceLock<String>>,
    pub(super) members: Arc<Members>,
    pub(super) answerers: Arc<Answerers>,
    pub(super) tracer: Arc<Tracer>,
}

impl Sink for ClusterSink {
    fn receive(&self, message: &Arc<Message>) {
        let Message::Control { hub, body } = &**message else {
            let delivered = self.router.apply(message);
            self.metrics.frames_delivered.inc_by(delivered as u64);
            return;
        };
        match Control::decode(body) {
            Ok(Control::Ask { from, id, question }) => self.answer(hub, &from, id, &question),
            Ok(Control::Answer { id, answer }) => self.asks.answered(id, answer),
            Ok(Control::Presence(presence)) => self.members.heard(&presence, Instant::now()),
            Ok(Control::Trace { events, .. }) => {
                self.tracer.forwarded(hub, &events);
            }
            Err(error) => {
                // Only another node writes these: a node of another version, or a bug.
                self.metrics.cluster_control_errors.inc();
                tracing::warn!(%error, "dropping a control message that does not decode");
            }
        }
    }
}

impl ClusterSink {
    fn local_answer(&self, hub: &HubName, question: &Question) -> Answer {
        if let Some(answer) = answer::from_router(&self.router, hub, question) {
            return answer;
        }
        match question {
            Question::Address => match self.internal_url.get() {
                Some(url) => Answer::At(url.clone()),
                None => Answer::No,
            },
            Question::View(request) => match self.answerers.views.get() {
                Some(views) => Answer::View(views.view(request)),
                None => Answer::No,
            },
            Question::Invoke(invocation) => {
                let taken = self
                    .answerers
                    .invocations
                    .get()
                    .is_some_and(|invocations| invocations.take(hub, invocation));
                if taken {
                    Answer::Yes
                } else {
                    Answer::No
                }
            }
            _ => Answer::No,
        }
    }

    fn answer(&self, hub: &HubName, from: &NodeId, id: u64, question: &Question) {
        let answer = self.local_answer(hub, question);
        // A change that made this node subscribe is answered once the subscription is live,
        // so the asker's next send reaches the connection.
        let wait = answer == Answer::Yes
            && matches!(
                question,
                Question::AddToGroup { .. } | Question::UserJoinGroup { .. }
            );
        let reply = Arc::new(Control::Answer { id, answer }.into_message(hub.clone()));
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
