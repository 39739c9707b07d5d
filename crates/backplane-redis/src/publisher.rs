//! One task publishes every envelope of this process, in order: batches of whatever is queued
//! go out as one pipeline. On one Redis that is one connection (PUBLISH); on a Redis Cluster
//! it is one connection per master (SPUBLISH), each batch split by the master owning each
//! name's slot, the parts sent together and the next batch only after all of them answered.
//! All of a hub's names share one slot, so a hub's envelopes keep their order.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ServerErrorKind, Value};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

use crate::naming;
use crate::shared::{count, Mode, Shared};
use crate::topology::{Addr, Cluster};

/// Publishes at most this many envelopes per pipeline, so one round trip stays short.
const MAX_BATCH: usize = 256;

/// How often one envelope follows a redirection (the slot moved) before it counts as lost.
const MAX_REDIRECTS: usize = 3;

pub(crate) struct Outgoing {
    pub(crate) names: Vec<String>,
    pub(crate) bytes: Bytes,
    /// For an ask: told how many subscribers Redis delivered it to (one name only).
    pub(crate) receipt: Option<oneshot::Sender<Option<usize>>>,
}

/// The publisher's connections.
pub(crate) enum Connections {
    Single(ConnectionManager),
    /// One per master, made when first needed.
    Cluster(HashMap<Addr, ConnectionManager>),
}

async fn manager(shared: &Shared, client: &redis::Client) -> redis::RedisResult<ConnectionManager> {
    let config = ConnectionManagerConfig::new()
        .set_response_timeout(Some(shared.settings.response_timeout))
        .set_connection_timeout(Some(shared.settings.response_timeout))
        .set_number_of_retries(0);
    client.get_connection_manager_with_config(config).await
}

/// Connects to the Redis, or to every master of the cluster, so that one that cannot be
/// reached shows at start.
pub(crate) async fn connect(shared: &Shared) -> redis::RedisResult<Connections> {
    match &shared.mode {
        Mode::Single(client) => Ok(Connections::Single(manager(shared, client).await?)),
        Mode::Cluster(cluster) => {
            let mut connections = HashMap::new();
            for addr in cluster.topology().masters() {
                let connection = manager(shared, &cluster.client(addr)?)
                    .await
                    .map_err(|e| with_master(e, addr))?;
                connections.insert(addr.clone(), connection);
            }
            Ok(Connections::Cluster(connections))
        }
    }
}

fn with_master(error: redis::RedisError, addr: &Addr) -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::Io,
        "cannot reach a cluster master",
        format!("{addr}: {error}"),
    ))
}

pub(crate) async fn run(
    shared: Arc<Shared>,
    connections: Connections,
    queue: mpsc::UnboundedReceiver<Outgoing>,
) {
    match connections {
        Connections::Single(connection) => run_single(shared, connection, queue).await,
        Connections::Cluster(connections) => run_cluster(shared, connections, queue).await,
    }
}

async fn run_single(
    shared: Arc<Shared>,
    mut connection: ConnectionManager,
    mut queue: mpsc::UnboundedReceiver<Outgoing>,
) {
    let mut batch: Vec<Outgoing> = Vec::with_capacity(MAX_BATCH);
    while queue.recv_many(&mut batch, MAX_BATCH).await > 0 {
        let mut pipe = redis::pipe();
        for outgoing in &batch {
            for name in &outgoing.names {
                let publish = pipe.cmd("PUBLISH").arg(name).arg(outgoing.bytes.as_ref());
                // Only asks want the subscriber count; the pipeline answers those in order.
                if outgoing.receipt.is_none() {
                    publish.ignore();
                }
            }
        }
        // A failed pipeline is not retried: some of it may have been published already, and
        // a retry would deliver those twice. Pub/sub is at most once across an outage.
        match pipe.query_async::<Vec<i64>>(&mut connection).await {
            Ok(counts) => {
                let mut counts = counts.into_iter();
                for outgoing in batch.drain(..) {
                    count(&shared.stats.published);
                    if let Some(receipt) = outgoing.receipt {
                        let reached = counts.next().and_then(|n| usize::try_from(n).ok());
                        let _ = receipt.send(reached);
                    }
                }
            }
            Err(error) => {
                tracing::warn!(%error, lost = batch.len(), "redis publish failed");
                for _ in batch.drain(..) {
                    count(&shared.stats.publish_errors);
                }
            }
        }
    }
}

