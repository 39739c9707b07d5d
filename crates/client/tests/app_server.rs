//! The app-server peer against a fake `/server` endpoint written here: what it sends on
//! the wire, and how it reacts to what the service sends.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use switchyard_auth::{verify_token_ignoring_audience, AccessKeys, ConnectionString};
use switchyard_bench::hub::BenchHub;
use switchyard_client::app_server::{AppServer, AppServerConfig, ShutdownMode};
use switchyard_hub_protocol::{encode_invocation, encode_message, Format, HubMessage};
use switchyard_service_protocol::{
    self as sp, Ack, ClientCompletion, ClientInvocation, CloseConnection, ConnectionData,
    ErrorCompletion, Extensions, FrameReader, HandshakeResponse, OpenConnection, Ping,
    ServiceError, ServiceMessage,
};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};
use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_tungstenite::WebSocketStream;

const KEY: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789ABCDEFGH";
const SERVER_ID: &str = "test-server_0123";
const STEP: Duration = Duration::from_secs(5);

/// One accepted server connection.
struct FakeConn {
    uri: String,
    headers: Vec<(String, String)>,
    ws: WebSocketStream<TcpStream>,
    buffer: BytesMut,
}

impl FakeConn {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The next message, or `None` when the socket closed.
    async fn try_recv(&mut self) -> Option<ServiceMessage> {
        let reader = FrameReader::new(usize::MAX);
        loop {
            if let Some(body) = reader.next_body(&mut self.buffer).unwrap() {
                return Some(sp::decode(&body).unwrap());
            }
            match self.ws.next().await {
                Some(Ok(WsMessage::Binary(data))) => self.buffer.extend_from_slice(&data),
                Some(Ok(WsMessage::Close(_))) | None | Some(Err(_)) => return None,
                Some(Ok(other)) => panic!("unexpected frame {other:?}"),
            }
        }
    }

    async fn recv_any(&mut self) -> ServiceMessage {
        tokio::time::timeout(STEP, self.try_recv())
            .await
            .expect("timed out waiting for a message")
            .expect("connection closed")
    }

    /// The next message that is not a keep-alive or status ping.
    async fn recv(&mut self) -> ServiceMessage {
        loop {
            match self.recv_any().await {
                ServiceMessage::Ping(p)
                    if p.get("#clientInHub").is_some() || p.get("status").is_some() => {}
                other => return other,
            }
        }
    }

    async fn send(&mut self, message: impl Into<ServiceMessage>) {
        self.ws
            .send(WsMessage::Binary(sp::encoded(&message.into())))
            .await
            .unwrap();
    }

    /// Reads the HandshakeRequest and accepts it.
    async fn accept_handshake(&mut self) -> sp::HandshakeRequest {
        let ServiceMessage::HandshakeRequest(request) = self.recv_any().await else {
            panic!("expected a handshake request")
        };
        self.send(HandshakeResponse::ok()).await;
        request
    }

    async fn client_data(&mut self, connection_id: &str, bytes: &[u8]) {
        self.send(ConnectionData {
            connection_id: connection_id.into(),
            payload: Bytes::copy_from_slice(bytes),
            ext: Extensions::default(),
        })
        .await;
    }

    /// OpenConnection + the client's handshake; checks the `{}` reply.
    async fn open_client(&mut self, id: &str, user: Option<&str>, format: Format) {
        let claims = user
            .map(|u| vec![("asrs.s.uid".to_owned(), u.to_owned())])
            .unwrap_or_default();
        self.send(OpenConnection {
            connection_id: id.into(),
            claims,
            headers: vec![],
            query_string: Some("?hub=bench".into()),
            ext: Extensions::default(),
        })
        .await;
        let handshake = format!("{{\"protocol\":\"{}\",\"version\":1}}\u{1e}", format.name());
        let (a, b) = handshake.as_bytes().split_at(7);
        self.client_data(id, a).await;
        self.client_data(id, b).await;
        assert_eq!(self.recv_data(id).await, b"{}\x1e"[..]);
    }

    /// The next ConnectionData payload, which must be for `id`.
    async fn recv_data(&mut self, id: &str) -> Bytes {
        match self.recv().await {
            ServiceMessage::ConnectionData(d) => {
                assert_eq!(d.connection_id, id);
                d.payload
            }
            other => panic!("expected ConnectionData, got {other:?}"),
        }
    }

    /// The next ConnectionData, decoded as one hub message.
    async fn recv_hub(&mut self, id: &str, format: Format) -> HubMessage<Value> {
        let payload = self.recv_data(id).await;
        let mut buf = BytesMut::from(&payload[..]);
        let frame = switchyard_hub_protocol::FrameSplitter::new(format, usize::MAX)
            .next_frame(&mut buf)
            .unwrap()
            .unwrap();
        assert!(buf.is_empty(), "one message per ConnectionData");
        switchyard_client::decode(format, frame.body()).unwrap()
    }

    async fn invoke(
        &mut self,
        id: &str,
        format: Format,
        invocation_id: Option<&str>,
        target: &str,
        args: Vec<Value>,
    ) {
        let bytes = invocation(format, invocation_id, target, args);
        self.client_data(id, &bytes).await;
    }
}

