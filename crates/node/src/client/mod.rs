//! The client endpoint `/client/?hub=`: negotiate and the three transports.
//!
//! # Layout
//! - `registry`: [`Clients`], the endpoint's state: the client table, timers, ends.
//! - `negotiate`: `POST /client/negotiate`, versions 0 and 1.
//! - `session`: the hub-protocol side every transport feeds (handshake, pings, close).
//! - `websocket`, `sse`, `longpoll`: one module per transport.
//! - `writer`: the step each transport's writer takes with a batch drained from the queue.
//! - here: [`ClientConnection`], the per-client state, and request dispatch.

mod longpoll;
mod negotiate;
mod registry;
mod resume;
mod session;
mod sse;
mod websocket;
mod writer;

pub(crate) use registry::{Clients, Refusal};

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::extract::{FromRequestParts, Request, State};
use axum::http::{header, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use parking_lot::Mutex;
use switchyard_auth::{generate_connection_token, VerifiedToken};
use switchyard_core::{CloseReason, ConnectionId, HubName, UserId};
use switchyard_router::{Connection, Hub};

use crate::app_server::{ConnectInfo, DefaultLink, LinkedClient};
use crate::auth::{authorize_hub, Unauthorized};
use crate::http::{is_websocket_upgrade, text_error, Query, TextError};
use crate::upstream::{ClientUpstream, UpstreamClient};

pub(crate) use session::Inbound;

/// The transports, with the bits `asrs.s.htt` uses for them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Transport {
    WebSockets = 1,
    ServerSentEvents = 2,
    LongPolling = 4,
}

impl Transport {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Transport::WebSockets => "WebSockets",
            Transport::ServerSentEvents => "ServerSentEvents",
            Transport::LongPolling => "LongPolling",
        }
    }
}

/// What the heartbeat found due on a connection.
pub(crate) enum Expiry {
    /// Close with a reason (the client is told).
    Close(CloseReason),
    /// Drop without a word: nobody is listening (never connected, or stopped polling).
    Discard,
}

/// One client connection: identity, chosen transport, timers, and its router connection.
///
/// Kept small: there is one per connection. The access token is not kept, only what the
/// connection still needs from it after the connect (its claims can run to hundreds of bytes).
pub(crate) struct ClientConnection {
    /// The `id=` value that finds this connection.
    pub(crate) key: Box<str>,
    /// Who negotiated it (`Clients::owner_of`): later requests must be theirs.
    owner: u64,
    /// Anonymous and found by its public connection id: `owner` includes the client's
    /// address (`Clients::bound_owner`).
    bound_to_address: bool,
    /// Who waits for it while it has no transport (`Clients::pending_key`).
    pending_key: u64,
    /// Where it waits from (`Clients::pending_address`; 0: not counted).
    pending_address: u64,
    pub(crate) connection: Arc<Connection>,
    pub(crate) hub: Arc<Hub>,
    /// When the token's `asrs.s.coae` asks to close the connection (unix seconds);
    /// `i64::MAX` when it does not.
    close_at_unix: i64,
    transport: OnceLock<Transport>,
    allowed_transports: u8,
    handshake_timeout_ms: u32,
    poll_inactivity_ms: u32,
    created_ms: u64,
    started_ms: AtomicU64,
    last_received_ms: AtomicU64,
    client_pings: AtomicBool,
    handshake_done: AtomicBool,
    finished: AtomicBool,
    /// Counted among the pending (negotiated, no transport yet) connections.
    pending: AtomicBool,
    /// Counted among the connected clients (`Clients::admit`).
    admitted: AtomicBool,
    /// Counted among the connections waiting for their handshake (`Clients::admit`).
    handshaking: AtomicBool,
    /// The app server's connection (Default mode) or the client's upstream queue
    /// (serverless) is congested; stop reading from the client until it has room (see
    /// `room_for_sends`).
    pub(crate) hold_reading: AtomicBool,
    /// Default mode: the app server was asked to pause sending to this client; the transport
    /// resumes it once it has written what was queued (see `backlog_written`).
    flow_paused: AtomicBool,
    /// Held only while bytes are parsed, never across an await.
    pub(crate) inbound: Mutex<Inbound>,
    pub(crate) poll: longpoll::PollState,
    /// Default mode: the way to this client's app server. `None` for serverless hubs.
    pub(crate) link: Mutex<Option<Box<DefaultLink>>>,
    /// Serverless clients of a hub an upstream template matches: their upstream state.
    pub(crate) upstream: Option<Box<ClientUpstream>>,
    /// Negotiate offered stateful reconnect (the client asked, the service allows it).
    stateful_offered: AtomicBool,
    /// Stateful reconnect, once the handshake agreed to it.
    resume: OnceLock<Box<Mutex<resume::Resume>>>,
    /// Who connected, for the dashboard: set by the first transport request.
    peer: OnceLock<Box<Peer>>,
}

