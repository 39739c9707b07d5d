//! Which pages may open the admin hub. WebSockets are not subject to CORS, so a page of another
//! site that an operator visits could otherwise open the hub (in development mode without any
//! token); the hub compares the browser's `Origin` with the addresses the request was sent to.
//!
//! Accepted: the origin of `public_endpoint`; the request's `Host`, where a missing port means
//! the origin scheme's default (a balancer with nginx's `Host $host` drops the port, and a
//! browser omits a default one); and, from one of `trusted_proxies` only, the address its
//! `X-Forwarded-Host`, `X-Forwarded-Port` and `X-Forwarded-Proto` name.

use axum::http::header::{HeaderMap, HOST, ORIGIN};
use axum::http::request::Parts;
use axum::http::uri::Authority;

use crate::config::ValidConfig;

/// Whether the request may open the admin hub: it comes from a page of the dashboard's own
/// site, or from no browser at all (no `Origin`).
pub(super) fn allowed(request: &Parts, config: &ValidConfig) -> bool {
    let Some(origin) = request.headers.get(ORIGIN) else {
        return true;
    };
    let Some(origin) = origin.to_str().ok().and_then(Origin::parse) else {
        return false;
    };
    let endpoint = config.public_endpoint.as_deref().and_then(Origin::parse);
    if endpoint.as_ref() == Some(&origin) {
        return true;
    }
    let from_proxy = peer_is_trusted(request, config);
    addresses(request, from_proxy)
        .iter()
        .any(|address| address.names(&origin))
}

/// A web origin: scheme, host (lower case, IPv6 in brackets) and port (the scheme's default
/// when the URL has none).
#[derive(Debug, PartialEq, Eq)]
struct Origin {
    scheme: String,
    host: String,
    port: u16,
}

impl Origin {
    fn parse(text: &str) -> Option<Origin> {
        let url = url::Url::parse(text).ok()?;
        Some(Origin {
            scheme: url.scheme().to_string(),
            host: url.host_str()?.to_ascii_lowercase(),
            port: url.port_or_known_default()?,
        })
    }
}

/// An address the request says it was sent to; what it leaves out matches the origin's own.
#[derive(Clone, Debug)]
struct Address {
    host: String,
    port: Option<u16>,
    scheme: Option<String>,
}

impl Address {
    fn parse(authority: &str) -> Option<Address> {
        let authority = authority.trim().parse::<Authority>().ok()?;
        Some(Address {
            host: authority.host().to_ascii_lowercase(),
            port: authority.port_u16(),
            scheme: None,
        })
    }

    fn names(&self, origin: &Origin) -> bool {
        let scheme = self.scheme.as_deref().unwrap_or(&origin.scheme);
        let port = self.port.or_else(|| default_port(scheme));
        self.host == origin.host && scheme == origin.scheme && port == Some(origin.port)
    }
}

fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "http" | "ws" => Some(80),
        "https" | "wss" => Some(443),
        _ => None,
    }
}

/// `Host` (HTTP/2: the request's authority), and with `from_proxy` the address the
/// `X-Forwarded-*` headers name (each header's first value: the one the client-facing proxy
/// set).
fn addresses(request: &Parts, from_proxy: bool) -> Vec<Address> {
    let headers = &request.headers;
    let host = match headers.get(HOST) {
        Some(value) => value.to_str().ok().and_then(Address::parse),
        None => request
            .uri
            .authority()
            .and_then(|a| Address::parse(a.as_str())),
    };
    let mut found = Vec::new();
    if from_proxy {
        let forwarded = first_value(headers, "x-forwarded-host").and_then(Address::parse);
        let port = first_value(headers, "x-forwarded-port").and_then(|p| p.parse::<u16>().ok());
        let scheme = first_value(headers, "x-forwarded-proto").map(|s| s.to_ascii_lowercase());
        if let Some(base) = forwarded.or_else(|| host.clone()) {
            found.push(Address {
                port: base.port.or(port),
                scheme,
                host: base.host,
            });
        }
    }
    found.extend(host);
    found
}

