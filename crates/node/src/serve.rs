//! The node over HTTP: its routes, and serving them on bound listeners until shutdown.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router as HttpRouter;
use tokio::net::TcpListener;

use crate::cluster::address::internal_url;
use crate::metrics::Metrics;
use crate::node::{Node, SHUTDOWN_DRAIN};
use crate::{app_server, client, cors, dashboard, dev_host, home, http, listener, rest, tls};

/// How long in-flight responses may take after the drain before the server stops anyway.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

/// The service's HTTP routes for a node, behind the CORS middleware (which also answers
/// preflights for paths no route serves).
pub fn routes(node: Arc<Node>) -> HttpRouter {
    app_routes(&node, true)
}

/// The routes, with or without `/metrics` (which moves to the admin listener when one is
/// configured).
fn app_routes(node: &Arc<Node>, with_metrics: bool) -> HttpRouter {
    let config = node.config();
    let cors = Arc::new(cors::CorsPolicy::new(
        &config.cors,
        config.development_mode(),
    ));
    let mut router = HttpRouter::new()
        .merge(client::routes().with_state(node.clients.clone()))
        .merge(rest::routes().with_state(node.rest.clone()))
        .merge(app_server::routes().with_state(node.app_servers.clone()))
        .merge(home::routes(config.dashboard.enabled, with_metrics));
    if with_metrics {
        router = router.merge(metrics_routes(node));
    }
    if config.dashboard.enabled {
        router = router.merge(dashboard::routes().with_state(node.dashboard.clone()));
    }
    let router = router
        .fallback(no_route)
        .layer(axum::middleware::from_fn_with_state(
            node.cluster.clone(),
            crate::cluster::vouched_layer,
        ))
        .layer(axum::middleware::from_fn_with_state(cors, cors::layer));
    // Outermost, so that a page of another site gets no answer at all, preflights included.
    match dev_host::AllowedHosts::for_config(config) {
        Some(allowed) => router.layer(axum::middleware::from_fn_with_state(
            Arc::new(allowed),
            dev_host::layer,
        )),
        None => router,
    }
}

/// `/metrics` (Prometheus text).
fn metrics_routes(node: &Arc<Node>) -> HttpRouter {
    HttpRouter::new().route(
        "/metrics",
        axum::routing::get(metrics_text).with_state(node.metrics.clone()),
    )
}

/// What the admin listener serves: metrics and health.
fn admin_routes(node: &Arc<Node>) -> HttpRouter {
    metrics_routes(node)
        .route("/api/health", axum::routing::get(|| async { "" }))
        .fallback(no_route)
}

/// Any path no route serves (including `..` and other traversal attempts, which are not
/// resolved): a 404 that says so, rather than an empty body.
async fn no_route() -> axum::response::Response {
    http::text_error(
        axum::http::StatusCode::NOT_FOUND,
        "no route matches this path",
    )
}

/// Prometheus text exposition of the node's metrics.
async fn metrics_text(
    axum::extract::State(metrics): axum::extract::State<Arc<Metrics>>,
) -> impl axum::response::IntoResponse {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        metrics.encode(),
    )
}

/// Runs one node on `listener` until `shutdown` completes, then closes every client with an
/// allow-reconnect Close and returns. With `admin_listen` configured, `/metrics` is served on
/// that address instead.
pub async fn serve(
    listener: TcpListener,
    node: Arc<Node>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let admin = match node.config().admin_listen {
        Some(address) => Some(TcpListener::bind(address).await?),
        None => None,
    };
    serve_listeners(listener, admin, node, shutdown).await
}

/// [`serve`] with the admin listener (metrics and health) already bound, or none.
pub async fn serve_listeners(
    listener: TcpListener,
    admin: Option<TcpListener>,
    node: Arc<Node>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let config = node.config().clone();
    if node.cluster.in_cluster() {
        join_cluster(&node, listener.local_addr()?).await;
    }
    let heartbeat = tokio::spawn(node.clone().heartbeat());
    let (stop_admin, admin_stopped) = tokio::sync::oneshot::channel::<()>();
    let admin_task = admin.map(|admin| {
        let (router, config, metrics) = (admin_routes(&node), config.clone(), node.metrics.clone());
        tokio::spawn(async move {
            let stopped = async {
                let _ = admin_stopped.await;
            };
            listener::run(
                admin,
                None,
                router,
                &config,
                metrics,
                stopped,
                || async {},
                SHUTDOWN_GRACE,
            )
            .await
        })
    });
    let hangup = tls::hangup_signal();
    let (tls, hangups) = match config.tls_key() {
        Some(key) => {
            let certificates = tls::Certificates::new(key.clone());
            node.cluster.trust_like(certificates.clone());
            match config.tls.cert.clone().zip(config.tls.key.clone()) {
                Some((cert, key)) => {
                    let watch = tokio::spawn(tls::watch(
                        certificates.clone(),
                        cert,
                        key,
                        config.tls.reload_interval,
                        node.metrics.clone(),
                        hangup,
                    ));
                    (Some(certificates.acceptor()), watch)
                }
                None => (
                    Some(certificates.acceptor()),
                    tokio::spawn(tls::ignore_hangups(hangup)),
                ),
            }
        }
        // SIGHUP reloads the certificate files; without them it is only logged.
        None => (None, tokio::spawn(tls::ignore_hangups(hangup))),
    };
    let closing = node.clone();
    let result = listener::run(
        listener,
        tls,
        app_routes(&node, admin_task.is_none()),
        &config,
        node.metrics.clone(),
        shutdown,
        move || async move {
            closing.leave();
            closing.read_what_was_sent().await;
            closing.close_all_clients(SHUTDOWN_DRAIN).await
        },
        SHUTDOWN_GRACE,
    )
    .await;
    let _ = stop_admin.send(());
    if let Some(task) = admin_task {
        let _ = task.await;
    }
    heartbeat.abort();
    hangups.abort();
    result
}

/// Before a node of a cluster serves: says where the others reach it, and copies the
/// user-group table they keep.
async fn join_cluster(node: &Node, bound: std::net::SocketAddr) {
    let config = node.config();
    let url = internal_url(config, bound, node.cluster.peer_address_hint());
    tracing::info!(%url, "other nodes reach this node at this address");
    let plain = url.starts_with("http:");
    if let Some(host) = config
        .tls_key()
        .and_then(|key| crate::cluster::address::unnamed_host(key, &url))
    {
        tracing::warn!(
            %url,
            "this node's certificate does not name {host}, the host of its internal URL: other \
             nodes will refuse to pass requests on to it; set cluster.internal_url to a name \
             the certificate has"
        );
    }
    node.cluster.set_internal_url(url);
    let copied = node.cluster.copy_user_groups().await;
    tracing::info!(copied, "user-group memberships copied from the other nodes");
    if config.tls.enabled() && plain {
        tracing::warn!(
            "tls is on in a cluster but cluster.internal_url is plain HTTP: other nodes pass \
             transport requests there unencrypted (this node's own listener speaks only TLS, so \
             something else must answer there); set an https:// cluster.internal_url"
        );
    }
}
