//! Small HTTP helpers shared by the endpoints: query parsing, plain-text errors, upgrades and
//! the client's address.

use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

use crate::config::ValidConfig;

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
    /// `Retry-After`, in seconds.
    pub(crate) retry_after_secs: Option<u64>,
}

impl TextError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        TextError {
            status,
            message: message.into(),
            retry_after_secs: None,
        }
    }

    /// A throttling refusal: 429 for a rate, 503 for work in progress, with `Retry-After`
    /// (SignalR clients do not read it, but proxies and people do).
    pub(crate) fn throttled(refusal: crate::throttle::Refusal) -> Self {
        let status = match refusal.why.is_rate() {
            true => StatusCode::TOO_MANY_REQUESTS,
            false => StatusCode::SERVICE_UNAVAILABLE,
        };
        TextError {
            status,
            message: format!(
                "{}; retry after {} s",
                refusal.why.message(),
                refusal.retry_after_secs
            ),
            retry_after_secs: Some(refusal.retry_after_secs),
        }
    }
}

impl IntoResponse for TextError {
    fn into_response(self) -> Response {
        let mut response = text_error(self.status, self.message);
        if let Some(secs) = self.retry_after_secs {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from(secs));
        }
        response
    }
}

/// Whether the request asks for a WebSocket upgrade.
pub(crate) fn is_websocket_upgrade(headers: &HeaderMap) -> bool {
    headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

/// The client's address that the node which passed a request on computed, as its assertion
/// says (set by `cluster::vouched_layer` once the assertion holds).
#[derive(Clone, Copy, Debug)]
pub(crate) struct VouchedClient(pub(crate) Option<std::net::IpAddr>);

/// The client's address: the socket's peer, or, when the peer is a trusted proxy, the
/// nearest address in `X-Forwarded-For` that is not one; for a request another node passed
/// on, the address that node computed and vouched for (not its `X-Forwarded-For`).
pub(crate) fn client_ip(
    request: &axum::http::request::Parts,
    config: &ValidConfig,
) -> Option<std::net::IpAddr> {
    if let Some(VouchedClient(client)) = request.extensions.get() {
        return *client;
    }
    let peer = request
        .extensions
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|info| crate::config::canonical_ip(info.0.ip()))?;
    if !config.is_trusted_proxy(peer) {
        return Some(peer);
    }
    let forwarded = request
        .headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|item| item.trim().parse::<std::net::IpAddr>().ok())
        .collect::<Vec<_>>();
    Some(
        forwarded
            .into_iter()
            .rev()
            .find(|ip| !config.is_trusted_proxy(*ip))
            .unwrap_or(peer),
    )
}

/// Query parameters never passed on to an app server or an upstream: the credential and the
/// connection token (a secret that lets its holder read the connection; they get the
/// connection id anyway). Matched ignoring case, as ASP.NET reads query keys.
const HIDDEN_QUERY: &[&str] = &["access_token", "id"];

/// A client's query as it may be passed on (`?…`, or empty): every pair but the hidden ones,
/// in order, as sent.
pub(crate) fn scrub_query(raw: &str) -> String {
    let kept = raw
        .split('&')
        .filter(|pair| {
            let key = pair.split('=').next().unwrap_or("");
            !pair.is_empty() && !HIDDEN_QUERY.iter().any(|h| h.eq_ignore_ascii_case(key))
        })
        .collect::<Vec<_>>()
        .join("&");
    if kept.is_empty() {
        String::new()
    } else {
        format!("?{kept}")
    }
}
