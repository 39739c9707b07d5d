//! Development mode's `Host` check. Without a key the service trusts every page on this machine
//! (the Emulator's key is public, the dashboard is open to loopback peers), so a page of
//! another site whose name is made to resolve to 127.0.0.1 (DNS rebinding) would otherwise be
//! served as if it were local. Its requests carry that site's name in `Host`: only loopback
//! names and the names this node is configured under are answered.

use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::config::ValidConfig;

/// The host names (lower-case, without port) a development-mode node answers besides loopback
/// ones.
pub(crate) struct AllowedHosts(Vec<String>);

impl AllowedHosts {
    /// `public_endpoint`'s host and `cluster.internal_url`'s (other nodes pass requests on
    /// to it). `None` outside development mode: a node with a key checks tokens' audiences.
    pub(crate) fn for_config(config: &ValidConfig) -> Option<AllowedHosts> {
        if !config.development_mode() {
            return None;
        }
        let named = [&config.public_endpoint, &config.cluster.internal_url]
            .into_iter()
            .flatten()
            .filter_map(|url| url::Url::parse(url).ok())
            .filter_map(|url| url.host_str().map(|host| host.to_ascii_lowercase()))
            .collect();
        Some(AllowedHosts(named))
    }

    /// Whether `host` (a `Host` value: name or address, maybe a port) is served.
    fn allows(&self, host: &str) -> bool {
        let name = host_name(host).to_ascii_lowercase();
        let name = name.strip_suffix('.').unwrap_or(&name);
        if name == "localhost" || name.ends_with(".localhost") {
            return true;
        }
        let bare = name.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = bare.parse::<IpAddr>() {
            if crate::config::canonical_ip(ip).is_loopback() {
                return true;
            }
        }
        self.0.iter().any(|allowed| {
            allowed.trim_start_matches('[').trim_end_matches(']') == bare || allowed == name
        })
    }
}

/// A `Host` value without its port (`[::1]:80` → `[::1]`, `example:80` → `example`).
fn host_name(host: &str) -> &str {
    let host = host.trim();
    if host.starts_with('[') {
        return match host.find(']') {
            Some(end) if is_port_suffix(&host[end + 1..]) => &host[..=end],
            _ => host,
        };
    }
    match host.rsplit_once(':') {
        Some((name, port)) if !name.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) => {
            name
        }
        _ => host,
    }
}

/// Empty or `:` and digits.
fn is_port_suffix(rest: &str) -> bool {
    rest.is_empty()
        || rest
            .strip_prefix(':')
            .is_some_and(|p| p.bytes().all(|b| b.is_ascii_digit()))
}

/// Answers 421 to a request whose `Host` (HTTP/2: authority) names another site. A request
/// with neither is served: browsers always send one, so it is not a rebinding page.
pub(crate) async fn layer(
    State(allowed): State<Arc<AllowedHosts>>,
    request: Request,
    next: Next,
) -> Response {
    let host = match request.headers().get(header::HOST) {
        Some(value) => Some(String::from_utf8_lossy(value.as_bytes()).into_owned()),
        None => request.uri().authority().map(|a| a.as_str().to_string()),
    };
    match host {
        Some(host) if !allowed.allows(&host) => crate::http::text_error(
            StatusCode::MISDIRECTED_REQUEST,
            format!(
                "Host {host:?} is not this service: in development mode (no access key) only \
                 localhost, loopback addresses and the configured public_endpoint and \
                 cluster.internal_url hosts are served, so that pages of other sites cannot \
                 reach it by DNS rebinding; use http://localhost or http://127.0.0.1, or set an \
                 access key"
            ),
        ),
        _ => next.run(request).await.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_names_and_configured_hosts_pass() {
        let allowed = AllowedHosts(vec!["dev.example".into(), "[::2]".into()]);
        for host in [
            "localhost",
            "LOCALHOST:8888",
            "localhost.",
            "app.localhost:1",
            "127.0.0.1:8888",
            "127.9.9.9",
            "[::1]:8888",
            "[::1]",
            "[::ffff:127.0.0.1]:80",
            "dev.example:8888",
            "[::2]:1",
        ] {
            assert!(allowed.allows(host), "{host}");
        }
        for host in [
            "evil.example",
            "evil.example:8888",
            "localhost.evil.example",
            "evillocalhost",
            "10.0.0.1:8888",
            "[::2]x",
            "",
        ] {
            assert!(!allowed.allows(host), "{host}");
        }
    }
}
