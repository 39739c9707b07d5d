//! A short soak through the real binaries: chat rooms on three `switchyard` nodes and a real
//! redis-server (both started by the tool), node 2 killed and started again once, Redis
//! restarted once. Checks that the clients came back, that the phases add up, and that the
//! steady phases lost nothing. Needs `redis-server` and the `switchyard` binary (built by
//! `cargo test --workspace`, or `cargo build -p switchyard` first).

use std::time::Duration;

use switchyard_bench::soak::SoakReport;
use switchyard_capacity::report::Report;

mod common;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_with_a_node_and_redis_restarted() {
    // Removed when the test ends, passed or failed; the tool's redis-server directory too.
    let dir = common::scratch("soak");
    let (summary, soak_json, csv) = (
        dir.join("summary.json"),
        dir.join("soak.json"),
        dir.join("rss.csv"),
    );
    let bin = common::switchyard_bin();
    // 300 members in 3 rooms over 3 nodes and 2 worker processes; a 200 ms send interval
    // makes chatty posters post every 2.2 s. Node 2 dies at 12 s for 3 s; Redis at 22 s
    // for 1 s (each followed by its settling, then steady again).
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchyard-bench"));
    command
        .args(["chat-room", "--service-bin"])
        .arg(&bin)
        .args([
            "--nodes",
            "3",
            "-c",
            "300",
            "-w",
            "2",
            "--send-interval",
            "200ms",
        ])
        .args(["-d", "35s", "--warmup", "2s", "--drain", "3s"])
        .args(["--kill-node-every", "12s", "--node-down-for", "3s"])
        .args(["--restart-redis-at", "22s", "--redis-down-for", "1s"])
        .args(["--rss-every", "5s", "--quiet"])
        .arg("--summary-json")
        .arg(&summary)
        .arg("--soak-json")
        .arg(&soak_json)
        .arg("--rss-csv")
        .arg(&csv)
        .env("TMPDIR", &*dir);
    let output = common::output_within(command, Duration::from_secs(100), "the soak").await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let context = format!("stdout:\n{stdout}\nstderr:\n{stderr}");
    assert_eq!(output.status.code(), Some(0), "{context}");
    let report: Report = serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
    let soak: SoakReport =
        serde_json::from_str(&std::fs::read_to_string(&soak_json).unwrap()).unwrap();
    assert!(soak.passed, "{context}");
    let names: Vec<&str> = soak.phases.iter().map(|p| p.name.as_str()).collect();
    for wanted in ["steady", "n2 down", "n2 back", "redis down", "redis back"] {
        assert!(names.contains(&wanted), "{names:?}\n{context}");
    }
    assert_eq!(names.first(), Some(&"steady"), "{context}");
    assert_eq!(names.last(), Some(&"steady"), "{context}");
    // The phases add up to the report's counts, and each phase's lost is its difference.
    let sum = |f: fn(&switchyard_bench::soak::PhaseRow) -> u64| -> u64 {
        soak.phases.iter().map(f).sum()
    };
    assert_eq!(
        sum(|p| p.counts.expected),
        report.counts.expected,
        "{context}"
    );
    assert_eq!(
        sum(|p| p.counts.delivered),
        report.counts.received,
        "{context}"
    );
    assert_eq!(sum(|p| p.lost), report.counts.lost, "{context}");
    for phase in &soak.phases {
        assert_eq!(
            phase.lost,
            phase.counts.expected - phase.counts.delivered,
            "{context}"
        );
        assert!(
            phase.counts.excused_delivered <= phase.counts.excused,
            "{context}"
        );
        assert_eq!(
            (phase.counts.duplicated, phase.counts.reordered),
            (0, 0),
            "{context}"
        );
        if phase.name == "steady" {
            assert!(phase.counts.expected > 0, "{context}");
            assert_eq!(phase.lost, 0, "steady phases lose nothing\n{context}");
        }
    }
    // Node 2's 100 clients (g mod 3 = 1) dropped when it died, and all came back elsewhere.
    let drops = sum(|p| p.counts.drops);
    assert_eq!(drops, 100, "{context}");
    assert_eq!(sum(|p| p.counts.reconnected), drops, "{context}");
    assert_eq!(sum(|p| p.counts.not_reconnected), 0, "{context}");
    let down = soak.phases.iter().find(|p| p.name == "n2 down").unwrap();
    assert_eq!(down.counts.drops, 100, "{context}");
    // Their reconnect times were measured (how long they took is the report's business).
    assert!(down.reconnect_max_ms.is_some(), "{context}");
    // While clients reconnect, posts to and from them are excused, not lost.
    assert!(down.counts.excused > 0, "{context}");
    assert_eq!(report.counts.connections_failed, 0, "{context}");
    // The memory series covers the run (node 1 is never down), and the CSV has a line per
    // sample.
    assert_eq!(soak.nodes, ["n1", "n2", "n3"]);
    assert!(soak.rss.len() >= 7, "{context}");
    assert!(soak.rss.iter().all(|r| r.nodes[0].0.is_some()), "{context}");
    let lines = std::fs::read_to_string(&csv).unwrap().lines().count();
    assert_eq!(lines, soak.rss.len() + 1);
    assert!(stdout.contains("Soak phases") && stdout.contains("Memory over time"));
}
