//! The app-server endpoint `/server/?hub=`: the WebSocket upgrade, its checks, and passing
//! a connection that names another node on to it.

use std::sync::Arc;

use axum::extract::{FromRequestParts, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use switchyard_auth::VerifiedToken;
use switchyard_core::HubName;

use super::session::{self, Aim};
use super::AppServers;
use crate::auth::{authorize_hub, Unauthorized};
use crate::budget::Slot;
use crate::cluster::members::node_of_instance;
use crate::cluster::proxy::FORWARDED_BY;
use crate::config::ServiceMode;
use crate::http::{is_websocket_upgrade, text_error, Query};

/// Read buffer of a server connection. tungstenite zero-fills the free part of its read
/// buffer before every read: at its 128 KiB default that memset was 6–7 % of the service's
/// CPU in Default-mode echo (mostly small reads); 16 KiB still takes a burst of 2 KB
/// messages in one read.
const SERVER_READ_BUFFER: usize = 16 * 1024;

/// `GET /server/?hub=&cid=` with a WebSocket upgrade and a server token.
pub(super) async fn connect(State(app): State<Arc<AppServers>>, request: Request) -> Response {
    let (mut parts, body) = request.into_parts();
    let query = Query::parse(&parts.uri);
    // The SDK recognises only a 401 on the upgrade as an auth failure.
    let (hub, token) = match authorize_hub(&app.shared.auth, &parts, &query, "/server/") {
        Ok(found) => found,
        Err(refusal) => {
            if let Unauthorized::Token { hub, error } = &refusal {
                crate::logs::refused(
                    &app.shared.refusals,
                    "server",
                    Some(hub.as_str()),
                    Unauthorized::reason(error),
                    &error.to_string(),
                    crate::http::client_ip(&parts, &app.shared.config),
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
    let server_id = match server_id(&token, &parts.headers) {
        Ok(id) => id,
        Err(why) => return text_error(StatusCode::UNAUTHORIZED, why),
    };
    // `target`: the SDK opens this OnDemand connection because a node asked it to connect to
    // that instance. Behind a load balancer it may land anywhere: kept here when this node
    // lacks that app server too, else passed on to its node.
    let in_cluster = app.cluster.in_cluster();
    let target = query.get("target").filter(|t| in_cluster && !t.is_empty());
    let mut adopted_slot = None;
    let aim = match target.map(|target| (target, target_node(&app, target, &parts.headers))) {
        Some((target, TargetNode::Elsewhere(node))) => {
            match keep_here(&app, &hub, &server_id, target, &node) {
                Some((aim, slot)) => {
                    adopted_slot = Some(slot);
                    aim
                }
                None => {
                    let vouched = crate::cluster::assertion::Vouched {
                        client: crate::http::client_ip(&parts, &app.shared.config),
                        token,
                    };
                    let request = Request::from_parts(parts, body);
                    let unreachable = "The target service instance cannot be reached.";
                    let proxy = app.cluster.proxy();
                    return proxy
                        .forward(&app.cluster, &hub, &node, request, &vouched, unreachable)
                        .await;
                }
            }
        }
        Some((_, TargetNode::Unknown(why))) => Aim::Refused(why),
        Some((_, TargetNode::Here)) | None => Aim::Here,
    };
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
    let slot = match adopted_slot.map_or_else(|| app.default_mode.take_server_slot(&hub), Ok) {
        Ok(slot) => slot,
        Err(why) => return full(&app, &hub, &server_id, why),
    };
    let upgrade = match axum::extract::WebSocketUpgrade::from_request_parts(&mut parts, &app).await
    {
        Ok(upgrade) => upgrade,
        Err(rejection) => return rejection.into_response(),
    };
    let max = app.shared.config.limits.max_server_message_size;
    upgrade
        .read_buffer_size(SERVER_READ_BUFFER)
        .max_message_size(max.saturating_mul(2))
        .max_frame_size(max.saturating_mul(2))
        .on_upgrade(move |socket| {
            session::run(app, socket, hub, server_id, cid, aim, through, slot)
        })
}

/// Whether an OnDemand connection for `node` (instance `target`) is kept here rather than
/// passed on, and its place under the limits if so. The balancer picks blindly: passed on,
/// it would leave this node to be asked for again (and its connection would hang on the
/// other node's fate).
fn keep_here(
    app: &AppServers,
    hub: &HubName,
    server_id: &Arc<str>,
    target: &str,
    node: &str,
) -> Option<(Aim, Slot<HubName>)> {
    if app.shared.config.mode == ServiceMode::Serverless || app.cluster.members().is_leaving() {
        return None;
    }
    let adopting = app.default_mode.start_adopting(hub, server_id)?;
    let slot = app.default_mode.server_slots.take(hub).ok()?;
    tracing::debug!(hub = %hub, server = %server_id, instead_of = %node,
        "an OnDemand connection for another node is kept: this node lacks one");
    let aim = Aim::Adopted {
        target: target.to_string(),
        _adopting: adopting,
    };
    Some((aim, slot))
}

/// Who the app server is: the token decides; the header may only repeat it (the SDK sends
/// both), so a holder of one server's token cannot take another server's sticky clients.
fn server_id(token: &VerifiedToken, headers: &HeaderMap) -> Result<Arc<str>, String> {
    let header_id = headers
        .get("x-asrs-server-id")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty());
    match (token.claim("nameid"), header_id) {
        (Some(nameid), Some(header)) if nameid != header => Err(format!(
            "X-ASRS-Server-Id '{header}' is not the server id the token names ('{nameid}')"
        )),
        (Some(id), _) | (None, Some(id)) => Ok(Arc::from(id)),
        (None, None) => Ok(Arc::from(switchyard_auth::generate_connection_token())),
    }
}

/// Where a connection naming the instance `target` belongs.
enum TargetNode {
    Here,
    /// That node's, and this connection was not passed on already: pass it on.
    Elsewhere(String),
    /// No live node of the cluster runs that instance: told in the handshake response.
    Unknown(String),
}

fn target_node(app: &AppServers, target: &str, headers: &HeaderMap) -> TargetNode {
    let members = app.cluster.members();
    if target == members.instance() {
        return TargetNode::Here;
    }
    let node = node_of_instance(target).filter(|node| {
        *node != members.node()
            && !headers.contains_key(FORWARDED_BY)
            && members.instance_of(node).as_deref() == Some(target)
    });
    match node {
        Some(node) => TargetNode::Elsewhere(node.to_string()),
        None => TargetNode::Unknown(format!(
            "Service instance '{target}' is not in this cluster (this is '{}').",
            members.instance()
        )),
    }
}

/// The node holds its maximum of app-server connections: 429, retry later.
fn full(app: &AppServers, hub: &HubName, server_id: &str, why: String) -> Response {
    // Through the refusals' gate: a fleet retrying against a full node repeats it.
    if let Some(suppressed) = app.shared.refusals.admit() {
        tracing::warn!(hub = %hub, server = %server_id, suppressed, "app server refused: {why}");
    }
    let mut response = text_error(StatusCode::TOO_MANY_REQUESTS, why);
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
    response
}
