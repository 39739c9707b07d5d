//! `[[upstream.templates]]` entries, parsed once: name patterns and URL templates.

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use super::UpstreamTemplate;

/// What `Uri.EscapeDataString` leaves alone: RFC 3986 unreserved characters.
const ESCAPED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// `*`, or a set of names compared case-insensitively (hub names and hub methods are
/// case-insensitive in SignalR).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Pattern {
    Any,
    Names(Vec<Box<str>>),
}

impl Pattern {
    fn parse(text: &str) -> Result<Pattern, String> {
        let mut names = Vec::new();
        for name in text.split(',').map(str::trim) {
            if name == "*" {
                return Ok(Pattern::Any);
            }
            if name.is_empty() {
                return Err(format!(
                    "'{text}' is not '*', a name, or comma-separated names (an entry is empty)"
                ));
            }
            names.push(name.into());
        }
        Ok(Pattern::Names(names))
    }

    fn matches(&self, name: &str) -> bool {
        match self {
            Pattern::Any => true,
            Pattern::Names(names) => names.iter().any(|n| n.eq_ignore_ascii_case(name)),
        }
    }
}

/// A piece of a URL template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(Box<str>),
    Hub,
    Category,
    Event,
}

/// One parsed template.
#[derive(Debug, Clone)]
pub(crate) struct Template {
    parts: Vec<Part>,
    hub: Pattern,
    category: Pattern,
    event: Pattern,
}

impl Template {
    /// Parses and checks an entry. The error starts with the offending field's name, so the
    /// caller can prefix `upstream.templates[N].`.
    pub(crate) fn parse(entry: &UpstreamTemplate) -> Result<Template, String> {
        // In the host an escaped name is decoded again (and must then be a valid domain
        // name), so only the path and query can take any name: `{hub}.example.com` would
        // work for `chat` and fail for a method named `a b`.
        let text = &entry.url_template;
        // Errors show the URL without a password or an Azure Functions `code=` key.
        let shown = hide_url(text);
        if let Some(start) = text.find("://").map(|at| at + 3) {
            let end = text[start..]
                .find(['/', '?', '#'])
                .map_or(text.len(), |at| start + at);
            if text[..end].contains('{') {
                return Err(format!(
                    "url_template '{shown}': placeholders may only be in the path and query, \
                     not in the scheme, host or port (earlier builds took them there; for a \
                     host per hub, write one template per hub with that hub_pattern)"
                ));
            }
        }
        let template = Template {
            parts: parse_url(&entry.url_template)
                .map_err(|e| format!("url_template '{shown}': {e}"))?,
            hub: Pattern::parse(&entry.hub_pattern).map_err(|e| format!("hub_pattern: {e}"))?,
            category: Pattern::parse(&entry.category_pattern)
                .map_err(|e| format!("category_pattern: {e}"))?,
            event: Pattern::parse(&entry.event_pattern)
                .map_err(|e| format!("event_pattern: {e}"))?,
        };
        // Placeholders are escaped, so if sample values give a good URL every value does.
        let sample = template.url("hub", "category", "event");
        let url = url::Url::parse(&sample).map_err(|e| {
            format!(
                "url_template '{shown}' does not give a URL ({}: {e})",
                hide_url(&sample)
            )
        })?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
            return Err(format!(
                "url_template '{shown}' must be an http:// or https:// URL with a host"
            ));
        }
        Ok(template)
    }

    pub(crate) fn matches(&self, hub: &str, category: &str, event: &str) -> bool {
        self.hub.matches(hub) && self.category.matches(category) && self.event.matches(event)
    }

    /// Whether any event of `hub` can match.
    pub(crate) fn serves_hub(&self, hub: &str) -> bool {
        self.hub.matches(hub)
    }

    /// The URL for an event, placeholders URI-escaped.
    pub(crate) fn url(&self, hub: &str, category: &str, event: &str) -> String {
        let mut url = String::new();
        for part in &self.parts {
            let value = match part {
                Part::Text(text) => {
                    url.push_str(text);
                    continue;
                }
                Part::Hub => hub,
                Part::Category => category,
                Part::Event => event,
            };
            url.extend(utf8_percent_encode(value, ESCAPED));
        }
        url
    }
}

