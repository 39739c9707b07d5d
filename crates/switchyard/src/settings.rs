//! The flags every command that reads the service's settings shares, and the loading of those
//! settings from the file, the `SWITCHYARD_*` variables and the flags (assembled by
//! `switchyard_node::config::assemble`; the backplane's scheme is checked here, as the node
//! does not know the backends).

use std::path::PathBuf;

use clap::Args;
use switchyard_node::config::{FlagSetting, Loaded};

use crate::backplane;

/// The settings that shape the service's URLs and keys: what `token` and
/// `connection-string` need, and the first of `serve`'s.
#[derive(Args)]
pub(crate) struct EndpointArgs {
    /// TOML config file (also SWITCHYARD_CONFIG).
    #[arg(long, env = "SWITCHYARD_CONFIG")]
    pub(crate) config: Option<PathBuf>,
    /// Address to listen on [default: 127.0.0.1:8888].
    #[arg(long)]
    pub(crate) listen: Option<String>,
    /// Primary access key (also SWITCHYARD_ACCESS_KEY). Unset: development mode.
    #[arg(long)]
    pub(crate) access_key: Option<String>,
    /// URL clients use to reach the service [default: http://{listen}, or https:// with TLS].
    #[arg(long)]
    pub(crate) public_endpoint: Option<String>,
    /// Serve https and wss with this certificate chain (PEM, leaf first); needs --tls-key
    /// (also SWITCHYARD_TLS_CERT). Reloaded when the file changes, or on SIGHUP.
    #[arg(long, value_name = "FILE")]
    pub(crate) tls_cert: Option<String>,
    /// The certificate's private key (PEM; also SWITCHYARD_TLS_KEY).
    #[arg(long, value_name = "FILE")]
    pub(crate) tls_key: Option<String>,
}

/// Flags shared by commands that read all of the service's settings.
#[derive(Args)]
pub(crate) struct SettingsArgs {
    #[command(flatten)]
    pub(crate) endpoint: EndpointArgs,
    /// Secondary access key, accepted too (also SWITCHYARD_SECONDARY_ACCESS_KEY).
    #[arg(long)]
    pub(crate) secondary_access_key: Option<String>,
    /// auto (Default mode for hubs with app servers, serverless otherwise), default, or
    /// serverless [default: auto].
    #[arg(long)]
    pub(crate) mode: Option<String>,
    /// Join a cluster through this backplane; the scheme picks it. Redis:
    /// redis://[user:password@]host:port or rediss://; a Redis Cluster:
    /// redis-cluster://host:port,host:port,… or rediss-cluster:// (also
    /// SWITCHYARD_CLUSTER_BACKPLANE; --redis is its earlier name) [default: none, one node].
    #[arg(long, value_name = "URL")]
    pub(crate) backplane: Option<String>,
    /// --backplane's earlier name (a flag of its own, so errors and `config print` name the
    /// flag that was given).
    #[arg(long, value_name = "URL", conflicts_with = "backplane", hide = true)]
    pub(crate) redis: Option<String>,
    /// This node's name in the cluster [default: generated].
    #[arg(long)]
    pub(crate) node_id: Option<String>,
    /// Where the other nodes reach this one over HTTP, e.g. http://10.0.0.5:8080
    /// [default: the bound address, or the address used to reach Redis].
    #[arg(long, value_name = "URL")]
    pub(crate) internal_url: Option<String>,
    /// Browser origin allowed to call the service (CORS), e.g. https://app.example.com;
    /// repeatable; replaces cors.allowed_origins [default: any origin].
    #[arg(long = "cors-origin", value_name = "ORIGIN")]
    pub(crate) cors_origins: Vec<String>,
    /// Any other setting as dotted-key=value, e.g. --set limits.max_client_message_size=65536.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub(crate) set: Vec<String>,
}

impl EndpointArgs {
    pub(crate) fn flags(&self) -> Vec<FlagSetting> {
        let mut flags = Vec::new();
        for (key, value, flag) in [
            ("listen", &self.listen, "--listen"),
            ("access_key", &self.access_key, "--access-key"),
            (
                "public_endpoint",
                &self.public_endpoint,
                "--public-endpoint",
            ),
            ("tls.cert", &self.tls_cert, "--tls-cert"),
            ("tls.key", &self.tls_key, "--tls-key"),
        ] {
            if let Some(value) = value {
                flags.push(FlagSetting::new(key, value, flag));
            }
        }
        flags
    }
}

impl SettingsArgs {
    pub(crate) fn flags(&self) -> Result<Vec<FlagSetting>, String> {
        let mut flags = self.endpoint.flags();
        for (key, value, flag) in [
            (
                "secondary_access_key",
                &self.secondary_access_key,
                "--secondary-access-key",
            ),
            ("mode", &self.mode, "--mode"),
            ("cluster.backplane", &self.backplane, "--backplane"),
            ("cluster.redis", &self.redis, "--redis"),
            ("cluster.node_id", &self.node_id, "--node-id"),
            ("cluster.internal_url", &self.internal_url, "--internal-url"),
        ] {
            if let Some(value) = value {
                flags.push(FlagSetting::new(key, value, flag));
            }
        }
        if !self.cors_origins.is_empty() {
            let origins = self.cors_origins.join(",");
            flags.push(FlagSetting::new(
                "cors.allowed_origins",
                &origins,
                "--cors-origin",
            ));
        }
        for pair in &self.set {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| format!("--set expects KEY=VALUE, got '{pair}'"))?;
            flags.push(FlagSetting::set(key.trim(), value));
        }
        Ok(flags)
    }
}

/// Every setting, as `serve` reads them.
pub(crate) fn load(args: &SettingsArgs) -> Result<Loaded, String> {
    load_with(args.endpoint.config.as_deref(), &args.flags()?)
}

/// The settings with only the URL- and key-shaping flags (the file and variables in full).
pub(crate) fn load_endpoint(args: &EndpointArgs) -> Result<Loaded, String> {
    load_with(args.config.as_deref(), &args.flags())
}

fn load_with(path: Option<&std::path::Path>, flags: &[FlagSetting]) -> Result<Loaded, String> {
    let text = match path {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read config file {}: {e}", path.display()))?,
        ),
        None => None,
    };
    let origin = path.map(|p| p.display().to_string()).unwrap_or_default();
    let loaded = switchyard_node::config::assemble(
        text.as_deref().map(|t| (t, origin.as_str())),
        our_variables(),
        flags,
    )?;
    // The node checks only the URL's shape; which backends exist is this binary's to say.
    if let Some(url) = &loaded.config.cluster.backplane {
        backplane::Kind::of(url)
            .map_err(|e| format!("{e} ({})", loaded.sources.get("cluster.backplane")))?;
    }
    Ok(loaded)
}

/// The `SWITCHYARD_*` variables. `std::env::vars` panics on any variable that is not Unicode,
/// ours or not; one of ours that is not is read lossily (and then refused as a value).
fn our_variables() -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(name, value)| {
            let name = name.into_string().ok()?;
            name.starts_with("SWITCHYARD_")
                .then(|| (name, value.to_string_lossy().into_owned()))
        })
        .collect()
}
