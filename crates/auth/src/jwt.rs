//! HMAC-signed JWTs as issued by the Azure SignalR SDKs and accepted by the
//! service (spec §2.3, §3, §4.1).
//!
//! The JWT mechanics (base64url, header parsing, checking the algorithm) are
//! the `jsonwebtoken` crate's, its HMAC signing and constant-time signature
//! verification our `jwt_crypto` provider's; this module decides what goes
//! into a token and what is accepted.
//!
//! Issuing reproduces the SDK's payload byte for byte: caller claims in order
//! (repeated types folded into a JSON array at the first occurrence), then
//! `nbf`, `exp`, `iat`, `iss` (only if set), `aud`. The header has the SDK's
//! fields (`typ` `JWT`, `alg`, `kid` when set) in `jsonwebtoken`'s order,
//! `{"typ":"JWT","alg":"HS256"[,"kid":…]}`; verifiers only read `alg`.
//!
//! Verification is deliberately independent of the system clock (the caller
//! passes `now`: `jsonwebtoken`'s own time and audience checks are switched
//! off and done here) and checks the signature against every configured key.

use std::sync::LazyLock;
use std::time::Duration;

use jsonwebtoken::errors::{Error as JwtError, ErrorKind as JwtErrorKind};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde_json::{Map, Value};

use crate::jwt_crypto;
use crate::keys::{AccessKeys, SigningKey};

/// Longest token [`verify_token`] accepts, in bytes (8 KiB). The SDKs refuse
/// to issue tokens over [`SDK_MAX_TOKEN_LEN`]; we allow headroom for other
/// issuers while still bounding the work done on hostile input.
pub const MAX_TOKEN_LEN: usize = 8 * 1024;

/// The SDKs' own token limit (4096 characters, spec §2.1 / §7).
pub const SDK_MAX_TOKEN_LEN: usize = 4096;

/// Clock-skew allowance for `exp`, in seconds: a token is rejected as expired
/// once `now >= exp + EXPIRY_LEEWAY_SECS`.
pub const EXPIRY_LEEWAY_SECS: i64 = 60;

/// Clock-skew allowance for `nbf`, in seconds: a token is rejected as not yet
/// valid while `now + NOT_BEFORE_LEEWAY_SECS < nbf`. Larger than the expiry
/// leeway because the SDK stamps `nbf = now` on the app server's clock and
/// the real service does not check `nbf` at all; 300 s is .NET's default skew.
pub const NOT_BEFORE_LEEWAY_SECS: i64 = 300;

/// Default token lifetime of the SDKs (1 hour).
pub const DEFAULT_TOKEN_LIFETIME: Duration = Duration::from_secs(3600);

/// Registered claims the token generator writes itself; caller claims with
/// these types are renamed `asrs.u.<type>` by [`TokenBuilder`].
const GENERATED_CLAIMS: [&str; 5] = ["nbf", "exp", "iat", "iss", "aud"];

