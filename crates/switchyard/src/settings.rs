//! Assembles the node's [`Config`] from defaults, an optional TOML file, `SWITCHYARD_*`
//! environment variables and flags. Unknown keys and unknown variables are errors.

use std::collections::BTreeMap;

use switchyard_node::{Config, ValidConfig};
use toml::{Table, Value};

/// Variables that are not settings but are still ours.
pub const RESERVED_VARIABLES: &[&str] = &["SWITCHYARD_CONFIG", "SWITCHYARD_LOG"];

/// Settings whose default is "unset", so they do not appear in the serialized defaults.
const OPTIONAL_STRING_KEYS: &[&str] = &[
    "access_key",
    "secondary_access_key",
    "public_endpoint",
    "admin_listen",
    "cluster.backplane",
    "cluster.node_id",
    "cluster.internal_url",
    "tls.cert",
    "tls.key",
    "upstream.ca_file",
    "dashboard.key",
];

/// Lists whose default is "unset" (a meaning of its own), so they do not appear in the
/// serialized defaults either.
const OPTIONAL_LIST_KEYS: &[&str] = &["cors.allowed_origins"];

/// Earlier names of settings (earlier name, name), still read from the file, variables and
/// flags.
const RENAMED_KEYS: &[(&str, &str)] = &[("cluster.redis", "cluster.backplane")];

/// The current name of `key`.
fn renamed(key: &str) -> &str {
    RENAMED_KEYS
        .iter()
        .find(|(earlier, _)| *earlier == key)
        .map_or(key, |(_, name)| name)
}

/// Moves a file's settings under earlier names to their names; both at once is an error.
fn rename_in_file(table: &mut Table, origin: &str) -> Result<(), String> {
    for (earlier, name) in RENAMED_KEYS {
        let (section, old_leaf) = earlier.rsplit_once('.').expect("renamed keys are dotted");
        let (_, new_leaf) = name.rsplit_once('.').expect("renamed keys are dotted");
        let Some(Value::Table(section)) = table.get_mut(section) else {
            continue;
        };
        let Some(value) = section.remove(old_leaf) else {
            continue;
        };
        if section.contains_key(new_leaf) {
            return Err(format!(
                "config file {origin}: both {earlier} and {name} are set; {earlier} is the \
                 earlier name of {name}: keep one"
            ));
        }
        section.insert(new_leaf.to_string(), value);
    }
    Ok(())
}

/// Lists of tables: one line of text cannot express them, so only the file sets them.
const FILE_ONLY_KEYS: &[(&str, &str)] = &[("upstream.templates", "[[upstream.templates]]")];

/// Refuses a file-only key given as a variable or flag, saying where it goes.
fn settable_outside_file(key: &str, given_as: &str) -> Result<(), String> {
    match FILE_ONLY_KEYS.iter().find(|(k, _)| *k == key) {
        Some((_, section)) => Err(format!(
            "{given_as} cannot be set from a variable or flag: {key} is a list of tables; \
             write {section} entries in the config file (--config)"
        )),
        None => Ok(()),
    }
}

/// Every settable key (dotted path) with its default, for env names and `--set` checks.
pub fn known_keys() -> BTreeMap<String, Option<Value>> {
    let mut keys = BTreeMap::new();
    let defaults = Value::try_from(Config::default()).expect("defaults serialize");
    fn walk(prefix: &str, value: &Value, keys: &mut BTreeMap<String, Option<Value>>) {
        match value {
            Value::Table(table) => {
                for (k, v) in table {
                    let path = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    walk(&path, v, keys);
                }
            }
            other => {
                keys.insert(prefix.to_string(), Some(other.clone()));
            }
        }
    }
    walk("", &defaults, &mut keys);
    for key in OPTIONAL_STRING_KEYS {
        keys.insert((*key).to_string(), None);
    }
    for key in OPTIONAL_LIST_KEYS {
        keys.insert((*key).to_string(), Some(Value::Array(Vec::new())));
    }
    keys
}

