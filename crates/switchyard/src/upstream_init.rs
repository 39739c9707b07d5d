//! `switchyard upstream init`: writes a commented sample config file with an upstream
//! template, like the Emulator's `upstream init` writes its settings file.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The file written into the chosen folder.
pub const FILE_NAME: &str = "switchyard.toml";

/// Points at the Azure Functions host's SignalR trigger on its default local port, for every
/// hub, category and event (the Emulator's default template).
pub const SAMPLE: &str = r#"# Switchyard configuration, written by `switchyard upstream init`.
# Run the service with it:  switchyard serve --config switchyard.toml
# Every setting is described in docs/configuration.md; SWITCHYARD_* variables and
# flags override what is written here.

# listen = "127.0.0.1:8888"
# access_key = "use-a-long-random-secret-of-at-least-32-characters"

[upstream]
# Time one upstream request may take, waiting for a free slot included. An invocation
# whose request runs out of time is answered with an error completion.
# timeout = "30s"
# Requests in flight to one upstream origin (scheme, host, port) at a time.
# max_concurrency = 64
# Largest upstream response read, in bytes.
# max_response_size = 16777216
# ca_file: the path of a PEM bundle of certificate authorities trusted for https upstreams
# besides the public roots (a private CA of on-premises back ends). Unset by default.

# Where serverless clients' events are POSTed. Templates are tried in order and the first
# whose three patterns match is used. A pattern is "*", a name, or comma-separated names.
# {hub}, {category} and {event} in the URL are replaced (URI-escaped). Categories:
# "connections" (events "connected" and "disconnected") and "messages" (the event is the
# hub method the client invoked). Requests are signed with the access keys
# (X-ASRS-Signature).
#
# More specific templates go first, for example:
# [[upstream.templates]]
# url_template = "https://chat.example.com/api/{hub}/{category}/{event}"
# hub_pattern = "chat"
# category_pattern = "messages"
# event_pattern = "broadcast, echo"

# The Azure Functions host's SignalR trigger on its default local port.
[[upstream.templates]]
url_template = "http://localhost:7071/runtime/webhooks/signalr"
hub_pattern = "*"
event_pattern = "*"
category_pattern = "*"
"#;

/// Writes the sample into `dir` (created if missing). An existing file is kept unless
/// `force`. Returns the file's path.
pub fn write_sample(dir: &Path, force: bool) -> Result<PathBuf, String> {
    std::fs::create_dir_all(dir)
        .map_err(|e| format!("cannot create folder {}: {e}", dir.display()))?;
    let path = dir.join(FILE_NAME);
    write_new(&path, SAMPLE, force)?;
    Ok(path)
}

/// Writes `text` to `path`; an existing file is an error unless `force` (`upstream init`
/// and `upstream import` share the rule).
pub fn write_new(path: &Path, text: &str, force: bool) -> Result<(), String> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true);
    if force {
        options.create(true).truncate(true);
    } else {
        // Fails if the file exists, atomically: nothing is ever overwritten by accident.
        options.create_new(true);
    }
    let mut file = options.open(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            format!(
                "{} already exists; use --force to overwrite it",
                path.display()
            )
        } else {
            format!("cannot write {}: {e}", path.display())
        }
    })?;
    file.write_all(text.as_bytes())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sample_is_a_valid_config() {
        let config = switchyard_node::config::assemble(Some((SAMPLE, "sample")), Vec::new(), &[])
            .unwrap()
            .config;
        let templates = &config.upstream.templates;
        assert_eq!(templates.len(), 1);
        assert_eq!(
            templates[0].url_template,
            "http://localhost:7071/runtime/webhooks/signalr"
        );
        assert_eq!(
            (
                templates[0].hub_pattern.as_str(),
                templates[0].event_pattern.as_str(),
                templates[0].category_pattern.as_str()
            ),
            ("*", "*", "*")
        );
        assert_eq!(
            config.upstream.timeout,
            switchyard_node::config::Upstream::default().timeout
        );
    }

    /// Every commented-out setting, uncommented, is valid too.
    #[test]
    fn the_commented_examples_are_valid() {
        let uncommented: String = SAMPLE
            .lines()
            .map(|line| {
                let rest = line.strip_prefix("# ").unwrap_or(line);
                let key = rest.split(" = ").next().unwrap_or("");
                let is_setting = rest.starts_with("[[")
                    || (rest.contains(" = ")
                        && key.chars().all(|c| c.is_ascii_lowercase() || c == '_'));
                if is_setting {
                    format!("{rest}\n")
                } else {
                    format!("{line}\n")
                }
            })
            .collect();
        let config =
            switchyard_node::config::assemble(Some((&uncommented, "sample")), Vec::new(), &[])
                .unwrap()
                .config;
        assert_eq!(config.upstream.templates.len(), 2);
        assert_eq!(
            config.upstream.templates[0].event_pattern,
            "broadcast, echo"
        );
        assert_eq!(config.upstream.max_concurrency, 64);
        assert!(config.access_key.is_some());
    }
}
