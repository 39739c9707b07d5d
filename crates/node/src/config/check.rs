//! The checks of [`Config::validate`] that need no file: keys, addresses, limits, timeouts
//! and the upstream section (whose templates are parsed here, once).

use std::time::Duration;

use super::{Config, ConfigError, Templates};

impl Config {
    pub(crate) fn check(&self) -> Result<Templates, ConfigError> {
        self.cluster.validate().map_err(ConfigError::Invalid)?;
        self.check_internal_tls()?;
        self.stateful_reconnect
            .validate()
            .map_err(ConfigError::Invalid)?;
        self.throttling.validate().map_err(ConfigError::Invalid)?;
        self.dashboard.validate().map_err(ConfigError::Invalid)?;
        self.check_keys()?;
        self.check_endpoint()?;
        self.check_limits()?;
        self.cors.validate()?;
        self.check_timeouts()?;
        self.validate_upstream()
    }

    fn check_keys(&self) -> Result<(), ConfigError> {
        if self.development_mode() && !self.listen.ip().is_loopback() {
            return Err(ConfigError::Invalid(format!(
                "refusing to listen on non-loopback address {} in development mode (no access key \
                 configured, so the publicly known Emulator key would be accepted); set an access key \
                 with --access-key / SWITCHYARD_ACCESS_KEY / access_key, or listen on 127.0.0.1",
                self.listen
            )));
        }
        for (name, key) in [
            ("access_key", &self.access_key),
            ("secondary_access_key", &self.secondary_access_key),
        ] {
            if let Some(key) = key {
                if key == switchyard_auth::EMULATOR_ACCESS_KEY && !self.listen.ip().is_loopback() {
                    return Err(ConfigError::Invalid(format!(
                        "{name} is the Azure SignalR Emulator's publicly known key; refusing to \
                         listen on non-loopback address {} with it: set a secret key of your own",
                        self.listen
                    )));
                }
                if key.len() < 32 {
                    return Err(ConfigError::Invalid(format!(
                        "{name} must be at least 32 characters (HMAC-SHA256 keys shorter than that are guessable)"
                    )));
                }
            }
        }
        if self.secondary_access_key.is_some() && self.access_key.is_none() {
            return Err(ConfigError::Invalid(
                "secondary_access_key is set but access_key is not".into(),
            ));
        }
        Ok(())
    }

    /// An https internal URL is this node's own TLS listener: without TLS nothing would
    /// answer there, so it is refused at start rather than failing every forwarded request.
    fn check_internal_tls(&self) -> Result<(), ConfigError> {
        let https = self
            .cluster
            .internal_url
            .as_deref()
            // Schemes are case-insensitive: `HTTPS://` is https too.
            .is_some_and(|url| {
                url.get(..6)
                    .is_some_and(|s| s.eq_ignore_ascii_case("https:"))
            });
        if https && !self.tls.enabled() {
            return Err(ConfigError::Invalid(
                "cluster.internal_url is https, but this node serves no TLS: set tls.cert and \
                 tls.key (other nodes reach this node's TLS listener there), or use an http:// \
                 internal_url"
                    .into(),
            ));
        }
        Ok(())
    }

    fn check_endpoint(&self) -> Result<(), ConfigError> {
        if self.public_endpoint.is_none() && self.listen.ip().is_unspecified() {
            return Err(ConfigError::Invalid(format!(
                "public_endpoint is required when listening on {} (an unspecified address): set \
                 the URL clients reach this service at, e.g. --public-endpoint \
                 https://signalr.example.com; tokens name it as their audience",
                self.listen
            )));
        }
        if let Some(endpoint) = &self.public_endpoint {
            let url = url::Url::parse(endpoint).map_err(|e| {
                ConfigError::Invalid(format!("public_endpoint '{endpoint}' is not a URL: {e}"))
            })?;
            if !matches!(url.scheme(), "http" | "https") {
                return Err(ConfigError::Invalid(format!(
                    "public_endpoint '{endpoint}' must be http or https"
                )));
            }
        }
        Ok(())
    }

    fn check_limits(&self) -> Result<(), ConfigError> {
        let limits = &self.limits;
        for (name, value) in [
            (
                "limits.max_client_message_size",
                limits.max_client_message_size,
            ),
            ("limits.max_request_body_size", limits.max_request_body_size),
            (
                "limits.max_pending_bytes_per_connection",
                limits.max_pending_bytes_per_connection,
            ),
            (
                "limits.max_server_message_size",
                limits.max_server_message_size,
            ),
            (
                "limits.max_pending_bytes_per_server_connection",
                limits.max_pending_bytes_per_server_connection,
            ),
            (
                "limits.max_relay_buffered_bytes",
                limits.max_relay_buffered_bytes,
            ),
        ] {
            if value < 1024 {
                return Err(ConfigError::Invalid(format!(
                    "{name} must be at least 1024 bytes (got {value})"
                )));
            }
        }
        if limits.max_pending_invocations == 0 {
            return Err(ConfigError::Invalid(
                "limits.max_pending_invocations must be at least 1".into(),
            ));
        }
        Ok(())
    }

