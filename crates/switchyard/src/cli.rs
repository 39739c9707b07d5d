//! Commands and flags. Other tooling depends on these names: keep them stable.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use switchyard_auth::{client_audience, TokenBuilder};
use switchyard_node::config::Loaded;
use switchyard_node::Node;

use crate::backplane;
use crate::settings::{load, load_endpoint, EndpointArgs, SettingsArgs};

/// A line on stdout from a running service, where a closed or full stdout (a pipe whose
/// reader left) must not stop it, as `println!` would by panicking.
macro_rules! status {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}

#[derive(Parser)]
#[command(
    name = "switchyard",
    version,
    about = "Self-hosted real-time message service, wire-compatible with Azure SignalR Service"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the service.
    Serve(ServeArgs),
    /// Print a client URL and access token for a hub.
    #[command(long_about = TOKEN_ABOUT)]
    Token(TokenArgs),
    /// Print the connection string apps use (`Endpoint=…;AccessKey=…;Version=1.0;`), key
    /// included; `serve` prints it with the key hidden unless in development mode.
    #[command(long_about = CONNECTION_STRING_ABOUT)]
    ConnectionString(ConnectionStringArgs),
    /// The settings `serve` would run with: `config check` validates them, `config print`
    /// shows each with where it came from.
    #[command(subcommand)]
    Config(crate::config_cmd::ConfigCommand),
    /// Upstream webhooks (serverless): `upstream init` writes a sample config file,
    /// `upstream import` converts the Azure SignalR Emulator's settings.json.
    #[command(subcommand)]
    Upstream(UpstreamCommand),
    /// Capacity planning: the messages, bandwidth and Azure unit a load needs, checked against
    /// switchyard-bench reports.
    #[command(
        long_about = crate::capacity::LONG_ABOUT,
        after_long_help = crate::capacity::AFTER_LONG_HELP
    )]
    Capacity(crate::capacity::CapacityArgs),
}

#[derive(Subcommand)]
enum UpstreamCommand {
    /// Write a commented sample config file, switchyard.toml, whose upstream template points
    /// at a local Azure Functions host (http://localhost:7071/runtime/webhooks/signalr).
    Init(InitArgs),
    /// Convert the Azure SignalR Emulator's settings.json (its UpstreamSettings templates)
    /// into [[upstream.templates]] entries for switchyard.toml.
    Import(crate::upstream_import::ImportArgs),
}

const TOKEN_ABOUT: &str = "\
Print a client URL and access token for a hub.

The URL, and so the token's audience, is built from the settings that shape it: --listen, \
--public-endpoint and TLS (--tls-cert/--tls-key: https), from flags, SWITCHYARD_* variables or \
the --config file. Give `token` the same ones `serve` runs with (the same --config is \
simplest): a token naming another URL is refused with 401. The key is --access-key's.";

const CONNECTION_STRING_ABOUT: &str = "\
Print the connection string apps use (Endpoint=…;AccessKey=…;Version=1.0;), key included.

Its endpoint is built from --listen, --public-endpoint and TLS (--tls-cert/--tls-key: https), \
its key from --access-key, each from flags, SWITCHYARD_* variables or the --config file: give \
it the same ones `serve` runs with.";

#[derive(Args)]
struct InitArgs {
    /// Folder to write switchyard.toml into (created if missing).
    #[arg(short = 'o', long = "output", value_name = "DIR", default_value = ".")]
    output: PathBuf,
    /// Overwrite an existing switchyard.toml.
    #[arg(long)]
    force: bool,
}

#[derive(Args)]
struct ConnectionStringArgs {
    #[command(flatten)]
    endpoint: EndpointArgs,
}

#[derive(Args)]
struct ServeArgs {
    #[command(flatten)]
    settings: SettingsArgs,
    /// Log lines on stderr as text (colours only on a terminal) or json (one object a line);
    /// replaces log.format [default: text].
    #[arg(long, value_name = "FORMAT", value_parser = ["text", "json"])]
    log_format: Option<String>,
}

