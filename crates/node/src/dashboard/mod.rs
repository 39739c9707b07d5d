//! The operator's dashboard: `/dashboard` (a page embedded in the binary), its assets, and
//! the admin hub `/dashboard/hub` that feeds the page over SignalR (the official browser
//! client, JSON protocol, WebSockets).
//!
//! # Layout
//! - `view`: what the page shows, read from the node (hubs, app servers, connections).
//! - `hub`: the admin hub's sessions (snapshots, the connection list, closes, live trace).
//! - `relay`: a live trace across the nodes of a cluster.
//! - `origin`: which pages may open the admin hub (WebSockets skip CORS).
//! - here: the routes, the operator check and the embedded files.

mod hub;
mod origin;
mod relay;
mod view;

#[cfg(feature = "fuzzing")]
pub(crate) use hub::Session;
pub(crate) use view::RemoteViews;

use std::sync::Arc;
use std::time::Instant;

use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{FromRequestParts, Path, Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use switchyard_auth::{AccessKeys, Strictness};

use crate::app_server::AppServers;
use crate::auth::{bearer_token, Auth};
use crate::client::Clients;
use crate::cluster::Cluster;
use crate::executor::Executor;
use crate::http::{text_error, Query};
use crate::shared::Shared;

/// Every token that opens the dashboard names this path (no query) as its audience.
pub const DASHBOARD_PATH: &str = "/dashboard";
/// The claim an access-key token needs to open the dashboard (`role=admin`).
pub const ADMIN_ROLE: (&str, &str) = ("role", "admin");
/// The long form of the role claim (.NET's `ClaimTypes.Role`), accepted too.
const ROLE_CLAIM_URI: &str = "http://schemas.microsoft.com/ws/2008/06/identity/claims/role";

pub(crate) struct Dashboard {
    shared: Arc<Shared>,
    executor: Arc<Executor>,
    cluster: Arc<Cluster>,
    clients: Arc<Clients>,
    app_servers: Arc<AppServers>,
    /// Tokens signed with `dashboard.key`, when one is set.
    dashboard_key: Option<Auth>,
    started: Instant,
    /// Traces other nodes' dashboards asked this node for, and where their events go.
    relays: relay::Relays,
}

impl Dashboard {
    pub(crate) fn new(
        shared: Arc<Shared>,
        executor: Arc<Executor>,
        cluster: Arc<Cluster>,
        clients: Arc<Clients>,
        app_servers: Arc<AppServers>,
    ) -> Dashboard {
        let config = &shared.config;
        let dashboard_key = config
            .dashboard
            .key
            .clone()
            .map(|key| Auth::new(AccessKeys::new(key, None), config));
        Dashboard {
            shared,
            executor,
            cluster,
            clients,
            app_servers,
            dashboard_key,
            started: Instant::now(),
            relays: Default::default(),
        }
    }

    /// Whether the request comes from an operator: a dashboard token (see the module
    /// settings, `config::Dashboard`), or anyone on loopback in development mode. Ok holds the
    /// token's `exp` (Unix seconds), `None` when no token was needed.
    fn check(&self, request: &axum::http::request::Parts) -> Result<Option<i64>, String> {
        let config = &self.shared.config;
        let peer_is_loopback = request
            .extensions
            .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
            .is_some_and(|info| crate::config::canonical_ip(info.0.ip()).is_loopback());
        if config.development_mode() && peer_is_loopback {
            return Ok(None);
        }
        let query = Query::parse(&request.uri);
        let token = bearer_token(&request.headers, &query);
        if token.is_none() {
            return Err("the dashboard is for operators: open it with a token \
                        (`switchyard token --admin` prints the address to open)"
                .into());
        }
        let strict = Strictness::default();
        let by_access_key = self.shared.auth.authenticate(
            crate::auth::Use::Repeated,
            token,
            DASHBOARD_PATH,
            None,
            &strict,
        );
        match by_access_key {
            Ok(verified) => {
                let admin = verified.claims.iter().any(|(name, value)| {
                    (name == ADMIN_ROLE.0 || name == ROLE_CLAIM_URI) && value == ADMIN_ROLE.1
                });
                match admin {
                    true => Ok(Some(verified.expires_at)),
                    false => Err("the token has no admin role (claim role=admin)".into()),
                }
            }
            Err(error) => match &self.dashboard_key {
                Some(auth) => auth
                    .authenticate(
                        crate::auth::Use::Repeated,
                        token,
                        DASHBOARD_PATH,
                        None,
                        &strict,
                    )
                    .map(|verified| Some(verified.expires_at))
                    .map_err(|e| e.to_string()),
                None => Err(error.to_string()),
            },
        }
    }
}

pub(crate) fn routes() -> axum::Router<Arc<Dashboard>> {
    axum::Router::new()
        .route("/dashboard", get(page))
        .route("/dashboard/", get(page))
        .route("/dashboard/hub", get(admin_hub))
        .route("/dashboard/assets/{name}", get(asset))
}

/// The page. It holds no data (everything comes through the admin hub, which checks the
/// token), so it is served without one: the token stays out of the address, given after a
/// `#` (never sent to a server, kept out of logs and `Referer`) or in the page's form. An
/// address that does carry `?access_token=` (links printed by earlier releases) is checked
/// here, so a wrong one is refused with the reason.
async fn page(State(dashboard): State<Arc<Dashboard>>, request: Request) -> Response {
    let (parts, _) = request.into_parts();
    let given = Query::parse(&parts.uri).get("access_token").is_some();
    let auth = match dashboard.check(&parts) {
        // On loopback in development mode the page connects without asking for a token.
        Ok(None) => "open",
        Ok(Some(_)) => "token",
        Err(why) if given => {
            return (
                StatusCode::UNAUTHORIZED,
                [
                    (header::CONTENT_TYPE, "text/html; charset=utf-8"),
                    (header::CACHE_CONTROL, "no-store"),
                    (header::REFERRER_POLICY, "no-referrer"),
                    (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
                    (header::X_FRAME_OPTIONS, "DENY"),
                ],
                REFUSED.replace("{why}", &html_escape(&why)),
            )
                .into_response()
        }
        Err(_) => "needed",
    };
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
            (header::X_FRAME_OPTIONS, "DENY"),
        ],
        PAGE.replacen("<body>", &format!("<body data-auth=\"{auth}\">"), 1),
    )
        .into_response()
}

