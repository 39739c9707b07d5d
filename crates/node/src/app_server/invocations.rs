//! Client results across app servers (ClientInvocation): an app server asks a client for a
//! result with ClientInvocation; if the client is pinned to another app server, that one
//! routes the client's answer back as ClientCompletion, which the service forwards to the
//! caller. The service remembers each routed invocation until it completes, the client goes,
//! or ten minutes pass.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use switchyard_core::{ConnectionId, HubName};
use switchyard_router::TrafficTotals;
use switchyard_service_protocol::{
    ClientInvocation, ErrorCompletion, Extensions, ServiceMapping, ServiceMessage,
};

use super::{LinkedClient, ServerConnection, Servers};

/// How long a routed invocation is remembered (Azure's cache limit).
const PENDING_LIMIT: Duration = Duration::from_secs(600);

struct Pending {
    hub: HubName,
    connection: ConnectionId,
    caller_server_id: Arc<str>,
    /// The connection the invocation came on: answers go back there first.
    caller: Arc<ServerConnection>,
    created: Instant,
}

pub(crate) struct Invocations {
    /// By hub and invocation id: an app server of one hub cannot complete (or overwrite) an
    /// invocation of another hub.
    pending: Mutex<HashMap<(HubName, String), Pending>>,
    /// Routed invocations remembered at once (`limits.max_pending_invocations`); beyond it
    /// new ones fail at once instead of growing memory for ten minutes.
    max_pending: usize,
}

impl Invocations {
    pub(crate) fn new(max_pending: usize) -> Invocations {
        Invocations {
            pending: Mutex::default(),
            max_pending,
        }
    }

    /// ClientInvocation from app server connection `from`; `refused` counts one turned away
    /// by the limit.
    pub(crate) fn invoke(
        &self,
        servers: &Servers,
        instance_id: &str,
        from: &Arc<ServerConnection>,
        call: ClientInvocation,
        refused: impl FnOnce(),
    ) {
        // A client still waiting for its handshake response must not get hub messages yet.
        let client = ConnectionId::new(&call.connection_id)
            .ok()
            .and_then(|id| servers.find_client(&from.hub, &id))
            .filter(|client| client.handshake_done());
        let Some(client) = client else {
            from.send(&ServiceMessage::ErrorCompletion(ErrorCompletion {
                invocation_id: call.invocation_id,
                connection_id: call.connection_id.clone(),
                caller_server_id: call.caller_server_id,
                error: format!("Connection '{}' does not exist.", call.connection_id),
                ext: Extensions::default(),
            }));
            return;
        };
        let router = client.link().lock().as_ref().and_then(|l| l.server.clone());
        let caller_server_id: Arc<str> = Arc::from(call.caller_server_id.as_str());
        // `None`: the caller hosts the client and sees the answer itself.
        let router = router.filter(|r| r.server_id != caller_server_id);
        if router.is_some() && self.pending.lock().len() >= self.max_pending {
            refused();
            from.send(&ServiceMessage::ErrorCompletion(ErrorCompletion {
                invocation_id: call.invocation_id,
                connection_id: call.connection_id,
                caller_server_id: call.caller_server_id,
                error: format!(
                    "Too many client invocations are pending on this service (limit {}, limits.max_pending_invocations).",
                    self.max_pending
                ),
                ext: Extensions::default(),
            }));
            return;
        }
        let payload = client.connection().protocol().and_then(|protocol| {
            call.payloads
                .iter()
                .find(|(name, _)| name.eq_ignore_ascii_case(protocol.name()))
                .map(|(_, payload)| payload.clone())
        });
        // The routing server hears of the invocation before the client does: a client that
        // answers at once sends its completion to that server, which must know the id by then
        // (both travel on its one connection, in order), and the completion must find it
        // pending here.
        if let Some(router) = router {
            self.route(instance_id, from, &client, caller_server_id, &router, call);
        }
        if let Some(payload) = payload {
            let mut totals = TrafficTotals::default();
            totals.add_out(payload.len());
            client.hub().deliver(client.connection(), payload, &totals);
        }
    }

