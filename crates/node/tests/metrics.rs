//! `/metrics` in Azure's terms, against a real node on port 0: the per-hub series after real
//! traffic, the Grafana dashboard's names against a real scrape, and a real Prometheus server
//! (Debian's `prometheus`) scraping the node and answering queries about it.

mod common;

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{connect_client, default_mode, now, AppServer, Msg, RawClient, TestServer};
use serde_json::{json, Value};
use switchyard_auth::TokenBuilder;
use switchyard_hub_protocol::Format;
use switchyard_node::Config;

/// A node in Default mode with a connection limit (so the quota series is there too).
async fn start() -> TestServer {
    let mut config: Config = default_mode();
    config.limits.max_client_connections = 100;
    TestServer::start_with(config).await
}

/// Holds what the traffic needs open: dropping it closes the clients and app servers.
struct Traffic {
    _apps: Vec<AppServer>,
    _clients: Vec<RawClient>,
}

/// On hub `chat`: two clients; one sends a 3,000-byte message (2 units in), the app server
/// sends it one small message, and a REST broadcast reaches both (3 small messages out).
/// On hub `news`: one client, no messages.
async fn make_traffic(server: &TestServer) -> Traffic {
    let mut chat = AppServer::open(server, "chat", "app-1").await;
    let mut news = AppServer::open(server, "news", "app-2").await;
    let (mut a, a_id) = connect_client(
        server,
        &mut chat,
        "chat",
        &server.token("chat", None),
        Format::Json,
    )
    .await;
    let (mut b, _) = connect_client(
        server,
        &mut chat,
        "chat",
        &server.token("chat", None),
        Format::Json,
    )
    .await;
    let (n, _) = connect_client(
        server,
        &mut news,
        "news",
        &server.token("news", None),
        Format::Json,
    )
    .await;

    let big = Msg::invocation("say", &[json!("x".repeat(3000))]);
    assert!(big.json.len() > 2048 && big.json.len() <= 4096);
    a.send_raw(&big.json).await;
    assert_eq!(chat.connection_data(&a_id).await, big.json);

    chat.send_to(&a_id, &Msg::invocation("direct", &[]).json)
        .await;
    a.next_message().await;

    let url = format!("{}/api/v1/hubs/chat", server.http());
    let token = TokenBuilder::new(&url).sign(&server.key(), now());
    let status = reqwest::Client::new()
        .post(&url)
        .bearer_auth(token)
        .json(&json!({"target": "all", "arguments": ["hi"]}))
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status.as_u16(), 202);
    a.next_message().await;
    b.next_message().await;
    Traffic {
        _apps: vec![chat, news],
        _clients: vec![a, b, n],
    }
}

async fn scrape(server: &TestServer) -> String {
    reqwest::get(format!("{}/metrics", server.http()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The value of the sample line `series` (name and labels exactly as exported).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse().ok())
}

/// What the traffic above must show, as (series, value).
const EXPECTED: &[(&str, f64)] = &[
    ("switchyard_hub_connections{hub=\"chat\"}", 2.0),
    ("switchyard_hub_connections{hub=\"news\"}", 1.0),
    ("switchyard_hub_inbound_messages_total{hub=\"chat\"}", 1.0),
    (
        "switchyard_hub_inbound_message_units_total{hub=\"chat\"}",
        2.0,
    ),
    ("switchyard_hub_outbound_messages_total{hub=\"chat\"}", 3.0),
    (
        "switchyard_hub_outbound_message_units_total{hub=\"chat\"}",
        3.0,
    ),
    ("switchyard_hub_outbound_messages_total{hub=\"news\"}", 0.0),
    ("switchyard_connection_quota_utilization", 3.0),
];

#[tokio::test]
async fn per_hub_series_count_connections_messages_and_units() {
    let server = start().await;
    let _traffic = make_traffic(&server).await;
    let text = scrape(&server).await;
    for (series, value) in EXPECTED {
        assert_eq!(sample(&text, series), Some(*value), "{series} in\n{text}");
    }
    let bytes_in = sample(&text, "switchyard_hub_inbound_bytes_total{hub=\"chat\"}").unwrap();
    assert!((3000.0..3100.0).contains(&bytes_in), "{bytes_in}");
    let memory = sample(&text, "switchyard_process_resident_memory_bytes");
    assert!(memory.is_some(), "{text}");
}

// ---- the Grafana dashboard ----

fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `expr` in the dashboard (panels, rows' panels, templating queries).
fn expressions(value: &Value, found: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, item) in map {
                match (key.as_str(), item) {
                    ("expr" | "query", Value::String(expr)) => found.push(expr.clone()),
                    ("query", Value::Object(query)) => {
                        if let Some(Value::String(expr)) = query.get("query") {
                            found.push(expr.clone());
                        }
                    }
                    _ => expressions(item, found),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| expressions(item, found)),
        _ => {}
    }
}

/// The `switchyard_*` and `process_*` metric names an expression uses.
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let bytes = expr.as_bytes();
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b':';
    let mut at = 0;
    while at < bytes.len() {
        if word(bytes[at]) && (at == 0 || !word(bytes[at - 1])) {
            let end = (at..bytes.len())
                .find(|&i| !word(bytes[i]))
                .unwrap_or(bytes.len());
            let token = &expr[at..end];
            if token.starts_with("switchyard_") || token.starts_with("process_") {
                names.push(token.to_string());
            }
            at = end;
        } else {
            at += 1;
        }
    }
    names
}

