//! Entry points for the fuzz targets in `fuzz/`, and for nothing else: thin wrappers that let
//! them reach parsers private to this crate — the REST body parser and route table, query
//! parsing and bearer tokens, a client's hub-protocol session — plus a way to run one HTTP
//! request through [`crate::routes`] without a socket, and [`serve_stream`], which serves one
//! HTTP connection (WebSocket upgrades included) over an in-memory stream. Hidden from the
//! docs; not a stable API, and the service itself never calls it.

use std::sync::Arc;

use axum::http::{Request, Uri};
use axum::response::Response;
use bytes::Bytes;
use http_body_util::BodyExt;
use switchyard_auth::VerifiedToken;
use switchyard_core::{CloseReason, HubName};

pub use axum::http::Method;

use crate::app_server::ServerConnection;
use crate::client::{create_client, ClientConnection, Transport};
use crate::http::Query;
use crate::Node;

use crate::fuzz_support::{body_of, header_map, poll_once};

/// A node whose settings skip the range checks (see `ValidConfig::unchecked`): the targets
/// use limits below the minimum, so that small inputs reach the size checks.
pub fn node(config: crate::Config) -> Arc<Node> {
    Node::new(crate::ValidConfig::unchecked(config).expect("the targets' templates parse"))
}

// ---- one HTTP request through the service's routes ----

/// A response, with its body read whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Bytes,
}

impl Reply {
    /// The first value of a header.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
    }

    fn read(response: Response) -> Option<Reply> {
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(n, v)| (n.as_str().to_string(), v.as_bytes().to_vec()))
            .collect();
        let body = poll_once(response.into_body().collect())?.ok()?.to_bytes();
        Some(Reply {
            status,
            headers,
            body,
        })
    }
}

/// What [`call`] did with a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// The method or URI is not one an HTTP server would hand to the service.
    Invalid,
    /// The response (or its body) was not ready at once: a long poll or an event stream.
    Pending,
    Done(Reply),
}

/// Applies a command on a one-node service, where every command settles at once (no other
/// node to wait for), without a runtime.
pub fn execute_now(
    node: &Node,
    hub: &HubName,
    command: crate::Command,
) -> Result<(), crate::Missing> {
    use futures_util::FutureExt;
    node.executor()
        .execute(hub, command)
        .now_or_never()
        .expect("a command on one node settles at once")
}

/// Runs one request through [`crate::routes`] for `node`, without a socket. Headers that are
/// not valid HTTP are left out; the body arrives in the given pieces. No connection info or
/// upgrade is attached, so WebSocket upgrades are refused.
pub fn call(
    node: &Arc<Node>,
    method: &[u8],
    uri: &str,
    headers: &[(&str, &[u8])],
    body: &[&[u8]],
) -> Call {
    let (Ok(method), Ok(uri)) = (Method::from_bytes(method), Uri::try_from(uri)) else {
        return Call::Invalid;
    };
    let mut request = Request::new(body_of(body));
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    *request.headers_mut() = header_map(headers);
    let router = crate::routes(node.clone());
    let Some(Ok(response)) = poll_once(tower::ServiceExt::oneshot(router, request)) else {
        return Call::Pending;
    };
    match Reply::read(response) {
        Some(reply) => Call::Done(reply),
        None => Call::Pending,
    }
}

pub use crate::rest::fuzz::*;

