//! The app-server endpoint `/server/?hub=` (Azure's service protocol, Default mode) driven
//! with raw frames the way the .NET server SDK drives it, against a real node on port 0:
//! VarInt-framed MessagePack messages in binary WebSocket frames, sometimes split at odd
//! points, and SignalR clients (JSON and MessagePack) whose traffic the node relays.
//!
//! One file per concern; the raw-frame app server and client come from the shared test kit
//! (`switchyard-testkit`).

#[path = "../common/mod.rs"]
mod common;

mod auth;
mod handshakes;
mod invocations;
mod lifecycle;
mod limits;
mod migration;
mod order;
mod pings;
mod regressions;
mod relay;
mod routing;
mod unexpected;

use std::time::Duration;

#[allow(unused_imports)]
use handshakes::{expect_handshake_refused, garbage_closes_only_that_connection};
#[allow(unused_imports)]
use lifecycle::client_lifecycle;
#[allow(unused_imports)]
use order::{numbered, to_connection};
#[allow(unused_imports)]
use relay::open_weak;
#[allow(unused_imports)]
use routing::members_page;

use bytes::{Bytes, BytesMut};
use common::{
    connect_client, default_mode, dial, dial_url, eventually, eventually_async, handshake_request,
    header, now, refused_status, sticky_token, within, AppServer, Http, Msg, RawClient as Client,
    TestServer, NOT_FOUND, OK, WAIT,
};
use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use switchyard_auth::TokenBuilder;
use switchyard_hub_protocol::{handshake, Format, FrameSplitter, HubMessage};
use switchyard_node::config::ServiceMode;
use switchyard_node::Config;
use switchyard_service_protocol::{
    encoded, AccessKeyRequest, Ack, BroadcastData, CheckConnectionExistenceWithAck,
    CheckGroupExistenceWithAck, CheckUserExistenceWithAck, CheckUserInGroupWithAck,
    ClientCompletion, ClientInvocation, CloseConnection, CloseConnectionWithAck,
    CloseGroupConnectionsWithAck, CloseUserConnectionsWithAck, ConnectionData, Extensions,
    GroupBroadcastData, GroupMemberQuery, JoinGroupWithAck, LeaveGroupWithAck, MultiConnectionData,
    MultiGroupBroadcastData, MultiUserData, Ping, ServiceEvent, ServiceMessage, UserData,
    UserJoinGroupWithAck, UserLeaveGroupWithAck,
};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message as WsMessage;

// ---- fixtures shared by the files above ----

/// An app server with three clients: JSON user u1, MessagePack user u2, JSON user u3.
struct Three {
    server: TestServer,
    app: AppServer,
    clients: Vec<Client>,
    ids: Vec<String>,
}

async fn three() -> Three {
    let server = TestServer::start_with(default_mode()).await;
    let mut app = AppServer::open(&server, "chat", "s1").await;
    let mut clients = Vec::new();
    let mut ids = Vec::new();
    for (user, format) in [
        ("u1", Format::Json),
        ("u2", Format::MessagePack),
        ("u3", Format::Json),
    ] {
        let token = server.token("chat", Some(user));
        let (client, id) = connect_client(&server, &mut app, "chat", &token, format).await;
        clients.push(client);
        ids.push(id);
    }
    Three {
        server,
        app,
        clients,
        ids,
    }
}

impl Three {
    /// A marker broadcast to everyone: a client whose next message is the marker got nothing
    /// in between.
    async fn marker(&mut self, n: i64) -> Msg {
        let marker = Msg::invocation("marker", &[json!(n)]);
        self.app
            .send(BroadcastData {
                excluded_list: Vec::new(),
                payloads: marker.payloads(),
                ext: Extensions::default(),
            })
            .await;
        marker
    }

    /// Each client's next message: `got[i]` true = `msg`, false = the marker.
    async fn expect_delivery(&mut self, msg: &Msg, got: [bool; 3], n: i64) {
        let marker = self.marker(n).await;
        for (i, client) in self.clients.iter_mut().enumerate() {
            if got[i] {
                client.expect(msg).await;
            }
            client.expect(&marker).await;
        }
    }

    fn id(&self, i: usize) -> String {
        self.ids[i].clone()
    }
}

fn ext() -> Extensions {
    Extensions::default()
}
