//! Security review 2, the client-facing edge, each against a live node: what an app server and
//! an upstream learn of a client (its address, host and scheme as the service knows them, no
//! `Asrs-*` header of the client's own, no credential under an encoded key), and development
//! mode's `Host` check against DNS rebinding.

mod common;

use axum::http::HeaderMap;
use common::{header, within, AppServer, TestServer, HANDSHAKE_JSON, WAIT};
use futures_util::SinkExt;
use switchyard_node::config::UpstreamTemplate;
use switchyard_node::Config;
use switchyard_service_protocol::OpenConnection;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A WebSocket client of hub `chat` (negotiated first), with `query` appended to its URL and
/// `headers` on its upgrade request; its handshake sent. `token_in_query`: the token travels
/// as `access%5Ftoken=` in the URL instead of `Authorization`.
async fn connect(
    server: &TestServer,
    token: &str,
    query: &str,
    headers: &[(&str, &str)],
    token_in_query: bool,
) -> Socket {
    let negotiated = switchyard_client::negotiate(&server.client_url("chat"), token, 1)
        .await
        .unwrap();
    let mut url = server.ws_url("chat", Some(&negotiated.id_value));
    if token_in_query {
        url.push_str(&format!("&access%5Ftoken={token}"));
    }
    url.push_str(query);
    let mut request = url.into_client_request().unwrap();
    if !token_in_query {
        request
            .headers_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
    }
    for (name, value) in headers {
        request.headers_mut().append(
            tokio_tungstenite::tungstenite::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            value.parse().unwrap(),
        );
    }
    let (mut ws, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    ws.send(Message::Text(
        String::from_utf8(HANDSHAKE_JSON.to_vec()).unwrap().into(),
    ))
    .await
    .unwrap();
    ws
}

/// The OpenConnection an app server of hub `chat` gets for a client sending `headers`.
async fn open_for(config: Config, headers: &[(&str, &str)]) -> OpenConnection {
    let server = TestServer::start_with(config).await;
    let mut app = AppServer::open(&server, "chat", "app").await;
    let token = server.token("chat", None);
    let _ws = connect(&server, &token, "", headers, false).await;
    let open = app.open_connection().await;
    server.stop().await;
    open
}

fn values(open: &OpenConnection, name: &str) -> Option<String> {
    header(&open.headers, name).map(|v| v.join(" | "))
}

/// Behind a trusted proxy the client's own `X-Forwarded-For` entries used to come first, and
/// the SDK takes the first as the client's address: now only the address the service
/// computed (the nearest one that is not a trusted proxy) reaches the app server. The host is
/// the one the service was asked for; the scheme the proxy's own (last) word.
#[tokio::test]
async fn behind_a_trusted_proxy_the_app_server_gets_the_computed_address_only() {
    let mut config = common::default_mode();
    config.trusted_proxies = vec!["127.0.0.0/8".into()];
    let open = open_for(
        config,
        &[
            ("x-forwarded-for", "6.6.6.6, 203.0.113.9"),
            ("x-forwarded-host", "evil.example"),
            ("x-forwarded-proto", "https, http"),
            ("x-forwarded-port", "1"),
            ("forwarded", "for=6.6.6.6;host=evil.example"),
            ("x-real-ip", "6.6.6.6"),
        ],
    )
    .await;
    assert_eq!(
        values(&open, "X-Forwarded-For").as_deref(),
        Some("203.0.113.9")
    );
    let host = values(&open, "host").unwrap();
    assert!(host.starts_with("127.0.0.1:"), "{host}");
    assert_eq!(values(&open, "X-Forwarded-Host"), Some(host));
    assert_eq!(values(&open, "X-Forwarded-Proto").as_deref(), Some("http"));
    for dropped in ["x-forwarded-port", "forwarded", "x-real-ip"] {
        assert_eq!(values(&open, dropped), None, "{dropped}");
    }
    // Each once: a client's own lines are not kept beside the service's.
    let forwarding = open
        .headers
        .iter()
        .filter(|(name, _)| name.to_ascii_lowercase().starts_with("x-forwarded-"))
        .count();
    assert_eq!(forwarding, 3, "{:?}", open.headers);
}

/// From a peer that is no proxy, `X-Forwarded-*` say nothing either: the scheme is the
/// listener's, not the client's `https`.
#[tokio::test]
async fn from_anyone_else_forwarded_headers_are_the_services_own() {
    let open = open_for(
        common::default_mode(),
        &[
            ("x-forwarded-for", "6.6.6.6"),
            ("x-forwarded-host", "evil.example"),
            ("x-forwarded-proto", "https"),
        ],
    )
    .await;
    assert_eq!(
        values(&open, "X-Forwarded-For").as_deref(),
        Some("127.0.0.1")
    );
    assert_eq!(values(&open, "X-Forwarded-Proto").as_deref(), Some("http"));
    let host = values(&open, "X-Forwarded-Host").unwrap();
    assert!(host.starts_with("127.0.0.1:"), "{host}");
}

/// `Asrs-*` and `X-Asrs-*` headers are the service's to set (the SDK believes
/// `Asrs-Migrate-From` and `Asrs-Is-Diagnostic-Client`), `X-Switchyard-*` the nodes': a
/// client's own used to reach the app server. The service's `Asrs-Instance-Id` is still there, and a token's `asrs.s.dc` claim
/// (signed by the app server's negotiate) still marks a diagnostic client.
#[tokio::test]
async fn a_clients_own_asrs_headers_do_not_reach_the_app_server() {
    let forged = [
        ("asrs-migrate-from", "someone-else"),
        ("Asrs-Is-Diagnostic-Client", "true"),
        ("X-ASRS-Foo", "bar"),
        ("asrs-instance-id", "forged"),
        ("x-switchyard-node-only", "1"),
        ("x-keep", "1"),
    ];
    let open = open_for(common::default_mode(), &forged).await;
    for name in [
        "asrs-migrate-from",
        "asrs-is-diagnostic-client",
        "x-asrs-foo",
        "x-switchyard-node-only",
    ] {
        assert_eq!(values(&open, name), None, "{name}: {:?}", open.headers);
    }
    let instance = values(&open, "Asrs-Instance-Id").unwrap();
    assert_ne!(instance, "forged");
    assert_eq!(values(&open, "x-keep").as_deref(), Some("1"));

    let server = TestServer::start_with(common::default_mode()).await;
    let mut app = AppServer::open(&server, "chat", "app").await;
    let token = server.token_with("chat", &[("asrs.s.dc", "true")]);
    let _ws = connect(&server, &token, "", &[], false).await;
    let open = app.open_connection().await;
    assert_eq!(
        values(&open, "Asrs-Is-Diagnostic-Client").as_deref(),
        Some("true")
    );
    server.stop().await;
}

/// The service reads `access%5Ftoken` as `access_token` and `%69d` as `id`: they used to
/// reach the app server in the query string because redaction compared raw keys.
#[tokio::test]
async fn encoded_secret_keys_do_not_reach_the_app_server() {
    let server = TestServer::start_with(common::default_mode()).await;
    let mut app = AppServer::open(&server, "chat", "app").await;
    let token = server.token("chat", None);
    let query = "&%69d=x&Access%5fToken=secret&acc%65ss+token=y&keep=a%20b&plus=c+d";
    let _ws = connect(&server, &token, query, &[], true).await;
    let open = app.open_connection().await;
    assert_eq!(
        open.query_string.as_deref(),
        Some("?hub=chat&acc%65ss+token=y&keep=a%20b&plus=c+d")
    );
    server.stop().await;
}

/// An upstream webhook that records the headers of every request it gets.
struct Upstream {
    addr: std::net::SocketAddr,
    seen: mpsc::UnboundedReceiver<HeaderMap>,
    task: tokio::task::JoinHandle<()>,
}

impl Upstream {
    async fn start() -> Upstream {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, seen) = mpsc::unbounded_channel();
        let app = axum::Router::new().fallback(move |headers: HeaderMap| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(headers);
                ""
            }
        });
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Upstream { addr, seen, task }
    }
}