fn invocation(
    format: Format,
    invocation_id: Option<&str>,
    target: &str,
    arguments: Vec<Value>,
) -> Bytes {
    encode_message(
        format,
        &HubMessage::Invocation {
            headers: vec![],
            invocation_id: invocation_id.map(str::to_owned),
            target: target.into(),
            arguments,
            stream_ids: None,
        },
    )
}

fn completion_value(message: HubMessage<Value>, id: &str) -> Result<Value, String> {
    match message {
        HubMessage::Completion {
            invocation_id,
            result,
            ..
        } => {
            assert_eq!(invocation_id, id);
            match result {
                switchyard_hub_protocol::CompletionResult::Void => Ok(Value::Null),
                switchyard_hub_protocol::CompletionResult::Value(v) => Ok(v),
                switchyard_hub_protocol::CompletionResult::Error(e) => Err(e),
            }
        }
        other => panic!("expected a completion, got {other:?}"),
    }
}

struct FakeService {
    addr: SocketAddr,
    conns: mpsc::UnboundedReceiver<FakeConn>,
}

impl FakeService {
    // The header callback's error type is tungstenite's (an HTTP response).
    #[allow(clippy::result_large_err)]
    async fn start() -> FakeService {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, conns) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let tx = tx.clone();
                tokio::spawn(async move {
                    let mut seen = (String::new(), Vec::new());
                    let ws = tokio_tungstenite::accept_hdr_async(
                        tcp,
                        |req: &Request, resp: Response| {
                            seen.0 = req.uri().to_string();
                            seen.1 = req
                                .headers()
                                .iter()
                                .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_owned()))
                                .collect();
                            Ok(resp)
                        },
                    )
                    .await
                    .unwrap();
                    let _ = tx.send(FakeConn {
                        uri: seen.0,
                        headers: seen.1,
                        ws,
                        buffer: BytesMut::new(),
                    });
                });
            }
        });
        FakeService { addr, conns }
    }

    fn config(&self, connections: usize) -> AppServerConfig {
        let cs: ConnectionString = format!(
            "Endpoint=http://127.0.0.1;Port={};AccessKey={KEY};Version=1.0;",
            self.addr.port()
        )
        .parse()
        .unwrap();
        let mut config = AppServerConfig::new(cs);
        config.hubs = vec!["Bench".into()];
        config.connections_per_hub = connections;
        config.server_id = SERVER_ID.into();
        config
    }

    async fn accept(&mut self) -> FakeConn {
        tokio::time::timeout(STEP, self.conns.recv())
            .await
            .expect("timed out waiting for a server connection")
            .unwrap()
    }

    /// Starts a peer with one connection and completes its handshake.
    async fn peer(&mut self) -> (AppServer, FakeConn) {
        self.peer_with(ShutdownMode::Off).await
    }

    async fn peer_with(&mut self, mode: ShutdownMode) -> (AppServer, FakeConn) {
        let mut config = self.config(1);
        config.graceful_shutdown = mode;
        let server = AppServer::start(config, Arc::new(BenchHub)).unwrap();
        let mut conn = self.accept().await;
        conn.accept_handshake().await;
        tokio::time::timeout(STEP, server.ready()).await.unwrap();
        (server, conn)
    }
}

#[tokio::test]
async fn dials_with_sdk_headers_token_and_handshake() {
    let mut service = FakeService::start().await;
    let server = AppServer::start(service.config(3), Arc::new(BenchHub)).unwrap();
    let mut cids = Vec::new();
    for _ in 0..3 {
        let mut conn = service.accept().await;
        let (path, query) = conn.uri.split_once('?').unwrap();
        assert_eq!(path, "/server/");
        let (hub, cid) = query.split_once('&').unwrap();
        assert_eq!(hub, "hub=bench");
        let cid = cid.strip_prefix("cid=").unwrap().to_owned();
        assert_eq!(cid.len(), 36, "{cid}");
        cids.push(cid);

        assert_eq!(conn.header("X-ASRS-Server-Id"), Some(SERVER_ID));
        assert_eq!(conn.header("X-Requested-With"), Some("XMLHttpRequest"));
        assert!(conn.header("Asrs-User-Agent").unwrap().contains('/'));
        let token = conn
            .header("Authorization")
            .unwrap()
            .strip_prefix("Bearer ")
            .unwrap()
            .to_owned();
        let keys = AccessKeys::new(KEY.into(), None);
        let verified = verify_token_ignoring_audience(&token, &keys, now()).unwrap();
        assert_eq!(verified.audiences, ["http://127.0.0.1/server/?hub=bench"]);
        assert_eq!(verified.claim("nameid"), Some(SERVER_ID));

        let request = conn.accept_handshake().await;
        assert_eq!(request.version, 1);
        assert_eq!(request.connection_type, 0);
        assert_eq!(request.target, "");
        assert_eq!(request.migration_level, 0);
        assert!(request.ext.is_empty());
        std::mem::forget(conn);
    }
    cids.sort();
    cids.dedup();
    assert_eq!(cids.len(), 3, "every connection has its own cid");
    tokio::time::timeout(STEP, server.ready()).await.unwrap();
    assert_eq!(server.handle().live_connections(), 3);
}

