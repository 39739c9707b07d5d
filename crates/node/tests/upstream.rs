//! Upstream webhooks against a real local HTTP server (axum on port 0): events and their
//! headers and signatures on every transport and protocol, invocation results and failures,
//! and that a slow upstream holds up only the client waiting on it.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use bytes::BytesMut;
use common::{eventually, now, within, RawClient, TestServer};
use futures_util::StreamExt;
use serde_json::{json, Value};
use switchyard_auth::{verify_upstream_signature, AccessKeys, TokenBuilder};
use switchyard_backplane::{Backplane, Barrier, NodeId, Receipt, Sink};
use switchyard_client::{decode, negotiate, WsClient};
use switchyard_core::{Channel, Message};
use switchyard_hub_protocol::{
    encode_completion, encode_message, CompletionResult, Format, FrameSplitter, Headers, HubMessage,
};
use switchyard_node::config::{Config, UpstreamTemplate};
use tokio::sync::{mpsc, Semaphore};

const PRIMARY: &str = "primary-key-for-upstream-tests-0123456789";
const SECONDARY: &str = "secondary-key-for-upstream-tests-987654321";
const WAIT: Duration = Duration::from_secs(10);
const HUB: &str = "Chat";
const MAX_RESPONSE: usize = 2048;

// ---- the upstream: records every request, answers by event name ----

/// One request the upstream received.
#[derive(Debug)]
struct Seen {
    path: String,
    headers: HeaderMap,
    body: Bytes,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    fn event(&self) -> &str {
        self.header("x-asrs-event").unwrap_or_default()
    }
}

#[derive(Clone)]
struct UpstreamState {
    seen: mpsc::UnboundedSender<Seen>,
    /// `hold` waits here until the test adds permits.
    gate: Arc<Semaphore>,
}

struct Upstream {
    addr: SocketAddr,
    seen: mpsc::UnboundedReceiver<Seen>,
    /// Received but not yet taken by `expect`.
    pending: Vec<Seen>,
    gate: Arc<Semaphore>,
    task: tokio::task::JoinHandle<()>,
}

