//! Azure SignalR connection strings (spec §3).
//!
//! Format: `key=value` pairs separated by `;`. Empty segments are ignored,
//! keys are case-insensitive, keys and values are trimmed, a key may appear
//! only once, and each segment is split on its first `=` only (so values may
//! contain `=`, as base64 access keys do).
//!
//! Recognised keys: `Endpoint` (required, `http`/`https`), `Port` (1–65535,
//! overrides the endpoint's port), `AccessKey`, `Version` (`1.<digits>…`),
//! `ClientEndpoint`, `ServerEndpoint`. Every other key (`AuthType`,
//! `ClientId`, `TenantId`, …) is accepted and ignored.

use std::collections::HashSet;
use std::fmt;
use std::str::FromStr;

use url::Url;

/// Why a connection string was rejected. Messages never contain the access key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnectionStringError {
    /// A non-empty segment has no `=`.
    #[error("connection string segment #{index} is not of the form key=value")]
    MalformedSegment {
        /// 1-based position of the segment among the `;`-separated segments.
        index: usize,
    },
    /// A segment starts with `=`.
    #[error("connection string segment #{index} has an empty key")]
    EmptyKey {
        /// 1-based position of the segment.
        index: usize,
    },
    /// The same key (ignoring case) appears twice.
    #[error("connection string key '{0}' appears more than once")]
    DuplicateKey(String),
    /// No `Endpoint` key, or an empty value.
    #[error("connection string is missing the required 'Endpoint' key")]
    MissingEndpoint,
    /// `Endpoint`, `ClientEndpoint` or `ServerEndpoint` is not a usable URL.
    #[error("connection string {key} '{value}' is invalid: {reason}")]
    InvalidUrl {
        /// The key as spelled in the documentation (`Endpoint`, …).
        key: &'static str,
        /// The offending value.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// `Port` is not an integer in 1–65535.
    #[error("connection string Port '{0}' is invalid: expected an integer between 1 and 65535")]
    InvalidPort(String),
    /// `Version` does not look like `1.0`.
    #[error(
        "connection string Version '{0}' is invalid: expected '1.' followed by digits, e.g. 1.0"
    )]
    InvalidVersion(String),
    /// `AccessKey=` with nothing after it.
    #[error("connection string AccessKey is empty")]
    EmptyAccessKey,
}

/// A parsed connection string.
///
/// `Debug` redacts the access key; `Display` (and so `to_string()`) prints it,
/// in the canonical form
/// `Endpoint=http://127.0.0.1;Port=8888;AccessKey=…;Version=1.0;`.
#[derive(Clone, PartialEq, Eq)]
pub struct ConnectionString {
    /// `Endpoint`, without a trailing `/` on its path (for a root URL the
    /// path is the single `/` that `Url` always keeps).
    pub endpoint: Url,
    /// `Port`, overriding the endpoint's own port.
    pub port: Option<u16>,
    /// `AccessKey`, used as written (UTF-8 bytes are the HMAC secret).
    pub access_key: Option<String>,
    /// `Version`, e.g. `1.0`.
    pub version: Option<String>,
    /// `ClientEndpoint`: the URL handed to clients, if different.
    pub client_endpoint: Option<Url>,
    /// `ServerEndpoint`: the URL for server connections and REST, if different.
    pub server_endpoint: Option<Url>,
}

impl ConnectionString {
    /// The endpoint with `Port` applied. The path always ends with `/`, so
    /// `base_url().join("client/")` appends rather than replaces.
    pub fn base_url(&self) -> Url {
        let mut url = self.endpoint.clone();
        if let Some(port) = self.port {
            // Cannot fail: the endpoint is http(s) with a host.
            let _ = url.set_port(Some(port));
        }
        with_trailing_slash(url)
    }

    /// Base URL for clients: `ClientEndpoint` if set, else [`Self::base_url`].
    /// Always ends with `/`.
    pub fn client_base_url(&self) -> Url {
        match &self.client_endpoint {
            Some(url) => with_trailing_slash(url.clone()),
            None => self.base_url(),
        }
    }

    /// Base URL for server connections and REST: `ServerEndpoint` if set,
    /// else [`Self::base_url`]. Always ends with `/`.
    pub fn server_base_url(&self) -> Url {
        match &self.server_endpoint {
            Some(url) => with_trailing_slash(url.clone()),
            None => self.base_url(),
        }
    }
}

fn with_trailing_slash(mut url: Url) -> Url {
    if !url.path().ends_with('/') {
        let path = format!("{}/", url.path());
        url.set_path(&path);
    }
    url
}

fn without_trailing_slash(url: &Url) -> &str {
    url.as_str().trim_end_matches('/')
}

/// Parse and normalise an endpoint URL: http/https, a host, no credentials,
/// no query or fragment; trailing `/` removed from the path.
fn parse_endpoint(key: &'static str, value: &str) -> Result<Url, ConnectionStringError> {
    let invalid = |reason: String| ConnectionStringError::InvalidUrl {
        key,
        value: value.to_owned(),
        reason,
    };
    let mut url = Url::parse(value).map_err(|e| invalid(e.to_string()))?;
    if url.scheme() != "http" && url.scheme() != "https" {
        return Err(invalid(format!(
            "scheme must be http or https, not '{}'",
            url.scheme()
        )));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(invalid("no host".to_owned()));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(invalid("must not contain credentials".to_owned()));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(invalid("must not contain a query or fragment".to_owned()));
    }
    let trimmed = url.path().trim_end_matches('/').to_owned();
    url.set_path(&trimmed);
    // IDNA mapping can turn a host character into ';' (U+037E GREEK QUESTION MARK and
    // U+FF1B FULLWIDTH SEMICOLON both map to it); such a URL cannot be written back into
    // a `;`-separated connection string.
    if url.as_str().contains(';') {
        return Err(invalid("must not contain ';'".to_owned()));
    }
    Ok(url)
}

