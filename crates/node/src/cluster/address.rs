//! Where the other nodes reach this node over HTTP or HTTPS (for requests passed on to the
//! node that holds a connection).

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::config::ValidConfig;

/// The setting, else the bound address (https when the listener speaks TLS); for an address bound on every interface, the one
/// this host routes to `hint` from (the backplane's server: the network the nodes share).
pub(crate) fn internal_url(
    config: &ValidConfig,
    bound: SocketAddr,
    hint: Option<(String, u16)>,
) -> String {
    if let Some(url) = &config.cluster.internal_url {
        return normalized(url);
    }
    let mut address = bound;
    if bound.ip().is_unspecified() {
        match hint.and_then(|to| routed_from(bound.ip(), to)) {
            Some(local) => address.set_ip(local),
            None => {
                tracing::warn!(
                    "cannot tell which address other nodes reach this node at; set \
                     cluster.internal_url (requests other nodes pass on will fail)"
                );
                address.set_ip(Ipv4Addr::LOCALHOST.into());
            }
        }
    }
    format!("{}://{address}", config.listen_scheme())
}

/// A configured internal URL (an origin: the config check refused anything else) as the
/// other nodes compare and the start-up checks read it: scheme and host in lower case, no
/// default port, no trailing slash.
fn normalized(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(parsed) if matches!(parsed.scheme(), "http" | "https") => {
            parsed.origin().ascii_serialization()
        }
        _ => url.trim_end_matches('/').to_string(),
    }
}

/// The host of an https `url` when `key`'s certificate does not name it: other nodes would
/// refuse this node's certificate there (see `peer_tls`), so that is worth saying at start.
pub(crate) fn unnamed_host(key: &rustls::sign::CertifiedKey, url: &str) -> Option<String> {
    let url = url::Url::parse(url)
        .ok()
        .filter(|u| u.scheme() == "https")?;
    let host = match url.host()? {
        url::Host::Ipv6(ip) => ip.to_string(),
        other => other.to_string(),
    };
    let name = rustls_pki_types::ServerName::try_from(host.clone()).ok()?;
    let leaf = rustls::server::ParsedCertificate::try_from(key.cert.first()?).ok()?;
    rustls::client::verify_server_name(&leaf, &name)
        .is_err()
        .then_some(host)
}

/// Whether `url` can be a node's internal URL: an http(s) origin with a host and a port
/// (given or the scheme's), and nothing else: no path, query, fragment or user info. Another
/// node's answer is the only source of such a URL, and a request passed on goes to it with a
/// client's transport request, so anything else is refused.
pub(crate) fn is_node_origin(url: &str) -> bool {
    let Ok(parsed) = url::Url::parse(url) else {
        return false;
    };
    matches!(parsed.scheme(), "http" | "https")
        && parsed.host_str().is_some_and(|h| !h.is_empty())
        && parsed.port_or_known_default().is_some()
        && parsed.username().is_empty()
        && parsed.password().is_none()
        && parsed.path() == "/"
        && parsed.query().is_none()
        && parsed.fragment().is_none()
        // The URL as written, not only as parsed: `{url}{path}` is what is requested.
        && !url.ends_with('/')
        && !url.contains(['?', '#', '@', '\\'])
}

/// Logs a refused address, the first time only: whoever forges them can repeat them.
pub(crate) fn refused(node: &str, url: &str) {
    static LOGGED: AtomicBool = AtomicBool::new(false);
    if !LOGGED.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            node,
            url,
            "refusing an address answer that is not a node's origin (http(s)://host:port): \
             nothing is passed on to it (logged once; see switchyard_cluster_addresses_refused)"
        );
    }
}

/// The local address this host sends from to reach `(host, port)` (no packet is sent: a UDP
/// connect only picks the route).
fn routed_from(bind: IpAddr, (host, port): (String, u16)) -> Option<IpAddr> {
    let socket = UdpSocket::bind((bind, 0)).ok()?;
    socket.connect((host.as_str(), port)).ok()?;
    Some(socket.local_addr().ok()?.ip())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn a_configured_internal_url_is_taken_in_its_usual_spelling() {
        assert_eq!(
            normalized("HTTPS://N1.Internal:8443/"),
            "https://n1.internal:8443"
        );
        assert_eq!(normalized("http://10.0.0.1:80"), "http://10.0.0.1");
        assert!(is_node_origin(&normalized("HTTP://Node-1:8080/")));
    }

    #[test]
    fn only_origins_are_node_addresses() {
        for good in [
            "http://10.0.0.1:8080",
            "https://node-1.internal:8443",
            "http://[::1]:9000",
            "http://node",
        ] {
            assert!(is_node_origin(good), "{good}");
        }
        for bad in [
            "http://10.0.0.1:8080/evil",
            "http://10.0.0.1:8080/",
            "http://10.0.0.1:8080?x=1",
            "http://10.0.0.1:8080#f",
            "http://user:pw@10.0.0.1:8080",
            "http://user@10.0.0.1:8080",
            "ftp://10.0.0.1:21",
            "file:///etc/passwd",
            "http://a\\@b:1",
            "10.0.0.1:8080",
            "",
        ] {
            assert!(!is_node_origin(bad), "{bad}");
        }
    }

    #[test]
    fn an_address_on_every_interface_is_the_one_routed_to_the_backplane() {
        let config = Config::default().validate().unwrap();
        let bound: SocketAddr = "0.0.0.0:8080".parse().unwrap();
        let url = internal_url(&config, bound, Some(("127.0.0.1".into(), 6379)));
        assert_eq!(url, "http://127.0.0.1:8080");
        let specific: SocketAddr = "127.0.0.2:9000".parse().unwrap();
        assert_eq!(
            internal_url(&config, specific, None),
            "http://127.0.0.2:9000"
        );
    }

    #[test]
    fn a_certificate_that_does_not_name_the_internal_host_is_noticed() {
        use rustls_pki_types::pem::PemObject;
        let leaf = switchyard_testkit::tls::TestCa::new().leaf("n1");
        let key = rustls::sign::CertifiedKey::from_der(
            vec![leaf.der.clone()],
            rustls_pki_types::PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).unwrap(),
            &crate::tls::provider(),
        )
        .unwrap();
        assert_eq!(unnamed_host(&key, "https://localhost:8443"), None);
        assert_eq!(unnamed_host(&key, "https://127.0.0.1:8443"), None);
        assert_eq!(unnamed_host(&key, "http://n1.internal:8080"), None);
        assert_eq!(
            unnamed_host(&key, "https://n1.internal:8443").as_deref(),
            Some("n1.internal")
        );
        assert_eq!(
            unnamed_host(&key, "https://[::1]:8443").as_deref(),
            Some("::1")
        );
    }
}
