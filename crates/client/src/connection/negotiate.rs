//! Negotiate: `POST {hub}/negotiate`, following redirects (Azure's app-server redirect
//! document) the way the official clients do; the one negotiate of this crate.

use serde_json::Value;
use url::Url;

use super::{authorized, Transport, MAX_REDIRECTS, REQUEST_TIMEOUT};
use crate::ClientError;
use switchyard_hub_protocol::Format;

/// What negotiate answered in the end.
#[derive(Debug, Clone)]
pub struct Negotiated {
    /// The hub URL the connection is made to (the last redirect's, or the one given).
    pub url: Url,
    /// The token for the connection: the last redirect's `accessToken`, or the one given.
    pub token: Option<String>,
    pub version: i64,
    pub connection_id: String,
    /// `connectionToken` (v1), else the connection id: the value to put in `id=`.
    pub id_value: String,
    /// Transport names as listed.
    pub transports: Vec<String>,
    /// `(transport, transfer formats)` as listed.
    pub transfer_formats: Vec<(String, Vec<String>)>,
    /// The final response body.
    pub raw: Value,
}

impl Negotiated {
    pub(super) fn check_offers(
        &self,
        transport: Transport,
        format: Format,
    ) -> Result<(), ClientError> {
        let Some((_, formats)) = self
            .transfer_formats
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(transport.name()))
        else {
            return Err(ClientError::Protocol(format!(
                "the server does not offer the {} transport (it offers: {})",
                transport.name(),
                if self.transports.is_empty() {
                    "none".to_string()
                } else {
                    self.transports.join(", ")
                }
            )));
        };
        let needed = if format.is_binary() { "Binary" } else { "Text" };
        if !formats.iter().any(|f| f.eq_ignore_ascii_case(needed)) {
            return Err(ClientError::Protocol(format!(
                "the server does not offer the {needed} transfer format (protocol '{}') over {}",
                format.name(),
                transport.name()
            )));
        }
        Ok(())
    }
}

/// One negotiate request at `base` (`http://host:port/client/?hub=chat`, or an app server's
/// `http://host/chat`) with `negotiateVersion={version}` (none for 0). A redirect is not
/// followed: it comes back as an error naming it.
pub async fn negotiate(base: &str, token: &str, version: u8) -> Result<Negotiated, ClientError> {
    let url = parse_http_url(base)?;
    match request(
        &reqwest::Client::new(),
        url,
        Some(token.to_string()),
        version,
        false,
    )
    .await?
    {
        Answer::Done(negotiated) => Ok(negotiated),
        Answer::Redirect { url, .. } => Err(ClientError::Protocol(format!(
            "negotiate redirected to {url}"
        ))),
    }
}

/// `POST {url}/negotiate?…&negotiateVersion=1` (and `&useStatefulReconnect=true` when
/// `stateful`), then again at each redirect's `url` with its `accessToken`, up to
/// [`MAX_REDIRECTS`] negotiates in all.
pub(super) async fn negotiate_following(
    client: &reqwest::Client,
    url: &str,
    mut token: Option<String>,
    stateful: bool,
) -> Result<Negotiated, ClientError> {
    let mut url = parse_http_url(url)?;
    for _ in 0..MAX_REDIRECTS {
        match request(client, url.clone(), token.clone(), 1, stateful).await? {
            Answer::Done(negotiated) => return Ok(negotiated),
            Answer::Redirect {
                url: next,
                token: next_token,
            } => {
                url = next;
                if next_token.is_some() {
                    token = next_token;
                }
            }
        }
    }
    Err(ClientError::Protocol(format!(
        "Negotiate redirection limit exceeded ({MAX_REDIRECTS} negotiate requests)."
    )))
}

/// What one negotiate request answered.
enum Answer {
    Redirect { url: Url, token: Option<String> },
    Done(Negotiated),
}

