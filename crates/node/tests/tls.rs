//! TLS on the listener with certificates made here (rcgen, a test CA): REST over https on
//! HTTP/1.1 and HTTP/2, clients and the app-server SDK over wss, certificate reloads (a
//! good one taken, a bad one refused), a peer that does not speak TLS; and https upstreams
//! signed by a private CA (`upstream.ca_file`).

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use common::tls::{Leaf, TestCa};
use common::{eventually, now};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;
use serde_json::{json, Value};
use switchyard_auth::{TokenBuilder, EMULATOR_ACCESS_KEY};
use switchyard_bench::hub::BenchHub;
use switchyard_client::app_server::{AppServer, AppServerConfig};
use switchyard_client::{connect, ConnectOptions, Connection, Transport};
use switchyard_hub_protocol::{Format, HubMessage};
use switchyard_node::config::{Config, ServiceMode, UpstreamTemplate};
use switchyard_node::metrics::{ReasonLabel, ResultLabel, UpstreamLabel};
use switchyard_node::Node;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};

const WAIT: Duration = Duration::from_secs(10);

async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    common::within(what, WAIT, future).await
}

// ---- certificates: `testkit::tls::TestCa` ----

/// A folder of the test's files, removed at the end.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let path = std::env::temp_dir().join(format!(
            "switchyard-tls-{name}-{}-{}",
            std::process::id(),
            rand_suffix()
        ));
        std::fs::create_dir_all(&path).unwrap();
        Scratch(path)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        // Written aside and renamed: the service never sees a half-written file.
        let partial = self.0.join(format!("{name}.partial"));
        std::fs::write(&partial, text).unwrap();
        std::fs::rename(&partial, &path).unwrap();
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn rand_suffix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

// ---- the service over TLS ----

struct TlsService {
    addr: SocketAddr,
    node: Arc<Node>,
    stop: Option<oneshot::Sender<()>>,
}

impl TlsService {
    async fn start(cert: &Path, key: &Path, edit: impl FnOnce(&mut Config)) -> TlsService {
        let mut config = Config::default();
        config.tls.cert = Some(cert.to_path_buf());
        config.tls.key = Some(key.to_path_buf());
        config.tls.reload_interval = Duration::from_millis(100);
        edit(&mut config);
        let node = Node::new(config.validate().unwrap());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(switchyard_node::serve(listener, node.clone(), async {
            let _ = stopped.await;
        }));
        TlsService {
            addr,
            node,
            stop: Some(stop),
        }
    }

    fn base(&self) -> String {
        format!("https://{}", self.addr)
    }

    fn client_url(&self, hub: &str) -> String {
        format!("{}/client/?hub={hub}", self.base())
    }

    fn client_options(&self, ca: &TestCa, hub: &str) -> ConnectOptions {
        let mut options = ConnectOptions::new(Transport::WebSockets, Format::Json);
        options.access_token = Some(
            TokenBuilder::new(self.client_url(hub))
                .claim("asrs.s.uid", "alice")
                .sign(EMULATOR_ACCESS_KEY, now()),
        );
        options.tls_roots = ca.roots();
        options
    }

    /// `POST /api/hubs/{hub}/:send` over https with `client`; the response's HTTP version.
    async fn rest_broadcast(
        &self,
        client: &reqwest::Client,
        hub: &str,
        text: &str,
    ) -> reqwest::Version {
        let url = format!("{}/api/hubs/{hub}/:send", self.base());
        let token = TokenBuilder::new(&url).sign(EMULATOR_ACCESS_KEY, now());
        let response = client
            .post(format!("{url}?api-version=2022-06-01"))
            .bearer_auth(token)
            .json(&json!({"target": "Notify", "arguments": [text]}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 202);
        response.version()
    }

    fn tls_reloads(&self, result: &'static str) -> u64 {
        self.node
            .metrics
            .tls_reloads
            .get_or_create(&ResultLabel { result })
            .get()
    }

    fn handshake_failures(&self, reason: &'static str) -> u64 {
        self.node
            .metrics
            .tls_handshake_failures
            .get_or_create(&ReasonLabel { reason })
            .get()
    }

    /// The certificate a new TLS connection is given.
    async fn presented_certificate(&self, ca: &TestCa) -> CertificateDer<'static> {
        ca.presented(self.addr).await
    }
}

