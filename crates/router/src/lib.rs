//! The routing core: which local connections a message or command reaches. No network code:
//! payloads arrive already encoded and leave as shared `Bytes` pushed into outbound queues.
//!
//! # Layout
//! - [`Router`]: the hubs of one node, and [`Router::apply`] for messages from the backplane.
//! - [`Hub`]: sharded indices of connections, users, groups and user-group memberships.
//! - [`Connection`] and [`Outbound`]: one client's identity and its byte-budgeted queue.
//! - [`Traffic`]: hub messages in and out (and Azure's 2 KB billing units), per connection
//!   and per hub.
//! - [`Interest`]: told when the first local member of a channel arrives or the last leaves,
//!   so the node can subscribe and unsubscribe backplane channels.
//!
//! # Lock order
//! `Router::hubs` → `Connection::groups` → any one index shard (or the hub's count) →
//! whatever [`Interest`] takes. No shard lock is held while another shard is locked and no
//! lock is held across `.await`. [`Interest`] is called with the lock of the index whose
//! first/last member changed still held, so the reports of one channel arrive in the order
//! the changes happened; an `Interest` must therefore never call back into the router.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

mod connection;
mod hub;
mod shard;
mod traffic;
mod users;

pub use connection::{Batch, Connection, Outbound};
pub use hub::{GroupJoin, GroupLimits, GroupMember, Hub, Join};
pub use traffic::{billing_units, Traffic, TrafficTotals, BILLING_UNIT_BYTES};

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::RwLock;
use switchyard_core::{
    user_group_key, Channel, GroupName, HubName, Message, UserGroupEntry, UserGroupKey, UserId,
};

/// Receives first-member / last-member changes of channels on this node.
pub trait Interest: Send + Sync {
    /// Called with an index lock held (see the lock order): never call back into the router.
    fn changed(&self, channel: Channel, interested: bool);

    /// A connection joined through [`Hub::admit`], its queue held with the handshake response
    /// in it: release it (`Outbound::release`) once the channels this node subscribed to for
    /// it can be reached from every node. Called with no lock held. The default releases at
    /// once (one process: a subscription is live when it is made).
    fn joined(&self, connection: &Arc<Connection>) {
        connection.outbound().release();
    }
}

/// An [`Interest`] that ignores every change (tests, single-node tools).
pub struct NoInterest;

impl Interest for NoInterest {
    fn changed(&self, _channel: Channel, _interested: bool) {}
}

/// The hubs of one node.
/// A user-group membership a change touched: hub, user, group (`None`: all of them).
type Touched = (HubName, UserId, Option<GroupName>);

pub struct Router {
    hubs: RwLock<HashMap<HubName, Arc<Hub>>>,
    interest: Arc<dyn Interest>,
    limits: GroupLimits,
    /// While this node copies the user-group table from others: the memberships changes
    /// touched since (`None` for a user's leave of every group), which the copy must not undo.
    copying: parking_lot::Mutex<Option<HashSet<Touched>>>,
}

impl Router {
    pub fn new(interest: Arc<dyn Interest>) -> Self {
        Router::with_limits(interest, GroupLimits::default())
    }

    /// A router whose hubs keep `limits` on group memberships.
    pub fn with_limits(interest: Arc<dyn Interest>, limits: GroupLimits) -> Self {
        Router {
            hubs: RwLock::new(HashMap::new()),
            interest,
            limits,
            copying: parking_lot::Mutex::new(None),
        }
    }

    /// The hub, created on first use.
    pub fn hub(&self, name: &HubName) -> Arc<Hub> {
        if let Some(hub) = self.hubs.read().get(name) {
            return hub.clone();
        }
        self.hubs
            .write()
            .entry(name.clone())
            .or_insert_with(|| Arc::new(Hub::new(name.clone(), self.interest.clone(), self.limits)))
            .clone()
    }

    /// The hub if it exists (lookups must not create hubs for arbitrary names).
    pub fn find_hub(&self, name: &HubName) -> Option<Arc<Hub>> {
        self.hubs.read().get(name).cloned()
    }

    pub fn hubs(&self) -> Vec<Arc<Hub>> {
        self.hubs.read().values().cloned().collect()
    }