impl Upstream {
    async fn start() -> Upstream {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, seen) = mpsc::unbounded_channel();
        let gate = Arc::new(Semaphore::new(0));
        let app = axum::Router::new()
            .fallback(answer)
            .with_state(UpstreamState {
                seen: tx,
                gate: gate.clone(),
            });
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Upstream {
            addr,
            seen,
            pending: Vec::new(),
            gate,
            task,
        }
    }

    /// A template sending everything here, the path naming the hub, category and event.
    fn template(&self, hub_pattern: &str) -> UpstreamTemplate {
        UpstreamTemplate {
            hub_pattern: hub_pattern.into(),
            ..UpstreamTemplate::new(format!(
                "http://{}/api/{{hub}}/{{category}}/{{event}}",
                self.addr
            ))
        }
    }

    /// The next request of `connection` for `event` (others stay for later calls).
    async fn expect(&mut self, connection: &str, event: &str) -> Seen {
        let matches = |seen: &Seen| {
            seen.header("x-asrs-connection-id") == Some(connection) && seen.event() == event
        };
        loop {
            if let Some(at) = self.pending.iter().position(matches) {
                return self.pending.remove(at);
            }
            let seen = within(
                &format!("upstream request {event} of {connection}"),
                WAIT,
                self.seen.recv(),
            )
            .await
            .expect("upstream running");
            self.pending.push(seen);
        }
    }

    fn release(&self) {
        self.gate.add_permits(1000);
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn answer(
    State(state): State<UpstreamState>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let event = headers
        .get("x-asrs-event")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let format = match headers.get("content-type").and_then(|v| v.to_str().ok()) {
        Some("application/x-msgpack") => Format::MessagePack,
        _ => Format::Json,
    };
    let _ = state.seen.send(Seen {
        path: uri.path().to_string(),
        headers,
        body: body.clone(),
    });
    match event.as_str() {
        "connected" | "disconnected" => StatusCode::OK.into_response(),
        "add" => sum(format, &body),
        "hold" => {
            let _permit = state.gate.acquire().await.unwrap();
            sum(format, &body)
        }
        "empty" => StatusCode::OK.into_response(),
        "nocontent" => StatusCode::NO_CONTENT.into_response(),
        "fail" | "notify" => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
        "garbage" => (StatusCode::OK, "nonsense").into_response(),
        "big" => (StatusCode::OK, vec![b'x'; MAX_RESPONSE * 2]).into_response(),
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

/// Answers an invocation with the framed completion of the sum of its arguments, in the
/// protocol it came in, as the Functions SignalR trigger does.
fn sum(format: Format, body: &[u8]) -> Response {
    let HubMessage::Invocation {
        invocation_id: Some(id),
        arguments,
        ..
    } = decode(format, body).unwrap()
    else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let total: i64 = arguments.iter().filter_map(Value::as_i64).sum();
    let frame = encode_completion(format, &id, CompletionResult::Value(json!(total)));
    (StatusCode::OK, frame).into_response()
}

// ---- the service and its clients ----

fn config(templates: Vec<UpstreamTemplate>, timeout: Duration) -> Config {
    let mut config = Config {
        access_key: Some(PRIMARY.into()),
        secondary_access_key: Some(SECONDARY.into()),
        ..Config::default()
    };
    config.upstream.templates = templates;
    config.upstream.timeout = timeout;
    config.upstream.max_response_size = MAX_RESPONSE;
    config.clone().validate().unwrap();
    config
}

fn token(server: &TestServer, hub: &str) -> String {
    TokenBuilder::new(server.client_url(hub))
        .claim("asrs.s.uid", "alice")
        .claim("role", "admin")
        .sign(PRIMARY, now())
}

fn invocation(id: Option<&str>, target: &str, arguments: Vec<Value>) -> HubMessage<Value> {
    HubMessage::Invocation {
        headers: Headers::new(),
        invocation_id: id.map(str::to_string),
        target: target.into(),
        arguments,
        stream_ids: None,
    }
}

/// The message body without its framing, as the upstream must receive it.
fn unframed(format: Format, message: &HubMessage<Value>) -> Bytes {
    let mut framed = BytesMut::from(&encode_message(format, message)[..]);
    let frame = FrameSplitter::new(format, 1 << 20)
        .next_frame(&mut framed)
        .unwrap()
        .unwrap();
    frame.body_bytes()
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    WebSockets,
    LongPolling,
    ServerSentEvents,
}

/// A client on any transport, reading hub messages.
struct Client {
    kind: Kind,
    format: Format,
    connection_id: String,
    ws: Option<WsClient>,
    http: reqwest::Client,
    url: String,
    token: String,
    events: Option<futures_util::stream::BoxStream<'static, reqwest::Result<Bytes>>>,
    buffer: BytesMut,
}

impl Client {
    /// Negotiates, connects with `extra=1` in the query and completes the handshake.
    async fn connect(server: &TestServer, hub: &str, kind: Kind, format: Format) -> Client {
        let token = token(server, hub);
        let base = format!("{}&extra=1", server.client_url(hub));
        let negotiated = negotiate(&base, &token, 1).await.unwrap();
        let mut client = Client {
            kind,
            format,
            connection_id: negotiated.connection_id.clone(),
            ws: None,
            http: reqwest::Client::new(),
            url: format!("{base}&id={}", negotiated.id_value),
            token: token.clone(),
            events: None,
            buffer: BytesMut::new(),
        };
        let handshake = format!("{{\"protocol\":\"{}\",\"version\":1}}\x1e", format.name());
        match kind {
            Kind::WebSockets => {
                // The token also in the query: it must not reach the upstream.
                let url = format!(
                    "{}&extra=1&access_token={token}",
                    server.ws_url(hub, Some(&negotiated.id_value))
                );
                client.ws = Some(WsClient::connect(&url, Some(&token), format).await.unwrap());
                return client;
            }
            Kind::LongPolling => {
                assert_eq!(client.get(false).await.status(), 200);
                client.post(handshake.as_bytes()).await;
            }
            Kind::ServerSentEvents => {
                let response = client.get(true).await;
                assert_eq!(response.status(), 200);
                client.events = Some(response.bytes_stream().boxed());
                client.post(handshake.as_bytes()).await;
            }
        }
        let mut response = Vec::new();
        while !response.ends_with(b"\x1e") {
            response.extend_from_slice(&client.read().await);
        }
        assert_eq!(&response[..], b"{}\x1e");
        client
    }

    async fn get(&self, event_stream: bool) -> reqwest::Response {
        let mut request = self.http.get(&self.url).bearer_auth(&self.token);
        if event_stream {
            request = request.header("accept", "text/event-stream");
        }
        request.send().await.unwrap()
    }

    async fn post(&self, body: &[u8]) {
        let response = self
            .http
            .post(&self.url)
            .bearer_auth(&self.token)
            .body(body.to_vec())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
    }

    /// More bytes from the service (HTTP transports).
    async fn read(&mut self) -> Vec<u8> {
        match self.kind {
            Kind::LongPolling => {
                let response = within("poll", WAIT, self.get(false)).await;
                assert_eq!(response.status(), 200);
                response.bytes().await.unwrap().to_vec()
            }
            Kind::ServerSentEvents => {
                let chunk = within("event", WAIT, self.events.as_mut().unwrap().next())
                    .await
                    .unwrap()
                    .unwrap();
                // `data: …` lines carry the payload; JSON frames hold no line breaks.
                let mut out = Vec::new();
                for line in chunk.split(|b| *b == b'\n') {
                    let line = line.strip_suffix(b"\r").unwrap_or(line);
                    if let Some(data) = line.strip_prefix(b"data: ") {
                        out.extend_from_slice(data);
                    }
                }
                out
            }
            Kind::WebSockets => unreachable!(),
        }
    }

    async fn send(&mut self, message: &HubMessage<Value>) {
        match &mut self.ws {
            Some(ws) => ws.send(message).await.unwrap(),
            None => self.post(&encode_message(self.format, message)).await,
        }
    }

    async fn send_raw(&mut self, bytes: &[u8]) {
        match &mut self.ws {
            Some(ws) => ws.send_raw(bytes).await.unwrap(),
            None => self.post(bytes).await,
        }
    }

    /// The next message that is not a Ping.
    async fn next(&mut self) -> HubMessage<Value> {
        if let Some(ws) = &mut self.ws {
            return within("message", WAIT, ws.next_non_ping()).await.unwrap();
        }
        let splitter = FrameSplitter::new(self.format, 1 << 20);
        loop {
            if let Some(frame) = splitter.next_frame(&mut self.buffer).unwrap() {
                let message = decode(self.format, frame.body()).unwrap();
                if message != HubMessage::Ping {
                    return message;
                }
                continue;
            }
            let more = self.read().await;
            self.buffer.extend_from_slice(&more);
        }
    }

    /// The completion of `id`, as (result value, error).
    async fn completion(&mut self, id: &str) -> CompletionResult<Value> {
        match self.next().await {
            HubMessage::Completion {
                invocation_id,
                result,
                ..
            } => {
                assert_eq!(invocation_id, id);
                result
            }
            other => panic!("expected the completion of {id}, got {other:?}"),
        }
    }

    async fn close(mut self) {
        match self.kind {
            Kind::WebSockets => self.ws.take().unwrap().close().await,
            Kind::LongPolling => {
                let response = self
                    .http
                    .delete(&self.url)
                    .bearer_auth(&self.token)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(response.status(), 202);
            }
            Kind::ServerSentEvents => drop(self.events.take()),
        }
    }
}

/// Every header of an event, and both signature entries each verifying with its own key.
fn check_headers(seen: &Seen, connection: &str, category: &str, event: &str) {
    assert_eq!(seen.header("x-asrs-connection-id"), Some(connection));
    assert_eq!(seen.header("x-asrs-hub"), Some(HUB));
    assert_eq!(seen.header("x-asrs-category"), Some(category));
    assert_eq!(seen.header("x-asrs-event"), Some(event));
    assert_eq!(seen.header("x-asrs-user-id"), Some("alice"));
    let claims = seen.header("x-asrs-user-claims").unwrap();
    assert!(claims.contains("asrs.s.uid: alice, "), "{claims}");
    assert!(claims.contains(", role: admin"), "{claims}");
    assert_eq!(
        seen.header("x-asrs-client-query"),
        Some("?hub=Chat&extra=1")
    );
    assert_eq!(seen.path, format!("/api/{HUB}/{category}/{event}"));
    let signature = seen.header("x-asrs-signature").unwrap();
    let entries: Vec<&str> = signature.split(',').collect();
    assert_eq!(entries.len(), 2, "{signature}");
    let primary = AccessKeys::new(PRIMARY.into(), None);
    let secondary = AccessKeys::new(SECONDARY.into(), None);
    assert!(verify_upstream_signature(entries[0], &primary, connection));
    assert!(verify_upstream_signature(
        entries[1], &secondary, connection
    ));
    assert!(!verify_upstream_signature(
        entries[0], &secondary, connection
    ));
    assert!(!verify_upstream_signature(
        signature,
        &primary,
        "another-connection"
    ));
}

fn content_type(format: Format) -> &'static str {
    match format {
        Format::Json => "application/json",
        Format::MessagePack => "application/x-msgpack",
    }
}

// ---- tests ----

/// connected, an invocation and its result, disconnected: on one transport and protocol.
async fn round_trip(server: &TestServer, upstream: &mut Upstream, kind: Kind, format: Format) {
    let mut client = Client::connect(server, HUB, kind, format).await;
    let id = client.connection_id.clone();
    let connected = upstream.expect(&id, "connected").await;
    check_headers(&connected, &id, "connections", "connected");
    assert_eq!(connected.header("content-type"), Some("application/json"));
    assert_eq!(&connected.body[..], b"{\"type\":10}");

    let add = invocation(Some("1"), "add", vec![json!(1), json!(2)]);
    client.send(&add).await;
    let seen = upstream.expect(&id, "add").await;
    check_headers(&seen, &id, "messages", "add");
    assert_eq!(seen.header("content-type"), Some(content_type(format)));
    assert_eq!(seen.body, unframed(format, &add));
    assert_eq!(
        client.completion("1").await,
        CompletionResult::Value(json!(3)),
        "{kind:?}/{format:?}"
    );

    client.close().await;
    let disconnected = upstream.expect(&id, "disconnected").await;
    check_headers(&disconnected, &id, "connections", "disconnected");
    assert_eq!(&disconnected.body[..], b"{\"type\":11}");
}

#[tokio::test]
async fn events_headers_and_results_on_every_transport_and_protocol() {
    let mut upstream = Upstream::start().await;
    let server = TestServer::start_with(config(vec![upstream.template("*")], WAIT)).await;
    for (kind, format) in [
        (Kind::WebSockets, Format::Json),
        (Kind::WebSockets, Format::MessagePack),
        (Kind::LongPolling, Format::Json),
        (Kind::LongPolling, Format::MessagePack),
        (Kind::ServerSentEvents, Format::Json),
    ] {
        round_trip(&server, &mut upstream, kind, format).await;
    }
    let metrics = server.node.metrics.encode();
    assert!(
        metrics
            .contains("switchyard_upstream_requests_total{category=\"messages\",outcome=\"ok\"} 5"),
        "{metrics}"
    );
}

#[tokio::test]
async fn an_abnormal_end_is_reported_with_its_error() {
    let mut upstream = Upstream::start().await;
    let server = TestServer::start_with(config(vec![upstream.template("*")], WAIT)).await;
    let mut client = Client::connect(&server, HUB, Kind::WebSockets, Format::Json).await;
    let id = client.connection_id.clone();
    upstream.expect(&id, "connected").await;
    // An invocation without a target breaks the protocol.
    client.send_raw(b"{\"type\":1,\"arguments\":[]}\x1e").await;
    let disconnected = upstream.expect(&id, "disconnected").await;
    let body: Value = serde_json::from_slice(&disconnected.body).unwrap();
    assert_eq!(body["type"], 11);
    assert!(
        body["error"].as_str().unwrap().contains("protocol error"),
        "{body}"
    );
}

#[tokio::test]
async fn upstream_answers_become_completions() {
    let mut upstream = Upstream::start().await;
    let server = TestServer::start_with(config(vec![upstream.template("*")], WAIT)).await;
    for format in [Format::Json, Format::MessagePack] {
        let mut client = Client::connect(&server, HUB, Kind::WebSockets, format).await;
        let id = client.connection_id.clone();
        let cases: [(&str, &str); 6] = [
            ("empty", ""),
            ("nocontent", ""),
            ("fail", "Invocation failed, status code 500"),
            ("garbage", "not one framed completion"),
            ("big", "larger than 2048 bytes"),
            ("unknown", "Invocation failed, status code 404"),
        ];
        for (n, (event, error)) in cases.iter().enumerate() {
            let call = (n + 1).to_string();
            client
                .send(&invocation(Some(&call), event, vec![json!(1)]))
                .await;
            let result = client.completion(&call).await;
            match result {
                CompletionResult::Void => assert!(error.is_empty(), "{event}: void"),
                CompletionResult::Error(text) => {
                    assert!(!error.is_empty() && text.contains(error), "{event}: {text}")
                }
                other => panic!("{event}: {other:?}"),
            }
            upstream.expect(&id, event).await;
        }
        // A non-blocking invocation reaches the upstream; its (failed) answer is ignored:
        // the next thing the client hears is the answer to its next call.
        client
            .send(&invocation(None, "notify", vec![json!("fire")]))
            .await;
        let seen = upstream.expect(&id, "notify").await;
        assert_eq!(
            seen.body,
            unframed(format, &invocation(None, "notify", vec![json!("fire")]))
        );
        client
            .send(&invocation(Some("next"), "add", vec![json!(2), json!(2)]))
            .await;
        assert_eq!(
            client.completion("next").await,
            CompletionResult::Value(json!(4))
        );
        // Streaming is refused with an error completion; the client stays.
        client
            .send(&HubMessage::StreamInvocation {
                headers: Headers::new(),
                invocation_id: "s".into(),
                target: "add".into(),
                arguments: vec![],
                stream_ids: None,
            })
            .await;
        match client.completion("s").await {
            CompletionResult::Error(text) => {
                assert!(text.contains("streaming is not supported"), "{text}")
            }
            other => panic!("{other:?}"),
        }
        client
            .send(&invocation(Some("after"), "add", vec![json!(5)]))
            .await;
        assert_eq!(
            client.completion("after").await,
            CompletionResult::Value(json!(5))
        );
        client.close().await;
    }
    let metrics = server.node.metrics.encode();
    for outcome in ["error_status", "invalid_response", "too_large"] {
        assert!(
            metrics.contains(&format!(
                "switchyard_upstream_requests_total{{category=\"messages\",outcome=\"{outcome}\"}}"
            )),
            "{outcome}: {metrics}"
        );
    }
}

#[tokio::test]
async fn a_slow_upstream_holds_up_only_its_own_client_in_order() {
    let mut upstream = Upstream::start().await;
    let server = TestServer::start_with(config(vec![upstream.template("*")], WAIT)).await;
    let mut slow = Client::connect(&server, HUB, Kind::WebSockets, Format::Json).await;
    let mut fast = Client::connect(&server, HUB, Kind::WebSockets, Format::MessagePack).await;
    let slow_id = slow.connection_id.clone();
    upstream.expect(&slow_id, "connected").await;
    // The upstream holds the first call until released; the second is queued behind it.
    slow.send(&invocation(Some("1"), "hold", vec![json!(1)]))
        .await;
    slow.send(&invocation(Some("2"), "add", vec![json!(2)]))
        .await;
    upstream.expect(&slow_id, "hold").await;
    // Meanwhile another client on the same upstream is answered.
    for n in 0..3 {
        let call = format!("f{n}");
        fast.send(&invocation(Some(&call), "add", vec![json!(n), json!(1)]))
            .await;
        assert_eq!(
            fast.completion(&call).await,
            CompletionResult::Value(json!(n + 1))
        );
    }
    upstream.release();
    // One connection's calls are sent one at a time: "2" cannot overtake "1".
    assert_eq!(
        slow.completion("1").await,
        CompletionResult::Value(json!(1))
    );
    assert_eq!(
        slow.completion("2").await,
        CompletionResult::Value(json!(2))
    );
}

/// A client that invokes faster than its upstream answers is held back (its transport stops
/// reading) instead of having invocations dropped: with room for only a handful in its
/// queue, all 200 fire-and-forget calls reach the upstream, in order, and none is counted
/// rejected; another client is served meanwhile.
#[tokio::test]
async fn a_client_faster_than_its_upstream_is_held_back_not_dropped() {
    let mut upstream = Upstream::start().await;
    let mut config = config(vec![upstream.template("*")], WAIT);
    config.limits.max_pending_bytes_per_connection = 8 * 1024;
    let server = TestServer::start_with(config).await;
    let mut eager = Client::connect(&server, HUB, Kind::WebSockets, Format::Json).await;
    let mut other = Client::connect(&server, HUB, Kind::WebSockets, Format::MessagePack).await;
    let eager_id = eager.connection_id.clone();
    upstream.expect(&eager_id, "connected").await;
    const CALLS: i64 = 200;
    let padding = "p".repeat(300);
    for n in 0..CALLS {
        eager
            .send(&invocation(None, "hold", vec![json!(n), json!(padding)]))
            .await;
    }
    // The upstream holds every call until released: the eager client's queue fills and its
    // socket is no longer read, while the other client's calls are answered.
    upstream.expect(&eager_id, "hold").await;
    other
        .send(&invocation(Some("o"), "add", vec![json!(2), json!(3)]))
        .await;
    assert_eq!(
        other.completion("o").await,
        CompletionResult::Value(json!(5))
    );
    upstream.release();
    for n in 1..CALLS {
        let seen = upstream.expect(&eager_id, "hold").await;
        let HubMessage::Invocation { arguments, .. } = decode(Format::Json, &seen.body).unwrap()
        else {
            panic!("an invocation");
        };
        assert_eq!(arguments[0], json!(n), "in order, none missing");
    }
    let metrics = server.metrics_text().await;
    assert!(
        !metrics.contains("outcome=\"rejected\""),
        "nothing was refused:\n{metrics}"
    );
}

#[tokio::test]
async fn timeouts_and_unreachable_upstreams_answer_with_errors() {
    let upstream = Upstream::start().await;
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let dead = UpstreamTemplate {
        hub_pattern: "dead".into(),
        ..UpstreamTemplate::new(format!("http://{closed}/api/{{hub}}"))
    };
    let server = TestServer::start_with(config(
        vec![dead, upstream.template("*")],
        Duration::from_millis(300),
    ))
    .await;
    let mut waiting = Client::connect(&server, HUB, Kind::WebSockets, Format::Json).await;
    let mut cut_off = Client::connect(&server, "dead", Kind::LongPolling, Format::Json).await;
    let mut bystander = Client::connect(&server, HUB, Kind::WebSockets, Format::Json).await;

    waiting
        .send(&invocation(Some("1"), "hold", vec![json!(1)]))
        .await;
    match waiting.completion("1").await {
        CompletionResult::Error(text) => {
            assert!(text.contains("did not answer within 300ms"), "{text}")
        }
        other => panic!("{other:?}"),
    }
    // Its `connected` failed too, but the client stays connected.
    cut_off
        .send(&invocation(Some("1"), "add", vec![json!(1)]))
        .await;
    match cut_off.completion("1").await {
        CompletionResult::Error(text) => assert!(text.contains("could not be reached"), "{text}"),
        other => panic!("{other:?}"),
    }
    bystander
        .send(&invocation(Some("b"), "add", vec![json!(7)]))
        .await;
    assert_eq!(
        bystander.completion("b").await,
        CompletionResult::Value(json!(7))
    );
    let metrics = server.node.metrics.encode();
    assert!(
        metrics.contains("outcome=\"timeout\"") && metrics.contains("outcome=\"unreachable\""),
        "{metrics}"
    );
    upstream.release();
}

#[tokio::test]
async fn without_a_template_for_it_an_invoking_client_is_closed() {
    let mut upstream = Upstream::start().await;
    let connections_only = UpstreamTemplate {
        category_pattern: "connections".into(),
        ..upstream.template(HUB)
    };
    let server = TestServer::start_with(config(vec![connections_only], WAIT)).await;
    // A hub with only connection events: they are sent, an invocation closes the client.
    let mut client = Client::connect(&server, HUB, Kind::WebSockets, Format::Json).await;
    let id = client.connection_id.clone();
    upstream.expect(&id, "connected").await;
    client
        .send(&invocation(Some("1"), "add", vec![json!(1)]))
        .await;
    match client.next().await {
        HubMessage::Close { error, .. } => {
            assert!(error.unwrap().contains("without an upstream"))
        }
        other => panic!("{other:?}"),
    }
    let disconnected = upstream.expect(&id, "disconnected").await;
    assert!(String::from_utf8_lossy(&disconnected.body).contains("without an upstream"));
    // A hub no template names: as before, and nothing reaches the upstream.
    let mut other = Client::connect(&server, "other", Kind::LongPolling, Format::Json).await;
    other.send(&invocation(None, "add", vec![])).await;
    assert!(matches!(other.next().await, HubMessage::Close { .. }));
    assert_eq!(other.get(false).await.status(), 204);
    eventually("the clients are gone", WAIT, || {
        server.node.client_connection_count() == 0
    })
    .await;
    assert!(upstream.seen.try_recv().is_err(), "{:?}", upstream.pending);
}

/// The in-memory backplane, with subscriptions that take effect only once the test says so,
/// as a slow Redis's would: [`Backplane::barrier`] waits for the word.
struct SlowSubscriptions {
    inner: switchyard_backplane::MemoryBackplane,
    live: tokio::sync::watch::Receiver<bool>,
}

impl Backplane for SlowSubscriptions {
    fn attach(&self, node: &NodeId, sink: Arc<dyn Sink>) {
        self.inner.attach(node, sink)
    }
    fn detach(&self, node: &NodeId) {
        self.inner.detach(node)
    }
    fn subscribe(&self, node: &NodeId, channel: &Channel) {
        self.inner.subscribe(node, channel)
    }
    fn unsubscribe(&self, node: &NodeId, channel: &Channel) {
        self.inner.unsubscribe(node, channel)
    }
    fn publish(&self, channels: &[Channel], message: Arc<Message>) {
        self.inner.publish(channels, message)
    }
    fn ask(&self, channel: &Channel, message: Arc<Message>) -> Receipt {
        self.inner.ask(channel, message)
    }
    fn barrier(&self, _node: &NodeId) -> Barrier {
        let mut live = self.live.clone();
        Box::pin(async move {
            let _ = live.wait_for(|live| *live).await;
        })
    }
}

#[tokio::test]
async fn connected_waits_until_the_connections_subscriptions_are_live() {
    let mut upstream = Upstream::start().await;
    let (go_live, live) = tokio::sync::watch::channel(false);
    let backplane = Arc::new(SlowSubscriptions {
        inner: switchyard_backplane::MemoryBackplane::new(),
        live,
    });
    let mut config = config(vec![upstream.template("*")], WAIT);
    // Longer than the test waits below: the bound must not be what lets `connected` go.
    config.cluster.ask_timeout = Duration::from_secs(30);
    let server = TestServer::start_on(config, backplane, "n1").await;
    let (mut client, id) = RawClient::start(&server, HUB, &token(&server, HUB), Format::Json).await;

    // The handshake is in, but a send answering `connected` could not reach the client yet:
    // neither the upstream nor the client hears anything.
    let early = tokio::time::timeout(Duration::from_millis(500), upstream.seen.recv()).await;
    assert!(early.is_err(), "connected went out early: {early:?}");

    go_live.send(true).unwrap();
    upstream.expect(&id, "connected").await;
    client.handshake_result().await.unwrap();
    server.stop().await;
}