/// Where a client connected from and with what, as its first transport request said.
pub(crate) struct Peer {
    pub(crate) address: Option<std::net::IpAddr>,
    /// Shared between the connections that send the same one (`Clients::user_agent`).
    pub(crate) user_agent: Option<Arc<str>>,
}

impl ClientConnection {
    pub(crate) fn new(
        clients: &Clients,
        key: String,
        id: ConnectionId,
        hub: Arc<Hub>,
        token: VerifiedToken,
        source: Option<std::net::IpAddr>,
    ) -> Arc<ClientConnection> {
        let user = token.user_id().and_then(|u| UserId::new(u).ok());
        let config = clients.config();
        let timeouts = &config.timeouts;
        let handshake_timeout = token
            .handshake_timeout_secs()
            .map_or(timeouts.handshake_timeout, |s| {
                Duration::from_secs(s.into())
            });
        let poll_inactivity = token
            .max_poll_interval_secs()
            .map_or(timeouts.long_poll_inactivity, |s| {
                Duration::from_secs(s.into())
            });
        let allowed_transports = token.allowed_transports().unwrap_or(0b111);
        let link = clients
            .serves_default_mode(hub.name(), &token)
            .then(|| DefaultLink::new(&token));
        let upstream = match (&link, &clients.upstream) {
            (None, Some(upstream)) if upstream.serves_hub(hub.name().as_str()) => Some(
                ClientUpstream::new(&token, config.limits.max_pending_bytes_per_connection),
            ),
            _ => None,
        };
        let now = clients.now_ms();
        let bound_to_address = token.user_id().is_none() && key == id.as_str();
        let mut owner = clients.owner_of(&token);
        if bound_to_address {
            owner = clients.bound_owner(owner, source);
        }
        Arc::new(ClientConnection {
            key: key.into_boxed_str(),
            owner,
            bound_to_address,
            pending_key: clients.pending_key(&token, source),
            pending_address: clients.pending_address(source),
            connection: Arc::new(Connection::new(
                id,
                user,
                config.limits.max_pending_bytes_per_connection,
            )),
            hub,
            close_at_unix: token.close_on_auth_expiry().unwrap_or(i64::MAX),
            transport: OnceLock::new(),
            allowed_transports,
            handshake_timeout_ms: millis(handshake_timeout),
            poll_inactivity_ms: millis(poll_inactivity),
            created_ms: now,
            started_ms: AtomicU64::new(0),
            last_received_ms: AtomicU64::new(now),
            client_pings: AtomicBool::new(false),
            handshake_done: AtomicBool::new(false),
            finished: AtomicBool::new(false),
            pending: AtomicBool::new(true),
            admitted: AtomicBool::new(false),
            handshaking: AtomicBool::new(false),
            hold_reading: AtomicBool::new(false),
            flow_paused: AtomicBool::new(false),
            inbound: Mutex::new(Inbound::new()),
            poll: longpoll::PollState::default(),
            link: Mutex::new(link),
            upstream,
            stateful_offered: AtomicBool::new(false),
            resume: OnceLock::new(),
            peer: OnceLock::new(),
        })
    }

