//! A short smoke of every scenario through the real binary against a real service (and
//! the Go peer): small counts, a second or two each. It checks the tool's correctness —
//! every message counted, nothing lost, the report complete — never its speed.

use std::path::{Path, PathBuf};

use switchyard_testkit::TestServer;

mod common;
use common::{bench, scratch, Outcome, QUICK};
use switchyard_capacity::report::Report;

/// A service node in this process on a free port; stops when dropped.
struct Service {
    connection_string: String,
    _server: TestServer,
}

async fn service() -> Service {
    let server = TestServer::start().await;
    Service {
        connection_string: server.connection_string(),
        _server: server,
    }
}

fn args<'a>(scenario: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut all = vec![scenario];
    all.extend_from_slice(&QUICK);
    all.extend_from_slice(extra);
    all
}

/// Every connection connected and every message arrived exactly once, in order, and the
/// report says so. How fast is the printed report's business, not the test's: Azure's
/// latency rule (and with it `passed` and the exit status 0 or 1) only has to agree with
/// itself, so a loaded machine cannot fail a run that lost nothing.
fn assert_complete(name: &str, outcome: &Outcome) -> Report {
    let report = outcome.report.clone().unwrap_or_else(|| {
        panic!(
            "{name}: no report (exit {})\nstdout:\n{}\nstderr:\n{}",
            outcome.code, outcome.stdout, outcome.stderr
        )
    });
    let context = format!(
        "{name}: {:?}\nstdout:\n{}\nstderr:\n{}",
        report.counts, outcome.stdout, outcome.stderr
    );
    assert!(report.counts.sent > 0, "{context}");
    assert_eq!(report.counts.received, report.counts.expected, "{context}");
    assert_eq!(report.counts.lost, 0, "{context}");
    assert_eq!(report.counts.duplicated, 0, "{context}");
    assert_eq!(report.counts.reordered, 0, "{context}");
    assert_eq!(report.counts.connections_failed, 0, "{context}");
    // 0: passed; 1: Azure's rule failed (here only its latency half can); never 2 (an error).
    assert!(matches!(outcome.code, 0 | 1), "{context}");
    assert_eq!(outcome.code == 0, report.passed, "{context}");
    for step in &report.steps {
        // Every connection held through every step, and each step got all its messages.
        assert_eq!(step.connections, report.connections, "{context}");
        assert_eq!(step.counts.received, step.counts.expected, "{context}");
        assert_eq!(
            (
                step.counts.lost,
                step.counts.duplicated,
                step.counts.reordered
            ),
            (0, 0, 0),
            "{context}"
        );
    }
    let total: u64 = report.steps.iter().map(|s| s.counts.received).sum();
    assert_eq!(total, report.counts.received, "{context}");
    assert!(report.latency.p99_ms > 0.0, "{context}");
    // The printed table names the scenario.
    assert!(outcome.stdout.contains(&report.scenario), "{context}");
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_counts_every_message() {
    let service = service().await;
    let cs = service.connection_string.as_str();
    let outcome = bench(
        "echo",
        &args(
            "echo",
            &[
                "--connection-string",
                cs,
                "-c",
                "20",
                "--server-connections",
                "2",
            ],
        ),
    )
    .await;
    let report = assert_complete("echo", &outcome);
    assert_eq!(report.mode, "default");
    // 20 senders × every 200 ms × 2 s.
    assert_eq!(report.counts.sent, 200, "{:?}", report.counts);
    assert_eq!(report.counts.expected, report.counts.sent);
    assert!(report.service.is_some() && report.app_server.is_some());
    assert!(report.steps[0].service_cpu_us_per_delivery.is_some());
    assert!(!report.timeline.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broadcast_reaches_every_connection() {
    let service = service().await;
    let cs = service.connection_string.as_str();
    let outcome = bench(
        "broadcast",
        &args(
            "broadcast",
            &["--connection-string", cs, "-c", "15", "-s", "3"],
        ),
    )
    .await;
    let report = assert_complete("broadcast", &outcome);
    assert_eq!(report.counts.expected, report.counts.sent * 15);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_to_small_and_big_groups() {
    let service = service().await;
    let cs = service.connection_string.as_str();
    let small = bench(
        "small-groups",
        &args(
            "send-to-group",
            &["--connection-string", cs, "-c", "20", "--group-size", "5"],
        ),
    )
    .await;
    let report = assert_complete("small groups", &small);
    assert_eq!(report.counts.expected, report.counts.sent * 5);
    assert_eq!(report.group_size, Some(5));
    let big = bench(
        "big-groups",
        &args(
            "send-to-group",
            &[
                "--connection-string",
                cs,
                "-c",
                "12",
                "--groups",
                "2",
                "-s",
                "4",
            ],
        ),
    )
    .await;
    let report = assert_complete("big groups", &big);
    assert_eq!(report.counts.expected, report.counts.sent * 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_to_connection() {
    let service = service().await;
    let cs = service.connection_string.as_str();
    let outcome = bench(
        "send-to-connection",
        &args(
            "send-to-connection",
            &["--connection-string", cs, "-c", "10"],
        ),
    )
    .await;
    let report = assert_complete("send-to-connection", &outcome);
    assert_eq!(report.counts.expected, report.counts.sent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_broadcast_and_send_to_user() {
    let service = service().await;
    let cs = service.connection_string.as_str();
    let broadcast = bench(
        "rest-broadcast",
        &args(
            "rest-broadcast",
            &["--connection-string", cs, "-c", "10", "-s", "2"],
        ),
    )
    .await;
    let report = assert_complete("rest-broadcast", &broadcast);
    assert_eq!(report.mode, "serverless");
    assert_eq!(report.counts.expected, report.counts.sent * 10);
    let user = bench(
        "rest-send-to-user",
        &args(
            "rest-send-to-user",
            &["--connection-string", cs, "-c", "10"],
        ),
    )
    .await;
    let report = assert_complete("rest-send-to-user", &user);
    assert_eq!(report.counts.expected, report.counts.sent);
}

/// The REST forms of Azure's group, connection and join/leave scenarios (serverless).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_send_to_group_and_connection_and_join_leave() {
    let service = service().await;
    let cs = service.connection_string.as_str();
    // Two groups of five (members added by REST); one caller per group by default.
    let group = bench(
        "rest-send-to-group",
        &args(
            "rest-send-to-group",
            &["--connection-string", cs, "-c", "10", "--group-size", "5"],
        ),
    )
    .await;
    let report = assert_complete("rest-send-to-group", &group);
    assert_eq!(report.steps[0].senders, 2);
    assert_eq!(report.counts.expected, report.counts.sent * 5);
    assert!(
        group.stdout.contains("publishes no figures"),
        "{}",
        group.stdout
    );
    for scenario in ["rest-send-to-connection", "rest-join-leave-group"] {
        let outcome = bench(
            scenario,
            &args(scenario, &["--connection-string", cs, "-c", "10"]),
        )
        .await;
        let report = assert_complete(scenario, &outcome);
        assert_eq!(report.steps[0].senders, 10);
        assert_eq!(report.counts.expected, report.counts.sent);
    }
}

/// Two nodes on one real redis-server (in this process, each with its own backplane, as
/// two processes would have): connections alternate between them, REST calls enter the
/// first, and the report has each node and Redis's counters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_scenarios_across_two_nodes() {
    let redis = switchyard_testkit::RedisServer::start();
    let nodes = redis_nodes(&redis, 2).await;
    let cs = nodes[0].connection_string();
    let endpoints = format!("{},{}", nodes[0].http(), nodes[1].http());
    let redis_url = redis.url();
    let cluster = [
        "--connection-string",
        cs.as_str(),
        "--client-endpoints",
        endpoints.as_str(),
        "--redis-url",
        redis_url.as_str(),
        "-c",
        "10",
    ];
    for (scenario, extra) in [
        ("rest-broadcast", vec!["-s", "2"]),
        ("rest-send-to-user", vec!["-s", "2"]),
        // Calls enter both nodes; a call for one connection enters the node that does not
        // hold it, and group members on both nodes join by REST through either.
        (
            "rest-send-to-group",
            vec!["--group-size", "5", "--rest-node", "all"],
        ),
        ("rest-send-to-connection", vec!["--rest-node", "all"]),
        ("rest-join-leave-group", vec!["--rest-node", "all"]),
    ] {
        let mut all = cluster.to_vec();
        all.extend(extra);
        let outcome = bench(scenario, &args(scenario, &all)).await;
        let report = assert_complete(scenario, &outcome);
        let fanout = match scenario {
            "rest-broadcast" => 10,
            "rest-send-to-group" => 5,
            _ => 1,
        };
        assert_eq!(report.counts.expected, report.counts.sent * fanout);
        let context = format!("{scenario}: {:#?}\n{}", report.cluster, outcome.stdout);
        let cluster = report.cluster.as_ref().expect("a cluster section");
        assert_eq!(cluster.nodes.len(), 2, "{context}");
        let rest_nodes = if all.contains(&"all") { "all" } else { "n1" };
        assert_eq!(cluster.rest_nodes, rest_nodes, "{context}");
        assert!(
            cluster.nodes.iter().all(|n| n.connections == 5),
            "{context}"
        );
        assert!(
            cluster.nodes.iter().all(|n| n.backplane_received.is_some()),
            "{context}"
        );
        let redis = cluster.redis.as_ref().expect("Redis counters");
        assert_eq!(redis.messages_sent, report.counts.sent, "{context}");
        // Sends from n1 reach n2's receivers through Redis: about one PUBLISH per message
        // (the window's edges may move one or two across).
        assert!(
            redis.publish_calls > 0 && redis.net_output_bytes > 0,
            "{context}"
        );
        // The redis-server is on this machine: its process is found from the URL's port.
        assert!(redis.process.is_some(), "{context}");
        // A membership change is an ask on the connection's channel and an answer.
        let per = redis.publish_per_message.unwrap();
        let most = if scenario == "rest-join-leave-group" {
            3.0
        } else {
            1.5
        };
        // Each node also publishes about three messages a second of its own (its heartbeat,
        // and the question its backplane probe asks itself and the answer).
        let background = 3.0 * 2.0 * (redis.seconds + 1.0) / redis.messages_sent as f64;
        assert!((0.5..=most + background).contains(&per), "{context}");
        assert!(report.steps[0].redis.is_some(), "{context}");
        assert!(
            outcome.stdout.contains("PUBLISH per message sent"),
            "{context}"
        );
        assert!(outcome.stdout.contains("Cluster: 2 nodes"), "{context}");
    }
}

/// `--nodes` starts the nodes itself, so it needs the binary.
#[tokio::test]
async fn nodes_need_a_service_bin() {
    let outcome = bench("nodes-without-service", &["rest-broadcast", "--nodes", "3"]).await;
    assert_eq!(outcome.code, 2, "{}", outcome.stderr);
    assert!(
        outcome.stderr.contains("--service-bin"),
        "{}",
        outcome.stderr
    );
}

/// `n` nodes of one cluster on a real redis-server, in this process (each with its own
/// backplane, as separate processes would have).
async fn redis_nodes(redis: &switchyard_testkit::RedisServer, n: usize) -> Vec<TestServer> {
    use std::sync::Arc;
    use switchyard_backplane::Backplane;
    use switchyard_backplane_redis::{RedisBackplane, RedisSettings};

    let mut nodes = Vec::new();
    for i in 1..=n {
        let backplane: Arc<dyn Backplane> =
            RedisBackplane::connect(RedisSettings::new(redis.url()))
                .await
                .unwrap();
        nodes.push(
            TestServer::start_on(
                switchyard_node::Config::default(),
                backplane,
                &format!("n{i}"),
            )
            .await,
        );
    }
    nodes
}

/// Default mode on two nodes: the tool's app server is given the first node's connection
/// string only, the second node asks it to connect there too, and the run starts once it
/// has; clients alternate between the nodes and are served where they are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_mode_scenarios_across_two_nodes() {
    let redis = switchyard_testkit::RedisServer::start();
    let nodes = redis_nodes(&redis, 2).await;
    let cs = nodes[0].connection_string();
    let endpoints = format!("{},{}", nodes[0].http(), nodes[1].http());
    let redis_url = redis.url();
    let cluster = [
        "--connection-string",
        cs.as_str(),
        "--client-endpoints",
        endpoints.as_str(),
        "--redis-url",
        redis_url.as_str(),
        "-c",
        "10",
        "--server-connections",
        "2",
    ];
    for (scenario, extra, fanout) in [
        ("echo", vec![], 1),
        ("send-to-connection", vec![], 1),
        ("broadcast", vec!["-s", "2"], 10),
        ("send-to-group", vec!["--group-size", "5"], 5),
    ] {
        let mut all = cluster.to_vec();
        all.extend(extra);
        let outcome = bench(scenario, &args(scenario, &all)).await;
        let report = assert_complete(scenario, &outcome);
        assert_eq!(report.mode, "default");
        assert_eq!(report.counts.expected, report.counts.sent * fanout);
        let context = format!("{scenario}: {:#?}\n{}", report.cluster, outcome.stdout);
        let cluster = report.cluster.as_ref().expect("a cluster section");
        // Half the clients on each node, each served there.
        assert!(
            cluster.nodes.iter().all(|n| n.connections == 5),
            "{context}"
        );
        let redis = cluster.redis.as_ref().expect("Redis counters");
        if scenario == "echo" {
            // Answered on the caller's own node: nothing needs to cross.
            continue;
        }
        // Connection g sends to g + 1 (the other node); broadcasts and groups reach
        // receivers on both: messages cross through Redis, and the second node reads them.
        assert!(redis.publish_calls > 0, "{context}");
        assert!(
            cluster
                .nodes
                .iter()
                .all(|n| n.backplane_received.is_some_and(|r| r > 0)),
            "{context}"
        );
    }
}

/// The exact number of posts a chat room of `connections` in rooms of `size` makes in
/// `seconds` at `interval_ms` (posts start at their phase at time 0; no warm-up).
fn chat_posts(connections: u64, size: u64, interval_ms: f64, seconds: f64) -> u64 {
    use switchyard_bench::scenario::Plan;
    let plan = Plan {
        scenario: switchyard_bench::scenario::Scenario::ChatRoom,
        hub: "bench".into(),
        endpoint: switchyard_bench::scenario::Endpoint::Hub { url: String::new() },
        rest: None,
        transport: "websockets".into(),
        protocol: "json".into(),
        connections,
        senders: 0,
        steps: 1,
        step_seconds: seconds,
        warmup_seconds: 0.0,
        drain_seconds: 0.0,
        message_size: 0,
        interval_ms,
        group_size: Some(size),
        groups: None,
        connect_rate: 1.0,
        max_connecting: 1,
        source_addresses: Vec::new(),
        workers: 1,
        worker: 0,
        reconnect: false,
        stateful_reconnect: false,
        drop_share: 0.0,
    };
    let end = seconds * 1000.0;
    (0..connections)
        .filter_map(|g| Some((plan.interval_of(g)?, Plan::phase_of(g))))
        .map(|(every, phase)| {
            let first = every * phase;
            if first >= end {
                0
            } else {
                ((end - first) / every).ceil() as u64
            }
        })
        .sum()
}

const CHAT: [&str; 6] = [
    "--duration",
    "3s",
    "--send-interval",
    "100ms",
    "--drain",
    "2s",
];

/// Checks a chat-room run of 40 connections in rooms of 20: 2 chatty and 4 casual posters
/// per room, every post delivered to its whole room.
fn assert_chat(name: &str, outcome: &Outcome) -> Report {
    let report = assert_complete(name, outcome);
    assert_eq!(report.group_size, Some(20));
    assert_eq!(report.steps[0].senders, 12, "{name}");
    assert_eq!(
        report.counts.sent,
        chat_posts(40, 20, 100.0, 3.0),
        "{name}: {:?}",
        report.counts
    );
    assert_eq!(report.counts.expected, report.counts.sent * 20);
    assert!(
        outcome.stdout.contains("publishes no figures"),
        "{}",
        outcome.stdout
    );
    assert!(
        outcome.stdout.contains("10 % post every 1,100 ms"),
        "{}",
        outcome.stdout
    );
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_room_default_and_serverless() {
    let service = service().await;
    let cs = service.connection_string.as_str();
    let common = ["--connection-string", cs, "-c", "40", "--group-size", "20"];
    // Serverless first: once an app server has connected, the hub is in Default mode and
    // refuses clients while none is connected.
    for (scenario, mode) in [("rest-chat-room", "serverless"), ("chat-room", "default")] {
        let mut all = vec![scenario];
        all.extend(CHAT);
        all.extend(common);
        let outcome = bench(scenario, &all).await;
        let report = assert_chat(scenario, &outcome);
        assert_eq!(report.mode, mode);
    }
    // The profile fixes the posters.
    let outcome = bench(
        "chat-senders",
        &["chat-room", "--connection-string", cs, "-s", "5"],
    )
    .await;
    assert_eq!(outcome.code, 2);
    assert!(
        outcome.stderr.contains("the profile fixes"),
        "{}",
        outcome.stderr
    );
}

/// Both chat rooms on two nodes: every room has members on both, posters on both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_rooms_across_two_nodes() {
    let redis = switchyard_testkit::RedisServer::start();
    let nodes = redis_nodes(&redis, 2).await;
    let cs = nodes[0].connection_string();
    let endpoints = format!("{},{}", nodes[0].http(), nodes[1].http());
    let redis_url = redis.url();
    // Serverless first (see chat_room_default_and_serverless).
    for scenario in ["rest-chat-room", "chat-room"] {
        let mut all = vec![scenario];
        all.extend(CHAT);
        all.extend([
            "--connection-string",
            cs.as_str(),
            "--client-endpoints",
            endpoints.as_str(),
            "--redis-url",
            redis_url.as_str(),
            "-c",
            "40",
            "--group-size",
            "20",
            "--rest-node",
            "all",
        ]);
        let outcome = bench(scenario, &all).await;
        let report = assert_chat(scenario, &outcome);
        let context = format!("{scenario}: {:#?}\n{}", report.cluster, outcome.stdout);
        let cluster = report.cluster.as_ref().expect("a cluster section");
        assert!(
            cluster.nodes.iter().all(|n| n.connections == 20),
            "{context}"
        );
        // One PUBLISH per post (the window's edges may move one across).
        let redis = cluster.redis.as_ref().expect("Redis counters");
        assert!(redis.publish_calls + 2 >= report.counts.sent, "{context}");
        assert!(
            cluster
                .nodes
                .iter()
                .all(|n| n.backplane_received.is_some_and(|r| r > 0)),
            "{context}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_leave_group_acks_every_operation() {
    let service = service().await;
    let cs = service.connection_string.as_str();
    let outcome = bench(
        "join-leave",
        &args("join-leave-group", &["--connection-string", cs, "-c", "10"]),
    )
    .await;
    let report = assert_complete("join-leave-group", &outcome);
    assert_eq!(report.counts.expected, report.counts.sent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_rate_and_idle() {
    let service = service().await;
    let cs = service.connection_string.as_str();
    let outcome = bench(
        "connect-rate",
        &[
            "connect-rate",
            "--connection-string",
            cs,
            "-c",
            "100",
            "--connect-rate",
            "200",
            "--duration",
            "1s",
            "--drain",
            "0s",
        ],
    )
    .await;
    let report = assert_complete("connect-rate", &outcome);
    assert_eq!(report.counts.sent, 100);
    assert_eq!(report.counts.received, 100);
    assert!(report.connects_per_s.unwrap() > 0.0);

    let outcome = bench(
        "idle",
        &[
            "idle",
            "--connection-string",
            cs,
            "-c",
            "50",
            "--duration",
            "1s",
            "--drain",
            "0s",
        ],
    )
    .await;
    let report = outcome.report.clone().expect("idle writes a report");
    assert_eq!(outcome.code, 0, "{}", outcome.stderr);
    assert_eq!(report.counts.connections_failed, 0);
    assert!(
        report.service_rss_per_connection_bytes.is_some(),
        "{report:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_steps_msgpack_sources_counters_and_chart() {
    let service = service().await;
    let cs = service.connection_string.as_str();
    let name = "workers";
    let dir = scratch("workers-out");
    let counters = dir.join("counters.jsonl");
    let chart = dir.join("chart.svg");
    let outcome = bench(
        name,
        &[
            "echo",
            "--connection-string",
            cs,
            "-c",
            "24",
            "--steps",
            "2",
            // Both steps run even if the first misses Azure's latency rule on a busy machine.
            "--all-steps",
            "--duration",
            "2s",
            "--send-interval",
            "200ms",
            "--drain",
            "2s",
            "--workers",
            "2",
            "--protocol",
            "messagepack",
            "--source-addresses",
            "127.0.0.1,127.0.0.2",
            "--counters",
            counters.to_str().unwrap(),
            "--chart",
            chart.to_str().unwrap(),
        ],
    )
    .await;
    let report = assert_complete(name, &outcome);
    assert_eq!(report.workers, 2);
    assert_eq!(report.protocol, "messagepack");
    // The two worker processes' CPU is measured per step, beside the service's.
    for step in &report.steps {
        let generator = step.generator.as_ref().expect("generator usage per step");
        assert!(
            generator.cpu_seconds > 0.0 && generator.rss_kb > 0,
            "{step:?}"
        );
    }
    assert!(
        outcome.stdout.contains("Load generator CPU (cores)"),
        "{}",
        outcome.stdout
    );
    assert_eq!(report.steps.len(), 2);
    // Step-up: half the senders, then all of them.
    assert_eq!(report.steps[0].senders, 12);
    assert_eq!(report.steps[1].senders, 24);
    assert!(report.steps[1].counts.sent > report.steps[0].counts.sent);
    let lines = std::fs::read_to_string(&counters).unwrap();
    let last: serde_json::Value =
        serde_json::from_str(lines.lines().last().expect("counter lines")).unwrap();
    assert!(lines.contains("message:received"), "{lines}");
    assert!(last.to_string().contains("message:sent"), "{last}");
    let svg = std::fs::read_to_string(&chart).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("echo"),
        "{svg:.200}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_sent_events_and_long_polling() {
    let service = service().await;
    let cs = service.connection_string.as_str();
    for transport in ["serversentevents", "longpolling"] {
        let outcome = bench(
            transport,
            &args(
                "rest-broadcast",
                &[
                    "--connection-string",
                    cs,
                    "-c",
                    "6",
                    "-s",
                    "2",
                    "-t",
                    transport,
                ],
            ),
        )
        .await;
        let report = assert_complete(transport, &outcome);
        assert_eq!(report.transport, transport);
    }
}

#[tokio::test]
async fn usage_errors_are_clear() {
    let outcome = bench(
        "usage",
        &[
            "send-to-group",
            "--connection-string",
            "Endpoint=http://127.0.0.1;Port=1;AccessKey=k;Version=1.0;",
        ],
    )
    .await;
    assert_eq!(outcome.code, 2);
    assert!(
        outcome.stderr.contains("--group-size"),
        "{}",
        outcome.stderr
    );
    let outcome = bench(
        "usage-rest-group",
        &[
            "rest-send-to-group",
            "--connection-string",
            "Endpoint=http://127.0.0.1;Port=1;AccessKey=k;Version=1.0;",
        ],
    )
    .await;
    assert_eq!(outcome.code, 2);
    assert!(
        outcome
            .stderr
            .contains("rest-send-to-group needs --group-size"),
        "{}",
        outcome.stderr
    );
    let outcome = bench(
        "usage-peer-membership",
        &["rest-join-leave-group", "--peer-url", "http://127.0.0.1:1"],
    )
    .await;
    assert_eq!(outcome.code, 2);
    assert!(
        outcome.stderr.contains("the peer does not have"),
        "{}",
        outcome.stderr
    );
    let outcome = bench("no-target", &["echo"]).await;
    assert_eq!(outcome.code, 2);
    assert!(
        outcome.stderr.contains("--connection-string"),
        "{}",
        outcome.stderr
    );
}

/// Builds the Go peer (bench/peers/go-signalr) with the machine's `go`.
fn build_peer() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = root.join("target/peers");
    let status = std::process::Command::new("bash")
        .arg(root.join("bench/peers/go-signalr/build.sh"))
        .arg(&out)
        .status()
        .expect("run bench/peers/go-signalr/build.sh (needs Go)");
    assert!(status.success(), "building the Go peer failed");
    out.join("go-signalr")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_go_peer_runs_the_same_scenarios() {
    let peer = build_peer();
    let peer = peer.to_str().unwrap();
    for (scenario, extra) in [
        ("echo", vec!["-c", "10"]),
        ("broadcast", vec!["-c", "10", "-s", "2"]),
        ("send-to-group", vec!["-c", "10", "--group-size", "5"]),
        ("send-to-connection", vec!["-c", "10"]),
        ("join-leave-group", vec!["-c", "10"]),
        ("rest-broadcast", vec!["-c", "10", "-s", "2"]),
        ("rest-send-to-user", vec!["-c", "10"]),
        ("rest-send-to-group", vec!["-c", "10", "--group-size", "5"]),
        ("rest-send-to-connection", vec!["-c", "10"]),
    ] {
        let mut all = vec!["--peer-bin", peer, "--target-name", "go-signalr"];
        all.extend(extra);
        let outcome = bench(&format!("peer-{scenario}"), &args(scenario, &all)).await;
        let report = assert_complete(&format!("peer {scenario}"), &outcome);
        assert_eq!(report.target, "go-signalr");
        assert_eq!(report.mode, "direct");
        assert!(
            report.service.is_some(),
            "the peer's CPU and memory are sampled"
        );
    }
}

/// The floor (`--floor`) serves the scenarios it is for to the same generator: every
/// message counted, its CPU and memory sampled, its user and system time apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_floor_runs_the_scenarios_it_is_for() {
    for (scenario, extra) in [
        ("echo", vec!["-c", "10"]),
        ("broadcast", vec!["-c", "10", "-s", "2"]),
        ("rest-broadcast", vec!["-c", "10", "-s", "2"]),
    ] {
        let mut all = vec!["--floor"];
        all.extend(extra);
        let outcome = bench(&format!("floor-{scenario}"), &args(scenario, &all)).await;
        let report = assert_complete(&format!("floor {scenario}"), &outcome);
        assert_eq!(report.target, "floor");
        let service = report
            .service
            .expect("the floor's CPU and memory are sampled");
        assert!(service.system_seconds <= service.cpu_seconds, "{service:?}");
    }
    let outcome = bench("floor-idle", &args("idle", &["-c", "20", "--floor"])).await;
    assert_eq!(outcome.code, 0, "{}\n{}", outcome.stdout, outcome.stderr);
    let report = outcome.report.expect("a report");
    assert_eq!(report.counts.connections_failed, 0);
}
