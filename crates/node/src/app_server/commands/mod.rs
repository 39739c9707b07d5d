//! What each message from an app server does. A message that routes or changes membership
//! becomes a [`Command`] (`routing`), applied by the executor like a REST call; the rest
//! concern the app server's own clients (`clients`), the connection itself (`control`) and
//! queries that answer with data (`queries`).

mod clients;
mod control;
mod queries;
mod routing;

use std::sync::Arc;

use switchyard_core::NameError;
use switchyard_service_protocol::{Ack, AckStatus, ServiceMessage};

use super::AppServers;
use crate::app_server::ServerConnection;
use crate::command::{Command, Missing};
use routing::Parsed;

/// One message from the app server, in arrival order. A command that needs other nodes'
/// answers holds the next message until it is done, so what follows sees its effect.
pub(super) async fn handle(
    app: &AppServers,
    connection: &Arc<ServerConnection>,
    message: ServiceMessage,
) {
    let message = match routing::parse(message) {
        Parsed::Command { command, ack_id } => {
            let outcome = match command {
                Ok(command) => execute(app, connection, command)
                    .await
                    .map_err(Refused::Missing),
                Err(name) => Err(Refused::Name(name)),
            };
            match (ack_id, outcome) {
                (Some(ack_id), outcome) => answer(connection, ack_id, outcome),
                (None, Err(refused)) => {
                    tracing::debug!(%refused, "an app server's command did nothing")
                }
                (None, Ok(())) => {}
            }
            return;
        }
        Parsed::Other(message) => message,
    };
    match message {
        ServiceMessage::Ping(ping) => control::ping(app, connection, ping),
        ServiceMessage::ConnectionData(data) => clients::relay(app, connection, data),
        ServiceMessage::CloseConnection(close) => clients::close(app, connection, close).await,
        ServiceMessage::ClientInvocation(call) => clients::invoke(app, connection, call).await,
        ServiceMessage::ClientCompletion(ref done) => {
            let id = done.invocation_id.clone();
            app.default_mode.complete(connection, &id, message);
        }
        ServiceMessage::ErrorCompletion(ref failed) => {
            let id = failed.invocation_id.clone();
            app.default_mode.complete(connection, &id, message);
        }
        ServiceMessage::GroupMemberQuery(query) => {
            queries::group_members(app, connection, query).await
        }
        ServiceMessage::AccessKeyRequest(request) => control::access_key(connection, request),
        ServiceMessage::ConnectionFlowControl(_) | ServiceMessage::ConnectionReconnect(_) => {}
        ServiceMessage::Unknown { type_id } => {
            // Newer SDKs may send types this service does not know; ignoring keeps them working.
            tracing::debug!(type_id, "ignoring an unknown service message type");
        }
        other => {
            tracing::warn!(
                message = other.name(),
                "ignoring a message an app server does not send"
            );
        }
    }
}

async fn execute(
    app: &AppServers,
    connection: &ServerConnection,
    command: Command,
) -> Result<(), Missing> {
    app.executor.execute(&connection.hub, command).await
}

/// Why a command was not carried out.
#[derive(Debug, thiserror::Error)]
enum Refused {
    #[error("{0}")]
    Name(NameError),
    #[error("{0}")]
    Missing(Missing),
}

/// The one place an outcome becomes an Ack: a miss or a name no connection, user or group can
/// have is NotFound (the SDK turns it into `false`), with the reason as its message.
fn answer(connection: &ServerConnection, ack_id: i32, outcome: Result<(), Refused>) {
    let ack = match outcome {
        Ok(()) => Ack::new(ack_id, AckStatus::Ok, ""),
        // A limit is not a "no": the SDK raises an error with the text.
        Err(Refused::Missing(missing)) if missing.is_limit() => {
            Ack::new(ack_id, AckStatus::InternalServerError, missing.to_string())
        }
        Err(refused) => Ack::new(ack_id, AckStatus::NotFound, refused.to_string()),
    };
    connection.send(&ServiceMessage::Ack(ack));
}