#[tokio::test]
async fn migrate_mode_sends_migration_level_1() {
    let mut service = FakeService::start().await;
    let mut config = service.config(1);
    config.graceful_shutdown = ShutdownMode::MigrateClients;
    let _server = AppServer::start(config, Arc::new(BenchHub)).unwrap();
    let mut conn = service.accept().await;
    assert_eq!(conn.accept_handshake().await.migration_level, 1);
}

#[tokio::test]
async fn echo_ping_comes_back_identical_and_unknown_types_are_ignored() {
    let mut service = FakeService::start().await;
    let (_server, mut conn) = service.peer().await;
    // An unknown message type (41) first: must be skipped.
    conn.ws
        .send(WsMessage::Binary(Bytes::from_static(&[0x02, 0x91, 0x29])))
        .await
        .unwrap();
    let ping = Ping::new(&[("echo", "12345"), ("x", "y")]);
    conn.send(ping.clone()).await;
    assert_eq!(conn.recv().await, ServiceMessage::Ping(ping));
}

#[tokio::test]
async fn refused_handshake_is_retried() {
    let mut service = FakeService::start().await;
    let server = AppServer::start(service.config(1), Arc::new(BenchHub)).unwrap();
    let mut first = service.accept().await;
    let _ = first.recv_any().await;
    first.send(HandshakeResponse::error("not now")).await;
    // Redialled after about 1 s (2^0 s + jitter).
    let mut second = tokio::time::timeout(Duration::from_secs(4), service.conns.recv())
        .await
        .unwrap()
        .unwrap();
    second.accept_handshake().await;
    tokio::time::timeout(STEP, server.ready()).await.unwrap();
}

#[tokio::test]
async fn json_client_handshake_echo_and_completions() {
    let mut service = FakeService::start().await;
    let (server, mut conn) = service.peer().await;
    conn.open_client("c1", Some("alice"), Format::Json).await;
    assert_eq!(server.client_count(), 1);

    // Two invocations in one chunk, split at an arbitrary point across two chunks.
    let mut bytes =
        invocation(Format::Json, Some("1"), "Echo", vec![json!(5), json!("hi")]).to_vec();
    bytes.extend_from_slice(&invocation(
        Format::Json,
        Some("2"),
        "GetConnectionId",
        vec![],
    ));
    let (a, b) = bytes.split_at(20);
    conn.client_data("c1", a).await;
    conn.client_data("c1", b).await;

    match conn.recv().await {
        ServiceMessage::MultiConnectionData(m) => {
            assert_eq!(m.connection_list, ["c1"]);
            assert_eq!(
                m.payloads,
                [(
                    "json".to_owned(),
                    encode_invocation(Format::Json, "Measure", &[json!(5), json!("hi")])
                )]
            );
        }
        other => panic!("expected MultiConnectionData, got {other:?}"),
    }
    assert_eq!(
        conn.recv_data("c1").await,
        b"{\"type\":3,\"invocationId\":\"1\"}\x1e"[..]
    );
    let done = conn.recv_hub("c1", Format::Json).await;
    assert_eq!(completion_value(done, "2"), Ok(json!("c1")));

    conn.invoke("c1", Format::Json, Some("3"), "GetUserId", vec![])
        .await;
    assert_eq!(
        completion_value(conn.recv_hub("c1", Format::Json).await, "3"),
        Ok(json!("alice"))
    );

    conn.invoke("c1", Format::Json, Some("4"), "NoSuchMethod", vec![])
        .await;
    assert_eq!(
        completion_value(conn.recv_hub("c1", Format::Json).await, "4"),
        Err("Unknown hub method 'NoSuchMethod'".into())
    );

    conn.invoke("c1", Format::Json, Some("5"), "Echo", vec![json!(1)])
        .await;
    let err = completion_value(conn.recv_hub("c1", Format::Json).await, "5").unwrap_err();
    assert!(
        err.contains("provides 1 argument(s) but target expects 2"),
        "{err}"
    );

    conn.invoke("c1", Format::Json, Some("6"), "GetServerId", vec![])
        .await;
    assert_eq!(
        completion_value(conn.recv_hub("c1", Format::Json).await, "6"),
        Ok(json!(SERVER_ID))
    );

    conn.invoke("c1", Format::Json, Some("7"), "Count", vec![])
        .await;
    assert_eq!(
        completion_value(conn.recv_hub("c1", Format::Json).await, "7"),
        Ok(json!(1))
    );

    // Without an invocation id: the send happens, no completion follows.
    conn.invoke(
        "c1",
        Format::Json,
        None,
        "Broadcast",
        vec![json!(9), json!("all")],
    )
    .await;
    match conn.recv().await {
        ServiceMessage::BroadcastData(b) => {
            assert!(b.excluded_list.is_empty());
            let names: Vec<_> = b.payloads.iter().map(|(n, _)| n.as_str()).collect();
            assert_eq!(names, ["json", "messagepack"]);
            assert_eq!(
                b.payloads[1].1,
                encode_invocation(Format::MessagePack, "Measure", &[json!(9), json!("all")])
            );
        }
        other => panic!("expected BroadcastData, got {other:?}"),
    }

    // A hub Close from the client: CloseConnection(c1, "") and the client is forgotten.
    conn.client_data("c1", b"{\"type\":7}\x1e").await;
    match conn.recv().await {
        ServiceMessage::CloseConnection(c) => {
            assert_eq!(c.connection_id, "c1");
            assert_eq!(c.error_message, "");
        }
        other => panic!("expected CloseConnection, got {other:?}"),
    }
    assert_eq!(server.client_count(), 0);
}