/// `limits.max_client_message_size` -> `SWITCHYARD_LIMITS_MAX_CLIENT_MESSAGE_SIZE`.
pub fn env_name(key: &str) -> String {
    format!("SWITCHYARD_{}", key.replace('.', "_").to_ascii_uppercase())
}

/// Turns text from a variable or flag into the TOML type the key's default has. A list is
/// written comma-separated (`https://a.example,https://b.example`; empty text = empty list),
/// each item typed like the default's items.
fn typed(key: &str, text: &str, default: Option<&Value>) -> Result<Value, String> {
    match default {
        Some(Value::Array(items)) => text
            .split(',')
            .map(str::trim)
            .filter(|item| !item.is_empty())
            .map(|item| typed(key, item, items.first()))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
        Some(Value::Integer(_)) => text
            .trim()
            .parse::<i64>()
            .map(Value::Integer)
            .map_err(|_| format!("{key} must be a whole number, got '{text}'")),
        Some(Value::Boolean(_)) => text
            .trim()
            .parse::<bool>()
            .map(Value::Boolean)
            .map_err(|_| format!("{key} must be true or false, got '{text}'")),
        _ => Ok(Value::String(text.to_string())),
    }
}

fn set_path(table: &mut Table, key: &str, value: Value) {
    let mut parts: Vec<&str> = key.split('.').collect();
    let last = parts.pop().expect("non-empty key");
    let mut current = table;
    for part in parts {
        current = current
            .entry(part.to_string())
            .or_insert_with(|| Value::Table(Table::new()))
            .as_table_mut()
            .expect("settings sections are tables");
    }
    current.insert(last.to_string(), value);
}

