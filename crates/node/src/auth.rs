//! Who may connect and call: token checks against this service's keys, origins and token
//! lifetime cap, and the hub endpoints' common check.

use axum::http::{header, HeaderMap, StatusCode};
use switchyard_auth::{
    audience_matches_strictly, AccessKeys, AuthError, RequestTarget, Strictness, TokenVerifier,
    VerifiedToken,
};
use switchyard_core::clock::unix_now;
use switchyard_core::HubName;

use crate::config::Config;
use crate::http::{Query, TextError};

/// The bearer token from `Authorization`, else from the `access_token` query parameter.
pub(crate) fn bearer_token<'a>(headers: &'a HeaderMap, query: &'a Query) -> Option<&'a str> {
    let from_header = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, token) = v.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        })
        .filter(|t| !t.is_empty());
    from_header.or_else(|| query.get("access_token").filter(|t| !t.is_empty()))
}

/// What a token must show to this service: a key's signature, an audience naming one of
/// the service's own origins (never what the request's `Host` or `X-Forwarded-*` headers
/// claim), and at most the configured lifetime.
pub(crate) struct Auth {
    /// The keys, and the tokens that passed them (checked again for expiry and audience only).
    verifier: TokenVerifier,
    /// `(scheme, host)` pairs tokens may name: the public endpoint, the listen address.
    origins: Vec<(String, String)>,
    /// Longest lifetime a token may have, in seconds; 0: no cap.
    max_lifetime_secs: i64,
}

impl Auth {
    pub(crate) fn new(keys: AccessKeys, config: &Config) -> Auth {
        let mut origins = Vec::new();
        if let Some(url) = config
            .public_endpoint
            .as_deref()
            .and_then(|endpoint| url::Url::parse(endpoint).ok())
        {
            if let Some(host) = url.host_str() {
                origins.push((url.scheme().to_string(), host.to_string()));
            }
        }
        let ip = config.listen.ip();
        if !ip.is_unspecified() {
            let host = match ip {
                std::net::IpAddr::V6(v6) => format!("[{v6}]"),
                v4 => v4.to_string(),
            };
            origins.push((config.listen_scheme().to_string(), host));
        }
        Auth {
            verifier: TokenVerifier::new(keys),
            origins,
            max_lifetime_secs: config.limits.max_token_lifetime.as_secs() as i64,
        }
    }

    pub(crate) fn keys(&self) -> &AccessKeys {
        self.verifier.keys()
    }

    /// Verifies a bearer token whose audience must name `path` + `query` on one of this
    /// service's origins; `usage` says whether it is worth remembering.
    pub(crate) fn authenticate(
        &self,
        usage: Use,
        token: Option<&str>,
        path: &str,
        query: Option<&str>,
        strict: &Strictness<'_>,
    ) -> Result<VerifiedToken, AuthError> {
        let token =
            token.ok_or_else(|| AuthError::Malformed("no access token was given".into()))?;
        let now = unix_now();
        let audience_ok = |aud: &str| {
            self.origins.iter().any(|(scheme, host)| {
                let target = RequestTarget {
                    scheme,
                    host,
                    path,
                    query,
                };
                audience_matches_strictly(aud, &target, strict)
            })
        };
        let verified = match usage {
            Use::Repeated => self.verifier.verify(token, now, audience_ok),
            Use::Once => self.verifier.verify_once(token, now, audience_ok),
        }?;
        if self.max_lifetime_secs > 0 {
            let issued = verified
                .claim("iat")
                .and_then(|iat| iat.parse::<i64>().ok())
                .unwrap_or(now);
            if verified.expires_at - issued > self.max_lifetime_secs {
                return Err(AuthError::Malformed(format!(
                    "the token lives longer than this service allows ({} s; limits.max_token_lifetime)",
                    self.max_lifetime_secs
                )));
            }
        }
        Ok(verified)
    }
}

/// Whether a token is worth remembering.
#[derive(Clone, Copy)]
pub(crate) enum Use {
    /// REST and dashboard callers send one token many times.
    Repeated,
    /// A connect's token, used at most twice (negotiate, then the transport): not
    /// remembered, so that held connections do not fill the cache.
    Once,
}

/// The hub endpoints' common check (`/client/`, `/server/`): exactly one valid `hub`, and a
/// bearer token whose audience is `{path}?hub={hub}` on this host.
pub(crate) fn authorize_hub(
    auth: &Auth,
    request: &axum::http::request::Parts,
    query: &Query,
    path: &str,
) -> Result<(HubName, VerifiedToken), Unauthorized> {
    if query.count("hub") != 1 {
        return Err(Unauthorized::Request(TextError::new(
            StatusCode::BAD_REQUEST,
            "exactly one 'hub' query parameter is required",
        )));
    }
    let hub = HubName::new(query.get("hub").unwrap_or_default(), None).map_err(|e| {
        Unauthorized::Request(TextError::new(StatusCode::BAD_REQUEST, e.to_string()))
    })?;
    // Passed on by another node, which checked the token (see cluster::assertion): the
    // token did not come along, what it said did.
    if let Some(vouched) = request
        .extensions
        .get::<crate::cluster::assertion::Vouched>()
    {
        return Ok((hub, vouched.token.clone()));
    }
    let audience_query = format!("hub={}", hub.as_str());
    let token = auth
        .authenticate(
            Use::Once,
            bearer_token(&request.headers, query),
            path,
            Some(&audience_query),
            &Strictness::default(),
        )
        .map_err(|error| Unauthorized::Token {
            hub: hub.clone(),
            error,
        })?;
    Ok((hub, token))
}

/// Why [`authorize_hub`] refused a request: kept apart so that token failures can be counted
/// and logged as refused connects.
pub(crate) enum Unauthorized {
    /// A bad request (no hub, a bad hub name): 400.
    Request(TextError),
    /// The token is missing or does not pass: 401.
    Token { hub: HubName, error: AuthError },
}

impl Unauthorized {
    /// The stable reason of a token failure, for logs and the
    /// `switchyard_client_connections_refused_total{reason}` label.
    pub(crate) fn reason(error: &AuthError) -> &'static str {
        match error {
            AuthError::Expired => "token_expired",
            AuthError::WrongAudience { .. } => "wrong_audience",
            _ => "token_invalid",
        }
    }

    pub(crate) fn into_error(self) -> TextError {
        match self {
            Unauthorized::Request(error) => error,
            Unauthorized::Token { error, .. } => {
                TextError::new(StatusCode::UNAUTHORIZED, error.to_string())
            }
        }
    }
}
