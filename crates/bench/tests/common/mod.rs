//! Running the real `switchyard-bench` binary from tests, shared by the test files.
#![allow(dead_code)] // each test file uses its own part

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use switchyard_capacity::report::Report;

/// Short timings shared by the smoke runs.
pub const QUICK: [&str; 6] = [
    "--duration",
    "2s",
    "--send-interval",
    "200ms",
    "--drain",
    "2s",
];

pub struct Outcome {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    pub report: Option<Report>,
    /// The run's scratch directory (its summary file); the caller removes it.
    pub dir: PathBuf,
}

pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("switchyard-bench-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `switchyard-bench ARGS --summary-json … --quiet` (bounded to 90 s).
pub async fn bench(name: &str, args: &[&str]) -> Outcome {
    let dir = scratch(name);
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
    Outcome {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        report,
        dir,
    }
}