/// Builds the config. `file` is the TOML text (if any) and where it came from; `env` the
/// process environment; `overrides` dotted keys from flags.
pub fn assemble(
    file: Option<(&str, &str)>,
    env: impl IntoIterator<Item = (String, String)>,
    overrides: &[(String, String)],
) -> Result<ValidConfig, String> {
    let known = known_keys();
    let mut table = match file {
        Some((text, origin)) => text
            .parse::<Table>()
            .map_err(|e| format!("config file {origin}: {e}"))?,
        None => Table::new(),
    };
    if let Some((_, origin)) = file {
        rename_in_file(&mut table, origin)?;
    }
    let mut by_env: BTreeMap<String, &str> =
        known.keys().map(|k| (env_name(k), k.as_str())).collect();
    for (earlier, name) in RENAMED_KEYS {
        by_env.insert(env_name(earlier), name);
    }
    let mut env: Vec<(String, String)> = env
        .into_iter()
        .filter(|(name, _)| name.starts_with("SWITCHYARD_"))
        .collect();
    env.sort();
    for (name, text) in env {
        if RESERVED_VARIABLES.contains(&name.as_str()) {
            continue;
        }
        let Some(key) = by_env.get(&name) else {
            return Err(format!(
                "unknown environment variable {name}; known variables: {}",
                known
                    .keys()
                    .map(|k| env_name(k))
                    .chain(RESERVED_VARIABLES.iter().map(|s| s.to_string()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        };
        settable_outside_file(key, &name)?;
        let value = typed(&name, &text, known[*key].as_ref())?;
        set_path(&mut table, key, value);
    }
    for (key, text) in overrides {
        let key = renamed(key);
        let Some(default) = known.get(key) else {
            return Err(format!(
                "unknown setting '{key}'; known settings: {}",
                known.keys().cloned().collect::<Vec<_>>().join(", ")
            ));
        };
        settable_outside_file(key, key)?;
        let value = typed(key, text, default.as_ref())?;
        set_path(&mut table, key, value);
    }
    let origin = file.map_or("settings", |(_, origin)| origin);
    let config: Config = Value::Table(table)
        .try_into()
        .map_err(|e: toml::de::Error| format!("{origin}: {}", e.message()))?;
    let config = config.validate().map_err(|e| e.to_string())?;
    if let Some(url) = &config.cluster.backplane {
        crate::backplane::Kind::of(url)?;
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn defaults_without_anything() {
        let config = assemble(None, env(&[("PATH", "/bin")]), &[]).unwrap();
        assert_eq!(*config, Config::default());
    }

    #[test]
    fn file_then_env_then_flags() {
        let file = "listen = \"127.0.0.1:9000\"\n[limits]\nmax_client_message_size = 4096\n";
        let config = assemble(
            Some((file, "test.toml")),
            env(&[
                ("SWITCHYARD_LISTEN", "127.0.0.1:9001"),
                ("SWITCHYARD_TIMEOUTS_CLIENT_TIMEOUT", "45s"),
            ]),
            &[("listen".into(), "127.0.0.1:9002".into())],
        )
        .unwrap();
        assert_eq!(config.listen.port(), 9002);
        assert_eq!(config.limits.max_client_message_size, 4096);
        assert_eq!(config.timeouts.client_timeout.as_secs(), 45);
    }

    #[test]
    fn the_log_section_comes_from_file_env_and_flags() {
        use switchyard_node::config::LogFormat;
        let config = assemble(
            Some(("[log]\nformat = \"json\"\nmessages = true\n", "a.toml")),
            env(&[]),
            &[],
        )
        .unwrap();
        assert_eq!(config.log.format, LogFormat::Json);
        assert!(config.log.messages);
        let config = assemble(
            None,
            env(&[
                ("SWITCHYARD_LOG_FORMAT", "json"),
                ("SWITCHYARD_LOG", "debug"),
            ]),
            &[("log.format".into(), "text".into())],
        )
        .unwrap();
        assert_eq!(config.log.format, LogFormat::Text);
        assert!(!config.log.messages);
        let err = assemble(None, env(&[("SWITCHYARD_LOG_FORMAT", "xml")]), &[]).unwrap_err();
        assert!(err.contains("xml"), "{err}");
    }

    #[test]
    fn unknown_keys_are_errors() {
        let err = assemble(Some(("lisen = \"x\"", "a.toml")), env(&[]), &[]).unwrap_err();
        assert!(err.contains("lisen"), "{err}");
        let err = assemble(Some(("[limits]\nmax_foo = 1", "a.toml")), env(&[]), &[]).unwrap_err();
        assert!(err.contains("max_foo"), "{err}");
        let err = assemble(None, env(&[("SWITCHYARD_LISTN", "x")]), &[]).unwrap_err();
        assert!(err.contains("SWITCHYARD_LISTN"), "{err}");
        let err = assemble(None, env(&[]), &[("nope".into(), "1".into())]).unwrap_err();
        assert!(err.contains("nope"), "{err}");
    }

    #[test]
    fn bad_values_are_explained() {
        let err = assemble(
            None,
            env(&[("SWITCHYARD_LIMITS_MAX_CLIENT_MESSAGE_SIZE", "big")]),
            &[],
        )
        .unwrap_err();
        assert!(err.contains("whole number"), "{err}");
        let err = assemble(
            None,
            env(&[("SWITCHYARD_TIMEOUTS_CLIENT_TIMEOUT", "soon")]),
            &[],
        )
        .unwrap_err();
        assert!(err.contains("soon"), "{err}");
    }

    /// `cluster.redis` is `cluster.backplane`'s earlier name: the file, its variable and
    /// `--set` still take it; the scheme is checked against the backends this build has.
    #[test]
    fn the_backplane_under_its_earlier_name_and_unknown_schemes() {
        let url = |config: &ValidConfig| config.cluster.backplane.clone();
        let file = "[cluster]\nredis = \"redis://h:1\"\n";
        let config = assemble(Some((file, "a.toml")), env(&[]), &[]).unwrap();
        assert_eq!(url(&config).as_deref(), Some("redis://h:1"));
        // A variable under the new name overrides the file's earlier name.
        let config = assemble(
            Some((file, "a.toml")),
            env(&[("SWITCHYARD_CLUSTER_BACKPLANE", "redis://h:2")]),
            &[],
        )
        .unwrap();
        assert_eq!(url(&config).as_deref(), Some("redis://h:2"));
        let config = assemble(
            None,
            env(&[("SWITCHYARD_CLUSTER_REDIS", "redis://h:3")]),
            &[],
        );
        assert_eq!(url(&config.unwrap()).as_deref(), Some("redis://h:3"));
        let config = assemble(
            None,
            env(&[]),
            &[("cluster.redis".into(), "redis-cluster://h:4".into())],
        );
        assert_eq!(
            url(&config.unwrap()).as_deref(),
            Some("redis-cluster://h:4")
        );
        let both = "[cluster]\nredis = \"redis://h:1\"\nbackplane = \"redis://h:2\"\n";
        let err = assemble(Some((both, "b.toml")), env(&[]), &[]).unwrap_err();
        assert!(err.contains("b.toml") && err.contains("keep one"), "{err}");
        let err = assemble(
            None,
            env(&[("SWITCHYARD_CLUSTER_BACKPLANE", "nats://u:secret@h:4222")]),
            &[],
        )
        .unwrap_err();
        assert!(err.contains("\"nats\"") && !err.contains("secret"), "{err}");
    }

    #[test]
    fn development_mode_refuses_public_address() {
        let err = assemble(None, env(&[("SWITCHYARD_LISTEN", "0.0.0.0:8888")]), &[]).unwrap_err();
        assert!(err.contains("development mode"), "{err}");
        let key = "k".repeat(44);
        let err = assemble(
            None,
            env(&[
                ("SWITCHYARD_LISTEN", "0.0.0.0:8888"),
                ("SWITCHYARD_ACCESS_KEY", &key),
            ]),
            &[],
        )
        .unwrap_err();
        // With a key, an unspecified address still needs the URL clients reach it at.
        assert!(err.contains("public_endpoint is required"), "{err}");
        let config = assemble(
            None,
            env(&[
                ("SWITCHYARD_LISTEN", "0.0.0.0:8888"),
                ("SWITCHYARD_ACCESS_KEY", &key),
                ("SWITCHYARD_PUBLIC_ENDPOINT", "https://signalr.example.com"),
            ]),
            &[],
        )
        .unwrap();
        assert!(!config.development_mode());
    }

    #[test]
    fn lists_are_comma_separated_in_variables_and_flags() {
        let config = assemble(None, env(&[]), &[]).unwrap();
        assert_eq!(config.cors.allowed_origins, None);
        let config = assemble(
            None,
            env(&[(
                "SWITCHYARD_CORS_ALLOWED_ORIGINS",
                "https://a.example, https://b.example:8443,",
            )]),
            &[],
        )
        .unwrap();
        assert_eq!(
            config.cors.allowed_origins.as_deref().unwrap_or_default(),
            ["https://a.example", "https://b.example:8443"]
        );
        // A flag replaces the variable's list, it does not add to it.
        let config = assemble(
            None,
            env(&[("SWITCHYARD_CORS_ALLOWED_ORIGINS", "https://a.example")]),
            &[(
                "cors.allowed_origins".into(),
                "http://localhost:3000".into(),
            )],
        )
        .unwrap();
        assert_eq!(
            config.cors.allowed_origins.as_deref().unwrap_or_default(),
            ["http://localhost:3000"]
        );
        // Empty text: no origin at all.
        let config = assemble(None, env(&[("SWITCHYARD_CORS_ALLOWED_ORIGINS", "")]), &[]).unwrap();
        assert_eq!(config.cors.allowed_origins.as_deref(), Some(&[][..]));
        // The file takes a TOML array.
        let config = assemble(
            Some((
                "[cors]\nallowed_origins = [\"https://c.example\"]\nmax_age = \"1h\"\n",
                "a.toml",
            )),
            env(&[]),
            &[],
        )
        .unwrap();
        assert_eq!(
            config.cors.allowed_origins.as_deref().unwrap_or_default(),
            ["https://c.example"]
        );
        assert_eq!(config.cors.max_age.as_secs(), 3600);
    }

    #[test]
    fn bad_origins_are_named() {
        let err = assemble(
            None,
            env(&[(
                "SWITCHYARD_CORS_ALLOWED_ORIGINS",
                "https://a.example,a.example/path",
            )]),
            &[],
        )
        .unwrap_err();
        assert!(err.contains("'a.example/path'"), "{err}");
    }

    #[test]
    fn upstream_templates_come_from_the_file() {
        let file = "[upstream]\ntimeout = \"5s\"\n\n[[upstream.templates]]\n\
                    url_template = \"http://localhost:7071/api/{hub}/{event}\"\n\
                    hub_pattern = \"chat, game\"\n\n[[upstream.templates]]\n\
                    url_template = \"https://f.example/runtime/webhooks/signalr\"\n";
        let config = assemble(
            Some((file, "a.toml")),
            env(&[("SWITCHYARD_UPSTREAM_MAX_CONCURRENCY", "8")]),
            &[],
        )
        .unwrap();
        let upstream = &config.upstream;
        assert_eq!(upstream.templates.len(), 2);
        assert_eq!(upstream.templates[0].hub_pattern, "chat, game");
        assert_eq!(upstream.templates[1].event_pattern, "*");
        assert_eq!(upstream.timeout.as_secs(), 5);
        assert_eq!(upstream.max_concurrency, 8);
        let err = assemble(
            None,
            env(&[("SWITCHYARD_UPSTREAM_TEMPLATES", "http://x")]),
            &[],
        )
        .unwrap_err();
        assert!(
            err.contains("SWITCHYARD_UPSTREAM_TEMPLATES cannot be set"),
            "{err}"
        );
        assert!(err.contains("[[upstream.templates]]"), "{err}");
        let err = assemble(
            None,
            env(&[]),
            &[("upstream.templates".into(), "http://x".into())],
        )
        .unwrap_err();
        assert!(err.contains("upstream.templates cannot be set"), "{err}");
        let bad = "[[upstream.templates]]\nurl_template = \"ftp://x/{hub}\"\n";
        let err = assemble(Some((bad, "a.toml")), env(&[]), &[]).unwrap_err();
        assert!(err.contains("upstream.templates[0].url_template"), "{err}");
        let typo = "[[upstream.templates]]\nurl_template = \"http://x\"\nhub_patern = \"a\"\n";
        let err = assemble(Some((typo, "a.toml")), env(&[]), &[]).unwrap_err();
        assert!(err.contains("hub_patern"), "{err}");
        let missing = "[[upstream.templates]]\nhub_pattern = \"a\"\n";
        let err = assemble(Some((missing, "a.toml")), env(&[]), &[]).unwrap_err();
        assert!(err.contains("url_template"), "{err}");
    }

    #[test]
    fn every_key_has_an_env_name() {
        let keys = known_keys();
        assert!(keys.contains_key("limits.max_pending_bytes_per_connection"));
        assert!(keys.contains_key("timeouts.long_poll_timeout"));
        assert!(keys.contains_key("cors.allowed_origins"));
        assert_eq!(
            env_name("cors.allowed_origins"),
            "SWITCHYARD_CORS_ALLOWED_ORIGINS"
        );
        assert_eq!(
            env_name("timeouts.long_poll_timeout"),
            "SWITCHYARD_TIMEOUTS_LONG_POLL_TIMEOUT"
        );
    }
}
