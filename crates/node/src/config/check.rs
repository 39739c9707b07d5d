//! The checks of [`Config::validate`] that need no file: keys, addresses, limits, timeouts
//! and the upstream section (whose templates are parsed here, once).

use std::time::Duration;

use super::{Config, ConfigError, Templates};

impl Config {
    pub(crate) fn check(&self) -> Result<Templates, ConfigError> {
        self.cluster.validate().map_err(ConfigError::Invalid)?;
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
