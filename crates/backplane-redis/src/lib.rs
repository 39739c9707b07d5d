//! The Redis backplane: the nodes of a cluster publish [`Message`]s on Redis pub/sub channels
//! and subscribe to the channels they have local members for.
//!
//! # Layout
//! - [`RedisBackplane`]: one per process. It delivers to its own attached nodes directly
//!   (local first, no Redis round trip) and publishes for the others.
//! - `shared`: settings, counters and the Redis client (or cluster) the parts share.
//! - `naming`: channel names; on a Redis Cluster, their hash tags and slots.
//! - `topology`: Redis Cluster URLs, masters and slot ownership (`CLUSTER SLOTS`).
//! - `subscriber`: per attached node, one Redis connection (one per master on a cluster), its
//!   subscriptions and its reader.
//! - `publisher`: one ordered task that pipelines publishes (one connection, or one per
//!   master).
//!
//! Order: a process's publishes go out on one connection in the order they were made, and each
//! node reads one subscriber connection, so one publisher's messages reach a node in order.
//! On a Redis Cluster (`redis-cluster://`, sharded pub/sub) that holds per hub: every channel
//! of a hub, and every message of a hub on `All` or `Node`, shares one slot (see `naming`),
//! so it travels on one connection each way.
//! A message published on several channels is encoded once; receivers drop the extra copies
//! (they arrive back to back on the subscriber connection of their slot) and their own echoes,
//! except asks, which skip local delivery so that every node Redis counts reads them from
//! Redis.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

mod naming;
mod publisher;
mod shared;
mod subscriber;
mod topology;

pub use shared::{RedisBackplaneError, RedisSettings, Stats};

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;
use redis::{IntoConnectionInfo, ProtocolVersion};
use switchyard_backplane::envelope::{self, Stamp};
use switchyard_backplane::{Backplane, Barrier, NodeId, Probe, Receipt, Sink, Traffic};
use switchyard_core::{Channel, Message};
use tokio::runtime::Handle;
use tokio::sync::mpsc;

use crate::naming::Naming;
use crate::publisher::Outgoing;
use crate::shared::{Mode, Shared};
use crate::subscriber::Command;
use crate::topology::{Cluster, DiscoveryError};

pub struct RedisBackplane {
    shared: Arc<Shared>,
    publisher: mpsc::UnboundedSender<Outgoing>,
    nodes: RwLock<HashMap<NodeId, LocalNode>>,
    runtime: Handle,
    /// The first server of the URL (see [`Backplane::peer_address_hint`]).
    first_server: Option<(String, u16)>,
}

struct LocalNode {
    sink: Arc<dyn Sink>,
    /// Cleared on detach, so the reader stops delivering before the connection is gone.
    live: Arc<AtomicBool>,
    channels: HashSet<Channel>,
    commands: mpsc::UnboundedSender<Command>,
}

impl RedisBackplane {
    /// Connects to Redis (and fails if it cannot) and starts the publisher. Must run inside a
    /// tokio runtime; the backplane's tasks run on it.
    pub async fn connect(settings: RedisSettings) -> Result<Arc<Self>, RedisBackplaneError> {
        let url = redact(&settings.url);
        let first_server = first_server(&settings.url);
        let url_error = |reason: String| RedisBackplaneError::Url {
            url: url.clone(),
            reason,
        };
        let (mode, naming) = if topology::is_cluster_url(&settings.url) {
            if settings.prefix.contains(['{', '}']) {
                return Err(RedisBackplaneError::Prefix {
                    prefix: settings.prefix,
                });
            }
            let cluster = Cluster::connect(&settings.url, settings.response_timeout)
                .await
                .map_err(|error| match error {
                    DiscoveryError::Url(reason) => url_error(reason),
                    DiscoveryError::Unreachable(reason) => RedisBackplaneError::Connect {
                        url: url.clone(),
                        reason,
                    },
                    DiscoveryError::NotCluster => {
                        RedisBackplaneError::NotCluster { url: url.clone() }
                    }
                    DiscoveryError::Incomplete(reason) => RedisBackplaneError::ClusterNotReady {
                        url: url.clone(),
                        reason,
                    },
                })?;
            (Mode::Cluster(cluster), Naming::Sharded)
        } else {
            let info = settings
                .url
                .as_str()
                .into_connection_info()
                .map_err(|e| url_error(e.to_string()))?;
            // RESP3 delivers pub/sub messages as pushes on an ordinary multiplexed connection.
            let resp3 = info
                .redis_settings()
                .clone()
                .set_protocol(ProtocolVersion::RESP3);
            let client = redis::Client::open(info.set_redis_settings(resp3))
                .map_err(|e| url_error(e.to_string()))?;
            (Mode::Single(client), Naming::Plain)
        };
        let shared = Arc::new(Shared {
            settings,
            mode,
            naming,
            origin: rand::random(),
            seq: AtomicU64::new(0),
            stats: Stats::default(),
        });
        let connection =
            publisher::connect(&shared)
                .await
                .map_err(|e| RedisBackplaneError::Connect {
                    url: url.clone(),
                    reason: e.to_string(),
                })?;
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(publisher::run(shared.clone(), connection, rx));
        Ok(Arc::new(RedisBackplane {
            shared,
            publisher: tx,
            nodes: RwLock::new(HashMap::new()),
            runtime: Handle::current(),
            first_server,
        }))
    }