    /// Keeps what the connect request looked like, for the app server (Default mode) or the
    /// upstream (serverless).
    pub(crate) fn set_connect_info(&self, clients: &Clients, request: &axum::http::request::Parts) {
        if self.peer.get().is_none() {
            let user_agent = request
                .headers
                .get(header::USER_AGENT)
                .and_then(|v| v.to_str().ok())
                .map(|agent| clients.user_agent(agent));
            let _ = self.peer.set(Box::new(Peer {
                address: crate::http::client_ip(request, clients.config()),
                user_agent,
            }));
        }
        if let Some(upstream) = &self.upstream {
            upstream.capture(&request.uri);
        }
        if let Some(link) = self.link.lock().as_mut() {
            let origin = crate::http::ClientOrigin::of(request, clients.config());
            link.set_connect_info(ConnectInfo::capture(&request.headers, &request.uri, origin));
        }
    }

    pub(crate) fn transport(&self) -> Option<Transport> {
        self.transport.get().copied()
    }

    /// Where the client connected from, once a transport request came.
    pub(crate) fn peer(&self) -> Option<&Peer> {
        self.peer.get().map(|peer| &**peer)
    }

    /// When the connection was made, on the node's clock (`Clients::now_ms`).
    pub(crate) fn created_ms(&self) -> u64 {
        self.created_ms
    }

    /// When the connection was made (negotiate or direct connect), unix milliseconds.
    pub(crate) fn created_unix_ms(&self, clients: &Clients) -> i64 {
        switchyard_core::clock::unix_now_ms() - (clients.now_ms() - self.created_ms) as i64
    }

