//! CORS: preflights, the headers on every kind of response, restricted origin lists.

mod common;

use std::time::Duration;

use common::{now, within, TestServer};
use futures_util::StreamExt;
use reqwest::header::HeaderMap;
use reqwest::{Method, StatusCode};
use switchyard_auth::{TokenBuilder, EMULATOR_ACCESS_KEY};
use switchyard_node::config::Cors;
use switchyard_node::Config;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

const WAIT: Duration = Duration::from_secs(5);
const APP: &str = "https://app.example";
const OTHER: &str = "https://other.example";
/// What the browser SignalR client asks for in its preflights.
const CLIENT_HEADERS: &str = "authorization,content-type,x-requested-with,x-signalr-user-agent";
const HANDSHAKE_JSON: &[u8] = b"{\"protocol\":\"json\",\"version\":1}\x1e";

async fn restricted(origins: &[&str]) -> TestServer {
    TestServer::start_with(Config {
        cors: Cors {
            allowed_origins: Some(origins.iter().map(|o| o.to_string()).collect()),
            ..Cors::default()
        },
        ..Config::default()
    })
    .await
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).map(|v| v.to_str().unwrap())
}

fn vary(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all("vary")
        .iter()
        .flat_map(|v| v.to_str().unwrap().split(','))
        .map(|v| v.trim().to_ascii_lowercase())
        .collect()
}

/// The origin is echoed with credentials allowed, and the response varies on Origin.
fn assert_allowed(headers: &HeaderMap, origin: &str, what: &str) {
    assert_eq!(
        header(headers, "access-control-allow-origin"),
        Some(origin),
        "{what}: {headers:?}"
    );
    assert_eq!(
        header(headers, "access-control-allow-credentials"),
        Some("true"),
        "{what}: {headers:?}"
    );
    assert!(
        vary(headers).contains(&"origin".to_string()),
        "{what}: {headers:?}"
    );
}

fn assert_no_cors(headers: &HeaderMap, what: &str) {
    for name in [
        "access-control-allow-origin",
        "access-control-allow-credentials",
        "access-control-allow-methods",
        "access-control-allow-headers",
    ] {
        assert!(headers.get(name).is_none(), "{what}: {name} in {headers:?}");
    }
    assert!(
        vary(headers).contains(&"origin".to_string()),
        "{what}: {headers:?}"
    );
}

async fn preflight(
    server: &TestServer,
    path: &str,
    origin: &str,
    method: &str,
) -> reqwest::Response {
    reqwest::Client::new()
        .request(Method::OPTIONS, format!("{}{path}", server.http()))
        .header("origin", origin)
        .header("access-control-request-method", method)
        .header("access-control-request-headers", CLIENT_HEADERS)
        .send()
        .await
        .unwrap()
}

async fn negotiate(server: &TestServer, hub: &str, origin: Option<&str>) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .post(format!(
            "{}/client/negotiate?hub={hub}&negotiateVersion=1",
            server.http()
        ))
        .bearer_auth(server.token(hub, Some("u1")))
        .header("x-requested-with", "XMLHttpRequest");
    if let Some(origin) = origin {
        request = request.header("origin", origin);
    }
    request.send().await.unwrap()
}

async fn connection_token(response: reqwest::Response) -> String {
    let body: serde_json::Value = response.json().await.unwrap();
    body["connectionToken"].as_str().unwrap().to_string()
}

fn rest_token(server: &TestServer, path: &str) -> String {
    TokenBuilder::new(format!("{}{path}", server.http())).sign(EMULATOR_ACCESS_KEY, now())
}

/// Development mode (no key) without a list: pages on this machine only, so that no web page
/// can drive a developer's local service (audit, low).
#[tokio::test]
async fn development_mode_admits_only_pages_on_this_machine() {
    let server = TestServer::start().await;
    for origin in [
        "http://localhost:5173",
        "http://127.0.0.1:3000",
        "http://[::1]:8080",
    ] {
        let response = preflight(&server, "/api/health", origin, "GET").await;
        assert_eq!(response.status(), StatusCode::NO_CONTENT, "{origin}");
        assert_allowed(response.headers(), origin, origin);
    }
    let response = preflight(&server, "/api/health", APP, "GET").await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    let text = response.text().await.unwrap();
    assert!(text.contains("cors.allowed_origins"), "{text}");
    server.stop().await;
    // With a key (not development mode), unset means any origin, like Azure.
    let server = TestServer::start_with(Config {
        access_key: Some("a-long-random-secret-of-at-least-32-chars".into()),
        ..Config::default()
    })
    .await;
    let response = preflight(&server, "/api/health", APP, "GET").await;
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    assert_allowed(response.headers(), APP, "production default");
}