    pub fn stats(&self) -> &Stats {
        &self.shared.stats
    }

    /// The names a node subscribes to for `channel`.
    fn names(&self, channel: &Channel) -> Vec<String> {
        let shared = &self.shared;
        shared.naming.subscription(&shared.settings.prefix, channel)
    }

    /// The name `message` is published under on `channel`.
    fn name(&self, channel: &Channel, message: &Message) -> String {
        let shared = &self.shared;
        shared
            .naming
            .publication(&shared.settings.prefix, channel, message.hub())
    }

    fn command(&self, node: &NodeId, command: Command) {
        if let Some(local) = self.nodes.read().get(node) {
            let _ = local.commands.send(command);
        }
    }
}

impl Backplane for RedisBackplane {
    fn attach(&self, node: &NodeId, sink: Arc<dyn Sink>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let implicit = [Channel::Node(node.clone()), Channel::All];
        for channel in &implicit {
            let _ = tx.send(Command::Subscribe(self.names(channel)));
        }
        let live = Arc::new(AtomicBool::new(true));
        self.runtime.spawn(subscriber::run(
            self.shared.clone(),
            node.clone(),
            Arc::downgrade(&sink),
            live.clone(),
            rx,
        ));
        let previous = self.nodes.write().insert(
            node.clone(),
            LocalNode {
                sink,
                live,
                channels: implicit.into_iter().collect(),
                commands: tx,
            },
        );
        if let Some(previous) = previous {
            previous.live.store(false, Ordering::Release);
        }
    }

    fn detach(&self, node: &NodeId) {
        // Dropping the command sender ends the subscriber task and its connection, and
        // with it every subscription.
        if let Some(local) = self.nodes.write().remove(node) {
            local.live.store(false, Ordering::Release);
        }
    }

    fn subscribe(&self, node: &NodeId, channel: &Channel) {
        let names = self.names(channel);
        let mut nodes = self.nodes.write();
        if let Some(local) = nodes.get_mut(node) {
            if local.channels.insert(channel.clone()) {
                let _ = local.commands.send(Command::Subscribe(names));
            }
        }
    }

    fn unsubscribe(&self, node: &NodeId, channel: &Channel) {
        let names = self.names(channel);
        let mut nodes = self.nodes.write();
        if let Some(local) = nodes.get_mut(node) {
            if local.channels.remove(channel) {
                let _ = local.commands.send(Command::Unsubscribe(names));
            }
        }
    }

    fn publish(&self, channels: &[Channel], message: Arc<Message>) {
        // Local nodes first, synchronously: no Redis round trip, and their copy from Redis
        // is dropped as an echo.
        let local: Vec<Arc<dyn Sink>> = self
            .nodes
            .read()
            .values()
            .filter(|n| channels.iter().any(|c| n.channels.contains(c)))
            .map(|n| n.sink.clone())
            .collect();
        for sink in local {
            sink.receive(&message);
        }
        let stamp = Stamp {
            origin: self.shared.origin,
            seq: self.shared.seq.fetch_add(1, Ordering::Relaxed),
            asked: false,
        };
        let bytes = envelope::encode_sealed(stamp, &message, &self.shared.settings.seal);
        let names = channels.iter().map(|c| self.name(c, &message)).collect();
        let _ = self.publisher.send(Outgoing {
            names,
            bytes,
            receipt: None,
        });
    }

