//! `switchyard config check` and `switchyard config print`: the settings `serve` would run
//! with, read exactly as it reads them (file, `SWITCHYARD_*` variables, flags).

use std::process::ExitCode;

use clap::Subcommand;
use switchyard_node::config::{Loaded, Source};

use crate::settings::{load, SettingsArgs};

#[derive(Subcommand)]
pub enum ConfigCommand {
    /// Load and validate the settings as `serve` would (TLS and CA files read, nothing
    /// bound); print "ok" and a summary, or the error with exit status 2.
    Check(SettingsArgs),
    /// Print the effective settings as TOML, each with where its value came from (default,
    /// file:line, env VARIABLE, flag); access keys, the dashboard key and passwords in
    /// URLs are masked.
    Print(SettingsArgs),
}

pub fn run(command: ConfigCommand) -> Result<ExitCode, String> {
    match command {
        ConfigCommand::Check(args) => {
            let loaded = load(&args)?;
            print!("{}", summary(&loaded));
        }
        ConfigCommand::Print(args) => {
            let loaded = load(&args)?;
            print!(
                "{}",
                switchyard_node::config::render(&loaded.config, &loaded.sources, &hide)
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// "ok" and what matters most about a config, one line each.
fn summary(loaded: &Loaded) -> String {
    let config = &loaded.config;
    let mut out = String::from("ok\n");
    let mut line = |text: String| {
        out.push_str("  ");
        out.push_str(&text);
        out.push('\n');
    };
    line(format!(
        "listen {}; clients reach {}",
        config.listen,
        config.endpoint(config.listen)
    ));
    line(if config.development_mode() {
        "development mode: the Emulator's well-known key, loopback only".to_string()
    } else if config.secondary_access_key.is_some() {
        "access keys: primary and secondary".to_string()
    } else {
        "access key: set".to_string()
    });
    line(format!("mode {}", mode_name(config)));
    line(match (&config.tls.cert, &config.tls.key) {
        (Some(cert), Some(key)) => format!(
            "tls: {} with key {} (https, wss)",
            cert.display(),
            key.display()
        ),
        _ => "tls: off (plain HTTP)".to_string(),
    });
    line(match &config.cluster.backplane {
        Some(url) => format!("cluster through {}", crate::backplane::redact(url)),
        None => "one node (no cluster.backplane)".to_string(),
    });
    line(format!(
        "upstream templates: {}",
        config.upstream.templates.len()
    ));
    let given = |wanted: fn(&Source) -> bool| {
        switchyard_node::config::known_keys()
            .keys()
            .filter(|key| wanted(loaded.sources.get(key)))
            .count()
    };
    line(format!(
        "settings given: {} in the file, {} by variables, {} by flags; the rest are defaults",
        given(|s| matches!(s, Source::File { .. })),
        given(|s| matches!(s, Source::Env(_))),
        given(|s| matches!(s, Source::Flag(_))),
    ));
    out
}

fn mode_name(config: &switchyard_node::ValidConfig) -> &'static str {
    use switchyard_node::config::ServiceMode;
    match config.mode {
        ServiceMode::Auto => "auto",
        ServiceMode::Default => "default",
        ServiceMode::Serverless => "serverless",
    }
}

/// What `config print` shows instead of a secret; `None` shows the value.
fn hide(key: &str, value: &str) -> Option<String> {
    match key {
        "access_key"
        | "secondary_access_key"
        | "dashboard.key"
        | "cluster.secret"
        | "cluster.secondary_secret" => {
            Some(format!("<hidden: {} characters>", value.chars().count()))
        }
        "cluster.backplane" => Some(crate::backplane::redact(value)).filter(|v| v != value),
        "upstream.templates.url_template" => {
            Some(switchyard_node::config::hide_url(value)).filter(|v| v != value)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_hidden() {
        assert_eq!(
            hide("access_key", "k".repeat(40).as_str()).unwrap(),
            "<hidden: 40 characters>"
        );
        assert_eq!(
            hide("cluster.backplane", "redis://u:secret@h:6379").unwrap(),
            "redis://u:***@h:6379"
        );
        assert_eq!(hide("cluster.backplane", "redis://h:6379"), None);
        assert_eq!(
            switchyard_node::config::hide_url(
                "https://f.example/runtime/webhooks/signalr?code=KEY&x=1"
            ),
            "https://f.example/runtime/webhooks/signalr?code=***&x=1"
        );
        assert_eq!(
            switchyard_node::config::hide_url("http://u:pw@h:1/api/{hub}/{event}"),
            "http://u:***@h:1/api/{hub}/{event}"
        );
        assert_eq!(
            hide("upstream.templates.url_template", "http://h/{hub}"),
            None
        );
        assert_eq!(hide("listen", "127.0.0.1:8888"), None);
        assert_eq!(
            hide("cluster.secret", "s".repeat(32).as_str()).unwrap(),
            "<hidden: 32 characters>"
        );
    }
}