/// The same for an upstream webhook's `X-ASRS-Client-Query`.
#[tokio::test]
async fn encoded_secret_keys_do_not_reach_an_upstream() {
    let mut upstream = Upstream::start().await;
    let mut config = Config::default();
    config.upstream.templates = vec![UpstreamTemplate::new(format!(
        "http://{}/api/{{hub}}/{{category}}/{{event}}",
        upstream.addr
    ))];
    let server = TestServer::start_with(config).await;
    let token = server.token("chat", None);
    let _ws = connect(&server, &token, "&%69d=x&keep=1", &[], true).await;
    let seen = within("the connected event", WAIT, upstream.seen.recv())
        .await
        .unwrap();
    assert_eq!(
        seen.get("x-asrs-client-query").map(|v| v.to_str().unwrap()),
        Some("?hub=chat&keep=1")
    );
    server.stop().await;
    upstream.task.abort();
}

/// The status of a request to `path` with `Host: host` and a token for it (a client's for
/// `/client/…`).
async fn status_with_host(server: &TestServer, method: &str, path: &str, host: &str) -> u16 {
    let token = match path.starts_with("/client/") {
        true => server.token("chat", None),
        false => switchyard_auth::TokenBuilder::new(format!("http://{}{path}", server.addr))
            .sign(&server.key(), common::now()),
    };
    let client = reqwest::Client::new();
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let response = client
        .request(method, format!("{}{path}", server.http()))
        .header("host", host)
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body("{\"target\":\"m\",\"arguments\":[]}")
        .send()
        .await
        .unwrap();
    response.status().as_u16()
}