#[tokio::test]
async fn messagepack_client_gets_messagepack_only() {
    let mut service = FakeService::start().await;
    let (_server, mut conn) = service.peer().await;
    conn.open_client("m1", None, Format::MessagePack).await;
    conn.invoke(
        "m1",
        Format::MessagePack,
        Some("1"),
        "Echo",
        vec![json!(7), json!("p")],
    )
    .await;
    match conn.recv().await {
        ServiceMessage::MultiConnectionData(m) => {
            assert_eq!(m.connection_list, ["m1"]);
            assert_eq!(
                m.payloads,
                [(
                    "messagepack".to_owned(),
                    encode_invocation(Format::MessagePack, "Measure", &[json!(7), json!("p")])
                )]
            );
        }
        other => panic!("expected MultiConnectionData, got {other:?}"),
    }
    let done = conn.recv_hub("m1", Format::MessagePack).await;
    assert_eq!(completion_value(done, "1"), Ok(Value::Null));
    // To a connection not on this server: both protocols.
    conn.invoke(
        "m1",
        Format::MessagePack,
        Some("2"),
        "SendToConnection",
        vec![json!("elsewhere"), json!(1), json!("x")],
    )
    .await;
    match conn.recv().await {
        ServiceMessage::MultiConnectionData(m) => {
            assert_eq!(m.connection_list, ["elsewhere"]);
            assert_eq!(m.payloads.len(), 2);
        }
        other => panic!("expected MultiConnectionData, got {other:?}"),
    }
}

#[tokio::test]
async fn unsupported_protocol_gets_a_handshake_error() {
    let mut service = FakeService::start().await;
    let (server, mut conn) = service.peer().await;
    conn.send(OpenConnection {
        connection_id: "x".into(),
        ..Default::default()
    })
    .await;
    conn.client_data("x", b"{\"protocol\":\"blazorpack\",\"version\":1}\x1e")
        .await;
    let reply = conn.recv_data("x").await;
    assert_eq!(
        reply,
        b"{\"error\":\"The protocol 'blazorpack' is not supported.\"}\x1e"[..]
    );
    assert!(
        matches!(conn.recv().await, ServiceMessage::CloseConnection(c) if c.connection_id == "x")
    );
    assert_eq!(server.client_count(), 0);
}