#[tokio::test]
async fn preflight_from_a_page_on_this_machine_by_default() {
    let server = TestServer::start().await;
    for (path, method) in [
        ("/client/negotiate?hub=chat&negotiateVersion=1", "POST"),
        ("/client/?hub=chat&id=abc", "GET"),
        ("/client/?hub=chat&id=abc", "DELETE"),
        ("/api/hubs/chat/:send?api-version=2022-06-01", "POST"),
        (
            "/api/hubs/chat/groups/g/connections/c?api-version=2022-06-01",
            "PUT",
        ),
        ("/api/health", "GET"),
        ("/no/such/path", "GET"),
    ] {
        let response = preflight(&server, path, "http://localhost:5173", method).await;
        let what = format!("OPTIONS {path} ({method})");
        assert_eq!(response.status(), StatusCode::NO_CONTENT, "{what}");
        let headers = response.headers();
        assert_allowed(headers, "http://localhost:5173", &what);
        assert_eq!(
            header(headers, "access-control-allow-methods"),
            Some("GET, POST, DELETE, OPTIONS, HEAD, PUT"),
            "{what}"
        );
        assert_eq!(
            header(headers, "access-control-allow-headers"),
            Some(CLIENT_HEADERS),
            "{what}"
        );
        assert_eq!(header(headers, "access-control-max-age"), Some("600"));
        let vary = vary(headers);
        for name in [
            "origin",
            "access-control-request-method",
            "access-control-request-headers",
        ] {
            assert!(vary.contains(&name.to_string()), "{what}: {vary:?}");
        }
        assert!(headers
            .get("access-control-allow-private-network")
            .is_none());
        assert!(response.bytes().await.unwrap().is_empty());
    }
    server.stop().await;
}

#[tokio::test]
async fn preflight_details() {
    let server = TestServer::start_with(Config {
        cors: Cors {
            allowed_origins: Some(vec!["*".into()]),
            max_age: Duration::from_secs(3600),
        },
        ..Config::default()
    })
    .await;
    let client = reqwest::Client::new();
    // App-specific headers are echoed too; several request-header lines are joined.
    let response = client
        .request(
            Method::OPTIONS,
            format!("{}/client/negotiate?hub=chat", server.http()),
        )
        .header("origin", APP)
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", "x-requested-with")
        .header("access-control-request-headers", "x-my-app-header")
        .header("access-control-request-private-network", "true")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    let headers = response.headers();
    assert_eq!(
        header(headers, "access-control-allow-headers"),
        Some("x-requested-with, x-my-app-header")
    );
    assert_eq!(header(headers, "access-control-max-age"), Some("3600"));
    assert_eq!(
        header(headers, "access-control-allow-private-network"),
        Some("true")
    );
    // No requested headers: none allowed beyond the safelisted ones.
    let response = client
        .request(Method::OPTIONS, format!("{}/api/health", server.http()))
        .header("origin", APP)
        .header("access-control-request-method", "GET")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    assert!(response
        .headers()
        .get("access-control-allow-headers")
        .is_none());
    // OPTIONS without Access-Control-Request-Method is not a preflight: the route answers it.
    let response = client
        .request(Method::OPTIONS, format!("{}/api/health", server.http()))
        .header("origin", APP)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_allowed(response.headers(), APP, "plain OPTIONS");
    server.stop().await;
}

