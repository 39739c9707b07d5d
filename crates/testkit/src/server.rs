//! [`TestServer`]: a real node on port 0 in the test's runtime, with the URLs and tokens
//! its endpoints take, and the SDK app server (`switchyard_client::app_server`) connected to
//! it that Default-mode tests need.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use switchyard_auth::{TokenBuilder, EMULATOR_ACCESS_KEY};
use switchyard_backplane::Backplane;
use switchyard_client::app_server::{AppServer, AppServerConfig, HubMethods};
use switchyard_core::HubName;
use switchyard_node::{Config, Node};
use tokio::sync::oneshot;

use crate::{now, within, WAIT};

pub struct TestServer {
    pub addr: SocketAddr,
    pub node: Arc<Node>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

impl TestServer {
    pub async fn start() -> TestServer {
        Self::start_with(Config::default()).await
    }

    pub async fn start_with(config: Config) -> TestServer {
        Self::serve(Node::new(config.validate().unwrap())).await
    }

    /// A node of a cluster: its own backplane handle and name.
    pub async fn start_on(config: Config, backplane: Arc<dyn Backplane>, name: &str) -> TestServer {
        Self::serve(Node::with_backplane(
            config.validate().unwrap(),
            backplane,
            name.to_string(),
        ))
        .await
    }

    /// A node with `config` and an SDK app server running `methods` for `hubs` (one
    /// connection per hub, server id `test-app-server`), connected before this returns.
    pub async fn with_app_server(
        config: Config,
        hubs: &[&str],
        methods: Arc<dyn HubMethods>,
    ) -> (TestServer, AppServer) {
        let server = TestServer::start_with(config).await;
        let app = server
            .start_app_server(server.app_server_config(hubs), methods)
            .await;
        (server, app)
    }

    /// The SDK app server's settings for this node: its connection string, `hubs`, one
    /// connection per hub, server id `test-app-server`; change what a test needs.
    pub fn app_server_config(&self, hubs: &[&str]) -> AppServerConfig {
        let mut config = AppServerConfig::new(
            self.connection_string()
                .parse()
                .expect("the node's connection string"),
        );
        config.hubs = hubs.iter().map(|hub| hub.to_string()).collect();
        config.connections_per_hub = 1;
        config.server_id = "test-app-server".to_owned();
        config
    }

    /// Starts an SDK app server and waits until every one of its connections is up.
    pub async fn start_app_server(
        &self,
        config: AppServerConfig,
        methods: Arc<dyn HubMethods>,
    ) -> AppServer {
        let app = AppServer::start(config, methods).expect("the app server starts");
        within("the app server connects", WAIT, app.ready()).await;
        app
    }

    async fn serve(node: Arc<Node>) -> TestServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn({
            let node = node.clone();
            async move {
                switchyard_node::serve(listener, node, async {
                    let _ = stopped.await;
                })
                .await
            }
        });
        TestServer {
            addr,
            node,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// `Endpoint=http://127.0.0.1;Port=…;AccessKey=…;Version=1.0;`, as apps are given it.
    pub fn connection_string(&self) -> String {
        format!(
            "Endpoint=http://{};Port={};AccessKey={};Version=1.0;",
            self.addr.ip(),
            self.addr.port(),
            self.key()
        )
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
        builder.sign(&self.key(), now())
    }

    pub fn token_with(&self, hub: &str, claims: &[(&str, &str)]) -> String {
        let mut builder = TokenBuilder::new(self.client_url(hub));
        for (k, v) in claims {
            builder = builder.claim(*k, *v);
        }
        builder.sign(&self.key(), now())
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

    /// A REST call with a token for exactly this URL (no query in the audience); returns the
    /// status and body. `path` may carry a query.
    pub async fn rest(&self, method: &str, path: &str) -> (u16, String) {
        let audience_path = path.split('?').next().unwrap_or(path);
        let token = TokenBuilder::new(format!("http://{}{audience_path}", self.addr))
            .sign(&self.key(), now());
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("an HTTP method");
        let mut request = reqwest::Client::new()
            .request(method.clone(), format!("{}{path}", self.http()))
            .bearer_auth(token);
        if method == reqwest::Method::POST {
            request = request
                .header("content-type", "application/json")
                .body("{\"target\":\"m\",\"arguments\":[\"rest\"]}");
        }
        let response = request.send().await.expect("REST request");
        let status = response.status().as_u16();
        (status, response.text().await.unwrap_or_default())
    }

    /// `/metrics` as a scraper reads it, over HTTP.
    pub async fn metrics_text(&self) -> String {
        reqwest::get(format!("{}/metrics", self.http()))
            .await
            .expect("GET /metrics")
            .text()
            .await
            .expect("the metrics text")
    }

    /// The value of one series (`name{labels}`, as written on `/metrics`); 0 when absent.
    pub async fn metric(&self, series: &str) -> u64 {
        self.metrics_text()
            .await
            .lines()
            .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Shuts the node down as the binary does on SIGTERM and waits for `serve` to return;
    /// panics (failing the test) if it returned an error, panicked, or took over 10 s.
    pub async fn stop(mut self) {
        if let Err(failure) = self.try_stop().await {
            panic!("the test server did not stop cleanly: {failure}");
        }
    }

    /// [`Self::stop`], returning what went wrong instead of panicking.
    pub async fn try_stop(&mut self) -> Result<(), String> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let Some(task) = self.task.take() else {
            return Ok(());
        };
        match tokio::time::timeout(Duration::from_secs(10), task).await {
            Err(_) => Err("serve did not return within 10 s of the shutdown signal".into()),
            Ok(Err(join)) if join.is_panic() => Err(format!("serve panicked: {join}")),
            Ok(Err(join)) => Err(format!("serve was cancelled: {join}")),
            Ok(Ok(Err(error))) => Err(format!("serve failed: {error}")),
            Ok(Ok(Ok(()))) => Ok(()),
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