    fn check_timeouts(&self) -> Result<(), ConfigError> {
        let t = &self.timeouts;
        for (name, value) in [
            ("timeouts.keep_alive_interval", t.keep_alive_interval),
            ("timeouts.client_timeout", t.client_timeout),
            ("timeouts.handshake_timeout", t.handshake_timeout),
            ("timeouts.connect_timeout", t.connect_timeout),
            ("timeouts.long_poll_timeout", t.long_poll_timeout),
            ("timeouts.long_poll_inactivity", t.long_poll_inactivity),
            (
                "timeouts.server_keep_alive_interval",
                t.server_keep_alive_interval,
            ),
            ("timeouts.server_timeout", t.server_timeout),
            (
                "timeouts.server_handshake_timeout",
                t.server_handshake_timeout,
            ),
            ("timeouts.request_header_timeout", t.request_header_timeout),
            ("timeouts.request_body_timeout", t.request_body_timeout),
        ] {
            if value < Duration::from_millis(100) {
                return Err(ConfigError::Invalid(format!(
                    "{name} must be at least 100ms (got {value:?})"
                )));
            }
        }
        if t.keep_alive_interval >= t.client_timeout {
            return Err(ConfigError::Invalid(
                "timeouts.keep_alive_interval must be shorter than timeouts.client_timeout".into(),
            ));
        }
        if t.server_keep_alive_interval >= t.server_timeout {
            return Err(ConfigError::Invalid(
                "timeouts.server_keep_alive_interval must be shorter than timeouts.server_timeout"
                    .into(),
            ));
        }
        Ok(())
    }

    fn validate_upstream(&self) -> Result<Templates, ConfigError> {
        let upstream = &self.upstream;
        if upstream.timeout < Duration::from_millis(100) {
            return Err(ConfigError::Invalid(format!(
                "upstream.timeout must be at least 100ms (got {:?})",
                upstream.timeout
            )));
        }
        if upstream.max_concurrency == 0 {
            return Err(ConfigError::Invalid(
                "upstream.max_concurrency must be at least 1".into(),
            ));
        }
        if upstream.max_response_size < 1024 {
            return Err(ConfigError::Invalid(format!(
                "upstream.max_response_size must be at least 1024 bytes (got {})",
                upstream.max_response_size
            )));
        }
        Templates::parse(&upstream.templates).map_err(ConfigError::Invalid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_internal_url(url: &str, tls: bool) -> Config {
        let mut config = Config::default();
        config.cluster.internal_url = Some(url.into());
        if tls {
            // Only the shape is checked here; the files are read by `validate`.
            config.tls.cert = Some("/etc/switchyard/cert.pem".into());
            config.tls.key = Some("/etc/switchyard/key.pem".into());
        }
        config
    }

    #[test]
    fn a_cluster_secret_equal_to_the_access_key_seals_as_the_derived_key() {
        // docs/cluster.md's move from derived keys to a secret of its own relies on this.
        let key = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789abcdefgh";
        let derived = Config {
            access_key: Some(key.into()),
            ..Config::default()
        };
        let mut explicit = derived.clone();
        explicit.cluster.secret = Some(key.into());
        let tag = |config: &Config| config.cluster_seal().tag(&[b"envelope"]);
        assert_eq!(tag(&derived), tag(&explicit));
        explicit.cluster.secret = Some("another secret of at least 32 characters".into());
        assert_ne!(tag(&derived), tag(&explicit));
    }

    #[test]
    fn an_https_internal_url_needs_the_nodes_tls() {
        let error = with_internal_url("https://n1.internal:8443", false)
            .check()
            .unwrap_err()
            .to_string();
        assert!(error.contains("cluster.internal_url is https"), "{error}");
        assert!(error.contains("tls.cert and tls.key"), "{error}");
        let error = with_internal_url("HTTPS://n1.internal:8443", false)
            .check()
            .unwrap_err()
            .to_string();
        assert!(error.contains("cluster.internal_url is https"), "{error}");
        with_internal_url("https://n1.internal:8443", true)
            .check()
            .unwrap();
        // Plain HTTP stays allowed either way (with a warning at start when TLS is on).
        with_internal_url("http://n1.internal:8080", true)
            .check()
            .unwrap();
        with_internal_url("http://n1.internal:8080", false)
            .check()
            .unwrap();
    }

    #[test]
    fn an_internal_url_is_http_or_https_with_no_path() {
        for bad in [
            "https://n1.internal:8443/x",
            "wss://n1.internal:8443",
            "https://user@n1.internal",
        ] {
            let error = with_internal_url(bad, true)
                .check()
                .unwrap_err()
                .to_string();
            assert!(
                error.contains("must be http(s)://host[:port]"),
                "{bad}: {error}"
            );
        }
    }

    #[test]
    fn a_cluster_ca_file_that_cannot_be_read_stops_the_start() {
        let mut config = Config::default();
        config.cluster.ca_file = Some("/nonexistent/cluster-ca.pem".into());
        let error = config.validate().unwrap_err().to_string();
        assert!(
            error.starts_with("cluster.ca_file: /nonexistent/cluster-ca.pem"),
            "{error}"
        );
    }
}
