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

/// What the service itself knows of how a client reached it, for the app server's
/// `X-Forwarded-*` headers: the client's computed address ([`client_ip`]), the host it asked
/// for and whether it came over TLS. Nothing here is the client's own say.
pub(crate) struct ClientOrigin {
    pub(crate) address: Option<std::net::IpAddr>,
    pub(crate) host: Option<String>,
    pub(crate) proto: &'static str,
}

impl ClientOrigin {
    /// The host is `Host` (HTTP/2: the authority) as this node saw it, never an
    /// `X-Forwarded-Host`: the documented nginx passes the client's `Host` and leaves a
    /// client's `X-Forwarded-Host` as it came. The scheme is a trusted proxy's last
    /// `X-Forwarded-Proto` value (the one the nearest proxy set; nginx's `$scheme` replaces the
    /// client's), else this listener's.
    pub(crate) fn of(request: &axum::http::request::Parts, config: &ValidConfig) -> ClientOrigin {
        let trusted = request
            .extensions
            .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
            .is_some_and(|info| config.is_trusted_proxy(info.0.ip()));
        let host = match request.headers.get(header::HOST) {
            Some(value) => value
                .to_str()
                .ok()
                .filter(|host| is_authority(host))
                .map(str::to_string),
            None => request.uri.authority().map(|a| a.as_str().to_string()),
        };
        let proxy_proto = trusted
            .then(|| last_value(&request.headers, "x-forwarded-proto"))
            .flatten()
            .and_then(|proto| {
                ["http", "https"]
                    .into_iter()
                    .find(|known| proto.eq_ignore_ascii_case(known))
            });
        ClientOrigin {
            address: client_ip(request, config),
            host,
            proto: proxy_proto.unwrap_or(config.listen_scheme()),
        }
    }
}

/// The last comma-separated entry of a header's last line, trimmed.
fn last_value<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    let line = headers.get_all(name).iter().next_back()?.to_str().ok()?;
    let last = line.rsplit(',').next()?.trim();
    (!last.is_empty()).then_some(last)
}

/// `host[:port]` and nothing else (no user info, path or spaces).
fn is_authority(text: &str) -> bool {
    !text.contains('@')
        && text
            .parse::<axum::http::uri::Authority>()
            .is_ok_and(|a| a.as_str() == text)
}

/// Query parameters never passed on to an app server or an upstream: the credential and the
/// connection token (a secret that lets its holder read the connection; they get the
/// connection id anyway). Matched ignoring case, as ASP.NET reads query keys.
const HIDDEN_QUERY: &[&str] = &["access_token", "id"];

/// A client's query as it may be passed on (`?…`, or empty): every pair but the hidden ones,
/// in order, as sent. Keys are compared decoded (`%5F` and `+` as [`Query::parse`] reads them),
/// since the service itself accepts `access%5Ftoken` as the credential.
pub(crate) fn scrub_query(raw: &str) -> String {
    let kept = raw
        .split('&')
        .filter(|pair| {
            let key = url::form_urlencoded::parse(pair.as_bytes())
                .next()
                .map(|(key, _)| key);
            !pair.is_empty()
                && !key.is_some_and(|key| HIDDEN_QUERY.iter().any(|h| h.eq_ignore_ascii_case(&key)))
        })
        .collect::<Vec<_>>()
        .join("&");
    if kept.is_empty() {
        String::new()
    } else {
        format!("?{kept}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_keys_are_matched_decoded_and_kept_pairs_as_sent() {
        assert_eq!(
            scrub_query("hub=a&access%5Ftoken=t&%69D=x&Id&=&keep=a%20b+c&&acc%65ss+token=y"),
            "?hub=a&=&keep=a%20b+c&acc%65ss+token=y"
        );
        assert_eq!(scrub_query("access_token=t&id=1"), "");
    }

    fn origin(peer: &str, pairs: &[(&str, &str)], trusted: &[&str]) -> ClientOrigin {
        let mut builder = axum::http::Request::builder().uri("/client/?hub=chat");
        for (name, value) in pairs {
            builder = builder.header(*name, *value);
        }
        let (mut parts, ()) = builder.body(()).unwrap().into_parts();
        let peer: std::net::SocketAddr = peer.parse().unwrap();
        parts.extensions.insert(axum::extract::ConnectInfo(peer));
        let config = crate::config::Config {
            trusted_proxies: trusted.iter().map(|t| t.to_string()).collect(),
            ..Default::default()
        };
        ClientOrigin::of(&parts, &config.validate().unwrap())
    }

    #[test]
    fn the_origin_is_what_the_service_saw() {
        let forged = [
            ("host", "svc.example:8888"),
            ("x-forwarded-for", "6.6.6.6, 10.1.1.1"),
            ("x-forwarded-host", "evil.example"),
            ("x-forwarded-proto", "https"),
        ];
        let direct = origin("10.0.0.9:1", &forged, &[]);
        assert_eq!(direct.address, Some("10.0.0.9".parse().unwrap()));
        assert_eq!(direct.host.as_deref(), Some("svc.example:8888"));
        assert_eq!(direct.proto, "http");
        let proxied = origin("10.0.0.9:1", &forged, &["10.0.0.9"]);
        assert_eq!(proxied.address, Some("10.1.1.1".parse().unwrap()));
        assert_eq!(proxied.host.as_deref(), Some("svc.example:8888"));
        assert_eq!(proxied.proto, "https");
        let odd = origin(
            "10.0.0.9:1",
            &[("host", "a b"), ("x-forwarded-proto", "https, ftp")],
            &["10.0.0.9"],
        );
        assert_eq!(odd.host, None);
        assert_eq!(odd.proto, "http");
    }
}
