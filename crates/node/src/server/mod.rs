//! The app-server endpoint `/server/?hub=`: Azure's service protocol over WebSockets.
//!
//! # Layout
//! - here: the route, its checks, and [`AppServers`], the endpoint's state.
//! - `session`: one server connection's task: handshake, reading, writing, keep-alive.
//! - `commands`: what each message from an app server does (one file per kind).
//! - `error`: [`error::LinkError`], why a server connection ended and whose fault it was.

mod commands;
mod error;
mod session;

use std::sync::Arc;

use axum::extract::{FromRequestParts, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;

use crate::default_mode::DefaultMode;
use crate::executor::Executor;
use crate::forward::{Forwarder, FORWARDED_BY};
use crate::http::{authorize_hub, is_websocket_upgrade, text_error, Query, Unauthorized};
use crate::members::node_of_instance;

/// What the app-server endpoint works with.
pub(crate) struct AppServers {
    pub(crate) executor: Arc<Executor>,
    pub(crate) default_mode: Arc<DefaultMode>,
    /// Passes connections whose `target` is another node on to it.
    pub(crate) forwarder: Forwarder,
}

pub(crate) fn routes() -> axum::Router<Arc<AppServers>> {
    axum::Router::new()
        .route("/server", any(connect))
        .route("/server/", any(connect))
}

/// Read buffer of a server connection. tungstenite zero-fills the free part of its read
/// buffer before every read: at its 128 KiB default that memset was 6–7 % of the service's
/// CPU in Default-mode echo (mostly small reads); 16 KiB still takes a burst of 2 KB
/// messages in one read.
const SERVER_READ_BUFFER: usize = 16 * 1024;

/// `GET /server/?hub=&cid=` with a WebSocket upgrade and a server token.
async fn connect(State(app): State<Arc<AppServers>>, request: Request) -> Response {
    let (mut parts, body) = request.into_parts();
    let query = Query::parse(&parts.uri);
    // The SDK recognises only a 401 on the upgrade as an auth failure.
    let (hub, token) = match authorize_hub(app.executor.auth(), &parts, &query, "/server/") {
        Ok(found) => found,
        Err(refusal) => {
            if let Unauthorized::Token { hub, error } = &refusal {
                crate::logs::refused(
                    app.executor.refusal_log(),
                    "server",
                    Some(hub.as_str()),
                    Unauthorized::reason(error),
                    &error.to_string(),
                    crate::http::client_ip(&parts, app.executor.config()),
                );
            }
            return refusal.into_error().into_response();
        }
    };
    if parts.method != Method::GET || !is_websocket_upgrade(&parts.headers) {
        return text_error(
            StatusCode::BAD_REQUEST,
            "app servers connect with a WebSocket upgrade (GET /server/?hub=…)",
        );
    }
    // The token decides who the app server is; the header may only repeat it (the SDK sends
    // both), so a holder of one server's token cannot take another server's sticky clients.
    let header_id = parts
        .headers
        .get("x-asrs-server-id")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty());
    let server_id: Arc<str> = match (token.claim("nameid"), header_id) {
        (Some(nameid), Some(header)) if nameid != header => {
            return text_error(
                StatusCode::UNAUTHORIZED,
                format!(
                    "X-ASRS-Server-Id '{header}' is not the server id the token names ('{nameid}')"
                ),
            );
        }
        (Some(id), _) | (None, Some(id)) => Arc::from(id),
        (None, None) => Arc::from(switchyard_auth::generate_connection_token()),
    };
    // `target`: the SDK opens this OnDemand connection because a node asked it to connect to
    // that instance. Behind a load balancer it may land anywhere: pass it on to its node.
    let mut refusal = None;
    let in_cluster = app.executor.in_cluster();
    if let Some(target) = query.get("target").filter(|t| in_cluster && !t.is_empty()) {
        let members = app.executor.members();
        if target != members.instance() {
            let node = node_of_instance(target).filter(|node| {
                *node != members.node()
                    && !parts.headers.contains_key(FORWARDED_BY)
                    && members.instance_of(node).as_deref() == Some(target)
            });
            if let Some(node) = node {
                let node = node.to_string();
                let request = Request::from_parts(parts, body);
                let metrics = app.executor.metrics();
                return app
                    .forwarder
                    .forward(
                        &app.executor,
                        metrics,
                        &hub,
                        &node,
                        request,
                        "The target service instance cannot be reached.",
                    )
                    .await;
            }
            refusal = Some(format!(
                "Service instance '{target}' is not in this cluster (this is '{}').",
                members.instance()
            ));
        }
    }
    // Passed on by another node (only in a cluster: elsewhere the header means nothing).
    let through = parts
        .headers
        .get(FORWARDED_BY)
        .filter(|_| in_cluster)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.chars().take(64).collect::<String>().into_boxed_str());
    let cid = query
        .get("cid")
        .filter(|c| !c.is_empty() && c.len() <= 128)
        .map(str::to_string)
        .unwrap_or_else(switchyard_auth::generate_connection_token);
    // Counted from before the upgrade, so a flood of app-server sockets is refused while it
    // is still cheap; the SDK retries a refused connect with backoff.
    let slot = match app.default_mode.take_server_slot(&hub) {
        Ok(slot) => slot,
        Err(why) => {
            // Through the refusals' gate: a fleet retrying against a full node repeats it.
            if let Some(suppressed) = app.executor.refusal_log().admit() {
                tracing::warn!(hub = %hub, server = %server_id, suppressed, "app server refused: {why}");
            }
            let mut response = text_error(StatusCode::TOO_MANY_REQUESTS, why);
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
            return response;
        }
    };
    let upgrade = match axum::extract::WebSocketUpgrade::from_request_parts(&mut parts, &app).await
    {
        Ok(upgrade) => upgrade,
        Err(rejection) => return rejection.into_response(),
    };
    let max = app.executor.config().limits.max_server_message_size;
    upgrade
        .read_buffer_size(SERVER_READ_BUFFER)
        .max_message_size(max.saturating_mul(2))
        .max_frame_size(max.saturating_mul(2))
        .on_upgrade(move |socket| {
            session::run(app, socket, hub, server_id, cid, refusal, through, slot)
        })
}
