//! Cross-origin access for browsers: one middleware in front of every route.
//!
//! The browser SignalR client calls the service from the app's own page, so every request it
//! makes is cross-origin: `fetch` with `credentials: "include"` (its `withCredentials` default)
//! plus `X-Requested-With`, `X-SignalR-User-Agent`, `Authorization` and `Content-Type` headers,
//! which makes the browser send a preflight first. Browsers refuse `Access-Control-Allow-Origin: *`
//! on a credentialed request, so an allowed origin is always echoed back, never `*`.
//!
//! What is sent, for a request carrying `Origin` (see docs/configuration.md, "Browsers and CORS"):
//! - preflight (`OPTIONS` + `Access-Control-Request-Method`) from an allowed origin: `204` with
//!   `Access-Control-Allow-Origin: <origin>`, `Access-Control-Allow-Credentials: true`,
//!   `Access-Control-Allow-Methods`, the requested headers echoed in
//!   `Access-Control-Allow-Headers`, `Access-Control-Max-Age`, and
//!   `Access-Control-Allow-Private-Network: true` when Chrome asks for it;
//! - preflight from any other origin: `403` with a plain-text reason and no CORS headers;
//! - any other request from an allowed origin: the route's response plus
//!   `Access-Control-Allow-Origin: <origin>` and `Access-Control-Allow-Credentials: true`;
//! - any other request from another origin: the route's response without CORS headers (the
//!   browser withholds it from the page), except WebSocket upgrades, which browsers do not
//!   subject to CORS: those are refused with `403`.
//!
//! Every response gets `Vary: Origin` (preflights also vary on the request headers), so a
//! cache never serves one origin's answer to another. Requests without `Origin` are untouched
//! apart from that.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::{self, HeaderMap, HeaderName, HeaderValue};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;

use crate::config::{ConfigError, Cors};
use crate::http::text_error;

/// Methods the service's routes use, offered in preflight answers.
const ALLOWED_METHODS: &str = "GET, POST, DELETE, OPTIONS, HEAD, PUT";
const PREFLIGHT_VARY: &str =
    "Origin, Access-Control-Request-Method, Access-Control-Request-Headers";
/// Chrome's Private Network Access preflight header (a public page calling a local service).
const REQUEST_PRIVATE_NETWORK: &str = "access-control-request-private-network";
const ALLOW_PRIVATE_NETWORK: &str = "access-control-allow-private-network";

/// Which origins may use the service from a browser, resolved once from [`Cors`].
#[derive(Debug)]
pub(crate) struct CorsPolicy {
    any_origin: bool,
    /// Only pages on this machine (development mode without a configured list).
    loopback_only: bool,
    /// Normalized (`scheme://host[:port]`, lower case, default port dropped), or `null`.
    origins: Vec<String>,
    max_age: HeaderValue,
}

impl Cors {
    /// Checks every configured origin; the error names the bad entry.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        for origin in self.allowed_origins.iter().flatten() {
            normalize_origin(origin).map_err(|reason| {
                ConfigError::Invalid(format!(
                    "cors.allowed_origins: '{origin}' is not an origin: {reason} (expected \"*\", \
                     \"null\" or scheme://host[:port], e.g. https://app.example.com)"
                ))
            })?;
        }
        Ok(())
    }
}

/// `*`, `null`, or an origin as browsers write it in the `Origin` header.
fn normalize_origin(text: &str) -> Result<String, String> {
    let text = text.trim();
    if text == "*" || text.eq_ignore_ascii_case("null") {
        return Ok(text.to_ascii_lowercase());
    }
    if !text.contains("://") {
        return Err("no scheme".into());
    }
    let url = url::Url::parse(text).map_err(|e| e.to_string())?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err("an origin has no user name or password".into());
    }
    if !matches!(url.path(), "" | "/") || url.query().is_some() || url.fragment().is_some() {
        return Err("an origin has no path, query or fragment".into());
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("no host".into());
    }
    match url.origin() {
        // http, https, ws, wss (and ftp): the browser's own serialization.
        origin @ url::Origin::Tuple(..) => Ok(origin.ascii_serialization()),
        // Custom schemes (app://, capacitor://, …): compared as written, without the slash.
        url::Origin::Opaque(_) => Ok(text.trim_end_matches('/').to_ascii_lowercase()),
    }
}

