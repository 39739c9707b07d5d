//! Audience (`aud`) matching for client and REST tokens (spec §2.3, §3, §4.1).
//!
//! The SDKs are inconsistent about what they put into `aud`: the server SDK
//! drops the port, JavaScript samples keep it, the Management SDK appends
//! `?api-version=…[&application=…]`, the REST docs use no query at all. The
//! rule implemented by [`audience_matches`] accepts all of them while still
//! binding a token to one scheme, host, path and hub.

use std::borrow::Cow;

use percent_encoding::percent_decode_str;
use url::{form_urlencoded, Url};

/// The request an audience is checked against.
///
/// For client endpoints pass the canonical connect path `/client/` (also for
/// `/client/negotiate`), since client tokens name `/client/?hub=…`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestTarget<'a> {
    /// `http`, `https`, `ws` or `wss`.
    pub scheme: &'a str,
    /// The `Host` header; may include `:port` (ignored).
    pub host: &'a str,
    /// The raw (percent-encoded) request path.
    pub path: &'a str,
    /// The raw query string, without or with a leading `?`.
    pub query: Option<&'a str>,
}

/// Query keys whose values compare ASCII-case-insensitively (the SDK
/// lower-cases hub and application names).
const CASE_INSENSITIVE_VALUES: [&str; 3] = ["hub", "application", "api-version"];

/// Does `aud` name `request`?
///
/// - `aud` must parse as an absolute URL.
/// - Schemes equal ignoring case, with `ws` ≡ `http` and `wss` ≡ `https`.
/// - Host names equal ignoring case and port; `localhost`, `127.0.0.1` and
///   `[::1]` are all considered the same host.
/// - Paths equal after percent-decoding, ASCII-case-insensitively, ignoring
///   one trailing `/`.
/// - Every `key=value` pair in the query of `aud` must also be in the
///   request query (keys ignore case; values of `hub`, `application`,
///   `api-version` ignore case; both sides percent-decoded). So an `aud`
///   without query matches any query, and the Management SDK's
///   `?api-version=…&application=…` matches a request that also has
///   `excluded=…`.
pub fn audience_matches(aud: &str, request: &RequestTarget<'_>) -> bool {
    audience_matches_strictly(aud, request, &Strictness::default())
}

/// What [`audience_matches_strictly`] checks beyond [`audience_matches`]: for REST paths,
/// some segments are names (users, groups, connections), compared case-sensitively.
///
/// Query keys are not bound beyond the usual rule (those the audience names must match):
/// Azure documents REST audiences as the URL without its query, so such a token stands for
/// the path under any `application`; one that names an application is held to it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Strictness<'a> {
    /// Path segments (0-based, after the leading `/`) compared exactly rather than
    /// ignoring ASCII case.
    pub exact_segments: &'a [usize],
}

/// [`audience_matches`] with the extra checks of `strict`.
pub fn audience_matches_strictly(
    aud: &str,
    request: &RequestTarget<'_>,
    strict: &Strictness<'_>,
) -> bool {
    let Ok(url) = Url::parse(aud.trim()) else {
        return false;
    };
    if canonical_scheme(url.scheme()) != canonical_scheme(request.scheme) {
        return false;
    }
    let Some(aud_host) = url.host_str() else {
        return false;
    };
    if !hosts_equal(aud_host, strip_port(request.host)) {
        return false;
    }
    if !paths_equal_strictly(url.path(), request.path, strict.exact_segments) {
        return false;
    }
    let request_query = request.query.unwrap_or("");
    let request_query = request_query.strip_prefix('?').unwrap_or(request_query);
    let request_pairs: Vec<(Cow<'_, str>, Cow<'_, str>)> =
        form_urlencoded::parse(request_query.as_bytes()).collect();
    url.query_pairs().all(|(key, value)| {
        let ignore_value_case = CASE_INSENSITIVE_VALUES
            .iter()
            .any(|k| k.eq_ignore_ascii_case(&key));
        request_pairs.iter().any(|(rk, rv)| {
            rk.eq_ignore_ascii_case(&key)
                && if ignore_value_case {
                    rv.eq_ignore_ascii_case(&value)
                } else {
                    *rv == value
                }
        })
    })
}

/// The client-token audience for `hub` on `base`:
/// `{scheme}://{host[:port]}/client/?hub={hub lower-cased}`. The port is
/// kept as written in `base` (default ports are never written); the path of
/// `base` is not used. Pass the app-prefixed hub (`{app}_{hub}`) if any.
pub fn client_audience(base: &Url, hub: &str) -> String {
    endpoint_audience(base, "client", hub)
}

