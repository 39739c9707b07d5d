//! Which nodes of the cluster are alive, and which app servers each holds connections from,
//! as their presence heartbeats tell ([`Presence`] to every node, one a second). No I/O:
//! the node's heartbeat publishes and calls [`Members::expire`]; the backplane reader calls
//! [`Members::heard`].
//!
//! A node is gone when it said it is leaving, when a new instance under its id speaks, or when
//! nothing was heard from it for `cluster.node_timeout` while this node's own backplane was
//! healthy. Silence heard through a broken backplane proves nothing: while this node cannot
//! read Redis nobody is declared gone, and after it can again every node gets a fresh timeout.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use switchyard_core::HubName;

use super::control::{Presence, ServerList};

/// Another node as last heard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Member {
    pub(crate) node: String,
    pub(crate) instance: String,
    pub(crate) servers: Vec<(HubName, Vec<String>)>,
    /// The generation `servers` is of (see [`Presence::generation`]).
    generation: u64,
    /// `servers` is the list of the generation the node last announced. Not so for a new
    /// instance until its list arrives, nor once a heartbeat names a newer generation (a
    /// change whose list was lost); such a member is left out of [`Members::others`], so no
    /// decision is made on a list that is missing or stale.
    current: bool,
    last: Instant,
}

impl Member {
    /// Whether the node holds connections from app server `server` for `hub`.
    pub(crate) fn has_server(&self, hub: &HubName, server: &str) -> bool {
        self.servers
            .iter()
            .any(|(h, ids)| h == hub && ids.iter().any(|id| id == server))
    }
}

impl State {
    fn end(&mut self, member: Member, now: Instant) {
        self.ended
            .retain(|_, at| now.saturating_duration_since(*at) < ENDED_KEPT);
        if self.ended.len() >= MAX_ENDED {
            if let Some(oldest) = self
                .ended
                .iter()
                .min_by_key(|(_, at)| **at)
                .map(|(i, _)| i.clone())
            {
                self.ended.remove(&oldest);
            }
        }
        self.ended.insert(member.instance.clone(), now);
        self.gone.push(member);
    }
}

#[derive(Default)]
struct State {
    nodes: HashMap<String, Member>,
    /// Instances found gone and not yet taken by [`Members::take_gone`].
    gone: Vec<Member>,
    /// Instances found gone, and when: a late heartbeat of one (still in flight when it
    /// left, or from a node that kept running while silent) must not bring it back.
    ended: HashMap<String, Instant>,
    /// Since when this node's backplane has been answering (`None`: it is not).
    healthy_since: Option<Instant>,
}

/// How long an ended instance is remembered.
const ENDED_KEPT: Duration = Duration::from_secs(600);
/// At most this many ended instances are remembered (the oldest go first).
const MAX_ENDED: usize = 4096;

pub(crate) struct Members {
    node: String,
    instance: String,
    /// This node is shutting down: its heartbeats say so from then on.
    leaving: std::sync::atomic::AtomicBool,
    state: Mutex<State>,
    /// Rotates [`Members::node_serving`]'s choice.
    turn: AtomicUsize,
}

/// How often a node's heartbeat carries its whole list of app servers even when it has not
/// changed: a node that missed a change (a message lost while Redis was away) is wrong for
/// at most this long.
pub(crate) const FULL_EVERY: Duration = Duration::from_secs(10);

/// What this node's heartbeats say of its app servers: the list when it changed, when a
/// node is heard for the first time, and every [`FULL_EVERY`]; only its generation in the
/// heartbeats between. With 100 app servers × 100 hubs the list is 481 KB a second per node
/// sent to every node; this makes it one in ten.
#[derive(Default)]
pub(crate) struct Announcer {
    generation: u64,
    last: ServerList,
    full_at: Option<Instant>,
    /// The other instances alive when the list was last sent.
    told: std::collections::HashSet<String>,
    /// This node's backplane did not answer since the list was last sent: what it published
    /// then may be lost, so the first heartbeat once it answers carries the list.
    owed: bool,
}

impl Announcer {
    /// The generation and, when it is to be sent, the list of the next heartbeat.
    pub(crate) fn next(
        &mut self,
        servers: ServerList,
        others: &[String],
        healthy: bool,
        now: Instant,
    ) -> (u64, Option<ServerList>) {
        self.owed |= !healthy;
        let changed = servers != self.last;
        if changed {
            self.generation += 1;
            self.last = servers;
        }
        let newcomer = others.iter().any(|instance| !self.told.contains(instance));
        let due = self
            .full_at
            .is_none_or(|at| now.saturating_duration_since(at) >= FULL_EVERY);
        if !(changed || newcomer || due || (self.owed && healthy)) {
            return (self.generation, None);
        }
        self.owed = !healthy;
        self.full_at = Some(now);
        self.told = others.iter().cloned().collect();
        (self.generation, Some(self.last.clone()))
    }
}