impl CorsPolicy {
    pub(crate) fn new(config: &Cors, development_mode: bool) -> CorsPolicy {
        let origins: Vec<String> = config
            .allowed_origins
            .iter()
            .flatten()
            // Validated at start; an entry that still fails to parse matches nothing.
            .filter_map(|o| normalize_origin(o).ok())
            .collect();
        let unset = config.allowed_origins.is_none();
        CorsPolicy {
            any_origin: origins.iter().any(|o| o == "*") || (unset && !development_mode),
            loopback_only: unset && development_mode,
            origins,
            max_age: HeaderValue::from(config.max_age.as_secs()),
        }
    }

    fn allows(&self, origin: &HeaderValue) -> bool {
        if self.any_origin {
            return true;
        }
        let Ok(origin) = origin.to_str() else {
            return false;
        };
        if self.loopback_only {
            return is_loopback_origin(origin);
        }
        self.origins.iter().any(|o| o.eq_ignore_ascii_case(origin))
    }
}

/// Whether an origin is a page on this machine: `localhost`, 127.0.0.0/8 or `[::1]`, any
/// scheme and port.
fn is_loopback_origin(origin: &str) -> bool {
    let Ok(url) = url::Url::parse(origin) else {
        return false;
    };
    match url.host() {
        Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

/// The middleware: answers preflights, decorates responses, refuses foreign WebSockets.
pub(crate) async fn layer(
    State(policy): State<Arc<CorsPolicy>>,
    request: Request,
    next: Next,
) -> Response {
    let Some(origin) = request.headers().get(header::ORIGIN).cloned() else {
        let mut response = next.run(request).await;
        vary_on_origin(response.headers_mut());
        return response;
    };
    let allowed = policy.allows(&origin);
    let preflight = request.method() == Method::OPTIONS
        && request
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    if preflight {
        return if allowed {
            preflight_response(&policy, &origin, request.headers())
        } else {
            refused(&origin, "this origin may not call the service")
        };
    }
    if !allowed && is_websocket_upgrade(request.headers()) {
        return refused(
            &origin,
            "this origin may not open WebSockets to the service",
        );
    }
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    if allowed {
        allow_origin(headers, origin);
    }
    vary_on_origin(headers);
    response
}

fn preflight_response(policy: &CorsPolicy, origin: &HeaderValue, request: &HeaderMap) -> Response {
    let mut response = Response::new(axum::body::Body::empty());
    *response.status_mut() = StatusCode::NO_CONTENT;
    let headers = response.headers_mut();
    allow_origin(headers, origin.clone());
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static(ALLOWED_METHODS),
    );
    // Every header the client asks for: hubs' clients add their own (`headers` option).
    let requested: Vec<&HeaderValue> = request
        .get_all(header::ACCESS_CONTROL_REQUEST_HEADERS)
        .iter()
        .collect();
    if !requested.is_empty() {
        let joined = requested
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .collect::<Vec<_>>()
            .join(", ");
        if let Ok(value) = HeaderValue::from_str(&joined) {
            headers.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, value);
        }
    }
    headers.insert(header::ACCESS_CONTROL_MAX_AGE, policy.max_age.clone());
    if request
        .get(REQUEST_PRIVATE_NETWORK)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"))
    {
        headers.insert(
            HeaderName::from_static(ALLOW_PRIVATE_NETWORK),
            HeaderValue::from_static("true"),
        );
    }
    headers.insert(header::VARY, HeaderValue::from_static(PREFLIGHT_VARY));
    response
}

fn refused(origin: &HeaderValue, what: &str) -> Response {
    let origin = String::from_utf8_lossy(origin.as_bytes());
    let mut response = text_error(
        StatusCode::FORBIDDEN,
        format!(
            "CORS: origin '{origin}' is not allowed: {what} (add it to cors.allowed_origins, \
             SWITCHYARD_CORS_ALLOWED_ORIGINS or --cors-origin)"
        ),
    );
    vary_on_origin(response.headers_mut());
    response
}