/// One name of one envelope of the batch: (envelope, name) indexes.
type Entry = (usize, usize);

/// Whether Redis refused a command because its slot is (being) served elsewhere: the
/// command was not executed, so sending it again after a refresh delivers it once.
fn redirected(error: &redis::ServerError) -> bool {
    matches!(
        error.kind(),
        Some(
            ServerErrorKind::Moved
                | ServerErrorKind::Ask
                | ServerErrorKind::TryAgain
                | ServerErrorKind::ClusterDown
        )
    )
}

async fn run_cluster(
    shared: Arc<Shared>,
    mut connections: HashMap<Addr, ConnectionManager>,
    mut queue: mpsc::UnboundedReceiver<Outgoing>,
) {
    let Mode::Cluster(cluster) = &shared.mode else {
        unreachable!("cluster connections without a cluster")
    };
    let mut batch: Vec<Outgoing> = Vec::with_capacity(MAX_BATCH);
    while queue.recv_many(&mut batch, MAX_BATCH).await > 0 {
        let mut outcome = Outcome::new(batch.len());
        let mut todo: Vec<Entry> = batch
            .iter()
            .enumerate()
            .flat_map(|(i, outgoing)| (0..outgoing.names.len()).map(move |n| (i, n)))
            .collect();
        for attempt in 0..=MAX_REDIRECTS {
            let parts = send_parts(
                &shared,
                cluster,
                &mut connections,
                &batch,
                todo,
                &mut outcome,
            )
            .await;
            let mut again = read_answers(parts, &mut outcome).await;
            if again.is_empty() {
                break;
            }
            if attempt == MAX_REDIRECTS {
                tracing::warn!(
                    lost = again.len(),
                    "redis cluster kept redirecting publishes"
                );
                outcome.fail(&again);
                break;
            }
            // Publish order within the batch, which is a hub's order.
            again.sort_unstable();
            cluster.refresh().await;
            todo = again;
        }
        if outcome.lost_connection {
            // A master may have failed over: look again, without holding up the queue.
            let shared = shared.clone();
            tokio::spawn(async move {
                if let Mode::Cluster(cluster) = &shared.mode {
                    cluster.refresh().await;
                }
            });
        }
        for (i, outgoing) in batch.drain(..).enumerate() {
            if outcome.failed[i] {
                count(&shared.stats.publish_errors);
                continue; // an ask's receipt is dropped: it resolves to None
            }
            count(&shared.stats.published);
            if let Some(receipt) = outgoing.receipt {
                let _ = receipt.send(outcome.reached[i]);
            }
        }
    }
}

/// What became of a batch's envelopes, by index in the batch.
struct Outcome {
    /// For asks: how many subscribers Redis delivered each one to.
    reached: Vec<Option<usize>>,
    failed: Vec<bool>,
    /// A master could not be reached or its connection failed.
    lost_connection: bool,
}

impl Outcome {
    fn new(len: usize) -> Outcome {
        Outcome {
            reached: vec![None; len],
            failed: vec![false; len],
            lost_connection: false,
        }
    }

    fn fail(&mut self, entries: &[Entry]) {
        entries.iter().for_each(|(i, _)| self.failed[*i] = true);
    }
}

/// One master's part of a batch: its address, its entries and its answers.
type Part = (Addr, Vec<Entry>, redis::RedisResult<Vec<Value>>);

