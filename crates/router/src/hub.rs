//! One hub's indices: connections, users, groups and user-group memberships, each sharded.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::{Duration, Instant};

use switchyard_core::{
    Channel, CloseReason, ConnectionId, GroupName, HubName, Payloads, Protocol, Target,
    UserGroupEntry, UserId,
};

use crate::shard::Sharded;
use crate::users::{ConnectionMap, UserConnections};
use crate::{Connection, Interest, Traffic, TrafficTotals};

/// A user-group membership without ttl lasts this long (Azure: "up to one year").
const NO_TTL_LIFETIME: Duration = Duration::from_secs(365 * 24 * 3600);
/// Azure keeps only the latest 100 ttl-less group memberships per user.
const MAX_TTL_LESS_GROUPS_PER_USER: usize = 100;

#[derive(Default)]
struct UserGroups {
    /// group -> (expiry, whether the caller gave a ttl, insertion counter)
    groups: HashMap<GroupName, (Instant, bool, u64)>,
    next_order: u64,
}

/// A member of a group, as listed by the group-members API.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupMember {
    pub connection: ConnectionId,
    pub user: Option<UserId>,
}

/// What [`Hub::join_group`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum GroupJoin {
    /// The connection is in the group (it may have been already).
    Joined,
    /// The connection is not on this node, or it is leaving.
    NotHere,
    /// The connection is in its maximum of groups, given.
    Full(usize),
}

/// Bounds on group memberships; 0 = unlimited.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupLimits {
    /// Groups one connection may be in.
    pub per_connection: usize,
    /// User-group memberships one user may have in a hub (with or without ttl).
    pub per_user: usize,
}

/// What [`Hub::admit`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Join {
    Joined,
    /// The connection is closing: the response was dropped and it did not join.
    Closing,
    /// Another connection of the hub has this id: it did not join.
    IdTaken,
}

pub struct Hub {
    name: HubName,
    connections: Sharded<ConnectionMap>,
    users: Sharded<HashMap<UserId, UserConnections>>,
    groups: Sharded<HashMap<GroupName, ConnectionMap>>,
    user_groups: Sharded<HashMap<UserId, UserGroups>>,
    /// Connection count; a mutex (not an atomic) so that the first/last reports of the hub
    /// channel are made in the order the count changed.
    connection_count: Mutex<usize>,
    json_count: AtomicUsize,
    messagepack_count: AtomicUsize,
    interest: Arc<dyn Interest>,
    limits: GroupLimits,
    /// The hub's totals on this node. Shared by every connection of the hub, so a fan-out
    /// adds to it once, not per recipient.
    traffic: Traffic,
}

impl Hub {
    pub(crate) fn new(name: HubName, interest: Arc<dyn Interest>, limits: GroupLimits) -> Self {
        Hub {
            limits,
            name,
            connections: Sharded::new(),
            users: Sharded::new(),
            groups: Sharded::new(),
            user_groups: Sharded::new(),
            connection_count: Mutex::new(0),
            json_count: AtomicUsize::new(0),
            messagepack_count: AtomicUsize::new(0),
            interest,
            traffic: Traffic::default(),
        }
    }

    pub fn name(&self) -> &HubName {
        &self.name
    }

    pub fn connection_count(&self) -> usize {
        *self.connection_count.lock()
    }

    /// Whether nothing lives in the hub on this node: no connection and no user-group
    /// membership (groups and users index connections, so they are empty too).
    pub(crate) fn is_unused(&self) -> bool {
        self.connection_count() == 0
            && self.user_groups.iter().all(|shard| shard.read().is_empty())
            && self.groups.iter().all(|shard| shard.read().is_empty())
    }

    /// Groups with at least one connection of this node.
    pub fn group_count(&self) -> usize {
        self.groups.iter().map(|shard| shard.read().len()).sum()
    }

    /// Users with at least one connection on this node.
    pub fn user_count(&self) -> usize {
        self.users.iter().map(|shard| shard.read().len()).sum()
    }