/// Whether the scrape exports `name`: as a sample, or (a family with no series yet, such as
/// a counter by reason nothing has been counted under) as a `# TYPE` line.
fn exported(text: &str, name: &str) -> bool {
    let base = name.strip_suffix("_total").unwrap_or(name);
    text.lines().any(|line| {
        line.strip_prefix(name)
            .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
            || line
                .strip_prefix("# TYPE ")
                .and_then(|rest| rest.split(' ').next())
                .is_some_and(|family| family == base || family == name)
    })
}

#[test]
fn metric_names_are_read_from_promql() {
    let names = metric_names(
        "sum by (reason) (rate(switchyard_client_connections_closed_total{reason!=\"x\"}[1m])) / on() process_resident_memory_bytes",
    );
    assert_eq!(
        names,
        vec![
            "switchyard_client_connections_closed_total",
            "process_resident_memory_bytes"
        ]
    );
}

#[tokio::test]
async fn grafana_dashboard_uses_only_exported_names() {
    let path = repository_root().join("docs/grafana/switchyard.json");
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).expect("valid JSON");
    let mut exprs = Vec::new();
    expressions(&dashboard, &mut exprs);
    let names: BTreeSet<String> = exprs.iter().flat_map(|e| metric_names(e)).collect();
    assert!(names.len() >= 10, "too few metrics found: {names:?}");

    let server = start().await;
    let _traffic = make_traffic(&server).await;
    // The process sampler runs on the node's 1 s heartbeat.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let text = scrape(&server).await;
    let missing: Vec<&String> = names.iter().filter(|n| !exported(&text, n)).collect();
    assert!(
        missing.is_empty(),
        "the dashboard uses names /metrics does not export: {missing:?}"
    );
}

// ---- a real Prometheus ----

/// A child process killed (and waited for) on drop, and a folder removed on drop.
struct Prometheus {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn prometheus_binary() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/bin"), PathBuf::from("/usr/sbin")])
        .map(|dir| dir.join("prometheus"))
        .find(|candidate| candidate.is_file())
}

/// A port nothing listens on right now (Prometheus cannot be told to bind port 0 and report
/// it; a collision with another process is retried by the caller).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts Prometheus scraping `target` every second; retries on another port when the one
/// picked was taken meanwhile.
async fn start_prometheus(binary: &Path, target: &str) -> Prometheus {
    for attempt in 0..5 {
        let dir = std::env::temp_dir().join(format!(
            "switchyard-prometheus-{}-{attempt}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let config = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: switchyard\n    metrics_path: /metrics\n    static_configs:\n      - targets: ['{target}']\n"
        );
        std::fs::write(dir.join("prometheus.yml"), config).unwrap();
        let port = free_port();
        let child = Command::new(binary)
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start prometheus");
        let mut prometheus = Prometheus { child, port, dir };
        let deadline = Instant::now() + Duration::from_secs(30);
        let ready = format!("http://127.0.0.1:{port}/-/ready");
        loop {
            if prometheus.child.try_wait().unwrap().is_some() {
                break; // exited: most likely the port was taken; try another
            }
            if let Ok(response) = reqwest::get(&ready).await {
                if response.status().is_success() {
                    return prometheus;
                }
            }
            assert!(Instant::now() < deadline, "prometheus did not become ready");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        drop(prometheus);
    }
    panic!("prometheus did not start on any of five free ports");
}

/// The value of `query` (one series expected), if Prometheus has one yet.
async fn query(prometheus: &Prometheus, query: &str) -> Option<f64> {
    let response: Value = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{}/api/v1/query", prometheus.port))
        .query(&[("query", query)])
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    let result = response["data"]["result"].as_array()?;
    if result.len() != 1 {
        return None;
    }
    result[0]["value"][1].as_str()?.parse().ok()
}

#[tokio::test]
async fn a_real_prometheus_scrapes_the_node() {
    let Some(binary) = prometheus_binary() else {
        if std::env::var_os("TEST_REQUIRE_PROMETHEUS").is_some() {
            panic!("prometheus is not installed and TEST_REQUIRE_PROMETHEUS is set (apt-get install prometheus)");
        }
        eprintln!("SKIPPED: prometheus is not installed (apt-get install prometheus; scripts/test.sh installs it and sets TEST_REQUIRE_PROMETHEUS)");
        return;
    };
    let server = start().await;
    let _traffic = make_traffic(&server).await;
    let prometheus = start_prometheus(&binary, &server.addr.to_string()).await;

    let deadline = Instant::now() + Duration::from_secs(60);
    let mut waiting: Vec<(&str, f64)> = EXPECTED.to_vec();
    waiting.push(("up{job=\"switchyard\"}", 1.0));
    while !waiting.is_empty() {
        let mut still = Vec::new();
        for (series, value) in waiting {
            if query(&prometheus, series).await != Some(value) {
                still.push((series, value));
            }
        }
        waiting = still;
        if waiting.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus never answered the expected values for {waiting:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // A query the dashboard makes: every hub's connections, summed by PromQL.
    assert_eq!(
        query(&prometheus, "sum(switchyard_hub_connections)").await,
        Some(3.0)
    );
}
