//! Each attached node's subscriptions, and the reader that applies what arrives. On one Redis
//! that is one connection; on a Redis Cluster, one connection per master the node has
//! subscriptions on (SSUBSCRIBE on the master owning each name's slot). Subscribe and
//! unsubscribe commands go through one ordered queue, so a channel's subscribe and unsubscribe
//! never overtake each other; a barrier answers once every command before it is live in Redis
//! and, on a cluster, once every one of the node's connections has answered a PING, so that
//! what Redis sent on any of them before has been read.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{PushInfo, PushKind, ServerErrorKind, Value};
use switchyard_backplane::envelope;
use switchyard_backplane::{NodeId, Sink};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

use crate::naming;
use crate::shared::{count, Mode, Shared};
use crate::topology::{Addr, Cluster};

pub(crate) enum Command {
    Subscribe(Vec<String>),
    Unsubscribe(Vec<String>),
    Barrier(oneshot::Sender<()>),
    /// Answered once every connection answered a PING (dropped if one failed), by a task of
    /// its own: a hung Redis must not hold the node's subscribes behind it.
    Probe(oneshot::Sender<()>),
}

/// Subscribes or unsubscribes at most this many commands' names per batch.
const MAX_BATCH: usize = 512;

/// How often one subscription follows a redirection (its slot moved) before the batch is
/// retried from the start.
const MAX_REDIRECTS: usize = 3;

pub(crate) async fn run(
    shared: Arc<Shared>,
    node: NodeId,
    sink: Weak<dyn Sink>,
    live: Arc<AtomicBool>,
    mut commands: mpsc::UnboundedReceiver<Command>,
) {
    let (resync, mut resyncs) = mpsc::unbounded_channel();
    let reader = Reader {
        shared: shared.clone(),
        sink,
        live,
        copies: Mutex::new(Copies::new(SWEEP_EVERY)),
        placed: Arc::new(Mutex::new(HashMap::new())),
        resync,
        unauthenticated_logged: Mutex::new(None),
    };
    let Some(mut link) = open(&shared, &node, reader, &commands).await else {
        return; // detached before Redis answered
    };
    let mut pending: Vec<Command> = Vec::new();
    // Barriers whose earlier commands have all been sent: one sync answers them together, so a
    // burst of connects (each asks for one) costs one round trip, not one each.
    let mut barriers: Vec<tokio::sync::oneshot::Sender<()>> = Vec::new();
    loop {
        if pending.is_empty() && !barriers.is_empty() {
            link.sync().await;
            for done in barriers.drain(..) {
                let _ = done.send(());
            }
            continue;
        }
        if pending.is_empty() {
            tokio::select! {
                received = commands.recv_many(&mut pending, MAX_BATCH) => {
                    if received == 0 {
                        return; // detached
                    }
                }
                Some(()) = resyncs.recv() => {
                    while resyncs.try_recv().is_ok() {}
                    if !retry(&shared, &mut link, &node, &commands, Op::Resync).await {
                        return;
                    }
                    continue;
                }
            }
        }
        // Take the leading run of one kind and send it as one batch.
        let subscribe = match pending.first() {
            Some(Command::Barrier(_)) => {
                if let Command::Barrier(done) = pending.remove(0) {
                    barriers.push(done);
                }
                continue;
            }
            Some(Command::Probe(_)) => {
                if let Command::Probe(done) = pending.remove(0) {
                    probe(link.connections(), done);
                }
                continue;
            }
            Some(Command::Subscribe(_)) => true,
            _ => false,
        };
        let op = leading_run(&mut pending, subscribe);
        if !retry(&shared, &mut link, &node, &commands, op).await {
            return;
        }
    }
}

/// The node's link: on one Redis its connection (None if the node is detached before Redis
/// answered), on a cluster none yet (connections are made as subscriptions need them).
async fn open(
    shared: &Arc<Shared>,
    node: &NodeId,
    reader: Reader,
    commands: &mpsc::UnboundedReceiver<Command>,
) -> Option<Link> {
    let reader = Arc::new(reader);
    Some(match &shared.mode {
        Mode::Single(client) => {
            Link::Single(connect_single(shared, node, client, &reader, commands).await?)
        }
        Mode::Cluster(_) => Link::Sharded(Shards {
            shared: shared.clone(),
            reader,
            connections: HashMap::new(),
            wanted: HashSet::new(),
        }),
    })
}