    /// The groups with at least one connection on this node, if there are at most `max`.
    pub fn group_names(&self, max: usize) -> Option<Vec<GroupName>> {
        names(&self.groups, max)
    }

    /// The users with at least one connection on this node, if there are at most `max`.
    pub fn user_ids(&self, max: usize) -> Option<Vec<UserId>> {
        names(&self.users, max)
    }

    /// Hub messages into and out of this hub's connections on this node.
    pub fn traffic(&self) -> &Traffic {
        &self.traffic
    }

    /// Counts hub messages received from `connection` (one read's worth, added at once).
    pub fn received(&self, connection: &Connection, totals: &TrafficTotals) {
        connection.traffic().record_in(totals);
        self.traffic.record_in(totals);
    }

    /// Queues one hub message (or several framed together, counted in `totals`) to one
    /// connection outside a fan-out, and counts it. Returns false if the connection is closing.
    pub fn deliver(&self, connection: &Connection, frame: Bytes, totals: &TrafficTotals) -> bool {
        if !connection.outbound().push(frame) {
            return false;
        }
        connection.traffic().record_out(totals);
        self.traffic.record_out(totals);
        true
    }

    /// Which of the service-encoded protocols have connections, so a sender encodes only those.
    pub fn protocols_in_use(&self) -> (bool, bool) {
        (
            self.json_count.load(Ordering::Relaxed) > 0,
            self.messagepack_count.load(Ordering::Relaxed) > 0,
        )
    }

    fn protocol_counter(&self, protocol: Option<&Protocol>) -> Option<&AtomicUsize> {
        match protocol? {
            Protocol::Json => Some(&self.json_count),
            Protocol::MessagePack => Some(&self.messagepack_count),
            Protocol::Other(_) => None,
        }
    }

    /// Queues the handshake response of a connection and registers it (see
    /// [`Hub::add_connection`]); the response, and whatever follows it, goes to the writer once
    /// the [`Interest`] says that messages sent to the connection from anywhere reach it, so a
    /// client that has read its handshake response misses nothing sent to it afterwards.
    pub fn admit(&self, connection: &Arc<Connection>, handshake_response: Bytes) -> Join {
        let outbound = connection.outbound();
        outbound.hold();
        if !outbound.push(handshake_response) {
            outbound.release();
            return Join::Closing;
        }
        if !self.add_connection(connection.clone()) {
            outbound.release();
            return Join::IdTaken;
        }
        self.interest.joined(connection);
        Join::Joined
    }

    /// Registers a connection whose handshake chose its protocol; it joins the groups its
    /// user is a member of. Returns false if the id is already taken.
    pub fn add_connection(&self, connection: Arc<Connection>) -> bool {
        let id = connection.id().clone();
        {
            // Registration happens under the connection's group lock, so a concurrent
            // removal of the same connection sees it whole or not at all.
            let own = connection.groups.lock();
            if own.is_none() {
                return false; // already removed
            }
            {
                let mut shard = self.connections.shard(&id).write();
                if shard.contains_key(&id) {
                    return false;
                }
                shard.insert(id.clone(), connection.clone());
                self.interest
                    .changed(Channel::Connection(self.name.clone(), id.clone()), true);
            }
            {
                let mut count = self.connection_count.lock();
                *count += 1;
                if *count == 1 {
                    self.interest.changed(Channel::Hub(self.name.clone()), true);
                }
            }
            if let Some(counter) = self.protocol_counter(connection.protocol()) {
                counter.fetch_add(1, Ordering::Relaxed);
            }
            if let Some(user) = connection.user() {
                let mut shard = self.users.shard(user).write();
                match shard.entry(user.clone()) {
                    Entry::Vacant(entry) => {
                        entry.insert(UserConnections::One(connection.clone()));
                        self.interest
                            .changed(Channel::User(self.name.clone(), user.clone()), true);
                    }
                    Entry::Occupied(mut entry) => entry.get_mut().insert(connection.clone()),
                }
            }
        }
        if let Some(user) = connection.user() {
            for group in self.user_group_list(user, Instant::now()) {
                self.join(&connection, &group);
            }
        }
        true
    }

