//! Stateful reconnect under load through the real binary against a real service in this
//! process: with a share of the sockets dropped abruptly every second, every message still
//! arrives exactly once and in order (Default mode echo, serverless REST send-to-connection).

use std::process::Stdio;
use std::time::Duration;

use switchyard_capacity::report::Report;
use switchyard_testkit::TestServer;

struct Outcome {
    code: i32,
    stdout: String,
    stderr: String,
    report: Option<Report>,
}

/// Runs `switchyard-bench ARGS --summary-json … --quiet` (bounded to 90 s).
async fn bench(name: &str, args: &[&str]) -> Outcome {
    let dir = std::env::temp_dir().join(format!(
        "switchyard-bench-stateful-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let summary = dir.join("summary.json");
    let output = tokio::time::timeout(
        Duration::from_secs(90),
        tokio::process::Command::new(env!("CARGO_BIN_EXE_switchyard-bench"))
            .args(args)
            .arg("--summary-json")
            .arg(&summary)
            .arg("--quiet")
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("{name}: the run did not end within 90 s"))
    .unwrap();
    let report = std::fs::read_to_string(&summary)
        .ok()
        .map(|text| serde_json::from_str(&text).expect("the summary parses as a Report"));
    let _ = std::fs::remove_dir_all(&dir);
    Outcome {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        report,
    }
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
    assert!(report.passed, "{context}");
    assert_eq!(outcome.code, 0, "{context}");
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