/// Answers `done` once every connection answered a PING, from a task of its own.
fn probe(connections: Vec<ConnectionManager>, done: oneshot::Sender<()>) {
    tokio::spawn(async move {
        let mut pings = JoinSet::new();
        for mut connection in connections {
            pings.spawn(async move {
                redis::cmd("PING")
                    .query_async::<Value>(&mut connection)
                    .await
                    .is_ok()
            });
        }
        let mut all = true;
        while let Some(answered) = pings.join_next().await {
            all &= answered.unwrap_or(false);
        }
        if all {
            let _ = done.send(());
        }
    });
}

/// Takes the leading run of subscribes (or of unsubscribes) off `pending`, as one op.
fn leading_run(pending: &mut Vec<Command>, subscribe: bool) -> Op {
    let run = pending
        .iter()
        .take_while(|c| match c {
            Command::Subscribe(_) => subscribe,
            Command::Unsubscribe(_) => !subscribe,
            Command::Barrier(_) | Command::Probe(_) => false,
        })
        .count();
    let mut names = Vec::new();
    for command in pending.drain(..run) {
        if let Command::Subscribe(more) | Command::Unsubscribe(more) = command {
            names.extend(more);
        }
    }
    if subscribe {
        Op::Subscribe(names)
    } else {
        Op::Unsubscribe(names)
    }
}

async fn connect_single(
    shared: &Shared,
    node: &NodeId,
    client: &redis::Client,
    reader: &Arc<Reader>,
    commands: &mpsc::UnboundedReceiver<Command>,
) -> Option<ConnectionManager> {
    let reader = reader.clone();
    let config = ConnectionManagerConfig::new()
        .set_response_timeout(Some(shared.settings.response_timeout))
        .set_connection_timeout(Some(shared.settings.response_timeout))
        .set_automatic_resubscription()
        // Reconnect for as long as it takes: this connection sends nothing unless a
        // subscription changes, so once its retries ran out nothing would bring it back and
        // the node would stop hearing the cluster after a long Redis outage.
        .set_number_of_retries(usize::MAX)
        .set_max_delay(std::time::Duration::from_secs(2))
        .set_push_sender(move |push: PushInfo| {
            reader.push(push, None);
            Ok::<(), ()>(())
        });
    loop {
        match client
            .get_connection_manager_with_config(config.clone())
            .await
        {
            Ok(connection) => return Some(connection),
            Err(error) => {
                tracing::warn!(%node, %error, "redis subscriber cannot connect; retrying");
                count(&shared.stats.subscribe_errors);
                tokio::time::sleep(Duration::from_secs(1)).await;
                if commands.is_closed() {
                    return None;
                }
            }
        }
    }
}

enum Op {
    Subscribe(Vec<String>),
    Unsubscribe(Vec<String>),
    /// Subscribe every wanted name again where its slot is now served (after a lost
    /// connection or a slot that moved).
    Resync,
}

/// Applies `op` until Redis confirms it, backing off between tries. False once the node is
/// detached.
async fn retry(
    shared: &Shared,
    link: &mut Link,
    node: &NodeId,
    commands: &mpsc::UnboundedReceiver<Command>,
    op: Op,
) -> bool {
    let mut delay = Duration::from_millis(50);
    loop {
        match link.apply(&op).await {
            Ok(()) => return true,
            Err(error) => {
                tracing::warn!(%node, %error, "redis subscribe failed; retrying");
                count(&shared.stats.subscribe_errors);
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(2));
                if commands.is_closed() {
                    return false;
                }
                link.recover().await;
            }
        }
    }
}

/// A node's connection(s).
enum Link {
    Single(ConnectionManager),
    Sharded(Shards),
}

impl Link {
    async fn apply(&mut self, op: &Op) -> redis::RedisResult<()> {
        match (self, op) {
            (Link::Single(connection), Op::Subscribe(names)) => connection.subscribe(names).await,
            (Link::Single(connection), Op::Unsubscribe(names)) => {
                connection.unsubscribe(names).await
            }
            // The connection manager resubscribes by itself.
            (Link::Single(_), Op::Resync) => Ok(()),
            (Link::Sharded(shards), Op::Subscribe(names)) => shards.subscribe(names.clone()).await,
            (Link::Sharded(shards), Op::Unsubscribe(names)) => {
                shards.unsubscribe(names).await;
                Ok(())
            }
            (Link::Sharded(shards), Op::Resync) => shards.resync().await,
        }
    }