/// `^1\.\d+(?:[\w-.]+)?$`: "1.", at least one digit, then word characters,
/// `-` or `.`.
fn is_valid_version(v: &str) -> bool {
    let Some(rest) = v.strip_prefix("1.") else {
        return false;
    };
    let mut chars = rest.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_digit())
        && chars.all(|c| c.is_alphanumeric() || c == '_' || c == '-' || c == '.')
}

impl FromStr for ConnectionString {
    type Err = ConnectionStringError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut seen = HashSet::new();
        let mut endpoint = None;
        let mut port = None;
        let mut access_key = None;
        let mut version = None;
        let mut client_endpoint = None;
        let mut server_endpoint = None;

        for (i, segment) in s.split(';').enumerate() {
            let index = i + 1;
            if segment.trim().is_empty() {
                continue;
            }
            let (key, value) = segment
                .split_once('=')
                .ok_or(ConnectionStringError::MalformedSegment { index })?;
            let key = key.trim();
            let value = value.trim();
            if key.is_empty() {
                return Err(ConnectionStringError::EmptyKey { index });
            }
            let lower = key.to_ascii_lowercase();
            if !seen.insert(lower.clone()) {
                return Err(ConnectionStringError::DuplicateKey(key.to_owned()));
            }
            match lower.as_str() {
                "endpoint" => {
                    if value.is_empty() {
                        return Err(ConnectionStringError::MissingEndpoint);
                    }
                    endpoint = Some(parse_endpoint("Endpoint", value)?);
                }
                "port" => match value.parse::<u16>() {
                    Ok(p) if p != 0 => port = Some(p),
                    _ => return Err(ConnectionStringError::InvalidPort(value.to_owned())),
                },
                "accesskey" => {
                    if value.is_empty() {
                        return Err(ConnectionStringError::EmptyAccessKey);
                    }
                    access_key = Some(value.to_owned());
                }
                "version" => {
                    if !is_valid_version(value) {
                        return Err(ConnectionStringError::InvalidVersion(value.to_owned()));
                    }
                    version = Some(value.to_owned());
                }
                "clientendpoint" => {
                    client_endpoint = Some(parse_endpoint("ClientEndpoint", value)?);
                }
                "serverendpoint" => {
                    server_endpoint = Some(parse_endpoint("ServerEndpoint", value)?);
                }
                // AuthType, ClientId, TenantId, ClientSecret, ClientCert, … and
                // anything unknown: accepted, ignored.
                _ => {}
            }
        }

        Ok(Self {
            endpoint: endpoint.ok_or(ConnectionStringError::MissingEndpoint)?,
            port,
            access_key,
            version,
            client_endpoint,
            server_endpoint,
        })
    }
}

impl fmt::Display for ConnectionString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Endpoint={};", without_trailing_slash(&self.endpoint))?;
        if let Some(port) = self.port {
            write!(f, "Port={port};")?;
        }
        if let Some(key) = &self.access_key {
            write!(f, "AccessKey={key};")?;
        }
        if let Some(version) = &self.version {
            write!(f, "Version={version};")?;
        }
        if let Some(url) = &self.client_endpoint {
            write!(f, "ClientEndpoint={};", without_trailing_slash(url))?;
        }
        if let Some(url) = &self.server_endpoint {
            write!(f, "ServerEndpoint={};", without_trailing_slash(url))?;
        }
        Ok(())
    }
}

impl fmt::Debug for ConnectionString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectionString")
            .field("endpoint", &self.endpoint.as_str())
            .field("port", &self.port)
            .field(
                "access_key",
                &self.access_key.as_ref().map(|_| "<redacted>"),
            )
            .field("version", &self.version)
            .field(
                "client_endpoint",
                &self.client_endpoint.as_ref().map(Url::as_str),
            )
            .field(
                "server_endpoint",
                &self.server_endpoint.as_ref().map(Url::as_str),
            )
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_rule() {
        for ok in ["1.0", "1.1", "1.10", "1.0-preview", "1.0.1", "1.0_x"] {
            assert!(is_valid_version(ok), "{ok}");
        }
        for bad in ["", "1", "1.", "2.0", "1.a", "v1.0", "1.0 x", "1.0+x"] {
            assert!(!is_valid_version(bad), "{bad}");
        }
    }

    /// Found by the `connection_string` fuzz target: a host that IDNA maps to one holding
    /// ';' was accepted, and `to_string()` then printed a connection string that does not
    /// parse back.
    #[test]
    fn endpoint_whose_url_holds_a_semicolon_is_rejected() {
        for text in [
            "Endpoint=https://\u{37e}4example",
            "Endpoint=http://a\u{ff1b}b",
            "Endpoint=http://h;ClientEndpoint=http://c\u{37e}d",
        ] {
            let err = text.parse::<ConnectionString>().unwrap_err();
            assert!(
                matches!(&err, ConnectionStringError::InvalidUrl { reason, .. } if reason.contains(';')),
                "{text}: {err}"
            );
        }
        // A percent-encoded ';' in the path is fine and round-trips.
        let cs: ConnectionString = "Endpoint=http://h/a%3Bb".parse().unwrap();
        assert_eq!(cs.to_string().parse::<ConnectionString>(), Ok(cs));
    }
}
