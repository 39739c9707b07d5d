//! `/`: a short page for whoever opens the service's address in a browser or with curl. It
//! names what a person can open here (the dashboard when it is on, health, metrics when they
//! are on this listener, the REST API's description) and where the documentation is: HTML
//! when the request accepts it, plain text otherwise. It shows no setting, key or version.

use std::sync::Arc;

use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

/// The route for `/`; `dashboard` and `metrics`: whether those are served on this listener.
pub(crate) fn routes(dashboard: bool, metrics: bool) -> Router {
    let links = links(dashboard, metrics);
    let pages = Arc::new(Pages {
        html: html(&links),
        text: text(&links),
    });
    Router::new().route(
        "/",
        get(move |headers: HeaderMap| async move { home(&headers, &pages) }),
    )
}

/// The page in both forms, made once: it depends only on the settings.
struct Pages {
    html: String,
    text: String,
}

/// A path a person may open, and what it is.
struct Link {
    path: &'static str,
    what: &'static str,
}

fn links(dashboard: bool, metrics: bool) -> Vec<Link> {
    let mut links = Vec::new();
    if dashboard {
        links.push(Link {
            path: "/dashboard",
            what: "the operator's dashboard and live trace (open the address \
                   `switchyard token --admin` prints)",
        });
    }
    links.push(Link {
        path: "/api/health",
        what: "health: 200 while the node serves (for load balancers)",
    });
    if metrics {
        links.push(Link {
            path: "/metrics",
            what: "Prometheus metrics",
        });
    }
    links.push(Link {
        path: "/api/openapi.json",
        what: "the REST API's OpenAPI description",
    });
    links
}

const ABOUT: &str = "A real-time message service, wire-compatible with Azure SignalR Service. \
    This address serves SignalR clients, app servers and REST callers.";
const DOCS: &str = "Documentation: README.md and docs/ in Switchyard's source; \
    `switchyard --help` lists the commands.";

fn home(headers: &HeaderMap, pages: &Pages) -> Response {
    let (kind, body) = match wants_html(headers) {
        true => ("text/html; charset=utf-8", pages.html.clone()),
        false => ("text/plain; charset=utf-8", pages.text.clone()),
    };
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::VARY, "Accept"),
            (header::CACHE_CONTROL, "no-cache"),
            (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
            (header::X_FRAME_OPTIONS, "DENY"),
        ],
        body,
    )
        .into_response()
}

/// No script; styles inline; the icon is the dashboard's or none.
const CONTENT_SECURITY_POLICY: &str =
    "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'";

/// Whether `Accept` names HTML (what browsers send for a page) with a weight above zero.
fn wants_html(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|range| {
            let mut parts = range.split(';').map(str::trim);
            let kind = parts.next().unwrap_or_default().to_ascii_lowercase();
            let weight = parts
                .find_map(|p| p.strip_prefix("q="))
                .and_then(|q| q.parse::<f32>().ok())
                .unwrap_or(1.0);
            matches!(kind.as_str(), "text/html" | "application/xhtml+xml") && weight > 0.0
        })
}

fn text(links: &[Link]) -> String {
    let mut out = format!("Switchyard\n\n{ABOUT}\n\n");
    for link in links {
        out.push_str(&format!("  {:<18} {}\n", link.path, link.what));
    }
    out.push_str(&format!("\n{DOCS}\n"));
    out
}

fn html(links: &[Link]) -> String {
    let dashboard = links.iter().any(|link| link.path == "/dashboard");
    let icon = match dashboard {
        true => "/dashboard/assets/favicon.svg",
        false => "data:,",
    };
    let items: String = links
        .iter()
        .map(|link| {
            format!(
                "<li><a href=\"{0}\"><code>{0}</code></a> — {1}</li>\n",
                link.path,
                code_spans(link.what)
            )
        })
        .collect();
    PAGE.replace("{icon}", icon)
        .replace("{about}", ABOUT)
        .replace("{links}", &items)
        .replace("{docs}", &code_spans(DOCS))
}

/// `a` in backquotes becomes `<code>a</code>` (the texts are ours and hold no markup).
fn code_spans(text: &str) -> String {
    text.split('`')
        .enumerate()
        .map(|(i, part)| match i % 2 {
            1 => format!("<code>{part}</code>"),
            _ => part.to_string(),
        })
        .collect()
}

const PAGE: &str = r#"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Switchyard</title>
<link rel="icon" href="{icon}">
<style>
body { margin: 40px auto; max-width: 720px; padding: 0 20px;
  font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1d2430; }
h1 { font-size: 22px; }
li { margin: 6px 0; }
code { font-size: 13px; }
a { color: #2463eb; }
</style>
</head>
<body>
<h1>Switchyard</h1>
<p>{about}</p>
<ul>
{links}</ul>
<p>{docs}</p>
</body>
</html>
"#;

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::ACCEPT, value.parse().unwrap());
        headers
    }

    #[test]
    fn html_only_for_requests_that_accept_it() {
        let chromium = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,\
                        image/webp,image/apng,*/*;q=0.8";
        assert!(wants_html(&accept(chromium)));
        assert!(wants_html(&accept("application/xhtml+xml")));
        assert!(!wants_html(&accept("*/*")));
        assert!(!wants_html(&accept("text/plain")));
        assert!(!wants_html(&accept("text/html;q=0, text/plain")));
        assert!(!wants_html(&HeaderMap::new()));
    }

    #[test]
    fn the_page_names_what_is_served_here() {
        let all = text(&links(true, true));
        for path in ["/dashboard", "/api/health", "/metrics", "/api/openapi.json"] {
            assert!(all.contains(path), "{all}");
        }
        let bare = html(&links(false, false));
        assert!(
            !bare.contains("/dashboard") && !bare.contains("/metrics"),
            "{bare}"
        );
        assert!(bare.contains("<code>switchyard --help</code>"), "{bare}");
    }
}
