//! The security audit's findings (README, "Security"), each reproduced against a live node the way the
//! audit tried it, and shown fixed: session binding, HTTP timeouts and socket caps, the
//! client → app-server budget, forwarded headers, audiences, pending negotiations, upstream
//! amplification, and the low-severity items.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream as StdTcpStream;
use std::time::{Duration, Instant};

use common::{eventually, now, within, AppServer, Http, TestServer, HANDSHAKE_JSON, WAIT};
use switchyard_auth::TokenBuilder;
use switchyard_node::Config;

/// Reads until the server closes the socket (or `limit` passes); whether it closed.
fn closed_within(stream: &mut StdTcpStream, limit: Duration) -> bool {
    stream.set_read_timeout(Some(limit)).unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return started.elapsed() < limit,
        }
    }
}

// ---------------------------------------------------------------------------------------
// 1. Session binding
// ---------------------------------------------------------------------------------------

/// A v0 connection is found by its (public) connection id: another user of the hub holding
/// it used to read the victim's polls, send as the victim and end the connection.
#[tokio::test]
async fn a_v0_session_belongs_to_whoever_negotiated_it() {
    let mut config = Config::default();
    config.timeouts.long_poll_timeout = Duration::from_millis(500);
    let server = TestServer::start_with(config).await;
    let victim = Http::for_user(&server, "chat", "alice");
    let negotiated = switchyard_client::negotiate(&victim.base, &victim.token, 0)
        .await
        .unwrap();
    let id = negotiated.connection_id;
    assert_eq!(victim.poll(&id).await.status(), 200);
    assert_eq!(victim.post(&id, HANDSHAKE_JSON).await.status(), 200);
    assert_eq!(
        &victim.poll(&id).await.bytes().await.unwrap()[..],
        b"{}\x1e"
    );
    let attacker = Http::for_user(&server, "chat", "mallory");
    assert_eq!(
        attacker.poll(&id).await.status(),
        404,
        "read the victim's poll"
    );
    assert_eq!(
        attacker
            .post(&id, b"{\"type\":1,\"target\":\"x\",\"arguments\":[]}\x1e")
            .await
            .status(),
        404,
        "sent as the victim"
    );
    assert_eq!(attacker.delete(&id).await.status(), 404, "ended the victim");
    // A WebSocket with the victim's id is refused too.
    let url = format!("{}&id={id}", server.ws_url("chat", None));
    let refused = switchyard_client::WsClient::connect(
        &url,
        Some(&attacker.token),
        switchyard_hub_protocol::Format::Json,
    )
    .await;
    assert!(refused.is_err(), "a WebSocket took over the session");
    // The victim is untouched and still receives.
    server.broadcast("chat", "still", &[]);
    let body = victim.poll(&id).await.bytes().await.unwrap();
    assert!(String::from_utf8_lossy(&body).contains("still"), "{body:?}");
    // A fresh token of the same user (token factories sign one per request) is the owner.
    let again = Http::for_user(&server, "chat", "alice");
    assert_eq!(again.poll(&id).await.status(), 200);
}

/// Anonymous tokens with the same claims are one owner, so a v0 session (found by its public
/// connection id) used to be open to every anonymous visitor: another one sent on it (200)
/// and ended it (202). It is bound to the address that negotiated it.
#[tokio::test]
async fn an_anonymous_v0_session_belongs_to_its_address() {
    let mut config = Config::default();
    config.timeouts.long_poll_timeout = Duration::from_millis(500);
    let server = TestServer::start_with(config).await;
    let visitor = |address: &str| Http {
        client: reqwest::Client::builder()
            .local_address(address.parse::<std::net::IpAddr>().unwrap())
            .build()
            .unwrap(),
        base: server.client_url("chat"),
        token: server.token("chat", None),
    };
    let (first, second) = (visitor("127.0.0.1"), visitor("127.0.0.2"));
    let negotiated = switchyard_client::negotiate(&first.base, &first.token, 0)
        .await
        .unwrap();
    let id = negotiated.connection_id;
    assert_eq!(first.poll(&id).await.status(), 200);
    assert_eq!(first.post(&id, HANDSHAKE_JSON).await.status(), 200);
    assert_eq!(&first.poll(&id).await.bytes().await.unwrap()[..], b"{}\x1e");
    let invocation = b"{\"type\":1,\"target\":\"x\",\"arguments\":[]}\x1e";
    assert_eq!(
        second.post(&id, invocation).await.status(),
        404,
        "sent on it"
    );
    assert_eq!(second.delete(&id).await.status(), 404, "ended it");
    assert_eq!(second.poll(&id).await.status(), 404, "read its poll");
    // The visitor itself, with a fresh token of the same claims, still can.
    let again = visitor("127.0.0.1");
    assert_eq!(again.post(&id, b"{\"type\":6}\x1e").await.status(), 200);
    assert_eq!(again.delete(&id).await.status(), 202);
}

