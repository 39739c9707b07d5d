//! `POST /client/negotiate?hub=`: creates a connection and tells the client how to reach it.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::{authorize_client, create_client, Clients, Transport};
use crate::http::{client_ip, text_error, Query};

pub(super) async fn negotiate(State(clients): State<Arc<Clients>>, request: Request) -> Response {
    let (parts, _body) = request.into_parts();
    if parts.method != Method::POST {
        return text_error(StatusCode::METHOD_NOT_ALLOWED, "negotiate requires POST");
    }
    let query = Query::parse(&parts.uri);
    let (hub, token) = match authorize_client(&clients, &parts, &query) {
        Ok(found) => found,
        Err(error) => return error.into_response(),
    };
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
    let allowed = token.allowed_transports().unwrap_or(0b111);
    let source = client_ip(&parts, clients.config());
    let client = match create_client(&clients, &hub, token, version >= 1, source) {
        Ok(client) => client,
        Err(error) => return error.into_response(),
    };
    let id = client.connection.id().as_str();
    json_body(negotiate_response(version, id, &client.key, allowed))
}

/// The body in the exact field order ASP.NET Core writes.
fn negotiate_response(version: i64, id: &str, token: &str, allowed: u8) -> serde_json::Value {
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
