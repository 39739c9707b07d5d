//! The data-plane REST API end to end: a node on port 0, reqwest for REST, and real WebSocket
//! clients (negotiate + handshake) to observe deliveries, closes and group membership.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use switchyard_auth::{TokenBuilder, EMULATOR_ACCESS_KEY};
use switchyard_node::Config;
use switchyard_testkit::TestServer;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

const RS: char = '\u{1e}';
const WAIT: Duration = Duration::from_secs(5);

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn token(aud: &str) -> String {
    TokenBuilder::new(aud).sign(EMULATOR_ACCESS_KEY, now())
}

/// The testkit's node; the calls below are what these tests make of it.
type Server = TestServer;

/// REST requests to a [`TestServer`] with a valid token for their own URL.
trait RestCalls {
    fn port(&self) -> u16;

    /// An HTTP client for one test's requests (a client per runtime: pooled connections do
    /// not outlive the runtime that opened them).
    fn rest_http(&self) -> reqwest::Client {
        reqwest::Client::new()
    }

    fn url(&self, path_and_query: &str) -> String {
        format!("http://127.0.0.1:{}{}", self.port(), path_and_query)
    }

    /// The audience the REST docs describe: the request URL without query.
    fn aud_for(&self, path_and_query: &str) -> String {
        let path = path_and_query.split('?').next().unwrap();
        self.url(path)
    }

    /// A request with a valid token for its own URL.
    fn request(&self, method: Method, path_and_query: &str) -> reqwest::RequestBuilder {
        self.rest_http()
            .request(method, self.url(path_and_query))
            .bearer_auth(token(&self.aud_for(path_and_query)))
    }

    async fn call(&self, method: Method, path_and_query: &str) -> reqwest::Response {
        self.request(method, path_and_query).send().await.unwrap()
    }

    async fn status(&self, method: Method, path_and_query: &str) -> StatusCode {
        self.call(method, path_and_query).await.status()
    }

    async fn send_json(&self, path_and_query: &str, body: Value) -> reqwest::Response {
        self.request(Method::POST, path_and_query)
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    /// A JSON-protocol WebSocket client of `hub`, handshake done.
    async fn client(&self, hub: &str, user: Option<&str>) -> Client;
}

impl RestCalls for TestServer {
    fn port(&self) -> u16 {
        self.addr.port()
    }

    async fn client(&self, hub: &str, user: Option<&str>) -> Client {
        Client::connect(self, hub, user).await
    }
}

/// A JSON-protocol SignalR client over WebSockets.
struct Client {
    id: String,
    ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    pending: Vec<Value>,
}

impl Client {
    async fn connect(server: &Server, hub: &str, user: Option<&str>) -> Client {
        let aud = format!("http://127.0.0.1:{}/client/?hub={}", server.port(), hub);
        let mut builder = TokenBuilder::new(aud);
        if let Some(user) = user {
            builder = builder.claim("asrs.s.uid", user);
        }
        let token = builder.sign(EMULATOR_ACCESS_KEY, now());
        let negotiate = server
            .rest_http()
            .post(server.url(&format!("/client/negotiate?hub={hub}&negotiateVersion=1")))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        assert_eq!(negotiate.status(), StatusCode::OK, "negotiate failed");
        let negotiate: Value = negotiate.json().await.unwrap();
        let id = negotiate["connectionId"].as_str().unwrap().to_string();
        let connection_token = negotiate["connectionToken"].as_str().unwrap();
        let mut request = format!(
            "ws://127.0.0.1:{}/client/?hub={hub}&id={connection_token}",
            server.port()
        )
        .into_client_request()
        .unwrap();
        request
            .headers_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
        let (mut ws, _) = tokio_tungstenite::connect_async(request).await.unwrap();
        ws.send(WsMessage::text(format!(
            "{{\"protocol\":\"json\",\"version\":1}}{RS}"
        )))
        .await
        .unwrap();
        let mut client = Client {
            id,
            ws,
            pending: Vec::new(),
        };
        let handshake = client.next_record().await;
        assert_eq!(handshake, json!({}), "handshake response");
        client
    }

    /// The next JSON record (handshake response or hub message), pings included.
    async fn next_record(&mut self) -> Value {
        loop {
            if !self.pending.is_empty() {
                return self.pending.remove(0);
            }
            let frame = tokio::time::timeout(WAIT, self.ws.next())
                .await
                .expect("timed out waiting for a frame")
                .expect("socket ended")
                .expect("socket error");
            let text = match frame {
                WsMessage::Text(text) => text.to_string(),
                WsMessage::Binary(bytes) => String::from_utf8(bytes.to_vec()).unwrap(),
                WsMessage::Close(_) => panic!("socket closed"),
                _ => continue,
            };
            for record in text.split(RS).filter(|r| !r.is_empty()) {
                self.pending.push(serde_json::from_str(record).unwrap());
            }
        }
    }

    /// The next hub message other than a ping.
    async fn next_message(&mut self) -> Value {
        loop {
            let message = self.next_record().await;
            if message["type"] != 6 {
                return message;
            }
        }
    }

    /// Reads until the server's WebSocket close (answering it) or the end of the stream.
    async fn drain_until_closed(&mut self) {
        loop {
            match tokio::time::timeout(WAIT, self.ws.next()).await {
                Ok(Some(Ok(WsMessage::Close(_)))) | Ok(None) | Ok(Some(Err(_))) => break,
                Ok(Some(Ok(_))) => {}
                Err(_) => panic!("the server did not close the socket"),
            }
        }
        let _ = self.ws.flush().await;
    }

