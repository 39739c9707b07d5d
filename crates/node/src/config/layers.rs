//! The settings assembled from their layers, each later one winning: defaults, the TOML file,
//! `SWITCHYARD_*` variables, flags. Every effective value keeps where it came from
//! ([`Sources`]), so an error names the key and its file line, variable or flag, and
//! `switchyard config print` can say it too.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};

use toml::{Table, Value};

use super::file_lines::join;
use super::{Config, ValidConfig, SIZE_KEYS};

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
    "cluster.ca_file",
    "cluster.secret",
    "cluster.secondary_secret",
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

/// Moves a file's settings under earlier names to their names (and their lines with them);
/// both names at once is an error.
fn rename_in_file(table: &mut Table, sources: &mut Sources) -> Result<(), String> {
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
                "{}: both {earlier} and {name} are set; {earlier} is the earlier name of \
                 {name}: keep one",
                sources.nearest(earlier)
            ));
        }
        section.insert(new_leaf.to_string(), value);
        if let Some(source) = sources.0.remove(*earlier) {
            sources.0.insert((*name).to_string(), source);
        }
    }
    Ok(())
}

/// Refuses a setting given under its name and its earlier name in one layer (`earlier`: this
/// one used the earlier name); `seen` holds the layer's keys so far.
fn both_names(
    seen: &mut BTreeMap<String, (String, bool)>,
    key: &str,
    given_as: &str,
    earlier: bool,
) -> Result<(), String> {
    if let Some((before, before_earlier)) = seen.get(key) {
        if *before_earlier != earlier {
            return Err(format!(
                "both {before} and {given_as} are set, and one is the earlier name of the \
                 other ({key}): keep one"
            ));
        }
    }
    seen.insert(key.to_string(), (given_as.to_string(), earlier));
    Ok(())
}

/// Lists of tables: one line of text cannot express them, so only the file sets them.
const FILE_ONLY_KEYS: &[(&str, &str)] = &[("upstream.templates", "[[upstream.templates]]")];

/// Where one setting's value came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    Default,
    File {
        path: String,
        line: usize,
    },
    /// The variable's name.
    Env(String),
    /// The flag as written: `--listen`, or `--set limits.max_client_message_size`.
    Flag(String),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::File { path, line } => write!(f, "{path}:{line}"),
            Source::Env(name) => write!(f, "env {name}"),
            Source::Flag(flag) => write!(f, "flag {flag}"),
        }
    }
}

/// One setting from the command line: its dotted key, its text, the flag it was given with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlagSetting {
    pub key: String,
    pub value: String,
    pub flag: String,
}

impl FlagSetting {
    /// A dedicated flag such as `--listen`.
    pub fn new(key: &str, value: &str, flag: &str) -> Self {
        FlagSetting {
            key: key.to_string(),
            value: value.to_string(),
            flag: flag.to_string(),
        }
    }

    /// `--set key=value`.
    pub fn set(key: &str, value: &str) -> Self {
        FlagSetting::new(key, value, &format!("--set {key}"))
    }
}

/// Where each value came from, by dotted key (`limits.max_client_message_size`; a
/// template's fields as `upstream.templates[0].url_template`). Keys not in it are defaults.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sources(BTreeMap<String, Source>, Vec<String>);

impl Sources {
    /// The Kubernetes service-link variables that were ignored, for a debug line once logging
    /// is set up (its format is a setting, so it cannot be before).
    pub fn ignored_variables(&self) -> &[String] {
        &self.1
    }

    /// The source of exactly `key`.
    pub fn get(&self, key: &str) -> &Source {
        self.0.get(key).unwrap_or(&Source::Default)
    }

    /// The source of `key` or of the nearest key that encloses it (`listen` for `listen.x`,
    /// the template for one of its fields).
    pub fn nearest(&self, key: &str) -> &Source {
        let mut key = key;
        loop {
            if let Some(source) = self.0.get(key) {
                return source;
            }
            match key.rfind(['.', '[']) {
                Some(end) => key = &key[..end],
                None => return &Source::Default,
            }
        }
    }
}

