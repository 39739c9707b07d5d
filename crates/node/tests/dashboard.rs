//! The dashboard and its admin hub against a live node: who gets in, what the snapshot and
//! the connection list say about real clients, closing a client from the dashboard, and the
//! live trace (its events, its end). The page itself is driven in headless Chromium by
//! tests/browser/dashboard.test.js.

mod common;

use std::time::Duration;

use common::{hub_of, now, Admin, Msg, RawClient, TestServer};
use serde_json::{json, Value};
use switchyard_auth::TokenBuilder;
use switchyard_hub_protocol::{encode_invocation, Format, HubMessage};
use switchyard_node::config::{Dashboard, UpstreamTemplate};
use switchyard_node::Config;

const KEY: &str = "a-configured-key-of-at-least-32-characters!";
const DASHBOARD_KEY: &str = "a-separate-dashboard-key-of-32-characters";

async fn server_with_key(dashboard: Dashboard) -> TestServer {
    TestServer::start_with(Config {
        access_key: Some(KEY.into()),
        dashboard,
        ..Config::default()
    })
    .await
}

fn dashboard_audience(server: &TestServer) -> String {
    format!("http://{}/dashboard", server.addr)
}

fn admin_token(server: &TestServer) -> String {
    TokenBuilder::new(dashboard_audience(server))
        .claim("role", "admin")
        .sign(KEY, now())
}