/// The same check holds for negotiate v1's connection token (defence in depth).
#[tokio::test]
async fn a_v1_connection_token_is_bound_to_its_user_too() {
    let server = TestServer::start().await;
    let victim = Http::for_user(&server, "chat", "alice");
    let token = victim.open_long_polling().await;
    let attacker = Http::for_user(&server, "chat", "mallory");
    assert_eq!(attacker.poll(&token).await.status(), 404);
    assert_eq!(victim.delete(&token).await.status(), 202);
}

// ---------------------------------------------------------------------------------------
// 2. HTTP timeouts and socket caps
// ---------------------------------------------------------------------------------------

fn quick_timeouts() -> Config {
    let mut config = Config::default();
    config.timeouts.request_header_timeout = Duration::from_millis(500);
    config.timeouts.request_body_timeout = Duration::from_millis(500);
    config
}

/// Sockets that send nothing, headers that trickle, and idle keep-alive sockets are closed
/// after `timeouts.request_header_timeout`; they used to stay open forever.
#[tokio::test]
async fn idle_and_slow_sockets_are_closed() {
    let server = TestServer::start_with(quick_timeouts()).await;
    let addr = server.addr;
    tokio::task::spawn_blocking(move || {
        let mut silent = StdTcpStream::connect(addr).unwrap();
        assert!(
            closed_within(&mut silent, Duration::from_secs(5)),
            "silent socket"
        );
        let mut slow = StdTcpStream::connect(addr).unwrap();
        slow.write_all(b"GET /api/health HTTP/1.1\r\nHo").unwrap();
        assert!(
            closed_within(&mut slow, Duration::from_secs(5)),
            "slow headers"
        );
        // After one request on a keep-alive socket, idleness ends it too.
        let mut kept = StdTcpStream::connect(addr).unwrap();
        kept.write_all(b"GET /api/health HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .unwrap();
        assert!(
            closed_within(&mut kept, Duration::from_secs(5)),
            "idle keep-alive"
        );
    })
    .await
    .unwrap();
}

/// A body that does not arrive in time is answered 408 (REST and SSE/long-polling sends).
#[tokio::test]
async fn slow_bodies_are_answered_408() {
    let server = TestServer::start_with(quick_timeouts()).await;
    let path = "/api/hubs/chat/:send";
    let token = TokenBuilder::new(format!("{}{path}", server.http())).sign(&server.key(), now());
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"target\""
    );
    let response = tokio::task::spawn_blocking({
        let server_addr = server.addr;
        move || {
            let mut stream = StdTcpStream::connect(server_addr).unwrap();
            stream.write_all(request.as_bytes()).unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            let mut buf = vec![0u8; 4096];
            let n = stream.read(&mut buf).unwrap_or(0);
            String::from_utf8_lossy(&buf[..n]).into_owned()
        }
    })
    .await
    .unwrap();
    assert!(response.starts_with("HTTP/1.1 408"), "{response}");
    assert!(response.contains("did not arrive within"), "{response}");
}

/// Past `max_http_connections − reserved_http_connections` sockets only health, metrics and
/// app servers are served (503 for anything else); at the cap a new socket takes the place of
/// the oldest one doing nothing; and one address holds at most `max_connections_per_address`.
/// A flood of idle sockets used to make health time out and fill the log with "Too many open
/// files".
#[tokio::test]
async fn socket_caps_keep_a_reserve_for_operators() {
    let mut config = Config::default();
    config.limits.max_http_connections = 8;
    config.limits.reserved_http_connections = 3;
    let server = TestServer::start_with(config).await;
    let addr = server.addr;
    let token = server.token("chat", None);
    tokio::task::spawn_blocking(move || {
        // Five idle sockets: the next ones are in the reserve (8 − 3).
        let mut held: Vec<StdTcpStream> = (0..5)
            .map(|_| StdTcpStream::connect(addr).unwrap())
            .collect();
        std::thread::sleep(Duration::from_millis(200));
        let exchange = |request: String| {
            let mut stream = StdTcpStream::connect(addr).unwrap();
            stream.write_all(request.as_bytes()).unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            let mut buf = vec![0u8; 4096];
            let n = stream.read(&mut buf).unwrap_or(0);
            (stream, String::from_utf8_lossy(&buf[..n]).into_owned())
        };
        let (_refused, negotiate) = exchange(format!(
            "POST /client/negotiate?hub=chat HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\nContent-Length: 0\r\n\r\n"
        ));
        assert!(negotiate.starts_with("HTTP/1.1 503"), "{negotiate}");
        assert!(negotiate.contains("max_http_connections"), "{negotiate}");
        let (health_socket, health) =
            exchange("GET /api/health HTTP/1.1\r\nHost: localhost\r\n\r\n".into());
        assert!(health.starts_with("HTTP/1.1 200"), "{health}");
        let (metrics_socket, metrics) =
            exchange("GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n".into());
        assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
        assert!(
            metrics.contains("switchyard_http_connections_refused_total{reason=\"reserved\"} 1"),
            "{metrics}"
        );
        held.extend([health_socket, metrics_socket]);
        // Seven open (the refused one was closed): one more fills the cap, the next takes the
        // place of the oldest socket doing nothing, the first silent one.
        held.push(StdTcpStream::connect(addr).unwrap());
        std::thread::sleep(Duration::from_millis(100));
        let (over, health) = exchange("GET /api/health HTTP/1.1\r\nHost: localhost\r\n\r\n".into());
        assert!(health.starts_with("HTTP/1.1 200"), "{health}");
        assert!(
            closed_within(&mut held[0], Duration::from_secs(2)),
            "the oldest silent socket gave way"
        );
        drop((held, over));
    })
    .await
    .unwrap();
    // Sockets freed, service as usual.
    let connections = server.node.metrics.clone();
    eventually("the held sockets noticed closed", WAIT, || {
        connections
            .encode()
            .contains("switchyard_http_connections 0")
    })
    .await;
    let ok =
        switchyard_client::negotiate(&server.client_url("chat"), &server.token("chat", None), 1)
            .await;
    assert!(ok.is_ok(), "{ok:?}");

    let mut config = Config::default();
    config.limits.max_connections_per_address = 2;
    // Loopback, where this test connects from, is exempt by default.
    config.limits.exempt_addresses = Vec::new();
    let server = TestServer::start_with(config).await;
    let addr = server.addr;
    tokio::task::spawn_blocking(move || {
        let _one = StdTcpStream::connect(addr).unwrap();
        let _two = StdTcpStream::connect(addr).unwrap();
        let mut three = StdTcpStream::connect(addr).unwrap();
        assert!(
            closed_within(&mut three, Duration::from_secs(2)),
            "per address"
        );
    })
    .await
    .unwrap();
    let metrics = server.node.metrics.clone();
    eventually("the per-address refusal counted", WAIT, || {
        metrics
            .encode()
            .contains("switchyard_http_connections_refused_total{reason=\"per_address\"} 1")
    })
    .await;
    // Once the server notices the three closes, the address has room again.
    eventually("the address's sockets noticed closed", WAIT, || {
        metrics.encode().contains("switchyard_http_connections 0")
    })
    .await;
    let ok =
        switchyard_client::negotiate(&server.client_url("chat"), &server.token("chat", None), 1)
            .await;
    assert!(ok.is_ok(), "{ok:?}");
}

