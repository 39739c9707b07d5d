//! The benchmark's scenarios, defined once: `switchyard-bench` runs them (one subcommand
//! each), a report names its scenario by [`Scenario::name`], and `switchyard capacity` plans
//! the ones Azure's performance guide has figures for ([`Scenario::PLANNED`]).

use serde::{Deserialize, Serialize};

/// A benchmark scenario (Azure's performance guide plus a few of ours).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    /// Every sender invokes `Echo`; the app server answers the caller.
    Echo,
    /// Senders invoke `Broadcast`; every connection receives each message.
    Broadcast,
    /// Senders invoke `SendToGroup` for their own group (see --group-size / --groups).
    SendToGroup,
    /// Senders invoke `SendToConnection` for another connection.
    SendToConnection,
    /// REST callers `POST /api/hubs/{hub}/:send`; every connection receives each message.
    RestBroadcast,
    /// REST callers `POST /api/hubs/{hub}/users/{user}/:send`, one user per connection.
    RestSendToUser,
    /// REST callers `POST /api/hubs/{hub}/groups/{group}/:send`, caller c to group c mod
    /// the number of groups (see --group-size / --groups; members join by REST).
    RestSendToGroup,
    /// REST callers `POST /api/hubs/{hub}/connections/{id}/:send`, caller c to connection c.
    RestSendToConnection,
    /// REST callers alternate `PUT` / `DELETE /api/hubs/{hub}/groups/{group}/connections/{id}`
    /// for connection c (latency = the call's response).
    RestJoinLeaveGroup,
    /// Senders alternate `JoinGroup` / `LeaveGroup`, each acknowledged (latency = ack).
    JoinLeaveGroup,
    /// dotNetify's chat-room profile (Default mode): rooms (groups) of --group-size members
    /// (100 by default), each member joined at connect; 10 % of members post every 11 send
    /// intervals, 20 % every 59, the rest only read; a post (`SendToGroup`) reaches the
    /// whole room.
    ChatRoom,
    /// The chat room serverless: members join by REST, and a post is a REST send to the
    /// poster's room.
    RestChatRoom,
    /// Connections opened on a timetable (latency = negotiate + connect + handshake).
    ConnectRate,
    /// Connections held open; the service's memory per connection.
    Idle,
}

impl Scenario {
    pub const ALL: [Scenario; 14] = [
        Scenario::Echo,
        Scenario::Broadcast,
        Scenario::SendToGroup,
        Scenario::SendToConnection,
        Scenario::RestBroadcast,
        Scenario::RestSendToUser,
        Scenario::RestSendToGroup,
        Scenario::RestSendToConnection,
        Scenario::RestJoinLeaveGroup,
        Scenario::JoinLeaveGroup,
        Scenario::ChatRoom,
        Scenario::RestChatRoom,
        Scenario::ConnectRate,
        Scenario::Idle,
    ];

    /// The message scenarios the guide publishes per-unit figures for: the ones a capacity
    /// plan can describe.
    pub const PLANNED: [Scenario; 6] = [
        Scenario::Echo,
        Scenario::Broadcast,
        Scenario::SendToGroup,
        Scenario::SendToConnection,
        Scenario::RestBroadcast,
        Scenario::RestSendToUser,
    ];

    /// The name of its `switchyard-bench` subcommand and of its reports.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Echo => "echo",
            Scenario::Broadcast => "broadcast",
            Scenario::SendToGroup => "send-to-group",
            Scenario::SendToConnection => "send-to-connection",
            Scenario::RestBroadcast => "rest-broadcast",
            Scenario::RestSendToUser => "rest-send-to-user",
            Scenario::RestSendToGroup => "rest-send-to-group",
            Scenario::RestSendToConnection => "rest-send-to-connection",
            Scenario::RestJoinLeaveGroup => "rest-join-leave-group",
            Scenario::JoinLeaveGroup => "join-leave-group",
            Scenario::ChatRoom => "chat-room",
            Scenario::RestChatRoom => "rest-chat-room",
            Scenario::ConnectRate => "connect-rate",
            Scenario::Idle => "idle",
        }
    }

    pub fn from_name(name: &str) -> Option<Scenario> {
        Scenario::ALL.into_iter().find(|s| s.name() == name)
    }

    /// One of [`Scenario::PLANNED`].
    pub fn is_planned(self) -> bool {
        Scenario::PLANNED.contains(&self)
    }

    /// Hub methods on an app server (or a plain SignalR server) are needed.
    pub fn needs_app_server(self) -> bool {
        matches!(
            self,
            Scenario::Echo
                | Scenario::Broadcast
                | Scenario::SendToGroup
                | Scenario::SendToConnection
                | Scenario::JoinLeaveGroup
                | Scenario::ChatRoom
        )
    }

    /// Sends go through the REST API rather than client connections.
    pub fn is_rest(self) -> bool {
        matches!(
            self,
            Scenario::RestBroadcast
                | Scenario::RestSendToUser
                | Scenario::RestSendToGroup
                | Scenario::RestSendToConnection
                | Scenario::RestJoinLeaveGroup
                | Scenario::RestChatRoom
        )
    }

    /// Every connection receives each message.
    pub fn is_broadcast(self) -> bool {
        matches!(self, Scenario::Broadcast | Scenario::RestBroadcast)
    }

    /// The chat-room profile (its posters and timetable are fixed by the profile).
    pub fn is_chat_room(self) -> bool {
        matches!(self, Scenario::ChatRoom | Scenario::RestChatRoom)
    }

    /// Members join groups at connect and messages go to a group.
    pub fn uses_groups(self) -> bool {
        matches!(
            self,
            Scenario::SendToGroup
                | Scenario::RestSendToGroup
                | Scenario::ChatRoom
                | Scenario::RestChatRoom
        )
    }

    /// Each call addresses one connection or user, which it enters the cluster away from
    /// when REST enters several nodes.
    pub fn targets_one(self) -> bool {
        matches!(
            self,
            Scenario::RestSendToUser
                | Scenario::RestSendToConnection
                | Scenario::RestJoinLeaveGroup
        )
    }

    /// Messages are sent and measured.
    pub fn sends(self) -> bool {
        !matches!(self, Scenario::ConnectRate | Scenario::Idle)
    }

    /// Default number of sending connections (REST callers) for `connections`, as in
    /// Azure's guide: everyone sends for echo/group/connection, a few broadcast.
    pub fn default_senders(self, connections: u64) -> u64 {
        match self {
            Scenario::Broadcast | Scenario::RestBroadcast => connections.clamp(1, 10),
            Scenario::ConnectRate | Scenario::Idle => 0,
            _ => connections,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_match_serde() {
        for scenario in Scenario::ALL {
            assert_eq!(Scenario::from_name(scenario.name()), Some(scenario));
            let json = serde_json::to_string(&scenario).unwrap();
            assert_eq!(json, format!("\"{}\"", scenario.name()));
        }
        assert_eq!(Scenario::from_name("chat"), None);
        let planned: Vec<&str> = Scenario::PLANNED.iter().map(|s| s.name()).collect();
        assert_eq!(
            planned,
            [
                "echo",
                "broadcast",
                "send-to-group",
                "send-to-connection",
                "rest-broadcast",
                "rest-send-to-user"
            ]
        );
        assert!(!Scenario::ChatRoom.is_planned() && Scenario::Echo.is_planned());
    }
}