#[derive(Args)]
struct TokenArgs {
    #[command(flatten)]
    endpoint: EndpointArgs,
    /// Hub the token is for (its audience is `{endpoint}/client/?hub={hub}`).
    #[arg(long, required_unless_present_any = ["audience", "admin"])]
    hub: Option<String>,
    /// Use this audience instead, e.g. a REST URL such as
    /// http://127.0.0.1:8888/api/hubs/chat/:send (REST tokens name the request URL).
    #[arg(long, conflicts_with_all = ["hub", "admin"])]
    audience: Option<String>,
    /// An operator token for the dashboard (audience `{endpoint}/dashboard`, claim
    /// role=admin); prints the address that opens the dashboard with it.
    #[arg(long, conflicts_with = "hub")]
    admin: bool,
    /// User id (the `asrs.s.uid` and `nameid` claims).
    #[arg(long)]
    user: Option<String>,
    /// Token lifetime, e.g. 1h, 30m.
    #[arg(long, default_value = "1h", value_parser = humantime::parse_duration)]
    ttl: Duration,
    /// Extra claim as type=value; repeatable.
    #[arg(long = "claim", value_name = "TYPE=VALUE")]
    claims: Vec<String>,
    /// Print {"url":…,"accessToken":…} instead of two lines.
    #[arg(long)]
    json: bool,
}

/// Runs the command; `Err` is a usage or configuration error (exit status 2).
pub fn run() -> Result<ExitCode, String> {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => serve(args).map(|()| ExitCode::SUCCESS),
        Command::Token(args) => token(args).map(|()| ExitCode::SUCCESS),
        Command::ConnectionString(args) => {
            let config = load_endpoint(&args.endpoint)?.config;
            let key = config
                .access_key
                .clone()
                .unwrap_or_else(|| switchyard_auth::EMULATOR_ACCESS_KEY.to_string());
            println!(
                "{}",
                connection_string(&config.endpoint(config.listen), &key)
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Config(command) => crate::config_cmd::run(command),
        Command::Upstream(UpstreamCommand::Init(args)) => {
            upstream_init(args).map(|()| ExitCode::SUCCESS)
        }
        Command::Upstream(UpstreamCommand::Import(args)) => crate::upstream_import::run(args),
        Command::Capacity(args) => crate::capacity::run(args),
    }
}

/// What `serve` prints in place of a configured access key.
const HIDDEN_KEY: &str = "<access_key>";

/// `Endpoint=http://127.0.0.1;Port=8888;AccessKey=…;Version=1.0;`
fn connection_string(endpoint: &str, key: &str) -> String {
    match url::Url::parse(endpoint) {
        Ok(url) => {
            let host = url.host_str().unwrap_or("localhost");
            let mut text = format!("Endpoint={}://{}", url.scheme(), host);
            if let Some(port) = url.port() {
                text.push_str(&format!(";Port={port}"));
            }
            format!("{text};AccessKey={key};Version=1.0;")
        }
        Err(_) => format!("Endpoint={endpoint};AccessKey={key};Version=1.0;"),
    }
}

/// Logs go to stderr (stdout carries the connection string), filtered by `SWITCHYARD_LOG`.
fn init_logging(log: &switchyard_node::config::Log) {
    use std::io::IsTerminal;
    use switchyard_node::config::LogFormat;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SWITCHYARD_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr);
    match log.format {
        // Colour codes only for a person at a terminal: in files and journals they are noise.
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none())
            .init(),
        // The event's fields at the top level, where log pipelines look for them; the span
        // (an app server's hub and id) as `span`.
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .init(),
    }
}

fn serve(args: ServeArgs) -> Result<(), String> {
    let mut settings = args.settings;
    if let Some(format) = args.log_format {
        settings.set.push(format!("log.format={format}"));
    }
    let Loaded { config, sources } = load(&settings)?;
    init_logging(&config.log);
    for name in sources.ignored_variables() {
        tracing::debug!(variable = %name, "ignored a Kubernetes service-link variable");
    }
    let runtime = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    runtime.block_on(async move {
        // SIGHUP ends a process by default. The node logs and ignores it (or reloads TLS files)
        // once it serves; taken over here already, a SIGHUP while joining a cluster is not the
        // end either (it is dropped: nothing to reload before the listener runs).
        #[cfg(unix)]
        let _early_hangups =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup());
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|e| format!("cannot listen on {}: {e}", config.listen))?;
        let bound = listener.local_addr().map_err(|e| e.to_string())?;
        let endpoint = config.endpoint(bound);
        let node: Arc<Node> = match &config.cluster.backplane {
            None => Node::new(config.clone()),
            Some(url) => {
                let node_id = config
                    .cluster
                    .node_id
                    .clone()
                    .unwrap_or_else(|| format!("node-{:08x}", rand::random::<u32>()));
                status!("Cluster: node {node_id} on {}", backplane::redact(url));
                let node = backplane::join(&config, url, node_id.clone()).await?;
                if node.cluster().id_in_use_elsewhere().await {
                    return Err(format!(
                        "node id {node_id:?} is already used by another node of this cluster \
                         (same backplane and cluster.prefix): give every node its own --node-id"
                    ));
                }
                node
            }
        };
        if config.development_mode() {
            status!(
                "Development mode: no access key configured, using the Azure SignalR Emulator's \
                 well-known key; only loopback addresses are allowed. Set --access-key for anything else."
            );
        }
        if config.tls.enabled() {
            status!("Listening on {bound} (TLS: https and wss)");
        } else {
            status!("Listening on {bound}");
        }
        // A configured key stays out of stdout (journals, container logs keep it).
        let key = if config.development_mode() {
            node.keys().primary().to_string()
        } else {
            HIDDEN_KEY.to_string()
        };
        status!("ConnectionString: {}", connection_string(&endpoint, &key));
        if !config.development_mode() {
            status!(
                "The AccessKey is your access_key setting; `switchyard connection-string` (with the \
                 same settings) prints the string with it."
            );
        }
        tracing::info!(%bound, "switchyard serving");
        switchyard_node::serve(listener, node, shutdown_signal())
            .await
            .map_err(|e| format!("server failed: {e}"))
    })
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
    tracing::info!("shutting down: closing clients");
}

