//! The app server's HTTP side: `POST /{hub}/negotiate` answers with the redirect to the
//! service (spec §2.1). CORS is permissive (origin echoed, credentials allowed) so that
//! browser clients can negotiate too.

use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
use switchyard_client::app_server::{AppServerHandle, NegotiateError};
use url::form_urlencoded;

/// The router serving `/{hub}/negotiate` for `handle`'s hubs.
pub fn router(handle: AppServerHandle) -> Router {
    Router::new()
        .route("/{hub}/negotiate", any(negotiate))
        .with_state(handle)
}

async fn negotiate(
    State(handle): State<AppServerHandle>,
    method: Method,
    Path(hub): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let mut response = if method == Method::OPTIONS {
        preflight(&headers)
    } else if method == Method::POST {
        redirect(&handle, &hub, query.as_deref().unwrap_or(""))
    } else {
        (
            StatusCode::METHOD_NOT_ALLOWED,
            [(header::ALLOW, "POST, OPTIONS")],
        )
            .into_response()
    };
    cors(&headers, response.headers_mut());
    response
}

fn redirect(handle: &AppServerHandle, hub: &str, query: &str) -> Response {
    let user = form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == "user")
        .map(|(_, v)| v.into_owned())
        .filter(|v| !v.is_empty());
    match handle.negotiate(hub, query, user.as_deref()) {
        Ok(redirect) => (
            [(header::CONTENT_TYPE, "application/json")],
            redirect.to_json().to_string(),
        )
            .into_response(),
        Err(NegotiateError::UnknownHub(_)) => StatusCode::NOT_FOUND.into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            e.to_string(),
        )
            .into_response(),
    }
}

fn preflight(request: &HeaderMap) -> Response {
    let mut response = StatusCode::NO_CONTENT.into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("POST, OPTIONS"),
    );
    if let Some(requested) = request.get(header::ACCESS_CONTROL_REQUEST_HEADERS) {
        headers.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, requested.clone());
    }
    headers.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static("600"),
    );
    response
}

/// Echoes `Origin` and allows credentials, as ASP.NET's `AllowCredentials()` with an
/// origin predicate accepting everything does.
fn cors(request: &HeaderMap, response: &mut HeaderMap) {
    if let Some(origin) = request.get(header::ORIGIN) {
        response.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
        response.insert(
            header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
            HeaderValue::from_static("true"),
        );
        response.append(header::VARY, HeaderValue::from_static("Origin"));
    }
}
