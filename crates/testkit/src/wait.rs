//! Waiting in tests: bounded, with a message that says what did not happen.

use std::time::Duration;

/// Bound for anything that should happen soon; generous so a loaded machine does not flake.
pub const WAIT: Duration = Duration::from_secs(5);

pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// Polls `check` until it holds or `within` passes; panics with `what` otherwise.
pub async fn eventually(what: &str, within: Duration, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + within;
    while !check() {
        if tokio::time::Instant::now() > deadline {
            panic!("timed out waiting for: {what}");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Like [`eventually`], for checks that must await (cluster-wide questions).
pub async fn eventually_async<F: std::future::Future<Output = bool>>(
    what: &str,
    within: Duration,
    mut check: impl FnMut() -> F,
) {
    let deadline = tokio::time::Instant::now() + within;
    while !check().await {
        if tokio::time::Instant::now() > deadline {
            panic!("timed out waiting for: {what}");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Awaits a future with a bound, panicking with `what` on timeout.
pub async fn within<T>(
    what: &str,
    limit: Duration,
    future: impl std::future::Future<Output = T>,
) -> T {
    match tokio::time::timeout(limit, future).await {
        Ok(value) => value,
        Err(_) => panic!("timed out: {what}"),
    }
}