/// Well-known claim types.
pub mod claim_types {
    /// Prefix of service system claims.
    pub const SYSTEM_PREFIX: &str = "asrs.s.";
    /// Prefix given to user claims that collide with system JWT claims.
    pub const USER_PREFIX: &str = "asrs.u.";
    /// User id.
    pub const USER_ID: &str = "asrs.s.uid";
    /// Authentication type (omitted when "Bearer").
    pub const AUTHENTICATION_TYPE: &str = "asrs.s.aut";
    /// Custom NameClaimType of the identity.
    pub const NAME_TYPE: &str = "asrs.s.nt";
    /// Custom RoleClaimType of the identity.
    pub const ROLE_TYPE: &str = "asrs.s.rt";
    /// Server name the client is sticky to.
    pub const SERVER_NAME: &str = "asrs.s.sn";
    /// Server sticky mode (`Preferred` / `Required`).
    pub const SERVER_STICKY: &str = "asrs.s.ssticky";
    /// Detailed errors enabled ("True").
    pub const ENABLE_DETAILED_ERRORS: &str = "asrs.s.derror";
    /// Number of service endpoints (when more than one).
    pub const SERVICE_ENDPOINTS_COUNT: &str = "asrs.s.secn";
    /// LongPolling max poll interval, seconds.
    pub const MAX_POLL_INTERVAL: &str = "asrs.s.ttl";
    /// Diagnostic client ("true").
    pub const DIAGNOSTIC_CLIENT: &str = "asrs.s.dc";
    /// Custom handshake timeout, seconds.
    pub const CUSTOM_HANDSHAKE_TIMEOUT: &str = "asrs.s.cht";
    /// Allowed HTTP transports bitmask (1 WebSockets, 2 SSE, 4 LongPolling).
    pub const HTTP_TRANSPORT_TYPE: &str = "asrs.s.htt";
    /// Close the connection when authentication expires ("true").
    pub const CLOSE_ON_AUTH_EXPIRATION: &str = "asrs.s.coae";
    /// Authentication expiry, unix seconds.
    pub const AUTH_EXPIRES_ON: &str = "asrs.s.aeo";
    /// Short JWT name-identifier claim.
    pub const NAME_ID: &str = "nameid";
    /// Subject.
    pub const SUBJECT: &str = "sub";
    /// .NET `ClaimTypes.NameIdentifier`.
    pub const NAME_IDENTIFIER_URI: &str =
        "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/nameidentifier";
    /// System JWT claims a user claim must not collide with (spec §2.3).
    pub const SYSTEM_JWT_CLAIMS: [&str; 11] = [
        "aud", "exp", "iat", "nbf", "iss", "actort", "acr", "azp", "c_hash", "jti", "nonce",
    ];
}

/// Allowed-transport bits of `asrs.s.htt`.
pub mod transports {
    /// WebSockets.
    pub const WEB_SOCKETS: u8 = 1;
    /// Server-Sent Events.
    pub const SERVER_SENT_EVENTS: u8 = 2;
    /// Long polling.
    pub const LONG_POLLING: u8 = 4;
    /// All three.
    pub const ALL: u8 = WEB_SOCKETS | SERVER_SENT_EVENTS | LONG_POLLING;
}

/// HMAC algorithms for tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum JwtAlgorithm {
    /// HMAC-SHA256 (the SDK default).
    #[default]
    Hs256,
    /// HMAC-SHA384.
    Hs384,
    /// HMAC-SHA512.
    Hs512,
}

impl JwtAlgorithm {
    /// The JOSE `alg` name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Hs256 => "HS256",
            Self::Hs384 => "HS384",
            Self::Hs512 => "HS512",
        }
    }

    /// Parse a JOSE `alg` name (exact, as JOSE names are case-sensitive).
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "HS256" => Some(Self::Hs256),
            "HS384" => Some(Self::Hs384),
            "HS512" => Some(Self::Hs512),
            _ => None,
        }
    }

    /// The `jsonwebtoken` algorithm.
    fn to_jwt(self) -> Algorithm {
        match self {
            Self::Hs256 => Algorithm::HS256,
            Self::Hs384 => Algorithm::HS384,
            Self::Hs512 => Algorithm::HS512,
        }
    }

    /// The HMAC algorithm `alg` names, or `None` for any other family.
    fn from_jwt(alg: Algorithm) -> Option<Self> {
        match alg {
            Algorithm::HS256 => Some(Self::Hs256),
            Algorithm::HS384 => Some(Self::Hs384),
            Algorithm::HS512 => Some(Self::Hs512),
            _ => None,
        }
    }
}

/// Builds and signs a token the way the SDK does.
///
/// ```
/// use std::time::Duration;
/// use switchyard_auth::{TokenBuilder, EMULATOR_ACCESS_KEY};
/// let token = TokenBuilder::new("http://localhost/client/?hub=chat")
///     .claim("asrs.s.uid", "user1")
///     .lifetime(Duration::from_secs(3600))
///     .sign(EMULATOR_ACCESS_KEY, 1_700_000_000);
/// assert_eq!(token.split('.').count(), 3);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenBuilder {
    audience: String,
    claims: Vec<(String, String)>,
    lifetime: Duration,
    issuer: Option<String>,
    key_id: Option<String>,
    algorithm: JwtAlgorithm,
}

