//! Default mode's state on one node: the app-server connections, the clients pinned to them
//! and the client invocations routed between them. Written against [`LinkedClient`], a narrow
//! view of a client, so nothing here knows transports or the client table.

use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use switchyard_core::{ConnectionId, HubName};
use switchyard_router::{Connection, Hub};
use switchyard_service_protocol::ClientInvocation;

use super::invocations::Invocations;
use super::{link, nodes, DefaultLink, ServerConnection, Servers};
use crate::budget::{ByteBudget, Full, Slot, Slots};
use crate::config::Config;
use crate::live_trace::Tracer;
use crate::metrics::Metrics;

/// What Default mode needs of a client connection.
pub(crate) trait LinkedClient: Send + Sync {
    /// The client as the router knows it: id, protocol, outbound queue.
    fn connection(&self) -> &Arc<Connection>;
    fn hub(&self) -> &Arc<Hub>;
    /// The client's way to its app server; every path that moves or relays to the client
    /// holds this lock.
    fn link(&self) -> &Mutex<Option<Box<DefaultLink>>>;
    fn is_finished(&self) -> bool;
    fn handshake_done(&self) -> bool;
    /// The app server's handshake response went out to the client.
    fn mark_handshake_done(&self);
    /// Whether the app server may be asked to pause sending to this client
    /// (ConnectionFlowControl); the client's transport resumes it once it has written the
    /// backlog.
    fn note_flow_paused(&self, _paused: bool) {}
}

/// Default mode on one node: its app-server connections and the client invocations routed
/// between them.
pub(crate) struct DefaultMode {
    pub(crate) servers: Servers,
    pub(super) invocations: Invocations,
    /// This run of the node, named to app servers as the instance hosting a client
    /// (ServiceMapping, `Asrs-Instance-Id`, `target` and `offline` pings).
    pub(super) instance_id: String,
    pub(super) targeted: Mutex<nodes::Targeted>,
    pub(super) self_asked: Mutex<nodes::SelfAsked>,
    pub(super) adopting: nodes::AdoptingSet,
    pub(super) max_server_message_size: usize,
    pub(super) max_pending_bytes_per_server_connection: usize,
    /// App servers' half-received messages, node-wide (`limits.max_relay_buffered_bytes`).
    pub(super) relay_budget: Arc<ByteBudget>,
    /// App-server connections, in all and per hub (`limits.max_server_connections*`).
    pub(super) server_slots: Arc<Slots<HubName>>,
    pub(super) metrics: Arc<Metrics>,
    /// What app servers send their clients shows in the live trace.
    pub(super) tracer: Arc<Tracer>,
}

impl DefaultMode {
    pub(crate) fn new(
        config: &Config,
        instance_id: String,
        metrics: &Arc<Metrics>,
        tracer: Arc<Tracer>,
    ) -> DefaultMode {
        let limits = &config.limits;
        DefaultMode {
            tracer,
            servers: Servers::default(),
            invocations: Invocations::new(limits.max_pending_invocations),
            relay_budget: ByteBudget::new(
                limits.max_relay_buffered_bytes,
                metrics.relay_buffered_bytes.clone(),
            ),
            server_slots: Slots::new(
                limits.max_server_connections,
                limits.max_server_connections_per_hub,
            ),
            metrics: metrics.clone(),
            instance_id,
            targeted: Mutex::default(),
            self_asked: Mutex::default(),
            adopting: Default::default(),
            max_server_message_size: config.limits.max_server_message_size,
            max_pending_bytes_per_server_connection: config
                .limits
                .max_pending_bytes_per_server_connection,
        }
    }

    /// A place for one more app-server connection of `hub`, held until the returned guard
    /// drops; `Err` says which limit is reached, in words for the app server.
    pub(crate) fn take_server_slot(&self, hub: &HubName) -> Result<Slot<HubName>, String> {
        self.server_slots.take(hub).map_err(|full| {
            let (limit, text) = match full {
                Full::All(max) => (
                    "server_connections",
                    format!("this node holds its maximum of {max} app-server connections (limits.max_server_connections)"),
                ),
                Full::Key(max) => (
                    "server_connections_per_hub",
                    format!("hub '{hub}' has its maximum of {max} app-server connections on this node (limits.max_server_connections_per_hub)"),
                ),
            };
            self.metrics.refused(limit);
            text
        })
    }

    /// Outbound bytes one app-server connection may have queued.
    pub(crate) fn max_pending_bytes_per_server_connection(&self) -> usize {
        self.max_pending_bytes_per_server_connection
    }

    /// ClientInvocation from app-server connection `from`.
    pub(crate) fn invoke(&self, from: &Arc<ServerConnection>, call: ClientInvocation) {
        self.invocations
            .invoke(&self.servers, &self.instance_id, from, call, || {
                self.metrics.refused("pending_invocations")
            });
    }

    /// ClientCompletion or ErrorCompletion from an app server.
    pub(crate) fn complete(
        &self,
        from: &Arc<ServerConnection>,
        invocation_id: &str,
        message: switchyard_service_protocol::ServiceMessage,
    ) {
        self.invocations
            .complete(&self.servers, from, invocation_id, message);
    }

    pub(super) fn client_gone(&self, hub: &HubName, connection: &ConnectionId) {
        self.invocations.client_gone(&self.servers, hub, connection);
    }

    /// Ends routed invocations that waited too long.
    pub(crate) fn sweep(&self, now: Instant) {
        self.invocations.sweep(&self.servers, now);
    }

    /// Moves or closes every client of a server connection that is gone or draining.
    ///
    /// `lost`: the connection itself is gone (its clients cannot stay). Otherwise the app server
    /// asked to migrate its clients away (graceful shutdown with MigrateClients).
    pub(crate) fn relocate_clients(&self, from: &Arc<ServerConnection>, lost: bool) {
        let clients = if lost {
            from.take_clients()
        } else {
            from.clients_snapshot()
        };
        for client in clients {
            let target = if lost && !from.migrate {
                None
            } else {
                self.servers.pick_migration_target(from, !lost)
            };
            match target {
                // Detaches the client from `from` if it is still pinned there.
                Some(target) => link::migrate(&client, from, &target, !lost),
                None if lost => link::close_if_pinned(&*client, from),
                // Draining with nowhere to go: the client stays until its connection ends.
                None => {}
            }
        }
    }
}
