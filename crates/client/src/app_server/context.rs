//! [`HubContext`]: sending to clients through the service the way the SDK's
//! `ServiceLifetimeManager` does (spec §1.7).
//!
//! A context made for a client's invocation is "scoped" to that client's server
//! connection: everything it sends goes over that one WebSocket, which is what keeps a
//! sender's messages in order. An unscoped context picks connections round-robin.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;
use switchyard_hub_protocol::{encode_invocation, encode_message, Format, HubMessage};
use switchyard_service_protocol::{
    BroadcastData, CheckConnectionExistenceWithAck, CheckGroupExistenceWithAck,
    CheckUserExistenceWithAck, CheckUserInGroupWithAck, ClientInvocation, CloseConnection,
    CloseGroupConnectionsWithAck, CloseUserConnectionsWithAck, Extensions, GroupBroadcastData,
    JoinGroupWithAck, LeaveGroupWithAck, MultiConnectionData, MultiGroupBroadcastData,
    MultiUserData, Payloads, ServiceMessage, UserData, UserJoinGroupWithAck, UserLeaveGroupWithAck,
};

use super::hub::Hub;
use super::link::Link;
use super::{AckError, InvokeError, NotConnected};

/// How long a client result is waited for (the service keeps it at most 10 minutes).
const CLIENT_RESULT_TIMEOUT: Duration = Duration::from_secs(600);

const FORMATS: [Format; 2] = [Format::Json, Format::MessagePack];

/// Sends for one hub; cheap to clone.
#[derive(Clone)]
pub struct HubContext {
    pub(super) hub: Arc<Hub>,
    pub(super) scope: Option<Arc<Link>>,
}

/// An Invocation of `target(arguments)` framed once per protocol.
pub fn payloads(target: &str, arguments: &[Value]) -> Payloads {
    FORMATS
        .iter()
        .map(|&f| (f.name().to_owned(), encode_invocation(f, target, arguments)))
        .collect()
}

fn payload_for(format: Format, target: &str, arguments: &[Value]) -> Payloads {
    vec![(
        format.name().to_owned(),
        encode_invocation(format, target, arguments),
    )]
}

impl HubContext {
    pub fn hub_name(&self) -> &str {
        &self.hub.name
    }

    /// This app server's id (`X-ASRS-Server-Id`).
    pub fn server_id(&self) -> &str {
        self.hub.info.server_id()
    }

