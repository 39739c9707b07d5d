//! `switchyard upstream import`: the Azure SignalR Emulator's `settings.json` upstream
//! templates as `[[upstream.templates]]` entries of `switchyard.toml`. What has no
//! counterpart here (managed-identity auth, unknown keys) is said on stderr and in a comment
//! beside the entry, never dropped silently.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use serde_json::{Map, Value};

#[derive(Args)]
pub struct ImportArgs {
    /// The Emulator's settings.json (`{"UpstreamSettings":{"Templates":[…]}}`).
    #[arg(value_name = "SETTINGS_JSON")]
    settings: PathBuf,
    /// File to write the TOML into (not overwritten without --force) [default: stdout].
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: Option<PathBuf>,
    /// Overwrite an existing --output file.
    #[arg(long, requires = "output")]
    force: bool,
}

/// The TOML, and what could not be converted.
#[derive(Debug)]
pub struct Converted {
    pub toml: String,
    pub notes: Vec<String>,
}

pub fn run(args: ImportArgs) -> Result<ExitCode, String> {
    let text = std::fs::read_to_string(&args.settings)
        .map_err(|e| format!("cannot read {}: {e}", args.settings.display()))?;
    let name = args.settings.display().to_string();
    let converted = convert(&text, &name)?;
    for note in &converted.notes {
        eprintln!("switchyard: not converted: {note}");
    }
    match &args.output {
        Some(path) => {
            crate::upstream_init::write_new(path, &converted.toml, args.force)?;
            println!("Wrote {}", path.display());
        }
        None => print!("{}", converted.toml),
    }
    Ok(ExitCode::SUCCESS)
}

/// The value of `key` in `object`, its letter case ignored (the Emulator reads its file
/// through .NET configuration, which ignores case).
fn field<'v>(object: &'v Map<String, Value>, key: &str) -> Option<&'v Value> {
    object
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(key))
        .map(|(_, v)| v)
}

/// Converts the file's text (`name` is for messages). An entry Switchyard cannot take at
/// all (no URL, a URL the service would refuse) is an error; a part of an entry it has no
/// counterpart for is a note.
pub fn convert(text: &str, name: &str) -> Result<Converted, String> {
    let text = text.trim_start_matches('\u{feff}');
    let root: Value = serde_json::from_str(text).map_err(|e| format!("{name} is not JSON: {e}"))?;
    let root = root
        .as_object()
        .ok_or_else(|| format!("{name}: expected a JSON object"))?;
    let mut notes = Vec::new();
    for key in root.keys() {
        if !key.eq_ignore_ascii_case("UpstreamSettings") {
            notes.push(format!("{key} (only UpstreamSettings is read)"));
        }
    }
    let upstream = field(root, "UpstreamSettings")
        .and_then(Value::as_object)
        .ok_or_else(|| format!("{name}: no UpstreamSettings object"))?;
    for key in upstream.keys() {
        if !key.eq_ignore_ascii_case("Templates") {
            notes.push(format!("UpstreamSettings.{key} (only Templates is read)"));
        }
    }
    let templates = match field(upstream, "Templates") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(templates)) => templates.clone(),
        Some(_) => return Err(format!("{name}: UpstreamSettings.Templates is not a list")),
    };
    let mut toml = format!(
        "# Converted by `switchyard upstream import` from {name}.\n\
         # Put these entries in switchyard.toml; docs/upstream.md describes them.\n"
    );
    if templates.is_empty() {
        toml.push_str("# (the file has no upstream templates)\n");
    }
    for (i, template) in templates.iter().enumerate() {
        let label = format!("template {}", i + 1);
        let (entry, entry_notes) = entry(template, &label)?;
        toml.push('\n');
        for note in &entry_notes {
            toml.push_str(&format!("# not converted: {note}\n"));
        }
        toml.push_str(&entry);
        notes.extend(entry_notes.into_iter().map(|n| format!("{label}: {n}")));
    }
    // What the service would refuse is refused now, with the entry named.
    switchyard_node::config::assemble(Some((&toml, "the converted templates")), Vec::new(), &[])
        .map_err(|e| format!("{name}: {e}"))?;
    Ok(Converted { toml, notes })
}

