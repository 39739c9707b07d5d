//! Stateful reconnect of `switchyard_client::connect` against the real service in-process:
//! sockets dropped abruptly (`abort_transport`) in the middle of traffic both ways, in Default
//! mode (the Rust app server with the benchmark hub) and serverless (REST sends); every
//! message arrives exactly once and in order, duplicates are dropped, and a client that comes
//! back after the window gets an error.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use switchyard_auth::{TokenBuilder, EMULATOR_ACCESS_KEY};
use switchyard_bench::hub::BenchHub;
use switchyard_client::app_server::AppServer;
use switchyard_client::{connect, decode, ConnectOptions, Connection, Transport};
use switchyard_hub_protocol::{encode_invocation, Format, HubMessage};
use switchyard_node::config::Config;
use switchyard_testkit::{now, TestServer};

const HUB: &str = "bench";
const STEP: Duration = Duration::from_secs(10);

struct Service {
    server: TestServer,
    _app: Option<AppServer>,
}

impl Service {
    /// Serverless unless `app_server`; the service's reconnect window is `window`.
    async fn start(app_server: bool, window: Duration) -> Service {
        let mut config = Config::default();
        config.stateful_reconnect.window = window;
        let server = TestServer::start_with(config).await;
        let app = if app_server {
            let mut config = server.app_server_config(&[HUB]);
            config.allow_stateful_reconnects = true;
            Some(server.start_app_server(config, Arc::new(BenchHub)).await)
        } else {
            None
        };
        Service { server, _app: app }
    }

    fn client_url(&self) -> String {
        format!("http://{}/client/?hub={HUB}", self.server.addr)
    }

    fn options(&self, format: Format) -> ConnectOptions {
        let mut options = ConnectOptions::new(Transport::WebSockets, format);
        options.access_token = Some(
            TokenBuilder::new(self.client_url())
                .claim("asrs.s.uid", "alice")
                .sign(EMULATOR_ACCESS_KEY, now()),
        );
        options.stateful_reconnect = true;
        options
    }

    async fn open(&self, format: Format) -> Connection {
        let connection = within(
            "connect",
            connect(&self.client_url(), &self.options(format)),
        )
        .await
        .expect("connects");
        assert!(connection.is_stateful(), "the service agreed");
        connection
    }