/// Serves one HTTP/1.1 connection over `io` through [`crate::routes`] as the listener serves
/// a socket from 127.0.0.1, upgrades included: a WebSocket endpoint (`/server`, `/client`)
/// runs its real session over an in-memory stream (`tokio::io::duplex`). Returns when the
/// HTTP connection ends; an upgraded session goes on in its own task.
pub async fn serve_stream<I>(node: &Arc<Node>, io: I)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let router = crate::routes(node.clone());
    let peer = std::net::SocketAddr::from(([127, 0, 0, 1], 40_000));
    let service = hyper::service::service_fn(move |mut request: Request<hyper::body::Incoming>| {
        let router = router.clone();
        request
            .extensions_mut()
            .insert(axum::extract::ConnectInfo(peer));
        tower::ServiceExt::oneshot(router, request.map(axum::body::Body::new))
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(hyper_util::rt::TokioIo::new(io), service)
        .with_upgrades()
        .await;
}

// ---- query strings and bearer tokens ----

/// A URI's query, parsed as the client endpoint and the REST API parse it.
pub struct QueryParams(Query);

impl QueryParams {
    /// `None` if `uri` is not a valid request URI.
    pub fn parse(uri: &str) -> Option<QueryParams> {
        Uri::try_from(uri)
            .ok()
            .map(|uri| QueryParams(Query::parse(&uri)))
    }

    /// Every pair, percent-decoded, in order.
    pub fn pairs(&self) -> &[(String, String)] {
        &self.0 .0
    }

    /// The first value of a key, matched ignoring ASCII case.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key)
    }

    pub fn all<'a>(&'a self, key: &'a str) -> Vec<&'a str> {
        self.0.all(key).collect()
    }

    pub fn count(&self, key: &str) -> usize {
        self.0.count(key)
    }
}

/// The client endpoint's bearer token: from `Authorization` (left out when not a valid header
/// value), else from `access_token`.
pub fn bearer_token(authorization: Option<&[u8]>, query: &QueryParams) -> Option<String> {
    let headers = header_map(
        &authorization
            .map(|value| vec![("authorization", value)])
            .unwrap_or_default(),
    );
    crate::auth::bearer_token(&headers, &query.0).map(str::to_string)
}

// ---- a client's hub-protocol session ----

/// The transport a [`ClientSession`] pretends to use (MessagePack is refused on SSE).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionTransport {
    WebSockets,
    ServerSentEvents,
    LongPolling,
}

impl From<SessionTransport> for Transport {
    fn from(transport: SessionTransport) -> Self {
        match transport {
            SessionTransport::WebSockets => Transport::WebSockets,
            SessionTransport::ServerSentEvents => Transport::ServerSentEvents,
            SessionTransport::LongPolling => Transport::LongPolling,
        }
    }
}

/// A dashboard page's session on the admin hub, after its handshake: fed the text of
/// WebSocket messages as the page sends them.
pub struct AdminSession(crate::dashboard::Session);

impl AdminSession {
    pub fn open(node: &Arc<Node>) -> AdminSession {
        AdminSession(crate::dashboard::Session::new(node.dashboard.clone()))
    }

    /// One WebSocket message from the page: the frames to send back, or the error that ends
    /// the session. `None`: it did not finish without waiting (it waits for nothing on a
    /// node of its own).
    pub fn receive(&mut self, text: &str) -> Option<Result<Vec<String>, String>> {
        poll_once(self.0.received(text))
    }

    /// What a watched trace gathered, as the pushes the page would get.
    pub fn trace_news(&mut self) -> Vec<String> {
        self.0.trace_news()
    }
}

/// One client connection fed bytes the way the transports feed them (WebSocket frames, SSE
/// and long-polling POST bodies all go to `ClientConnection::receive`). Finished on drop.
pub struct ClientSession {
    node: Arc<Node>,
    client: Arc<ClientConnection>,
}

impl ClientSession {
    /// A connection to `hub` as negotiate makes it (with `asrs.s.uid` = `user` if given), its
    /// transport started. Err: the hub name or the node refused it.
    pub fn open(
        node: &Arc<Node>,
        hub: &str,
        user: Option<&str>,
        transport: SessionTransport,
    ) -> Result<ClientSession, String> {
        let hub = HubName::new(hub, None).map_err(|e| e.to_string())?;
        let token = VerifiedToken {
            claims: user
                .map(|user| vec![("asrs.s.uid".to_string(), user.to_string())])
                .unwrap_or_default(),
            expires_at: i64::MAX,
            audiences: Vec::new(),
            signed_with: Default::default(),
        };
        let clients = node.clients();
        let client = create_client(clients, &hub, token, false, None).map_err(|e| e.message)?;
        let session = ClientSession {
            node: node.clone(),
            client,
        };
        session
            .client
            .start_transport(clients, transport.into())
            .map_err(|e| e.message)?;
        Ok(session)
    }

    /// As if negotiate had offered stateful reconnect: a WebSocket session whose handshake
    /// asks for version 2 then numbers, acknowledges and deduplicates messages.
    pub fn offer_stateful_reconnect(&self) {
        self.client.offer_stateful_reconnect();
    }