#[tokio::test]
async fn migrated_client_gets_no_handshake_response() {
    let mut service = FakeService::start().await;
    let (server, mut conn) = service.peer().await;
    conn.send(OpenConnection {
        connection_id: "mig".into(),
        headers: vec![("Asrs-Migrate-From".into(), vec!["old-server".into()])],
        ext: Extensions {
            protocol: Some("json".into()),
            ..Default::default()
        },
        ..Default::default()
    })
    .await;
    conn.invoke("mig", Format::Json, Some("1"), "GetConnectionId", vec![])
        .await;
    // The first thing back is the completion, not `{}`.
    assert_eq!(
        completion_value(conn.recv_hub("mig", Format::Json).await, "1"),
        Ok(json!("mig"))
    );
    // CloseConnection from the service forgets it.
    conn.send(CloseConnection {
        connection_id: "mig".into(),
        ..Default::default()
    })
    .await;
    tokio::time::timeout(STEP, async {
        while server.client_count() != 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn group_operations_wait_for_the_ack() {
    let mut service = FakeService::start().await;
    let (_server, mut conn) = service.peer().await;
    conn.open_client("c1", Some("u1"), Format::Json).await;

    conn.invoke("c1", Format::Json, Some("1"), "JoinGroup", vec![json!("g")])
        .await;
    let ack_id = match conn.recv().await {
        ServiceMessage::JoinGroupWithAck(j) => {
            assert_eq!(
                (j.connection_id.as_str(), j.group_name.as_str()),
                ("c1", "g")
            );
            assert_eq!(j.ack_id, 1);
            j.ack_id
        }
        other => panic!("expected JoinGroupWithAck, got {other:?}"),
    };
    // Nothing (no completion) before the ack.
    assert!(
        tokio::time::timeout(Duration::from_millis(200), conn.recv())
            .await
            .is_err()
    );
    conn.send(Ack::new(ack_id, sp::AckStatus::Ok, "")).await;
    assert_eq!(
        completion_value(conn.recv_hub("c1", Format::Json).await, "1"),
        Ok(Value::Null)
    );

    conn.invoke(
        "c1",
        Format::Json,
        Some("2"),
        "SendToGroup",
        vec![json!("g"), json!(1), json!("m")],
    )
    .await;
    match conn.recv().await {
        ServiceMessage::GroupBroadcastData(g) => {
            assert_eq!(g.group_name, "g");
            assert!(g.excluded_list.is_empty());
            assert_eq!(g.payloads.len(), 2);
        }
        other => panic!("expected GroupBroadcastData, got {other:?}"),
    }
    conn.recv_hub("c1", Format::Json).await;

    conn.invoke(
        "c1",
        Format::Json,
        Some("3"),
        "SendToOthersInGroup",
        vec![json!("g"), json!(1), json!("m")],
    )
    .await;
    match conn.recv().await {
        ServiceMessage::GroupBroadcastData(g) => {
            assert_eq!(g.excluded_list, ["c1"]);
            assert_eq!(g.caller_user_id.as_deref(), Some("u1"));
        }
        other => panic!("expected GroupBroadcastData, got {other:?}"),
    }
    conn.recv_hub("c1", Format::Json).await;

    // Check*: status 2 (NotFound) → false.
    conn.invoke(
        "c1",
        Format::Json,
        Some("4"),
        "CheckUserInGroup",
        vec![json!("u9"), json!("g")],
    )
    .await;
    let ack_id = match conn.recv().await {
        ServiceMessage::CheckUserInGroupWithAck(c) => {
            assert_eq!(c.ack_id, 2);
            c.ack_id
        }
        other => panic!("expected CheckUserInGroupWithAck, got {other:?}"),
    };
    conn.send(Ack::new(ack_id, sp::AckStatus::NotFound, ""))
        .await;
    assert_eq!(
        completion_value(conn.recv_hub("c1", Format::Json).await, "4"),
        Ok(json!(false))
    );

    // A failed ack → error completion.
    conn.invoke(
        "c1",
        Format::Json,
        Some("5"),
        "LeaveGroup",
        vec![json!("g")],
    )
    .await;
    let ack_id = match conn.recv().await {
        ServiceMessage::LeaveGroupWithAck(l) => {
            assert_eq!(l.group_name.as_deref(), Some("g"));
            l.ack_id
        }
        other => panic!("expected LeaveGroupWithAck, got {other:?}"),
    };
    conn.send(Ack::new(ack_id, sp::AckStatus::InternalServerError, "boom"))
        .await;
    let err = completion_value(conn.recv_hub("c1", Format::Json).await, "5").unwrap_err();
    assert!(err.contains("boom"), "{err}");
}

#[tokio::test]
async fn client_results_local_routed_and_remote() {
    let mut service = FakeService::start().await;
    let (_server, mut conn) = service.peer().await;
    conn.open_client("c1", None, Format::Json).await;
    conn.open_client("c2", None, Format::MessagePack).await;

    // Local: c1 asks c2; the answer comes over c2's ConnectionData.
    conn.invoke(
        "c1",
        Format::Json,
        Some("1"),
        "AskClient",
        vec![json!("c2"), json!("Add"), json!(3)],
    )
    .await;
    let invocation_id = match conn.recv().await {
        ServiceMessage::ClientInvocation(ci) => {
            assert_eq!(ci.connection_id, "c2");
            assert_eq!(ci.caller_server_id, SERVER_ID);
            assert!(ci.invocation_id.starts_with("c2-"), "{}", ci.invocation_id);
            let json_payload = &ci.payloads.iter().find(|(n, _)| n == "json").unwrap().1;
            let text = std::str::from_utf8(json_payload).unwrap();
            assert!(
                text.contains(&format!("\"invocationId\":\"{}\"", ci.invocation_id)),
                "{text}"
            );
            assert!(ci.payloads.iter().any(|(n, _)| n == "messagepack"));
            ci.invocation_id
        }
        other => panic!("expected ClientInvocation, got {other:?}"),
    };
    let answer = encode_message(
        Format::MessagePack,
        &HubMessage::Completion {
            headers: vec![],
            invocation_id: invocation_id.clone(),
            result: switchyard_hub_protocol::CompletionResult::Value(json!(4)),
        },
    );
    conn.client_data("c2", &answer).await;
    match conn.recv().await {
        ServiceMessage::ClientCompletion(cc) => {
            assert_eq!(cc.invocation_id, invocation_id);
            assert_eq!(cc.connection_id, "c2");
            assert_eq!(cc.caller_server_id, SERVER_ID);
            assert_eq!(cc.protocol, "messagepack");
            assert!(cc.payload.is_empty());
        }
        other => panic!("expected ClientCompletion, got {other:?}"),
    }
    assert_eq!(
        completion_value(conn.recv_hub("c1", Format::Json).await, "1"),
        Ok(json!(4))
    );

    // Router: another server invoked c2; its answer goes back as ClientCompletion.
    conn.send(ClientInvocation {
        invocation_id: "c2-other-1".into(),
        connection_id: "c2".into(),
        caller_server_id: "other-server".into(),
        payloads: vec![],
        ext: Extensions::default(),
    })
    .await;
    let answer = encode_message(
        Format::MessagePack,
        &HubMessage::Completion {
            headers: vec![],
            invocation_id: "c2-other-1".into(),
            result: switchyard_hub_protocol::CompletionResult::Value(json!("r")),
        },
    );
    conn.client_data("c2", &answer).await;
    match conn.recv().await {
        ServiceMessage::ClientCompletion(cc) => {
            assert_eq!(cc.invocation_id, "c2-other-1");
            assert_eq!(cc.connection_id, "c2");
            assert_eq!(cc.caller_server_id, "other-server");
            assert_eq!(cc.protocol, "messagepack");
            assert_eq!(cc.payload, answer);
        }
        other => panic!("expected ClientCompletion, got {other:?}"),
    }

    // Remote: the client is elsewhere; the result comes as ClientCompletion…
    conn.invoke(
        "c1",
        Format::Json,
        Some("2"),
        "AskClient",
        vec![json!("far"), json!("Add"), json!(1)],
    )
    .await;
    let ServiceMessage::ClientInvocation(ci) = conn.recv().await else {
        panic!()
    };
    conn.send(ClientCompletion {
        invocation_id: ci.invocation_id.clone(),
        connection_id: "far".into(),
        caller_server_id: SERVER_ID.into(),
        protocol: "json".into(),
        payload: Bytes::from(format!(
            "{{\"type\":3,\"invocationId\":\"{}\",\"result\":2}}\u{1e}",
            ci.invocation_id
        )),
        ext: Extensions::default(),
    })
    .await;
    assert_eq!(
        completion_value(conn.recv_hub("c1", Format::Json).await, "2"),
        Ok(json!(2))
    );

    // …or fails with ErrorCompletion.
    conn.invoke(
        "c1",
        Format::Json,
        Some("3"),
        "AskClient",
        vec![json!("far"), json!("Add"), json!(1)],
    )
    .await;
    let ServiceMessage::ClientInvocation(ci) = conn.recv().await else {
        panic!()
    };
    conn.send(ErrorCompletion {
        invocation_id: ci.invocation_id.clone(),
        connection_id: "far".into(),
        caller_server_id: SERVER_ID.into(),
        error: "Connection 'far' disconnected.".into(),
        ext: Extensions::default(),
    })
    .await;
    assert_eq!(
        completion_value(conn.recv_hub("c1", Format::Json).await, "3"),
        Err("Connection 'far' disconnected.".into())
    );

    // A client that leaves fails the invocations waiting on it.
    conn.invoke(
        "c1",
        Format::Json,
        Some("4"),
        "AskClient",
        vec![json!("c2"), json!("Add"), json!(1)],
    )
    .await;
    let ServiceMessage::ClientInvocation(_) = conn.recv().await else {
        panic!()
    };
    conn.send(CloseConnection {
        connection_id: "c2".into(),
        ..Default::default()
    })
    .await;
    let err = completion_value(conn.recv_hub("c1", Format::Json).await, "4").unwrap_err();
    assert!(err.contains("c2"), "{err}");
}

#[tokio::test]
async fn service_error_and_dropped_sockets_are_redialled() {
    let mut service = FakeService::start().await;
    let (server, mut conn) = service.peer().await;
    conn.open_client("c1", None, Format::Json).await;
    conn.send(ServiceError {
        error_message: "Maximum message count limit reached: 100000".into(),
    })
    .await;
    // The peer drops that connection (and its clients) and dials a new one.
    assert!(
        tokio::time::timeout(STEP, async { while conn.try_recv().await.is_some() {} })
            .await
            .is_ok()
    );
    let mut second = service.accept().await;
    second.accept_handshake().await;
    assert_eq!(server.client_count(), 0);
    tokio::time::timeout(STEP, server.ready()).await.unwrap();

    drop(second);
    let mut third = service.accept().await;
    third.accept_handshake().await;
    tokio::time::timeout(STEP, server.ready()).await.unwrap();

    // abort(): the socket just goes away, and nothing is redialled.
    server.abort();
    assert!(
        tokio::time::timeout(STEP, async { while third.try_recv().await.is_some() {} })
            .await
            .is_ok()
    );
    assert!(
        tokio::time::timeout(Duration::from_secs(3), service.conns.recv())
            .await
            .is_err()
    );
}

#[tokio::test]
async fn keep_alive_and_status_pings() {
    let mut service = FakeService::start().await;
    let (_server, mut conn) = service.peer().await;
    conn.open_client("c1", None, Format::Json).await;
    let started = tokio::time::Instant::now();
    let mut keep_alive = None;
    let mut status = None;
    while keep_alive.is_none() || status.is_none() {
        let message = tokio::time::timeout(Duration::from_secs(15), conn.try_recv())
            .await
            .unwrap()
            .unwrap();
        if let ServiceMessage::Ping(p) = message {
            if p.get("#clientInHub").is_some() && keep_alive.is_none() {
                keep_alive = Some((p, started.elapsed()));
            } else if p.get("status").is_some() {
                status = Some((p, started.elapsed()));
            }
        }
    }
    let (p, at) = keep_alive.unwrap();
    assert_eq!(p, Ping::new(&[("#clientInHub", "1"), ("#client", "1")]));
    assert!(
        at >= Duration::from_secs(4) && at < Duration::from_secs(8),
        "{at:?}"
    );
    let (p, at) = status.unwrap();
    assert_eq!(p, Ping::new(&[("status", "1")]));
    assert!(at < Duration::from_secs(12), "{at:?}");
}

#[tokio::test]
async fn graceful_stop_with_migration() {
    let mut service = FakeService::start().await;
    let (server, mut conn) = service.peer_with(ShutdownMode::MigrateClients).await;
    conn.open_client("c1", None, Format::Json).await;
    let stopping = tokio::spawn(async move {
        server.stop().await;
        server
    });
    match conn.recv().await {
        ServiceMessage::Ping(p) => assert_eq!(p.get("shutdown"), Some("fin:1")),
        other => panic!("expected the fin ping, got {other:?}"),
    }
    conn.send(Ping::new(&[("shutdown", "finack")])).await;
    // The service migrates the client away; only then does the peer close the socket.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!stopping.is_finished());
    conn.send(CloseConnection {
        connection_id: "c1".into(),
        headers: vec![("Asrs-Migrate-To".into(), vec!["other".into()])],
        ..Default::default()
    })
    .await;
    assert!(
        tokio::time::timeout(STEP, async { while conn.try_recv().await.is_some() {} })
            .await
            .is_ok()
    );
    let server = tokio::time::timeout(STEP, stopping).await.unwrap().unwrap();
    assert_eq!(server.client_count(), 0);
}

#[tokio::test]
async fn negotiate_redirect() {
    let mut service = FakeService::start().await;
    let server = AppServer::start(service.config(1), Arc::new(BenchHub)).unwrap();
    let handle = server.handle();
    assert!(matches!(
        handle.negotiate("bench", "", None),
        Err(switchyard_client::app_server::NegotiateError::NotConnected)
    ));
    assert!(handle.negotiate("nope", "", None).is_err());
    let mut conn = service.accept().await;
    conn.accept_handshake().await;
    tokio::time::timeout(STEP, server.ready()).await.unwrap();

    let redirect = handle
        .negotiate("Bench", "negotiateVersion=1&user=bob", Some("bob"))
        .unwrap();
    let prefix = format!(
        "http://127.0.0.1:{}/client/?hub=bench&asrs.op=%2FBench&user=bob&asrs_request_id=",
        service.addr.port()
    );
    assert!(redirect.url.starts_with(&prefix), "{}", redirect.url);
    let keys = AccessKeys::new(KEY.into(), None);
    let token = verify_token_ignoring_audience(&redirect.access_token, &keys, now()).unwrap();
    assert_eq!(token.audiences, ["http://127.0.0.1/client/?hub=bench"]);
    assert_eq!(token.claim("asrs.s.uid"), Some("bob"));
    assert_eq!(token.claim("nameid"), Some("bob"));
    assert_eq!(token.claim("asrs.s.sn"), Some(SERVER_ID));
    assert_eq!(token.expires_at - now(), 3600);
    let body = redirect.to_json();
    assert_eq!(body["negotiateVersion"], 0);
    assert_eq!(body["availableTransports"], json!([]));
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// Every ackable hub method: the message it sends, and its completion after the Ack.
#[tokio::test]
async fn ackable_methods_and_close() {
    let mut service = FakeService::start().await;
    let (_server, mut conn) = service.peer().await;
    conn.open_client("c1", None, Format::Json).await;
    type Check = fn(&ServiceMessage) -> Option<i32>;
    let cases: Vec<(&str, Vec<Value>, Check, Value)> = vec![
        (
            "AddUserToGroup",
            vec![json!("u"), json!("g")],
            |m| match m {
                ServiceMessage::UserJoinGroupWithAck(x)
                    if x.user_id == "u" && x.group_name == "g" =>
                {
                    Some(x.ack_id)
                }
                _ => None,
            },
            Value::Null,
        ),
        (
            "RemoveUserFromGroup",
            vec![json!("u"), json!("g")],
            |m| match m {
                ServiceMessage::UserLeaveGroupWithAck(x)
                    if x.group_name.as_deref() == Some("g") =>
                {
                    Some(x.ack_id)
                }
                _ => None,
            },
            Value::Null,
        ),
        (
            "CheckConnection",
            vec![json!("c9")],
            |m| match m {
                ServiceMessage::CheckConnectionExistenceWithAck(x) if x.connection_id == "c9" => {
                    Some(x.ack_id)
                }
                _ => None,
            },
            json!(true),
        ),
        (
            "CheckUser",
            vec![json!("u")],
            |m| match m {
                ServiceMessage::CheckUserExistenceWithAck(x) if x.user_id == "u" => Some(x.ack_id),
                _ => None,
            },
            json!(true),
        ),
        (
            "CheckGroup",
            vec![json!("g")],
            |m| match m {
                ServiceMessage::CheckGroupExistenceWithAck(x) if x.group_name == "g" => {
                    Some(x.ack_id)
                }
                _ => None,
            },
            json!(true),
        ),
        (
            "CloseUser",
            vec![json!("u"), json!("bye")],
            |m| match m {
                ServiceMessage::CloseUserConnectionsWithAck(x)
                    if x.user_id == "u" && x.reason.as_deref() == Some("bye") =>
                {
                    Some(x.ack_id)
                }
                _ => None,
            },
            Value::Null,
        ),
        (
            "CloseGroup",
            vec![json!("g"), json!("bye")],
            |m| match m {
                ServiceMessage::CloseGroupConnectionsWithAck(x)
                    if x.group_name == "g" && x.excluded_list.is_empty() =>
                {
                    Some(x.ack_id)
                }
                _ => None,
            },
            Value::Null,
        ),
    ];
    for (i, (method, args, check, expected)) in cases.into_iter().enumerate() {
        let id = i.to_string();
        conn.invoke("c1", Format::Json, Some(&id), method, args)
            .await;
        let message = conn.recv().await;
        let ack_id = check(&message).unwrap_or_else(|| panic!("{method}: unexpected {message:?}"));
        assert_eq!(ack_id, i as i32 + 1, "{method}: ack ids count from 1");
        conn.send(Ack::new(ack_id, sp::AckStatus::Ok, "")).await;
        let done = conn.recv_hub("c1", Format::Json).await;
        assert_eq!(completion_value(done, &id), Ok(expected), "{method}");
    }

    // Sends to lists.
    conn.invoke(
        "c1",
        Format::Json,
        None,
        "SendToUsers",
        vec![json!(["a", "b"]), json!(1), json!("p")],
    )
    .await;
    assert!(
        matches!(conn.recv().await, ServiceMessage::MultiUserData(m) if m.user_list == ["a", "b"])
    );
    conn.invoke(
        "c1",
        Format::Json,
        None,
        "SendToGroups",
        vec![json!(["g", "h"]), json!(1), json!("p")],
    )
    .await;
    assert!(
        matches!(conn.recv().await, ServiceMessage::MultiGroupBroadcastData(m) if m.group_list == ["g", "h"])
    );
    conn.invoke(
        "c1",
        Format::Json,
        None,
        "SendToConnections",
        vec![json!(["x", "y"]), json!(1), json!("p")],
    )
    .await;
    assert!(
        matches!(conn.recv().await, ServiceMessage::MultiConnectionData(m) if m.connection_list == ["x", "y"] && m.payloads.len() == 2)
    );
    conn.invoke(
        "c1",
        Format::Json,
        None,
        "BroadcastExcept",
        vec![json!(["c1"]), json!(1), json!("p")],
    )
    .await;
    assert!(
        matches!(conn.recv().await, ServiceMessage::BroadcastData(m) if m.excluded_list == ["c1"])
    );
    conn.invoke(
        "c1",
        Format::Json,
        None,
        "SendToGroupExcept",
        vec![json!("g"), json!(["c1"]), json!(1), json!("p")],
    )
    .await;
    assert!(
        matches!(conn.recv().await, ServiceMessage::GroupBroadcastData(m) if m.excluded_list == ["c1"] && m.caller_user_id.is_none())
    );
    conn.invoke(
        "c1",
        Format::Json,
        None,
        "SendToUser",
        vec![json!("u"), json!(1), json!("p")],
    )
    .await;
    assert!(matches!(conn.recv().await, ServiceMessage::UserData(m) if m.user_id == "u"));

    // CloseConnection: a plain A→S CloseConnection with the reason.
    conn.invoke(
        "c1",
        Format::Json,
        Some("c"),
        "CloseConnection",
        vec![json!("c7"), json!("kicked")],
    )
    .await;
    match conn.recv().await {
        ServiceMessage::CloseConnection(c) => {
            assert_eq!(
                (c.connection_id.as_str(), c.error_message.as_str()),
                ("c7", "kicked")
            );
        }
        other => panic!("expected CloseConnection, got {other:?}"),
    }
    assert_eq!(
        completion_value(conn.recv_hub("c1", Format::Json).await, "c"),
        Ok(Value::Null)
    );
}

#[tokio::test]
async fn user_id_comes_from_the_first_known_claim() {
    let mut service = FakeService::start().await;
    let (_server, mut conn) = service.peer().await;
    let long = "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/nameidentifier";
    for (id, claims, expected) in [
        (
            "a",
            vec![("sub", "s"), (long, "n"), ("asrs.s.uid", "u")],
            json!("u"),
        ),
        (
            "b",
            vec![("sub", "s"), ("nameid", "short"), (long, "n")],
            json!("n"),
        ),
        ("c", vec![("sub", "s"), ("nameid", "short")], json!("short")),
        ("d", vec![("sub", "s")], json!("s")),
        ("e", vec![("role", "r")], Value::Null),
    ] {
        conn.send(OpenConnection {
            connection_id: id.into(),
            claims: claims
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            ..Default::default()
        })
        .await;
        conn.client_data(id, b"{\"protocol\":\"json\",\"version\":1}\x1e")
            .await;
        assert_eq!(conn.recv_data(id).await, b"{}\x1e"[..]);
        conn.invoke(id, Format::Json, Some("1"), "GetUserId", vec![])
            .await;
        assert_eq!(
            completion_value(conn.recv_hub(id, Format::Json).await, "1"),
            Ok(expected),
            "{id}"
        );
    }
}
