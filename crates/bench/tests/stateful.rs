//! Stateful reconnect under load through the real binary against a real service in this
//! process: with a share of the sockets dropped abruptly every second, every message still
//! arrives exactly once and in order (Default mode echo, serverless REST send-to-connection).

use switchyard_testkit::TestServer;

mod common;
use common::Outcome;

/// [`common::bench`].
async fn bench(name: &str, args: &[&str]) -> Outcome {
    common::bench(name, args).await
}

/// A number the stateful line reports (`… drops 12, reconnects 12, …`).
fn stateful_count(stdout: &str, name: &str) -> u64 {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("stateful reconnect:"))
        .unwrap_or_else(|| panic!("no stateful reconnect line:\n{stdout}"));
    let rest = &line[line.find(&format!(" {name} ")).expect(name) + name.len() + 2..];
    rest.split([',', ';'])
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{name} in {line}"))
}

/// Nothing lost, duplicated or reordered although sockets dropped; every drop was followed
/// by a reconnect.
fn assert_exactly_once(name: &str, outcome: &Outcome) {
    let context = format!(
        "{name} (exit {})\nstdout:\n{}\nstderr:\n{}",
        outcome.code, outcome.stdout, outcome.stderr
    );
    let report = outcome.report.as_ref().expect(&context);
    assert!(report.counts.sent > 0, "{context}");
    assert_eq!(report.counts.lost, 0, "{context}");
    assert_eq!(report.counts.duplicated, 0, "{context}");
    assert_eq!(report.counts.reordered, 0, "{context}");
    assert_eq!(report.counts.received, report.counts.expected, "{context}");
    assert_eq!(report.counts.connections_failed, 0, "{context}");
    // Exit 1 would be Azure's latency rule only (timing is the printed report's business).
    assert!(matches!(outcome.code, 0 | 1), "{context}");
    assert_eq!(outcome.code == 0, report.passed, "{context}");
    let drops = stateful_count(&outcome.stdout, "drops");
    assert!(drops >= 10, "{context}");
    assert_eq!(
        stateful_count(&outcome.stdout, "reconnects"),
        drops,
        "{context}"
    );
    assert_eq!(stateful_count(&outcome.stdout, "agreed"), 0, "{context}");
}

const LOAD: [&str; 12] = [
    "-c",
    "20",
    "--duration",
    "3s",
    "--send-interval",
    "100ms",
    "--drain",
    "3s",
    "--stateful-reconnect",
    "--drop-share",
    "0.5",
    "--server-connections",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drops_lose_and_repeat_nothing() {
    for scenario in ["echo", "rest-send-to-connection"] {
        // A service each: the echo run's app server leaves the hub in Default mode.
        let server = TestServer::start().await;
        let cs = server.connection_string();
        let mut args = vec![scenario, "--connection-string", &cs];
        args.extend_from_slice(&LOAD);
        args.push("2");
        let outcome = bench(scenario, &args).await;
        assert_exactly_once(scenario, &outcome);
    }
}

#[tokio::test]
async fn drops_need_stateful_reconnect_and_websockets() {
    let outcome = bench(
        "no-flag",
        &[
            "echo",
            "--connection-string",
            "Endpoint=http://127.0.0.1;Port=1;AccessKey=x;Version=1.0;",
            "--drop-share",
            "0.1",
        ],
    )
    .await;
    assert_eq!(outcome.code, 2, "{}", outcome.stderr);
    let outcome = bench(
        "long-polling",
        &[
            "echo",
            "--connection-string",
            "Endpoint=http://127.0.0.1;Port=1;AccessKey=x;Version=1.0;",
            "--stateful-reconnect",
            "-t",
            "lp",
        ],
    )
    .await;
    assert_eq!(outcome.code, 2, "{}", outcome.stderr);
    assert!(outcome.stderr.contains("WebSockets"), "{}", outcome.stderr);
}