impl Drop for TlsService {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

fn https_client(ca: &TestCa, http1_only: bool) -> reqwest::Client {
    let mut builder = reqwest::Client::builder()
        .no_proxy()
        .tls_built_in_root_certs(false)
        .add_root_certificate(ca.reqwest_root());
    if http1_only {
        builder = builder.http1_only();
    }
    builder.build().unwrap()
}

/// The next message that is not a ping.
async fn next(connection: &mut Connection) -> HubMessage<Value> {
    loop {
        match within("a message", connection.next()).await.unwrap() {
            HubMessage::Ping => continue,
            other => return other,
        }
    }
}

async fn expect_notify(connection: &mut Connection, text: &str) {
    match next(connection).await {
        HubMessage::Invocation {
            target, arguments, ..
        } => {
            assert_eq!(target, "Notify");
            assert_eq!(arguments, vec![json!(text)]);
        }
        other => panic!("expected Notify, got {other:?}"),
    }
}

// ---- tests ----

#[tokio::test]
async fn rest_over_https_on_h1_and_h2_reaches_a_client_over_wss() {
    let ca = TestCa::new();
    let Leaf {
        cert_pem: cert,
        key_pem: key,
        ..
    } = ca.leaf("switchyard-one");
    let files = Scratch::new("rest");
    let service = TlsService::start(
        &files.write("cert.pem", &cert),
        &files.write("key.pem", &key),
        |_| {},
    )
    .await;
    let mut client = within(
        "connect over wss",
        connect(
            &service.client_url("chat"),
            &service.client_options(&ca, "chat"),
        ),
    )
    .await
    .unwrap();

    let h1 = https_client(&ca, true);
    assert_eq!(
        service.rest_broadcast(&h1, "chat", "over h1").await,
        reqwest::Version::HTTP_11
    );
    expect_notify(&mut client, "over h1").await;
    // Offered through ALPN, HTTP/2 is what a client that speaks it gets.
    let h2 = https_client(&ca, false);
    assert_eq!(
        service.rest_broadcast(&h2, "chat", "over h2").await,
        reqwest::Version::HTTP_2
    );
    expect_notify(&mut client, "over h2").await;
    let health = h2
        .get(format!("{}/api/health", service.base()))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);

    // Not trusted without the CA: the public roots do not include it.
    let untrusted = reqwest::Client::builder().no_proxy().build().unwrap();
    let error = untrusted
        .get(format!("{}/api/health", service.base()))
        .send()
        .await
        .unwrap_err();
    assert!(
        switchyard_client::with_causes(&error).contains("certificate"),
        "{error:?}"
    );
    client.close().await;
}

#[tokio::test]
async fn the_app_server_sdk_over_wss_echoes_to_a_client_over_wss() {
    let ca = TestCa::new();
    let Leaf {
        cert_pem: cert,
        key_pem: key,
        ..
    } = ca.leaf("switchyard-app");
    let files = Scratch::new("app");
    let service = TlsService::start(
        &files.write("cert.pem", &cert),
        &files.write("key.pem", &key),
        |config| config.mode = ServiceMode::Default,
    )
    .await;
    // What the app is given: the https form of the endpoint, as `serve` prints it.
    let connection_string = format!(
        "Endpoint=https://127.0.0.1;Port={};AccessKey={EMULATOR_ACCESS_KEY};Version=1.0;",
        service.addr.port()
    );
    let mut config = AppServerConfig::new(connection_string.parse().unwrap());
    config.hubs = vec!["bench".into()];
    config.connections_per_hub = 1;
    config.tls_roots = ca.roots();
    let app = AppServer::start(config, Arc::new(BenchHub)).unwrap();
    within("the app server connects over wss", app.ready()).await;

    let mut client = within(
        "connect over wss",
        connect(
            &service.client_url("bench"),
            &service.client_options(&ca, "bench"),
        ),
    )
    .await
    .unwrap();
    client
        .send(&HubMessage::Invocation {
            headers: vec![],
            invocation_id: Some("1".into()),
            target: "Echo".into(),
            arguments: vec![json!(7), json!("hi")],
            stream_ids: None,
        })
        .await
        .unwrap();
    match next(&mut client).await {
        HubMessage::Invocation {
            target, arguments, ..
        } => {
            assert_eq!(target, "Measure");
            assert_eq!(arguments, vec![json!(7), json!("hi")]);
        }
        other => panic!("expected the echo, got {other:?}"),
    }
    client.close().await;
    app.abort();
}

