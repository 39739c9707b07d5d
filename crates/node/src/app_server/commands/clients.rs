//! Messages about one of the app server's own clients: its bytes, and its close.

use std::sync::Arc;

use switchyard_core::{CloseReason, ConnectionId, Payloads, Protocol, Target};
use switchyard_service_protocol::{
    ClientInvocation, CloseConnection, ConnectionData, ErrorCompletion, Extensions, ServiceMessage,
};

use super::AppServers;
use crate::app_server::{LinkedClient, ServerConnection};
use crate::cluster::Invocation;
use crate::command::Command;

/// The client of this app server that `id` names, if it is pinned here. Only the app server
/// a client is pinned to may write to it: another server's half messages would corrupt its
/// stream.
fn pinned_client(
    app: &AppServers,
    connection: &ServerConnection,
    id: &ConnectionId,
) -> Option<Arc<dyn LinkedClient>> {
    connection.client(id).or_else(|| {
        app.default_mode
            .servers
            .find_client(&connection.hub, id)
            .filter(|client| {
                client
                    .link()
                    .lock()
                    .as_ref()
                    .and_then(|link| link.server.as_ref())
                    .is_some_and(|server| server.server_id == connection.server_id)
            })
    })
}

/// ConnectionData: bytes for one client.
pub(super) fn relay(app: &AppServers, connection: &ServerConnection, data: ConnectionData) {
    let client = ConnectionId::new(&data.connection_id)
        .ok()
        .and_then(|id| pinned_client(app, connection, &id));
    match client {
        Some(client) => app.default_mode.relay(&*client, data.payload),
        None => tracing::debug!(connection = %data.connection_id, "data for a client that is gone"),
    }
}

/// CloseConnection: the app server ends one of its clients (or any connection of the hub).
pub(super) async fn close(app: &AppServers, connection: &ServerConnection, close: CloseConnection) {
    let Ok(id) = ConnectionId::new(&close.connection_id) else {
        return;
    };
    let reason = (!close.error_message.is_empty()).then_some(close.error_message);
    // Found through the server connections: a client still waiting for its handshake
    // response is not in the hub yet.
    let client = connection
        .client(&id)
        .or_else(|| app.default_mode.servers.find_client(&connection.hub, &id));
    match client {
        Some(client) => client.connection().close(CloseReason::ClosedByApi(reason)),
        None => {
            let command = Command::Close {
                target: Target::Connection(id),
                excluded: Vec::new(),
                reason,
            };
            // A connection that does not exist is already closed.
            let _ = app.executor.execute(&connection.hub, command).await;
        }
    }
}

/// ClientInvocation: a result asked of a client. A client held by another node is asked
/// there (the node answers on the caller's connection to it); a client nobody holds fails
/// the invocation at once. The reader waits for the other node's answer, like an
/// acknowledged command, so what the app server sends next cannot overtake the invocation.
pub(super) async fn invoke(
    app: &AppServers,
    connection: &Arc<ServerConnection>,
    call: ClientInvocation,
) {
    let local = ConnectionId::new(&call.connection_id)
        .ok()
        .filter(|id| app.default_mode.holds_client(&connection.hub, id));
    let remote = match (local, app.cluster.in_cluster()) {
        (None, true) => ConnectionId::new(&call.connection_id).ok(),
        _ => None,
    };
    let Some(id) = remote else {
        app.default_mode.invoke(connection, call);
        return;
    };
    // While this node cannot hear the cluster, asking would hold this connection's reader
    // (and its own clients' traffic) for the publish timeout: fail the invocation at once.
    let reachable = app.cluster.members().backplane_healthy();
    // Answers go to the app server this connection belongs to, whatever the message says.
    let invocation = Invocation {
        connection: id,
        invocation_id: call.invocation_id.clone(),
        caller_server_id: connection.server_id.to_string(),
        payloads: call
            .payloads
            .iter()
            .fold(Payloads::new(), |payloads, (name, bytes)| {
                payloads.with(Protocol::from_name(name), bytes.clone())
            }),
    };
    let error = if !reachable {
        format!(
            "Connection '{}' is not on this service instance, and the others cannot be reached now.",
            call.connection_id
        )
    } else if !app
        .cluster
        .invoke_elsewhere(&connection.hub, invocation)
        .await
    {
        format!("Connection '{}' does not exist.", call.connection_id)
    } else {
        return;
    };
    connection.send(&ServiceMessage::ErrorCompletion(ErrorCompletion {
        error,
        invocation_id: call.invocation_id,
        connection_id: call.connection_id,
        caller_server_id: call.caller_server_id,
        ext: Extensions::default(),
    }));
}