    /// Fixes the transport on the first transport request. Err(response) if another one was
    /// fixed before or the token does not allow this one.
    pub(crate) fn start_transport(
        &self,
        clients: &Clients,
        transport: Transport,
    ) -> Result<(), TextError> {
        if self.allowed_transports & transport as u8 == 0 {
            return Err(TextError::new(
                StatusCode::NOT_FOUND,
                format!(
                    "{} transport not supported by this end point type",
                    transport.name()
                ),
            ));
        }
        if !self.admitted.load(Ordering::Acquire) {
            clients.admit(self)?;
            self.admitted.store(true, Ordering::Release);
        }
        let mut first = false;
        let current = *self.transport.get_or_init(|| {
            first = true;
            transport
        });
        if first {
            clients
                .metrics()
                .client_connections
                .get_or_create(&crate::metrics::TransportLabel {
                    transport: transport.name(),
                })
                .inc();
        }
        if current != transport {
            return Err(TextError::new(
                StatusCode::BAD_REQUEST,
                "Cannot change transports mid-connection",
            ));
        }
        let _ = self.started_ms.compare_exchange(
            0,
            clients.now_ms().max(1),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
        Ok(())
    }

    /// Resolves when the client may be read from again: at once unless its app server's
    /// connection was congested by what it sent.
    pub(crate) async fn room_for_sends(&self) {
        if !self.hold_reading.load(Ordering::Acquire) {
            return;
        }
        let server = self
            .link
            .lock()
            .as_ref()
            .and_then(|link| link.server().cloned());
        if let Some(server) = server {
            server.room().await;
        } else if let Some(upstream) = &self.upstream {
            upstream.room().await;
        }
        self.hold_reading.store(false, Ordering::Release);
    }

    /// A transport wrote what it took from the queue: if the app server was asked to pause
    /// sending to this client, it may go on. (One atomic load when it was not.)
    pub(crate) fn backlog_written(&self) {
        if !self.flow_paused.load(Ordering::Acquire) {
            return;
        }
        self.flow_paused.store(false, Ordering::Release);
        if let Some(link) = self.link.lock().as_mut() {
            link.resume_flow(self);
        }
    }

    /// Stops counting the connection as pending; true the first time.
    pub(crate) fn take_pending(&self) -> bool {
        self.pending.swap(false, Ordering::AcqRel)
    }

    /// Whether it counts among the connected clients.
    pub(crate) fn admitted(&self) -> bool {
        self.admitted.load(Ordering::Acquire)
    }

    /// Returns false if the connection was already finished.
    pub(crate) fn mark_finished(&self) -> bool {
        !self.finished.swap(true, Ordering::AcqRel)
    }

    pub(crate) fn is_finished(&self) -> bool {
        self.finished.load(Ordering::Acquire)
    }

    /// Negotiate offered stateful reconnect; the handshake decides.
    pub(crate) fn offer_stateful_reconnect(&self) {
        self.stateful_offered.store(true, Ordering::Release);
    }

    pub(crate) fn stateful_offered(&self) -> bool {
        self.stateful_offered.load(Ordering::Acquire)
    }

    /// Stateful reconnect: the transport of `generation` is gone; if it still owned the
    /// connection, the connection now waits `stateful_reconnect.window` for its client.
    pub(crate) fn transport_ended(&self, clients: &Clients, generation: u64) {
        if let Some(resume) = self.resume() {
            resume.lock().writer_ended(generation, clients.now_ms());
        }
    }

    /// Stateful reconnect, if the handshake agreed to it.
    pub(crate) fn resume(&self) -> Option<&Mutex<resume::Resume>> {
        self.resume.get().map(|resume| &**resume)
    }

    /// What is due on this connection now, if anything.
    pub(crate) fn check_timers(
        &self,
        clients: &Clients,
        now_ms: u64,
        now_unix: i64,
    ) -> Option<Expiry> {
        let timeouts = &clients.config().timeouts;
        // Stateful reconnect: a dropped connection waits for its client, unless it was closed
        // meanwhile (nobody would read the Close) or the window has passed.
        let detached = self
            .resume()
            .and_then(|resume| resume.lock().detached_since());
        if let Some(since) = detached {
            let outcome = match self.connection.outbound().close_reason() {
                Some(CloseReason::SlowConsumer { .. }) => Some("buffer"),
                Some(_) => Some("closed"),
                None => {
                    let window = clients.config().stateful_reconnect.window;
                    (now_ms.saturating_sub(since) > window.as_millis() as u64).then_some("window")
                }
            };
            if let Some(kind) = outcome {
                clients
                    .metrics()
                    .stateful_reconnects
                    .get_or_create(&crate::metrics::KindLabel { kind })
                    .inc();
                return Some(Expiry::Discard);
            }
            return None;
        }
        // A slow consumer's writer may be stuck in a socket write; leave the hub now.
        if let Some(CloseReason::SlowConsumer { .. }) = self.connection.outbound().close_reason() {
            return Some(Expiry::Discard);
        }
        let started = self.started_ms.load(Ordering::Relaxed);
        if started == 0 {
            let waited = now_ms.saturating_sub(self.created_ms);
            return (waited > timeouts.connect_timeout.as_millis() as u64)
                .then_some(Expiry::Discard);
        }
        if self.transport() == Some(Transport::LongPolling)
            && self.poll.idle_for(now_ms) > u64::from(self.poll_inactivity_ms)
        {
            // Nobody polls to be told: the reason is for the logs, metrics and upstream.
            self.connection.close(CloseReason::Inactive);
            return Some(Expiry::Discard);
        }
        if !self.handshake_done.load(Ordering::Relaxed) {
            let waited = now_ms.saturating_sub(started);
            return (waited > u64::from(self.handshake_timeout_ms))
                .then_some(Expiry::Close(CloseReason::HandshakeTimeout));
        }
        if now_unix >= self.close_at_unix {
            return Some(Expiry::Close(CloseReason::AuthExpired));
        }
        if self.client_pings.load(Ordering::Relaxed) {
            let silent = now_ms.saturating_sub(self.last_received_ms.load(Ordering::Relaxed));
            if silent > timeouts.client_timeout.as_millis() as u64 {
                return Some(Expiry::Close(CloseReason::ClientTimeout));
            }
        }
        None
    }
}

impl LinkedClient for ClientConnection {
    fn connection(&self) -> &Arc<Connection> {
        &self.connection
    }

