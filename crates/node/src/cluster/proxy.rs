//! Requests for another node: client transport requests for connections it holds, and app
//! servers' connections that name it as their `target`. Behind a load balancer without
//! sticky sessions the negotiate and each later request of one connection may land on
//! different nodes, so in a cluster a connection's key (`id=`) names the node that holds it,
//! and a node that gets a request for a key it does not hold passes the request on to that
//! node over HTTP (https when its internal URL is): long polls, sends, deletes and event streams as requests with streamed
//! bodies, a WebSocket as a byte tunnel once both sides have upgraded. See
//! docs/decisions/0006-forward-transport-requests.md.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::response::Response;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use parking_lot::Mutex;
use switchyard_core::HubName;

use super::assertion::{self, Vouched};
use super::{Cluster, Lookup};
use crate::config::Timeouts;
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

/// The node a key names, if it names one that could be a node id (1 to 64 letters, digits,
/// `-`, `_`, `.`): anything else is no key of a cluster and is not looked up.
pub(crate) fn node_of_key(key: &str) -> Option<&str> {
    key.split_once('.').map(|(_, node)| node).filter(|node| {
        (1..=64).contains(&node.len())
            && node
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    })
}

/// At most this many node addresses are remembered (known nodes and names nobody answers for).
const MAX_ADDRESSES: usize = 1024;

/// Passes requests on to other nodes; one per node.
pub(crate) struct Proxy {
    client: Client<HttpsConnector<HttpConnector>, Body>,
    /// Node id → its internal URL (`None`: no node answered), with when it was learnt.
    addresses: Mutex<HashMap<String, (Option<String>, Instant)>>,
    /// How long the other node's answer may take (`timeouts.request_body_timeout`), and a
    /// long poll's on top (`timeouts.long_poll_timeout`).
    answer_within: Duration,
    long_poll: Duration,
}