impl TokenBuilder {
    /// A builder for a token with this `aud`, no claims, the default
    /// lifetime (1 h), HS256 and no `kid`.
    pub fn new(audience: impl Into<String>) -> Self {
        Self {
            audience: audience.into(),
            claims: Vec::new(),
            lifetime: DEFAULT_TOKEN_LIFETIME,
            issuer: None,
            key_id: None,
            algorithm: JwtAlgorithm::Hs256,
        }
    }

    /// Append one claim (order is preserved; repeating a type makes an array).
    pub fn claim(mut self, claim_type: impl Into<String>, value: impl Into<String>) -> Self {
        self.claims.push((claim_type.into(), value.into()));
        self
    }

    /// Append several claims.
    pub fn claims<I, K, V>(mut self, claims: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        self.claims
            .extend(claims.into_iter().map(|(k, v)| (k.into(), v.into())));
        self
    }

    /// Token lifetime (`exp = now + lifetime`, whole seconds).
    pub fn lifetime(mut self, lifetime: Duration) -> Self {
        self.lifetime = lifetime;
        self
    }

    /// Add an `iss` claim (written between `iat` and `aud`).
    pub fn issuer(mut self, issuer: impl Into<String>) -> Self {
        self.issuer = Some(issuer.into());
        self
    }

    /// Add a `kid` header (the SDK writes one; verifiers ignore it).
    pub fn key_id(mut self, kid: impl Into<String>) -> Self {
        self.key_id = Some(kid.into());
        self
    }

    /// Signing algorithm (default HS256).
    pub fn algorithm(mut self, algorithm: JwtAlgorithm) -> Self {
        self.algorithm = algorithm;
        self
    }

    /// The JOSE header [`TokenBuilder::sign`] hands to `jsonwebtoken`:
    /// `typ` `JWT`, `alg`, and `kid` when set.
    fn header(&self) -> Header {
        let mut header = Header::new(self.algorithm.to_jwt());
        header.kid = self.key_id.clone();
        header
    }

    /// The header JSON, exactly as it is encoded into the token:
    /// `{"typ":"JWT","alg":"HS256"[,"kid":…]}` (`jsonwebtoken`'s field order;
    /// the SDK writes `alg` first, which no verifier depends on).
    pub fn header_json(&self) -> String {
        // Serialising a Header (strings and an enum) cannot fail.
        serde_json::to_string(&self.header()).expect("header serialisation is infallible")
    }

    /// The payload JSON for a token issued at `now_unix`, exactly as it is
    /// encoded into the token.
    ///
    /// Caller claims whose type is one the builder writes itself (`nbf`,
    /// `exp`, `iat`, `iss`, `aud`) are renamed `asrs.u.<type>`, as the SDK
    /// does, so the JSON never has duplicate keys.
    pub fn payload_json(&self, now_unix: i64) -> String {
        Value::Object(self.payload(now_unix)).to_string()
    }

    /// The payload as a JSON object whose (insertion) order is the SDK's
    /// claim order; see [`TokenBuilder::payload_json`].
    fn payload(&self, now_unix: i64) -> Map<String, Value> {
        // Group values by (possibly renamed) type, in order of first occurrence.
        let mut groups: Vec<(String, Vec<&str>)> = Vec::new();
        for (claim_type, value) in &self.claims {
            let name = if GENERATED_CLAIMS.contains(&claim_type.as_str()) {
                format!("{}{claim_type}", claim_types::USER_PREFIX)
            } else {
                claim_type.clone()
            };
            match groups.iter_mut().find(|(n, _)| *n == name) {
                Some((_, values)) => values.push(value),
                None => groups.push((name, vec![value])),
            }
        }

        let lifetime = i64::try_from(self.lifetime.as_secs()).unwrap_or(i64::MAX);
        let exp = now_unix.saturating_add(lifetime);

        // serde_json keeps insertion order (`preserve_order`), so this
        // serialises in exactly the order built here.
        let mut payload = Map::with_capacity(groups.len() + 5);
        for (name, values) in groups {
            let value = match values.as_slice() {
                [single] => Value::from(*single),
                _ => Value::from(values),
            };
            payload.insert(name, value);
        }
        payload.insert("nbf".to_owned(), Value::from(now_unix));
        payload.insert("exp".to_owned(), Value::from(exp));
        payload.insert("iat".to_owned(), Value::from(now_unix));
        if let Some(iss) = &self.issuer {
            payload.insert("iss".to_owned(), Value::from(iss.as_str()));
        }
        payload.insert("aud".to_owned(), Value::from(self.audience.as_str()));
        payload
    }