    /// Clients connected to this app server, over all its hubs.
    pub fn server_client_count(&self) -> usize {
        self.hub
            .info
            .clients
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The connection this context writes to: its scope while usable, else round-robin.
    fn link(&self) -> Result<Arc<Link>, NotConnected> {
        match &self.scope {
            Some(link) if link.is_writable() => Ok(link.clone()),
            _ => self
                .hub
                .any_link()
                .ok_or_else(|| NotConnected(self.hub.name.clone())),
        }
    }

    fn send(&self, message: impl Into<ServiceMessage>) -> Result<(), NotConnected> {
        let message = message.into();
        // One retry on another connection if the chosen one died meanwhile.
        for _ in 0..2 {
            if self.link()?.send(message.clone()) {
                return Ok(());
            }
        }
        Err(NotConnected(self.hub.name.clone()))
    }

    /// To one connection: MultiConnectionData with one id, carrying only that client's
    /// protocol when it is connected here, else every protocol.
    pub fn send_connection(
        &self,
        connection_id: &str,
        target: &str,
        arguments: &[Value],
    ) -> Result<(), NotConnected> {
        let local = self.hub.client(connection_id).and_then(|c| c.format());
        let payloads = match local {
            Some(format) => payload_for(format, target, arguments),
            None => payloads(target, arguments),
        };
        self.send(MultiConnectionData {
            connection_list: vec![connection_id.to_owned()],
            payloads,
            ext: Extensions::default(),
        })
    }

    pub fn send_connections(
        &self,
        connection_ids: &[String],
        target: &str,
        arguments: &[Value],
    ) -> Result<(), NotConnected> {
        self.send(MultiConnectionData {
            connection_list: connection_ids.to_vec(),
            payloads: payloads(target, arguments),
            ext: Extensions::default(),
        })
    }

    pub fn send_user(
        &self,
        user: &str,
        target: &str,
        arguments: &[Value],
    ) -> Result<(), NotConnected> {
        self.send(UserData {
            user_id: user.to_owned(),
            payloads: payloads(target, arguments),
            ext: Extensions::default(),
        })
    }

    pub fn send_users(
        &self,
        users: &[String],
        target: &str,
        arguments: &[Value],
    ) -> Result<(), NotConnected> {
        self.send(MultiUserData {
            user_list: users.to_vec(),
            payloads: payloads(target, arguments),
            ext: Extensions::default(),
        })
    }

    /// To every client of the hub except `excluded` connection ids.
    pub fn send_all(
        &self,
        excluded: &[String],
        target: &str,
        arguments: &[Value],
    ) -> Result<(), NotConnected> {
        self.send(BroadcastData {
            excluded_list: excluded.to_vec(),
            payloads: payloads(target, arguments),
            ext: Extensions::default(),
        })
    }

    /// To a group except `excluded` connections.
    pub fn send_group(
        &self,
        group: &str,
        excluded: &[String],
        target: &str,
        arguments: &[Value],
    ) -> Result<(), NotConnected> {
        self.send_group_with(group, excluded, &[], None, target, arguments)
    }

    /// GroupBroadcastData with every field: excluded connections and users, and the
    /// caller's user id (for `OthersInGroup`-style sends).
    pub fn send_group_with(
        &self,
        group: &str,
        excluded: &[String],
        excluded_users: &[String],
        caller_user_id: Option<&str>,
        target: &str,
        arguments: &[Value],
    ) -> Result<(), NotConnected> {
        self.send(GroupBroadcastData {
            group_name: group.to_owned(),
            excluded_list: excluded.to_vec(),
            payloads: payloads(target, arguments),
            ext: Extensions::default(),
            excluded_user_list: excluded_users.to_vec(),
            caller_user_id: caller_user_id.map(str::to_owned),
        })
    }

    pub fn send_groups(
        &self,
        groups: &[String],
        target: &str,
        arguments: &[Value],
    ) -> Result<(), NotConnected> {
        self.send(MultiGroupBroadcastData {
            group_list: groups.to_vec(),
            payloads: payloads(target, arguments),
            ext: Extensions::default(),
        })
    }

    /// Sends an ackable message built for a fresh ack id and waits for the Ack:
    /// Ok → `true`, NotFound → `false`.
    async fn with_ack<M: Into<ServiceMessage>>(
        &self,
        build: impl FnOnce(i32) -> M,
    ) -> Result<bool, AckError> {
        let pending = self.hub.acks.register();
        if let Err(e) = self.send(build(pending.id)) {
            self.hub.acks.forget(pending.id);
            return Err(e.into());
        }
        self.hub.acks.wait(pending).await
    }

    /// JoinGroupWithAck.
    pub async fn add_to_group(&self, connection_id: &str, group: &str) -> Result<bool, AckError> {
        self.with_ack(|ack_id| JoinGroupWithAck {
            connection_id: connection_id.to_owned(),
            group_name: group.to_owned(),
            ack_id,
            ext: Extensions::default(),
        })
        .await
    }

    /// LeaveGroupWithAck; `None` = every group.
    pub async fn remove_from_group(
        &self,
        connection_id: &str,
        group: Option<&str>,
    ) -> Result<bool, AckError> {
        self.with_ack(|ack_id| LeaveGroupWithAck {
            connection_id: connection_id.to_owned(),
            group_name: group.map(str::to_owned),
            ack_id,
            ext: Extensions::default(),
        })
        .await
    }

    /// UserJoinGroupWithAck (no ttl).
    pub async fn add_user_to_group(&self, user: &str, group: &str) -> Result<bool, AckError> {
        self.with_ack(|ack_id| UserJoinGroupWithAck {
            user_id: user.to_owned(),
            group_name: group.to_owned(),
            ack_id,
            ext: Extensions::default(),
        })
        .await
    }

    /// UserLeaveGroupWithAck; `None` = every group.
    pub async fn remove_user_from_group(
        &self,
        user: &str,
        group: Option<&str>,
    ) -> Result<bool, AckError> {
        self.with_ack(|ack_id| UserLeaveGroupWithAck {
            user_id: user.to_owned(),
            group_name: group.map(str::to_owned),
            ack_id,
            ext: Extensions::default(),
        })
        .await
    }

    pub async fn connection_exists(&self, connection_id: &str) -> Result<bool, AckError> {
        self.with_ack(|ack_id| CheckConnectionExistenceWithAck {
            connection_id: connection_id.to_owned(),
            ack_id,
            ext: Extensions::default(),
        })
        .await
    }

    pub async fn user_exists(&self, user: &str) -> Result<bool, AckError> {
        self.with_ack(|ack_id| CheckUserExistenceWithAck {
            user_id: user.to_owned(),
            ack_id,
            ext: Extensions::default(),
        })
        .await
    }

    pub async fn group_exists(&self, group: &str) -> Result<bool, AckError> {
        self.with_ack(|ack_id| CheckGroupExistenceWithAck {
            group_name: group.to_owned(),
            ack_id,
            ext: Extensions::default(),
        })
        .await
    }

    pub async fn user_in_group(&self, user: &str, group: &str) -> Result<bool, AckError> {
        self.with_ack(|ack_id| CheckUserInGroupWithAck {
            user_id: user.to_owned(),
            group_name: group.to_owned(),
            ack_id,
            ext: Extensions::default(),
        })
        .await
    }

    /// CloseConnection A→S: the service closes the client with `reason`.
    pub fn close_connection(&self, connection_id: &str, reason: &str) -> Result<(), NotConnected> {
        self.send(CloseConnection {
            connection_id: connection_id.to_owned(),
            error_message: reason.to_owned(),
            headers: Vec::new(),
            ext: Extensions::default(),
        })
    }

    /// CloseUserConnectionsWithAck.
    pub async fn close_user(&self, user: &str, reason: &str) -> Result<bool, AckError> {
        self.with_ack(|ack_id| CloseUserConnectionsWithAck {
            user_id: user.to_owned(),
            reason: Some(reason.to_owned()),
            ack_id,
            excluded_list: Vec::new(),
            ext: Extensions::default(),
        })
        .await
    }

    /// CloseGroupConnectionsWithAck.
    pub async fn close_group(&self, group: &str, reason: &str) -> Result<bool, AckError> {
        self.with_ack(|ack_id| CloseGroupConnectionsWithAck {
            group_name: group.to_owned(),
            reason: Some(reason.to_owned()),
            ack_id,
            excluded_list: Vec::new(),
            ext: Extensions::default(),
        })
        .await
    }

    /// Invokes `method(arguments)` on one client and waits for its result (spec §1.9).
    pub async fn invoke_client(
        &self,
        connection_id: &str,
        method: &str,
        arguments: &[Value],
    ) -> Result<Value, InvokeError> {
        let (invocation_id, rx) = self.hub.results.start(connection_id);
        let message = HubMessage::Invocation {
            headers: Vec::new(),
            invocation_id: Some(invocation_id.clone()),
            target: method.to_owned(),
            arguments: arguments.to_vec(),
            stream_ids: None,
        };
        let payloads: Payloads = FORMATS
            .iter()
            .map(|&f| (f.name().to_owned(), encode_message(f, &message)))
            .collect::<Vec<(String, Bytes)>>();
        let sent = self.send(ClientInvocation {
            invocation_id: invocation_id.clone(),
            connection_id: connection_id.to_owned(),
            caller_server_id: self.hub.info.server_id().to_owned(),
            payloads,
            ext: Extensions::default(),
        });
        if let Err(e) = sent {
            self.hub.results.forget(&invocation_id);
            return Err(e.into());
        }
        match tokio::time::timeout(CLIENT_RESULT_TIMEOUT, rx).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(InvokeError::Disconnected(connection_id.to_owned())),
            Err(_) => {
                self.hub.results.forget(&invocation_id);
                Err(InvokeError::Timeout)
            }
        }
    }
}
