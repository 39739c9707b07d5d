//! The `switchyard-bench app-server` binary: prints its bound address, serves negotiate,
//! and exits cleanly on SIGTERM.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use switchyard_testkit::TestServer;

#[cfg(unix)]
#[tokio::test]
async fn app_server_binary_prints_address_serves_negotiate_and_stops_on_sigterm() {
    let service = TestServer::start().await;

    let mut child = Command::new(env!("CARGO_BIN_EXE_switchyard-bench"))
        .args([
            "app-server",
            "--connection-string",
            &service.connection_string(),
            "--listen",
            "127.0.0.1:0",
            "--connections",
            "2",
            "--server-id",
            "binary-test",
            "--graceful-shutdown",
            "wait",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let lines = tokio::task::spawn_blocking(move || {
        let mut lines = BufReader::new(stdout).lines();
        let first = lines.next().unwrap().unwrap();
        let second = lines.next().unwrap().unwrap();
        (first, second)
    });
    let (first, second) = tokio::time::timeout(Duration::from_secs(20), lines)
        .await
        .expect("the binary prints its address")
        .unwrap();
    let addr = first
        .strip_prefix("App server listening on http://")
        .unwrap_or_else(|| panic!("unexpected first line {first:?}"));
    assert!(!addr.ends_with(":0"), "{addr}");
    assert_eq!(second, format!("Negotiate: http://{addr}/bench/negotiate"));

    let response = reqwest::Client::new()
        .post(format!("http://{addr}/bench/negotiate?negotiateVersion=1"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: serde_json::Value = response.json().await.unwrap();
    assert!(body["url"].as_str().unwrap().starts_with(&format!(
        "http://127.0.0.1:{}/client/?hub=bench&asrs.op=%2Fbench&asrs_request_id=",
        service.addr.port()
    )));

    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = tokio::time::timeout(
        Duration::from_secs(20),
        tokio::task::spawn_blocking(move || child.wait().unwrap()),
    )
    .await
    .expect("the binary exits after SIGTERM")
    .unwrap();
    assert!(exit.success(), "{exit:?}");
}