/// A validated config and where its values came from.
#[derive(Clone, Debug)]
pub struct Loaded {
    pub config: ValidConfig,
    pub sources: Sources,
}

/// Every settable key (dotted path) with its default, for env names and `--set` checks.
pub fn known_keys() -> BTreeMap<String, Option<Value>> {
    known().clone()
}

/// [`known_keys`], worked out once: the tree of defaults does not change while running.
pub(super) fn known() -> &'static BTreeMap<String, Option<Value>> {
    static KNOWN: std::sync::OnceLock<BTreeMap<String, Option<Value>>> = std::sync::OnceLock::new();
    KNOWN.get_or_init(default_keys)
}

/// Each setting's variable name, and its key.
fn by_env() -> &'static BTreeMap<String, &'static str> {
    static BY_ENV: std::sync::OnceLock<BTreeMap<String, &'static str>> = std::sync::OnceLock::new();
    BY_ENV.get_or_init(|| {
        let mut by_env: BTreeMap<String, &'static str> =
            known().keys().map(|k| (env_name(k), k.as_str())).collect();
        for (earlier, name) in RENAMED_KEYS {
            by_env.insert(env_name(earlier), name);
        }
        by_env
    })
}

fn default_keys() -> BTreeMap<String, Option<Value>> {
    let mut keys = BTreeMap::new();
    let defaults = Value::try_from(Config::default()).expect("defaults serialize");
    fn walk(prefix: &str, value: &Value, keys: &mut BTreeMap<String, Option<Value>>) {
        match value {
            Value::Table(table) => {
                for (k, v) in table {
                    walk(&join(prefix, k), v, keys);
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

/// "; did you mean X?" with the candidate closest to `name` by edit distance, so a typo is
/// answered with the one name it was meant to be rather than every name there is.
pub(crate) fn did_you_mean<'a>(name: &str, candidates: impl Iterator<Item = &'a str>) -> String {
    candidates
        .map(|candidate| (strsim::levenshtein(name, candidate), candidate))
        .min()
        .map(|(_, closest)| format!("; did you mean {closest}?"))
        .unwrap_or_default()
}

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

/// Turns text from a variable or flag into the TOML type the key's default has. A list is
/// written comma-separated (`https://a.example,https://b.example`; empty text = empty list),
/// each item typed like the default's items. A size keeps text with a unit as text, for the
/// size parser to read.
fn typed(key: &str, text: &str, default: Option<&Value>) -> Result<Value, String> {
    match default {
        Some(Value::Array(items)) => text
            .split(',')
            .map(str::trim)
            .filter(|item| !item.is_empty())
            .map(|item| typed(key, item, items.first()))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
        Some(Value::Integer(_)) => match text.trim().parse::<i64>() {
            Ok(number) => Ok(Value::Integer(number)),
            Err(_) if SIZE_KEYS.contains(&key) => Ok(Value::String(text.trim().to_string())),
            Err(_) => Err(format!("must be a whole number, got '{text}'")),
        },
        Some(Value::Boolean(_)) => text
            .trim()
            .parse::<bool>()
            .map(Value::Boolean)
            .map_err(|_| format!("must be true or false, got '{text}'")),
        _ => Ok(Value::String(text.to_string())),
    }
}

fn set_path(table: &mut Table, key: &str, value: Value) {
    let mut parts: Vec<&str> = key.split('.').collect();
    let last = parts.pop().expect("non-empty key");
    let mut current = table;
    for part in parts {
        let entry = current
            .entry(part.to_string())
            .or_insert_with(|| Value::Table(Table::new()));
        // A file that wrote a section as a plain value (`limits = 1`) loses it here; the
        // key's own value is what counts from now on.
        if !entry.is_table() {
            *entry = Value::Table(Table::new());
        }
        current = entry.as_table_mut().expect("made a table above");
    }
    current.insert(last.to_string(), value);
}

/// "key (where): message", or "key: message" for a default.
fn about(key: &str, source: &Source, message: &str) -> String {
    match source {
        Source::Default => format!("{key}: {message}"),
        source => format!("{key} ({source}): {message}"),
    }
}

/// What a `SWITCHYARD_*` variable is to us.
#[derive(Debug, PartialEq, Eq)]
enum Variable<'k> {
    Reserved,
    Setting(&'k str),
    /// Put in the pod by Kubernetes for a Service named `switchyard…`, not by the operator.
    ServiceLink,
    Unknown,
}

fn classify<'k>(name: &str, value: &str, by_env: &BTreeMap<String, &'k str>) -> Variable<'k> {
    if RESERVED_VARIABLES.contains(&name) {
        return Variable::Reserved;
    }
    // A setting first: a key whose variable looks like a service link must still work.
    if let Some(key) = by_env.get(name) {
        return Variable::Setting(key);
    }
    if is_service_link(name, value) {
        return Variable::ServiceLink;
    }
    Variable::Unknown
}

/// Whether `name=value` has the shape of the variables Kubernetes injects into every pod for
/// each Service of the namespace (Docker links' format), here for a Service whose name starts
/// with `switchyard`: `{S}_SERVICE_HOST`, `{S}_SERVICE_PORT[_{PORT_NAME}]`, `{S}_PORT` and
/// `{S}_PORT_{N}_{PROTO}[_PROTO|_PORT|_ADDR]`. The value must have the shape too, so a
/// mistyped setting (`SWITCHYARD_ADMIN_PORT=9090`) is still reported.
fn is_service_link(name: &str, value: &str) -> bool {
    let value = value.trim();
    let is_port = |text: &str| text.parse::<u16>().is_ok();
    let is_ip = |text: &str| text.parse::<IpAddr>().is_ok();
    let is_proto = |text: &str| matches!(text, "TCP" | "UDP" | "SCTP");
    let is_url = |text: &str| {
        text.split_once("://").is_some_and(|(scheme, address)| {
            matches!(scheme, "tcp" | "udp" | "sctp") && address.parse::<SocketAddr>().is_ok()
        })
    };
    let parts: Vec<&str> = name.split('_').collect();
    if parts.len() < 2 || parts[0] != "SWITCHYARD" {
        return false;
    }
    // The Service's own name is parts[..i] (dashes become underscores), so try every split.
    for i in 1..parts.len() {
        let tail = &parts[i..];
        let shaped = match tail {
            ["SERVICE", "HOST"] => is_ip(value),
            ["SERVICE", "PORT", port_name @ ..] => {
                port_name.iter().all(|part| !part.is_empty()) && is_port(value)
            }
            ["PORT"] => is_url(value),
            ["PORT", n, proto] => is_port(n) && is_proto(proto) && is_url(value),
            ["PORT", n, proto, "PROTO"] => {
                is_port(n) && is_proto(proto) && value == proto.to_ascii_lowercase()
            }
            ["PORT", n, proto, "PORT"] => is_port(n) && is_proto(proto) && value == *n,
            ["PORT", n, proto, "ADDR"] => is_port(n) && is_proto(proto) && is_ip(value),
            _ => false,
        };
        if shaped {
            return true;
        }
    }
    false
}

/// The file's text as a table, with the line of every value in it (`sources`).
fn read_file(text: &str, origin: &str, sources: &mut Sources) -> Result<Table, String> {
    let table = text
        .parse::<Table>()
        .map_err(|e| format!("config file {origin}: {e}"))?;
    // The same parser underneath, keeping spans; were it ever to disagree, lines are left out.
    if let Ok(document) = toml_edit::ImDocument::parse(text) {
        let line = |span: Option<std::ops::Range<usize>>| {
            span.map(|span| {
                let end = span.start.min(text.len());
                text.as_bytes()[..end]
                    .iter()
                    .filter(|b| **b == b'\n')
                    .count()
                    + 1
            })
        };
        for (key, line) in super::file_lines::value_lines(&document, &line) {
            sources.0.insert(
                key,
                Source::File {
                    path: origin.to_string(),
                    line,
                },
            );
        }
    }
    Ok(table)
}

/// Refuses keys of the file that are no setting, with their line and the closest name.
fn check_file_keys(
    table: &Table,
    prefix: &str,
    known: &BTreeMap<String, Option<Value>>,
    sources: &Sources,
) -> Result<(), String> {
    for (name, value) in table {
        let path = join(prefix, name);
        if known.contains_key(&path) {
            continue;
        }
        let section = format!("{path}.");
        if known.keys().any(|key| key.starts_with(&section)) {
            // A plain value where a section belongs is the deserializer's to explain.
            if let Value::Table(inner) = value {
                check_file_keys(inner, &path, known, sources)?;
            }
            continue;
        }
        return Err(format!(
            "{}: unknown setting '{path}'{}",
            sources.nearest(&path),
            did_you_mean(&path, known.keys().map(String::as_str))
        ));
    }
    Ok(())
}

/// Builds the config without validating it, with where each value came from. `file` is the
/// TOML text and its name; `env` the process environment; `flags` the command line's settings.
pub fn assemble_unvalidated(
    file: Option<(&str, &str)>,
    env: impl IntoIterator<Item = (String, String)>,
    flags: &[FlagSetting],
) -> Result<(Config, Sources), String> {
    let known = known();
    let mut sources = Sources::default();
    let mut table = match file {
        Some((text, origin)) => {
            let mut table = read_file(text, origin, &mut sources)?;
            rename_in_file(&mut table, &mut sources)?;
            check_file_keys(&table, "", known, &sources)?;
            table
        }
        None => Table::new(),
    };
    let by_env = by_env();
    let mut env: Vec<(String, String)> = env
        .into_iter()
        .filter(|(name, _)| name.starts_with("SWITCHYARD_"))
        .collect();
    env.sort();
    // A setting and its earlier name from two variables (or two flags) would otherwise be
    // decided by sort order: refused, as both in one file are.
    let mut by_variables = BTreeMap::new();
    for (name, text) in env {
        let key = match classify(&name, &text, by_env) {
            Variable::Reserved => continue,
            Variable::Setting(key) => key,
            Variable::ServiceLink => {
                sources.1.push(name);
                continue;
            }
            Variable::Unknown => {
                let names = by_env.keys().map(String::as_str);
                return Err(format!(
                    "unknown environment variable {name}{}",
                    did_you_mean(&name, names.chain(RESERVED_VARIABLES.iter().copied()))
                ));
            }
        };
        settable_outside_file(key, &name)?;
        both_names(&mut by_variables, key, &name, env_name(key) != name)?;
        let source = Source::Env(name);
        let value = typed(key, &text, known[key].as_ref()).map_err(|e| about(key, &source, &e))?;
        set_path(&mut table, key, value);
        sources.0.retain(|k, _| !k.starts_with(&format!("{key}[")));
        sources.0.insert(key.to_string(), source);
    }
    let mut by_flags = BTreeMap::new();
    for flag in flags {
        let key = renamed(flag.key.as_str());
        let Some(default) = known.get(key) else {
            return Err(format!(
                "unknown setting '{key}' ({}){}",
                flag.flag,
                did_you_mean(key, known.keys().map(String::as_str))
            ));
        };
        settable_outside_file(key, key)?;
        both_names(&mut by_flags, key, &flag.flag, key != flag.key)?;
        let source = Source::Flag(flag.flag.clone());
        let value =
            typed(key, &flag.value, default.as_ref()).map_err(|e| about(key, &source, &e))?;
        set_path(&mut table, key, value);
        sources.0.retain(|k, _| !k.starts_with(&format!("{key}[")));
        sources.0.insert(key.to_string(), source);
    }
    let config: Config = serde_path_to_error::deserialize(Value::Table(table)).map_err(
        |e: serde_path_to_error::Error<toml::de::Error>| {
            let key = e.path().to_string();
            let message = e.inner().message().trim().to_string();
            if key == "." {
                let origin = file.map_or("settings", |(_, origin)| origin);
                format!("{origin}: {message}")
            } else {
                about(&key, sources.nearest(&key), &message)
            }
        },
    )?;
    Ok((config, sources))
}

/// Builds and validates the config (see [`assemble_unvalidated`]). A validation error that
/// names a setting is followed by where that setting was given.
pub fn assemble(
    file: Option<(&str, &str)>,
    env: impl IntoIterator<Item = (String, String)>,
    flags: &[FlagSetting],
) -> Result<Loaded, String> {
    let (config, sources) = assemble_unvalidated(file, env, flags)?;
    match config.validate() {
        Ok(config) => Ok(Loaded { config, sources }),
        Err(error) => Err(with_place(&error.to_string(), &sources)),
    }
}

/// `message`, plus " (key: where)" for the first setting it names that was given somewhere.
fn with_place(message: &str, sources: &Sources) -> String {
    let named = sources
        .0
        .iter()
        .filter(|(key, _)| !key.contains('['))
        .filter_map(|(key, source)| {
            let at = names_key(message, key)?;
            Some((at, std::cmp::Reverse(key.len()), key, source))
        })
        .min_by_key(|(at, longest, key, _)| (*at, *longest, *key));
    match named {
        Some((_, _, key, source)) => format!("{message} ({key}: {source})"),
        None => message.to_string(),
    }
}

/// Where `message` names `key` as a whole word (not inside a longer key).
fn names_key(message: &str, key: &str) -> Option<usize> {
    let is_part = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '.';
    message.match_indices(key).map(|(at, _)| at).find(|&at| {
        let before = message[..at].chars().next_back();
        let after = message[at + key.len()..].chars().next();
        !before.is_some_and(is_part) && !after.is_some_and(|c| is_part(c) && c != '.')
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The settings as `serve` would get them.
    fn assemble(
        file: Option<(&str, &str)>,
        env: Vec<(String, String)>,
        flags: &[(String, String)],
    ) -> Result<ValidConfig, String> {
        let flags: Vec<FlagSetting> = flags.iter().map(|(k, v)| FlagSetting::set(k, v)).collect();
        super::assemble(file, env, &flags).map(|loaded| loaded.config)
    }

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

    /// `cluster.redis` is `cluster.backplane`'s earlier name: the file, its variable and
    /// `--set` still take it, and the file's line goes with it.
    #[test]
    fn the_backplane_under_its_earlier_name() {
        let url = |config: &ValidConfig| config.cluster.backplane.clone();
        let file = "[cluster]\nredis = \"redis://h:1\"\n";
        let loaded = super::assemble(Some((file, "a.toml")), env(&[]), &[]).unwrap();
        assert_eq!(url(&loaded.config).as_deref(), Some("redis://h:1"));
        assert_eq!(
            loaded.sources.get("cluster.backplane").to_string(),
            "a.toml:2"
        );
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
        let flags = [("cluster.redis".into(), "redis-cluster://h:4".into())];
        let config = assemble(None, env(&[]), &flags);
        assert_eq!(
            url(&config.unwrap()).as_deref(),
            Some("redis-cluster://h:4")
        );
        let both = "[cluster]\nredis = \"redis://h:1\"\nbackplane = \"redis://h:2\"\n";
        let err = assemble(Some((both, "b.toml")), env(&[]), &[]).unwrap_err();
        assert!(
            err.contains("b.toml:2") && err.contains("keep one"),
            "{err}"
        );
        // Both variables, or both flags: refused too, not decided by their order.
        let both = env(&[
            ("SWITCHYARD_CLUSTER_BACKPLANE", "redis://new:1"),
            ("SWITCHYARD_CLUSTER_REDIS", "redis://old:1"),
        ]);
        let err = assemble(None, both, &[]).unwrap_err();
        assert!(
            err.contains("SWITCHYARD_CLUSTER_REDIS") && err.contains("keep one"),
            "{err}"
        );
        let flags = [
            FlagSetting::new("cluster.backplane", "redis://new:1", "--backplane"),
            FlagSetting::set("cluster.redis", "redis://old:1"),
        ];
        let err = super::assemble(None, env(&[]), &flags).unwrap_err();
        assert!(
            err.contains("--backplane") && err.contains("keep one"),
            "{err}"
        );
        // The same name twice is the usual last-wins; a variable and a flag, precedence.
        let flags = [
            FlagSetting::new("cluster.backplane", "redis://a:1", "--backplane"),
            FlagSetting::set("cluster.backplane", "redis://b:1"),
        ];
        let variable = env(&[("SWITCHYARD_CLUSTER_REDIS", "redis://c:1")]);
        let loaded = super::assemble(None, variable, &flags).unwrap();
        assert_eq!(url(&loaded.config).as_deref(), Some("redis://b:1"));
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
        use crate::config::LogFormat;
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
        assert!(err.contains("'big' is not a size"), "{err}");
        let err = assemble(
            None,
            env(&[("SWITCHYARD_TIMEOUTS_CLIENT_TIMEOUT", "soon")]),
            &[],
        )
        .unwrap_err();
        assert!(err.contains("soon"), "{err}");
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

    #[test]
    fn kubernetes_service_links_are_ignored_and_other_unknown_variables_are_not() {
        // What Kubernetes puts in every pod for Services named `switchyard` and
        // `switchyard-admin` (with a named port).
        let links = env(&[
            ("SWITCHYARD_PORT", "tcp://10.96.0.12:8888"),
            ("SWITCHYARD_PORT_8888_TCP", "tcp://10.96.0.12:8888"),
            ("SWITCHYARD_PORT_8888_TCP_ADDR", "10.96.0.12"),
            ("SWITCHYARD_PORT_8888_TCP_PORT", "8888"),
            ("SWITCHYARD_PORT_8888_TCP_PROTO", "tcp"),
            ("SWITCHYARD_SERVICE_HOST", "10.96.0.12"),
            ("SWITCHYARD_SERVICE_PORT", "8888"),
            ("SWITCHYARD_SERVICE_PORT_HTTP", "8888"),
            ("SWITCHYARD_ADMIN_PORT", "tcp://[fd00::5]:9090"),
            ("SWITCHYARD_ADMIN_SERVICE_HOST", "fd00::5"),
            ("SWITCHYARD_ADMIN_PORT_9090_UDP_PROTO", "udp"),
            ("SWITCHYARD_LISTEN", "127.0.0.1:9000"),
        ]);
        let loaded = super::assemble(None, links, &[]).unwrap();
        assert_eq!(loaded.config.listen.port(), 9000);
        // Kept for the debug line `serve` logs once logging is set up.
        let ignored = loaded.sources.ignored_variables();
        assert_eq!(ignored.len(), 11, "{ignored:?}");
        assert!(ignored.contains(&"SWITCHYARD_PORT".to_string()));
        // The shape of the name is not enough: the value must be one too.
        for (name, value) in [
            ("SWITCHYARD_ADMIN_PORT", "9090"),
            ("SWITCHYARD_SERVICE_HOST", "not-an-ip"),
            ("SWITCHYARD_PORT_8888_TCP_PROTO", "http"),
            ("SWITCHYARD_PORT_X_TCP", "tcp://10.0.0.1:1"),
        ] {
            let err = assemble(None, env(&[(name, value)]), &[]).unwrap_err();
            assert!(err.contains(name), "{err}");
        }
        // A setting whose variable looks like a service link is a setting.
        let key = "port".to_string();
        let by_env = BTreeMap::from([("SWITCHYARD_PORT".to_string(), key.as_str())]);
        assert_eq!(
            classify("SWITCHYARD_PORT", "tcp://10.0.0.1:80", &by_env),
            Variable::Setting("port")
        );
        assert_eq!(
            classify("SWITCHYARD_PORT", "tcp://10.0.0.1:80", &BTreeMap::new()),
            Variable::ServiceLink
        );
    }

    #[test]
    fn unknown_names_get_the_closest_known_one() {
        let err = assemble(None, env(&[("SWITCHYARD_LISTN", "x")]), &[]).unwrap_err();
        assert_eq!(
            err,
            "unknown environment variable SWITCHYARD_LISTN; did you mean SWITCHYARD_LISTEN?"
        );
        let err = assemble(
            None,
            env(&[("SWITCHYARD_LIMITS_MAX_CLIENT_MESAGE_SIZE", "1")]),
            &[],
        )
        .unwrap_err();
        assert!(
            err.ends_with("did you mean SWITCHYARD_LIMITS_MAX_CLIENT_MESSAGE_SIZE?"),
            "{err}"
        );
        let err = assemble(
            None,
            env(&[]),
            &[("limits.max_client_mesage_size".into(), "1".into())],
        )
        .unwrap_err();
        assert!(
            err.ends_with("did you mean limits.max_client_message_size?"),
            "{err}"
        );
        let file = "listen = \"127.0.0.1:1\"\n\n[limits]\nmax_client_mesage_size = 1\n";
        let err = assemble(Some((file, "a.toml")), env(&[]), &[]).unwrap_err();
        assert_eq!(
            err,
            "a.toml:4: unknown setting 'limits.max_client_mesage_size'; did you mean \
             limits.max_client_message_size?"
        );
    }

    #[test]
    fn value_errors_name_the_key_and_where_it_was_given() {
        let file =
            "# sizes\n[limits]\nmax_request_body_size = 2048\nmax_client_message_size = \"1XB\"\n";
        let err = assemble(Some((file, "/etc/switchyard.toml")), env(&[]), &[]).unwrap_err();
        assert!(
            err.starts_with(
                "limits.max_client_message_size (/etc/switchyard.toml:4): '1XB' is not a size"
            ),
            "{err}"
        );
        let err = assemble(
            None,
            env(&[("SWITCHYARD_TIMEOUTS_CLIENT_TIMEOUT", "abc")]),
            &[],
        )
        .unwrap_err();
        assert!(
            err.starts_with(
                "timeouts.client_timeout (env SWITCHYARD_TIMEOUTS_CLIENT_TIMEOUT): 'abc' is not a duration"
            ),
            "{err}"
        );
        let err = assemble(
            None,
            env(&[]),
            &[("throttling.connect_rate".into(), "x".into())],
        )
        .unwrap_err();
        assert_eq!(
            err,
            "throttling.connect_rate (flag --set throttling.connect_rate): must be a whole number, got 'x'"
        );
        let flags = [FlagSetting::new("listen", "nowhere", "--listen")];
        let err = super::assemble(None, env(&[]), &flags).unwrap_err();
        assert!(err.starts_with("listen (flag --listen): "), "{err}");
        // A check across settings says where the one it names came from.
        let err = assemble(
            Some(("[timeouts]\nkeep_alive_interval = \"1m\"\n", "a.toml")),
            env(&[]),
            &[],
        )
        .unwrap_err();
        assert!(
            err.ends_with("(timeouts.keep_alive_interval: a.toml:2)"),
            "{err}"
        );
        let templates = "[[upstream.templates]]\nurl_template = \"http://x\"\n\n[[upstream.templates]]\nurl_template = 5\n";
        let err = assemble(Some((templates, "a.toml")), env(&[]), &[]).unwrap_err();
        assert!(
            err.starts_with("upstream.templates[1].url_template (a.toml:5): invalid type"),
            "{err}"
        );
    }

    #[test]
    fn sizes_take_units_everywhere() {
        let file =
            "[limits]\nmax_client_message_size = \"64KiB\"\nmax_request_body_size = \"1MB\"\n\
                    [upstream]\nmax_response_size = \"2 MiB\"\n";
        let config = assemble(
            Some((file, "a.toml")),
            env(&[("SWITCHYARD_STATEFUL_RECONNECT_BUFFER_SIZE", "256KB")]),
            &[("dashboard.trace_preview_bytes".into(), "1k".into())],
        )
        .unwrap();
        assert_eq!(config.limits.max_client_message_size, 64 * 1024);
        assert_eq!(config.limits.max_request_body_size, 1024 * 1024);
        assert_eq!(config.upstream.max_response_size, 2 * 1024 * 1024);
        assert_eq!(config.stateful_reconnect.buffer_size, 256 * 1024);
        assert_eq!(config.dashboard.trace_preview_bytes, 1024);
        // Above TOML's i64 a size could not be printed back (config print): refused.
        for huge in ["8589934592GiB", "9223372036854775808"] {
            let flags = [("limits.max_client_message_size".into(), huge.into())];
            let err = assemble(None, env(&[]), &flags).unwrap_err();
            assert!(err.contains("too large"), "{huge}: {err}");
        }
        // Every size setting reads a unit, and only they do; a new size is not forgotten.
        let known = known_keys();
        for key in known.keys() {
            let name = key.rsplit('.').next().unwrap_or(key);
            if name.ends_with("_size") || name.contains("bytes") {
                assert!(SIZE_KEYS.contains(&key.as_str()), "{key} is a size");
            }
        }
        for key in SIZE_KEYS {
            assert!(matches!(known[*key], Some(Value::Integer(_))), "{key}");
            assemble(None, env(&[]), &[((*key).into(), "2KiB".into())]).unwrap();
        }
        let err = assemble(
            None,
            env(&[]),
            &[("limits.max_client_connections".into(), "1k".into())],
        )
        .unwrap_err();
        assert!(err.contains("whole number"), "{err}");
        let err = assemble(
            Some(("[limits]\nmax_client_message_size = -5\n", "a.toml")),
            env(&[]),
            &[],
        )
        .unwrap_err();
        assert!(err.contains("cannot be negative"), "{err}");
    }

    #[test]
    fn a_printed_config_loads_back_the_same() {
        let file = "access_key = \"kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk\"\n\
                    trusted_proxies = [\"10.0.0.0/8\"]\n[cors]\nallowed_origins = []\n\
                    [limits]\nmax_client_message_size = \"64KiB\"\n\
                    [[upstream.templates]]\nurl_template = \"http://h/{hub}\"\nhub_pattern = \"a\"\n";
        let flags = [FlagSetting::new("listen", "127.0.0.1:9100", "--listen")];
        let loaded = super::assemble(
            Some((file, "a.toml")),
            env(&[("SWITCHYARD_TIMEOUTS_CLIENT_TIMEOUT", "1m 30s")]),
            &flags,
        )
        .unwrap();
        let printed = crate::config::render(&loaded.config, &loaded.sources, &|_, _| None);
        for line in [
            "listen = \"127.0.0.1:9100\"",
            "# flag --listen",
            "limits.max_client_message_size = 65536",
            "# a.toml:6",
            "# env SWITCHYARD_TIMEOUTS_CLIENT_TIMEOUT",
            "# public_endpoint is unset",
            "[[upstream.templates]]",
        ] {
            assert!(printed.contains(line), "{line}\n{printed}");
        }
        let again = super::assemble(Some((&printed, "printed")), env(&[]), &[]).unwrap();
        assert_eq!(*again.config, *loaded.config, "{printed}");
        let hidden = crate::config::render(&loaded.config, &loaded.sources, &|key, _| {
            (key == "access_key").then(|| "***".to_string())
        });
        assert!(hidden.contains("access_key = \"***\""), "{hidden}");
        assert!(!hidden.contains("kkkkkkkk"), "{hidden}");
    }
}