impl Proxy {
    /// `tls`: how an https node is checked (see `peer_tls`); an http one is spoken to plainly.
    pub(crate) fn new(timeouts: &Timeouts, tls: rustls::ClientConfig) -> Proxy {
        let mut connector = HttpConnector::new();
        // https URLs too: the TLS layer below takes them.
        connector.enforce_http(false);
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(Duration::from_secs(5)));
        // A node whose host vanished (no FIN, no RST) is noticed by the kernel, not after
        // the retransmission timeout.
        connector.set_keepalive(Some(Duration::from_secs(30)));
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(connector);
        let client = Client::builder(TokioExecutor::new())
            // Below the peer's idle limit (`timeouts.request_header_timeout`, 10 s), so a
            // pooled connection is not reused just as the peer closes it.
            .pool_idle_timeout(Duration::from_secs(5))
            .build(connector);
        Proxy {
            client,
            addresses: Mutex::new(HashMap::new()),
            answer_within: timeouts.request_body_timeout,
            long_poll: timeouts.long_poll_timeout,
        }
    }

    /// Where `node` takes requests, from the cache or by asking the cluster.
    async fn address(&self, cluster: &Cluster, hub: &HubName, node: &str) -> Option<String> {
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
        // Only a sure answer is remembered: a timeout or a Redis hiccup must not make a live
        // node's connections unreachable for the next few seconds.
        let address = match cluster.address_of(hub, node).await {
            Lookup::At(url) => Some(url),
            Lookup::Nobody => None,
            Lookup::Unknown => return None,
        };
        let mut addresses = self.addresses.lock();
        if addresses.len() >= MAX_ADDRESSES {
            addresses
                .retain(|_, (address, learnt)| address.is_some() && learnt.elapsed() < ADDRESS_TTL);
        }
        if addresses.len() < MAX_ADDRESSES {
            addresses.insert(node.to_string(), (address.clone(), Instant::now()));
        }
        address
    }

    fn forget(&self, node: &str) {
        self.addresses.lock().remove(node);
    }

    /// Passes `request` (already authorized here, as `vouched` says: the owner believes this
    /// node's assertion of it instead of the credentials, which stay here) to `node` and
    /// returns its answer. A node that cannot be reached holds no connections anyone can use,
    /// so the caller hears `missing` with a 404, as for an unknown connection.
    pub(crate) async fn forward(
        &self,
        cluster: &Cluster,
        hub: &HubName,
        node: &str,
        request: Request,
        vouched: &Vouched,
        missing: &'static str,
    ) -> Response {
        self.try_forward(cluster, hub, node, request, vouched)
            .await
            .unwrap_or_else(|| text_error(StatusCode::NOT_FOUND, missing))
    }

    /// [`Proxy::forward`], or `None` when `node` cannot be reached (counted).
    pub(crate) async fn try_forward(
        &self,
        cluster: &Cluster,
        hub: &HubName,
        node: &str,
        request: Request,
        vouched: &Vouched,
    ) -> Option<Response> {
        let metrics = &*cluster.metrics;
        let unreachable = |metrics: &Metrics| {
            metrics
                .cluster_requests_forwarded
                .get_or_create(&ReasonLabel {
                    reason: "unreachable",
                })
                .inc();
        };
        let Some(base) = self.address(cluster, hub, node).await else {
            unreachable(metrics);
            return None;
        };
        let Some((outgoing, client_side, due)) = self.outgoing(&base, cluster, request, vouched)
        else {
            unreachable(metrics);
            return None;
        };
        let answered = tokio::time::timeout(due, self.client.request(outgoing)).await;
        let response = match answered {
            Ok(Ok(response)) => response,
            Ok(Err(error)) => {
                tracing::debug!(node, %error, "cannot reach the node that holds a connection");
                self.forget(node);
                unreachable(metrics);
                return None;
            }
            Err(_) => {
                tracing::warn!(
                    node,
                    ?due,
                    "the node that holds a connection did not answer in time"
                );
                unreachable(metrics);
                return None;
            }
        };
        metrics
            .cluster_requests_forwarded
            .get_or_create(&ReasonLabel { reason: "ok" })
            .inc();
        Some(relay_answer(response, client_side))
    }

    /// The request as it goes to the node at `base`: its URL there, HTTP/1.1, without this
    /// hop's headers and without the client's credentials, marked as passed on by this node
    /// with its assertion of what it checked, the client's address appended to
    /// `X-Forwarded-For`; with the client's side of a WebSocket upgrade, and how long the
    /// other node may take to answer. `None` when the URL does not parse.
    fn outgoing(
        &self,
        base: &str,
        cluster: &Cluster,
        mut request: Request,
        vouched: &Vouched,
    ) -> Option<(Request, Option<hyper::upgrade::OnUpgrade>, Duration)> {
        let me = cluster.node_id();
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
        let path = without_credential(request.uri());
        let uri = format!("{base}{path}").parse::<Uri>().ok()?;
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
        headers.remove(header::AUTHORIZATION);
        let assertion = assertion::make(
            cluster.seal(),
            me,
            &parts.method,
            &path,
            vouched,
            assertion::unix_now(),
        );
        headers.insert(assertion::ASSERTION, assertion);
        if let Some(peer) = peer {
            append_forwarded_for(headers, peer);
        }
        headers.insert(
            FORWARDED_BY,
            HeaderValue::from_str(me).expect("node ids are header-safe"),
        );
        // A node that accepts and never answers must not hold the request (and its socket)
        // for ever: its answer's headers are due within the body timeout, or, for a long
        // poll, which answers only when it has something or its time is up, after that too.
        let long_poll = parts.method == Method::GET
            && !upgrade
            && !parts
                .headers
                .get(header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|accept| accept.contains("text/event-stream"));
        let due = if long_poll {
            self.long_poll + self.answer_within
        } else {
            self.answer_within
        };
        Some((Request::from_parts(parts, body), client_side, due))
    }
}

/// The other node's answer, for the client: an upgrade becomes a tunnel between the two
/// sockets; anything else streams back without that hop's headers.
fn relay_answer(
    mut response: Response<hyper::body::Incoming>,
    client_side: Option<hyper::upgrade::OnUpgrade>,
) -> Response {
    if let (Some(client_side), StatusCode::SWITCHING_PROTOCOLS) = (client_side, response.status()) {
        let node_side = hyper::upgrade::on(&mut response);
        tokio::spawn(async move {
            let (Ok(client), Ok(node)) = tokio::join!(client_side, node_side) else {
                return;
            };
            tunnel(TokioIo::new(client), TokioIo::new(node), HALF_CLOSED_GRACE).await;
        });
        let (parts, _) = response.into_parts();
        return Response::from_parts(parts, Body::empty());
    }
    let (mut parts, body) = response.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    Response::from_parts(parts, Body::new(body))
}

/// How long one direction of a tunnel may stay open after the other has ended.
const HALF_CLOSED_GRACE: Duration = Duration::from_secs(5);

