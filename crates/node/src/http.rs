//! Small HTTP helpers shared by the client endpoint and the REST API.

use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use switchyard_auth::{
    audience_matches, verify_token, AccessKeys, AuthError, RequestTarget, VerifiedToken,
};
use switchyard_core::clock::unix_now;
use switchyard_core::HubName;

/// Query pairs, percent-decoded, in order (keys may repeat, e.g. `excluded`).
pub(crate) struct Query(pub Vec<(String, String)>);

impl Query {
    pub(crate) fn parse(uri: &Uri) -> Query {
        Query(
            url::form_urlencoded::parse(uri.query().unwrap_or("").as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }

    /// First value of a key, matched case-insensitively (ASP.NET reads query keys that way).
    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v.as_str())
    }

    pub(crate) fn all<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.0
            .iter()
            .filter(move |(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v.as_str())
    }

    pub(crate) fn count(&self, key: &str) -> usize {
        self.all(key).count()
    }
}

/// A plain-text error response, the shape SignalR clients expect from the client endpoint.
pub(crate) fn text_error(status: StatusCode, message: impl Into<String>) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        message.into(),
    )
        .into_response()
}

/// A plain-text error as a value, so fallible helpers stay small; converts into a response.
#[derive(Debug)]
pub(crate) struct TextError {
    pub(crate) status: StatusCode,
    pub(crate) message: String,
}

impl TextError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        TextError {
            status,
            message: message.into(),
        }
    }
}

impl IntoResponse for TextError {
    fn into_response(self) -> Response {
        text_error(self.status, self.message)
    }
}

/// The bearer token from `Authorization`, else from the `access_token` query parameter.
pub(crate) fn bearer_token<'a>(headers: &'a HeaderMap, query: &'a Query) -> Option<&'a str> {
    let from_header = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, token) = v.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        })
        .filter(|t| !t.is_empty());
    from_header.or_else(|| query.get("access_token").filter(|t| !t.is_empty()))
}

/// Whether the request asks for a WebSocket upgrade.
pub(crate) fn is_websocket_upgrade(headers: &HeaderMap) -> bool {
    headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

/// Scheme and host the client used, for audience checks (`X-Forwarded-*` from a proxy first).
pub(crate) fn request_origin(headers: &HeaderMap, uri: &Uri) -> (String, String) {
    let header_text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.split(',').next().unwrap_or("").trim().to_string())
            .filter(|v| !v.is_empty())
    };
    let scheme = header_text("x-forwarded-proto")
        .or_else(|| uri.scheme_str().map(str::to_string))
        .unwrap_or_else(|| "http".to_string());
    let host = header_text("x-forwarded-host")
        .or_else(|| header_text("host"))
        .or_else(|| uri.authority().map(|a| a.to_string()))
        .unwrap_or_default();
    (scheme, host)
}

/// Verifies a bearer token whose audience must match `path` + `query` on this host.
pub(crate) fn authenticate(
    keys: &AccessKeys,
    token: Option<&str>,
    headers: &HeaderMap,
    uri: &Uri,
    path: &str,
    query: Option<&str>,
) -> Result<VerifiedToken, AuthError> {
    let token = token.ok_or_else(|| AuthError::Malformed("no access token was given".into()))?;
    let (scheme, host) = request_origin(headers, uri);
    let target = RequestTarget {
        scheme: &scheme,
        host: &host,
        path,
        query,
    };
    verify_token(token, keys, unix_now(), |aud| {
        audience_matches(aud, &target)
    })
}

/// The hub endpoints' common check (`/client/`, `/server/`): exactly one valid `hub`, and a
/// bearer token whose audience is `{path}?hub={hub}` on this host.
pub(crate) fn authorize_hub(
    keys: &AccessKeys,
    request: &axum::http::request::Parts,
    query: &Query,
    path: &str,
) -> Result<(HubName, VerifiedToken), TextError> {
    if query.count("hub") != 1 {
        return Err(TextError::new(
            StatusCode::BAD_REQUEST,
            "exactly one 'hub' query parameter is required",
        ));
    }
    let hub = HubName::new(query.get("hub").unwrap_or_default(), None)
        .map_err(|e| TextError::new(StatusCode::BAD_REQUEST, e.to_string()))?;
    let audience_query = format!("hub={}", hub.as_str());
    let token = authenticate(
        keys,
        bearer_token(&request.headers, query),
        &request.headers,
        &request.uri,
        path,
        Some(&audience_query),
    )
    .map_err(|e| TextError::new(StatusCode::UNAUTHORIZED, e.to_string()))?;
    Ok((hub, token))
}
