//! A Default-mode chat room: an app server written with this repository's Rust SDK
//! (`switchyard_client::app_server`), as an ASP.NET Core app with `AddAzureSignalR` would be.
//! It connects to the service over Azure's service protocol, serves the page and the
//! negotiate redirect over HTTP, and runs the chat hub ([`hub`]) for the clients the service
//! carries to it.
//!
//! ```sh
//! default-mode-chat --connection-string "Endpoint=http://127.0.0.1;Port=8888;AccessKey=…;Version=1.0;"
//! ```
//! (`run.sh` starts a service and this together.) Prints `Chat room: http://…/` once the
//! server connections are up.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

mod hub;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use clap::Parser;
use switchyard_auth::ConnectionString;
use switchyard_client::app_server::{AppServer, AppServerConfig, AppServerHandle, NegotiateError};

use hub::{ChatHub, ChatMethods};

const HUB: &str = "chat";
/// How often members that vanished without leaving are looked for.
const SWEEP_INTERVAL: Duration = Duration::from_secs(2);

const PAGE: &str = include_str!("../public/index.html");
const SCRIPT: &str = include_str!("../public/chat.js");
const STYLE: &str = include_str!("../../serverless-chat/public/chat.css");
/// The official browser client, as the dashboard vendors it (@microsoft/signalr 10.0.11).
const CLIENT: &str = include_str!("../../../crates/node/assets/dashboard/vendor/signalr.min.js");

#[derive(Parser)]
#[command(about = "A Default-mode chat room: an app server on the Rust SDK")]
struct Args {
    /// The service's connection string (`switchyard serve` prints it).
    #[arg(long, env = "CONNECTION_STRING")]
    connection_string: String,
    /// Where the page and the negotiate endpoint listen (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:5000")]
    listen: SocketAddr,
}

#[tokio::main]
async fn main() -> Result<(), String> {
    let args = Args::parse();
    let connection_string: ConnectionString = args
        .connection_string
        .parse()
        .map_err(|e| format!("--connection-string: {e}"))?;
    let mut config = AppServerConfig::new(connection_string);
    config.hubs = vec![HUB.to_owned()];
    let chat = Arc::new(ChatHub::default());
    let app = AppServer::start(config, Arc::new(ChatMethods(chat.clone())))
        .map_err(|e| format!("app server: {e}"))?;
    tokio::spawn(sweep(app.handle(), chat));

    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("listen on {}: {e}", args.listen))?;
    let address = listener.local_addr().map_err(|e| e.to_string())?;
    let routes = Router::new()
        .route(
            "/",
            get(|| async { asset(PAGE, "text/html; charset=utf-8") }),
        )
        .route(
            "/chat.js",
            get(|| async { asset(SCRIPT, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/chat.css",
            get(|| async { asset(STYLE, "text/css; charset=utf-8") }),
        )
        .route(
            "/signalr.min.js",
            get(|| async { asset(CLIENT, "text/javascript; charset=utf-8") }),
        )
        .route("/chat/negotiate", post(negotiate))
        .with_state(app.handle());
    if tokio::time::timeout(Duration::from_secs(10), app.ready())
        .await
        .is_err()
    {
        eprintln!(
            "the service has not taken every server connection yet; retrying in the background"
        );
    }
    println!("Chat room: http://{address}/  (open it in two browser windows)");
    axum::serve(listener, routes)
        .with_graceful_shutdown(shutdown())
        .await
        .map_err(|e| e.to_string())?;
    app.stop().await;
    Ok(())
}

fn asset(body: &'static str, content_type: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

/// `POST /chat/negotiate`: the redirect to the service with a client token this app server
/// signed (what ASP.NET Core's negotiate answers with Azure SignalR), for the user the page
/// names in `x-chat-user`.
async fn negotiate(
    State(app): State<AppServerHandle>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let user = headers
        .get("x-chat-user")
        .and_then(|value| value.to_str().ok())
        .map(str::trim)
        .filter(|user| !user.is_empty() && user.len() <= 32);
    let Some(user) = user else {
        return (
            StatusCode::BAD_REQUEST,
            "a name (x-chat-user, up to 32 bytes) is needed",
        )
            .into_response();
    };
    match app.negotiate(HUB, query.as_deref().unwrap_or(""), Some(user)) {
        Ok(redirect) => (
            [(header::CONTENT_TYPE, "application/json")],
            redirect.to_json().to_string(),
        )
            .into_response(),
        Err(NegotiateError::NotConnected) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            NegotiateError::NotConnected.to_string(),
        )
            .into_response(),
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, error.to_string()).into_response(),
    }
}

async fn sweep(app: AppServerHandle, chat: Arc<ChatHub>) {
    let mut every = tokio::time::interval(SWEEP_INTERVAL);
    loop {
        every.tick().await;
        if let Some(context) = app.hub(HUB) {
            chat.sweep(context).await;
        }
    }
}

async fn shutdown() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .expect("SIGTERM handler");
        tokio::select! {
            _ = interrupt => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
    }
}