/// Copies bytes both ways until one side ends, then gives the other a few seconds to finish:
/// a WebSocket ends with a close handshake, and a peer that vanished without a word must not
/// hold the task and both sockets.
async fn tunnel<A, B>(client: A, node: B, grace: Duration)
where
    A: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    B: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::AsyncWriteExt;
    let (mut client_read, mut client_write) = tokio::io::split(client);
    let (mut node_read, mut node_write) = tokio::io::split(node);
    let up = async {
        let _ = tokio::io::copy(&mut client_read, &mut node_write).await;
        let _ = node_write.shutdown().await;
    };
    let down = async {
        let _ = tokio::io::copy(&mut node_read, &mut client_write).await;
        let _ = client_write.shutdown().await;
    };
    tokio::pin!(up, down);
    tokio::select! {
        () = &mut up => { let _ = tokio::time::timeout(grace, down).await; }
        () = &mut down => { let _ = tokio::time::timeout(grace, up).await; }
    }
}

/// The path and query of `uri` without `access_token` (compared decoded and ignoring case,
/// as the service reads it): the owner believes the assertion, the token stays here.
fn without_credential(uri: &Uri) -> String {
    let path = uri.path();
    let Some(query) = uri.query() else {
        return path.to_string();
    };
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| {
            let key = pair.split('=').next().unwrap_or("");
            let key = percent_encoding::percent_decode_str(key).decode_utf8_lossy();
            !key.replace('+', " ").eq_ignore_ascii_case("access_token")
        })
        .collect();
    if kept.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{}", kept.join("&"))
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
    // Every line of the header, in order: a proxy that adds a line of its own must not lose
    // it to the client's line.
    let mut hops: Vec<String> = headers
        .get_all(&name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(str::to_string)
        .collect();
    hops.push(peer.to_string());
    let value = hops.join(", ");
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
    fn the_token_in_the_query_stays_behind() {
        let cases = [
            (
                "/client/?hub=h&access_token=T&id=k.n2",
                "/client/?hub=h&id=k.n2",
            ),
            ("/client/?ACCESS_TOKEN=T&hub=h", "/client/?hub=h"),
            ("/client/?access%5Ftoken=T&hub=h", "/client/?hub=h"),
            ("/client/?access_token=T", "/client/"),
            ("/client/?hub=h", "/client/?hub=h"),
            ("/server/", "/server/"),
        ];
        for (given, sent) in cases {
            assert_eq!(without_credential(&given.parse().unwrap()), sent, "{given}");
        }
    }

    #[test]
    fn forwarded_for_appends() {
        let mut headers = axum::http::HeaderMap::new();
        append_forwarded_for(&mut headers, "10.0.0.1".parse().unwrap());
        append_forwarded_for(&mut headers, "10.0.0.2".parse().unwrap());
        assert_eq!(headers["x-forwarded-for"], "10.0.0.1, 10.0.0.2");
        // Two lines (a client's and a proxy's) both survive, in order.
        let mut headers = axum::http::HeaderMap::new();
        headers.append("x-forwarded-for", "6.6.6.6".parse().unwrap());
        headers.append("x-forwarded-for", "192.0.2.7".parse().unwrap());
        append_forwarded_for(&mut headers, "10.0.0.3".parse().unwrap());
        assert_eq!(headers.get_all("x-forwarded-for").iter().count(), 1);
        assert_eq!(headers["x-forwarded-for"], "6.6.6.6, 192.0.2.7, 10.0.0.3");
    }

    #[test]
    fn only_node_ids_are_looked_up() {
        let longest = format!("k.{}", "n".repeat(64));
        assert_eq!(node_of_key(&longest).map(str::len), Some(64));
        assert_eq!(node_of_key(&format!("k.{}", "n".repeat(65))), None);
        assert_eq!(node_of_key("k.n1/../x"), None);
        assert_eq!(node_of_key("k.n 1"), None);
    }

    #[tokio::test]
    async fn a_tunnel_ends_when_one_side_goes_quiet_after_the_other_ended() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (client, mut client_far) = tokio::io::duplex(64);
        let (node, mut node_far) = tokio::io::duplex(64);
        let grace = Duration::from_millis(50);
        let task = tokio::spawn(tunnel(client, node, grace));
        client_far.write_all(b"hi").await.unwrap();
        let mut got = [0u8; 2];
        node_far.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"hi");
        // The node side ends; the client stays connected and silent.
        drop(node_far);
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("the tunnel ended")
            .unwrap();
        drop(client_far);
    }
}