    /// Removes a connection from every index. Returns it if it was registered.
    pub fn remove_connection(&self, id: &ConnectionId) -> Option<Arc<Connection>> {
        let connection = self.connection(id)?;
        // Taking the group list (leaving `None`) under its lock refuses later joins and
        // makes a concurrent second removal a no-op.
        let mut own = connection.groups.lock();
        let groups = own.take()?;
        {
            let mut shard = self.connections.shard(id).write();
            shard.remove(id);
            self.interest
                .changed(Channel::Connection(self.name.clone(), id.clone()), false);
        }
        for group in &groups {
            self.unindex_group_member(group, id);
        }
        if let Some(user) = connection.user() {
            let mut shard = self.users.shard(user).write();
            if let Some(connections) = shard.get_mut(user) {
                if connections.remove(id) {
                    shard.remove(user);
                    self.interest
                        .changed(Channel::User(self.name.clone(), user.clone()), false);
                }
            }
        }
        if let Some(counter) = self.protocol_counter(connection.protocol()) {
            counter.fetch_sub(1, Ordering::Relaxed);
        }
        {
            let mut count = self.connection_count.lock();
            *count -= 1;
            if *count == 0 {
                self.interest
                    .changed(Channel::Hub(self.name.clone()), false);
            }
        }
        drop(own);
        Some(connection)
    }

    pub fn connection(&self, id: &ConnectionId) -> Option<Arc<Connection>> {
        self.connections.shard(id).read().get(id).cloned()
    }

    pub fn connection_exists(&self, id: &ConnectionId) -> bool {
        self.connections.shard(id).read().contains_key(id)
    }

    pub fn user_exists(&self, user: &UserId) -> bool {
        self.users.shard(user).read().contains_key(user)
    }

    pub fn group_exists(&self, group: &GroupName) -> bool {
        self.groups.shard(group).read().contains_key(group)
    }

    fn user_connections(&self, user: &UserId) -> Vec<Arc<Connection>> {
        self.users
            .shard(user)
            .read()
            .get(user)
            .map(|connections| {
                let mut all = Vec::new();
                connections.for_each(&mut |c| all.push(c.clone()));
                all
            })
            .unwrap_or_default()
    }

    // ---- groups ----

    /// Adds a connection to a group. Returns false if the connection is not on this node
    /// (or, see [`Hub::join_group`], is in its maximum of groups).
    pub fn add_to_group(&self, id: &ConnectionId, group: &GroupName) -> bool {
        self.join_group(id, group) == GroupJoin::Joined
    }

    /// Adds a connection to a group, within `GroupLimits::per_connection`.
    pub fn join_group(&self, id: &ConnectionId, group: &GroupName) -> GroupJoin {
        match self.connection(id) {
            Some(connection) => self.join(&connection, group),
            None => GroupJoin::NotHere,
        }
    }

    /// The limits this hub keeps.
    pub fn group_limits(&self) -> GroupLimits {
        self.limits
    }

    fn join(&self, connection: &Arc<Connection>, group: &GroupName) -> GroupJoin {
        let mut own = connection.groups.lock();
        let Some(own) = own.as_mut() else {
            return GroupJoin::NotHere; // the connection is leaving
        };
        if own.contains(group) {
            return GroupJoin::Joined;
        }
        let max = self.limits.per_connection;
        if max != 0 && own.len() >= max {
            return GroupJoin::Full(max);
        }
        own.push(group.clone());
        let mut shard = self.groups.shard(group).write();
        let members = shard.entry(group.clone()).or_default();
        let added = members
            .insert(connection.id().clone(), connection.clone())
            .is_none();
        if added && members.len() == 1 {
            self.interest
                .changed(Channel::Group(self.name.clone(), group.clone()), true);
        }
        GroupJoin::Joined
    }

    /// Removes a connection from a group. Returns false if the connection is not on this node.
    pub fn remove_from_group(&self, id: &ConnectionId, group: &GroupName) -> bool {
        let Some(connection) = self.connection(id) else {
            return false;
        };
        // The connection's own list stays locked until the index agrees with it.
        let mut own = connection.groups.lock();
        if let Some(own) = own.as_mut() {
            let before = own.len();
            own.retain(|g| g != group);
            if own.len() != before {
                self.unindex_group_member(group, id);
            }
        }
        true
    }