#[tokio::test]
async fn a_changed_certificate_is_taken_and_a_bad_one_refused() {
    let ca = TestCa::new();
    let Leaf {
        cert_pem: first_pem,
        key_pem: first_key,
        der: first,
    } = ca.leaf("switchyard-first");
    let files = Scratch::new("reload");
    let cert = files.write("cert.pem", &first_pem);
    let key = files.write("key.pem", &first_key);
    let service = TlsService::start(&cert, &key, |_| {}).await;
    assert_eq!(service.presented_certificate(&ca).await, first);
    let mut client = within(
        "connect over wss",
        connect(
            &service.client_url("chat"),
            &service.client_options(&ca, "chat"),
        ),
    )
    .await
    .unwrap();
    let rest = https_client(&ca, false);

    let Leaf {
        cert_pem: second_pem,
        key_pem: second_key,
        der: second,
    } = ca.leaf("switchyard-second");
    // The key first: until the certificate follows, the pair does not match (an error
    // may be counted meanwhile; the first certificate stays).
    files.write("key.pem", &second_key);
    files.write("cert.pem", &second_pem);
    let deadline = tokio::time::Instant::now() + WAIT;
    while service.presented_certificate(&ca).await != second {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the new certificate was not taken"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(service.tls_reloads("ok") >= 1);
    // The connection made with the first certificate carries on.
    service.rest_broadcast(&rest, "chat", "after reload").await;
    expect_notify(&mut client, "after reload").await;

    let errors = service.tls_reloads("error");
    files.write(
        "cert.pem",
        "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n",
    );
    eventually("the bad file is counted", WAIT, || {
        service.tls_reloads("error") > errors
    })
    .await;
    assert_eq!(service.presented_certificate(&ca).await, second);
    // A certificate whose key is elsewhere is refused as well.
    let third_pem = ca.leaf("switchyard-third").cert_pem;
    let errors = service.tls_reloads("error");
    files.write("cert.pem", &third_pem);
    eventually("the mismatched key is counted", WAIT, || {
        service.tls_reloads("error") > errors
    })
    .await;
    assert_eq!(service.presented_certificate(&ca).await, second);
    service.rest_broadcast(&rest, "chat", "still").await;
    expect_notify(&mut client, "still").await;
    client.close().await;
}

#[tokio::test]
async fn plain_http_and_stalled_handshakes_end_only_their_own_socket() {
    let ca = TestCa::new();
    let Leaf {
        cert_pem: cert,
        key_pem: key,
        ..
    } = ca.leaf("switchyard-plain");
    let files = Scratch::new("plain");
    let service = TlsService::start(
        &files.write("cert.pem", &cert),
        &files.write("key.pem", &key),
        |config| config.timeouts.request_header_timeout = Duration::from_millis(500),
    )
    .await;
    let mut client = within(
        "connect over wss",
        connect(
            &service.client_url("chat"),
            &service.client_options(&ca, "chat"),
        ),
    )
    .await
    .unwrap();

    // Plain HTTP: no HTTP answer, the socket ends.
    let mut plain = TcpStream::connect(service.addr).await.unwrap();
    plain
        .write_all(b"GET /api/health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let _ = within("the plain socket ends", plain.read_to_end(&mut answer)).await;
    assert!(!answer.starts_with(b"HTTP/"), "{answer:?}");
    eventually("the failed handshake is counted", WAIT, || {
        service.handshake_failures("error") >= 1
    })
    .await;

    // Silence: closed after the header timeout.
    let mut silent = TcpStream::connect(service.addr).await.unwrap();
    let mut buffer = [0u8; 16];
    let read = within("the silent socket ends", silent.read(&mut buffer)).await;
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    eventually("the stalled handshake is counted", WAIT, || {
        service.handshake_failures("timeout") >= 1
    })
    .await;

    service
        .rest_broadcast(&https_client(&ca, false), "chat", "unaffected")
        .await;
    expect_notify(&mut client, "unaffected").await;
    client.close().await;
}

#[test]
fn bad_files_stop_the_start_with_a_clear_message() {
    let ca = TestCa::new();
    let Leaf {
        cert_pem: cert,
        key_pem: key,
        ..
    } = ca.leaf("switchyard-bad");
    let other_key = ca.leaf("switchyard-other").key_pem;
    let files = Scratch::new("bad");
    let cert = files.write("cert.pem", &cert);
    let key = files.write("key.pem", &key);
    let other_key = files.write("other-key.pem", &other_key);
    let empty = files.write("empty.pem", "");
    let start = |cert: Option<&Path>, key: Option<&Path>| {
        let mut config = Config::default();
        config.tls.cert = cert.map(Path::to_path_buf);
        config.tls.key = key.map(Path::to_path_buf);
        config.validate().err().map(|e| e.to_string())
    };
    assert_eq!(start(Some(&cert), Some(&key)), None);
    let only_cert = start(Some(&cert), None).unwrap();
    assert!(only_cert.contains("set both or neither"), "{only_cert}");
    let missing = start(Some(&files.0.join("nope.pem")), Some(&key)).unwrap();
    assert!(
        missing.contains("tls.cert") && missing.contains("nope.pem"),
        "{missing}"
    );
    let no_blocks = start(Some(&empty), Some(&key)).unwrap();
    assert!(no_blocks.contains("no CERTIFICATE"), "{no_blocks}");
    let mismatch = start(Some(&cert), Some(&other_key)).unwrap();
    assert!(mismatch.contains("does not go with"), "{mismatch}");
    // Both files named, what to check said, and not rustls's bare variant name.
    assert!(
        mismatch.contains(&cert.display().to_string())
            && mismatch.contains(&other_key.display().to_string()),
        "{mismatch}"
    );
    assert!(mismatch.contains("same issuance"), "{mismatch}");
    assert!(!mismatch.contains("KeyMismatch"), "{mismatch}");
    let mut config = Config::default();
    config.upstream.ca_file = Some(empty);
    let error = config.validate().unwrap_err().to_string();
    assert!(error.contains("upstream.ca_file"), "{error}");
}

// ---- https upstreams signed by a private CA ----

/// An https server that records the path of every request and answers 200.
async fn https_upstream(ca: &TestCa) -> (SocketAddr, mpsc::UnboundedReceiver<String>) {
    let Leaf {
        cert_pem, key_pem, ..
    } = ca.leaf("upstream");
    let chain = vec![CertificateDer::from_pem_slice(cert_pem.as_bytes()).unwrap()];
    let key = rustls_pki_types::PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (seen, requests) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, seen) = (acceptor.clone(), seen.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper::service::service_fn(move |request: hyper::Request<_>| {
                    let _ = seen.send(request.uri().path().to_string());
                    async {
                        Ok::<_, std::convert::Infallible>(hyper::Response::new(
                            http_body_util::Empty::<bytes::Bytes>::new(),
                        ))
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                )
                .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                .await;
            });
        }
    });
    (addr, requests)
}