    fn hub(&self) -> &Arc<Hub> {
        &self.hub
    }

    fn link(&self) -> &Mutex<Option<Box<DefaultLink>>> {
        &self.link
    }

    fn is_finished(&self) -> bool {
        ClientConnection::is_finished(self)
    }

    fn handshake_done(&self) -> bool {
        ClientConnection::handshake_done(self)
    }

    fn mark_handshake_done(&self) {
        ClientConnection::mark_handshake_done(self)
    }

    fn note_flow_paused(&self, paused: bool) {
        self.flow_paused.store(paused, Ordering::Release);
    }
}

impl UpstreamClient for ClientConnection {
    fn connection(&self) -> &Connection {
        &self.connection
    }

    fn hub_name(&self) -> &HubName {
        self.hub.name()
    }

    fn hub(&self) -> &Hub {
        &self.hub
    }

    fn upstream(&self) -> Option<&ClientUpstream> {
        self.upstream.as_deref()
    }
}

/// Milliseconds, saturating at `u32::MAX` (about 49 days).
fn millis(duration: Duration) -> u32 {
    u32::try_from(duration.as_millis()).unwrap_or(u32::MAX)
}

/// Creates and registers a connection. `by_token`: clients find it by a separate secret token
/// (negotiate v1) rather than by its connection id (v0, and connections without negotiate).
pub(crate) fn create_client(
    clients: &Clients,
    hub: &HubName,
    token: VerifiedToken,
    by_token: bool,
    source: Option<std::net::IpAddr>,
) -> Result<Arc<ClientConnection>, TextError> {
    // Checked before any work so a flood of connects costs little.
    if clients.at_connection_limit() {
        return Err(Refusal::Full.into_error());
    }
    if clients.user_at_limit(&token) {
        return Err(Refusal::UserFull.into_error());
    }
    // In a cluster the key names this node, so any node can pass later requests here.
    let named = |random: String| match clients.cluster.in_cluster() {
        true => crate::cluster::proxy::key_naming(random, clients.cluster.node_id()),
        false => random,
    };
    let id = generate_connection_token();
    let key = if by_token {
        named(generate_connection_token())
    } else {
        named(id.clone())
    };
    let connection_id =
        ConnectionId::new(if by_token { &id } else { &key }).expect("generated ids are valid");
    let hub = clients.cluster.router().hub(hub);
    let client = ClientConnection::new(clients, key, connection_id, hub, token, source);
    clients
        .insert(client.clone())
        .map_err(Refusal::into_error)?;
    Ok(client)
}

/// The connect rates (`throttling.connect_rate*`) for a new connection: negotiate, or a
/// WebSocket that skips it. The source is the client's address after `trusted_proxies`; a
/// trusted proxy that names nobody behind it is not throttled as one client.
pub(crate) fn throttle_connect(
    clients: &Clients,
    request: &axum::http::request::Parts,
) -> Result<(), TextError> {
    let config = clients.config();
    let source = crate::http::client_ip(request, config).filter(|ip| !config.is_trusted_proxy(*ip));
    clients
        .shared
        .throttle
        .connect(source, clients.metrics())
        .map_err(|refusal| {
            crate::logs::refused(
                &clients.shared.refusals,
                "client",
                None,
                refusal.why.kind(),
                refusal.why.message(),
                source,
            );
            TextError::throttled(refusal)
        })
}

pub(crate) fn routes() -> axum::Router<Arc<Clients>> {
    axum::Router::new()
        .route("/client/negotiate", any(negotiate::negotiate))
        .route("/client/negotiate/", any(negotiate::negotiate))
        .route("/client", any(dispatch))
        .route("/client/", any(dispatch))
}

/// Validates `hub` (exactly one, valid name) and the bearer token for the client audience.
pub(crate) fn authorize_client(
    clients: &Clients,
    request: &axum::http::request::Parts,
    query: &Query,
) -> Result<(HubName, VerifiedToken), TextError> {
    authorize_hub(&clients.shared.auth, request, query, "/client/").map_err(|refusal| {
        if let Unauthorized::Token { hub, error } = &refusal {
            let reason = Unauthorized::reason(error);
            clients
                .metrics()
                .client_connections_refused
                .get_or_create(&crate::metrics::ReasonLabel { reason })
                .inc();
            crate::logs::refused(
                &clients.shared.refusals,
                "client",
                Some(hub.as_str()),
                reason,
                &error.to_string(),
                crate::http::client_ip(request, clients.config()),
            );
            if clients.shared.tracer.on() {
                trace_refusal(clients, hub, reason, &error.to_string());
            }
        }
        refusal.into_error()
    })
}

/// A refused token, in the live trace of the hub it asked for.
#[cold]
fn trace_refusal(clients: &Clients, hub: &HubName, reason: &'static str, detail: &str) {
    clients.shared.tracer.emit(hub, || {
        let mut event = crate::live_trace::TraceEvent::new("error");
        event.reason = Some(reason);
        event.detail = Some(detail.to_string());
        event
    });
}

/// The node that holds connection `id`, when it is not this one and the request may be passed
/// on (a request is passed on at most once).
fn elsewhere<'a>(
    clients: &Clients,
    request: &axum::http::request::Parts,
    id: &'a str,
) -> Option<&'a str> {
    let node = crate::cluster::proxy::node_of_key(id)?;
    let pass_on = clients.cluster.in_cluster()
        && node != clients.cluster.node_id().as_str()
        && !request
            .headers
            .contains_key(crate::cluster::proxy::FORWARDED_BY)
        && clients.get(id).is_none();
    pass_on.then_some(node)
}