    /// After a failure: look at the cluster again before the next try.
    async fn recover(&mut self) {
        if let Link::Sharded(shards) = self {
            shards.cluster().refresh().await;
        }
    }

    /// Every connection the node receives on (none yet, on a cluster before the first
    /// subscribe: the probe then only says the task runs).
    fn connections(&self) -> Vec<ConnectionManager> {
        match self {
            Link::Single(connection) => vec![connection.clone()],
            Link::Sharded(shards) => shards.connections.values().cloned().collect(),
        }
    }

    /// Waits until what Redis sent on every connection before now has been read.
    async fn sync(&mut self) {
        if let Link::Sharded(shards) = self {
            shards.sync().await;
        }
    }
}

/// A node's connections to the masters of a Redis Cluster.
struct Shards {
    shared: Arc<Shared>,
    reader: Arc<Reader>,
    connections: HashMap<Addr, ConnectionManager>,
    /// Every name the node is subscribed to (or is being subscribed to).
    wanted: HashSet<String>,
}

impl Shards {
    fn cluster(&self) -> &Cluster {
        match &self.shared.mode {
            Mode::Cluster(cluster) => cluster,
            Mode::Single(_) => unreachable!("sharded subscriber on a single redis"),
        }
    }

    /// The node's connection to `addr`, made when first needed; its pushes go to the reader,
    /// tagged with where they came from.
    async fn connection(&mut self, addr: &Addr) -> redis::RedisResult<ConnectionManager> {
        if let Some(connection) = self.connections.get(addr) {
            return Ok(connection.clone());
        }
        let client = self.cluster().client(addr)?;
        let reader = self.reader.clone();
        let from = addr.clone();
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(self.shared.settings.response_timeout))
            .set_connection_timeout(Some(self.shared.settings.response_timeout))
            .set_number_of_retries(0)
            .set_push_sender(move |push: PushInfo| {
                reader.push(push, Some(&from));
                Ok::<(), ()>(())
            });
        let connection = client.get_connection_manager_with_config(config).await?;
        self.connections.insert(addr.clone(), connection.clone());
        Ok(connection)
    }

    /// SSUBSCRIBE each name on the master owning its slot, one command per name (a command's
    /// names must share a slot), pipelined per master. Follows redirections after refreshing
    /// the topology.
    async fn subscribe(&mut self, names: Vec<String>) -> redis::RedisResult<()> {
        self.wanted.extend(names.iter().cloned());
        let mut todo = names;
        for attempt in 0..=MAX_REDIRECTS {
            let topology = self.cluster().topology();
            let mut parts: Vec<(Addr, Vec<String>)> = Vec::new();
            for name in todo {
                let addr = topology.master(naming::slot(name.as_bytes()));
                match parts.iter_mut().find(|(a, _)| a == addr) {
                    Some((_, part)) => part.push(name),
                    None => parts.push((addr.clone(), vec![name])),
                }
            }
            let mut moved = Vec::new();
            for (addr, names) in parts {
                let mut connection = self.connection(&addr).await?;
                // A name placed on another master before: its slot moved, and Redis drops the
                // shard channels of a slot a master gives up (or that master is gone).
                self.reader
                    .placed
                    .lock()
                    .extend(names.iter().map(|n| (n.clone(), addr.clone())));
                let answers = pipeline("SSUBSCRIBE", &names)
                    .query_async::<Vec<Value>>(&mut connection)
                    .await?;
                for (name, answer) in names.into_iter().zip(answers) {
                    match answer {
                        Value::ServerError(error)
                            if matches!(
                                error.kind(),
                                Some(ServerErrorKind::Moved | ServerErrorKind::Ask)
                            ) =>
                        {
                            moved.push(name);
                        }
                        Value::ServerError(error) => return Err(error.into()),
                        _ => {}
                    }
                }
            }
            if moved.is_empty() {
                return Ok(());
            }
            if attempt == MAX_REDIRECTS {
                return Err(redis::RedisError::from((
                    redis::ErrorKind::Io,
                    "the redis cluster kept redirecting subscriptions",
                )));
            }
            self.cluster().refresh().await;
            todo = moved;
        }
        Ok(())
    }

    /// SUNSUBSCRIBE each name where it is subscribed. Not retried: a connection that failed
    /// has lost its subscriptions anyway.
    async fn unsubscribe(&mut self, names: &[String]) {
        let mut parts: Vec<(Addr, Vec<String>)> = Vec::new();
        {
            let mut placed = self.reader.placed.lock();
            for name in names {
                self.wanted.remove(name);
                let Some(addr) = placed.remove(name) else {
                    continue;
                };
                match parts.iter_mut().find(|(a, _)| *a == addr) {
                    Some((_, part)) => part.push(name.clone()),
                    None => parts.push((addr, vec![name.clone()])),
                }
            }
        }
        for (addr, names) in parts {
            let Some(mut connection) = self.connections.get(&addr).cloned() else {
                continue;
            };
            if let Err(error) = pipeline("SUNSUBSCRIBE", &names)
                .query_async::<Vec<Value>>(&mut connection)
                .await
            {
                tracing::warn!(%addr, %error, "redis unsubscribe failed");
                count(&self.shared.stats.subscribe_errors);
            }
        }
    }

    async fn resync(&mut self) -> redis::RedisResult<()> {
        self.cluster().refresh().await;
        // Connections to nodes that no longer serve slots carry nothing (and a barrier
        // should not wait on them).
        let topology = self.cluster().topology();
        self.connections
            .retain(|addr, _| topology.masters().contains(addr));
        let names: Vec<String> = self.wanted.iter().cloned().collect();
        self.subscribe(names).await
    }

    async fn sync(&mut self) {
        let mut pings = JoinSet::new();
        for connection in self.connections.values() {
            let mut connection = connection.clone();
            pings.spawn(async move {
                let _ = redis::cmd("PING")
                    .query_async::<Value>(&mut connection)
                    .await;
            });
        }
        while pings.join_next().await.is_some() {}
    }
}