/// Sends `todo` to the masters owning its names, one pipeline per master, all at once.
async fn send_parts(
    shared: &Shared,
    cluster: &Cluster,
    connections: &mut HashMap<Addr, ConnectionManager>,
    batch: &[Outgoing],
    todo: Vec<Entry>,
    outcome: &mut Outcome,
) -> JoinSet<Part> {
    let mut parts = JoinSet::new();
    for (addr, entries) in split_by_master(cluster, batch, todo) {
        let Some(mut connection) =
            master_connection(shared, cluster, connections, &addr, &entries, outcome).await
        else {
            continue;
        };
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for (i, n) in &entries {
            let outgoing = &batch[*i];
            pipe.cmd("SPUBLISH")
                .arg(&outgoing.names[*n])
                .arg(outgoing.bytes.as_ref());
        }
        parts.spawn(async move {
            let answers = pipe.query_async::<Vec<Value>>(&mut connection).await;
            (addr, entries, answers)
        });
    }
    parts
}

/// The connection to the master at `addr`, made when first needed. When it cannot be
/// made, `entries` (that master's part) fail.
async fn master_connection(
    shared: &Shared,
    cluster: &Cluster,
    connections: &mut HashMap<Addr, ConnectionManager>,
    addr: &Addr,
    entries: &[Entry],
    outcome: &mut Outcome,
) -> Option<ConnectionManager> {
    if let Some(connection) = connections.get(addr) {
        return Some(connection.clone());
    }
    match cluster.client(addr) {
        Ok(client) => match manager(shared, &client).await {
            Ok(connection) => {
                connections.insert(addr.clone(), connection.clone());
                Some(connection)
            }
            Err(error) => {
                tracing::warn!(%addr, %error, "cannot reach a redis cluster master");
                outcome.fail(entries);
                outcome.lost_connection = true;
                None
            }
        },
        Err(error) => {
            tracing::warn!(%addr, %error, "bad redis cluster master address");
            outcome.fail(entries);
            None
        }
    }
}

/// Reads every part's answers; the entries Redis redirected, to be sent again.
async fn read_answers(mut parts: JoinSet<Part>, outcome: &mut Outcome) -> Vec<Entry> {
    let mut again: Vec<Entry> = Vec::new();
    while let Some(part) = parts.join_next().await {
        let Ok((addr, entries, answers)) = part else {
            continue; // the runtime is shutting down
        };
        match answers {
            Ok(answers) if answers.len() == entries.len() => {
                for ((i, n), answer) in entries.into_iter().zip(answers) {
                    match answer {
                        Value::Int(subscribers) => {
                            outcome.reached[i] = usize::try_from(subscribers).ok();
                        }
                        Value::ServerError(error) if redirected(&error) => {
                            again.push((i, n));
                        }
                        other => {
                            tracing::warn!(%addr, answer = ?other, "redis refused a publish");
                            outcome.failed[i] = true;
                        }
                    }
                }
            }
            Ok(_) => {
                tracing::warn!(%addr, "redis answered a publish pipeline short");
                outcome.fail(&entries);
            }
            // Not retried: some of it may have been published already.
            Err(error) => {
                tracing::warn!(%addr, %error, lost = entries.len(), "redis publish failed");
                outcome.fail(&entries);
                outcome.lost_connection = true;
            }
        }
    }
    again
}

/// Groups entries by the master owning their name's slot, keeping their order.
fn split_by_master(
    cluster: &Cluster,
    batch: &[Outgoing],
    entries: Vec<Entry>,
) -> Vec<(Addr, Vec<Entry>)> {
    let topology = cluster.topology();
    let mut parts: Vec<(Addr, Vec<Entry>)> = Vec::new();
    for (i, n) in entries {
        let slot = naming::slot(batch[i].names[n].as_bytes());
        let addr = topology.master(slot);
        match parts.iter_mut().find(|(a, _)| a == addr) {
            Some((_, part)) => part.push((i, n)),
            None => parts.push((addr.clone(), vec![(i, n)])),
        }
    }
    parts
}
