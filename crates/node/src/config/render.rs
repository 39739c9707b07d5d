//! The effective settings as TOML lines, each followed by where its value came from
//! (`switchyard config print`). The text is a config file: with nothing hidden, it loads
//! back as the same settings.

use toml::Value;

use super::layers::{known, Sources};
use super::Config;

/// Renders `config`. `hide` may replace a string value (a key, a URL with a password) by
/// what should be shown instead; it is given the dotted key (a template's URL as
/// `upstream.templates.url_template`) and the value.
pub fn render(
    config: &Config,
    sources: &Sources,
    hide: &dyn Fn(&str, &str) -> Option<String>,
) -> String {
    let tree = Value::try_from(config).expect("settings serialize");
    let mut lines: Vec<(String, String)> = Vec::new();
    for key in known().keys() {
        if key == "upstream.templates" {
            continue;
        }
        let source = sources.get(key).to_string();
        match lookup(&tree, key) {
            Some(value) => lines.push((format!("{key} = {}", shown(key, value, hide)), source)),
            None => lines.push((format!("# {key} is unset"), source)),
        }
    }
    let templates = match lookup(&tree, "upstream.templates") {
        Some(Value::Array(templates)) => templates.clone(),
        _ => Vec::new(),
    };
    if templates.is_empty() {
        let source = sources.get("upstream.templates").to_string();
        lines.push(("# upstream.templates: none".into(), source));
    }
    for (i, template) in templates.iter().enumerate() {
        let element = format!("upstream.templates[{i}]");
        lines.push((String::new(), String::new()));
        lines.push((
            "[[upstream.templates]]".into(),
            sources.get(&element).to_string(),
        ));
        if let Value::Table(fields) = template {
            for (name, value) in fields {
                let key = format!("upstream.templates.{name}");
                let source = sources.nearest(&format!("{element}.{name}")).to_string();
                lines.push((format!("{name} = {}", shown(&key, value, hide)), source));
            }
        }
    }
    let width = lines
        .iter()
        .map(|(text, _)| text.chars().count())
        .filter(|&n| n <= 60)
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    for (text, source) in lines {
        if source.is_empty() {
            out.push_str(&format!("{text}\n"));
        } else {
            let pad = width.saturating_sub(text.chars().count());
            out.push_str(&format!("{text}{} # {source}\n", " ".repeat(pad)));
        }
    }
    out
}

fn shown(key: &str, value: &Value, hide: &dyn Fn(&str, &str) -> Option<String>) -> String {
    match value {
        Value::String(text) => match hide(key, text) {
            Some(hidden) => Value::String(hidden).to_string(),
            None => value.to_string(),
        },
        other => other.to_string(),
    }
}

fn lookup<'v>(tree: &'v Value, key: &str) -> Option<&'v Value> {
    key.split('.').try_fold(tree, |value, part| value.get(part))
}