/// The admin hub: a WebSocket that speaks the SignalR JSON hub protocol.
async fn admin_hub(State(dashboard): State<Arc<Dashboard>>, request: Request) -> Response {
    let (mut parts, _) = request.into_parts();
    if !origin::allowed(&parts, &dashboard.shared.config) {
        return text_error(
            StatusCode::FORBIDDEN,
            "the admin hub takes WebSockets from the dashboard's own page only",
        );
    }
    let expires_at = match dashboard.check(&parts) {
        Ok(expires_at) => expires_at,
        Err(why) => return text_error(StatusCode::UNAUTHORIZED, why),
    };
    let upgrade = match WebSocketUpgrade::from_request_parts(&mut parts, &()).await {
        Ok(upgrade) => upgrade,
        Err(_) => {
            return text_error(
                StatusCode::BAD_REQUEST,
                "the admin hub takes WebSockets only (skipNegotiation)",
            )
        }
    };
    upgrade
        .max_message_size(hub::MAX_MESSAGE)
        .on_upgrade(move |socket| hub::run(dashboard, socket, expires_at))
}

/// The page's scripts and styles, the official SignalR browser client and uPlot among them.
/// Public: they hold no data.
async fn asset(Path(name): Path<String>) -> Response {
    let found = ASSETS.iter().find(|(file, _, _)| *file == name);
    match found {
        Some((_, kind, body)) => (
            [
                (header::CONTENT_TYPE, *kind),
                (header::CACHE_CONTROL, "public, max-age=3600"),
            ],
            *body,
        )
            .into_response(),
        None => text_error(StatusCode::NOT_FOUND, "no such dashboard file"),
    }
}

/// The page runs only its own scripts, talks only to its own origin, and is not framed.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
    style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; connect-src 'self'; \
    frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

fn html_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const PAGE: &str = include_str!("../../assets/dashboard/index.html");
const REFUSED: &str = include_str!("../../assets/dashboard/refused.html");

/// Name, content type, body.
const ASSETS: &[(&str, &str, &str)] = &[
    (
        "dashboard.js",
        "text/javascript; charset=utf-8",
        include_str!("../../assets/dashboard/dashboard.js"),
    ),
    (
        "dashboard.css",
        "text/css; charset=utf-8",
        include_str!("../../assets/dashboard/dashboard.css"),
    ),
    (
        "signalr.min.js",
        "text/javascript; charset=utf-8",
        include_str!("../../assets/dashboard/vendor/signalr.min.js"),
    ),
    (
        "uPlot.iife.min.js",
        "text/javascript; charset=utf-8",
        include_str!("../../assets/dashboard/vendor/uPlot.iife.min.js"),
    ),
    (
        "favicon.svg",
        "image/svg+xml",
        include_str!("../../assets/dashboard/favicon.svg"),
    ),
    (
        "uPlot.min.css",
        "text/css; charset=utf-8",
        include_str!("../../assets/dashboard/vendor/uPlot.min.css"),
    ),
];