    /// `POST /api/hubs/bench/connections/{id}/:send`: `Measure(n)` to one connection.
    async fn rest_send(&self, connection_id: &str, n: u64) {
        let url = format!(
            "http://{}/api/hubs/{HUB}/connections/{connection_id}/:send",
            self.server.addr
        );
        let token = TokenBuilder::new(&url).sign(EMULATOR_ACCESS_KEY, now());
        let response = reqwest::Client::new()
            .post(format!("{url}?api-version=2022-06-01"))
            .bearer_auth(token)
            .json(&json!({"target": "Measure", "arguments": [n, "rest"]}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 202, "{}", response.text().await.unwrap());
    }
}

async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(STEP, future)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

/// The first argument of the next `Measure` invocation (pings and anything else skipped).
async fn next_measure(connection: &mut Connection) -> u64 {
    loop {
        let body = within("a message", connection.next_frame())
            .await
            .expect("the connection carries on");
        match decode(connection.format(), &body).unwrap() {
            HubMessage::Invocation {
                target, arguments, ..
            } if target == "Measure" => return arguments[0].as_u64().expect("a number"),
            HubMessage::Ping => {}
            HubMessage::Ack { .. } | HubMessage::Sequence { .. } => {
                panic!("stateful-reconnect bookkeeping must not reach the caller")
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

fn echo(format: Format, n: u64) -> bytes::Bytes {
    encode_invocation(format, "Echo", &[Value::from(n), Value::from("payload")])
}

/// Default mode: the client invokes Echo(n) and gets Measure(n) back, while its socket is
/// dropped at different points: between sends, with replies still in flight, with its own
/// sends not yet acknowledged, and while it is away.
async fn echo_across_drops(format: Format) {
    let service = Service::start(true, Duration::from_secs(15)).await;
    let mut connection = service.open(format).await;
    let mut expected = 0u64;
    let mut sent = 0u64;
    for round in 0..6u64 {
        for _ in 0..5 {
            connection.send_raw(echo(format, sent)).await.unwrap();
            sent += 1;
        }
        // Read some replies, leave the others in flight.
        for _ in 0..2 {
            assert_eq!(next_measure(&mut connection).await, expected);
            expected += 1;
        }
        connection.abort_transport();
        if round % 2 == 1 {
            // Let the service notice the drop before the client comes back.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // The send goes out on a new socket, after the replay.
        if let Err(e) = connection.send_raw(echo(format, sent)).await {
            panic!("round {round}: {e}");
        }
        sent += 1;
    }
    while expected < sent {
        assert_eq!(next_measure(&mut connection).await, expected);
        expected += 1;
    }
    let stats = connection.stateful_stats().unwrap();
    assert_eq!(stats.reconnects, 6, "{stats:?}");
    // Nothing more: no duplicate reply is still on its way.
    connection.send_raw(echo(format, sent)).await.unwrap();
    assert_eq!(next_measure(&mut connection).await, sent);
    connection.close().await;
}

#[tokio::test]
async fn default_mode_json_messages_both_ways_survive_drops() {
    echo_across_drops(Format::Json).await;
}

#[tokio::test]
async fn default_mode_messagepack_messages_both_ways_survive_drops() {
    echo_across_drops(Format::MessagePack).await;
}

/// Serverless: REST sends to the connection while it is connected and while it is away; each
/// arrives once, in order.
#[tokio::test]
async fn serverless_rest_sends_survive_drops() {
    let service = Service::start(false, Duration::from_secs(15)).await;
    let mut connection = service.open(Format::Json).await;
    let id = connection.connection_id().to_owned();
    let mut n = 0u64;
    let mut expected = 0u64;
    for _ in 0..4 {
        for _ in 0..3 {
            service.rest_send(&id, n).await;
            n += 1;
        }
        assert_eq!(next_measure(&mut connection).await, expected);
        expected += 1;
        connection.abort_transport();
        // Sent while the client is away: queued, then replayed.
        tokio::time::sleep(Duration::from_millis(100)).await;
        for _ in 0..2 {
            service.rest_send(&id, n).await;
            n += 1;
        }
    }
    while expected < n {
        assert_eq!(next_measure(&mut connection).await, expected);
        expected += 1;
    }
    let stats = connection.stateful_stats().unwrap();
    assert_eq!(stats.reconnects, 4, "{stats:?}");
    connection.close().await;
}

/// Messages received but not acknowledged yet (the Ack waits about a second) are replayed by
/// the service after a drop; the client drops them as duplicates.
#[tokio::test]
async fn a_replayed_duplicate_is_dropped() {
    let service = Service::start(false, Duration::from_secs(15)).await;
    let mut connection = service.open(Format::Json).await;
    let id = connection.connection_id().to_owned();
    for n in 0..3 {
        service.rest_send(&id, n).await;
    }
    for n in 0..3 {
        assert_eq!(next_measure(&mut connection).await, n);
    }
    // Well within the Ack delay.
    connection.abort_transport();
    service.rest_send(&id, 3).await;
    assert_eq!(next_measure(&mut connection).await, 3);
    let stats = connection.stateful_stats().unwrap();
    assert_eq!(stats.duplicates, 3, "{stats:?}");
    assert_eq!(stats.reconnects, 1, "{stats:?}");
}

/// The service acknowledges what the client sent, and `next_frame` acknowledges what it
/// received while it waits: after a quiet second and a half, nothing is kept on either side,
/// so a drop replays nothing.
#[tokio::test]
async fn acknowledgements_flow_while_the_caller_waits() {
    let service = Service::start(true, Duration::from_secs(15)).await;
    let mut connection = service.open(Format::Json).await;
    for n in 0..3 {
        connection.send_raw(echo(Format::Json, n)).await.unwrap();
    }
    for n in 0..3 {
        assert_eq!(next_measure(&mut connection).await, n);
    }
    assert!(connection.stateful_buffered_bytes() > 0);
    // Nothing arrives: next_frame only writes its Ack and reads the service's.
    let quiet = tokio::time::timeout(Duration::from_millis(2500), connection.next_frame()).await;
    assert!(quiet.is_err(), "nothing was due: {quiet:?}");
    assert_eq!(
        connection.stateful_buffered_bytes(),
        0,
        "the service acknowledged"
    );
    connection.abort_transport();
    connection.send_raw(echo(Format::Json, 3)).await.unwrap();
    assert_eq!(next_measure(&mut connection).await, 3);
    let stats = connection.stateful_stats().unwrap();
    assert_eq!(
        (stats.replayed, stats.duplicates),
        (0, 0),
        "everything had been acknowledged both ways: {stats:?}"
    );
}

/// A client that comes back after the service's window finds its connection gone: the
/// connection ends with an error, and stays ended.
#[tokio::test]
async fn coming_back_after_the_window_is_an_error() {
    let service = Service::start(true, Duration::from_secs(1)).await;
    let mut connection = service.open(Format::Json).await;
    connection.send_raw(echo(Format::Json, 0)).await.unwrap();
    assert_eq!(next_measure(&mut connection).await, 0);
    connection.abort_transport();
    let node = service.server.node.clone();
    let deadline = tokio::time::Instant::now() + STEP;
    while node.client_connection_count() > 0 {
        assert!(tokio::time::Instant::now() < deadline, "the window passes");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let error = within("the reconnect fails", connection.next_frame())
        .await
        .expect_err("the connection is gone");
    assert!(error.to_string().contains("404"), "{error}");
    let again = connection.send_raw(echo(Format::Json, 1)).await;
    assert!(again.is_err(), "{again:?}");
}

/// Without a server to come back to, reconnecting stops at the client's own window.
#[tokio::test]
async fn the_client_window_bounds_reconnecting() {
    let service = Service::start(false, Duration::from_secs(15)).await;
    let mut options = service.options(Format::Json);
    options.stateful_reconnect_window = Duration::from_millis(600);
    let mut connection = connect(&service.client_url(), &options).await.unwrap();
    drop(service);
    connection.abort_transport();
    let started = tokio::time::Instant::now();
    let error = within("the reconnect fails", connection.next_frame())
        .await
        .expect_err("nothing to reconnect to");
    assert!(started.elapsed() >= Duration::from_millis(500), "{error}");
    assert!(error.to_string().contains("stateful reconnect"), "{error}");
}

/// Other transports ignore the option; with it off nothing changes.
#[tokio::test]
async fn only_websockets_use_it() {
    let service = Service::start(true, Duration::from_secs(15)).await;
    let mut options = service.options(Format::Json);
    options.transport = Transport::LongPolling;
    let mut connection = connect(&service.client_url(), &options).await.unwrap();
    assert!(!connection.is_stateful());
    assert_eq!(connection.stateful_stats(), None);
    connection.send_raw(echo(Format::Json, 7)).await.unwrap();
    assert_eq!(next_measure(&mut connection).await, 7);
    connection.close().await;
    let mut options = service.options(Format::Json);
    options.stateful_reconnect = false;
    let mut connection = connect(&service.client_url(), &options).await.unwrap();
    assert!(!connection.is_stateful());
    connection.abort_transport();
    assert!(
        connection.next_frame().await.is_err(),
        "no reconnect without it"
    );
}
