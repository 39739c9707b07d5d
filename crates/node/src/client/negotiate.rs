//! `POST /client/negotiate?hub=`: creates a connection and tells the client how to reach it.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use switchyard_auth::VerifiedToken;
use switchyard_core::HubName;

use super::{authorize_client, create_client, throttle_connect, Clients, Transport};
use crate::http::{client_ip, text_error, Query, TextError};

pub(super) async fn negotiate(State(clients): State<Arc<Clients>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    if parts.method != Method::POST {
        return text_error(StatusCode::METHOD_NOT_ALLOWED, "negotiate requires POST");
    }
    let _negotiating = match clients.shared.throttle.negotiate(clients.metrics()) {
        Ok(negotiating) => negotiating,
        Err(refusal) => return TextError::throttled(refusal).into_response(),
    };
    let query = Query::parse(&parts.uri);
    let (hub, token) = match authorize_client(&clients, &parts, &query) {
        Ok(found) => found,
        Err(error) => return error.into_response(),
    };
    // After the token check, so that requests nobody signed cannot spend the allowance.
    if let Err(error) = throttle_connect(&clients, &parts) {
        return error.into_response();
    }
    let version = match query.get("negotiateVersion") {
        None => 0,
        Some(text) => match text.parse::<i32>() {
            Ok(v) if v < 0 => {
                return json_body(json!({"error": format!(
                    "The client requested version '{v}', but the server does not support this version."
                )}))
            }
            Ok(v) => i64::from(v.min(1)),
            Err(_) => {
                return json_body(
                    json!({"error": "The client requested a non-integer protocol version."}),
                )
            }
        },
    };
    if let Some(node) = better_node(&clients, &parts, &hub, &token) {
        // The connection is made there, its key names that node, and every later request of
        // it is passed on there, whichever node the balancer picks. A negotiate has no body,
        // so when that node cannot be reached (gone, not yet counted gone) it is made here.
        let copy = Request::from_parts(parts.clone(), axum::body::Body::empty());
        drop(body);
        let cluster = &clients.cluster;
        let vouched = crate::cluster::assertion::Vouched {
            client: client_ip(&parts, clients.config()),
            token: token.clone(),
        };
        if let Some(response) = cluster
            .proxy()
            .try_forward(cluster, &hub, &node, copy, &vouched)
            .await
        {
            return response;
        }
    }
    let allowed = token.allowed_transports().unwrap_or(0b111);
    let stateful = offers_stateful_reconnect(&clients, &query, &hub, &token);
    let source = client_ip(&parts, clients.config());
    let client = match create_client(&clients, &hub, token, version >= 1, source) {
        Ok(client) => client,
        Err(error) => return error.into_response(),
    };
    if stateful {
        client.offer_stateful_reconnect();
    }
    let id = client.connection.id().as_str();
    json_body(negotiate_response(
        version,
        id,
        &client.key,
        allowed,
        stateful,
    ))
}

/// Whether the client asked for stateful reconnect and gets it: the service allows it and,
/// for a Default-mode client, an app server of its hub on this node does too (the app
/// server then never notices a reconnect: the service replays, see `resume`).
fn offers_stateful_reconnect(
    clients: &Clients,
    query: &crate::http::Query,
    hub: &HubName,
    token: &VerifiedToken,
) -> bool {
    let asked = query
        .get("useStatefulReconnect")
        .is_some_and(|value| value.eq_ignore_ascii_case("true"));
    asked
        && clients.config().stateful_reconnect.enabled
        && (!clients.serves_default_mode(hub, token)
            || clients.default_mode.servers.allow_stateful_reconnects(hub))
}

/// In a cluster, another node that can serve a Default-mode client this node cannot: this
/// node has no connection from an app server the client may use (the app server declined to
/// connect here, e.g. at its `MaxHubServerConnectionCount`), another node has a direct one.
fn better_node(
    clients: &Clients,
    parts: &axum::http::request::Parts,
    hub: &HubName,
    token: &VerifiedToken,
) -> Option<String> {
    if !clients.cluster.in_cluster()
        || parts
            .headers
            .contains_key(crate::cluster::proxy::FORWARDED_BY)
        || !clients.serves_default_mode(hub, token)
    {
        return None;
    }
    let sticky = token.claim("asrs.s.sn");
    let required = token
        .claim("asrs.s.ssticky")
        .is_some_and(|mode| mode.eq_ignore_ascii_case("required"));
    if clients.default_mode.can_serve(hub, sticky, required) {
        return None;
    }
    let server = if required { sticky } else { None };
    clients.cluster.members().node_serving(hub, server)
}

/// The body in the exact field order ASP.NET Core writes.
fn negotiate_response(
    version: i64,
    id: &str,
    token: &str,
    allowed: u8,
    stateful: bool,
) -> serde_json::Value {
    let mut transports = Vec::new();
    for (transport, formats) in [
        (Transport::WebSockets, &["Text", "Binary"][..]),
        (Transport::ServerSentEvents, &["Text"][..]),
        (Transport::LongPolling, &["Text", "Binary"][..]),
    ] {
        if allowed & transport as u8 != 0 {
            transports.push(json!({"transport": transport.name(), "transferFormats": formats}));
        }
    }
    let mut body = serde_json::Map::new();
    // First, as ASP.NET writes it; absent when off.
    if stateful {
        body.insert("useStatefulReconnect".into(), json!(true));
    }
    body.insert("negotiateVersion".into(), json!(version));
    body.insert("connectionId".into(), json!(id));
    if version >= 1 {
        body.insert("connectionToken".into(), json!(token));
    }
    body.insert("availableTransports".into(), json!(transports));
    serde_json::Value::Object(body)
}

fn json_body(value: serde_json::Value) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        value.to_string(),
    )
        .into_response()
}