    /// The connection id REST callers and app servers see.
    pub fn connection_id(&self) -> &str {
        self.client.connection.id().as_str()
    }

    /// Bytes from the client. An error closes the connection for that reason, as the
    /// transports do.
    pub fn receive(&self, data: &[u8]) -> Result<(), CloseReason> {
        let result =
            self.client
                .receive(self.node.clients(), &mut self.client.inbound.lock(), data);
        if let Err(reason) = &result {
            self.client.connection.close(reason.clone());
        }
        result
    }

    pub fn handshake_done(&self) -> bool {
        self.client.handshake_done()
    }

    /// Frames queued for the client since the last call.
    pub fn take_sent(&self) -> Vec<Bytes> {
        let mut frames = Vec::new();
        self.client.connection.outbound().try_drain(&mut frames);
        frames
    }

    /// Why the connection is closing, once it is.
    pub fn close_reason(&self) -> Option<CloseReason> {
        self.client.connection.outbound().close_reason()
    }

    /// The Close message a transport sends before ending for `reason` (none before the
    /// handshake).
    pub fn close_frame(&self, reason: &CloseReason) -> Option<Bytes> {
        self.client.close_frame(reason)
    }

    /// Ends the connection as a transport does when it stops; safe to call twice.
    pub fn finish(&self) {
        self.node.clients().finish(&self.client);
    }
}

impl Drop for ClientSession {
    fn drop(&mut self) {
        self.finish();
    }
}

/// A stand-in app server for Default mode: a server connection without a socket, registered
/// for a hub; what the service sends it can be taken out.
pub struct AppServer(Arc<ServerConnection>);

impl AppServer {
    /// Registers a connection of app server `server_id` for `hub`.
    pub fn attach(node: &Arc<Node>, hub: &str, server_id: &str) -> Result<AppServer, String> {
        let hub = HubName::new(hub, None).map_err(|e| e.to_string())?;
        let default_mode = node.default_mode();
        Ok(AppServer(ServerConnection::register_detached(
            &default_mode.servers,
            hub,
            server_id,
            default_mode.max_pending_bytes_per_server_connection(),
        )))
    }

    /// Service-protocol frames (length-prefixed) queued for the app server since the last call.
    pub fn take_sent(&self) -> Vec<Bytes> {
        let mut frames = Vec::new();
        self.0.outbound.try_drain(&mut frames);
        frames
    }
}

/// What another node sends inside a `Message::Control` (questions, answers, presence, trace
/// events): decoding never panics, a strict prefix of a good body is an error, and what
/// decodes encodes to a body that decodes to the same.
pub fn control_body(body: &Bytes, cut: usize) {
    use crate::cluster::Control;
    let Ok(control) = Control::decode(body) else {
        return;
    };
    if cut < body.len() {
        assert!(
            Control::decode(&body.slice(..cut)).is_err(),
            "a truncated control body decoded"
        );
    }
    let again = control.encode();
    assert_eq!(
        Control::decode(&again).as_ref(),
        Ok(&control),
        "control round trip"
    );
}

// ---- configuration ----

/// The checks of `Config::validate` that read no file (TLS and CA files are left out, so an
/// input naming `/dev/zero` cannot hang the target), and the trusted-proxy list.
pub fn check_config(config: &crate::Config) -> Result<(), String> {
    config.check().map_err(|e| e.to_string())?;
    crate::config::parse_proxies(&config.trusted_proxies).map_err(|e| e.to_string())?;
    Ok(())
}

/// `trusted_proxies` entries parsed, as many ranges as entries.
pub fn parse_proxies(entries: &[String]) -> Result<usize, String> {
    crate::config::parse_proxies(entries)
        .map(|nets| nets.len())
        .map_err(|e| e.to_string())
}

/// One upstream template parsed; when it parses, the URL it gives for the event if its
/// patterns match it.
pub fn upstream_url(
    entry: &crate::config::UpstreamTemplate,
    hub: &str,
    category: &str,
    event: &str,
) -> Result<Option<String>, String> {
    let templates = crate::config::Templates::parse(std::slice::from_ref(entry))?;
    Ok(templates
        .find(hub, category, event)
        .map(|template| template.url(hub, category, event)))
}
