//! `switchyard_client::connect` against the real service (`switchyard_node` in-process, with
//! the Rust app server hosting the benchmark hub): every transport and protocol, negotiate
//! redirects, a bound source address, refusals, and cancel-safe reads.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use parking_lot::Mutex;
use serde_json::{json, Value};
use switchyard_auth::{TokenBuilder, EMULATOR_ACCESS_KEY};
use switchyard_bench::hub::BenchHub;
use switchyard_client::app_server::AppServer;
use switchyard_client::{
    connect, decode, http_client, ClientError, ConnectOptions, Connection, Transport,
};
use switchyard_hub_protocol::{CompletionResult, Format, HubMessage};
use switchyard_node::{Config, Node};
use switchyard_testkit::{now, TestServer};
use tokio::net::{TcpListener, TcpStream};

const HUB: &str = "bench";
const STEP: Duration = Duration::from_secs(10);

/// A service node on a free port, with an app server connected for [`HUB`] (so clients of
/// the hub are served in Default mode by the benchmark hub).
struct Service {
    addr: SocketAddr,
    node: Arc<Node>,
    app: Option<AppServer>,
    /// Kept for the node's lifetime (dropping it stops the node).
    _server: TestServer,
}

impl Service {
    async fn start() -> Service {
        let (server, app) =
            TestServer::with_app_server(Config::default(), &[HUB], Arc::new(BenchHub)).await;
        Service {
            addr: server.addr,
            node: server.node.clone(),
            app: Some(app),
            _server: server,
        }
    }

    async fn without_app_server() -> Service {
        let server = TestServer::start().await;
        Service {
            addr: server.addr,
            node: server.node.clone(),
            app: None,
            _server: server,
        }
    }

    fn app(&self) -> &AppServer {
        self.app.as_ref().expect("started with an app server")
    }

    /// The hub URL as a client of the service gives it: `http://ADDR/client/?hub=bench`.
    fn client_url(&self) -> String {
        format!("http://{}/client/?hub={HUB}", self.addr)
    }

    fn token(&self, claims: &[(&str, &str)]) -> String {
        let mut builder = TokenBuilder::new(self.client_url());
        for (k, v) in claims {
            builder = builder.claim(*k, *v);
        }
        builder.sign(EMULATOR_ACCESS_KEY, now())
    }

    fn options(&self, transport: Transport, format: Format) -> ConnectOptions {
        let mut options = ConnectOptions::new(transport, format);
        options.access_token = Some(self.token(&[("asrs.s.uid", "alice")]));
        options
    }