    /// Remembers a routed invocation and tells the caller and the routing server of it.
    fn route(
        &self,
        instance_id: &str,
        from: &Arc<ServerConnection>,
        client: &Arc<dyn LinkedClient>,
        caller_server_id: Arc<str>,
        router: &Arc<ServerConnection>,
        call: ClientInvocation,
    ) {
        self.pending.lock().insert(
            (from.hub.clone(), call.invocation_id.clone()),
            Pending {
                hub: from.hub.clone(),
                connection: client.connection().id().clone(),
                caller_server_id,
                caller: from.clone(),
                created: Instant::now(),
            },
        );
        from.send(&ServiceMessage::ServiceMapping(ServiceMapping {
            invocation_id: call.invocation_id.clone(),
            connection_id: call.connection_id.clone(),
            instance_id: instance_id.to_string(),
            ext: Extensions::default(),
        }));
        router.send(&ServiceMessage::ClientInvocation(call));
    }

    /// ClientCompletion or ErrorCompletion from an app server: forwarded to the caller when
    /// another server routed it; from the caller itself it only ends the bookkeeping.
    pub(crate) fn complete(
        &self,
        servers: &Servers,
        from: &Arc<ServerConnection>,
        invocation_id: &str,
        message: ServiceMessage,
    ) {
        let key = (from.hub.clone(), invocation_id.to_string());
        let Some(pending) = self.pending.lock().remove(&key) else {
            return;
        };
        if pending.caller_server_id == from.server_id {
            return;
        }
        if let Some(caller) = servers.of_server(
            &pending.hub,
            &pending.caller_server_id,
            Some(&pending.caller),
        ) {
            caller.send(&message);
        }
    }

    /// A client left: its callers on other servers get an error completion.
    pub(crate) fn client_gone(&self, servers: &Servers, hub: &HubName, connection: &ConnectionId) {
        let gone: Vec<(String, Pending)> = {
            let mut pending = self.pending.lock();
            if pending.is_empty() {
                return;
            }
            let keys: Vec<(HubName, String)> = pending
                .iter()
                .filter(|(_, p)| &p.connection == connection && &p.hub == hub)
                .map(|(key, _)| key.clone())
                .collect();
            keys.into_iter()
                .filter_map(|key| pending.remove(&key).map(|p| (key.1, p)))
                .collect()
        };
        for (id, pending) in gone {
            fail(servers, id, pending, "Connection disconnected.");
        }
    }

    /// Drops invocations older than the limit, telling their callers.
    pub(crate) fn sweep(&self, servers: &Servers, now: Instant) {
        let expired: Vec<(String, Pending)> = {
            let mut pending = self.pending.lock();
            if pending.is_empty() {
                return;
            }
            let keys: Vec<(HubName, String)> = pending
                .iter()
                .filter(|(_, p)| now.duration_since(p.created) > PENDING_LIMIT)
                .map(|(key, _)| key.clone())
                .collect();
            keys.into_iter()
                .filter_map(|key| pending.remove(&key).map(|p| (key.1, p)))
                .collect()
        };
        for (id, pending) in expired {
            fail(
                servers,
                id,
                pending,
                "The client did not answer the invocation within 10 minutes.",
            );
        }
    }
}

fn fail(servers: &Servers, invocation_id: String, pending: Pending, error: &str) {
    if let Some(caller) = servers.of_server(
        &pending.hub,
        &pending.caller_server_id,
        Some(&pending.caller),
    ) {
        caller.send(&ServiceMessage::ErrorCompletion(ErrorCompletion {
            invocation_id,
            connection_id: pending.connection.as_str().to_string(),
            caller_server_id: pending.caller_server_id.to_string(),
            error: error.to_string(),
            ext: Extensions::default(),
        }));
    }
}