    /// Applies a message to this node's connections. Returns how many frames were queued.
    pub fn apply(&self, message: &Message) -> usize {
        match message {
            Message::Send {
                hub,
                target,
                payloads,
            } => self
                .find_hub(hub)
                .map_or(0, |hub| hub.send(target, payloads)),
            Message::AddToGroup {
                hub,
                connection,
                group,
            } => {
                if let Some(hub) = self.find_hub(hub) {
                    hub.add_to_group(connection, group);
                }
                0
            }
            Message::RemoveFromGroup {
                hub,
                connection,
                group,
            } => {
                if let Some(hub) = self.find_hub(hub) {
                    match group {
                        Some(group) => {
                            hub.remove_from_group(connection, group);
                        }
                        None => hub.remove_from_all_groups(connection),
                    }
                }
                0
            }
            Message::UserJoinGroup {
                hub,
                user,
                group,
                ttl,
            } => {
                self.touched(hub, user, Some(group));
                // User-group memberships outlive connections, so the hub is created here.
                // The node that took the command checked the per-user limit; here it is only a
                // backstop, and what it refuses was refused there too.
                let _ = self
                    .hub(hub)
                    .user_join_group(user, group, *ttl, Instant::now());
                0
            }
            Message::UserLeaveGroup { hub, user, group } => {
                self.touched(hub, user, group.as_ref());
                if let Some(hub) = self.find_hub(hub) {
                    hub.user_leave_group(user, group.as_ref());
                }
                0
            }
            Message::Close {
                hub,
                target,
                excluded,
                reason,
            } => self
                .find_hub(hub)
                .map_or(0, |hub| hub.close(target, excluded, reason)),
            // Between nodes: the node reads these itself.
            Message::Control { .. } => 0,
        }
    }

    /// Up to `max` user-group memberships of every hub, ordered by hub, user and group,
    /// after `after`: what a node that starts copies from the others.
    pub fn user_groups(&self, after: Option<&UserGroupKey>, max: usize) -> Vec<UserGroupEntry> {
        let now = Instant::now();
        let after = after.map(user_group_key);
        let mut entries: Vec<UserGroupEntry> = self
            .hubs()
            .iter()
            .flat_map(|hub| hub.user_group_entries(now))
            .filter(|e| after.is_none_or(|a| e.key() > a))
            .collect();
        entries.sort_unstable_by(|a, b| a.key().cmp(&b.key()));
        entries.truncate(max);
        entries
    }

    /// Starts noting which user-group memberships change, for [`Router::restore_user_groups`].
    pub fn begin_copy(&self) {
        *self.copying.lock() = Some(HashSet::new());
    }

    /// Stops noting changes (the copy is over).
    pub fn end_copy(&self) {
        *self.copying.lock() = None;
    }

    fn touched(&self, hub: &HubName, user: &UserId, group: Option<&GroupName>) {
        if let Some(touched) = self.copying.lock().as_mut() {
            touched.insert((hub.clone(), user.clone(), group.cloned()));
        }
    }

    /// Takes on memberships another node listed (see [`Router::user_groups`]), except those
    /// a join or leave heard since [`Router::begin_copy`] touched: that change is newer than
    /// the listing.
    pub fn restore_user_groups(&self, entries: &[UserGroupEntry]) {
        let now = Instant::now();
        let copying = self.copying.lock();
        let newer = |e: &UserGroupEntry| {
            copying.as_ref().is_some_and(|touched| {
                touched.contains(&(e.hub.clone(), e.user.clone(), Some(e.group.clone())))
                    || touched.contains(&(e.hub.clone(), e.user.clone(), None))
            })
        };
        let take: Vec<&UserGroupEntry> = entries.iter().filter(|e| !newer(e)).collect();
        drop(copying);
        for entry in take {
            let hub = self.hub(&entry.hub);
            if !hub.records_user_group(&entry.user, &entry.group) {
                let _ = hub.user_join_group(&entry.user, &entry.group, entry.ttl, now);
            }
        }
    }

    /// Expires user-group memberships whose ttl has passed, and frees the hubs nothing lives
    /// in and nobody holds: hub names come from requests (a new one per visitor, say), and a
    /// hub's indices take ~15 KB, so kept forever they would grow memory without bound. A
    /// client or app server holds its hub, so a hub in use is never freed; one freed here is
    /// made again on its next use (its traffic totals then start from zero).
    pub fn sweep(&self, now: Instant) {
        let mut unused = Vec::new();
        for hub in self.hubs() {
            hub.expire_user_groups(now);
            // Two holders: the table and `hub` here.
            if Arc::strong_count(&hub) == 2 && hub.is_unused() {
                unused.push(hub.name().clone());
            }
        }
        if unused.is_empty() {
            return;
        }
        // Checked again under the table's lock: a lookup may have taken the hub meanwhile.
        let mut hubs = self.hubs.write();
        for name in unused {
            if let Some(hub) = hubs.get(&name) {
                if Arc::strong_count(hub) == 1 && hub.is_unused() {
                    hubs.remove(&name);
                }
            }
        }
    }

    /// How many hubs this node keeps (those in use, and those not yet swept).
    pub fn hub_count(&self) -> usize {
        self.hubs.read().len()
    }

    pub fn connection_count(&self) -> usize {
        self.hubs
            .read()
            .values()
            .map(|h| h.connection_count())
            .sum()
    }
}
