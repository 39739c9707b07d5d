//! Transport requests for connections another node holds. Behind a load balancer without
//! sticky sessions the negotiate and each later request of one connection may land on
//! different nodes, so in a cluster a connection's key (`id=`) names the node that holds it,
//! and a node that gets a request for a key it does not hold passes the request on to that
//! node over HTTP: long polls, sends, deletes and event streams as requests with streamed
//! bodies, a WebSocket as a byte tunnel once both sides have upgraded. See
//! docs/decisions/0006-forward-transport-requests.md.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderName, HeaderValue, StatusCode, Uri};
use axum::response::Response;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use parking_lot::Mutex;
use switchyard_core::HubName;

use crate::executor::Executor;
use crate::http::{is_websocket_upgrade, text_error};
use crate::metrics::{Metrics, ReasonLabel};

/// Marks a request one node passed to another; such a request is never passed on again.
pub(crate) const FORWARDED_BY: HeaderName = HeaderName::from_static("x-switchyard-forwarded-by");

/// How long a node's address is trusted before it is asked again.
const ADDRESS_TTL: Duration = Duration::from_secs(60);
/// How long "no such node" is remembered, so a flood of made-up keys costs one ask per node
/// name per interval rather than one per request.
const MISSING_TTL: Duration = Duration::from_secs(5);

/// Headers that belong to one hop (RFC 9110 §7.6.1), not to the request.
const HOP_BY_HOP: [HeaderName; 6] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
];

/// The key of a connection this node makes in a cluster: a random part, then the node id.
/// The random part never contains a `.`, so the first `.` separates them.
pub(crate) fn key_naming(random: String, node: &str) -> String {
    format!("{random}.{node}")
}

/// The node a key names, if it names one.
pub(crate) fn node_of_key(key: &str) -> Option<&str> {
    key.split_once('.')
        .map(|(_, node)| node)
        .filter(|n| !n.is_empty())
}

/// Passes requests on to other nodes; one per node.
pub(crate) struct Forwarder {
    client: Client<HttpConnector, Body>,
    /// Node id → its internal URL (`None`: no node answered), with when it was learnt.
    addresses: Mutex<HashMap<String, (Option<String>, Instant)>>,
}

