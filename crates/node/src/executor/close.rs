//! Closing connections, wherever they are.

use switchyard_core::{CloseReason, ConnectionId, HubName, Message, Target};

use super::{channels_for, Executor};
use crate::cluster::Question;
use crate::command::Missing;

impl Executor {
    /// A single connection held elsewhere is closed by its owner, so that a missing one is a
    /// miss; anything else is published to whoever holds the target's connections.
    pub(super) async fn close(
        &self,
        hub: &HubName,
        target: Target,
        excluded: Vec<ConnectionId>,
        reason: Option<String>,
    ) -> Result<(), Missing> {
        if let Target::Connection(connection) = &target {
            if !self.holds(hub, connection) {
                if excluded.contains(connection) {
                    return Ok(());
                }
                let question = Question::CloseConnection {
                    connection: connection.clone(),
                    reason,
                };
                return self.ask_owner(hub, connection, question).await;
            }
        }
        let channels = channels_for(hub, &target);
        self.cluster.publish(
            channels.clone(),
            Message::Close {
                hub: hub.clone(),
                target,
                excluded,
                reason: CloseReason::ClosedByApi(reason),
            },
        );
        self.cluster.settled_on(hub, channels).await;
        Ok(())
    }
}