async fn request(
    client: &reqwest::Client,
    url: Url,
    token: Option<String>,
    version: u8,
    stateful: bool,
) -> Result<Answer, ClientError> {
    let mut target = negotiate_url(&url, version);
    if stateful {
        // As the official clients ask (every negotiate, redirects included).
        target
            .query_pairs_mut()
            .append_pair("useStatefulReconnect", "true");
    }
    let request = authorized(client.post(target), token.as_deref()).timeout(REQUEST_TIMEOUT);
    let response = request.send().await?;
    let status = response.status().as_u16();
    let body = response.text().await?;
    if status != 200 {
        return Err(ClientError::Negotiate { status, body });
    }
    let raw: Value = serde_json::from_str(&body)
        .map_err(|e| ClientError::Protocol(format!("negotiate response: {e}")))?;
    if let Some(error) = raw.get("error").and_then(Value::as_str) {
        return Err(ClientError::Negotiate {
            status,
            body: error.to_string(),
        });
    }
    if raw.get("ProtocolVersion").is_some() {
        return Err(ClientError::Protocol(
            "the server is an ASP.NET SignalR (not ASP.NET Core SignalR) server".into(),
        ));
    }
    if let Some(next) = raw.get("url").and_then(Value::as_str) {
        let next_url = url
            .join(next)
            .map_err(|e| ClientError::Protocol(format!("negotiate redirect '{next}': {e}")))
            .and_then(check_http)?;
        let next_token = raw
            .get("accessToken")
            .and_then(Value::as_str)
            .map(str::to_string);
        return Ok(Answer::Redirect {
            url: next_url,
            token: next_token,
        });
    }
    let connection_id = raw["connectionId"].as_str().unwrap_or_default().to_string();
    let version = raw["negotiateVersion"].as_i64().unwrap_or(0);
    let id_value = match raw.get("connectionToken").and_then(Value::as_str) {
        Some(connection_token) if version >= 1 => connection_token.to_string(),
        _ => connection_id.clone(),
    };
    let transfer_formats: Vec<(String, Vec<String>)> = raw["availableTransports"]
        .as_array()
        .map(|list| {
            list.iter()
                .filter_map(|t| {
                    let name = t["transport"].as_str()?.to_string();
                    let formats = t["transferFormats"]
                        .as_array()
                        .map(|f| {
                            f.iter()
                                .filter_map(Value::as_str)
                                .map(str::to_string)
                                .collect()
                        })
                        .unwrap_or_default();
                    Some((name, formats))
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(Answer::Done(Negotiated {
        url,
        token,
        version,
        connection_id,
        id_value,
        transports: transfer_formats
            .iter()
            .map(|(name, _)| name.clone())
            .collect(),
        transfer_formats,
        raw,
    }))
}

pub(super) fn parse_http_url(text: &str) -> Result<Url, ClientError> {
    Url::parse(text)
        .map_err(|e| ClientError::Protocol(format!("hub URL '{text}': {e}")))
        .and_then(check_http)
}

pub(super) fn check_http(url: Url) -> Result<Url, ClientError> {
    match url.scheme() {
        "http" | "https" => Ok(url),
        other => Err(ClientError::Protocol(format!(
            "hub URL '{url}': expected http or https, not {other}"
        ))),
    }
}

/// The path gets `/negotiate` (no doubled `/`), the query is kept and gets
/// `negotiateVersion={version}` (none for 0) unless it names a version already.
fn negotiate_url(hub: &Url, version: u8) -> Url {
    let mut url = hub.clone();
    url.set_fragment(None);
    let path = format!("{}/negotiate", hub.path().trim_end_matches('/'));
    url.set_path(&path);
    if version > 0 && !url.query_pairs().any(|(k, _)| k == "negotiateVersion") {
        url.query_pairs_mut()
            .append_pair("negotiateVersion", &version.to_string());
    }
    url
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiate_urls() {
        let cases = [
            (
                "http://127.0.0.1:5050/bench",
                "http://127.0.0.1:5050/bench/negotiate?negotiateVersion=1",
            ),
            (
                "http://127.0.0.1:8080/client/?hub=bench",
                "http://127.0.0.1:8080/client/negotiate?hub=bench&negotiateVersion=1",
            ),
            (
                "http://h/client/?hub=a&asrs.op=%2Fa&negotiateVersion=0",
                "http://h/client/negotiate?hub=a&asrs.op=%2Fa&negotiateVersion=0",
            ),
        ];
        for (hub, expected) in cases {
            assert_eq!(
                negotiate_url(&Url::parse(hub).unwrap(), 1).as_str(),
                expected
            );
        }
    }
}