/// One single-name command per name, pipelined: each is answered by exactly one confirmation
/// (or one error), so the pipeline's answers line up with its names.
fn pipeline(command: &str, names: &[String]) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for name in names {
        pipe.cmd(command).arg(name);
    }
    pipe
}

/// Applies pushes as they are read; never blocks the connection (the sink only queues).
struct Reader {
    shared: Arc<Shared>,
    sink: Weak<dyn Sink>,
    live: Arc<AtomicBool>,
    /// Recognises the later copies of one envelope published on several channels.
    copies: Mutex<Copies>,
    /// On a cluster: the master each name is subscribed on.
    placed: Arc<Mutex<HashMap<String, Addr>>>,
    /// Asks the subscriber task to subscribe everything again.
    resync: mpsc::UnboundedSender<()>,
    /// When an unsealed message was last logged.
    unauthenticated_logged: Mutex<Option<std::time::Instant>>,
}

impl Reader {
    fn push(&self, push: PushInfo, from: Option<&Addr>) {
        match (push.kind, from) {
            (PushKind::Message, None) | (PushKind::SMessage, Some(_)) => {}
            (PushKind::Disconnection, Some(_)) => {
                let _ = self.resync.send(());
                return;
            }
            (PushKind::SUnsubscribe, Some(from)) => {
                // Either the confirmation of an unsubscribe (the name is no longer placed
                // there), or Redis dropping the subscription because the slot moved.
                let Some(Value::BulkString(name)) = push.data.first() else {
                    return;
                };
                let name = String::from_utf8_lossy(name);
                let mut placed = self.placed.lock();
                if placed.get(name.as_ref()) == Some(from) {
                    placed.remove(name.as_ref());
                    let _ = self.resync.send(());
                }
                return;
            }
            _ => return,
        }
        if !self.live.load(Ordering::Acquire) {
            return;
        }
        let mut data = push.data.into_iter();
        let (Some(Value::BulkString(name)), Some(Value::BulkString(payload))) =
            (data.next(), data.next())
        else {
            count(&self.shared.stats.decode_errors);
            return;
        };
        let bytes = Bytes::from(payload);
        let (stamp, message) = match envelope::open(&bytes, &self.shared.settings.seal) {
            Ok(decoded) => decoded,
            Err(envelope::OpenError::Unauthenticated) => {
                // Anyone who can publish on Redis could otherwise steer every node. Logged
                // at most once a minute per reader: a flood must not flood the log.
                if self.log_unauthenticated() {
                    tracing::warn!(
                        channel = %String::from_utf8_lossy(&name),
                        "dropping a backplane message not sealed with this cluster's secret \
                         (not from a node of this cluster, or cluster.secret differs)"
                    );
                }
                count(&self.shared.stats.unauthenticated);
                return;
            }
            Err(envelope::OpenError::Envelope(error)) => {
                tracing::warn!(%error, "dropping a backplane message that does not decode");
                count(&self.shared.stats.decode_errors);
                return;
            }
        };
        if stamp.origin == self.shared.origin && !stamp.asked {
            return; // delivered locally when it was published
        }
        let slot = if from.is_some() {
            naming::slot(&name)
        } else {
            0
        };
        if self.copies.lock().is_repeat(stamp.origin, slot, stamp.seq) {
            return; // another channel's copy of the same message
        }
        count(&self.shared.stats.received);
        if let Some(sink) = self.sink.upgrade() {
            sink.receive(&Arc::new(message));
        }
    }
}

