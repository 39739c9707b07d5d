//! Scenarios one after another against one service, as the README's benchmark section runs
//! them: a Default-mode scenario leaves its hub in Default mode (`mode = auto`), so the
//! serverless scenarios default to a hub of their own; and a run whose connections all fail
//! prints what they said.

use switchyard_testkit::TestServer;

mod common;
use common::Outcome;

/// [`common::bench`] with short timings.
async fn bench(name: &str, args: &[&str]) -> Outcome {
    let mut all = args.to_vec();
    all.extend_from_slice(&common::QUICK);
    common::bench(name, &all).await
}

fn context(name: &str, outcome: &Outcome) -> String {
    format!(
        "{name} (exit {})\nstdout:\n{}\nstderr:\n{}",
        outcome.code, outcome.stdout, outcome.stderr
    )
}

/// The run finished (exit 0, or 1 for Azure's latency rule, which is not checked here) and
/// every connection connected and got every message once.
fn assert_delivered(name: &str, outcome: &Outcome, connections: u64) {
    let context = context(name, outcome);
    assert!(matches!(outcome.code, 0 | 1), "{context}");
    let report = outcome.report.as_ref().expect(&context);
    assert_eq!(report.connections, connections, "{context}");
    assert_eq!(report.counts.connections_failed, 0, "{context}");
    assert!(report.counts.sent > 0, "{context}");
    assert_eq!(report.counts.received, report.counts.expected, "{context}");
    assert_eq!(report.counts.lost, 0, "{context}");
    assert_eq!(report.counts.duplicated, 0, "{context}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_mode_then_serverless_on_one_service() {
    let server = TestServer::start().await;
    let cs = server.connection_string();
    let echo = bench("echo", &["echo", "--connection-string", &cs, "-c", "5"]).await;
    assert_delivered("echo", &echo, 5);
    assert_eq!(echo.report.as_ref().unwrap().mode, "default");

    // After the app server has served hub `bench`, REST and plain clients still connect.
    for scenario in ["rest-broadcast", "idle"] {
        let mut args = vec![scenario, "--connection-string", &cs, "-c", "5"];
        if scenario == "rest-broadcast" {
            args.extend(["-s", "1"]);
        }
        let outcome = bench(scenario, &args).await;
        let context = context(scenario, &outcome);
        let report = outcome.report.as_ref().expect(&context);
        assert_eq!(report.mode, "serverless", "{context}");
        assert_eq!(report.counts.connections_failed, 0, "{context}");
        if scenario == "rest-broadcast" {
            assert_delivered(scenario, &outcome, 5);
            assert_eq!(report.counts.expected, report.counts.sent * 5, "{context}");
        }
    }

    // On the echo run's hub a serverless run is refused: it says by whom, and what to do.
    let refused = bench(
        "same hub",
        &[
            "rest-broadcast",
            "--connection-string",
            &cs,
            "--hub",
            "bench",
            "-c",
            "3",
            "-s",
            "1",
        ],
    )
    .await;
    let context = context("same hub", &refused);
    assert_eq!(refused.code, 2, "{context}");
    for wanted in [
        "connect errors (count: kind):\n  3: connect: handshake refused: SignalR Service is now in 'Default' service mode",
        "hint: hub 'bench' is in Default mode on this service",
        "no connection succeeded; first errors are printed above",
    ] {
        assert!(refused.stderr.contains(wanted), "{wanted:?} in {context}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_connections_all_fail_prints_their_errors() {
    // A port nothing listens on.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let cs = format!(
        "Endpoint=http://127.0.0.1;Port={port};AccessKey=ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789ABCDEFGH;Version=1.0;"
    );
    let outcome = bench("refused", &["idle", "--connection-string", &cs, "-c", "4"]).await;
    let context = context("refused", &outcome);
    assert_eq!(outcome.code, 2, "{context}");
    assert!(outcome.report.is_none(), "{context}");
    let errors = outcome
        .stderr
        .split("connect errors (count: kind):\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no connect errors printed: {context}"));
    let first = errors.lines().next().unwrap_or_default();
    assert!(first.starts_with("  4: connect: "), "{context}");
    assert!(
        outcome.stderr.contains(&format!(
            "no connection succeeded; first errors are printed above (target http://127.0.0.1:{port}/client/)"
        )),
        "{context}"
    );
    // No Default-mode hint for a service that is not there.
    assert!(!outcome.stderr.contains("hint:"), "{context}");
}