/// Splits a URL template at `{hub}`, `{category}` and `{event}` (any case). Any other
/// `{…}` is an error rather than a literal, so a typo does not silently become part of a URL.
fn parse_url(text: &str) -> Result<Vec<Part>, String> {
    if text.trim().is_empty() {
        return Err("it is empty".into());
    }
    let mut parts = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find('{') {
        let Some(len) = rest[open..].find('}') else {
            return Err("a '{' is not closed".into());
        };
        let name = &rest[open + 1..open + len];
        let part = match name.to_ascii_lowercase().as_str() {
            "hub" => Part::Hub,
            "category" => Part::Category,
            "event" => Part::Event,
            _ if name.starts_with('@') => {
                return Err("Key Vault references are not supported".into());
            }
            _ => {
                return Err(format!(
                    "unknown placeholder {{{name}}} (known: {{hub}}, {{category}}, {{event}})"
                ));
            }
        };
        if open > 0 {
            parts.push(Part::Text(rest[..open].into()));
        }
        parts.push(part);
        rest = &rest[open + len + 1..];
    }
    if !rest.is_empty() {
        parts.push(Part::Text(rest.into()));
    }
    Ok(parts)
}

/// The templates in order: the first match wins.
#[derive(Debug, Clone, Default)]
pub(crate) struct Templates(Vec<Template>);

impl Templates {
    /// Parses every entry; the error names the first bad one (`upstream.templates[N].field…`).
    pub(crate) fn parse(entries: &[UpstreamTemplate]) -> Result<Templates, String> {
        entries
            .iter()
            .enumerate()
            .map(|(index, entry)| {
                Template::parse(entry).map_err(|e| format!("upstream.templates[{index}].{e}"))
            })
            .collect::<Result<_, _>>()
            .map(Templates)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) fn find(&self, hub: &str, category: &str, event: &str) -> Option<&Template> {
        self.0.iter().find(|t| t.matches(hub, category, event))
    }

    pub(crate) fn serves_hub(&self, hub: &str) -> bool {
        self.0.iter().any(|t| t.serves_hub(hub))
    }
}