/// This run's instance id: the node id, `~`, and 8 random URL-safe characters (`~` is not
/// allowed in node ids, so the node is always what precedes the last `~`).
pub(crate) fn new_instance(node: &str) -> String {
    let random = switchyard_auth::generate_connection_token();
    format!("{node}~{}", &random[..8.min(random.len())])
}

/// The node an instance id belongs to.
pub(crate) fn node_of_instance(instance: &str) -> Option<&str> {
    instance
        .rsplit_once('~')
        .map(|(node, _)| node)
        .filter(|n| !n.is_empty())
}

impl Members {
    pub(crate) fn new(node: String, instance: String) -> Members {
        Members {
            node,
            instance,
            state: Mutex::new(State {
                healthy_since: Some(Instant::now()),
                ..State::default()
            }),
            turn: AtomicUsize::new(0),
            leaving: std::sync::atomic::AtomicBool::new(false),
        }
    }

    pub(crate) fn node(&self) -> &str {
        &self.node
    }

    /// This node's instance id, as app servers see it (`Asrs-Instance-Id`, `target`).
    pub(crate) fn instance(&self) -> &str {
        &self.instance
    }

    /// This node shuts down: every heartbeat from now on says it is leaving.
    pub(crate) fn set_leaving(&self) {
        self.leaving.store(true, Ordering::Release);
    }

    pub(crate) fn is_leaving(&self) -> bool {
        self.leaving.load(Ordering::Acquire)
    }

    /// Takes in another node's heartbeat.
    pub(crate) fn heard(&self, presence: &Presence, now: Instant) {
        if presence.node == self.node {
            return;
        }
        let mut state = self.state.lock();
        if state.ended.contains_key(&presence.instance) {
            return;
        }
        let previous = if presence.leaving {
            state.nodes.remove(&presence.node)
        } else {
            // A heartbeat without the list keeps the one last heard from this instance, even
            // of an older generation (a change missed here is sent again within
            // `FULL_EVERY`), but it is current only while the generations agree; a new
            // instance has none until it sends one.
            let (servers, generation, current) = match &presence.servers {
                Some(list) => (list.clone(), presence.generation, true),
                None => state
                    .nodes
                    .get_mut(&presence.node)
                    .filter(|known| known.instance == presence.instance)
                    .map(|known| {
                        let current = known.current && known.generation == presence.generation;
                        (
                            std::mem::take(&mut known.servers),
                            known.generation,
                            current,
                        )
                    })
                    .unwrap_or_default(),
            };
            let member = Member {
                node: presence.node.clone(),
                instance: presence.instance.clone(),
                servers,
                generation,
                current,
                last: now,
            };
            state
                .nodes
                .insert(presence.node.clone(), member)
                .filter(|old| old.instance != presence.instance)
        };
        if let Some(previous) = previous {
            state.end(previous, now);
        }
    }

    /// Whether this node's backplane answered lately (see the module notes); returns the
    /// change, if any: `Some(false)` it stopped answering, `Some(true)` it answers again.
    pub(crate) fn backplane_answered(&self, answered: bool, now: Instant) -> Option<bool> {
        let mut state = self.state.lock();
        match (answered, state.healthy_since) {
            (true, None) => {
                state.healthy_since = Some(now);
                Some(true)
            }
            (false, Some(_)) => {
                state.healthy_since = None;
                Some(false)
            }
            _ => None,
        }
    }

    pub(crate) fn backplane_healthy(&self) -> bool {
        self.state.lock().healthy_since.is_some()
    }

    /// Finds the nodes not heard from for `timeout` (counted from when this node's backplane
    /// last became healthy, if later).
    pub(crate) fn expire(&self, now: Instant, timeout: Duration) {
        let mut state = self.state.lock();
        let Some(since) = state.healthy_since else {
            return;
        };
        let silent: Vec<String> = state
            .nodes
            .values()
            .filter(|m| now.saturating_duration_since(m.last.max(since)) > timeout)
            .map(|m| m.node.clone())
            .collect();
        for node in silent {
            if let Some(member) = state.nodes.remove(&node) {
                state.end(member, now);
            }
        }
    }

    /// The instances found gone since the last call.
    pub(crate) fn take_gone(&self) -> Vec<Member> {
        std::mem::take(&mut self.state.lock().gone)
    }