/// The status of a WebSocket upgrade of a client with `Host: host`.
async fn upgrade_status_with_host(server: &TestServer, host: &str) -> u16 {
    let mut request = server.ws_url("chat", None).into_client_request().unwrap();
    let token = server.token("chat", None);
    let headers = request.headers_mut();
    headers.insert("authorization", format!("Bearer {token}").parse().unwrap());
    headers.insert("host", host.parse().unwrap());
    match tokio_tungstenite::connect_async(request).await {
        Ok((_, response)) => response.status().as_u16(),
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => response.status().as_u16(),
        Err(other) => panic!("unexpected error: {other}"),
    }
}

/// In development mode (no key, the Emulator's public one) a page of another site whose name
/// resolves to 127.0.0.1 used to be served: now `Host` must be a loopback name or one this
/// node is configured under, else 421 on every endpoint.
#[tokio::test]
async fn development_mode_answers_only_its_own_host_names() {
    let server = TestServer::start().await;
    let port = server.addr.port();
    let send = "/api/v1/hubs/chat";
    let negotiate = "/client/negotiate?hub=chat&negotiateVersion=1";
    for host in [
        "evil.example".to_string(),
        format!("evil.example:{port}"),
        format!("localhost.evil.example:{port}"),
    ] {
        assert_eq!(status_with_host(&server, "POST", send, &host).await, 421);
        assert_eq!(
            status_with_host(&server, "POST", negotiate, &host).await,
            421
        );
        assert_eq!(
            status_with_host(&server, "GET", "/api/health", &host).await,
            421
        );
        assert_eq!(upgrade_status_with_host(&server, &host).await, 421);
    }
    // The body says why.
    let body = reqwest::Client::new()
        .get(format!("{}/api/health", server.http()))
        .header("host", "evil.example")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(body.contains("development mode"), "{body}");
    for host in [
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        format!("[::1]:{port}"),
    ] {
        assert_eq!(
            status_with_host(&server, "POST", send, &host).await,
            202,
            "{host}"
        );
        assert_eq!(
            status_with_host(&server, "POST", negotiate, &host).await,
            200,
            "{host}"
        );
        assert_eq!(
            upgrade_status_with_host(&server, &host).await,
            101,
            "{host}"
        );
    }
    server.stop().await;

    // The host of the configured endpoint (and of cluster.internal_url) is this node's too.
    let server = TestServer::start_with(Config {
        public_endpoint: Some("http://dev.example:8888".into()),
        ..Config::default()
    })
    .await;
    for (host, expected) in [("dev.example:8888", 200), ("evil.example:8888", 421)] {
        assert_eq!(
            status_with_host(&server, "GET", "/api/health", host).await,
            expected,
            "{host}"
        );
    }
    server.stop().await;

    // With a key, tokens' audiences guard the node: any Host is served.
    let server = TestServer::start_with(Config {
        access_key: Some("a-key-of-our-own-for-this-test-0123456789".into()),
        ..Config::default()
    })
    .await;
    assert_eq!(
        status_with_host(&server, "GET", "/api/health", "evil.example").await,
        200
    );
    server.stop().await;
}
