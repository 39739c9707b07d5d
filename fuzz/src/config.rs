//! Target `config`: the service's settings from text, as `serve` reads them
//! (`switchyard_node::config::assemble_unvalidated`, then the checks that read no file
//! through `switchyard_node::fuzzing::check_config`): a TOML file, `--set key=value` flags
//! and `SWITCHYARD_*` variables; plus upstream URL templates and trusted-proxy lists.
//!
//! The payload is `file text`, then optionally a NUL and setting lines (`key=value`; a key
//! starting with `SWITCHYARD_` is a variable's name, any other a dotted key). Knob bit 0 puts
//! the file in or leaves it out of the runs with settings.

use switchyard_node::config::{
    assemble_unvalidated, env_name, known_keys, render, Config, FlagSetting, UpstreamTemplate,
};
use switchyard_node::fuzzing;

use crate::{split_str, text, Input};

const FILE: &str = "fuzz.toml";

/// Assembles and checks; with `round_trip`, a config that assembles (other than the
/// defaults), printed by `config print` with nothing hidden, loads back as a file alone to the
/// same settings. (Printing and parsing every key is most of a run's time, so it is done for
/// the two runs that see the whole input.)
fn load(
    file: Option<&str>,
    env: Vec<(String, String)>,
    flags: &[FlagSetting],
    round_trip: bool,
) -> Option<Config> {
    let (config, sources) = match assemble_unvalidated(file.map(|f| (f, FILE)), env, flags) {
        Ok(loaded) => loaded,
        Err(error) => {
            assert!(!error.is_empty(), "an error says something");
            return None;
        }
    };
    let _ = fuzzing::check_config(&config);
    if !round_trip || config == Config::default() {
        return Some(config);
    }
    let printed = render(&config, &sources, &|_, _| None);
    let (again, _) = assemble_unvalidated(Some((&printed, "printed.toml")), Vec::new(), &[])
        .unwrap_or_else(|e| panic!("the printed config does not load: {e}\n{printed}"));
    assert_eq!(again, config, "printed and loaded again\n{printed}");
    Some(config)
}

/// `key=value` lines: (key, value).
fn settings(lines: &str) -> Vec<(String, String)> {
    lines
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(key, value)| (key.trim().to_string(), value.to_string()))
        .collect()
}

fn as_env(key: &str, value: &str) -> (String, String) {
    let name = if key.starts_with("SWITCHYARD_") {
        key.to_string()
    } else {
        env_name(key)
    };
    (name, value.to_string())
}

pub fn check(data: &[u8]) {
    let input = Input::parse(data);
    let whole = text(input.payload);
    let (file, lines) = whole.split_once('\0').unwrap_or((&whole, ""));

    // The file alone, whole and cut in two.
    load(Some(file), Vec::new(), &[], true);
    let (a, b) = split_str(file, input.cut);
    load(Some(a), Vec::new(), &[], false);
    load(Some(b), Vec::new(), &[], false);

    let file = (input.knob & 1 == 1).then_some(file);
    let pairs = settings(lines);
    // The setting lines cut in two: those before the cut as variables, the rest as flags.
    let at = input.cut % (pairs.len() + 1);
    let env: Vec<_> = pairs[..at].iter().map(|(k, v)| as_env(k, v)).collect();
    let flags: Vec<_> = pairs[at..]
        .iter()
        .map(|(k, v)| FlagSetting::set(k, v))
        .collect();
    load(file, env, &flags, true);

    // A setting means the same as a variable and as a flag: the known keys, each once.
    let known = known_keys();
    let mut distinct: Vec<(String, String)> = Vec::new();
    for (key, value) in pairs {
        if known.contains_key(&key) && !distinct.iter().any(|(k, _)| *k == key) {
            distinct.push((key, value));
        }
    }
    let env: Vec<_> = distinct.iter().map(|(k, v)| as_env(k, v)).collect();
    let flags: Vec<_> = distinct
        .iter()
        .map(|(k, v)| FlagSetting::set(k, v))
        .collect();
    let by_env = load(file, env, &[], false);
    let by_flags = load(file, Vec::new(), &flags, false);
    assert_eq!(by_env, by_flags, "variables and flags disagree");

    templates(&whole);
    proxies(&whole);
}

/// The text's lines as a template (URL, hub, event and category patterns) and an event
/// (hub, category, event): the URL a template gives for a matching event is always an
/// http(s) URL with a host, whatever the names (they are escaped).
fn templates(text: &str) {
    let mut lines = text.lines().map(str::to_string);
    let mut next = |default: &str| lines.next().unwrap_or_else(|| default.to_string());
    let entry = UpstreamTemplate {
        url_template: next("http://h/{hub}"),
        hub_pattern: next("*"),
        event_pattern: next("*"),
        category_pattern: next("*"),
    };
    let (hub, category, event) = (next("chat"), next("messages"), next("send"));
    if let Ok(Some(url)) = fuzzing::upstream_url(&entry, &hub, &category, &event) {
        let parsed = url::Url::parse(&url)
            .unwrap_or_else(|e| panic!("template {entry:?} gave {url:?} for {hub:?}: {e}"));
        assert!(matches!(parsed.scheme(), "http" | "https"), "{url}");
        assert!(parsed.host_str().is_some(), "{url}");
    }
}

/// The text as a comma-separated `trusted_proxies` list: it parses when every entry does,
/// to one range per entry.
fn proxies(text: &str) {
    let entries: Vec<String> = text.split(',').map(str::to_string).collect();
    let each_ok = entries
        .iter()
        .all(|entry| fuzzing::parse_proxies(std::slice::from_ref(entry)).is_ok());
    match fuzzing::parse_proxies(&entries) {
        Ok(count) => {
            assert!(each_ok, "the list parsed but an entry alone does not");
            assert_eq!(count, entries.len());
        }
        Err(error) => {
            assert!(!each_ok, "every entry parses alone but the list does not: {error}");
        }
    }
}
