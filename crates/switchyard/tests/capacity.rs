//! `switchyard capacity`, run as a real process.

use std::path::{Path, PathBuf};
use std::process::Output;

use switchyard_capacity::report::{Latency, Report, Step};

mod common;

fn capacity(args: &[&str]) -> Output {
    common::binary()
        .arg("capacity")
        .args(args)
        .output()
        .unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A temporary folder removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("switchyard-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// An echo report whose last passing step (2) carried 12,000 connections at 12,000 messages/s.
fn write_echo_report(dir: &Path) -> String {
    let step = |index, rate: f64, passed| Step {
        index,
        senders: rate as u64,
        connections: rate as u64,
        seconds: 60.0,
        inbound_per_s: rate,
        outbound_per_s: rate,
        passed,
        latency: Latency {
            p99_ms: 24.5,
            ..Latency::default()
        },
        ..Step::default()
    };
    let report = Report {
        tool: "switchyard-bench 0.1.0".into(),
        scenario: "echo".into(),
        target: "switchyard".into(),
        mode: "default".into(),
        transport: "websockets".into(),
        protocol: "json".into(),
        connections: 15_000,
        message_size: 2_048,
        send_interval_ms: 1_000.0,
        steps: vec![
            step(1, 5_000.0, true),
            step(2, 12_000.0, true),
            step(3, 15_000.0, false),
        ],
        last_passing_step: Some(2),
        ..Report::default()
    };
    let path = dir.join("echo.json");
    std::fs::write(&path, serde_json::to_string_pretty(&report).unwrap()).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn a_load_alone() {
    let output = capacity(&["--scenario", "echo", "--connections", "10000"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(text.contains("load 1: echo, 10,000 connections"), "{text}");
    assert!(text.contains("10,000 msg/s"), "{text}");
    assert!(text.contains("20 MBps"), "{text}");
    assert!(text.contains("Unit10 (echo figures)"), "{text}");

    // A mix, as JSON, with the earlier seven-unit tables.
    let output = capacity(&[
        "--scenario",
        "echo",
        "--connections",
        "4000",
        "--message-size",
        "512",
        "--load",
        "scenario=broadcast,connections=1000,senders=2,send-interval=500ms",
        "--guide",
        "seven-unit",
        "--json",
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let value: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(value["guide"]["name"], "seven-unit");
    let echo = &value["loads"][0];
    assert_eq!(echo["inbound_per_s"], 4_000.0);
    assert_eq!(echo["counted_message_size"], 1_024);
    assert_eq!(echo["inbound_bytes_per_s"], 4_000.0 * 1_024.0);
    assert_eq!(echo["azure_unit"], "Unit5");
    let broadcast = &value["loads"][1];
    assert_eq!(broadcast["inbound_per_s"], 4.0);
    assert_eq!(broadcast["outbound_per_s"], 4_000.0);
    assert_eq!(broadcast["azure_unit"], "Unit2");
    assert_eq!(value["total"]["connections"], 5_000);
    assert_eq!(value["total"]["outbound_per_s"], 8_000.0);
    // Echo uses 4 MB/s of Unit5's 10 (0.4), broadcast 8 MB/s of its 20 (0.4): Unit5 holds both.
    assert_eq!(value["total"]["azure_unit"], "Unit5");
    assert!(value["covered"].is_null());
}

#[test]
fn a_load_against_a_report() {
    let dir = TempDir::new("capacity-report");
    let report = write_echo_report(&dir.0);

    let output = capacity(&[
        "--scenario",
        "echo",
        "--connections",
        "10000",
        "--report",
        &report,
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(
        text.contains("step 2: 12,000 connections, 12,000 in/s, 12,000 out/s, p99 24.5 ms"),
        "{text}"
    );
    assert!(text.contains("reaches Unit10"), "{text}");
    assert!(text.contains("headroom 1.20x: enough"), "{text}");

    // Twice as much as was measured: not enough, exit status 1.
    let output = capacity(&[
        "--load",
        "scenario=echo,connections=24000",
        "--report",
        &report,
        "--json",
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let value: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(value["covered"], false);
    assert_eq!(value["comparisons"][0]["headroom"], 0.5);
    assert_eq!(value["comparisons"][0]["enough"], false);
    assert_eq!(value["reports"][0]["measured"]["p99_ms"], 24.5);
    assert_eq!(value["reports"][0]["azure_unit"], "Unit10");

    // A load of a scenario no report measured is not covered either.
    let output = capacity(&[
        "--scenario",
        "echo",
        "--connections",
        "1000",
        "--load",
        "scenario=send-to-connection,connections=1000",
        "--report",
        &report,
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("load 2 (send-to-connection): no report"),
        "{}",
        stdout(&output)
    );
}

#[test]
fn usage_errors_exit_2_and_say_why() {
    let fails = |args: &[&str], needle: &str| {
        let output = capacity(args);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            stdout(&output)
        );
        assert!(
            stderr(&output).contains(needle),
            "{args:?}: stderr {:?} should contain {needle:?}",
            stderr(&output)
        );
    };
    fails(
        &["--scenario", "chat", "--connections", "5"],
        "unknown scenario 'chat'",
    );
    fails(
        &["--scenario", "echo", "--connections", "ten"],
        "expected a whole number, got 'ten'",
    );
    fails(
        &["--load", "scenario=echo,connections=5,message-size=2XB"],
        "message-size",
    );
    fails(
        &["--scenario", "broadcast", "--connections", "5"],
        "needs senders",
    );
    fails(&[], "describe a load");
    let missing = std::env::temp_dir().join("switchyard-no-such-report.json");
    fails(
        &[
            "--scenario",
            "echo",
            "--connections",
            "5",
            "--report",
            missing.to_str().unwrap(),
        ],
        &format!("cannot read report {}", missing.display()),
    );
    let dir = TempDir::new("capacity-bad-report");
    let bad = dir.0.join("bad.json");
    std::fs::write(&bad, "{\"scenario\": 1}").unwrap();
    fails(
        &[
            "--scenario",
            "echo",
            "--connections",
            "5",
            "--report",
            bad.to_str().unwrap(),
        ],
        &format!("cannot parse report {}", bad.display()),
    );
}
