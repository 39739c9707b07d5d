//! The test harness itself: a run that the tests cut at its bound takes the processes it
//! started with it (nodes, redis-server), and its temporary files are gone once the test is.

use std::time::{Duration, Instant};

mod common;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_cut_at_its_bound_leaves_no_process_or_directory() {
    let dir = common::scratch("cut");
    let path = dir.to_path_buf();
    // Two nodes and a redis-server started by the tool, then a minute of broadcasts: the
    // bound of 12 s cuts it in the middle.
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchyard-bench"));
    command
        .args(["rest-broadcast", "--nodes", "2", "--service-bin"])
        .arg(common::switchyard_bin())
        .args(["-c", "10", "-d", "60s", "--quiet"])
        .env("TMPDIR", &path);
    let mut seen = Vec::new();
    let mut redis_dirs = 0;
    let result = common::try_output_within(command, Duration::from_secs(12), |group| {
        seen = common::group_members(group);
        redis_dirs = std::fs::read_dir(&path)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("switchyard-bench-redis-")
            })
            .count();
    })
    .await;
    let Err(cut) = result else {
        panic!("the run ended within 12 s: {result:?}");
    };
    // The tool, redis-server and at least one node were running when the bound passed.
    assert!(seen.len() >= 3, "{cut}: the group held only {seen:?}");
    assert_eq!(
        redis_dirs, 1,
        "redis-server's directory is in the scratch one"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left: Vec<u32> = seen
            .iter()
            .copied()
            .filter(|&pid| common::running(pid))
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still running 10 s after the bound: {left:?} of {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(dir);
    assert!(!path.exists(), "{} is left behind", path.display());
}