#[tokio::test]
async fn every_client_transport_response_carries_the_headers() {
    let server = restricted(&["*"]).await;
    let client = reqwest::Client::new();
    let base = server.client_url("chat");
    let token = server.token("chat", Some("u1"));

    // Negotiate, then long polling: poll, send, poll, delete.
    let response = negotiate(&server, "chat", Some(APP)).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_allowed(response.headers(), APP, "negotiate");
    let id = connection_token(response).await;
    let url = format!("{base}&id={id}");
    let response = client
        .get(&url)
        .bearer_auth(&token)
        .header("origin", APP)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_allowed(response.headers(), APP, "first poll");
    let response = client
        .post(&url)
        .bearer_auth(&token)
        .header("origin", APP)
        .body(HANDSHAKE_JSON)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_allowed(response.headers(), APP, "send");
    let response = client
        .get(&url)
        .bearer_auth(&token)
        .header("origin", APP)
        .send()
        .await
        .unwrap();
    assert_allowed(response.headers(), APP, "poll");
    assert_eq!(&response.bytes().await.unwrap()[..], b"{}\x1e");
    let response = client
        .delete(&url)
        .bearer_auth(&token)
        .header("origin", APP)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    assert_allowed(response.headers(), APP, "delete");

    // Server-Sent Events: the stream's headers, and the stream still flows.
    let id = connection_token(negotiate(&server, "chat", Some(APP)).await).await;
    let url = format!("{base}&id={id}");
    let response = client
        .get(&url)
        .bearer_auth(&token)
        .header("origin", APP)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        header(response.headers(), "content-type"),
        Some("text/event-stream")
    );
    assert_allowed(response.headers(), APP, "event stream");
    let mut stream = response.bytes_stream();
    let first = within("SSE comment", WAIT, stream.next())
        .await
        .unwrap()
        .unwrap();
    assert!(first.starts_with(b":"), "{first:?}");
    let response = client
        .post(&url)
        .bearer_auth(&token)
        .header("origin", APP)
        .body(HANDSHAKE_JSON)
        .send()
        .await
        .unwrap();
    assert_allowed(response.headers(), APP, "SSE send");
    let event = within("SSE handshake", WAIT, stream.next())
        .await
        .unwrap()
        .unwrap();
    assert!(event.starts_with(b"data: {}"), "{event:?}");

    // Errors the client reads are readable by the page too.
    let response = client
        .get(format!("{base}&id=unknown"))
        .bearer_auth(&token)
        .header("origin", APP)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    assert_allowed(response.headers(), APP, "unknown id");
    let response = client
        .post(format!("{}/client/negotiate?hub=chat", server.http()))
        .header("origin", APP)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert_allowed(response.headers(), APP, "negotiate without token");
    server.stop().await;
}

