//! Test harness: a real node on port 0, tokens, and small waiting helpers.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use switchyard_auth::{TokenBuilder, EMULATOR_ACCESS_KEY};
use switchyard_core::HubName;
use switchyard_node::{Config, Node};
use tokio::sync::oneshot;

pub struct TestServer {
    pub addr: SocketAddr,
    pub node: Arc<Node>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl TestServer {
    pub async fn start() -> TestServer {
        Self::start_with(Config::default()).await
    }

    pub async fn start_with(config: Config) -> TestServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let node = Node::new(config.validate().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn({
            let node = node.clone();
            async move {
                switchyard_node::serve(listener, node, async {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
            }
        });
        TestServer {
            addr,
            node,
            stop: Some(stop),
            task: Some(task),
        }
    }

    pub fn http(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `http://127.0.0.1:PORT/client/?hub=HUB`
    pub fn client_url(&self, hub: &str) -> String {
        format!("http://{}/client/?hub={hub}", self.addr)
    }

    pub fn ws_url(&self, hub: &str, id: Option<&str>) -> String {
        match id {
            Some(id) => format!("ws://{}/client/?hub={hub}&id={id}", self.addr),
            None => format!("ws://{}/client/?hub={hub}", self.addr),
        }
    }

    /// The key tokens are signed with: the configured access key, else the Emulator's.
    pub fn key(&self) -> String {
        self.node
            .config()
            .access_key
            .clone()
            .unwrap_or_else(|| EMULATOR_ACCESS_KEY.to_string())
    }

    /// `ws://127.0.0.1:PORT/server/?hub=HUB` (the app-server endpoint).
    pub fn server_ws_url(&self, hub: &str) -> String {
        format!("ws://{}/server/?hub={hub}", self.addr)
    }

    /// The audience the server SDK puts in its tokens: `http://{host}/server/?hub={hub}`,
    /// without the port.
    pub fn server_audience(&self, hub: &str) -> String {
        format!("http://{}/server/?hub={hub}", self.addr.ip())
    }

    /// An app-server token as the SDK issues it: `nameid` = the server id.
    pub fn server_token(&self, hub: &str, server_id: &str) -> String {
        TokenBuilder::new(self.server_audience(hub))
            .claim("nameid", server_id)
            .sign(&self.key(), now())
    }

    pub fn token(&self, hub: &str, user: Option<&str>) -> String {
        let mut builder = TokenBuilder::new(self.client_url(hub));
        if let Some(user) = user {
            builder = builder.claim("asrs.s.uid", user);
        }
        builder.sign(EMULATOR_ACCESS_KEY, now())
    }

    pub fn token_with(&self, hub: &str, claims: &[(&str, &str)]) -> String {
        let mut builder = TokenBuilder::new(self.client_url(hub));
        for (k, v) in claims {
            builder = builder.claim(*k, *v);
        }
        builder.sign(EMULATOR_ACCESS_KEY, now())
    }

    /// Sends `target(arguments)` to everyone in the hub through the node's executor.
    pub fn broadcast(&self, hub: &str, target: &str, arguments: &[serde_json::Value]) {
        let hub = HubName::new(hub, None).unwrap();
        let executor = self.node.executor();
        let payloads = executor.encode_invocation(&hub, target, arguments);
        executor.send(
            &hub,
            switchyard_core::Target::All { excluded: vec![] },
            payloads,
        );
    }

    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

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

/// A JSON hub-protocol handshake request.
pub const HANDSHAKE_JSON: &[u8] = b"{\"protocol\":\"json\",\"version\":1}\x1e";

/// Long-polling and SSE requests of one hub's client endpoint, as one user.
pub struct Http {
    pub client: reqwest::Client,
    pub base: String,
    pub token: String,
}

impl Http {
    pub fn new(server: &TestServer, hub: &str) -> Http {
        Http::for_user(server, hub, "u1")
    }

    pub fn for_user(server: &TestServer, hub: &str, user: &str) -> Http {
        Http {
            client: reqwest::Client::new(),
            base: server.client_url(hub),
            token: server.token(hub, Some(user)),
        }
    }

    pub async fn negotiate(&self) -> String {
        switchyard_client::negotiate(&self.base, &self.token, 1)
            .await
            .unwrap()
            .id_value
    }

    /// Negotiates, starts long polling, completes a JSON handshake and reads its response.
    pub async fn open_long_polling(&self) -> String {
        let id = self.negotiate().await;
        assert_eq!(self.poll(&id).await.status(), 200);
        assert_eq!(self.post(&id, HANDSHAKE_JSON).await.status(), 200);
        assert_eq!(&self.poll(&id).await.bytes().await.unwrap()[..], b"{}\x1e");
        id
    }

    /// Starts a poll and goes away while it is pending, as a client that aborts it does.
    pub async fn abandon_poll(&self, id: &str) {
        let pending = tokio::spawn({
            let client = self.client.clone();
            let url = self.url(id);
            let token = self.token.clone();
            async move { client.get(url).bearer_auth(token).send().await }
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        pending.abort();
    }

    /// `GET {base}?id=` asking for an event stream.
    pub async fn open_sse(&self, id: &str) -> reqwest::Response {
        self.client
            .get(self.url(id))
            .bearer_auth(&self.token)
            .header("accept", "text/event-stream")
            .send()
            .await
            .unwrap()
    }

    pub fn url(&self, id: &str) -> String {
        format!("{}&id={id}", self.base)
    }

    pub async fn poll(&self, id: &str) -> reqwest::Response {
        self.client
            .get(self.url(id))
            .bearer_auth(&self.token)
            .send()
            .await
            .unwrap()
    }

    pub async fn post(&self, id: &str, body: &[u8]) -> reqwest::Response {
        self.client
            .post(self.url(id))
            .bearer_auth(&self.token)
            .body(body.to_vec())
            .send()
            .await
            .unwrap()
    }

    pub async fn delete(&self, id: &str) -> reqwest::Response {
        self.client
            .delete(self.url(id))
            .bearer_auth(&self.token)
            .send()
            .await
            .unwrap()
    }
}
