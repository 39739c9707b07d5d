//! Running the real `switchyard-bench` binary from tests, shared by the test files.
#![allow(dead_code)] // each test file uses its own part

use std::path::{Path, PathBuf};
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
    /// The run's scratch directory (its summary file, and the run's own temporary files),
    /// removed when the outcome is dropped.
    pub dir: Scratch,
}

/// A directory of the test's own under the system's temporary directory, removed when
/// dropped: also when an assertion fails and the test unwinds, so no run leaves one behind.
pub struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A new scratch directory; `name` says whose. Unique within the process too: tests run at
/// once, and two may use the same name (a scenario's).
pub fn scratch(name: &str) -> Scratch {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!(
        "switchyard-bench-{}-{n}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    Scratch(dir)
}

/// Runs `command` in a process group of its own, bounded by `limit`; panics when the bound
/// passes. See [`try_output_within`].
pub async fn output_within(
    command: tokio::process::Command,
    limit: Duration,
    what: &str,
) -> std::process::Output {
    try_output_within(command, limit, |_| {})
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// Runs `command` in a process group of its own, bounded by `limit`. When the bound passes
/// (or the test unwinds while it runs) the whole group is killed: `kill_on_drop` alone ends
/// only the tool, and the services, redis-servers and app servers it started would outlive
/// the test. `at_bound` sees the group's id just before it is killed.
pub async fn try_output_within(
    mut command: tokio::process::Command,
    limit: Duration,
    at_bound: impl FnOnce(u32),
) -> Result<std::process::Output, String> {
    command
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = command.spawn().map_err(|e| format!("spawn: {e}"))?;
    let pid = child.id().ok_or("the child has no pid")?;
    let mut group = Group(Some(pid));
    match tokio::time::timeout(limit, child.wait_with_output()).await {
        Ok(output) => {
            // It ended by itself, and its own children with it (it stops them as it exits).
            group.0 = None;
            output.map_err(|e| format!("wait: {e}"))
        }
        Err(_) => {
            at_bound(pid);
            drop(group);
            Err(format!("the run did not end within {limit:?}"))
        }
    }
}

/// The process group of a run not yet ended; killed on drop.
struct Group(Option<u32>);

impl Drop for Group {
    fn drop(&mut self) {
        if let Some(pid) = self.0 {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", "--", &format!("-{pid}")])
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// A process's state letter and process group, from /proc (`None`: no such process).
fn stat(pid: u32) -> Option<(char, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // pid (comm) state ppid pgrp …: the name may hold spaces, so split after its ')'.
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let group = fields.nth(1)?.parse().ok()?;
    Some((state, group))
}

/// Whether `pid` is a process that has not ended (a zombie has: only its status is left).
pub fn running(pid: u32) -> bool {
    stat(pid).is_some_and(|(state, _)| state != 'Z')
}

/// The running processes in process group `group`.
pub fn group_members(group: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_string_lossy().parse::<u32>().ok())
        .filter(|&pid| stat(pid).is_some_and(|(state, g)| state != 'Z' && g == group))
        .collect()
}

/// The `switchyard` binary beside this package's (`SWITCHYARD_BIN` overrides).
pub fn switchyard_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("SWITCHYARD_BIN") {
        return PathBuf::from(path);
    }
    let bench = PathBuf::from(env!("CARGO_BIN_EXE_switchyard-bench"));
    let bin = bench.with_file_name("switchyard");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build -p switchyard` first (or `cargo test --workspace`), \
         or name it with SWITCHYARD_BIN",
        bin.display()
    );
    bin
}

/// Runs `switchyard-bench ARGS --summary-json … --quiet` (bounded to 90 s). Its temporary
/// files (a redis-server's directory) go into the scratch directory too.
pub async fn bench(name: &str, args: &[&str]) -> Outcome {
    let dir = scratch(name);
    let summary = dir.join("summary.json");
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchyard-bench"));
    command
        .args(args)
        .arg("--summary-json")
        .arg(&summary)
        .arg("--quiet")
        .env("TMPDIR", &*dir);
    let output = output_within(command, Duration::from_secs(90), name).await;
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