impl Reader {
    /// Whether to log an unsealed message now: once a minute at most.
    fn log_unauthenticated(&self) -> bool {
        let mut last = self.unauthenticated_logged.lock();
        let due = last.is_none_or(|at| at.elapsed() >= std::time::Duration::from_secs(60));
        if due {
            *last = Some(std::time::Instant::now());
        }
        due
    }
}

/// Messages between two sweeps of [`Copies`].
const SWEEP_EVERY: u64 = 1 << 16;

/// The last sequence number seen per publisher and slot. Copies of one envelope published on
/// several channels share a slot and arrive one after another on its connection, so a
/// repeat of the last number is a copy. Every start of a node is a new publisher, so entries
/// not refreshed between two sweeps (one every `sweep_every` messages) are dropped: a
/// publisher quiet that long has no copy in flight, and its next message starts afresh.
struct Copies {
    last: HashMap<(u64, u16), (u64, u64)>,
    generation: u64,
    since_sweep: u64,
    sweep_every: u64,
}

impl Copies {
    fn new(sweep_every: u64) -> Copies {
        Copies {
            last: HashMap::new(),
            generation: 0,
            since_sweep: 0,
            sweep_every: sweep_every.max(1),
        }
    }

    /// Whether `seq` from `origin` on `slot` is a copy of the message seen just before.
    fn is_repeat(&mut self, origin: u64, slot: u16, seq: u64) -> bool {
        self.since_sweep += 1;
        if self.since_sweep >= self.sweep_every {
            self.since_sweep = 0;
            let current = self.generation;
            self.last.retain(|_, (_, seen)| *seen == current);
            self.generation += 1;
        }
        let generation = self.generation;
        self.last
            .insert((origin, slot), (seq, generation))
            .is_some_and(|(last, _)| last == seq)
    }
}

#[cfg(test)]
mod tests {
    use super::Copies;

    #[test]
    fn copies_of_one_message_are_recognised() {
        let mut copies = Copies::new(1 << 16);
        assert!(!copies.is_repeat(1, 7, 10));
        assert!(copies.is_repeat(1, 7, 10));
        assert!(
            !copies.is_repeat(1, 8, 10),
            "another slot is another connection"
        );
        assert!(!copies.is_repeat(2, 7, 10), "another publisher");
        assert!(!copies.is_repeat(1, 7, 11));
        assert!(copies.is_repeat(1, 7, 11));
    }

    #[test]
    fn publishers_gone_quiet_are_forgotten_and_active_ones_kept() {
        let mut copies = Copies::new(4);
        // Publishers that sent once and went away (restarted nodes).
        for origin in 100..110 {
            assert!(!copies.is_repeat(origin, 0, 1));
        }
        // One active publisher for two sweeps.
        for seq in 0..8 {
            assert!(!copies.is_repeat(1, 0, seq));
        }
        assert_eq!(copies.last.len(), 1, "only the active publisher is left");
        // A copy arriving right after a sweep is still recognised.
        let mut copies = Copies::new(2);
        assert!(!copies.is_repeat(1, 0, 5));
        assert!(copies.is_repeat(1, 0, 5));
        assert!(copies.is_repeat(1, 0, 5));
    }
}