    /// The other nodes alive now whose current list of app servers is known, ordered by node
    /// id (a node whose list is missing or stale is not taken to lack every app server).
    pub(crate) fn others(&self) -> Vec<Member> {
        let mut members: Vec<Member> = self
            .state
            .lock()
            .nodes
            .values()
            .filter(|m| m.current)
            .cloned()
            .collect();
        members.sort_by(|a, b| a.node.cmp(&b.node));
        members
    }

    /// The instances of the other nodes alive now.
    pub(crate) fn other_instances(&self) -> Vec<String> {
        let state = self.state.lock();
        state.nodes.values().map(|m| m.instance.clone()).collect()
    }

    /// The live instance of `node`, if it is a live node of the cluster (this one included).
    pub(crate) fn instance_of(&self, node: &str) -> Option<String> {
        if node == self.node {
            return Some(self.instance.clone());
        }
        self.state
            .lock()
            .nodes
            .get(node)
            .map(|m| m.instance.clone())
    }

    /// Whether another live node holds app-server connections for `hub` (in `auto` mode that
    /// makes the hub a Default-mode hub here too).
    pub(crate) fn serve_hub(&self, hub: &HubName) -> bool {
        self.state
            .lock()
            .nodes
            .values()
            .any(|m| m.servers.iter().any(|(h, _)| h == hub))
    }

    /// Another live node with a direct connection from an app server of `hub` (from
    /// `server`, when given), spreading the choices over such nodes.
    pub(crate) fn node_serving(&self, hub: &HubName, server: Option<&str>) -> Option<String> {
        let state = self.state.lock();
        let mut candidates: Vec<&Member> = state
            .nodes
            .values()
            .filter(|m| match server {
                Some(server) => m.has_server(hub, server),
                None => m.servers.iter().any(|(h, ids)| h == hub && !ids.is_empty()),
            })
            .collect();
        candidates.sort_by(|a, b| a.node.cmp(&b.node));
        let turn = self.turn.fetch_add(1, Ordering::Relaxed);
        (!candidates.is_empty()).then(|| candidates[turn % candidates.len()].node.clone())
    }