#[tokio::test]
async fn rest_and_health_carry_the_headers() {
    let server = restricted(&["*"]).await;
    let client = reqwest::Client::new();
    let path = "/api/hubs/chat/:send";
    let response = client
        .post(format!("{}{path}?api-version=2022-06-01", server.http()))
        .bearer_auth(rest_token(&server, path))
        .header("origin", APP)
        .json(&serde_json::json!({"target": "t", "arguments": [1]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    assert_allowed(response.headers(), APP, "REST send");
    let response = client
        .post(format!("{}{path}?api-version=2022-06-01", server.http()))
        .header("origin", APP)
        .json(&serde_json::json!({"target": "t", "arguments": [1]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert_allowed(response.headers(), APP, "REST 401");
    for method in [Method::GET, Method::HEAD] {
        let response = client
            .request(method.clone(), format!("{}/api/health", server.http()))
            .header("origin", OTHER)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_allowed(response.headers(), OTHER, &format!("{method} health"));
    }
    // Without Origin (not a browser): no CORS headers, but caches still learn it varies.
    let response = client
        .get(format!("{}/api/health", server.http()))
        .send()
        .await
        .unwrap();
    assert_no_cors(response.headers(), "health without Origin");
    server.stop().await;
}

#[tokio::test]
async fn a_restricted_list_admits_only_its_origins() {
    // Written the way people do: upper case, trailing slash, default port.
    let server = restricted(&["https://App.Example:443/", "http://localhost:3000"]).await;
    let response = preflight(&server, "/client/negotiate?hub=chat", APP, "POST").await;
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    assert_allowed(response.headers(), APP, "listed origin");
    let response = preflight(
        &server,
        "/client/negotiate?hub=chat",
        "http://localhost:3000",
        "POST",
    )
    .await;
    assert_eq!(response.status(), StatusCode::NO_CONTENT);

    for origin in [
        OTHER,
        "http://localhost:3001",
        "https://app.example.evil",
        "null",
    ] {
        let response = preflight(&server, "/client/negotiate?hub=chat", origin, "POST").await;
        assert_eq!(response.status(), StatusCode::FORBIDDEN, "{origin}");
        let headers = response.headers().clone();
        assert_no_cors(&headers, origin);
        assert_eq!(
            header(&headers, "content-type"),
            Some("text/plain; charset=utf-8")
        );
        let text = response.text().await.unwrap();
        assert!(
            text.contains(&format!("origin '{origin}' is not allowed"))
                && text.contains("cors.allowed_origins"),
            "{text}"
        );
    }

    // A non-preflighted request from another origin is served, without CORS headers: the
    // browser keeps the answer from the page.
    let response = negotiate(&server, "chat", Some(OTHER)).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_no_cors(response.headers(), "negotiate from another origin");
    let response = negotiate(&server, "chat", Some(APP)).await;
    assert_allowed(response.headers(), APP, "negotiate from the listed origin");
    // Requests without Origin (servers, native clients) are not affected.
    let response = negotiate(&server, "chat", None).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_no_cors(response.headers(), "negotiate without Origin");
    server.stop().await;
}

#[tokio::test]
async fn websockets_from_other_origins_are_refused() {
    let server = restricted(&[APP]).await;
    let token = server.token("chat", Some("u1"));
    let connect = |origin: Option<&'static str>| {
        let mut request = format!("{}&access_token={token}", server.ws_url("chat", None))
            .into_client_request()
            .unwrap();
        if let Some(origin) = origin {
            request
                .headers_mut()
                .insert("origin", origin.parse().unwrap());
        }
        tokio_tungstenite::connect_async(request)
    };
    let error = connect(Some(OTHER)).await.unwrap_err();
    match error {
        tokio_tungstenite::tungstenite::Error::Http(response) => {
            assert_eq!(response.status(), StatusCode::FORBIDDEN);
            let body =
                String::from_utf8_lossy(response.body().as_deref().unwrap_or_default()).to_string();
            assert!(body.contains("WebSockets"), "{body}");
        }
        other => panic!("expected 403, got {other:?}"),
    }
    let (_socket, response) = connect(Some(APP)).await.unwrap();
    assert_eq!(response.status(), StatusCode::SWITCHING_PROTOCOLS);
    let (_socket, _) = connect(None).await.unwrap();
    server.stop().await;

    // Any origin: a WebSocket from anywhere is accepted.
    let server = restricted(&["*"]).await;
    let token = server.token("chat", Some("u1"));
    let mut request = format!("{}&access_token={token}", server.ws_url("chat", None))
        .into_client_request()
        .unwrap();
    request
        .headers_mut()
        .insert("origin", OTHER.parse().unwrap());
    let (_socket, response) = tokio_tungstenite::connect_async(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::SWITCHING_PROTOCOLS);
    server.stop().await;
}

#[tokio::test]
async fn an_empty_list_admits_no_browser() {
    let server = restricted(&[]).await;
    let response = preflight(&server, "/api/health", APP, "GET").await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    let response = reqwest::Client::new()
        .get(format!("{}/api/health", server.http()))
        .header("origin", APP)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_no_cors(response.headers(), "health, empty list");
    server.stop().await;
}

#[tokio::test]
async fn null_origin_only_when_listed() {
    let server = restricted(&["null"]).await;
    let response = preflight(&server, "/api/health", "null", "GET").await;
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    assert_allowed(response.headers(), "null", "null origin");
    server.stop().await;
}

#[test]
fn bad_origins_fail_validation() {
    for bad in ["app.example", "https://app.example/path", "*.example.com"] {
        let config = Config {
            cors: Cors {
                allowed_origins: Some(vec![bad.to_string()]),
                ..Cors::default()
            },
            ..Config::default()
        };
        let err = config.validate().unwrap_err().to_string();
        assert!(err.contains("cors.allowed_origins"), "{err}");
        assert!(err.contains(bad), "{err}");
    }
}