    async fn expect_invocation(&mut self, target: &str, arguments: Value) {
        let message = self.next_message().await;
        assert_eq!(
            message,
            json!({"type": 1, "target": target, "arguments": arguments})
        );
    }
}

fn msgpack_payloads(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let map = rmpv::Value::Map(
        entries
            .iter()
            .map(|(k, v)| (rmpv::Value::from(*k), rmpv::Value::Binary(v.to_vec())))
            .collect(),
    );
    let mut out = Vec::new();
    rmpv::encode::write_value(&mut out, &map).unwrap();
    out
}

async fn error_body(response: reqwest::Response) -> Value {
    let body: Value = response.json().await.expect("JSON error body");
    assert!(body["code"].is_string(), "{body}");
    assert!(body["message"].is_string(), "{body}");
    body
}

/// Every route of every version, with a path whose resources do not exist.
fn all_routes() -> Vec<(Method, &'static str)> {
    vec![
        (Method::POST, "/api/hubs/chat/:send?api-version=2022-06-01"),
        (
            Method::POST,
            "/api/hubs/chat/:closeConnections?api-version=2022-06-01",
        ),
        (
            Method::POST,
            "/api/hubs/chat/users/u/:send?api-version=2022-06-01",
        ),
        (
            Method::POST,
            "/api/hubs/chat/users/u/:closeConnections?api-version=2022-06-01",
        ),
        (
            Method::HEAD,
            "/api/hubs/chat/users/u?api-version=2022-06-01",
        ),
        (Method::GET, "/api/hubs/chat/users/u?api-version=2022-06-01"),
        (
            Method::DELETE,
            "/api/hubs/chat/users/u/groups?api-version=2022-06-01",
        ),
        (
            Method::PUT,
            "/api/hubs/chat/users/u/groups/g?api-version=2022-06-01",
        ),
        (
            Method::DELETE,
            "/api/hubs/chat/users/u/groups/g?api-version=2022-06-01",
        ),
        (
            Method::HEAD,
            "/api/hubs/chat/users/u/groups/g?api-version=2022-06-01",
        ),
        (
            Method::GET,
            "/api/hubs/chat/users/u/groups/g?api-version=2022-06-01",
        ),
        (
            Method::POST,
            "/api/hubs/chat/connections/c/:send?api-version=2022-06-01",
        ),
        (
            Method::HEAD,
            "/api/hubs/chat/connections/c?api-version=2022-06-01",
        ),
        (
            Method::GET,
            "/api/hubs/chat/connections/c?api-version=2022-06-01",
        ),
        (
            Method::DELETE,
            "/api/hubs/chat/connections/c?api-version=2022-06-01",
        ),
        (
            Method::DELETE,
            "/api/hubs/chat/connections/c/groups?api-version=2022-06-01",
        ),
        (
            Method::HEAD,
            "/api/hubs/chat/groups/g?api-version=2022-06-01",
        ),
        (
            Method::GET,
            "/api/hubs/chat/groups/g?api-version=2022-06-01",
        ),
        (
            Method::POST,
            "/api/hubs/chat/groups/g/:send?api-version=2022-06-01",
        ),
        (
            Method::POST,
            "/api/hubs/chat/groups/g/:closeConnections?api-version=2022-06-01",
        ),
        (
            Method::GET,
            "/api/hubs/chat/groups/g/connections?api-version=2024-12-01",
        ),
        (
            Method::PUT,
            "/api/hubs/chat/groups/g/connections/c?api-version=2022-06-01",
        ),
        (
            Method::DELETE,
            "/api/hubs/chat/groups/g/connections/c?api-version=2022-06-01",
        ),
        (Method::POST, "/api/v1/hubs/chat"),
        (Method::POST, "/api/v1/hubs/chat/users/u"),
        (Method::GET, "/api/v1/hubs/chat/users/u"),
        (Method::HEAD, "/api/v1/hubs/chat/users/u"),
        (Method::DELETE, "/api/v1/hubs/chat/users/u/groups"),
        (Method::POST, "/api/v1/hubs/chat/connections/c"),
        (Method::GET, "/api/v1/hubs/chat/connections/c"),
        (Method::HEAD, "/api/v1/hubs/chat/connections/c"),
        (Method::DELETE, "/api/v1/hubs/chat/connections/c"),
        (Method::POST, "/api/v1/hubs/chat/groups/g"),
        (Method::GET, "/api/v1/hubs/chat/groups/g"),
        (Method::HEAD, "/api/v1/hubs/chat/groups/g"),
        (Method::PUT, "/api/v1/hubs/chat/groups/g/connections/c"),
        (Method::DELETE, "/api/v1/hubs/chat/groups/g/connections/c"),
        (Method::GET, "/api/v1/hubs/chat/groups/g/users/u"),
        (Method::HEAD, "/api/v1/hubs/chat/groups/g/users/u"),
        (Method::PUT, "/api/v1/hubs/chat/groups/g/users/u"),
        (Method::DELETE, "/api/v1/hubs/chat/groups/g/users/u"),
        (Method::POST, "/api/v1-preview/hub/chat"),
        (Method::POST, "/api/v1-preview/hub/chat/user/u"),
        (Method::POST, "/api/v1-preview/hub/chat/users/u1,u2"),
        (Method::POST, "/api/v1-preview/hub/chat/group/g"),
        (Method::POST, "/api/v1-preview/hub/chat/groups/g1,g2"),
    ]
}

#[tokio::test]
async fn health_needs_no_token() {
    let server = Server::start().await;
    for path in [
        "/api/health",
        "/api/health?api-version=2022-06-01",
        "/api/v1/health",
    ] {
        for method in [Method::HEAD, Method::GET] {
            let response = server
                .rest_http()
                .request(method.clone(), server.url(path))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), StatusCode::OK, "{method} {path}");
        }
    }
    let response = server
        .rest_http()
        .post(server.url("/api/health"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test]
async fn openapi_document_is_served() {
    let server = Server::start().await;
    let response = server
        .rest_http()
        .get(server.url("/api/openapi.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let doc: Value = response.json().await.unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    // Every route the server implements is documented.
    let paths = doc["paths"].as_object().unwrap();
    for (method, path) in all_routes() {
        let path = path.split('?').next().unwrap();
        let documented = paths.iter().any(|(template, ops)| {
            template_matches(template, path) && ops.get(method.as_str().to_lowercase()).is_some()
        });
        assert!(documented, "{method} {path} is not in docs/openapi.json");
    }
}

fn template_matches(template: &str, path: &str) -> bool {
    let t: Vec<&str> = template.split('/').collect();
    let p: Vec<&str> = path.split('/').collect();
    t.len() == p.len()
        && t.iter()
            .zip(&p)
            .all(|(t, p)| (t.starts_with('{') && t.ends_with('}')) || t == p)
}

#[tokio::test]
async fn every_route_rejects_missing_token() {
    let server = Server::start().await;
    for (method, path) in all_routes() {
        let response = server
            .rest_http()
            .request(method.clone(), server.url(path))
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.status(),
            StatusCode::UNAUTHORIZED,
            "{method} {path}"
        );
        if method != Method::HEAD {
            let body = error_body(response).await;
            assert!(
                body["message"].as_str().unwrap().contains("Authorization"),
                "{body}"
            );
        }
    }
}

#[tokio::test]
async fn every_route_succeeds_with_its_documented_code() {
    let server = Server::start().await;
    let body = json!({"target": "t", "arguments": []});
    let expected: Vec<(Method, &str, StatusCode)> = all_routes()
        .into_iter()
        .map(|(method, path)| {
            let code = expected_code(&method, path);
            (method, path, code)
        })
        .collect();
    for (method, path, code) in expected {
        let mut request = server.request(method.clone(), path);
        if method == Method::POST && !path.contains(":closeConnections") {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), code, "{method} {path}");
    }
}

/// Success codes per swagger, for resources that do not exist (404s carry error codes).
fn expected_code(method: &Method, path: &str) -> StatusCode {
    let v1 = path.starts_with("/api/v1");
    let p = path.split('?').next().unwrap();
    match *method {
        Method::POST if p.ends_with(":closeConnections") => StatusCode::NO_CONTENT,
        Method::POST => StatusCode::ACCEPTED,
        Method::GET | Method::HEAD if p.ends_with("/connections") => StatusCode::OK,
        Method::GET | Method::HEAD => StatusCode::NOT_FOUND,
        Method::PUT | Method::DELETE if p.contains("/groups/g/connections/c") => {
            StatusCode::NOT_FOUND
        }
        Method::PUT if v1 => StatusCode::ACCEPTED,
        Method::PUT => StatusCode::OK,
        Method::DELETE if p.ends_with("/connections/c") => {
            if v1 {
                StatusCode::ACCEPTED
            } else {
                StatusCode::OK
            }
        }
        Method::DELETE if p.ends_with("/connections/c/groups") => StatusCode::OK,
        Method::DELETE if p.ends_with("/users/u/groups") => {
            if v1 {
                StatusCode::OK
            } else {
                StatusCode::NO_CONTENT
            }
        }
        Method::DELETE if v1 => StatusCode::ACCEPTED,
        Method::DELETE => StatusCode::NO_CONTENT,
        _ => unreachable!("{method} {path}"),
    }
}

#[tokio::test]
async fn bad_tokens_are_rejected() {
    let server = Server::start().await;
    let path = "/api/hubs/chat/:send?api-version=2022-06-01";
    let aud = server.aud_for(path);
    let forged = TokenBuilder::new(&aud).sign("some-other-access-key-0123456789abcdef", now());
    let expired = TokenBuilder::new(&aud)
        .lifetime(Duration::from_secs(60))
        .sign(EMULATOR_ACCESS_KEY, now() - 3600);
    let wrong_path = token(&server.aud_for("/api/hubs/other/:send"));
    let wrong_scheme = token(&format!(
        "https://127.0.0.1:{}/api/hubs/chat/:send",
        server.port()
    ));
    let wrong_host = token("http://example.com/api/hubs/chat/:send");
    let wrong_query = token(&format!("{aud}?api-version=2023-07-01"));
    for (name, token) in [
        ("forged", forged),
        ("expired", expired),
        ("wrong path", wrong_path),
        ("wrong scheme", wrong_scheme),
        ("wrong host", wrong_host),
        ("query not in request", wrong_query),
        ("garbage", "not.a.token".to_string()),
    ] {
        let response = server
            .rest_http()
            .post(server.url(path))
            .bearer_auth(token)
            .json(&json!({"target": "t"}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{name}");
        let body = error_body(response).await;
        assert_eq!(body["code"], "Unauthorized", "{name}");
    }
    // Expiry is reported as such.
    let expired = TokenBuilder::new(&aud)
        .lifetime(Duration::from_secs(60))
        .sign(EMULATOR_ACCESS_KEY, now() - 3600);
    let response = server
        .rest_http()
        .post(server.url(path))
        .bearer_auth(expired)
        .json(&json!({"target": "t"}))
        .send()
        .await
        .unwrap();
    assert!(error_body(response).await["message"]
        .as_str()
        .unwrap()
        .contains("expired"));
    // Header only: a token in the query string is not accepted, nor another scheme.
    let good = token(&aud);
    let response = server
        .rest_http()
        .post(server.url(&format!("{path}&access_token={good}")))
        .json(&json!({"target": "t"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    let response = server
        .rest_http()
        .post(server.url(path))
        .header("authorization", format!("Basic {good}"))
        .json(&json!({"target": "t"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn audience_forms_are_accepted() {
    let server = Server::start().await;
    let path = "/api/hubs/Chat/:send";
    let query = "?application=App&api-version=2022-06-01&excluded=x";
    let port = server.port();
    let audiences = [
        // The REST docs: URL without query.
        format!("http://127.0.0.1:{port}{path}"),
        // The Management SDK: no port, lower-cased hub, api-version and application.
        "http://127.0.0.1/api/hubs/chat/:send?application=app&api-version=2022-06-01".to_string(),
        // Only api-version, with port; localhost for 127.0.0.1; trailing slash.
        format!("http://localhost:{port}/api/hubs/chat/:send/?api-version=2022-06-01"),
    ];
    for aud in audiences {
        let response = server
            .rest_http()
            .post(server.url(&format!("{path}{query}")))
            .bearer_auth(token(&aud))
            .json(&json!({"target": "t"}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::ACCEPTED, "{aud}");
    }
    // An application in the audience must be the request's.
    let aud = "http://127.0.0.1/api/hubs/chat/:send?application=other";
    let response = server
        .rest_http()
        .post(server.url(&format!("{path}{query}")))
        .bearer_auth(token(aud))
        .json(&json!({"target": "t"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn invalid_names_are_bad_requests() {
    let server = Server::start().await;
    let long_user = "u".repeat(1025);
    let cases = [
        (Method::POST, "/api/hubs/1chat/:send".to_string(), "hub"),
        (
            Method::POST,
            format!("/api/hubs/{}/:send", "h".repeat(129)),
            "hub",
        ),
        (
            Method::POST,
            "/api/hubs/chat/:send?application=9app".to_string(),
            "application",
        ),
        (Method::POST, "/api/hubs/ch%2Fat/:send".to_string(), "hub"),
        (
            Method::HEAD,
            "/api/hubs/chat/groups/%20%20".to_string(),
            "group",
        ),
        (
            Method::GET,
            "/api/hubs/chat/groups/%20%20".to_string(),
            "group",
        ),
        (
            Method::POST,
            format!("/api/hubs/chat/users/{long_user}/:send"),
            "user",
        ),
        (
            Method::PUT,
            format!("/api/hubs/chat/groups/{}/connections/c", "g".repeat(1025)),
            "group",
        ),
        (Method::POST, "/api/v1/hubs/chat.%3F".to_string(), "hub"),
        (
            Method::POST,
            "/api/v1-preview/hub/chat/users/a,,b".to_string(),
            "user",
        ),
        (
            Method::POST,
            format!("/api/hubs/chat/:send?excluded={}", "c".repeat(1025)),
            "connection id",
        ),
    ];
    for (method, path, kind) in cases {
        let mut request = server.request(method.clone(), &path);
        if method == Method::POST {
            request = request.json(&json!({"target": "t"}));
        }
        let response = request.send().await.unwrap();
        assert_eq!(
            response.status(),
            StatusCode::BAD_REQUEST,
            "{method} {path}"
        );
        if method != Method::HEAD {
            let body = error_body(response).await;
            assert_eq!(body["code"], "BadRequest");
            let message = body["message"].as_str().unwrap();
            assert!(message.contains(&format!("invalid {kind}")), "{message}");
        }
    }
    // Bad query values.
    for path in [
        "/api/hubs/chat/users/u/groups/g?ttl=-1",
        "/api/hubs/chat/users/u/groups/g?ttl=soon",
        "/api/v1/hubs/chat/groups/g/users/u?ttl=1.5",
    ] {
        assert_eq!(
            server.status(Method::PUT, path).await,
            StatusCode::BAD_REQUEST,
            "{path}"
        );
    }
    for query in ["maxpagesize=0", "maxpagesize=201", "top=0", "top=x"] {
        let path = format!("/api/hubs/chat/groups/g/connections?{query}");
        assert_eq!(
            server.status(Method::GET, &path).await,
            StatusCode::BAD_REQUEST,
            "{path}"
        );
    }
}

#[tokio::test]
async fn unknown_routes_and_methods() {
    let server = Server::start().await;
    for path in [
        "/api/hubs/chat/:nothing",
        "/api/hubs/chat/users",
        "/api/hubs/chat/groups/g/users/u",
        "/api/v2/hubs/chat",
        "/api/hubs",
    ] {
        let response = server.call(Method::POST, path).await;
        assert_eq!(response.status(), StatusCode::NOT_FOUND, "{path}");
        assert!(response.headers().get("x-ms-error-code").is_none());
    }
    let response = server.call(Method::GET, "/api/hubs/chat/:send").await;
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(response.headers()["allow"], "POST");
    let response = server
        .call(Method::PATCH, "/api/v1/hubs/chat/connections/c")
        .await;
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(response.headers()["allow"], "POST, GET, HEAD, DELETE");
    assert_eq!(error_body(response).await["code"], "MethodNotAllowed");
}

#[tokio::test]
async fn malformed_bodies_are_bad_requests() {
    let server = Server::start().await;
    let path = "/api/hubs/chat/:send?api-version=2022-06-01";
    for body in [
        "",
        "not json",
        "[]",
        r#"{"arguments":[]}"#,
        r#"{"target":""}"#,
        r#"{"target":1}"#,
        r#"{"target":"t","arguments":{"a":1}}"#,
        r#"{"target":"t","arguments":"#,
    ] {
        let response = server
            .request(Method::POST, path)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{body:?}");
        assert_eq!(error_body(response).await["code"], "BadRequest");
    }
    for body in [
        vec![0xc1],
        msgpack_payloads(&[("json", &b"{\"type\":1}"[..])]),
        msgpack_payloads(&[]),
        b"{\"target\":\"t\"}".to_vec(),
    ] {
        let response = server
            .request(Method::POST, path)
            .header("content-type", "application/x-msgpack")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        error_body(response).await;
    }
}

#[tokio::test]
async fn bodies_over_the_limit_are_rejected() {
    let mut config = Config::default();
    config.limits.max_request_body_size = 2048;
    let server = Server::start_with(config).await;
    let big = json!({"target": "t", "arguments": ["x".repeat(4096)]});
    let response = server
        .send_json("/api/hubs/chat/:send?api-version=2022-06-01", big)
        .await;
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(error_body(response).await["code"], "PayloadTooLarge");
    // Also when streamed without Content-Length.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        vec![Ok(vec![b' '; 1500]), Ok(vec![b' '; 1500])];
    let response = server
        .request(Method::POST, "/api/v1/hubs/chat")
        .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
            chunks,
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    // Just under the limit is fine.
    let ok = json!({"target": "t", "arguments": ["x".repeat(1900)]});
    let response = server.send_json("/api/v1/hubs/chat", ok).await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
}

#[tokio::test]
async fn missing_resources_carry_error_codes() {
    let server = Server::start().await;
    let cases = [
        (
            "/api/hubs/chat/connections/c?api-version=2022-06-01",
            "Warning.Connection.NotExisted",
        ),
        (
            "/api/hubs/chat/users/u?api-version=2022-06-01",
            "Warning.User.NotExisted",
        ),
        (
            "/api/hubs/chat/groups/g?api-version=2022-06-01",
            "Warning.Group.NotExisted",
        ),
        (
            "/api/hubs/chat/users/u/groups/g?api-version=2022-06-01",
            "Info.User.NotInGroup",
        ),
        (
            "/api/v1/hubs/chat/connections/c",
            "Warning.Connection.NotExisted",
        ),
        ("/api/v1/hubs/chat/users/u", "Warning.User.NotExisted"),
        ("/api/v1/hubs/chat/groups/g", "Warning.Group.NotExisted"),
        ("/api/v1/hubs/chat/groups/g/users/u", "Info.User.NotInGroup"),
    ];
    for (path, code) in cases {
        for method in [Method::HEAD, Method::GET] {
            let response = server.call(method.clone(), path).await;
            assert_eq!(response.status(), StatusCode::NOT_FOUND, "{method} {path}");
            assert_eq!(
                response.headers()["x-ms-error-code"],
                code,
                "{method} {path}"
            );
        }
    }
    for method in [Method::PUT, Method::DELETE] {
        for path in [
            "/api/hubs/chat/groups/g/connections/c?api-version=2022-06-01",
            "/api/v1/hubs/chat/groups/g/connections/c",
        ] {
            let response = server.call(method.clone(), path).await;
            assert_eq!(response.status(), StatusCode::NOT_FOUND, "{method} {path}");
            assert_eq!(
                response.headers()["x-ms-error-code"],
                "Error.Connection.NotExisted"
            );
            assert_eq!(
                error_body(response).await["code"],
                "Error.Connection.NotExisted"
            );
        }
    }
}

#[tokio::test]
async fn sends_reach_websocket_clients() {
    let server = Server::start().await;
    let mut alice = server.client("chat", Some("alice")).await;
    let mut bob = server.client("chat", Some("bob")).await;

    // Broadcast with .NET-style property names.
    let response = server
        .send_json(
            "/api/hubs/Chat/:send?api-version=2022-06-01",
            json!({"Target": "hello", "Arguments": [1, "two", {"three": 3}]}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    for client in [&mut alice, &mut bob] {
        client
            .expect_invocation("hello", json!([1, "two", {"three": 3}]))
            .await;
    }

    // Excluded connections do not get the broadcast; the next message shows they were skipped.
    let excluded = format!(
        "/api/hubs/chat/:send?api-version=2022-06-01&excluded={}&excluded=",
        alice.id
    );
    assert_eq!(
        server
            .send_json(&excluded, json!({"target": "skip"}))
            .await
            .status(),
        StatusCode::ACCEPTED
    );
    bob.expect_invocation("skip", json!([])).await;
    let to_user = "/api/hubs/chat/users/alice/:send?api-version=2022-06-01";
    assert_eq!(
        server
            .send_json(to_user, json!({"target": "user"}))
            .await
            .status(),
        StatusCode::ACCEPTED
    );
    alice.expect_invocation("user", json!([])).await;

    // To one connection.
    let to_connection = format!(
        "/api/hubs/chat/connections/{}/:send?api-version=2022-06-01",
        bob.id
    );
    server
        .send_json(
            &to_connection,
            json!({"target": "conn", "arguments": [true]}),
        )
        .await;
    bob.expect_invocation("conn", json!([true])).await;

    // v1 and v1-preview.
    server
        .send_json("/api/v1/hubs/chat", json!({"Target": "v1"}))
        .await;
    server
        .send_json(
            "/api/v1-preview/hub/chat/users/alice,bob",
            json!({"target": "pv"}),
        )
        .await;
    for client in [&mut alice, &mut bob] {
        client.expect_invocation("v1", json!([])).await;
        client.expect_invocation("pv", json!([])).await;
    }
    let v1_user = "/api/v1/hubs/chat/users/bob";
    server.send_json(v1_user, json!({"target": "v1user"})).await;
    bob.expect_invocation("v1user", json!([])).await;
    let v1_connection = format!("/api/v1/hubs/chat/connections/{}", alice.id);
    server
        .send_json(&v1_connection, json!({"target": "v1conn"}))
        .await;
    alice.expect_invocation("v1conn", json!([])).await;
    assert!(server.node.metrics.rest_request_count() >= 8);
}

#[tokio::test]
async fn msgpack_payload_bodies_are_forwarded() {
    let server = Server::start().await;
    let mut client = server.client("chat", None).await;
    let frame = format!("{{\"type\":1,\"target\":\"raw\",\"arguments\":[42]}}{RS}");
    let body = msgpack_payloads(&[
        ("json", frame.as_bytes()),
        ("messagepack", &[0x02u8, 0x91, 0x06][..]),
    ]);
    for content_type in ["application/x-msgpack", "application/octet-stream"] {
        let response = server
            .request(Method::POST, "/api/hubs/chat/:send?api-version=2022-06-01")
            .header("content-type", content_type)
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::ACCEPTED, "{content_type}");
        client.expect_invocation("raw", json!([42])).await;
    }
}

#[tokio::test]
async fn application_prefixes_the_hub() {
    let server = Server::start().await;
    let mut client = server.client("myapp_chat", None).await;
    let response = server
        .send_json(
            "/api/hubs/Chat/:send?application=MyApp&api-version=2022-06-01",
            json!({"target": "app"}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    client.expect_invocation("app", json!([])).await;
    let exists = format!(
        "/api/hubs/chat/connections/{}?application=myapp&api-version=2022-06-01",
        client.id
    );
    assert_eq!(server.status(Method::HEAD, &exists).await, StatusCode::OK);
    let without_app = format!(
        "/api/hubs/chat/connections/{}?api-version=2022-06-01",
        client.id
    );
    assert_eq!(
        server.status(Method::HEAD, &without_app).await,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn connection_groups_and_existence() {
    let server = Server::start().await;
    let mut a = server.client("chat", Some("ann")).await;
    let mut b = server.client("chat", Some("ben")).await;
    for path in [
        format!("/api/hubs/chat/connections/{}?api-version=2022-06-01", a.id),
        format!("/api/v1/hubs/chat/connections/{}", a.id),
        "/api/hubs/chat/users/ann?api-version=2022-06-01".to_string(),
        "/api/v1/hubs/chat/users/ben".to_string(),
    ] {
        for method in [Method::HEAD, Method::GET] {
            assert_eq!(
                server.status(method.clone(), &path).await,
                StatusCode::OK,
                "{method} {path}"
            );
        }
    }

    // 2022-06-01 add, v1 add; both in group g.
    let add_a = format!(
        "/api/hubs/chat/groups/g/connections/{}?api-version=2022-06-01",
        a.id
    );
    assert_eq!(server.status(Method::PUT, &add_a).await, StatusCode::OK);
    let add_b = format!("/api/v1/hubs/chat/groups/g/connections/{}", b.id);
    assert_eq!(server.status(Method::PUT, &add_b).await, StatusCode::OK);
    for path in [
        "/api/hubs/chat/groups/g?api-version=2022-06-01",
        "/api/v1/hubs/chat/groups/g",
    ] {
        assert_eq!(server.status(Method::HEAD, path).await, StatusCode::OK);
        assert_eq!(server.status(Method::GET, path).await, StatusCode::OK);
    }
    let to_group = "/api/hubs/chat/groups/g/:send?api-version=2022-06-01";
    server.send_json(to_group, json!({"target": "g1"})).await;
    a.expect_invocation("g1", json!([])).await;
    b.expect_invocation("g1", json!([])).await;

    // Group send with exclusion (2022-06-01 and v1).
    let excluded = format!("{to_group}&excluded={}", a.id);
    server.send_json(&excluded, json!({"target": "g2"})).await;
    let excluded_v1 = format!("/api/v1/hubs/chat/groups/g?excluded={}", b.id);
    server
        .send_json(&excluded_v1, json!({"target": "g3"}))
        .await;
    b.expect_invocation("g2", json!([])).await;
    a.expect_invocation("g3", json!([])).await;

    // Remove a from g (2022), b from all groups (2022): the group is gone.
    assert_eq!(server.status(Method::DELETE, &add_a).await, StatusCode::OK);
    let b_all = format!(
        "/api/hubs/chat/connections/{}/groups?api-version=2022-06-01",
        b.id
    );
    assert_eq!(server.status(Method::DELETE, &b_all).await, StatusCode::OK);
    let response = server
        .call(
            Method::HEAD,
            "/api/hubs/chat/groups/g?api-version=2022-06-01",
        )
        .await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    assert_eq!(
        response.headers()["x-ms-error-code"],
        "Warning.Group.NotExisted"
    );

    // v1 remove of a connection that exists.
    assert_eq!(server.status(Method::PUT, &add_b).await, StatusCode::OK);
    assert_eq!(server.status(Method::DELETE, &add_b).await, StatusCode::OK);
    // Nothing was delivered since.
    server
        .send_json("/api/v1/hubs/chat", json!({"target": "end"}))
        .await;
    a.expect_invocation("end", json!([])).await;
    b.expect_invocation("end", json!([])).await;
}

#[tokio::test]
async fn user_groups_with_ttl() {
    let server = Server::start().await;
    let mut client = server.client("chat", Some("uma")).await;
    let put = "/api/hubs/chat/users/uma/groups/team?api-version=2022-06-01&ttl=60";
    assert_eq!(server.status(Method::PUT, put).await, StatusCode::OK);
    let check = "/api/hubs/chat/users/uma/groups/team?api-version=2022-06-01";
    let check_v1 = "/api/v1/hubs/chat/groups/team/users/uma";
    for path in [check, check_v1] {
        // The Management SDK uses GET here; HEAD per swagger.
        assert_eq!(server.status(Method::GET, path).await, StatusCode::OK);
        assert_eq!(server.status(Method::HEAD, path).await, StatusCode::OK);
    }
    server
        .send_json(
            "/api/hubs/chat/groups/team/:send",
            json!({"target": "team"}),
        )
        .await;
    client.expect_invocation("team", json!([])).await;

    assert_eq!(
        server.status(Method::DELETE, check).await,
        StatusCode::NO_CONTENT
    );
    let response = server.call(Method::GET, check).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    assert_eq!(
        response.headers()["x-ms-error-code"],
        "Info.User.NotInGroup"
    );

    // ttl=0: only current connections join.
    let put_zero = "/api/hubs/chat/users/uma/groups/now?ttl=0";
    assert_eq!(server.status(Method::PUT, put_zero).await, StatusCode::OK);
    server
        .send_json("/api/hubs/chat/groups/now/:send", json!({"target": "now"}))
        .await;
    client.expect_invocation("now", json!([])).await;

    // v1: PUT 202, DELETE 202, DELETE all 200; 2022: DELETE all 204.
    assert_eq!(
        server.status(Method::PUT, check_v1).await,
        StatusCode::ACCEPTED
    );
    assert_eq!(server.status(Method::GET, check_v1).await, StatusCode::OK);
    assert_eq!(
        server.status(Method::DELETE, check_v1).await,
        StatusCode::ACCEPTED
    );
    assert_eq!(
        server.status(Method::GET, check_v1).await,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        server
            .status(Method::PUT, &format!("{check_v1}?ttl=600"))
            .await,
        StatusCode::ACCEPTED
    );
    assert_eq!(
        server
            .status(Method::DELETE, "/api/v1/hubs/chat/users/uma/groups")
            .await,
        StatusCode::OK
    );
    assert_eq!(
        server.status(Method::GET, check_v1).await,
        StatusCode::NOT_FOUND
    );
    assert_eq!(server.status(Method::PUT, put).await, StatusCode::OK);
    assert_eq!(
        server
            .status(
                Method::DELETE,
                "/api/hubs/chat/users/uma/groups?api-version=2022-06-01"
            )
            .await,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        server.status(Method::GET, check).await,
        StatusCode::NOT_FOUND
    );
}

/// Waits for the server's Close message to a client and returns it.
async fn expect_close(client: &mut Client) -> Value {
    let message = client.next_message().await;
    assert_eq!(message["type"], 7, "{message}");
    message
}

#[tokio::test]
async fn closing_connections() {
    let server = Server::start().await;

    // One connection, 2022-06-01: 200, reason delivered, reconnect allowed.
    let mut c1 = server.client("chat", None).await;
    let path = format!(
        "/api/hubs/chat/connections/{}?api-version=2022-06-01&reason=bye",
        c1.id
    );
    assert_eq!(server.status(Method::DELETE, &path).await, StatusCode::OK);
    let close = expect_close(&mut c1).await;
    assert_eq!(close["error"], "bye");
    assert_eq!(close["allowReconnect"], true);

    // One connection, v1: 202.
    let mut c2 = server.client("chat", None).await;
    let path = format!("/api/v1/hubs/chat/connections/{}?reason=v1", c2.id);
    assert_eq!(
        server.status(Method::DELETE, &path).await,
        StatusCode::ACCEPTED
    );
    assert_eq!(expect_close(&mut c2).await["error"], "v1");

    // A user's connections minus the excluded one: 204.
    let mut u = server.client("chat", Some("carl")).await;
    let mut kept = server.client("chat", Some("carl")).await;
    let path = format!(
        "/api/hubs/chat/users/carl/:closeConnections?reason=user&excluded={}",
        kept.id
    );
    assert_eq!(
        server.status(Method::POST, &path).await,
        StatusCode::NO_CONTENT
    );
    assert_eq!(expect_close(&mut u).await["error"], "user");
    server
        .send_json("/api/hubs/chat/users/carl/:send", json!({"target": "kept"}))
        .await;
    kept.expect_invocation("kept", json!([])).await;

    // A group's connections, minus the excluded one: 204.
    let mut g1 = server.client("chat", None).await;
    let mut g2 = server.client("chat", None).await;
    for id in [&g1.id, &g2.id] {
        let add = format!("/api/hubs/chat/groups/grp/connections/{id}");
        assert_eq!(server.status(Method::PUT, &add).await, StatusCode::OK);
    }
    let path = format!(
        "/api/hubs/chat/groups/grp/:closeConnections?excluded={}&reason=group",
        g2.id
    );
    assert_eq!(
        server.status(Method::POST, &path).await,
        StatusCode::NO_CONTENT
    );
    assert_eq!(expect_close(&mut g1).await["error"], "group");

    // The whole hub, minus the excluded one: 204. g2 survived the group close.
    let mut h = server.client("chat", None).await;
    let path = format!(
        "/api/hubs/chat/:closeConnections?excluded={}&reason=all",
        g2.id
    );
    assert_eq!(
        server.status(Method::POST, &path).await,
        StatusCode::NO_CONTENT
    );
    assert_eq!(expect_close(&mut h).await["error"], "all");
    server
        .send_json("/api/hubs/chat/:send", json!({"target": "alive"}))
        .await;
    g2.expect_invocation("alive", json!([])).await;

    // Closed connections disappear once the socket has closed.
    h.drain_until_closed().await;
    let gone = format!("/api/hubs/chat/connections/{}", h.id);
    let mut status = StatusCode::OK;
    for _ in 0..50 {
        status = server.status(Method::HEAD, &gone).await;
        if status == StatusCode::NOT_FOUND {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn group_connections_are_listed_in_pages() {
    let server = Server::start().await;
    let mut clients = Vec::new();
    for user in ["u1", "u2", "u3"] {
        let client = server.client("chat", Some(user)).await;
        let add = format!("/api/hubs/chat/groups/g/connections/{}", client.id);
        assert_eq!(server.status(Method::PUT, &add).await, StatusCode::OK);
        clients.push(client);
    }
    let anonymous = server.client("chat", None).await;
    let add = format!("/api/hubs/chat/groups/g/connections/{}", anonymous.id);
    assert_eq!(server.status(Method::PUT, &add).await, StatusCode::OK);
    let mut expected: Vec<(String, Value)> = clients
        .iter()
        .zip(["u1", "u2", "u3"])
        .map(|(c, u)| (c.id.clone(), json!(u)))
        .collect();
    expected.push((anonymous.id.clone(), Value::Null));
    expected.sort_by(|a, b| a.0.cmp(&b.0));

    // Pages of 3 then 1, following nextLink.
    let mut seen = Vec::new();
    let mut link = Some(
        "/api/hubs/chat/groups/g/connections?api-version=2024-12-01&maxpagesize=3".to_string(),
    );
    let mut pages = 0;
    while let Some(path) = link {
        let response = server.call(Method::GET, &path).await;
        assert_eq!(response.status(), StatusCode::OK);
        let page: Value = response.json().await.unwrap();
        for item in page["value"].as_array().unwrap() {
            seen.push((
                item["connectionId"].as_str().unwrap().to_string(),
                item["userId"].clone(),
            ));
        }
        link = page["nextLink"].as_str().map(str::to_string);
        if let Some(next) = &link {
            assert!(
                next.starts_with("/api/hubs/chat/groups/g/connections?"),
                "{next}"
            );
            assert!(next.contains("api-version=2024-12-01"), "{next}");
            assert!(next.contains("continuationToken="), "{next}");
        }
        pages += 1;
    }
    assert_eq!(pages, 2);
    assert_eq!(seen, expected);

    // top limits the total over pages.
    let first: Value = server
        .call(
            Method::GET,
            "/api/hubs/chat/groups/g/connections?maxpagesize=2&top=3",
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(first["value"].as_array().unwrap().len(), 2);
    let next = first["nextLink"].as_str().unwrap().to_string();
    assert!(next.contains("top=1"), "{next}");
    let second: Value = server.call(Method::GET, &next).await.json().await.unwrap();
    assert_eq!(second["value"].as_array().unwrap().len(), 1);
    assert_eq!(second["nextLink"], Value::Null);
    assert_eq!(second["value"][0]["connectionId"], json!(expected[2].0));

    // Exactly one page, and an empty group.
    let all: Value = server
        .call(Method::GET, "/api/hubs/chat/groups/g/connections")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(all["value"].as_array().unwrap().len(), 4);
    assert_eq!(all["nextLink"], Value::Null);
    let empty: Value = server
        .call(Method::GET, "/api/hubs/chat/groups/nobody/connections")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(empty, json!({"value": [], "nextLink": null}));
}

#[tokio::test]
async fn rest_requests_are_counted() {
    let server = Server::start().await;
    let before = server.node.metrics.rest_request_count();
    server
        .rest_http()
        .head(server.url("/api/health"))
        .send()
        .await
        .unwrap();
    server.call(Method::GET, "/api/hubs/chat/nothing").await;
    server
        .send_json("/api/v1/hubs/chat", json!({"target": "t"}))
        .await;
    let after = server.node.metrics.rest_request_count();
    assert_eq!(after - before, 3);
}
