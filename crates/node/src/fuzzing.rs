//! Entry points for the fuzz targets in `fuzz/`, and for nothing else: thin wrappers that let
//! them reach parsers private to this crate — the REST body parser and route table, query
//! parsing and bearer tokens, a client's hub-protocol session — plus a way to run one HTTP
//! request through [`crate::routes`] without a socket. Hidden from the docs; not a stable API,
//! and the service itself never calls it.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Request, Uri};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::FutureExt;
use http_body_util::BodyExt;
use serde_json::Value;
use switchyard_auth::VerifiedToken;
use switchyard_core::{CloseReason, HubName};

pub use axum::http::Method;

use crate::client::{create_client, ClientConnection, Transport};
use crate::http::Query;
use crate::node::Node;
use crate::rest::error::RestError;
use crate::server::ServerConnection;

thread_local! {
    /// Gives timers a runtime to register with; nothing is ever spawned on it.
    static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a current-thread runtime");
}

/// Polls `future` once inside a runtime context; `None` if it is not ready then.
fn poll_once<F: Future>(future: F) -> Option<F::Output> {
    RUNTIME.with(|runtime| {
        let _entered = runtime.enter();
        future.now_or_never()
    })
}

/// A body that arrives in the given pieces, as a request body read from the network does.
fn body_of(chunks: &[&[u8]]) -> Body {
    let chunks: Vec<Result<Bytes, Infallible>> = chunks
        .iter()
        .map(|chunk| Ok(Bytes::copy_from_slice(chunk)))
        .collect();
    Body::from_stream(futures_util::stream::iter(chunks))
}

/// Headers from raw name/value pairs; a pair that is not a valid header is left out, as an
/// HTTP server would have refused it before any handler ran.
fn header_map(headers: &[(&str, &[u8])]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_bytes(value),
        ) {
            map.append(name, value);
        }
    }
    map
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

// ---- REST: body parser and route table ----

/// A REST error as its response carries it: status and the JSON body
/// (`{"code":…,"message":…}`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestFailure {
    pub status: u16,
    pub body: Bytes,
}

impl From<RestError> for RestFailure {
    fn from(error: RestError) -> Self {
        let response = error.into_response();
        let status = response.status().as_u16();
        let body = poll_once(response.into_body().collect())
            .and_then(Result::ok)
            .map(|collected| collected.to_bytes())
            .unwrap_or_default();
        RestFailure { status, body }
    }
}

/// What a REST send body asks to deliver.
#[derive(Debug, Clone, PartialEq)]
pub enum SendBody {
    Invocation {
        target: String,
        arguments: Vec<Value>,
    },
    Payloads(Vec<(String, Bytes)>),
}

impl From<crate::rest::body::SendBody> for SendBody {
    fn from(body: crate::rest::body::SendBody) -> Self {
        match body {
            crate::rest::body::SendBody::Invocation { target, arguments } => {
                SendBody::Invocation { target, arguments }
            }
            crate::rest::body::SendBody::Payloads(payloads) => SendBody::Payloads(payloads),
        }
    }
}

/// Reads and parses a send body as the REST API does (`Content-Type` and `Content-Length`
/// taken from `headers`, `limit` bytes at most), the body arriving in the given pieces.
pub fn rest_read_body(
    headers: &[(&str, &[u8])],
    chunks: &[&[u8]],
    limit: usize,
) -> Result<SendBody, RestFailure> {
    let headers = header_map(headers);
    match poll_once(crate::rest::body::read(&headers, body_of(chunks), limit)) {
        Some(result) => result.map(SendBody::from).map_err(RestFailure::from),
        None => unreachable!("a body held in memory is read at once"),
    }
}

/// The JSON send body parser (`{"target":…,"arguments":[…]}`, names in any case).
pub fn rest_parse_invocation(bytes: &[u8]) -> Result<SendBody, RestFailure> {
    crate::rest::body::parse_invocation(bytes)
        .map(SendBody::from)
        .map_err(RestFailure::from)
}

/// The MessagePack send body parser (a map of protocol name to framed hub messages).
pub fn rest_parse_payloads(bytes: &[u8]) -> Result<Vec<(String, Bytes)>, RestFailure> {
    crate::rest::body::parse_payloads(bytes).map_err(RestFailure::from)
}

/// What a REST path and method resolve to; the API family and operation as their `Debug` text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestRoute {
    Health,
    OpenApi,
    Hub {
        api: String,
        hub: String,
        op: String,
    },
}

/// A REST path split into percent-decoded segments.
pub fn rest_segments(path: &str) -> Result<Vec<String>, RestFailure> {
    crate::rest::routes::segments(path).map_err(RestFailure::from)
}

/// Decoded segments and a method → an operation (404 unknown path, 405 other method).
pub fn rest_resolve(segments: &[String], method: &Method) -> Result<RestRoute, RestFailure> {
    use crate::rest::routes::Operation;
    Ok(match crate::rest::routes::resolve(segments, method)? {
        Operation::Health => RestRoute::Health,
        Operation::OpenApi => RestRoute::OpenApi,
        Operation::Hub { api, hub, op } => RestRoute::Hub {
            api: format!("{api:?}"),
            hub,
            op: format!("{op:?}"),
        },
    })
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
    crate::http::bearer_token(&headers, &query.0).map(str::to_string)
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
        };
        let client = create_client(node, &hub, token, false).map_err(|e| e.message)?;
        let session = ClientSession {
            node: node.clone(),
            client,
        };
        session
            .client
            .start_transport(node, transport.into())
            .map_err(|e| e.message)?;
        Ok(session)
    }

    /// The connection id REST callers and app servers see.
    pub fn connection_id(&self) -> &str {
        self.client.connection.id().as_str()
    }

    /// Bytes from the client. An error closes the connection for that reason, as the
    /// transports do.
    pub fn receive(&self, data: &[u8]) -> Result<(), CloseReason> {
        let result = self
            .client
            .receive(&self.node, &mut self.client.inbound.lock(), data);
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
        self.node.finish(&self.client);
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
        Ok(AppServer(ServerConnection::register_detached(
            node, hub, server_id,
        )))
    }

    /// Service-protocol frames (length-prefixed) queued for the app server since the last call.
    pub fn take_sent(&self) -> Vec<Bytes> {
        let mut frames = Vec::new();
        self.0.outbound.try_drain(&mut frames);
        frames
    }
}