fn allow_origin(headers: &mut HeaderMap, origin: HeaderValue) {
    headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
        HeaderValue::from_static("true"),
    );
}

/// Adds `Origin` to `Vary` unless a `Vary` already names it (or is `*`).
fn vary_on_origin(headers: &mut HeaderMap) {
    let covered = headers.get_all(header::VARY).iter().any(|v| {
        v.to_str().is_ok_and(|v| {
            v.split(',')
                .map(str::trim)
                .any(|name| name == "*" || name.eq_ignore_ascii_case("origin"))
        })
    });
    if !covered {
        headers.append(header::VARY, HeaderValue::from_static("Origin"));
    }
}

fn is_websocket_upgrade(headers: &HeaderMap) -> bool {
    headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_normalized_like_browsers_write_them() {
        let ok = |text: &str| normalize_origin(text).unwrap();
        assert_eq!(ok("*"), "*");
        assert_eq!(ok("null"), "null");
        assert_eq!(ok("https://App.Example.com"), "https://app.example.com");
        assert_eq!(ok("https://app.example.com/"), "https://app.example.com");
        assert_eq!(ok("https://app.example.com:443"), "https://app.example.com");
        assert_eq!(ok("http://127.0.0.1:5173"), "http://127.0.0.1:5173");
        assert_eq!(ok("capacitor://localhost"), "capacitor://localhost");
        for bad in [
            "app.example.com",
            "https://app.example.com/path",
            "https://app.example.com?q=1",
            "https://user@app.example.com",
            "https://",
        ] {
            assert!(normalize_origin(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn validation_names_the_bad_entry() {
        let cors = Cors {
            allowed_origins: Some(vec!["https://ok.example".into(), "nope".into()]),
            ..Cors::default()
        };
        let err = cors.validate().unwrap_err().to_string();
        assert!(err.contains("'nope'"), "{err}");
    }

    #[test]
    fn matching() {
        let policy = CorsPolicy::new(
            &Cors {
                allowed_origins: Some(vec![
                    "https://a.example".into(),
                    "http://localhost:3000/".into(),
                ]),
                ..Cors::default()
            },
            true,
        );
        let allows = |o: &'static str| policy.allows(&HeaderValue::from_static(o));
        assert!(allows("https://a.example"));
        assert!(allows("http://localhost:3000"));
        assert!(!allows("http://localhost:3001"));
        assert!(!allows("https://a.example.evil.example"));
        assert!(!allows("null"));
        let any = CorsPolicy::new(&Cors::default(), false);
        assert!(any.allows(&HeaderValue::from_static("https://anything.example")));
        let none = CorsPolicy::new(
            &Cors {
                allowed_origins: Some(vec![]),
                ..Cors::default()
            },
            false,
        );
        assert!(!none.allows(&HeaderValue::from_static("https://a.example")));
        // Development mode without a list: pages on this machine only.
        let local = CorsPolicy::new(&Cors::default(), true);
        for origin in [
            "http://localhost:5173",
            "https://127.0.0.2",
            "http://[::1]:8080",
        ] {
            assert!(local.allows(&HeaderValue::from_static(origin)), "{origin}");
        }
        for origin in [
            "https://evil.example",
            "null",
            "http://localhost.evil.example",
        ] {
            assert!(!local.allows(&HeaderValue::from_static(origin)), "{origin}");
        }
    }

    #[test]
    fn vary_is_added_once() {
        let mut headers = HeaderMap::new();
        vary_on_origin(&mut headers);
        vary_on_origin(&mut headers);
        assert_eq!(headers.get_all(header::VARY).iter().count(), 1);
        let mut headers = HeaderMap::new();
        headers.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
        vary_on_origin(&mut headers);
        let all: Vec<_> = headers.get_all(header::VARY).iter().collect();
        assert_eq!(all, ["Accept-Encoding", "Origin"]);
    }
}