/// One peer re-opening silent sockets as fast as the node closes them: `n` sockets (more
/// than the cap) until `stop`.
fn hold_silent_sockets(addr: std::net::SocketAddr, n: usize, stop: &std::sync::atomic::AtomicBool) {
    let mut sockets: Vec<Option<StdTcpStream>> = (0..n).map(|_| None).collect();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        for slot in &mut sockets {
            let closed = slot.as_ref().is_none_or(|socket| {
                let mut byte = [0u8; 1];
                !matches!(socket.peek(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
            });
            if closed {
                *slot = StdTcpStream::connect(addr).ok().inspect(|socket| {
                    socket.set_nonblocking(true).unwrap();
                });
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Whether a GET of `path` is answered 200 within a generous liveness bound.
fn answered(addr: std::net::SocketAddr, path: &str) -> bool {
    let bound = Duration::from_secs(5);
    let Ok(mut stream) = StdTcpStream::connect_timeout(&addr, bound) else {
        return false;
    };
    stream.set_read_timeout(Some(bound)).unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.1 200")
}

/// A peer holding more silent sockets than the cap and re-opening each one as it is closed
/// used to keep every place, the reserve included: 1 of 32 health probes was answered. At the
/// cap a new socket now takes the place of the oldest one doing nothing, so health, metrics
/// and app servers are still answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_sockets_cannot_hold_the_reserve() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let mut config = Config::default();
    config.limits.max_http_connections = 20;
    config.limits.reserved_http_connections = 5;
    let server = TestServer::start_with(config).await;
    let addr = server.addr;
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let peer = std::thread::spawn({
        let stop = stop.clone();
        move || hold_silent_sockets(addr, 25, &stop)
    });
    let metrics = server.node.metrics.clone();
    eventually("the peer fills the cap", WAIT, || {
        metrics.encode().contains("switchyard_http_connections 20")
    })
    .await;
    let probes = tokio::task::spawn_blocking(move || {
        (0..32)
            .filter(|i| {
                answered(
                    addr,
                    if i % 2 == 0 {
                        "/api/health"
                    } else {
                        "/metrics"
                    },
                )
            })
            .count()
    })
    .await
    .unwrap();
    let token = server.server_token("chat", "s1");
    let app_server = tokio::time::timeout(
        Duration::from_secs(10),
        common::dial(&server, "chat", Some(&token), Some("s1")),
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    peer.join().unwrap();
    assert!(
        probes >= 30,
        "{probes} of 32 health and metrics probes answered"
    );
    assert!(
        matches!(app_server, Ok(Ok(_))),
        "an app server could not connect at the cap"
    );
    assert!(
        metrics
            .encode()
            .contains("switchyard_http_connections_refused_total{reason=\"evicted\"}"),
        "evictions are counted"
    );
}

/// A WebSocket keeps its socket's place in the cap after the upgrade (the HTTP connection
/// ends there, the socket does not), is not closed as an idle HTTP socket, and gives its place
/// up when it closes. (The gauge and the cap count with the same ticket.)
#[tokio::test]
async fn websockets_count_against_the_socket_cap() {
    use switchyard_hub_protocol::Format;
    let mut config = Config::default();
    config.limits.max_http_connections = 16;
    config.limits.reserved_http_connections = 0;
    // Negotiate's keep-alive sockets are closed soon, so only the WebSockets stay.
    config.timeouts.request_header_timeout = Duration::from_millis(500);
    let server = TestServer::start_with(config).await;
    let token = server.token("chat", None);
    let mut clients = Vec::new();
    for _ in 0..3 {
        let (mut client, _) = common::RawClient::start(&server, "chat", &token, Format::Json).await;
        client.handshake_result().await.unwrap();
        clients.push(client);
    }
    let metrics = server.node.metrics.clone();
    eventually("only the three WebSockets open", WAIT, || {
        metrics.encode().contains("switchyard_http_connections 3")
    })
    .await;
    // Well past the idle limit, the WebSockets are still open and counted.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(metrics.encode().contains("switchyard_http_connections 3"));
    assert_eq!(server.node.client_connection_count(), 3);
    clients.pop().unwrap().close().await;
    eventually("the closed WebSocket's socket released", WAIT, || {
        metrics.encode().contains("switchyard_http_connections 2")
    })
    .await;
}

/// With every place held by a WebSocket (none of them gives way), a socket over the cap is
/// closed at once.
#[tokio::test]
async fn over_a_cap_of_websockets_a_socket_is_closed() {
    use switchyard_hub_protocol::Format;
    let mut config = Config::default();
    config.limits.max_http_connections = 2;
    config.limits.reserved_http_connections = 0;
    config.timeouts.request_header_timeout = Duration::from_millis(300);
    let server = TestServer::start_with(config).await;
    let token = server.token("chat", None);
    let url = server.ws_url("chat", None);
    let mut clients = Vec::new();
    for _ in 0..2 {
        let mut client = common::RawClient::start_url(&url, &token, Format::Json).await;
        client.handshake_result().await.unwrap();
        clients.push(client);
    }
    let addr = server.addr;
    tokio::task::spawn_blocking(move || {
        let mut over = StdTcpStream::connect(addr).unwrap();
        assert!(
            closed_within(&mut over, Duration::from_secs(2)),
            "over the cap"
        );
    })
    .await
    .unwrap();
    assert_eq!(
        server.node.client_connection_count(),
        2,
        "a WebSocket gave way"
    );
    let metrics = server.node.metrics.encode();
    assert!(
        metrics.contains("switchyard_http_connections_refused_total{reason=\"full\"} 1"),
        "{metrics}"
    );
}

// ---------------------------------------------------------------------------------------
// 3. One client cannot cost others their app-server connection
// ---------------------------------------------------------------------------------------

/// Reads the app server's ConnectionData from `client` until `count` JSON messages came;
/// how many came.
async fn messages_to_app(app: &mut AppServer, client: &str, count: usize) -> usize {
    let mut received = 0;
    while received < count {
        let data = within(
            "the greedy client's messages",
            Duration::from_secs(30),
            app.connection_data(client),
        )
        .await;
        received += data.iter().filter(|&&b| b == 0x1e).count();
    }
    received
}

/// An app server that stops reading, and one client sending large messages: the client is
/// held back (its transport stops reading) instead of the shared server connection being
/// dropped, which used to close every other client on it with "app server … was lost".
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_greedy_client_is_held_back_not_its_neighbours() {
    use switchyard_hub_protocol::Format;
    let mut config = common::default_mode();
    config.limits.max_pending_bytes_per_server_connection = 1024 * 1024;
    config.limits.max_client_message_size = 1024 * 1024;
    let server = TestServer::start_with(config).await;
    let mut app = AppServer::open(&server, "chat", "app").await;
    let token = server.token("chat", Some("greedy"));
    let (mut greedy, greedy_id) =
        common::connect_client(&server, &mut app, "chat", &token, Format::Json).await;
    let token = server.token("chat", Some("bystander"));
    let (mut bystander, bystander_id) =
        common::connect_client(&server, &mut app, "chat", &token, Format::Json).await;
    // The app server stops reading; the greedy client sends 48 messages of 512 KB.
    let payload = "x".repeat(512 * 1024);
    let message = format!("{{\"type\":1,\"target\":\"big\",\"arguments\":[\"{payload}\"]}}\u{1e}");
    let sender = tokio::spawn(async move {
        for _ in 0..48 {
            greedy.send_raw(message.as_bytes()).await;
        }
        greedy
    });
    // Three seconds of an app server that does not read (its socket fills, then the queue).
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        server.node.server_connection_count(),
        1,
        "the shared server connection was dropped"
    );
    // The app server reads again: everything the greedy client sent arrives, in order.
    assert_eq!(messages_to_app(&mut app, &greedy_id, 48).await, 48);
    let mut greedy = within("the sender", WAIT, sender).await.unwrap();
    // Nobody was closed: both clients still get the app server's messages.
    let hello = common::Msg::invocation("hello", &[]);
    app.send_to(&bystander_id, &hello.json).await;
    bystander.expect(&hello).await;
    app.send_to(&greedy_id, &hello.json).await;
    greedy.expect(&hello).await;
}

/// Fills the socket to an app server that has stopped reading: `greedy` sends 64 KiB
/// messages until the service holds it back; the sender is returned to be awaited later.
fn flood(
    mut greedy: common::RawClient,
    count: usize,
) -> tokio::task::JoinHandle<common::RawClient> {
    let payload = "x".repeat(64 * 1024);
    let message = format!("{{\"type\":1,\"target\":\"big\",\"arguments\":[\"{payload}\"]}}\u{1e}");
    tokio::spawn(async move {
        for _ in 0..count {
            greedy.send_raw(message.as_bytes()).await;
        }
        greedy
    })
}

/// A config whose app-server queue holds `budget` bytes, clients' messages up to 64 KiB.
fn server_queue(budget: usize) -> Config {
    let mut config = common::default_mode();
    config.limits.max_pending_bytes_per_server_connection = budget;
    config.limits.max_client_message_size = 1024 * 1024;
    config
}

/// An app server that stops reading what the service sends still has what it sends read:
/// its messages reach clients throughout (one task used to read and write, so a write
/// waiting on the full socket stopped reads too, and after 10 s dropped the connection with
/// every client on it). Once it reads again, nothing is missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_app_server_that_stops_reading_is_still_read() {
    use switchyard_hub_protocol::Format;
    let server = TestServer::start_with(server_queue(1024 * 1024)).await;
    let mut app = AppServer::open(&server, "chat", "app").await;
    let token = server.token("chat", Some("greedy"));
    let (greedy, greedy_id) =
        common::connect_client(&server, &mut app, "chat", &token, Format::Json).await;
    let token = server.token("chat", Some("bystander"));
    let (mut bystander, bystander_id) =
        common::connect_client(&server, &mut app, "chat", &token, Format::Json).await;
    // 400 × 64 KiB = 25 MiB: more than the sockets hold, so the service's write waits.
    let sender = flood(greedy, 400);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!sender.is_finished(), "the sockets took the whole flood");
    // Twelve seconds of an app server that only writes: past the old 10 s write timeout.
    for i in 0..12 {
        let hello = common::Msg::invocation("hello", &[serde_json::json!(i)]);
        app.send_to(&bystander_id, &hello.json).await;
        bystander.expect(&hello).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert_eq!(server.node.server_connection_count(), 1);
    // It reads again: everything the greedy client sent arrives.
    assert_eq!(messages_to_app(&mut app, &greedy_id, 400).await, 400);
    within("the sender", WAIT, sender).await.unwrap();
}

/// A write waiting on an app server that reads nothing does not hold its backlog past the
/// queue's budget: messages that overflow it (here OpenConnections with large claims) cut
/// the connection at once, as a slow consumer, not after a write timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backlog_past_the_budget_cuts_a_waiting_write() {
    use switchyard_hub_protocol::Format;
    let server = TestServer::start_with(server_queue(256 * 1024)).await;
    let mut app = AppServer::open(&server, "chat", "app").await;
    let token = server.token("chat", Some("greedy"));
    let (greedy, _) = common::connect_client(&server, &mut app, "chat", &token, Format::Json).await;
    let sender = flood(greedy, 400);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!sender.is_finished(), "the sockets took the whole flood");
    assert_eq!(server.node.server_connection_count(), 1);
    // Each newcomer's OpenConnection carries 5 KB of claims (tokens are capped at 8 KB);
    // a few dozen pass the budget.
    let claim = "c".repeat(5 * 1024);
    let started = Instant::now();
    let mut newcomers = Vec::new();
    for _ in 0..64 {
        let token = server.token_with("chat", &[("big", claim.as_str())]);
        newcomers.push(common::RawClient::start(&server, "chat", &token, Format::Json).await);
        if server.node.server_connection_count() == 0 {
            break;
        }
    }
    eventually("the app-server connection cut", WAIT, || {
        server.node.server_connection_count() == 0
    })
    .await;
    let cut = started.elapsed();
    let slow = "switchyard_server_connections_closed_total{reason=\"slow_consumer\"}";
    common::eventually_async(
        &format!("counted as slow, cut after {cut:?}"),
        WAIT,
        || async { server.metric(slow).await == 1 },
    )
    .await;
    sender.abort();
}

/// An app server that keeps writing (its pings keep it from being silent) but reads nothing
/// at all is dropped once a write has waited `timeouts.server_timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_app_server_reading_nothing_for_the_server_timeout_is_dropped() {
    use switchyard_hub_protocol::Format;
    use switchyard_service_protocol::Ping;
    let mut config = server_queue(1024 * 1024);
    config.timeouts.server_keep_alive_interval = Duration::from_secs(1);
    config.timeouts.server_timeout = Duration::from_secs(3);
    let server = TestServer::start_with(config).await;
    let mut app = AppServer::open(&server, "chat", "app").await;
    let token = server.token("chat", Some("greedy"));
    let (greedy, _) = common::connect_client(&server, &mut app, "chat", &token, Format::Json).await;
    let sender = flood(greedy, 400);
    let stalled = "switchyard_server_connections_closed_total{reason=\"write_stalled\"}";
    within(
        "the stalled connection dropped",
        Duration::from_secs(20),
        async {
            while server.node.server_connection_count() == 1 {
                app.send(Ping::keep_alive()).await;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        },
    )
    .await;
    common::eventually_async("counted as write_stalled", WAIT, || async {
        server.metric(stalled).await == 1
    })
    .await;
    sender.abort();
}

// ---------------------------------------------------------------------------------------
// 5, 6. Forwarded headers and audiences
// ---------------------------------------------------------------------------------------

/// A client's own `X-Forwarded-For` used to reach the app server as its address; now only a
/// configured trusted proxy's does, and the app server gets the one address the service
/// computed from it (not the proxy's list: see client_edge.rs).
#[tokio::test]
async fn forwarded_for_is_believed_only_from_trusted_proxies() {
    use switchyard_hub_protocol::Format;
    for (trusted, expected) in [(false, "127.0.0.1"), (true, "6.6.6.6")] {
        let mut config = common::default_mode();
        if trusted {
            config.trusted_proxies = vec!["127.0.0.0/8".into()];
        }
        let server = TestServer::start_with(config).await;
        let mut app = AppServer::open(&server, "chat", "app").await;
        let token = server.token("chat", None);
        let negotiated = switchyard_client::negotiate(&server.client_url("chat"), &token, 1)
            .await
            .unwrap();
        let mut request =
            tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(
                server.ws_url("chat", Some(&negotiated.id_value)),
            )
            .unwrap();
        let headers = request.headers_mut();
        headers.insert("authorization", format!("Bearer {token}").parse().unwrap());
        headers.insert("x-forwarded-for", "6.6.6.6".parse().unwrap());
        let (mut ws, _) = tokio_tungstenite::connect_async(request).await.unwrap();
        use futures_util::SinkExt;
        ws.send(tokio_tungstenite::tungstenite::Message::Text(
            String::from_utf8(HANDSHAKE_JSON.to_vec()).unwrap().into(),
        ))
        .await
        .unwrap();
        let open = app.open_connection().await;
        let forwarded = common::header(&open.headers, "X-Forwarded-For").map(|v| v.join(","));
        assert_eq!(forwarded.as_deref(), Some(expected), "trusted={trusted}");
        let _ = Format::Json;
    }
}

/// A token minted for another host used to pass once the request said
/// `X-Forwarded-Host: <that host>`; audiences are checked against the service's own origins.
#[tokio::test]
async fn audiences_name_this_service_whatever_the_headers_say() {
    let server = TestServer::start().await;
    let client = reqwest::Client::new();
    let negotiate = |token: String, headers: Vec<(&'static str, &'static str)>| {
        let mut request = client
            .post(format!(
                "{}/client/negotiate?hub=chat&negotiateVersion=1",
                server.http()
            ))
            .bearer_auth(token);
        for (name, value) in headers {
            request = request.header(name, value);
        }
        request.send()
    };
    let foreign =
        TokenBuilder::new("https://evil.example/client/?hub=chat").sign(&server.key(), now());
    // Development mode answers another site's `Host` with 421 before any token is read
    // (client_edge.rs); the audience check refuses it too (401 with a key).
    for (headers, expected) in [
        (
            vec![
                ("x-forwarded-host", "evil.example"),
                ("x-forwarded-proto", "https"),
            ],
            401,
        ),
        (vec![("host", "evil.example")], 421),
    ] {
        let status = negotiate(foreign.clone(), headers.clone())
            .await
            .unwrap()
            .status();
        assert_eq!(status, expected, "{headers:?}");
    }
    // `localhost` names this loopback service as well as 127.0.0.1 does (the Emulator's
    // connection string uses it).
    let local = TokenBuilder::new(format!(
        "http://localhost:{}/client/?hub=chat",
        server.addr.port()
    ))
    .sign(&server.key(), now());
    assert_eq!(negotiate(local, vec![]).await.unwrap().status(), 200);
    server.stop().await;

    // Behind a proxy: the public endpoint is what tokens name.
    let server = TestServer::start_with(Config {
        public_endpoint: Some("https://signalr.example.com".into()),
        ..Config::default()
    })
    .await;
    let public = TokenBuilder::new("https://signalr.example.com/client/?hub=chat")
        .sign(&server.key(), now());
    let response = reqwest::Client::new()
        .post(format!(
            "{}/client/negotiate?hub=chat&negotiateVersion=1",
            server.http()
        ))
        .bearer_auth(public)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}

// ---------------------------------------------------------------------------------------
// 8. Upstream amplification
// ---------------------------------------------------------------------------------------

/// A client's queued invocations used to keep reaching the webhook after it disconnected
/// (200 events from one POST, still delivered after DELETE); now its end drops them and only
/// `disconnected` follows.
#[tokio::test]
async fn a_departed_clients_invocations_stop() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    // An upstream that answers slowly: each request takes 200 ms.
    let seen = Arc::new(AtomicUsize::new(0));
    let disconnected = Arc::new(AtomicUsize::new(0));
    let app = axum::Router::new().fallback({
        let (seen, disconnected) = (seen.clone(), disconnected.clone());
        move |request: axum::extract::Request| {
            let (seen, disconnected) = (seen.clone(), disconnected.clone());
            async move {
                let event = request
                    .headers()
                    .get("x-asrs-event")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_string();
                if event == "disconnected" {
                    disconnected.fetch_add(1, Ordering::SeqCst);
                } else if event != "connected" {
                    seen.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
                ""
            }
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let mut config = Config::default();
    config.upstream.templates = vec![switchyard_node::config::UpstreamTemplate::new(format!(
        "http://{upstream}/upstream"
    ))];
    let server = TestServer::start_with(config).await;
    let http = Http::new(&server, "chat");
    let id = http.open_long_polling().await;
    let burst = "{\"type\":1,\"target\":\"t\",\"arguments\":[]}\u{1e}".repeat(200);
    assert_eq!(http.post(&id, burst.as_bytes()).await.status(), 200);
    assert_eq!(http.delete(&id).await.status(), 202);
    eventually("the disconnected event", Duration::from_secs(10), || {
        disconnected.load(Ordering::SeqCst) == 1
    })
    .await;
    let delivered = seen.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        seen.load(Ordering::SeqCst),
        delivered,
        "invocations after the end"
    );
    assert!(
        delivered <= 2,
        "{delivered} invocations reached the upstream after the client left"
    );
}

// ---------------------------------------------------------------------------------------
// Low: REST audiences, query redaction, token lifetime
// ---------------------------------------------------------------------------------------

/// A REST token for user `alice` used to also send to `ALICE`. Applications follow Azure's
/// rule: the documented audience is the URL without its query, so a token without
/// `application` stands for the path under any application (as on Azure), while a token that
/// names one (the Management SDK's form) opens only that one.
#[tokio::test]
async fn rest_tokens_name_exact_users_and_their_application() {
    let server = TestServer::start().await;
    let client = reqwest::Client::new();
    let send = |path: &str, query: &str, aud: &str| {
        let token = TokenBuilder::new(format!("{}{aud}", server.http())).sign(&server.key(), now());
        client
            .post(format!("{}{path}{query}", server.http()))
            .bearer_auth(token)
            .json(&serde_json::json!({"target": "t", "arguments": []}))
            .send()
    };
    let alice = "/api/hubs/chat/users/alice/:send";
    assert_eq!(send(alice, "", alice).await.unwrap().status(), 202);
    assert_eq!(
        send("/api/hubs/chat/users/ALICE/:send", "", alice)
            .await
            .unwrap()
            .status(),
        401
    );
    // Literal segments and the hub still ignore case.
    assert_eq!(
        send("/api/HUBS/Chat/Users/alice/:SEND", "", alice)
            .await
            .unwrap()
            .status(),
        202
    );
    assert_eq!(
        send(alice, "?application=other", alice)
            .await
            .unwrap()
            .status(),
        202,
        "Azure's documented form: the URL without its query"
    );
    let with_app = format!("{alice}?application=mine&api-version=2022-06-01");
    assert_eq!(
        send(alice, "?application=MINE&api-version=2022-06-01", &with_app)
            .await
            .unwrap()
            .status(),
        202
    );
    assert_eq!(
        send(
            alice,
            "?application=other&api-version=2022-06-01",
            &with_app
        )
        .await
        .unwrap()
        .status(),
        401
    );
    let ada = format!("{alice}?application=mine").replace("alice", "ada");
    assert_eq!(
        send(alice, "?application=mine", &ada)
            .await
            .unwrap()
            .status(),
        401
    );
}

/// `ID=` and `Access_Token=` in other letter cases used to reach the app server in the
/// client's query string, carrying the connection token and the JWT.
#[tokio::test]
async fn secrets_in_the_query_are_hidden_whatever_their_case() {
    use futures_util::SinkExt;
    let config = common::default_mode();
    let server = TestServer::start_with(config).await;
    let mut app = AppServer::open(&server, "chat", "app").await;
    let token = server.token("chat", None);
    let negotiated = switchyard_client::negotiate(&server.client_url("chat"), &token, 1)
        .await
        .unwrap();
    let url = format!(
        "ws://{}/client/?hub=chat&ID={}&Access_Token={token}&keep=1",
        server.addr, negotiated.id_value
    );
    let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    ws.send(tokio_tungstenite::tungstenite::Message::Text(
        String::from_utf8(HANDSHAKE_JSON.to_vec()).unwrap().into(),
    ))
    .await
    .unwrap();
    let open = app.open_connection().await;
    assert_eq!(open.query_string.as_deref(), Some("?hub=chat&keep=1"));
}

/// `limits.max_token_lifetime` refuses tokens that live longer.
#[tokio::test]
async fn tokens_may_be_capped_in_lifetime() {
    let mut config = Config::default();
    config.limits.max_token_lifetime = Duration::from_secs(3600);
    let server = TestServer::start_with(config).await;
    let aud = server.client_url("chat");
    let long = TokenBuilder::new(&aud)
        .lifetime(Duration::from_secs(7 * 24 * 3600))
        .sign(&server.key(), now());
    let short = TokenBuilder::new(&aud).sign(&server.key(), now());
    let refused = switchyard_client::negotiate(&aud, &long, 1).await;
    assert!(
        matches!(refused, Err(switchyard_client::ClientError::Negotiate { status: 401, ref body }) if body.contains("max_token_lifetime")),
        "{refused:?}"
    );
    assert!(switchyard_client::negotiate(&aud, &short, 1).await.is_ok());
}

/// By default a token may live a day: a 31-year token is refused, a 23-hour one is not.
#[tokio::test]
async fn tokens_live_a_day_at_most_by_default() {
    let server = TestServer::start_with(Config::default()).await;
    let aud = server.client_url("chat");
    let token = |lifetime: u64| {
        TokenBuilder::new(&aud)
            .lifetime(Duration::from_secs(lifetime))
            .sign(&server.key(), now())
    };
    let refused = switchyard_client::negotiate(&aud, &token(31 * 365 * 24 * 3600), 1).await;
    assert!(
        matches!(refused, Err(switchyard_client::ClientError::Negotiate { status: 401, ref body }) if body.contains("max_token_lifetime")),
        "{refused:?}"
    );
    assert!(switchyard_client::negotiate(&aud, &token(23 * 3600), 1)
        .await
        .is_ok());
}

// ---------------------------------------------------------------------------------------
// Identity: what each kind of token may do, every combination
// ---------------------------------------------------------------------------------------

/// A token is good for the one endpoint and hub its audience names: a client token, an
/// app-server token and a REST token of hub `a` are each tried on every endpoint of hubs
/// `a` and `b` (negotiate, the client WebSocket, `/server`, REST), in a node with a
/// configured key, so a token signed with the development key is tried too. Only the
/// diagonal is let in; everything else is 401.
#[tokio::test]
async fn every_token_works_only_where_its_audience_points() {
    let server = TestServer::start_with(Config {
        access_key: Some("a-configured-key-of-at-least-32-characters!".into()),
        ..Config::default()
    })
    .await;
    let key = server.key();
    let host = server.addr;
    let client_token = |hub: &str, key: &str| {
        TokenBuilder::new(format!("http://{host}/client/?hub={hub}")).sign(key, now())
    };
    let server_token = |hub: &str, key: &str| {
        TokenBuilder::new(format!("http://{}/server/?hub={hub}", host.ip()))
            .claim("nameid", "s1")
            .sign(key, now())
    };
    let rest_token = |hub: &str, key: &str| {
        TokenBuilder::new(format!("http://{host}/api/v1/hubs/{hub}")).sign(key, now())
    };
    let development = switchyard_auth::EMULATOR_ACCESS_KEY;
    let tokens = [
        ("client token of a", client_token("a", &key), "client"),
        ("app-server token of a", server_token("a", &key), "server"),
        ("REST token of a", rest_token("a", &key), "rest"),
        (
            "client token, development key",
            client_token("a", development),
            "",
        ),
        (
            "app-server token, development key",
            server_token("a", development),
            "",
        ),
        (
            "REST token, development key",
            rest_token("a", development),
            "",
        ),
    ];
    let http = reqwest::Client::new();
    for (what, token, good_for) in &tokens {
        for hub in ["a", "b"] {
            let negotiate = http
                .post(format!(
                    "{}/client/negotiate?hub={hub}&negotiateVersion=1",
                    server.http()
                ))
                .bearer_auth(token)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16();
            let websocket = {
                let mut request =
                    tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(
                        server.ws_url(hub, None),
                    )
                    .unwrap();
                request
                    .headers_mut()
                    .insert("authorization", format!("Bearer {token}").parse().unwrap());
                match tokio_tungstenite::connect_async(request).await {
                    Ok(_) => 101,
                    Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
                        response.status().as_u16()
                    }
                    Err(other) => panic!("{what} on the client WebSocket: {other}"),
                }
            };
            let app_server = match common::dial(&server, hub, Some(token), Some("s1")).await {
                Ok(_) => 101,
                Err(error) => common::refused_status(Err(error)),
            };
            let rest = http
                .post(format!("{}/api/v1/hubs/{hub}", server.http()))
                .bearer_auth(token)
                .header("content-type", "application/json")
                .body(r#"{"target":"m","arguments":[]}"#)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16();
            let diagonal = hub == "a";
            let expect = |kind: &str, ok: u16| {
                if diagonal && *good_for == kind {
                    ok
                } else {
                    401
                }
            };
            assert_eq!(
                negotiate,
                expect("client", 200),
                "{what}: negotiate of hub {hub}"
            );
            assert_eq!(
                websocket,
                expect("client", 101),
                "{what}: client WebSocket of hub {hub}"
            );
            assert_eq!(
                app_server,
                expect("server", 101),
                "{what}: /server of hub {hub}"
            );
            assert_eq!(
                rest,
                expect("rest", 202),
                "{what}: REST broadcast to hub {hub}"
            );
        }
    }
}
