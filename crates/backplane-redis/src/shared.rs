//! What the backplane's parts share: settings, counters, the Redis client (or the cluster's
//! topology and clients).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use switchyard_backplane::envelope::Seal;

use crate::naming::Naming;
use crate::topology::Cluster;

/// Settings of a Redis backplane.
#[derive(Clone, Debug)]
pub struct RedisSettings {
    /// `redis://[user:password@]host:port[/db]` or `rediss://…` for TLS; for a Redis Cluster
    /// `redis-cluster://[user:password@]host:port,host:port,…` (seed nodes) or
    /// `rediss-cluster://…` for TLS.
    pub url: String,
    /// Prefix of every channel name, so several clusters can share one Redis.
    pub prefix: String,
    /// How long a Redis command may take before it counts as failed. A Redis pause shorter
    /// than this loses nothing.
    pub response_timeout: Duration,
    /// The cluster's keys: every envelope is sealed with the first, and one received is
    /// decoded only when it is sealed with one of them. Default: [`Seal::development`],
    /// which keeps out nobody who reads this; give the nodes' own.
    pub seal: Seal,
}

impl RedisSettings {
    pub fn new(url: impl Into<String>) -> Self {
        RedisSettings {
            url: url.into(),
            prefix: "sy".into(),
            response_timeout: Duration::from_secs(10),
            seal: Seal::development(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RedisBackplaneError {
    #[error("redis URL {url:?} is not valid: {reason}")]
    Url { url: String, reason: String },
    #[error("cannot reach redis at {url}: {reason}")]
    Connect { url: String, reason: String },
    #[error(
        "redis at {url} is not in cluster mode (cluster support disabled): \
         use a redis:// URL for a single Redis, or enable cluster mode"
    )]
    NotCluster { url: String },
    #[error("redis cluster at {url} is not ready: {reason}")]
    ClusterNotReady { url: String, reason: String },
    #[error("the channel prefix {prefix:?} may not contain '{{' or '}}' on a Redis Cluster")]
    Prefix { prefix: String },
}

/// What the backplane did, for metrics.
#[derive(Default, Debug)]
pub struct Stats {
    /// Envelopes handed to Redis (one per message, whatever its channel count).
    pub published: AtomicU64,
    /// Envelopes that Redis did not accept (connection lost, timeout): they are lost.
    pub publish_errors: AtomicU64,
    /// Envelopes received from other processes and applied.
    pub received: AtomicU64,
    /// Received payloads that did not decode: counted and dropped.
    pub decode_errors: AtomicU64,
    /// Received payloads without a valid seal (not from a node of this cluster): dropped
    /// before decoding.
    pub unauthenticated: AtomicU64,
    /// Subscribe or unsubscribe commands that failed (retried).
    pub subscribe_errors: AtomicU64,
}

/// One Redis, or a Redis Cluster.
pub(crate) enum Mode {
    Single(redis::Client),
    Cluster(Cluster),
}

/// What the publisher and the subscribers share.
pub(crate) struct Shared {
    pub(crate) settings: RedisSettings,
    pub(crate) mode: Mode,
    pub(crate) naming: Naming,
    /// Names this process's envelopes; random per start, so a restarted node is new.
    pub(crate) origin: u64,
    pub(crate) seq: AtomicU64,
    pub(crate) stats: Stats,
}

pub(crate) fn count(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}
