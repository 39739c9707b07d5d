//! Where the other nodes reach this node over HTTP or HTTPS (for requests passed on to the
//! node that holds a connection).

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};

use crate::config::ValidConfig;

/// The setting, else the bound address (https when the listener speaks TLS); for an address bound on every interface, the one
/// this host routes to `hint` from (the backplane's server: the network the nodes share).
pub(crate) fn internal_url(
    config: &ValidConfig,
    bound: SocketAddr,
    hint: Option<(String, u16)>,
) -> String {
    if let Some(url) = &config.cluster.internal_url {
        return url.trim_end_matches('/').to_string();
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
}