async fn page_status(server: &TestServer, token: Option<&str>) -> (u16, String) {
    let mut url = dashboard_audience(server);
    if let Some(token) = token {
        url.push_str(&format!("?access_token={token}"));
    }
    let response = reqwest::get(url).await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

/// The status of a WebSocket upgrade to the admin hub from a page of `origin`.
async fn hub_status_from(server: &TestServer, origin: &str) -> u16 {
    hub_status_with(server, None, &[("origin", origin)]).await
}

/// The status of a WebSocket upgrade to the admin hub with `token` and these headers, as a
/// balancer in front of the node would pass them on (`host`, `origin`, `x-forwarded-*`).
async fn hub_status_with(
    server: &TestServer,
    token: Option<&str>,
    headers: &[(&str, &str)],
) -> u16 {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let query = token
        .map(|t| format!("?access_token={t}"))
        .unwrap_or_default();
    let mut request = format!("ws://{}/dashboard/hub{query}", server.addr)
        .into_client_request()
        .unwrap();
    for (name, value) in headers {
        request.headers_mut().insert(
            tokio_tungstenite::tungstenite::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            value.parse().unwrap(),
        );
    }
    match tokio_tungstenite::connect_async(request).await {
        Ok((_, response)) => response.status().as_u16(),
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => response.status().as_u16(),
        Err(other) => panic!("unexpected error: {other}"),
    }
}

/// The status of a WebSocket upgrade to the admin hub with `token` (101 when it opens).
async fn hub_status(server: &TestServer, token: Option<&str>) -> u16 {
    let url = match token {
        Some(token) => format!("ws://{}/dashboard/hub?access_token={token}", server.addr),
        None => format!("ws://{}/dashboard/hub", server.addr),
    };
    match tokio_tungstenite::connect_async(url).await {
        Ok((_, response)) => response.status().as_u16(),
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => response.status().as_u16(),
        Err(other) => panic!("unexpected error: {other}"),
    }
}

/// A page's session ends when its token expires, with the reason (the page then asks for a
/// fresh token), as client connections do at `exp`.
#[tokio::test]
async fn an_admin_session_ends_when_its_token_expires() {
    let server = server_with_key(Dashboard::default()).await;
    let short = TokenBuilder::new(dashboard_audience(&server))
        .claim("role", "admin")
        .lifetime(Duration::from_secs(2))
        .sign(KEY, now());
    let mut admin = Admin::open(&server, &short).await;
    admin.push("snapshot", |_| true).await;
    match admin.until_closed().await {
        Some(HubMessage::Close {
            error: Some(error),
            allow_reconnect,
        }) => {
            assert!(error.contains("expired"), "{error}");
            assert!(!allow_reconnect, "the same token would be refused again");
        }
        other => panic!("expected a Close with the reason, got {other:?}"),
    }
    // A long-lived token's session stays (the close above is the token's, not a timer's).
    let mut admin = Admin::open(&server, &admin_token(&server)).await;
    for _ in 0..4 {
        admin.push("snapshot", |_| true).await;
    }
    server.stop().await;
}

/// Hub names come from requests, and each hub keeps ~15 KB of indices: a hub no one uses any
/// more is freed, so a new name per visitor does not grow memory forever.
#[tokio::test]
async fn hubs_no_one_uses_any_more_are_freed() {
    let server = TestServer::start().await;
    let visitors = |snapshot: &Value| {
        snapshot["hubs"].as_array().map_or(0, |hubs| {
            hubs.iter()
                .filter(|hub| {
                    hub["name"]
                        .as_str()
                        .is_some_and(|n| n.starts_with("visitor"))
                })
                .count()
        })
    };
    let mut admin = Admin::open(&server, "").await;
    let mut open = Vec::new();
    for i in 0..40 {
        let hub = format!("visitor{i}");
        let (mut client, _) =
            RawClient::start(&server, &hub, &server.token(&hub, None), Format::Json).await;
        client.handshake_result().await.unwrap();
        open.push(client);
    }
    admin.push("snapshot", |a| visitors(&a[0]) == 40).await;
    // One visitor stays: its hub is kept while the others are freed.
    let stays = open.pop().unwrap();
    for client in open {
        client.close().await;
    }
    admin.push("snapshot", |a| visitors(&a[0]) == 1).await;
    stays.close().await;
    admin.push("snapshot", |a| visitors(&a[0]) == 0).await;
    server.stop().await;
}

#[tokio::test]
async fn only_operators_open_the_dashboard_and_its_hub() {
    let server = server_with_key(Dashboard {
        key: Some(DASHBOARD_KEY.into()),
        ..Dashboard::default()
    })
    .await;
    let audience = dashboard_audience(&server);
    let no_role = TokenBuilder::new(audience.clone()).sign(KEY, now());
    let other_role = TokenBuilder::new(audience.clone())
        .claim("role", "user")
        .sign(KEY, now());
    let client_token = TokenBuilder::new(server.client_url("chat"))
        .claim("role", "admin")
        .sign(KEY, now());
    let wrong_key = TokenBuilder::new(audience.clone())
        .claim("role", "admin")
        .sign(switchyard_auth::EMULATOR_ACCESS_KEY, now());
    let expired = TokenBuilder::new(audience.clone())
        .claim("role", "admin")
        .sign(KEY, now() - 7200);
    let by_dashboard_key = TokenBuilder::new(audience.clone()).sign(DASHBOARD_KEY, now());
    let admin = admin_token(&server);

    // Without a token the page (which holds no data) is served and asks for one; the token
    // then follows `#` or goes in its form, so it never travels in the page's address.
    let (status, body) = page_status(&server, None).await;
    assert_eq!(status, 200);
    assert!(body.contains("switchyard token --admin"), "{body}");
    assert!(body.contains(r#"<body data-auth="needed">"#), "{body}");
    for (name, token) in [
        ("no role", &no_role),
        ("another role", &other_role),
        ("a client token", &client_token),
        ("the development key", &wrong_key),
        ("expired", &expired),
    ] {
        let (status, _) = page_status(&server, Some(token)).await;
        assert_eq!(status, 401, "page with {name}");
        assert_eq!(
            hub_status(&server, Some(token)).await,
            401,
            "hub with {name}"
        );
    }
    assert_eq!(hub_status(&server, None).await, 401);
    for (name, token) in [("admin", &admin), ("dashboard key", &by_dashboard_key)] {
        let (status, body) = page_status(&server, Some(token)).await;
        assert_eq!(status, 200, "page with {name}");
        assert!(body.contains(r#"<body data-auth="token">"#), "{body}");
        assert!(body.contains("/dashboard/assets/signalr.min.js"));
        assert_eq!(
            hub_status(&server, Some(token)).await,
            101,
            "hub with {name}"
        );
    }
    // The scripts hold no data: anyone may load them.
    for asset in [
        "signalr.min.js",
        "uPlot.iife.min.js",
        "dashboard.js",
        "dashboard.css",
    ] {
        let response = reqwest::get(format!("http://{}/dashboard/assets/{asset}", server.addr))
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{asset}");
    }
    server.stop().await;

    // Development mode (no access key, loopback only) is open; switched off, nothing is served.
    let development = TestServer::start().await;
    let (status, body) = page_status(&development, None).await;
    assert_eq!(status, 200);
    assert!(body.contains(r#"<body data-auth="open">"#), "{body}");
    assert_eq!(hub_status(&development, None).await, 101);
    // A page of another site cannot open the admin hub (WebSockets skip CORS).
    let own = format!("http://{}", development.addr);
    assert_eq!(hub_status_from(&development, &own).await, 101);
    assert_eq!(
        hub_status_from(&development, "http://evil.example").await,
        403
    );
    development.stop().await;
    let off = server_with_key(Dashboard {
        enabled: false,
        ..Dashboard::default()
    })
    .await;
    assert_eq!(page_status(&off, Some(&admin_token(&off))).await.0, 404);
    off.stop().await;
}

/// Behind a balancer the page's origin names the balancer, not the node. nginx's
/// `proxy_set_header Host $host` drops the port; `public_endpoint` and, from a trusted proxy,
/// `X-Forwarded-*` say where the page was loaded from. Other sites stay refused.
#[tokio::test]
async fn the_admin_hub_takes_its_own_page_behind_a_balancer_and_refuses_other_sites() {
    // With an access key: in development mode CORS takes pages on this machine only.
    let behind_balancer = TestServer::start_with(Config {
        access_key: Some(KEY.into()),
        public_endpoint: Some("http://lb.example:8888".into()),
        ..Config::default()
    })
    .await;
    let admin = admin_token(&behind_balancer);
    for (headers, expected, what) in [
        (
            [("host", "lb.example"), ("origin", "http://lb.example:8888")],
            101,
            "Host $host (port dropped): the public endpoint's origin",
        ),
        (
            [
                ("host", "lb.example:8888"),
                ("origin", "http://lb.example:8888"),
            ],
            101,
            "Host $http_host",
        ),
        (
            [("host", "lb.example:80"), ("origin", "http://lb.example")],
            101,
            "a default port written out",
        ),
        (
            [("host", "lb.example"), ("origin", "http://lb.example:9999")],
            403,
            "another port of the balancer's host",
        ),
        (
            [
                ("host", "lb.example"),
                ("origin", "https://lb.example:8888"),
            ],
            403,
            "the public endpoint's host and port over another scheme",
        ),
        (
            [("host", "lb.example"), ("origin", "http://evil.example")],
            403,
            "another site",
        ),
        (
            [("host", "lb.example"), ("origin", "null")],
            403,
            "an opaque origin",
        ),
    ] {
        assert_eq!(
            hub_status_with(&behind_balancer, Some(&admin), &headers).await,
            expected,
            "{what}: {headers:?}"
        );
    }
    // X-Forwarded-* from a peer that is not a trusted proxy say nothing.
    let untrusted = [
        ("host", "lb.example"),
        ("x-forwarded-port", "9999"),
        ("origin", "http://lb.example:9999"),
    ];
    assert_eq!(
        hub_status_with(&behind_balancer, Some(&admin), &untrusted).await,
        403
    );
    behind_balancer.stop().await;

    let behind_trusted_proxy = TestServer::start_with(Config {
        access_key: Some(KEY.into()),
        trusted_proxies: vec!["127.0.0.1".into()],
        ..Config::default()
    })
    .await;
    let admin = admin_token(&behind_trusted_proxy);
    for (headers, expected, what) in [
        (
            vec![
                ("host", "lb.example"),
                ("x-forwarded-port", "8888"),
                ("x-forwarded-proto", "http"),
                ("origin", "http://lb.example:8888"),
            ],
            101,
            "the port the proxy forwarded",
        ),
        (
            vec![("host", "lb.example"), ("origin", "http://lb.example:8888")],
            403,
            "a port nothing names",
        ),
        (
            vec![
                ("host", "upstream-name"),
                ("x-forwarded-host", "signalr.example.com"),
                ("x-forwarded-proto", "https"),
                ("origin", "https://signalr.example.com"),
            ],
            101,
            "the host the proxy forwarded",
        ),
        (
            vec![
                ("host", "upstream-name"),
                ("x-forwarded-host", "signalr.example.com"),
                ("x-forwarded-proto", "https"),
                ("origin", "https://evil.example"),
            ],
            403,
            "another site behind the same proxy",
        ),
    ] {
        assert_eq!(
            hub_status_with(&behind_trusted_proxy, Some(&admin), &headers).await,
            expected,
            "{what}: {headers:?}"
        );
    }
    behind_trusted_proxy.stop().await;
}

/// `/` in a browser or with curl: what a person can open here, and where the docs are. No key,
/// no version (the health endpoint says neither).
#[tokio::test]
async fn the_front_page_names_the_dashboard_health_metrics_and_docs() {
    let server = server_with_key(Dashboard::default()).await;
    let http = reqwest::Client::new();
    let get = |accept: &'static str| {
        http.get(format!("http://{}/", server.addr))
            .header("accept", accept)
            .send()
    };
    let browser = get("text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8")
        .await
        .unwrap();
    assert_eq!(browser.status(), 200);
    assert_eq!(
        browser.headers()["content-type"],
        "text/html; charset=utf-8"
    );
    assert_eq!(browser.headers()["vary"], "Accept");
    let page = browser.text().await.unwrap();
    for link in [
        r#"href="/dashboard""#,
        r#"href="/api/health""#,
        r#"href="/metrics""#,
        r#"href="/api/openapi.json""#,
        r#"rel="icon" href="/dashboard/assets/favicon.svg""#,
    ] {
        assert!(page.contains(link), "{link} in {page}");
    }
    assert!(page.contains("docs/"), "{page}");
    let curl = get("*/*").await.unwrap();
    assert_eq!(curl.headers()["content-type"], "text/plain; charset=utf-8");
    let text = curl.text().await.unwrap();
    for path in ["/dashboard", "/api/health", "/metrics", "README.md"] {
        assert!(text.contains(path), "{path} in {text}");
    }
    for body in [&page, &text] {
        assert!(!body.contains(KEY), "no key: {body}");
        assert!(
            !body.contains(env!("CARGO_PKG_VERSION")),
            "no version: {body}"
        );
    }
    // Every link on it answers (the dashboard with its sign-in form, without a token).
    for (path, status) in [
        ("/api/health", 200),
        ("/metrics", 200),
        ("/api/openapi.json", 200),
        ("/dashboard/assets/favicon.svg", 200),
        ("/dashboard", 200),
    ] {
        let response = reqwest::get(format!("http://{}{path}", server.addr))
            .await
            .unwrap();
        assert_eq!(response.status(), status, "{path}");
    }
    server.stop().await;

    let off = server_with_key(Dashboard {
        enabled: false,
        ..Dashboard::default()
    })
    .await;
    let text = reqwest::get(format!("http://{}/", off.addr))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.contains("/api/health") && !text.contains("/dashboard"),
        "{text}"
    );
    off.stop().await;
}

#[tokio::test]
async fn the_admin_hub_shows_real_clients_and_closes_one_with_a_reason() {
    let server = server_with_key(Dashboard::default()).await;
    let mut clients = Vec::new();
    for user in ["ada", "bob"] {
        let (mut client, id) = RawClient::start(
            &server,
            "chat",
            &server.token("chat", Some(user)),
            Format::Json,
        )
        .await;
        client.handshake_result().await.unwrap();
        clients.push((client, id));
    }
    let (mut packed, packed_id) = RawClient::start(
        &server,
        "chat",
        &server.token("chat", None),
        Format::MessagePack,
    )
    .await;
    packed.handshake_result().await.unwrap();
    let (status, _) = server
        .rest(
            "PUT",
            &format!("/api/hubs/chat/groups/room/connections/{}", clients[0].1),
        )
        .await;
    assert_eq!(status, 200);
    server.broadcast("chat", "news", &[json!("hello")]);
    for (client, _) in clients.iter_mut() {
        client
            .expect(&Msg::invocation("news", &[json!("hello")]))
            .await;
    }

    let mut admin = Admin::open(&server, &admin_token(&server)).await;
    let snapshot = admin
        .push("snapshot", |args| {
            hub_of(&args[0], "chat").is_some_and(|hub| hub["traffic"]["messagesOut"] == 3)
        })
        .await
        .remove(0);
    let chat = hub_of(&snapshot, "chat").unwrap();
    assert_eq!(chat["connections"], 3, "{chat}");
    assert_eq!(chat["transports"]["WebSockets"], 3);
    assert_eq!(chat["protocols"]["json"], 2);
    assert_eq!(chat["protocols"]["messagepack"], 1);
    assert_eq!(chat["groups"], 1);
    assert_eq!(chat["users"], 2);
    assert_eq!(snapshot["node"]["clientConnections"], 3);
    assert!(snapshot["node"]["memoryBytes"].as_u64().unwrap() > 0);

    // The list: every connection, filtered by user, transport, protocol.
    let list = admin
        .invoke("SetFilter", &[json!({"hub": "chat"})])
        .await
        .unwrap();
    assert_eq!(list["matched"], 3);
    let row = list["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|row| row["connectionId"] == clients[0].1.as_str())
        .unwrap()
        .clone();
    assert_eq!(row["userId"], "ada");
    assert_eq!(row["transport"], "WebSockets");
    assert_eq!(row["protocol"], "json");
    assert_eq!(row["address"], "127.0.0.1");
    assert_eq!(row["traffic"]["messagesOut"], 1);
    assert!(row["connectedSince"].as_i64().unwrap() > now() * 1000 - 60_000);
    let only_bob = admin
        .invoke("SetFilter", &[json!({"search": "BOB"})])
        .await
        .unwrap();
    assert_eq!(only_bob["matched"], 1);
    assert_eq!(only_bob["rows"][0]["connectionId"], clients[1].1.as_str());
    let only_packed = admin
        .invoke("SetFilter", &[json!({"protocol": "messagepack"})])
        .await
        .unwrap();
    assert_eq!(only_packed["rows"][0]["connectionId"], packed_id.as_str());
    // The filter set last is pushed again every two seconds.
    admin
        .push("connections", |args| args[0]["matched"] == 1)
        .await;

    // Closing from the dashboard: the client gets a Close with the reason.
    admin
        .invoke(
            "CloseConnection",
            &[
                json!("chat"),
                json!(clients[1].1),
                json!("Operator says bye."),
            ],
        )
        .await
        .unwrap();
    let closed = clients[1].0.until_closed().await;
    match closed {
        Some(HubMessage::Close { error, .. }) => {
            assert_eq!(error.as_deref(), Some("Operator says bye."))
        }
        other => panic!("expected a Close, got {other:?}"),
    }
    let missing = admin
        .invoke(
            "CloseConnection",
            &[json!("chat"), json!("no-such-id"), json!("")],
        )
        .await;
    assert!(missing.unwrap_err().contains("does not exist"));
    assert!(admin
        .invoke("NoSuchMethod", &[])
        .await
        .unwrap_err()
        .contains("no method"));
    // The neighbours are untouched.
    server.broadcast("chat", "still", &[]);
    clients[0].0.expect(&Msg::invocation("still", &[])).await;
    server.stop().await;
}

#[tokio::test]
async fn a_live_trace_streams_a_hubs_events_and_ends_by_itself() {
    let server = server_with_key(Dashboard {
        trace_payloads: true,
        trace_preview_bytes: 64,
        max_trace_duration: Duration::from_secs(3),
        ..Dashboard::default()
    })
    .await;
    let mut admin = Admin::open(&server, &admin_token(&server)).await;
    let until = admin
        .invoke("StartTrace", &[json!("chat"), json!(600)])
        .await
        .unwrap();
    // Capped at dashboard.max_trace_duration.
    assert!(until.as_i64().unwrap() <= now() * 1000 + 4_000, "{until}");

    // A refused token shows as an error of the hub it asked for.
    let refused = reqwest::Client::new()
        .post(format!("http://{}/client/negotiate?hub=chat", server.addr))
        .bearer_auth("not-a-token")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    let (mut client, id) = RawClient::start(
        &server,
        "chat",
        &server.token("chat", Some("ada")),
        Format::Json,
    )
    .await;
    client.handshake_result().await.unwrap();
    let (mut quiet, _) =
        RawClient::start(&server, "other", &server.token("other", None), Format::Json).await;
    quiet.handshake_result().await.unwrap();
    server.broadcast("other", "untraced", &[]);
    server.broadcast("chat", "news", &[json!("hello")]);
    // A serverless hub without an upstream closes a client that invokes a method.
    client
        .send_raw(&encode_invocation(Format::Json, "ask", &[json!(1)]))
        .await;

    let mut seen = Vec::new();
    while !seen.iter().any(|e: &Value| e["kind"] == "disconnected") {
        let args = admin.push("trace", |_| true).await;
        assert_eq!(args[0], "chat");
        seen.extend(args[1].as_array().unwrap().iter().cloned());
    }
    let kinds: Vec<_> = seen.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["error", "connected", "message", "message", "disconnected"],
        "{seen:?}"
    );
    assert_eq!(seen[0]["reason"], "token_invalid");
    let seen = &seen[1..];
    assert_eq!(seen[0]["connectionId"], id.as_str());
    assert_eq!(seen[0]["userId"], "ada");
    assert_eq!(seen[0]["transport"], "WebSockets");
    let out = &seen[1];
    assert_eq!(out["direction"], "out");
    assert_eq!(out["to"], "all");
    assert_eq!(out["target"], "news");
    assert!(out["preview"].as_str().unwrap().contains("hello"), "{out}");
    let inbound = &seen[2];
    assert_eq!(inbound["direction"], "in");
    assert_eq!(inbound["target"], "ask");
    assert_eq!(inbound["messageType"], "invocation");
    assert_eq!(seen[3]["reason"], "invocation_not_supported");
    assert!(!seen.iter().any(|e| e["target"] == "untraced"));

    // It switches itself off, and the watcher is told.
    admin.push("traceEnded", |args| args[0] == "chat").await;
    server.stop().await;
}

#[tokio::test]
async fn payloads_stay_out_of_the_trace_unless_enabled() {
    let server = server_with_key(Dashboard::default()).await;
    let (mut client, _) =
        RawClient::start(&server, "chat", &server.token("chat", None), Format::Json).await;
    client.handshake_result().await.unwrap();
    let mut admin = Admin::open(&server, &admin_token(&server)).await;
    admin
        .invoke("StartTrace", &[json!("chat"), json!(60)])
        .await
        .unwrap();
    server.broadcast("chat", "news", &[json!("secret")]);
    let args = admin.push("trace", |_| true).await;
    let event = &args[1][0];
    assert_eq!(event["target"], "news");
    assert!(event.get("preview").is_none(), "{event}");
    admin.invoke("StopTrace", &[json!("chat")]).await.unwrap();
    admin.push("traceEnded", |_| true).await;
    server.stop().await;
}

#[tokio::test]
async fn failed_upstream_requests_show_in_the_trace() {
    // An upstream that refuses connections: the port was free a moment ago.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let mut config = Config {
        access_key: Some(KEY.into()),
        ..Config::default()
    };
    config.upstream.templates = vec![UpstreamTemplate::new(format!(
        "http://{closed}/api/{{hub}}/{{category}}/{{event}}"
    ))];
    let server = TestServer::start_with(config).await;
    let mut admin = Admin::open(&server, &admin_token(&server)).await;
    admin
        .invoke("StartTrace", &[json!("chat"), json!(60)])
        .await
        .unwrap();
    let (mut client, id) = RawClient::start(
        &server,
        "chat",
        &server.token("chat", Some("ada")),
        Format::Json,
    )
    .await;
    client.handshake_result().await.unwrap();

    let mut seen: Vec<Value> = Vec::new();
    while !seen.iter().any(|e| e["kind"] == "error") {
        let args = admin.push("trace", |_| true).await;
        seen.extend(args[1].as_array().unwrap().iter().cloned());
    }
    let failed = seen.iter().find(|e| e["kind"] == "error").unwrap();
    assert_eq!(failed["reason"], "upstream_failed", "{failed}");
    assert_eq!(failed["connectionId"], id.as_str());
    assert_eq!(failed["userId"], "ada");
    assert_eq!(failed["target"], "connected");
    let detail = failed["detail"].as_str().unwrap();
    assert!(
        detail.contains("connections connected") && detail.contains("unreachable"),
        "{detail}"
    );
    server.stop().await;
}