impl Forwarder {
    pub(crate) fn new() -> Forwarder {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(Duration::from_secs(5)));
        Forwarder {
            client: Client::builder(TokioExecutor::new()).build(connector),
            addresses: Mutex::new(HashMap::new()),
        }
    }

    /// Where `node` takes requests, from the cache or by asking the cluster.
    async fn address(&self, executor: &Executor, hub: &HubName, node: &str) -> Option<String> {
        if let Some((address, learnt)) = self.addresses.lock().get(node) {
            let ttl = if address.is_some() {
                ADDRESS_TTL
            } else {
                MISSING_TTL
            };
            if learnt.elapsed() < ttl {
                return address.clone();
            }
        }
        let address = executor.address_of(hub, node).await;
        let mut addresses = self.addresses.lock();
        // Bounded: entries are only made for node names someone asked about; forget the
        // stale ones before they add up.
        if addresses.len() >= 1024 {
            addresses.retain(|_, (_, learnt)| learnt.elapsed() < ADDRESS_TTL);
        }
        addresses.insert(node.to_string(), (address.clone(), Instant::now()));
        address
    }

    fn forget(&self, node: &str) {
        self.addresses.lock().remove(node);
    }

    /// Passes `request` (already authorized here; the owner checks it again) to `node` and
    /// returns its answer. A node that cannot be reached holds no connections anyone can use,
    /// so the client hears what it would hear for an unknown connection.
    pub(crate) async fn forward(
        &self,
        executor: &Executor,
        metrics: &Metrics,
        hub: &HubName,
        node: &str,
        mut request: Request,
    ) -> Response {
        let unreachable = |metrics: &Metrics| {
            metrics
                .cluster_requests_forwarded
                .get_or_create(&ReasonLabel {
                    reason: "unreachable",
                })
                .inc();
            text_error(StatusCode::NOT_FOUND, "No Connection with that ID")
        };
        let Some(base) = self.address(executor, hub, node).await else {
            return unreachable(metrics);
        };
        let upgrade = is_websocket_upgrade(request.headers());
        let client_side = if upgrade {
            request
                .extensions_mut()
                .remove::<hyper::upgrade::OnUpgrade>()
        } else {
            None
        };
        let peer = request
            .extensions()
            .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
            .map(|info| info.0.ip());
        let path = request
            .uri()
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string();
        let Ok(uri) = format!("{base}{path}").parse::<Uri>() else {
            return unreachable(metrics);
        };
        let (mut parts, body) = request.into_parts();
        parts.uri = uri;
        parts.version = axum::http::Version::HTTP_11;
        let headers = &mut parts.headers;
        if !upgrade {
            // A WebSocket handshake needs its `Connection: upgrade`; anything else does not.
            strip_hop_by_hop(headers);
            headers.remove(header::UPGRADE);
        }
        headers.remove(header::HOST);
        if let Some(peer) = peer {
            append_forwarded_for(headers, peer);
        }
        headers.insert(
            FORWARDED_BY,
            HeaderValue::from_str(executor.node_id()).expect("node ids are header-safe"),
        );
        let outgoing = Request::from_parts(parts, body);
        let mut response = match self.client.request(outgoing).await {
            Ok(response) => response,
            Err(error) => {
                tracing::warn!(node, %error, "cannot reach the node that holds a connection");
                self.forget(node);
                return unreachable(metrics);
            }
        };
        metrics
            .cluster_requests_forwarded
            .get_or_create(&ReasonLabel { reason: "ok" })
            .inc();
        if let (Some(client_side), StatusCode::SWITCHING_PROTOCOLS) =
            (client_side, response.status())
        {
            let node_side = hyper::upgrade::on(&mut response);
            tokio::spawn(async move {
                let (Ok(client), Ok(node)) = tokio::join!(client_side, node_side) else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(
                    &mut TokioIo::new(client),
                    &mut TokioIo::new(node),
                )
                .await;
            });
            let (parts, _) = response.into_parts();
            return Response::from_parts(parts, Body::empty());
        }
        let (mut parts, body) = response.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        Response::from_parts(parts, Body::new(body))
    }
}

fn strip_hop_by_hop(headers: &mut axum::http::HeaderMap) {
    for name in &HOP_BY_HOP {
        headers.remove(name);
    }
}

/// Adds the peer to `X-Forwarded-For`, so the owner (trusting this node as a proxy) sees the
/// client's address rather than this node's.
fn append_forwarded_for(headers: &mut axum::http::HeaderMap, peer: std::net::IpAddr) {
    let name = HeaderName::from_static("x-forwarded-for");
    let value = match headers.get(&name).and_then(|v| v.to_str().ok()) {
        Some(earlier) => format!("{earlier}, {peer}"),
        None => peer.to_string(),
    };
    if let Ok(value) = HeaderValue::from_str(&value) {
        headers.insert(name, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_their_node() {
        let key = key_naming("AbC-_x".into(), "node-1.eu");
        assert_eq!(key, "AbC-_x.node-1.eu");
        assert_eq!(node_of_key(&key), Some("node-1.eu"));
        assert_eq!(node_of_key("plain"), None);
        assert_eq!(node_of_key("trailing."), None);
    }

    #[test]
    fn forwarded_for_appends() {
        let mut headers = axum::http::HeaderMap::new();
        append_forwarded_for(&mut headers, "10.0.0.1".parse().unwrap());
        append_forwarded_for(&mut headers, "10.0.0.2".parse().unwrap());
        assert_eq!(headers["x-forwarded-for"], "10.0.0.1, 10.0.0.2");
    }
}