/// `{base}` requests: WebSocket upgrade, SSE stream, long poll, send, or delete.
async fn dispatch(State(clients): State<Arc<Clients>>, request: Request) -> Response {
    let (mut parts, body) = request.into_parts();
    let query = Query::parse(&parts.uri);
    let (hub, token) = match authorize_client(&clients, &parts, &query) {
        Ok(found) => found,
        Err(error) => return error.into_response(),
    };
    let id = query
        .get("id")
        .filter(|id| !id.is_empty())
        .map(str::to_string);
    if let Some(node) = id.as_deref().and_then(|id| elsewhere(&clients, &parts, id)) {
        let vouched = crate::cluster::assertion::Vouched {
            client: crate::http::client_ip(&parts, clients.config()),
            token,
        };
        let request = Request::from_parts(parts, body);
        let cluster = &clients.cluster;
        return cluster
            .proxy()
            .forward(
                cluster,
                &hub,
                node,
                request,
                &vouched,
                "No Connection with that ID",
            )
            .await;
    }
    if parts.method == Method::GET && is_websocket_upgrade(&parts.headers) {
        let upgrade =
            match axum::extract::WebSocketUpgrade::from_request_parts(&mut parts, &clients).await {
                Ok(upgrade) => upgrade,
                Err(rejection) => return axum::response::IntoResponse::into_response(rejection),
            };
        return websocket::connect(clients, hub, token, id, upgrade, &parts);
    }
    let Some(id) = id else {
        return text_error(StatusCode::BAD_REQUEST, "Connection ID required");
    };
    let source = crate::http::client_ip(&parts, clients.config());
    let Some(client) = clients.get_owned(&id, &hub, &token, source) else {
        return text_error(StatusCode::NOT_FOUND, "No Connection with that ID");
    };
    let wants_sse = parts
        .headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"));
    if parts.method == Method::GET {
        client.set_connect_info(&clients, &parts);
    }
    match parts.method {
        Method::GET if wants_sse => sse::stream(clients, client),
        Method::GET => longpoll::poll(clients, client).await,
        Method::POST => session::send(clients, client, body).await,
        Method::DELETE => longpoll::delete(clients, client),
        _ => text_error(StatusCode::METHOD_NOT_ALLOWED, "Method not allowed"),
    }
}