    fn ask(&self, channel: &Channel, message: Arc<Message>) -> Receipt {
        // Through Redis even for this process's nodes: the count Redis returns is then the
        // number of nodes that will read it.
        let stamp = Stamp {
            origin: self.shared.origin,
            seq: self.shared.seq.fetch_add(1, Ordering::Relaxed),
            asked: true,
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let sent = self.publisher.send(Outgoing {
            names: vec![self.name(channel, &message)],
            bytes: envelope::encode_sealed(stamp, &message, &self.shared.settings.seal),
            receipt: Some(tx),
        });
        if sent.is_err() {
            return Box::pin(std::future::ready(None));
        }
        Box::pin(async move { rx.await.ok().flatten() })
    }

    fn spans_processes(&self) -> bool {
        true
    }

    fn peer_address_hint(&self) -> Option<(String, u16)> {
        self.first_server.clone()
    }

    fn stats(&self) -> Traffic {
        let stats = &self.shared.stats;
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        Traffic {
            published: get(&stats.published),
            publish_errors: get(&stats.publish_errors),
            received: get(&stats.received),
            decode_errors: get(&stats.decode_errors),
            unauthenticated: get(&stats.unauthenticated),
            subscribe_errors: get(&stats.subscribe_errors),
        }
    }

    fn probe(&self, node: &NodeId) -> Probe {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.command(node, Command::Probe(tx));
        Box::pin(async move { rx.await.is_ok() })
    }

    fn barrier(&self, node: &NodeId) -> Barrier {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.command(node, Command::Barrier(tx));
        Box::pin(async move {
            let _ = rx.await;
        })
    }
}

/// The host and port of a Redis URL's first server (`redis://h:p`, `redis-cluster://h1:p1,h2:p2`).
fn first_server(url: &str) -> Option<(String, u16)> {
    let rest = url.split_once("://")?.1;
    let rest = rest.rsplit_once('@').map_or(rest, |(_, hosts)| hosts);
    let first = rest.split([',', '/', '?']).next()?;
    let parsed = url::Url::parse(&format!("redis://{first}")).ok()?;
    Some((
        parsed.host_str()?.to_string(),
        parsed.port().unwrap_or(6379),
    ))
}

/// The URL without its password, for messages and logs (cluster URLs too).
pub fn redact(url: &str) -> String {
    if !topology::is_cluster_url(url) {
        if let Ok(mut parsed) = url::Url::parse(url) {
            if parsed.password().is_some() {
                let _ = parsed.set_password(Some("***"));
                return parsed.to_string();
            }
            return url.to_string();
        }
    }
    // By hand: `scheme://[user[:password]@]hosts[/…][?…]`, where hosts may be a list.
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{hosts}{tail}"),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::{first_server, redact};

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(redact("redis://u:pw@h:1"), "redis://u:***@h:1");
        assert_eq!(redact("redis://h:1"), "redis://h:1");
        assert_eq!(
            redact("redis-cluster://u:pw@h1:1,h2:2/?x=1"),
            "redis-cluster://u:***@h1:1,h2:2/?x=1"
        );
        assert_eq!(
            redact("rediss-cluster://:p@ss@h1:1"),
            "rediss-cluster://:***@h1:1"
        );
        assert_eq!(
            redact("redis-cluster://h1:1,h2:2"),
            "redis-cluster://h1:1,h2:2"
        );
        assert_eq!(redact("not a url :pw@x"), "not a url :pw@x");
    }

    #[test]
    fn the_first_server_of_any_url_form() {
        assert_eq!(first_server("redis://r:7000"), Some(("r".into(), 7000)));
        assert_eq!(first_server("rediss://u:p@r/0"), Some(("r".into(), 6379)));
        assert_eq!(
            first_server("redis-cluster://:pw@10.0.0.1:7001,10.0.0.2:7002"),
            Some(("10.0.0.1".into(), 7001))
        );
        assert_eq!(first_server("nonsense"), None);
    }
}