fn upstream_init(args: InitArgs) -> Result<(), String> {
    let path = crate::upstream_init::write_sample(&args.output, args.force)?;
    println!("Wrote {}", path.display());
    println!(
        "Run the service with it: switchyard serve --config {}",
        path.display()
    );
    Ok(())
}

fn token(args: TokenArgs) -> Result<(), String> {
    let config = load_endpoint(&args.endpoint)?.config;
    let endpoint = config.endpoint(config.listen);
    let base = url::Url::parse(&endpoint).map_err(|e| format!("bad endpoint {endpoint}: {e}"))?;
    let audience = match (&args.audience, &args.hub) {
        (Some(audience), _) => audience.clone(),
        (None, Some(hub)) => client_audience(&base, hub),
        (None, None) if args.admin => format!(
            "{}{}",
            endpoint.trim_end_matches('/'),
            switchyard_node::dashboard::DASHBOARD_PATH
        ),
        (None, None) => return Err("one of --hub, --audience or --admin is required".into()),
    };
    let cap = config.limits.max_token_lifetime;
    if !cap.is_zero() && args.ttl > cap {
        return Err(format!(
            "--ttl {} is longer than limits.max_token_lifetime ({}): the service would refuse \
             the token; use a shorter --ttl or raise the limit",
            humantime::format_duration(args.ttl),
            humantime::format_duration(cap)
        ));
    }
    let mut builder = TokenBuilder::new(audience.clone()).lifetime(args.ttl);
    if args.admin {
        let (claim, value) = switchyard_node::dashboard::ADMIN_ROLE;
        builder = builder.claim(claim, value);
    }
    if let Some(user) = &args.user {
        builder = builder
            .claim("asrs.s.uid", user.clone())
            .claim("nameid", user.clone());
    }
    for claim in &args.claims {
        let (kind, value) = claim
            .split_once('=')
            .ok_or_else(|| format!("--claim expects TYPE=VALUE, got '{claim}'"))?;
        builder = builder.claim(kind.to_string(), value.to_string());
    }
    let key = config
        .access_key
        .clone()
        .unwrap_or_else(|| switchyard_auth::EMULATOR_ACCESS_KEY.to_string());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|e| e.to_string())?
        .as_secs() as i64;
    let token = builder.sign(&key, now);
    if args.admin {
        // After `#`: the browser never sends it, so it stays out of logs and `Referer`; the
        // page takes it once, then drops it from the address bar.
        let open = format!("{audience}#access_token={token}");
        if args.json {
            println!(
                "{}",
                serde_json::json!({"url": open, "audience": audience, "accessToken": token})
            );
        } else {
            println!("{open}");
        }
        return Ok(());
    }
    if args.json {
        println!(
            "{}",
            serde_json::json!({"url": audience, "accessToken": token})
        );
    } else {
        println!("{audience}");
        println!("{token}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_string_shape() {
        assert_eq!(
            connection_string("http://127.0.0.1:8888", "KEY"),
            "Endpoint=http://127.0.0.1;Port=8888;AccessKey=KEY;Version=1.0;"
        );
        assert_eq!(
            connection_string("https://signalr.example.com", "KEY"),
            "Endpoint=https://signalr.example.com;AccessKey=KEY;Version=1.0;"
        );
    }
}