    /// Live nodes, this one included.
    pub(crate) fn count(&self) -> usize {
        self.state.lock().nodes.len() + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn presence(node: &str, instance: &str, leaving: bool) -> Presence {
        Presence {
            node: node.into(),
            instance: instance.into(),
            leaving,
            generation: 1,
            servers: Some(vec![(
                HubName::new("chat", None).unwrap(),
                vec!["s1".into()],
            )]),
        }
    }

    fn gone(members: &Members) -> Vec<String> {
        members
            .take_gone()
            .into_iter()
            .map(|m| m.instance)
            .collect()
    }

    #[test]
    fn a_silent_node_is_gone_after_the_timeout() {
        let t0 = Instant::now();
        let members = Members::new("a".into(), "a~1".into());
        members.heard(&presence("b", "b~1", false), t0);
        members.heard(&presence("a", "a~1", false), t0);
        assert_eq!(members.count(), 2);
        assert!(members.others()[0].has_server(&HubName::new("chat", None).unwrap(), "s1"));
        members.expire(t0 + Duration::from_secs(4), Duration::from_secs(5));
        assert!(gone(&members).is_empty());
        members.expire(t0 + Duration::from_secs(6), Duration::from_secs(5));
        assert_eq!(gone(&members), ["b~1"]);
        assert_eq!(members.count(), 1);
    }

    #[test]
    fn nobody_is_gone_while_this_nodes_backplane_is_down_nor_right_after() {
        let t0 = Instant::now();
        let members = Members::new("a".into(), "a~1".into());
        members.heard(&presence("b", "b~1", false), t0);
        members.backplane_answered(false, t0 + Duration::from_secs(1));
        members.expire(t0 + Duration::from_secs(20), Duration::from_secs(5));
        assert!(gone(&members).is_empty());
        // Healthy again: b gets a fresh timeout from then.
        members.backplane_answered(true, t0 + Duration::from_secs(20));
        members.expire(t0 + Duration::from_secs(24), Duration::from_secs(5));
        assert!(gone(&members).is_empty());
        members.expire(t0 + Duration::from_secs(26), Duration::from_secs(5));
        assert_eq!(gone(&members), ["b~1"]);
    }

    #[test]
    fn leaving_and_restarting_end_an_instance_at_once() {
        let t0 = Instant::now();
        let members = Members::new("a".into(), "a~1".into());
        members.heard(&presence("b", "b~1", false), t0);
        members.heard(&presence("b", "b~2", false), t0);
        assert_eq!(gone(&members), ["b~1"]);
        assert_eq!(members.instance_of("b").as_deref(), Some("b~2"));
        members.heard(&presence("b", "b~2", true), t0);
        assert_eq!(gone(&members), ["b~2"]);
        assert_eq!(members.instance_of("b"), None);
        // A heartbeat of the ended instance that was still on its way changes nothing.
        members.heard(&presence("b", "b~2", false), t0);
        assert_eq!(members.instance_of("b"), None);
        assert!(gone(&members).is_empty());
        // A new run of the node is heard.
        members.heard(&presence("b", "b~3", false), t0);
        assert_eq!(members.instance_of("b").as_deref(), Some("b~3"));
    }

    #[test]
    fn instances_name_their_node() {
        let instance = new_instance("node-1.eu");
        assert_eq!(node_of_instance(&instance), Some("node-1.eu"));
        assert_eq!(node_of_instance("plain"), None);
        assert_eq!(node_of_instance("~x"), None);
    }

    fn list(ids: &[&str]) -> Vec<(HubName, Vec<String>)> {
        vec![(
            HubName::new("chat", None).unwrap(),
            ids.iter().map(|id| id.to_string()).collect(),
        )]
    }

    #[test]
    fn the_list_goes_out_when_it_changes_to_newcomers_and_every_few_seconds() {
        let t0 = Instant::now();
        let second = |n: u64| t0 + Duration::from_secs(n);
        let mut announcer = Announcer::default();
        let members = Members::new("b".into(), "b~1".into());
        // The first heartbeat carries it, the next ones only the generation.
        assert_eq!(
            announcer.next(list(&["s1"]), &[], true, t0),
            (1, Some(list(&["s1"])))
        );
        assert_eq!(
            announcer.next(list(&["s1"]), &[], true, second(1)),
            (1, None)
        );
        // A change goes out at once.
        assert_eq!(
            announcer.next(list(&["s1", "s2"]), &[], true, second(2)),
            (2, Some(list(&["s1", "s2"])))
        );
        // So does the list when a node is heard for the first time, once.
        members.heard(&presence("c", "c~1", false), second(3));
        let others = members.other_instances();
        assert!(announcer
            .next(list(&["s1", "s2"]), &others, true, second(3))
            .1
            .is_some());
        assert_eq!(
            announcer.next(list(&["s1", "s2"]), &others, true, second(4)),
            (2, None)
        );
        // And every FULL_EVERY, unchanged.
        let full_at = second(3) + FULL_EVERY;
        assert_eq!(
            announcer.next(
                list(&["s1", "s2"]),
                &others,
                true,
                full_at - Duration::from_secs(1)
            ),
            (2, None)
        );
        assert!(announcer
            .next(list(&["s1", "s2"]), &others, true, full_at)
            .1
            .is_some());
        // After the backplane did not answer, the first heartbeat once it does.
        let later = full_at + Duration::from_secs(1);
        assert!(announcer
            .next(list(&["s1", "s2"]), &others, false, later)
            .1
            .is_none());
        let again = later + Duration::from_secs(1);
        assert!(announcer
            .next(list(&["s1", "s2"]), &others, true, again)
            .1
            .is_some());
        assert!(announcer
            .next(list(&["s1", "s2"]), &others, true, again)
            .1
            .is_none());
    }

    #[test]
    fn a_heartbeat_without_the_list_keeps_the_one_heard_before() {
        let t0 = Instant::now();
        let hub = HubName::new("chat", None).unwrap();
        let members = Members::new("a".into(), "a~1".into());
        let short = |instance: &str, generation| Presence {
            node: "b".into(),
            instance: instance.into(),
            leaving: false,
            generation,
            servers: None,
        };
        members.heard(&presence("b", "b~1", false), t0);
        members.heard(&short("b~1", 1), t0);
        assert!(members.others()[0].has_server(&hub, "s1"));
        // A missed change: the old list still steers clients (serve_hub) until the next full
        // heartbeat, but no decision is made on it as if it were current.
        members.heard(&short("b~1", 2), t0);
        assert!(members.others().is_empty());
        assert!(members.serve_hub(&hub));
        assert_eq!(members.count(), 2);
        // A new instance has no list until it sends one: it is alive, but not taken to lack
        // every app server (which would send it OnDemand pings it may not need).
        members.heard(&short("b~2", 1), t0);
        assert!(members.others().is_empty());
        assert!(!members.serve_hub(&hub));
        assert_eq!(members.instance_of("b").as_deref(), Some("b~2"));
        let mut full = presence("b", "b~2", false);
        full.generation = 1;
        members.heard(&full, t0);
        members.heard(&short("b~2", 1), t0);
        assert!(members.others()[0].has_server(&hub, "s1"));
    }
}