    /// `POST /api/hubs/bench/:send?api-version=2022-06-01`: `target(arguments)` to every
    /// client of the hub (the token's audience is the URL without query, as the REST docs
    /// have it).
    async fn rest_broadcast(&self, target: &str, arguments: Value) {
        let url = format!("http://{}/api/hubs/{HUB}/:send", self.addr);
        let token = TokenBuilder::new(&url).sign(EMULATOR_ACCESS_KEY, now());
        let response = reqwest::Client::new()
            .post(format!("{url}?api-version=2022-06-01"))
            .bearer_auth(token)
            .json(&json!({"target": target, "arguments": arguments}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 202, "{}", response.text().await.unwrap());
    }

    /// Waits until the service holds no client connection.
    async fn wait_no_clients(&self) {
        eventually("the service drops the connection", || {
            self.node.client_connection_count() == 0
        })
        .await;
    }
}

async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(STEP, future)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

/// Polls a condition that a background task makes true (bounded).
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + STEP;
    while !check() {
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn open(url: &str, options: &ConnectOptions) -> Connection {
    within("connect", connect(url, options))
        .await
        .unwrap_or_else(|e| panic!("connect {url} over {}: {e}", options.transport))
}

async fn open_err(url: &str, options: &ConnectOptions) -> ClientError {
    within("connect", connect(url, options))
        .await
        .expect_err("the connect should fail")
}

/// The next message that is not a Ping.
async fn next(connection: &mut Connection) -> HubMessage<Value> {
    loop {
        match within("a message", connection.next()).await.unwrap() {
            HubMessage::Ping => continue,
            other => return other,
        }
    }
}

/// Invokes a benchmark-hub method: the `Measure` invocations that arrive first, and the
/// completion's result.
async fn call(
    connection: &mut Connection,
    id: &str,
    target: &str,
    arguments: Vec<Value>,
) -> (Vec<Vec<Value>>, Result<Value, String>) {
    connection
        .send(&HubMessage::Invocation {
            headers: vec![],
            invocation_id: Some(id.to_owned()),
            target: target.to_owned(),
            arguments,
            stream_ids: None,
        })
        .await
        .unwrap();
    let mut measures = Vec::new();
    loop {
        match next(connection).await {
            HubMessage::Invocation {
                target, arguments, ..
            } if target == "Measure" => measures.push(arguments),
            HubMessage::Completion {
                invocation_id,
                result,
                ..
            } => {
                assert_eq!(invocation_id, id);
                let result = match result {
                    CompletionResult::Void => Ok(Value::Null),
                    CompletionResult::Value(v) => Ok(v),
                    CompletionResult::Error(e) => Err(e),
                };
                return (measures, result);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// Expects `Notify(arguments)` next.
async fn expect_notify(connection: &mut Connection, arguments: Value) {
    match next(connection).await {
        HubMessage::Invocation {
            target,
            arguments: got,
            ..
        } => {
            assert_eq!(target, "Notify");
            assert_eq!(Value::Array(got), arguments);
        }
        other => panic!("expected Notify, got {other:?}"),
    }
}

/// Connects straight to the service, invokes through it (to the app server and back),
/// receives a REST broadcast, closes.
async fn direct(transport: Transport, format: Format) {
    let service = Service::start().await;
    let options = service.options(transport, format);
    let mut connection = open(&service.client_url(), &options).await;
    assert_eq!(connection.transport(), transport);
    assert_eq!(connection.format(), format);
    assert!(!connection.connection_id().is_empty());

    let (measures, done) = call(&mut connection, "1", "Echo", vec![json!(7), json!("hi")]).await;
    assert_eq!(measures, [vec![json!(7), json!("hi")]]);
    assert_eq!(done, Ok(Value::Null));
    let (_, id) = call(&mut connection, "2", "GetConnectionId", vec![]).await;
    assert_eq!(id, Ok(json!(connection.connection_id())));
    let (_, user) = call(&mut connection, "3", "GetUserId", vec![]).await;
    assert_eq!(user, Ok(json!("alice")));

    // The completions above came after the client joined its hub, so the broadcast
    // reaches it.
    service
        .rest_broadcast("Notify", json!(["from rest", 42]))
        .await;
    expect_notify(&mut connection, json!(["from rest", 42])).await;

    // Several messages in one burst arrive whole and in order.
    for i in 0..5 {
        service.rest_broadcast("Notify", json!([i])).await;
    }
    for i in 0..5 {
        expect_notify(&mut connection, json!([i])).await;
    }

    within("close", connection.close()).await;
    service.wait_no_clients().await;
    // The app server hears of it over its server connection.
    eventually("the app server drops the client", || {
        service.app().client_count() == 0
    })
    .await;
}

#[tokio::test]
async fn websockets_json() {
    direct(Transport::WebSockets, Format::Json).await;
}

#[tokio::test]
async fn websockets_messagepack() {
    direct(Transport::WebSockets, Format::MessagePack).await;
}

#[tokio::test]
async fn server_sent_events_json() {
    direct(Transport::ServerSentEvents, Format::Json).await;
}

#[tokio::test]
async fn long_polling_json() {
    direct(Transport::LongPolling, Format::Json).await;
}

#[tokio::test]
async fn long_polling_messagepack() {
    direct(Transport::LongPolling, Format::MessagePack).await;
}

/// SignalR carries text only over SSE: refused before anything goes on the wire.
#[tokio::test]
async fn server_sent_events_with_messagepack_is_refused() {
    let service = Service::without_app_server().await;
    let options = service.options(Transport::ServerSentEvents, Format::MessagePack);
    let error = open_err(&service.client_url(), &options).await;
    let ClientError::Protocol(text) = &error else {
        panic!("expected a protocol error, got {error:?}");
    };
    assert!(
        text.contains("messagepack") && text.contains("ServerSentEvents"),
        "{text}"
    );
    // Not even negotiated.
    assert_eq!(service.node.client_connection_count(), 0);
}

/// A token that allows WebSockets only (`asrs.s.htt` = 1): negotiate lists only it.
#[tokio::test]
async fn a_transport_the_server_does_not_offer_is_a_clear_error() {
    let service = Service::without_app_server().await;
    for transport in [Transport::ServerSentEvents, Transport::LongPolling] {
        let mut options = service.options(transport, Format::Json);
        options.access_token = Some(service.token(&[("asrs.s.htt", "1")]));
        let error = open_err(&service.client_url(), &options).await;
        let text = error.to_string();
        assert!(
            text.contains(&format!(
                "does not offer the {} transport",
                transport.name()
            )) && text.contains("it offers: WebSockets"),
            "{text}"
        );
    }
}

/// What the negotiate endpoint below saw.
#[derive(Debug, Clone)]
struct Seen {
    path: String,
    query: String,
    authorization: Option<String>,
}

#[derive(Clone)]
struct RedirectState {
    app: switchyard_client::app_server::AppServerHandle,
    base: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

/// An app's negotiate endpoints:
/// - `/hop/negotiate`: redirects to `/bench` with the token `hop-token`;
/// - `/bench/negotiate`: wants `hop-token`; the Rust app server's real redirect to the
///   service (a token for user `bob`);
/// - `/loop/negotiate`: redirects to itself, forever;
/// - `/fail/negotiate`: an `error`.
async fn negotiate_endpoint(
    State(state): State<RedirectState>,
    uri: Uri,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let authorization = headers
        .get("authorization")
        .map(|v| v.to_str().unwrap().to_owned());
    let path = uri.path().to_owned();
    let query = query.unwrap_or_default();
    state.seen.lock().push(Seen {
        path: path.clone(),
        query: query.clone(),
        authorization: authorization.clone(),
    });
    let body = match path.as_str() {
        "/hop/negotiate" => json!({
            "url": format!("{}/bench", state.base),
            "accessToken": "hop-token",
        }),
        "/bench/negotiate" => {
            if authorization.as_deref() != Some("Bearer hop-token") {
                return StatusCode::UNAUTHORIZED.into_response();
            }
            state
                .app
                .negotiate(HUB, &query, Some("bob"))
                .unwrap()
                .to_json()
        }
        "/loop/negotiate" => json!({"url": format!("{}/loop", state.base)}),
        "/fail/negotiate" => json!({"error": "no negotiating today"}),
        _ => return StatusCode::NOT_FOUND.into_response(),
    };
    axum::Json(body).into_response()
}

async fn redirect_server(app: &AppServer) -> (String, Arc<Mutex<Vec<Seen>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let state = RedirectState {
        app: app.handle(),
        base: base.clone(),
        seen: seen.clone(),
    };
    let router = axum::Router::new()
        .route("/{app}/negotiate", axum::routing::post(negotiate_endpoint))
        .with_state(state);
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    (base, seen)
}

/// App → app → service: two redirects, each token replacing the one before; then every
/// transport works at the service with the last one.
#[tokio::test]
async fn follows_negotiate_redirects() {
    let service = Service::start().await;
    let (base, seen) = redirect_server(service.app()).await;
    for (transport, format) in [
        (Transport::WebSockets, Format::Json),
        (Transport::ServerSentEvents, Format::Json),
        (Transport::LongPolling, Format::MessagePack),
    ] {
        seen.lock().clear();
        let mut options = ConnectOptions::new(transport, format);
        options.access_token = Some("initial-token".into());
        let mut connection = open(&format!("{base}/hop"), &options).await;
        // The service's token (from the app server's redirect) names user bob.
        let (_, user) = call(&mut connection, "1", "GetUserId", vec![]).await;
        assert_eq!(user, Ok(json!("bob")));
        let (_, id) = call(&mut connection, "2", "GetConnectionId", vec![]).await;
        assert_eq!(id, Ok(json!(connection.connection_id())));
        let seen = seen.lock().clone();
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert_eq!(seen[0].path, "/hop/negotiate");
        assert_eq!(seen[0].query, "negotiateVersion=1");
        assert_eq!(
            seen[0].authorization.as_deref(),
            Some("Bearer initial-token")
        );
        assert_eq!(seen[1].path, "/bench/negotiate");
        assert_eq!(seen[1].query, "negotiateVersion=1");
        assert_eq!(seen[1].authorization.as_deref(), Some("Bearer hop-token"));
        within("close", connection.close()).await;
    }
    service.wait_no_clients().await;
}

#[tokio::test]
async fn redirects_stop_after_one_hundred_negotiates() {
    let service = Service::start().await;
    let (base, seen) = redirect_server(service.app()).await;
    let options = ConnectOptions::new(Transport::WebSockets, Format::Json);
    let error = open_err(&format!("{base}/loop"), &options).await;
    assert!(
        error
            .to_string()
            .contains("Negotiate redirection limit exceeded"),
        "{error}"
    );
    let seen = seen.lock();
    assert_eq!(seen.len(), 100);
    assert!(seen.iter().all(|s| s.path == "/loop/negotiate"));
    // A redirect without a token keeps the current one (none here).
    assert!(seen.iter().all(|s| s.authorization.is_none()));
}

#[tokio::test]
async fn a_negotiate_error_is_returned() {
    let service = Service::start().await;
    let (base, _) = redirect_server(service.app()).await;
    let options = ConnectOptions::new(Transport::LongPolling, Format::Json);
    match open_err(&format!("{base}/fail"), &options).await {
        ClientError::Negotiate { status: 200, body } => assert_eq!(body, "no negotiating today"),
        other => panic!("expected a negotiate error, got {other:?}"),
    }
}

/// A TCP relay in front of the service that notes each connection's source address.
async fn recording_relay(target: SocketAddr) -> (SocketAddr, Arc<Mutex<Vec<SocketAddr>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let peers = Arc::new(Mutex::new(Vec::new()));
    tokio::spawn({
        let peers = peers.clone();
        async move {
            loop {
                let (mut inbound, peer) = listener.accept().await.unwrap();
                peers.lock().push(peer);
                tokio::spawn(async move {
                    let mut outbound = TcpStream::connect(target).await.unwrap();
                    let _ = inbound.set_nodelay(true);
                    let _ = outbound.set_nodelay(true);
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                });
            }
        }
    });
    (addr, peers)
}

/// Every socket (negotiate, WebSocket, event stream, polls, sends) comes from 127.0.0.2,
/// with the HTTP client built by `connect` and with a shared one.
#[tokio::test]
async fn binds_the_local_address() {
    let service = Service::start().await;
    let (relay, peers) = recording_relay(service.addr).await;
    // The token's audience names 127.0.0.1 without port, so it fits the relay too.
    let url = format!("http://{relay}/client/?hub={HUB}");
    let local = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
    let shared = http_client(Some(local));
    let mut count = 0;
    for (transport, format) in [
        (Transport::WebSockets, Format::MessagePack),
        (Transport::ServerSentEvents, Format::Json),
        (Transport::LongPolling, Format::Json),
    ] {
        for http in [None, Some(shared.clone())] {
            let mut options = service.options(transport, format);
            options.local_address = Some(local);
            options.http = http;
            let mut connection = open(&url, &options).await;
            count += 1;
            let (measures, _) =
                call(&mut connection, "1", "Echo", vec![json!(count), json!("x")]).await;
            assert_eq!(measures, [vec![json!(count), json!("x")]]);
            within("close", connection.close()).await;
        }
    }
    let peers = peers.lock();
    // At least negotiate + the transport per connection, but pooled HTTP connections may
    // be reused.
    assert!(peers.len() >= 6, "{peers:?}");
    assert!(peers.iter().all(|p| p.ip() == local), "{peers:?}");
}

/// `next_frame` inside `select!` with a timer that wins most of the time: nothing is lost
/// or torn, whatever the transport.
#[tokio::test]
async fn next_frame_is_cancel_safe() {
    let service = Arc::new(Service::start().await);
    for (transport, format) in [
        (Transport::WebSockets, Format::Json),
        (Transport::WebSockets, Format::MessagePack),
        (Transport::ServerSentEvents, Format::Json),
        (Transport::LongPolling, Format::MessagePack),
    ] {
        let options = service.options(transport, format);
        let mut connection = open(&service.client_url(), &options).await;
        // Joined the hub once this completes.
        let (_, id) = call(&mut connection, "1", "GetConnectionId", vec![]).await;
        assert_eq!(id, Ok(json!(connection.connection_id())));

        // Nothing is on its way: the timer wins every round.
        let mut cancelled = 0;
        while cancelled < 50 {
            tokio::select! {
                frame = connection.next_frame() => {
                    let frame = frame.unwrap();
                    assert!(matches!(decode(format, &frame), Ok(HubMessage::Ping)));
                }
                _ = tokio::time::sleep(Duration::from_millis(1)) => cancelled += 1,
            }
        }

        // A large message and a burst of small ones, sent while reads keep being cancelled.
        let big = "x".repeat(300 * 1024);
        let sender = tokio::spawn({
            let service = service.clone();
            let big = big.clone();
            async move {
                service.rest_broadcast("Notify", json!([big])).await;
                for i in 0..20 {
                    service.rest_broadcast("Notify", json!([i])).await;
                }
            }
        });
        let mut expected: Vec<Value> = vec![json!([big])];
        expected.extend((0..20).map(|i| json!([i])));
        let mut received = Vec::new();
        let mut interrupted = 0;
        let deadline = tokio::time::Instant::now() + STEP;
        while received.len() < expected.len() {
            assert!(tokio::time::Instant::now() < deadline, "timed out");
            tokio::select! {
                frame = connection.next_frame() => {
                    match decode(format, &frame.unwrap()).unwrap() {
                        HubMessage::Ping => {}
                        HubMessage::Invocation { target, arguments, .. } => {
                            assert_eq!(target, "Notify");
                            received.push(Value::Array(arguments));
                        }
                        other => panic!("unexpected {other:?}"),
                    }
                }
                _ = tokio::time::sleep(Duration::from_micros(200)) => interrupted += 1,
            }
        }
        sender.await.unwrap();
        assert_eq!(
            received, expected,
            "{transport} {format:?}, {interrupted} reads interrupted"
        );
        within("close", connection.close()).await;
    }
    service.wait_no_clients().await;
}

/// The service closes the connection (REST close): a Close message, then `Closed`.
#[tokio::test]
async fn a_server_close_ends_every_transport() {
    let service = Service::start().await;
    for (transport, format) in [
        (Transport::WebSockets, Format::Json),
        (Transport::ServerSentEvents, Format::Json),
        (Transport::LongPolling, Format::MessagePack),
    ] {
        let options = service.options(transport, format);
        let mut connection = open(&service.client_url(), &options).await;
        let (_, id) = call(&mut connection, "1", "GetConnectionId", vec![]).await;
        assert_eq!(id, Ok(json!(connection.connection_id())));
        let url = format!(
            "http://{}/api/hubs/{HUB}/connections/{}",
            service.addr,
            connection.connection_id()
        );
        let token = TokenBuilder::new(&url).sign(EMULATOR_ACCESS_KEY, now());
        let response = reqwest::Client::new()
            .delete(format!("{url}?api-version=2022-06-01&reason=bye"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success(), "{}", response.status());
        match next(&mut connection).await {
            HubMessage::Close { .. } => {}
            other => panic!("expected Close, got {other:?}"),
        }
        match within("the end", connection.next_frame()).await {
            Err(ClientError::Closed) => {}
            other => panic!("{transport}: expected Closed, got {other:?}"),
        }
    }
    service.wait_no_clients().await;
}