/// A URL template without its password and its `code=` query value (an Azure Functions
/// key), kept as written otherwise (a URL parser would escape the `{hub}` placeholders):
/// what `config print` and every template error show.
pub fn hide_url(url: &str) -> String {
    let mut out = match url.split_once("://") {
        Some((scheme, rest)) => {
            let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
            let (authority, tail) = rest.split_at(end);
            match authority.rsplit_once('@') {
                Some((userinfo, host)) => {
                    let user = userinfo.split_once(':').map_or("", |(user, _)| user);
                    format!("{scheme}://{user}:***@{host}{tail}")
                }
                None => url.to_string(),
            }
        }
        None => url.to_string(),
    };
    if let Some(query_at) = out.find('?') {
        let (base, query) = out.split_at(query_at + 1);
        let query: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((name, _)) if name.eq_ignore_ascii_case("code") => format!("{name}=***"),
                _ => pair.to_string(),
            })
            .collect();
        out = format!("{base}{}", query.join("&"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(url: &str, hub: &str, category: &str, event: &str) -> UpstreamTemplate {
        UpstreamTemplate {
            url_template: url.into(),
            hub_pattern: hub.into(),
            event_pattern: event.into(),
            category_pattern: category.into(),
        }
    }

    #[test]
    fn patterns() {
        let any = Pattern::parse("*").unwrap();
        assert!(any.matches("anything"));
        let list = Pattern::parse(" chat , Game ").unwrap();
        assert!(list.matches("chat"));
        assert!(list.matches("CHAT"));
        assert!(list.matches("game"));
        assert!(!list.matches("chats"));
        assert!(!list.matches("ga"));
        assert_eq!(Pattern::parse("a, *").unwrap(), Pattern::Any);
        assert!(Pattern::parse("").is_err());
        assert!(Pattern::parse("a,,b").is_err());
        assert!(Pattern::parse(" ").is_err());
    }

    #[test]
    fn placeholders_stay_out_of_the_host() {
        for url in [
            "http://{hub}.example.com/api",
            "http://localhost,{hub}/{event}",
            "http://h:{event}/",
            "{hub}://h/",
        ] {
            let err = Template::parse(&entry(url, "*", "*", "*")).unwrap_err();
            assert!(
                err.contains("only be in the path and query"),
                "{url}: {err}"
            );
        }
        let t = Template::parse(&entry("http://h/{hub}?e={event}#{category}", "*", "*", "*"));
        assert!(t.is_ok());
    }

    #[test]
    fn placeholders_are_escaped() {
        let t = Template::parse(&entry(
            "http://h:1/api/{hub}/{category}/{event}?x={EVENT}",
            "*",
            "*",
            "*",
        ))
        .unwrap();
        assert_eq!(
            t.url("chat", "messages", "a b/c?d&e=f#g%ü"),
            "http://h:1/api/chat/messages/a%20b%2Fc%3Fd%26e%3Df%23g%25%C3%BC?x=a%20b%2Fc%3Fd%26e%3Df%23g%25%C3%BC"
        );
        assert_eq!(
            t.url("x", "y", "A-_.~z"),
            "http://h:1/api/x/y/A-_.~z?x=A-_.~z"
        );
        let plain = Template::parse(&entry("https://f.example/runtime", "*", "*", "*")).unwrap();
        assert_eq!(plain.url("a", "b", "c"), "https://f.example/runtime");
    }

    #[test]
    fn matching_and_first_wins() {
        let templates = Templates::parse(&[
            entry("http://a/", "chat", "messages", "broadcast,echo"),
            entry("http://b/", "chat", "connections", "*"),
            entry("http://c/", "*", "*", "*"),
        ])
        .unwrap();
        let url = |hub, category, event| {
            templates
                .find(hub, category, event)
                .map(|t| t.url(hub, category, event))
        };
        assert_eq!(
            url("chat", "messages", "Echo").as_deref(),
            Some("http://a/")
        );
        assert_eq!(
            url("chat", "messages", "other").as_deref(),
            Some("http://c/")
        );
        assert_eq!(
            url("chat", "connections", "connected").as_deref(),
            Some("http://b/")
        );
        assert_eq!(
            url("game", "messages", "echo").as_deref(),
            Some("http://c/")
        );
        let only_chat = Templates::parse(&[entry("http://a/", "chat", "*", "*")]).unwrap();
        assert!(only_chat.serves_hub("CHAT"));
        assert!(!only_chat.serves_hub("game"));
        assert!(only_chat.find("game", "messages", "x").is_none());
    }

    #[test]
    fn bad_templates_are_explained() {
        let err = |url: &str| Template::parse(&entry(url, "*", "*", "*")).unwrap_err();
        assert!(err("").contains("url_template"));
        assert!(err("ftp://h/{hub}").contains("http:// or https://"));
        assert!(err("not a url").contains("does not give a URL"));
        assert!(err("http://h/{hubb}").contains("unknown placeholder {hubb}"));
        assert!(err("http://h/{hub").contains("not closed"));
        assert!(err("http://h/{@Microsoft.KeyVault(SecretUri=x)}").contains("Key Vault"));
        let pattern = Template::parse(&entry("http://h/", "a,,b", "*", "*")).unwrap_err();
        assert!(pattern.starts_with("hub_pattern"), "{pattern}");
        // Not in the host: an escaped value is decoded there again (found by the `config`
        // fuzz target: `http://localhost,{hub}/` gave no URL for some names).
        assert!(err("http://{hub}.example.com/x").contains("only be in the path and query"));
        // No error shows a password or an Azure Functions key.
        for url in [
            "http://u:pw@{hub}.f.example/api?code=SECRET",
            "http://u:pw@h/api/{hubb}?code=SECRET",
            "ftp://u:pw@h/api?code=SECRET",
            "http://u:pw@h:99999/api?code=SECRET",
        ] {
            let error = err(url);
            assert!(
                !error.contains("SECRET") && !error.contains("pw"),
                "{error}"
            );
        }
    }
}
