//! `throttling.max_negotiations_in_progress` on a real cluster: a negotiate that a node passes
//! on to another node stays in progress while that node does not answer. Two real nodes on
//! one real `redis-server`; the second names, as its internal address, a socket that accepts
//! and never answers (a node that hangs).

use super::redis_node;

use std::time::Duration;

use serde_json::json;
use switchyard_hub_protocol::Format;
use switchyard_node::Config;
use switchyard_testkit::{AppServer, Msg, RawClient, RedisServer, TestServer, WAIT};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

async fn node(redis: &RedisServer, name: &str, config: Config) -> TestServer {
    redis_node(&redis.url(), "throttle", name, config).await
}

/// Sends a raw request and returns the socket and what arrived within `wait` (empty: no
/// answer yet; the socket stays open so the request stays in progress).
async fn request(server: &TestServer, text: &str, wait: Duration) -> (TcpStream, String) {
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    stream.write_all(text.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(wait, stream.read(&mut buf))
        .await
        .map_or(0, |read| read.unwrap_or(0));
    (stream, String::from_utf8_lossy(&buf[..n]).into_owned())
}

fn negotiate_request(server: &TestServer, hub: &str) -> String {
    format!(
        "POST /client/negotiate?hub={hub}&negotiateVersion=1 HTTP/1.1\r\nHost: localhost\r\n\
         Authorization: Bearer {}\r\nContent-Length: 0\r\n\r\n",
        server.token(hub, None)
    )
}

/// Two negotiates hang on the unanswering node (the bound is 2): the third gets 503 with
/// `Retry-After`, counted as `negotiations`; health, metrics and app servers on the node
/// still work, and a client connected before keeps receiving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn negotiates_in_progress_are_bounded() {
    let redis = RedisServer::start();
    let hang = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut config = Config::default();
    config.throttling.max_negotiations_in_progress = 2;
    let entry = node(&redis, "n-entry", config).await;
    let mut config = Config::default();
    config.cluster.internal_url = Some(format!("http://{}", hang.local_addr().unwrap()));
    let hung = node(&redis, "n-hung", config).await;
    // A client of another hub, connected before.
    let token = entry.token("news", Some("reader"));
    let (mut reader, _) = RawClient::start(&entry, "news", &token, Format::Json).await;
    reader.handshake_result().await.unwrap();
    // Only the hung node has an app server for "chat": once the entry node hears so, it passes
    // chat's negotiates on to it, and they hang there.
    let _app = AppServer::open(&hung, "chat", "app-1").await;
    let mut held = Vec::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    while held.len() < 2 {
        assert!(tokio::time::Instant::now() < deadline, "no negotiate hung");
        let (socket, answer) = request(
            &entry,
            &negotiate_request(&entry, "chat"),
            Duration::from_millis(500),
        )
        .await;
        if answer.is_empty() {
            held.push(socket);
        }
    }
    let (_, refused) = request(&entry, &negotiate_request(&entry, "news"), WAIT).await;
    assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
    assert!(
        refused.to_ascii_lowercase().contains("retry-after: 1"),
        "{refused}"
    );
    assert!(
        refused.contains("throttling.max_negotiations_in_progress"),
        "{refused}"
    );
    let (_, health) = request(
        &entry,
        "GET /api/health HTTP/1.1\r\nHost: localhost\r\n\r\n",
        WAIT,
    )
    .await;
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    assert!(entry
        .node
        .metrics
        .encode()
        .contains("switchyard_throttled_total{kind=\"negotiations\"} 1"));
    let (status, _) = entry.rest("POST", "/api/hubs/news/:send").await;
    assert_eq!(status, 202);
    reader.expect(&Msg::invocation("m", &[json!("rest")])).await;
    let mut app = AppServer::open(&entry, "news", "app-2").await;
    app.echo_round_trip().await;
    drop(held);
    drop(hang);
}

/// A node that accepts and never answers does not hold requests passed on to it for ever:
/// the entry node gives up after `timeouts.request_body_timeout` (here 1 s), counts the node
/// unreachable and goes on as it does for one it cannot reach (a negotiate is then answered
/// here), freeing the negotiate's place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_passed_to_a_hung_node_end_in_time() {
    let redis = RedisServer::start();
    let hang = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut config = Config::default();
    config.timeouts.request_body_timeout = Duration::from_secs(1);
    config.throttling.max_negotiations_in_progress = 1;
    let entry = node(&redis, "n-entry", config).await;
    let mut config = Config::default();
    config.cluster.internal_url = Some(format!("http://{}", hang.local_addr().unwrap()));
    let hung = node(&redis, "n-hung", config).await;
    let _app = AppServer::open(&hung, "chat", "app-1").await;
    let unreachable = || {
        entry
            .node
            .metrics
            .encode()
            .lines()
            .find_map(|line| {
                line.strip_prefix(
                    "switchyard_cluster_requests_forwarded_total{reason=\"unreachable\"} ",
                )
                .and_then(|n| n.parse::<u64>().ok())
            })
            .unwrap_or(0)
    };
    let deadline = tokio::time::Instant::now() + WAIT * 2;
    for round in 0..2 {
        // Until the entry node has heard of the app server on the other node, it serves chat's
        // negotiates itself, at once.
        loop {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no negotiate was passed on"
            );
            let started = tokio::time::Instant::now();
            let (_, answer) = request(&entry, &negotiate_request(&entry, "chat"), WAIT).await;
            assert!(
                answer.starts_with("HTTP/1.1 200"),
                "answered, not held: {answer}"
            );
            if started.elapsed() >= Duration::from_millis(900) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(
            unreachable(),
            round + 1,
            "the hung node counted unreachable"
        );
    }
    drop(hang);
}