fn first_value<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    let value = headers.get(name)?.to_str().ok()?;
    let first = value.split(',').next()?.trim();
    (!first.is_empty()).then_some(first)
}

fn peer_is_trusted(request: &Parts, config: &ValidConfig) -> bool {
    request
        .extensions
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .is_some_and(|info| config.is_trusted_proxy(info.0.ip()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(pairs: &[(&str, &str)]) -> Parts {
        let mut builder = axum::http::Request::builder().uri("/dashboard/hub");
        for (name, value) in pairs {
            builder = builder.header(*name, *value);
        }
        builder.body(()).unwrap().into_parts().0
    }

    fn names(pairs: &[(&str, &str)], from_proxy: bool, origin: &str) -> bool {
        let origin = Origin::parse(origin).unwrap();
        addresses(&request(pairs), from_proxy)
            .iter()
            .any(|address| address.names(&origin))
    }

    #[test]
    fn a_host_names_its_origin_with_or_without_the_default_port() {
        let host = |value| [("host", value)];
        assert!(names(
            &host("a.example:8080"),
            false,
            "http://a.example:8080"
        ));
        assert!(names(&host("A.Example"), false, "https://a.example"));
        assert!(names(&host("a.example:443"), false, "https://a.example"));
        assert!(names(&host("a.example"), false, "http://a.example:80"));
        assert!(names(&host("[::1]:9000"), false, "http://[::1]:9000"));
        // A port dropped by the balancer is not guessed, nor is another site or port accepted.
        assert!(!names(&host("a.example"), false, "http://a.example:8888"));
        assert!(!names(&host("a.example:80"), false, "https://a.example"));
        assert!(!names(
            &host("a.example:8080"),
            false,
            "http://a.example:8081"
        ));
        assert!(!names(&host("a.example"), false, "http://evil.example"));
        assert!(!names(
            &host("a.example"),
            false,
            "http://a.example.evil.example"
        ));
    }

    #[test]
    fn forwarded_headers_count_only_from_a_trusted_proxy() {
        let dropped_port = [
            ("host", "a.example"),
            ("x-forwarded-port", "8888"),
            ("x-forwarded-proto", "http"),
        ];
        assert!(names(&dropped_port, true, "http://a.example:8888"));
        assert!(!names(&dropped_port, false, "http://a.example:8888"));
        // The proxy's scheme must be the page's.
        assert!(!names(&dropped_port, true, "https://a.example:8888"));
        let renamed = [
            ("host", "switchyard-upstream"),
            ("x-forwarded-host", "signalr.example.com, inner.proxy"),
            ("x-forwarded-proto", "https"),
        ];
        assert!(names(&renamed, true, "https://signalr.example.com"));
        assert!(!names(&renamed, true, "http://signalr.example.com"));
        assert!(!names(&renamed, false, "https://signalr.example.com"));
        assert!(!names(&renamed, true, "https://evil.example"));
    }

    #[test]
    fn an_http2_request_names_its_authority() {
        let parts = axum::http::Request::builder()
            .uri("https://a.example:8443/dashboard/hub")
            .body(())
            .unwrap()
            .into_parts()
            .0;
        let origin = Origin::parse("https://a.example:8443").unwrap();
        assert!(addresses(&parts, false).iter().any(|a| a.names(&origin)));
    }

    #[test]
    fn origins_that_do_not_parse_match_nothing() {
        assert_eq!(Origin::parse("null"), None);
        assert_eq!(Origin::parse("file:///etc/passwd"), None);
        assert_eq!(
            Origin::parse("HTTP://A.example:80"),
            Some(Origin {
                scheme: "http".into(),
                host: "a.example".into(),
                port: 80,
            })
        );
    }
}