/// A serverless node (plain HTTP) whose upstream is `upstream`, trusting `ca_file` if given.
async fn serverless_node(upstream: SocketAddr, ca_file: Option<PathBuf>) -> common::TestServer {
    let mut config = Config {
        mode: ServiceMode::Serverless,
        ..Config::default()
    };
    config.upstream.templates = vec![UpstreamTemplate::new(format!(
        "https://127.0.0.1:{}/upstream/{{hub}}/{{category}}/{{event}}",
        upstream.port()
    ))];
    config.upstream.ca_file = ca_file;
    common::TestServer::start_with(config).await
}

#[tokio::test]
async fn an_https_upstream_of_a_private_ca_needs_the_ca_file() {
    let ca = TestCa::new();
    let (upstream, mut requests) = https_upstream(&ca).await;
    let files = Scratch::new("upstream");
    let ca_file = files.write("ca.pem", &ca.pem);

    let unreachable = UpstreamLabel {
        category: "connections",
        outcome: "unreachable",
    };
    let without = serverless_node(upstream, None).await;
    let mut options = ConnectOptions::new(Transport::WebSockets, Format::Json);
    options.access_token = Some(without.token("chat", Some("alice")));
    let client = within("connect", connect(&without.client_url("chat"), &options))
        .await
        .unwrap();
    eventually("the certificate error is counted", WAIT, || {
        without
            .node
            .metrics
            .upstream_requests
            .get_or_create(&unreachable)
            .get()
            >= 1
    })
    .await;
    assert!(requests.try_recv().is_err(), "nothing reached the upstream");
    client.close().await;
    without.stop().await;

    let with = serverless_node(upstream, Some(ca_file)).await;
    options.access_token = Some(with.token("chat", Some("alice")));
    let client = within("connect", connect(&with.client_url("chat"), &options))
        .await
        .unwrap();
    let path = within("the upstream is called", requests.recv())
        .await
        .unwrap();
    assert_eq!(path, "/upstream/chat/connections/connected");
    let ok = UpstreamLabel {
        category: "connections",
        outcome: "ok",
    };
    eventually("the call is counted ok", WAIT, || {
        with.node.metrics.upstream_requests.get_or_create(&ok).get() >= 1
    })
    .await;
    assert_eq!(
        with.node
            .metrics
            .upstream_requests
            .get_or_create(&unreachable)
            .get(),
        0
    );
    client.close().await;
    with.stop().await;
}
