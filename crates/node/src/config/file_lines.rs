//! The line of every value in a config file, from toml_edit's spans: what lets an error or
//! `config print` say `switchyard.toml:12`.

use std::collections::BTreeMap;

/// Each value's dotted key (a template's fields as `upstream.templates[0].url_template`) and
/// its line; `line` turns a span into a line number.
pub(super) fn value_lines(
    document: &toml_edit::ImDocument<&str>,
    line: &LineOf<'_>,
) -> BTreeMap<String, usize> {
    let mut lines = BTreeMap::new();
    file_lines(document.as_item(), String::new(), None, line, &mut lines);
    lines
}

pub(super) type LineOf<'a> = dyn Fn(Option<std::ops::Range<usize>>) -> Option<usize> + 'a;

/// Records the line of every value (not of sections, whose keys are found by their values).
fn file_lines(
    item: &toml_edit::Item,
    path: String,
    at: Option<usize>,
    line: &LineOf<'_>,
    out: &mut BTreeMap<String, usize>,
) {
    use toml_edit::Item;
    match item {
        Item::None => {}
        Item::Table(table) => {
            for (name, value) in table.iter() {
                let key_line = table.key(name).and_then(|key| line(key.span()));
                let at = key_line.or_else(|| line(value.span())).or(at);
                file_lines(value, join(&path, name), at, line, out);
            }
        }
        Item::ArrayOfTables(tables) => {
            for (i, table) in tables.iter().enumerate() {
                let at = line(table.span()).or(at);
                let element = format!("{path}[{i}]");
                if let Some(at) = at {
                    out.insert(element.clone(), at);
                }
                file_lines(&Item::Table(table.clone()), element, at, line, out);
            }
            if let Some(first) = out.get(&format!("{path}[0]")).copied() {
                out.insert(path, first);
            }
        }
        Item::Value(value) => {
            if let Some(at) = at {
                out.insert(path.clone(), at);
            }
            inline_lines(value, &path, at, line, out);
        }
    }
}

fn inline_lines(
    value: &toml_edit::Value,
    path: &str,
    at: Option<usize>,
    line: &LineOf<'_>,
    out: &mut BTreeMap<String, usize>,
) {
    match value {
        toml_edit::Value::InlineTable(table) => {
            for (name, inner) in table.iter() {
                let key_line = table.key(name).and_then(|key| line(key.span()));
                let at = key_line.or(at);
                let inner_path = join(path, name);
                if let Some(at) = at {
                    out.insert(inner_path.clone(), at);
                }
                inline_lines(inner, &inner_path, at, line, out);
            }
        }
        toml_edit::Value::Array(items) => {
            for (i, inner) in items.iter().enumerate() {
                let at = line(inner.span()).or(at);
                let inner_path = format!("{path}[{i}]");
                if let Some(at) = at {
                    out.insert(inner_path.clone(), at);
                }
                inline_lines(inner, &inner_path, at, line, out);
            }
        }
        _ => {}
    }
}

/// `prefix.key`, or `key` at the top.
pub(super) fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_string()
    } else {
        format!("{prefix}.{key}")
    }
}