    /// Sign with `key` (UTF-8 bytes of the access key string) at `now_unix`.
    /// The token is `jsonwebtoken`'s encoding of [`TokenBuilder::header_json`]
    /// and [`TokenBuilder::payload_json`].
    pub fn sign(&self, key: &str, now_unix: i64) -> String {
        let payload = Value::Object(self.payload(now_unix));
        // An HMAC key of any length is accepted and the header's algorithm is
        // always an HMAC one, so encoding cannot fail.
        jwt_crypto::install();
        jsonwebtoken::encode(
            &self.header(),
            &payload,
            &EncodingKey::from_secret(key.as_bytes()),
        )
        .expect("HMAC signing cannot fail")
    }
}

/// Issue an HS256 token without `kid`: `claims` in order, then `nbf`, `exp`,
/// `iat` and `aud`. Shorthand for [`TokenBuilder`].
pub fn issue_token(
    key: &str,
    audience: &str,
    claims: &[(String, String)],
    lifetime: Duration,
    now_unix: i64,
) -> String {
    TokenBuilder::new(audience)
        .claims(claims.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .lifetime(lifetime)
        .sign(key, now_unix)
}

/// Rename user claims the way the SDK does before putting them into a client
/// token (spec §2.3): a type that collides with a system JWT claim
/// ([`claim_types::SYSTEM_JWT_CLAIMS`]) becomes `asrs.u.<type>`, and only
/// the first `sub` stays `sub` (later ones become `asrs.u.sub`).
pub fn sanitize_user_claims<I, K, V>(claims: I) -> Vec<(String, String)>
where
    I: IntoIterator<Item = (K, V)>,
    K: Into<String>,
    V: Into<String>,
{
    let mut seen_sub = false;
    claims
        .into_iter()
        .map(|(k, v)| {
            let k: String = k.into();
            let rename = if k == claim_types::SUBJECT {
                std::mem::replace(&mut seen_sub, true)
            } else {
                claim_types::SYSTEM_JWT_CLAIMS.contains(&k.as_str())
            };
            let k = if rename {
                format!("{}{k}", claim_types::USER_PREFIX)
            } else {
                k
            };
            (k, v.into())
        })
        .collect()
}

/// Why a token was rejected. `Display` is human-readable and safe to log or
/// return to the client (it never contains key material).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// Not a well-formed HMAC JWT (bad structure, base64, JSON, algorithm, or
    /// claim types).
    #[error("malformed access token: {0}")]
    Malformed(String),
    /// The signature does not match any configured access key.
    #[error("access token signature does not match any access key")]
    BadSignature,
    /// `exp` is in the past (beyond [`EXPIRY_LEEWAY_SECS`]).
    #[error("access token has expired")]
    Expired,
    /// `nbf` is in the future (beyond [`NOT_BEFORE_LEEWAY_SECS`]).
    #[error("access token is not valid yet (its 'nbf' is in the future)")]
    NotYetValid,
    /// No `exp` claim; an expiry is required.
    #[error("access token has no 'exp' claim; an expiry is required")]
    MissingExpiry,
    /// No `aud` value is acceptable for this request (`found` is empty when
    /// the token has no `aud` at all).
    #[error("{}", wrong_audience_text(found))]
    WrongAudience {
        /// The token's audiences.
        found: Vec<String>,
    },
    /// Longer than [`MAX_TOKEN_LEN`].
    #[error("access token is longer than {MAX_TOKEN_LEN} bytes")]
    TooLong,
}