    pub fn remove_from_all_groups(&self, id: &ConnectionId) {
        let Some(connection) = self.connection(id) else {
            return;
        };
        let mut own = connection.groups.lock();
        if let Some(own) = own.as_mut() {
            for group in std::mem::take(own) {
                self.unindex_group_member(&group, id);
            }
        }
    }

    /// Removes one member from a group's index; the caller holds the member's group list.
    fn unindex_group_member(&self, group: &GroupName, id: &ConnectionId) {
        let mut shard = self.groups.shard(group).write();
        if let Some(members) = shard.get_mut(group) {
            if members.remove(id).is_some() && members.is_empty() {
                shard.remove(group);
                self.interest
                    .changed(Channel::Group(self.name.clone(), group.clone()), false);
            }
        }
    }

    /// Members of a group ordered by connection id, starting after `after`, at most `max`.
    pub fn group_members(
        &self,
        group: &GroupName,
        after: Option<&str>,
        max: usize,
    ) -> Vec<GroupMember> {
        let mut members: Vec<GroupMember> = self
            .groups
            .shard(group)
            .read()
            .get(group)
            .map(|m| {
                m.values()
                    .filter(|c| after.is_none_or(|a| c.id().as_str() > a))
                    .map(|c| GroupMember {
                        connection: c.id().clone(),
                        user: c.user().cloned(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        members.sort_by(|a, b| a.connection.cmp(&b.connection));
        members.truncate(max);
        members
    }

    // ---- user groups ----

    fn user_group_list(&self, user: &UserId, now: Instant) -> Vec<GroupName> {
        self.user_groups
            .shard(user)
            .read()
            .get(user)
            .map(|ug| {
                ug.groups
                    .iter()
                    .filter(|(_, (expiry, _, _))| *expiry > now)
                    .map(|(g, _)| g.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Whether one more membership of `user` in `group` is within
    /// `GroupLimits::per_user` (`Err` gives the limit); always true for a group the user is
    /// in already.
    pub fn user_may_join(
        &self,
        user: &UserId,
        group: &GroupName,
        now: Instant,
    ) -> Result<(), usize> {
        let max = self.limits.per_user;
        if max == 0 {
            return Ok(());
        }
        let shard = self.user_groups.shard(user).read();
        let Some(entry) = shard.get(user) else {
            return Ok(());
        };
        let live = entry
            .groups
            .iter()
            .filter(|(g, (expiry, _, _))| *expiry > now && *g != group)
            .count();
        if live >= max {
            Err(max)
        } else {
            Ok(())
        }
    }

    /// Adds a user to a group: its current connections join now, later ones on connect,
    /// until the ttl passes. `ttl = Some(0)` adds only the current connections. Over
    /// `GroupLimits::per_user` nothing changes and the limit is returned.
    pub fn user_join_group(
        &self,
        user: &UserId,
        group: &GroupName,
        ttl: Option<Duration>,
        now: Instant,
    ) -> Result<(), usize> {
        if ttl != Some(Duration::ZERO) {
            self.user_may_join(user, group, now)?;
            let mut shard = self.user_groups.shard(user).write();
            let entry = shard.entry(user.clone()).or_default();
            let order = entry.next_order;
            entry.next_order += 1;
            // A ttl from another node is not trusted to be sane: capped, so the sum cannot
            // overflow.
            let expiry = now + ttl.map_or(NO_TTL_LIFETIME, |ttl| ttl.min(NO_TTL_LIFETIME));
            entry
                .groups
                .insert(group.clone(), (expiry, ttl.is_some(), order));
            let ttl_less = entry.groups.values().filter(|(_, has_ttl, _)| !has_ttl);
            if ttl_less.count() > MAX_TTL_LESS_GROUPS_PER_USER {
                let oldest = entry
                    .groups
                    .iter()
                    .filter(|(_, (_, has_ttl, _))| !has_ttl)
                    .min_by_key(|(_, (_, _, order))| *order)
                    .map(|(g, _)| g.clone());
                if let Some(oldest) = oldest {
                    entry.groups.remove(&oldest);
                    drop(shard);
                    self.leave_user_connections(user, &oldest);
                }
            }
        }
        for connection in self.user_connections(user) {
            // A connection in its maximum of groups stays out of this one.
            self.join(&connection, group);
        }
        Ok(())
    }

    /// Removes a user from one group, or from all groups when `group` is `None`.
    pub fn user_leave_group(&self, user: &UserId, group: Option<&GroupName>) {
        let groups: Vec<GroupName> = {
            let mut shard = self.user_groups.shard(user).write();
            match group {
                Some(group) => {
                    if let Some(entry) = shard.get_mut(user) {
                        entry.groups.remove(group);
                        if entry.groups.is_empty() {
                            shard.remove(user);
                        }
                    }
                    vec![group.clone()]
                }
                None => {
                    let recorded = shard.remove(user).map(|e| e.groups).unwrap_or_default();
                    drop(shard);
                    let mut all: HashSet<GroupName> = recorded.into_keys().collect();
                    for connection in self.user_connections(user) {
                        all.extend(connection.groups());
                    }
                    all.into_iter().collect()
                }
            }
        };
        for group in &groups {
            self.leave_user_connections(user, group);
        }
    }

    fn leave_user_connections(&self, user: &UserId, group: &GroupName) {
        for connection in self.user_connections(user) {
            self.remove_from_group(connection.id(), group);
        }
    }

    /// The live user-group memberships of this hub, with what is left of their ttl (`None`
    /// for memberships made without one).
    pub(crate) fn user_group_entries(&self, now: Instant) -> Vec<UserGroupEntry> {
        let mut entries = Vec::new();
        for shard in self.user_groups.iter() {
            for (user, record) in shard.read().iter() {
                for (group, (expiry, has_ttl, _)) in &record.groups {
                    if *expiry > now {
                        entries.push(UserGroupEntry {
                            hub: self.name.clone(),
                            user: user.clone(),
                            group: group.clone(),
                            ttl: has_ttl.then(|| *expiry - now),
                        });
                    }
                }
            }
        }
        entries
    }

    /// Whether a membership record exists for the user and group (expired or not).
    pub(crate) fn records_user_group(&self, user: &UserId, group: &GroupName) -> bool {
        self.user_groups
            .shard(user)
            .read()
            .get(user)
            .is_some_and(|record| record.groups.contains_key(group))
    }

    /// Whether the user is in the group: by a live membership record or by a connection in it.
    pub fn user_in_group(&self, user: &UserId, group: &GroupName, now: Instant) -> bool {
        let recorded = self
            .user_groups
            .shard(user)
            .read()
            .get(user)
            .and_then(|ug| ug.groups.get(group))
            .is_some_and(|(expiry, _, _)| *expiry > now);
        recorded
            || self
                .user_connections(user)
                .iter()
                .any(|c| c.groups().contains(group))
    }

    pub(crate) fn expire_user_groups(&self, now: Instant) {
        let mut expired: Vec<(UserId, GroupName)> = Vec::new();
        for shard in self.user_groups.iter() {
            let mut shard = shard.write();
            shard.retain(|user, entry| {
                entry.groups.retain(|group, (expiry, _, _)| {
                    let live = *expiry > now;
                    if !live {
                        expired.push((user.clone(), group.clone()));
                    }
                    live
                });
                !entry.groups.is_empty()
            });
        }
        for (user, group) in expired {
            self.leave_user_connections(&user, &group);
        }
    }

    // ---- delivery ----

    /// Queues the payload matching each target connection's protocol. Returns frames queued.
    pub fn send(&self, target: &Target, payloads: &Payloads) -> usize {
        let mut totals = TrafficTotals::default();
        let mut deliver = |connection: &Arc<Connection>| {
            let frame = connection.protocol().and_then(|p| payloads.get(p));
            if let Some(frame) = frame {
                let len = frame.len();
                if connection.outbound().push(frame.clone()) {
                    connection.traffic().message_out(len);
                    totals.add_out(len);
                }
            }
        };
        self.for_each_target(target, &mut deliver);
        self.traffic.record_out(&totals);
        totals.messages_out as usize
    }

    /// Closes every connection the target names except `excluded`. Returns how many were
    /// asked to close.
    pub fn close(&self, target: &Target, excluded: &[ConnectionId], reason: &CloseReason) -> usize {
        let excluded = Exclusions::new(excluded);
        let mut closed = 0;
        self.for_each_target(target, &mut |connection| {
            if !excluded.contains(connection.id()) {
                connection.close(reason.clone());
                closed += 1;
            }
        });
        closed
    }

    fn for_each_target(&self, target: &Target, visit: &mut dyn FnMut(&Arc<Connection>)) {
        match target {
            Target::All { excluded } => {
                let excluded = Exclusions::new(excluded);
                for shard in self.connections.iter() {
                    for connection in shard.read().values() {
                        if !excluded.contains(connection.id()) {
                            visit(connection);
                        }
                    }
                }
            }
            Target::Connection(id) => {
                if let Some(connection) = self.connections.shard(id).read().get(id) {
                    visit(connection);
                }
            }
            Target::Connections(ids) => {
                let mut seen = HashSet::new();
                for id in ids {
                    if seen.insert(id) {
                        if let Some(connection) = self.connections.shard(id).read().get(id) {
                            visit(connection);
                        }
                    }
                }
            }
            Target::User(user) => self.visit_user(user, visit),
            Target::Users(users) => {
                let unique: HashSet<&UserId> = users.iter().collect();
                for user in unique {
                    self.visit_user(user, visit);
                }
            }
            Target::Group {
                group,
                excluded,
                excluded_users,
            } => {
                let excluded = Exclusions::new(excluded);
                if let Some(members) = self.groups.shard(group).read().get(group) {
                    for connection in members.values() {
                        let user_excluded = connection
                            .user()
                            .is_some_and(|u| excluded_users.contains(u));
                        if !excluded.contains(connection.id()) && !user_excluded {
                            visit(connection);
                        }
                    }
                }
            }
            Target::Groups(groups) => {
                // A connection in several of the groups receives the message once.
                let mut seen: HashSet<ConnectionId> = HashSet::new();
                let unique: HashSet<&GroupName> = groups.iter().collect();
                for group in unique {
                    if let Some(members) = self.groups.shard(group).read().get(group) {
                        for connection in members.values() {
                            if seen.insert(connection.id().clone()) {
                                visit(connection);
                            }
                        }
                    }
                }
            }
        }
    }

    fn visit_user(&self, user: &UserId, visit: &mut dyn FnMut(&Arc<Connection>)) {
        if let Some(connections) = self.users.shard(user).read().get(user) {
            connections.for_each(visit);
        }
    }
}

/// Excluded connection ids: a linear scan for short lists, a set for long ones.
enum Exclusions<'a> {
    Few(&'a [ConnectionId]),
    Many(HashSet<&'a str>),
}

impl<'a> Exclusions<'a> {
    fn new(ids: &'a [ConnectionId]) -> Self {
        if ids.len() <= 8 {
            Exclusions::Few(ids)
        } else {
            Exclusions::Many(ids.iter().map(|id| id.as_str()).collect())
        }
    }

    fn contains(&self, id: &ConnectionId) -> bool {
        match self {
            Exclusions::Few(ids) => ids.contains(id),
            Exclusions::Many(set) => set.contains(id.as_str()),
        }
    }
}

/// The keys of a sharded index, unless there are more than `max`.
fn names<K: Clone, V>(index: &Sharded<HashMap<K, V>>, max: usize) -> Option<Vec<K>> {
    let mut all = Vec::new();
    for shard in index.iter() {
        let shard = shard.read();
        if all.len() + shard.len() > max {
            return None;
        }
        all.extend(shard.keys().cloned());
    }
    Some(all)
}