/// The server-connection audience: `{scheme}://{host[:port]}/server/?hub={hub lower-cased}`.
pub fn server_audience(base: &Url, hub: &str) -> String {
    endpoint_audience(base, "server", hub)
}

fn endpoint_audience(base: &Url, kind: &str, hub: &str) -> String {
    let mut out = format!("{}://{}", base.scheme(), base.host_str().unwrap_or(""));
    if let Some(port) = base.port() {
        out.push_str(&format!(":{port}"));
    }
    out.push_str(&format!("/{kind}/?hub={}", hub.to_lowercase()));
    out
}

fn canonical_scheme(scheme: &str) -> String {
    let lower = scheme.to_ascii_lowercase();
    match lower.as_str() {
        "ws" => "http".to_owned(),
        "wss" => "https".to_owned(),
        _ => lower,
    }
}

/// `host[:port]` → `host`; `[v6][:port]` → `[v6]`.
fn strip_port(host: &str) -> &str {
    let host = host.trim();
    if host.starts_with('[') {
        return match host.find(']') {
            Some(end) => &host[..=end],
            None => host,
        };
    }
    match host.split_once(':') {
        // Exactly one colon: a port. More colons: a bare IPv6 address.
        Some((name, port)) if !port.contains(':') => name,
        _ => host,
    }
}

fn normalize_host(host: &str) -> String {
    let host = host.trim().trim_end_matches('.').to_ascii_lowercase();
    match host.as_str() {
        "localhost" | "127.0.0.1" | "[::1]" | "::1" => "localhost".to_owned(),
        _ => host,
    }
}

fn hosts_equal(a: &str, b: &str) -> bool {
    !b.is_empty() && normalize_host(a) == normalize_host(b)
}

#[cfg(test)]
fn paths_equal(a: &str, b: &str) -> bool {
    paths_equal_strictly(a, b, &[])
}

/// Paths equal after percent-decoding and ignoring one trailing `/`, segment by segment:
/// ASCII case ignored except in `exact` segments.
fn paths_equal_strictly(a: &str, b: &str, exact: &[usize]) -> bool {
    fn normalized(p: &str) -> Cow<'_, [u8]> {
        let decoded: Cow<'_, [u8]> = percent_decode_str(p).into();
        match decoded {
            Cow::Borrowed(b) => Cow::Borrowed(b.strip_suffix(b"/").unwrap_or(b)),
            Cow::Owned(mut v) => {
                if v.last() == Some(&b'/') {
                    v.pop();
                }
                Cow::Owned(v)
            }
        }
    }
    let (a, b) = (normalized(a), normalized(b));
    let strip = |p: &[u8]| -> Vec<u8> { p.strip_prefix(b"/").unwrap_or(p).to_vec() };
    let (a, b) = (strip(&a), strip(&b));
    let mut left = a.split(|&c| c == b'/');
    let mut right = b.split(|&c| c == b'/');
    let mut index = 0;
    loop {
        match (left.next(), right.next()) {
            (None, None) => return true,
            (Some(x), Some(y)) => {
                let same = if exact.contains(&index) {
                    x == y
                } else {
                    x.eq_ignore_ascii_case(y)
                };
                if !same {
                    return false;
                }
            }
            _ => return false,
        }
        index += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_stripping() {
        assert_eq!(strip_port("example.com:8080"), "example.com");
        assert_eq!(strip_port("example.com"), "example.com");
        assert_eq!(strip_port("[::1]:8888"), "[::1]");
        assert_eq!(strip_port("[::1]"), "[::1]");
        assert_eq!(strip_port("::1"), "::1");
    }

    #[test]
    fn path_rules() {
        assert!(paths_equal("/client/", "/client"));
        assert!(paths_equal("/", ""));
        assert!(paths_equal("/api/hubs/Chat", "/api/hubs/chat/"));
        assert!(paths_equal(
            "/api/hubs/chat/users/a%20b",
            "/api/hubs/chat/users/a b"
        ));
        assert!(!paths_equal("/client/", "/server/"));
        assert!(!paths_equal("/client//", "/client"));
        // Names compare exactly where asked; literals and the hub never do.
        let exact = [4];
        assert!(paths_equal_strictly(
            "/api/hubs/chat/users/alice/:send",
            "/API/hubs/Chat/users/alice/:SEND",
            &exact
        ));
        assert!(!paths_equal_strictly(
            "/api/hubs/chat/users/alice/:send",
            "/api/hubs/chat/users/ALICE/:send",
            &exact
        ));
    }
}
