//! Pings.

use super::*;

#[tokio::test]
async fn pings_echo_status_and_shutdown() {
    let server = TestServer::start().await;
    let mut app = AppServer::open(&server, "chat", "s1").await;

    let echo = Ping::new(&[("echo", "638400000000000000")]);
    app.send(echo.clone()).await;
    match app.next().await {
        ServiceMessage::Ping(p) => assert_eq!(p, echo),
        other => panic!("expected the echo, got {other:?}"),
    }

    app.send(Ping::new(&[("status", "1")])).await;
    match app.next().await {
        ServiceMessage::Ping(p) => assert_eq!(p.values, ["status", "1"]),
        other => panic!("expected the status answer, got {other:?}"),
    }

    // The SDK's real keep-alive carries client counts; it needs no answer.
    app.send(Ping::new(&[("#clientInHub", "0"), ("#client", "0")]))
        .await;
    app.send(Ping::keep_alive()).await;
    app.assert_quiet().await;

    app.send(Ping::new(&[("shutdown", "fin:0")])).await;
    match app.next().await {
        ServiceMessage::Ping(p) => assert_eq!(p.values, ["shutdown", "finack"]),
        other => panic!("expected finack, got {other:?}"),
    }
    app.echo_round_trip().await;
}

#[tokio::test]
async fn keep_alives_are_sent_when_quiet() {
    let mut config = Config::default();
    config.timeouts.server_keep_alive_interval = Duration::from_millis(200);
    let server = TestServer::start_with(config).await;
    let mut app = AppServer::open(&server, "chat", "s1").await;
    app.keep_alives = true;
    for _ in 0..3 {
        match app.next().await {
            ServiceMessage::Ping(p) => assert!(p.is_keep_alive(), "got {p:?}"),
            other => panic!("expected a keep-alive, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_silent_app_server_is_closed_and_a_chatty_one_is_not() {
    let mut config = Config::default();
    config.timeouts.server_keep_alive_interval = Duration::from_millis(100);
    config.timeouts.server_timeout = Duration::from_millis(500);
    let server = TestServer::start_with(config).await;
    let mut silent = AppServer::open(&server, "chat", "silent").await;
    let mut chatty = AppServer::open(&server, "chat", "chatty").await;

    /// Sends a keep-alive every 100 ms for `total`.
    async fn keep_talking(app: &mut AppServer, total: Duration) {
        let end = tokio::time::Instant::now() + total;
        while tokio::time::Instant::now() < end {
            app.send(Ping::keep_alive()).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    let started = tokio::time::Instant::now();
    let (seen, ()) = tokio::join!(silent.until_closed(), async {
        // Longer than the timeout plus the silent one's closing.
        keep_talking(&mut chatty, Duration::from_millis(1500)).await;
    });
    assert!(started.elapsed() >= Duration::from_millis(450));
    match seen.last() {
        Some(ServiceMessage::ServiceError(e)) => {
            assert!(e.error_message.contains("500ms"), "{:?}", e.error_message)
        }
        other => panic!("expected a ServiceError, got {other:?}"),
    }
    chatty.echo_round_trip().await;
    assert_eq!(server.node.server_connection_count(), 1);
}
