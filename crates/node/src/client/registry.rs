//! The client endpoint's state: the table of this node's client connections, what serving
//! them needs (the executor, Default mode, the upstream), their timers and their ends.

use std::borrow::Borrow;
use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::RwLock;
use switchyard_auth::VerifiedToken;
use switchyard_core::{clock::unix_now, CloseReason, HubName};

use super::{ClientConnection, Expiry};
use crate::config::{ServiceMode, ValidConfig};
use crate::default_mode::DefaultMode;
use crate::executor::Executor;
use crate::metrics::{Metrics, ReasonLabel, TransportLabel};
use crate::upstream::Upstream;

pub(crate) struct Clients {
    pub(crate) executor: Arc<Executor>,
    pub(crate) default_mode: Arc<DefaultMode>,
    /// Serverless upstream webhooks; `None` without templates.
    pub(crate) upstream: Option<Arc<Upstream>>,
    /// Client connections by the value clients put in `id=` (token for negotiate v1,
    /// connection id for v0 and for connections made without negotiate).
    table: RwLock<HashSet<ClientEntry>>,
    started: Instant,
}

/// An entry of the client table, found by its connection's `key`: the key is not copied into
/// the table, and an entry is one pointer (not a `String` and an `Arc`).
struct ClientEntry(Arc<ClientConnection>);

impl Borrow<str> for ClientEntry {
    fn borrow(&self) -> &str {
        &self.0.key
    }
}

// Hash and Eq agree with `str`'s, as `Borrow<str>` requires.
impl Hash for ClientEntry {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.key.hash(state);
    }
}

impl PartialEq for ClientEntry {
    fn eq(&self, other: &Self) -> bool {
        self.0.key == other.0.key
    }
}

impl Eq for ClientEntry {}

impl Clients {
    pub(crate) fn new(
        executor: Arc<Executor>,
        default_mode: Arc<DefaultMode>,
        upstream: Option<Arc<Upstream>>,
    ) -> Clients {
        Clients {
            executor,
            default_mode,
            upstream,
            table: RwLock::new(HashSet::new()),
            started: Instant::now(),
        }
    }

    pub(crate) fn config(&self) -> &ValidConfig {
        self.executor.config()
    }

    pub(crate) fn metrics(&self) -> &Metrics {
        self.executor.metrics()
    }

    /// Milliseconds since the node started: the clock of per-connection timers.
    pub(crate) fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Whether a client of `hub` with this token is carried to an app server (Default mode)
    /// rather than served here. Decided when the client connects.
    pub(crate) fn serves_default_mode(&self, hub: &HubName, token: &VerifiedToken) -> bool {
        match self.config().mode {
            ServiceMode::Serverless => false,
            ServiceMode::Default => true,
            // A token naming an app server (`asrs.s.sn`) was issued by an app server's SDK.
            ServiceMode::Auto => {
                self.default_mode.servers.seen(hub) || token.claim("asrs.s.sn").is_some()
            }
        }
    }

    pub(crate) fn count(&self) -> usize {
        self.table.read().len()
    }

    pub(crate) fn insert(&self, client: Arc<ClientConnection>) -> bool {
        let mut table = self.table.write();
        let limit = self.config().limits.max_client_connections;
        if limit != 0 && table.len() >= limit {
            return false;
        }
        table.replace(ClientEntry(client));
        self.metrics().connections_opened.inc();
        true
    }

    pub(crate) fn get(&self, key: &str) -> Option<Arc<ClientConnection>> {
        self.table.read().get(key).map(|entry| entry.0.clone())
    }

    pub(crate) fn at_connection_limit(&self) -> bool {
        let limit = self.config().limits.max_client_connections;
        limit != 0 && self.table.read().len() >= limit
    }

    /// Removes a client from every index and tells whoever follows it (its app server, the
    /// upstream). Safe to call more than once.
    pub(crate) fn finish(&self, client: &Arc<ClientConnection>) {
        if !client.mark_finished() {
            return;
        }
        // The first reason given wins; a connection that just went away closed itself.
        let reason = client
            .connection
            .outbound()
            .close_reason()
            .unwrap_or(CloseReason::ClientClosed);
        client.connection.close(CloseReason::ClientClosed);
        client.hub.remove_connection(client.connection.id());
        self.default_mode.client_finished(&**client, &reason);
        if let Some(upstream) = &self.upstream {
            upstream.client_finished(client, &reason);
        }
        self.table.write().remove(&*client.key);
        let metrics = self.metrics();
        if let Some(transport) = client.transport() {
            metrics
                .client_connections
                .get_or_create(&TransportLabel {
                    transport: transport.name(),
                })
                .dec();
        }
        metrics
            .connections_closed
            .get_or_create(&ReasonLabel {
                reason: reason.code(),
            })
            .inc();
    }

    fn all(&self) -> Vec<Arc<ClientConnection>> {
        self.table
            .read()
            .iter()
            .map(|entry| entry.0.clone())
            .collect()
    }

    /// Timeouts, inactivity, expired tokens: run every second.
    pub(crate) fn check_timers(&self) {
        let now_ms = self.now_ms();
        let now_unix = unix_now();
        for client in self.all() {
            if let Some(expired) = client.check_timers(self, now_ms, now_unix) {
                match expired {
                    Expiry::Close(CloseReason::HandshakeTimeout) => {
                        client.refuse_late_handshake();
                    }
                    Expiry::Close(reason) => client.connection.close(reason),
                    Expiry::Discard => self.finish(&client),
                }
            }
        }
    }

    /// Closes every client (allow-reconnect) and waits up to `drain` for them to go.
    pub(crate) async fn close_all(&self, drain: Duration) {
        for client in self.all() {
            if client.transport().is_none() {
                self.finish(&client); // negotiated but never connected: nobody to tell
            } else {
                client.connection.close(CloseReason::ServiceShutdown);
            }
        }
        let deadline = Instant::now() + drain;
        while self.count() > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