/// One template as TOML lines, and its notes.
fn entry(template: &Value, label: &str) -> Result<(String, Vec<String>), String> {
    let object = template
        .as_object()
        .ok_or_else(|| format!("{label} is not a JSON object"))?;
    let mut notes = Vec::new();
    let text = |key: &str| -> Result<Option<String>, String> {
        match field(object, key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(format!("{label}: {key} must be text, got {other}")),
        }
    };
    let url = text("UrlTemplate")?
        .filter(|url| !url.trim().is_empty())
        .ok_or_else(|| format!("{label} has no UrlTemplate"))?;
    let quoted = |s: &str| toml::Value::String(s.to_string()).to_string();
    let mut out = format!("[[upstream.templates]]\nurl_template = {}\n", quoted(&url));
    for (key, toml_key) in [
        ("HubPattern", "hub_pattern"),
        ("EventPattern", "event_pattern"),
        ("CategoryPattern", "category_pattern"),
    ] {
        let pattern = text(key)?.unwrap_or_else(|| "*".to_string());
        out.push_str(&format!("{toml_key} = {}\n", quoted(&pattern)));
    }
    if let Some(auth) = field(object, "Auth") {
        if let Some(note) = auth_note(auth) {
            notes.push(note);
        }
    }
    const KNOWN: [&str; 5] = [
        "UrlTemplate",
        "HubPattern",
        "EventPattern",
        "CategoryPattern",
        "Auth",
    ];
    for key in object.keys() {
        if !KNOWN.iter().any(|known| key.eq_ignore_ascii_case(known)) {
            notes.push(format!("{key} (no such template setting in Switchyard)"));
        }
    }
    Ok((out, notes))
}

/// Why an `Auth` setting cannot be carried over, if it asks for anything.
fn auth_note(auth: &Value) -> Option<String> {
    let kind = match auth {
        Value::Null => return None,
        Value::Object(auth) => field(auth, "Type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        other => other.to_string(),
    };
    if kind.is_empty() || kind.eq_ignore_ascii_case("None") {
        return None;
    }
    let resource = match auth {
        Value::Object(auth) => field(auth, "ManagedIdentity")
            .and_then(Value::as_object)
            .and_then(|mi| field(mi, "Resource"))
            .and_then(Value::as_str)
            .map(|r| format!(" for resource {r}"))
            .unwrap_or_default(),
        _ => String::new(),
    };
    Some(format!(
        "Auth type {kind}{resource}: Switchyard does not get managed-identity tokens; it signs \
         every upstream request with its access keys (X-ASRS-Signature), which the upstream \
         can check instead"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_emulators_templates_become_upstream_templates() {
        let json = r#"{"UpstreamSettings":{"Templates":[
            {"UrlTemplate":"http://host/api/{hub}/{event}","EventPattern":"*",
             "CategoryPattern":"*","HubPattern":"*"},
            {"urlTemplate":"https://f.example/runtime/webhooks/signalr","hubPattern":"chat, game",
             "Auth":{"Type":"ManagedIdentity","ManagedIdentity":{"Resource":"api://x"}}}
        ]}}"#;
        let converted = convert(json, "settings.json").unwrap();
        let config = switchyard_node::config::assemble(Some((&converted.toml, "t")), [], &[])
            .unwrap()
            .config;
        let templates = &config.upstream.templates;
        assert_eq!(templates.len(), 2);
        assert_eq!(templates[0].url_template, "http://host/api/{hub}/{event}");
        assert_eq!(templates[1].hub_pattern, "chat, game");
        assert_eq!(templates[1].event_pattern, "*");
        assert_eq!(converted.notes.len(), 1, "{:?}", converted.notes);
        assert!(converted.notes[0]
            .contains("template 2: Auth type ManagedIdentity for resource api://x"));
        assert!(converted
            .toml
            .contains("# not converted: Auth type ManagedIdentity"));
    }

    #[test]
    fn what_cannot_be_converted_is_named() {
        let err = convert(r#"{"Upstream":{}}"#, "s.json").unwrap_err();
        assert!(err.contains("no UpstreamSettings"), "{err}");
        let err = convert(
            r#"{"UpstreamSettings":{"Templates":[{"HubPattern":"*"}]}}"#,
            "s.json",
        )
        .unwrap_err();
        assert!(err.contains("template 1 has no UrlTemplate"), "{err}");
        let err = convert(
            r#"{"UpstreamSettings":{"Templates":[{"UrlTemplate":"ftp://x/{hub}"}]}}"#,
            "s.json",
        )
        .unwrap_err();
        assert!(err.contains("upstream.templates[0].url_template"), "{err}");
        let converted = convert(
            r#"{"UpstreamSettings":{"Templates":[{"UrlTemplate":"http://x","Extra":1}]},"Logging":{}}"#,
            "s.json",
        )
        .unwrap();
        assert_eq!(converted.notes.len(), 2, "{:?}", converted.notes);
        let empty = convert(r#"{"UpstreamSettings":{"Templates":[]}}"#, "s.json").unwrap();
        assert!(empty.toml.contains("no upstream templates"));
    }
}
