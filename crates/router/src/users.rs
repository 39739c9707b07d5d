//! The user index's values: a user's connections on one node.

use std::collections::HashMap;
use std::sync::Arc;

use switchyard_core::ConnectionId;

use crate::Connection;

pub(crate) type ConnectionMap = HashMap<ConnectionId, Arc<Connection>>;

/// A user's connections on this node. Most users hold one, which needs no map: a map of one
/// is a 116-byte table per user (dhat, 2,000 users).
pub(crate) enum UserConnections {
    One(Arc<Connection>),
    Many(ConnectionMap),
}

impl UserConnections {
    pub(crate) fn insert(&mut self, connection: Arc<Connection>) {
        match self {
            UserConnections::One(only) if only.id() == connection.id() => *only = connection,
            UserConnections::One(only) => {
                let mut map = ConnectionMap::with_capacity(2);
                map.insert(only.id().clone(), only.clone());
                map.insert(connection.id().clone(), connection);
                *self = UserConnections::Many(map);
            }
            UserConnections::Many(map) => {
                map.insert(connection.id().clone(), connection);
            }
        }
    }

    /// Removes `id`; true when no connection is left.
    pub(crate) fn remove(&mut self, id: &ConnectionId) -> bool {
        match self {
            UserConnections::One(only) => only.id() == id,
            UserConnections::Many(map) => {
                map.remove(id);
                if map.len() == 1 {
                    if let Some(last) = map.values().next().cloned() {
                        *self = UserConnections::One(last);
                    }
                    return false;
                }
                map.is_empty()
            }
        }
    }

    pub(crate) fn for_each(&self, visit: &mut dyn FnMut(&Arc<Connection>)) {
        match self {
            UserConnections::One(only) => visit(only),
            UserConnections::Many(map) => map.values().for_each(visit),
        }
    }
}