fn wrong_audience_text(found: &[String]) -> String {
    if found.is_empty() {
        "access token has no 'aud' claim".to_owned()
    } else {
        format!(
            "access token audience {} does not match the requested URL",
            found
                .iter()
                .map(|a| format!("'{a}'"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

/// A token whose signature, lifetime and audience have been checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedToken {
    /// Every payload claim in token order, registered ones (`exp`, `aud`, …)
    /// included. Array values are expanded into repeated entries; numbers
    /// and booleans are given as their JSON text (`1700003600`, `true`);
    /// objects as compact JSON; `null`s are dropped.
    pub claims: Vec<(String, String)>,
    /// `exp`, unix seconds.
    pub expires_at: i64,
    /// `aud` values (a string `aud` gives one entry).
    pub audiences: Vec<String>,
    /// The key whose signature matched (REST calls are throttled per key).
    pub signed_with: SigningKey,
}

impl VerifiedToken {
    /// The first value of claim `name`.
    pub fn claim(&self, name: &str) -> Option<&str> {
        self.claims
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Every value of claim `name`, in order.
    pub fn claim_values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> {
        self.claims
            .iter()
            .filter(move |(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The SignalR user id: the first non-empty of `asrs.s.uid`, `nameid`,
    /// `sub`, and .NET's long name-identifier claim type.
    pub fn user_id(&self) -> Option<&str> {
        [
            claim_types::USER_ID,
            claim_types::NAME_ID,
            claim_types::SUBJECT,
            claim_types::NAME_IDENTIFIER_URI,
        ]
        .into_iter()
        .find_map(|name| self.claim(name).filter(|v| !v.is_empty()))
    }

    /// Allowed transports from `asrs.s.htt` as a bitmask of [`transports`]
    /// bits. `None` (no restriction) when the claim is absent, not an
    /// integer, zero, or has bits outside 1|2|4.
    pub fn allowed_transports(&self) -> Option<u8> {
        let mask: u8 = self
            .claim(claim_types::HTTP_TRANSPORT_TYPE)?
            .trim()
            .parse()
            .ok()?;
        (mask != 0 && mask & !transports::ALL == 0).then_some(mask)
    }

    /// LongPolling max poll interval from `asrs.s.ttl`, clamped to 1..=300
    /// seconds; `None` when absent or not an integer.
    pub fn max_poll_interval_secs(&self) -> Option<u32> {
        self.clamped_claim(claim_types::MAX_POLL_INTERVAL, 1, 300)
    }

    /// Handshake timeout from `asrs.s.cht`, clamped to 1..=30 seconds;
    /// `None` when absent or not an integer.
    pub fn handshake_timeout_secs(&self) -> Option<u32> {
        self.clamped_claim(claim_types::CUSTOM_HANDSHAKE_TIMEOUT, 1, 30)
    }

    /// When `asrs.s.coae` is `true` (any case): the moment (unix seconds) the
    /// connection must be closed — `asrs.s.aeo` if it is an integer, else
    /// `exp`. `None` otherwise.
    pub fn close_on_auth_expiry(&self) -> Option<i64> {
        let enabled = self
            .claim(claim_types::CLOSE_ON_AUTH_EXPIRATION)
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
        if !enabled {
            return None;
        }
        Some(
            self.claim(claim_types::AUTH_EXPIRES_ON)
                .and_then(|v| v.trim().parse::<i64>().ok())
                .unwrap_or(self.expires_at),
        )
    }

    fn clamped_claim(&self, name: &str, min: i64, max: i64) -> Option<u32> {
        let v: i64 = self.claim(name)?.trim().parse().ok()?;
        u32::try_from(v.clamp(min, max)).ok()
    }
}

/// Verify `token` and check its audience.
///
/// - Length at most [`MAX_TOKEN_LEN`] bytes, else [`AuthError::TooLong`].
/// - Decoding (unpadded base64url, header, signature) is `jsonwebtoken`'s.
///   Header `alg` must be HS256, HS384 or HS512; `kid`/`typ` are not
///   checked (when present they must be strings).
/// - The signature must match one of `keys` (primary or secondary), compared
///   in constant time.
/// - `exp` is required ([`AuthError::MissingExpiry`]) and must not be past
///   ([`EXPIRY_LEEWAY_SECS`] leeway); `nbf`, when present, must not be in the
///   future ([`NOT_BEFORE_LEEWAY_SECS`] leeway). `exp`/`nbf` may be JSON
///   numbers (fractions truncated) or decimal strings. `iss` is not checked.
/// - At least one `aud` value (a string or an array of strings) must satisfy
///   `audience_ok`, typically `|aud| audience_matches(aud, &target)`. A token
///   without `aud` fails with `WrongAudience { found: [] }`.
///
/// Signature errors take precedence over lifetime errors, which take
/// precedence over audience errors.
pub fn verify_token(
    token: &str,
    keys: &AccessKeys,
    now_unix: i64,
    audience_ok: impl Fn(&str) -> bool,
) -> Result<VerifiedToken, AuthError> {
    let verified = verify_token_ignoring_audience(token, keys, now_unix)?;
    if verified.audiences.iter().any(|aud| audience_ok(aud)) {
        Ok(verified)
    } else {
        Err(AuthError::WrongAudience {
            found: verified.audiences,
        })
    }
}

/// [`verify_token`] without the audience check (the emulator's behaviour,
/// spec §6). Everything else is checked.
pub fn verify_token_ignoring_audience(
    token: &str,
    keys: &AccessKeys,
    now_unix: i64,
) -> Result<VerifiedToken, AuthError> {
    if token.len() > MAX_TOKEN_LEN {
        return Err(AuthError::TooLong);
    }
    if token.split('.').count() != 3 {
        return Err(malformed("expected three dot-separated parts"));
    }
    check_algorithm(token)?;
    let (payload, signed_with) = decode_signed(token, keys)?;
    let expires_at = check_lifetime(&payload, now_unix)?;
    let audiences = payload_audiences(&payload)?;
    Ok(VerifiedToken {
        claims: payload_claims(&payload),
        expires_at,
        audiences,
        signed_with,
    })
}

/// The header is checked before any key is tried, so a token in an unsupported
/// algorithm is malformed even when no key is configured.
fn check_algorithm(token: &str) -> Result<(), AuthError> {
    let header = jsonwebtoken::decode_header(token)
        .map_err(|e| malformed(&format!("header is invalid: {}", jwt_error_text(&e))))?;
    if JwtAlgorithm::from_jwt(header.alg).is_none() {
        return Err(malformed(&format!(
            "unsupported algorithm '{:?}' (HS256, HS384 or HS512 required)",
            header.alg
        )));
    }
    Ok(())
}

/// The payload of a token signed with one of `keys`, and which key that was.
fn decode_signed(
    token: &str,
    keys: &AccessKeys,
) -> Result<(Map<String, Value>, SigningKey), AuthError> {
    jwt_crypto::install();
    let mut decoded = None;
    let mut signed_with = SigningKey::Primary;
    for (index, key) in keys.all().enumerate() {
        match jsonwebtoken::decode::<Value>(
            token,
            &DecodingKey::from_secret(key.as_bytes()),
            &VALIDATION,
        ) {
            Ok(data) => {
                decoded = Some(data.claims);
                // `all` skips an empty primary, so then the only key is the secondary.
                if index > 0 || keys.primary().is_empty() {
                    signed_with = SigningKey::Secondary;
                }
                break;
            }
            Err(e) if matches!(e.kind(), JwtErrorKind::InvalidSignature) => {}
            Err(e) => return Err(malformed(&jwt_error_text(&e))),
        }
    }
    match decoded {
        None => Err(AuthError::BadSignature),
        Some(Value::Object(payload)) => Ok((payload, signed_with)),
        Some(_) => Err(malformed("payload is not a JSON object")),
    }
}

/// `exp` (required, not past) and `nbf` (when present, not in the future), with their
/// leeways; the expiry.
fn check_lifetime(payload: &Map<String, Value>, now_unix: i64) -> Result<i64, AuthError> {
    let expires_at = match payload.get("exp") {
        None | Some(Value::Null) => return Err(AuthError::MissingExpiry),
        Some(v) => numeric_date(v).ok_or_else(|| malformed("'exp' is not a number"))?,
    };
    if now_unix >= expires_at.saturating_add(EXPIRY_LEEWAY_SECS) {
        return Err(AuthError::Expired);
    }
    match payload.get("nbf") {
        None | Some(Value::Null) => {}
        Some(v) => {
            let nbf = numeric_date(v).ok_or_else(|| malformed("'nbf' is not a number"))?;
            if now_unix.saturating_add(NOT_BEFORE_LEEWAY_SECS) < nbf {
                return Err(AuthError::NotYetValid);
            }
        }
    }
    Ok(expires_at)
}

/// `aud`: a string or an array of strings; none when absent.
fn payload_audiences(payload: &Map<String, Value>) -> Result<Vec<String>, AuthError> {
    match payload.get("aud") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(aud)) => Ok(vec![aud.clone()]),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| match item {
                Value::String(aud) => Ok(aud.clone()),
                _ => Err(malformed("'aud' array holds a non-string")),
            })
            .collect(),
        Some(_) => Err(malformed("'aud' is neither a string nor an array")),
    }
}

/// Every claim as text, in payload order; an array is one claim per item.
fn payload_claims(payload: &Map<String, Value>) -> Vec<(String, String)> {
    let mut claims = Vec::with_capacity(payload.len());
    for (name, value) in payload {
        match value {
            Value::Array(items) => {
                for item in items {
                    if let Some(text) = claim_text(item) {
                        claims.push((name.clone(), text));
                    }
                }
            }
            other => {
                if let Some(text) = claim_text(other) {
                    claims.push((name.clone(), text));
                }
            }
        }
    }
    claims
}

/// The token in an `Authorization: Bearer <token>` header value (scheme
/// matched case-insensitively), or `None`.
pub fn bearer_token(authorization: &str) -> Option<&str> {
    let value = authorization.trim();
    let (scheme, rest) = value.split_once(' ')?;
    let token = rest.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

fn malformed(what: &str) -> AuthError {
    AuthError::Malformed(what.to_owned())
}

/// What `jsonwebtoken::decode` checks: the signature of an HMAC token, and
/// nothing that needs a clock or an expected audience (`exp`, `nbf` and
/// `aud` are checked by [`verify_token`] against the caller's `now` and
/// audience rule, and no claim is required up front).
static VALIDATION: LazyLock<Validation> = LazyLock::new(|| {
    let mut validation = Validation::new(Algorithm::HS256);
    validation.algorithms = vec![Algorithm::HS256, Algorithm::HS384, Algorithm::HS512];
    validation.validate_exp = false;
    validation.validate_nbf = false;
    validation.validate_aud = false;
    validation.required_spec_claims.clear();
    validation
});

/// A decoding failure as text for [`AuthError::Malformed`].
fn jwt_error_text(e: &JwtError) -> String {
    match e.kind() {
        JwtErrorKind::InvalidToken => "expected three dot-separated parts".to_owned(),
        JwtErrorKind::Base64(e) => format!("not base64url: {e}"),
        JwtErrorKind::Json(e) => format!("not a valid JSON object: {e}"),
        JwtErrorKind::Utf8(e) => format!("not UTF-8: {e}"),
        JwtErrorKind::InvalidAlgorithm => {
            "unsupported algorithm (HS256, HS384 or HS512 required)".to_owned()
        }
        _ => e.to_string(),
    }
}

/// A JWT NumericDate: an integer, a fractional number (truncated) or a
/// decimal string.
fn numeric_date(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64().or_else(|| {
            let f = n.as_f64()?;
            // `as` saturates; reject NaN/inf (not representable in JSON anyway).
            f.is_finite().then_some(f.trunc() as i64)
        }),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn claim_text(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        Value::Array(_) | Value::Object(_) => Some(v.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_folds_repeated_claims_and_renames_collisions() {
        let payload = TokenBuilder::new("a")
            .claim("role", "x")
            .claim("name", "n")
            .claim("role", "y")
            .claim("exp", "1")
            .issuer("me")
            .lifetime(Duration::from_secs(10))
            .payload_json(100);
        assert_eq!(
            payload,
            r#"{"role":["x","y"],"name":"n","asrs.u.exp":"1","nbf":100,"exp":110,"iat":100,"iss":"me","aud":"a"}"#
        );
    }

    #[test]
    fn header_with_and_without_kid() {
        assert_eq!(
            TokenBuilder::new("a").header_json(),
            r#"{"typ":"JWT","alg":"HS256"}"#
        );
        assert_eq!(
            TokenBuilder::new("a")
                .algorithm(JwtAlgorithm::Hs512)
                .key_id("k\"1")
                .header_json(),
            r#"{"typ":"JWT","alg":"HS512","kid":"k\"1"}"#
        );
    }

    #[test]
    fn sign_encodes_header_json_and_payload_json() {
        use base64::engine::general_purpose::URL_SAFE_NO_PAD;
        use base64::Engine as _;
        let builder = TokenBuilder::new("a")
            .claim("role", "x")
            .claim("role", "y")
            .issuer("me")
            .key_id("k1")
            .algorithm(JwtAlgorithm::Hs384);
        let token = builder.sign("key", 100);
        let parts: Vec<&str> = token.split('.').collect();
        assert_eq!(parts.len(), 3);
        assert_eq!(
            URL_SAFE_NO_PAD.decode(parts[0]).unwrap(),
            builder.header_json().as_bytes()
        );
        assert_eq!(
            URL_SAFE_NO_PAD.decode(parts[1]).unwrap(),
            builder.payload_json(100).as_bytes()
        );
        // HMAC-SHA384 is 48 bytes.
        assert_eq!(URL_SAFE_NO_PAD.decode(parts[2]).unwrap().len(), 48);
    }

    #[test]
    fn algorithm_names_round_trip() {
        for alg in [
            JwtAlgorithm::Hs256,
            JwtAlgorithm::Hs384,
            JwtAlgorithm::Hs512,
        ] {
            assert_eq!(JwtAlgorithm::from_name(alg.name()), Some(alg));
            assert_eq!(JwtAlgorithm::from_jwt(alg.to_jwt()), Some(alg));
            assert_eq!(format!("{:?}", alg.to_jwt()), alg.name());
        }
        assert_eq!(JwtAlgorithm::from_jwt(Algorithm::RS256), None);
        assert_eq!(JwtAlgorithm::from_name("hs256"), None);
    }

    #[test]
    fn numeric_dates() {
        assert_eq!(numeric_date(&serde_json::json!(5)), Some(5));
        assert_eq!(numeric_date(&serde_json::json!(5.9)), Some(5));
        assert_eq!(numeric_date(&serde_json::json!("7")), Some(7));
        assert_eq!(numeric_date(&serde_json::json!("x")), None);
        assert_eq!(numeric_date(&serde_json::json!(true)), None);
    }

    #[test]
    fn sanitize_renames_like_the_sdk() {
        let out = sanitize_user_claims([
            ("sub", "a"),
            ("aud", "b"),
            ("sub", "c"),
            ("name", "d"),
            ("jti", "e"),
        ]);
        let expected: Vec<(String, String)> = [
            ("sub", "a"),
            ("asrs.u.aud", "b"),
            ("asrs.u.sub", "c"),
            ("name", "d"),
            ("asrs.u.jti", "e"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(out, expected);
    }

    #[test]
    fn bearer_parsing() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer   abc "), Some("abc"));
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearer "), None);
        assert_eq!(bearer_token("Bearer"), None);
    }
}
