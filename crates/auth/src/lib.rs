//! Authentication for Switchyard, the self-hosted Azure SignalR Service
//! replacement. Pure library: no I/O, no clock (callers pass `now`).
//!
//! # Layout
//! - [`keys`]: [`AccessKeys`] (primary + optional secondary for rotation),
//!   [`EMULATOR_ACCESS_KEY`], [`generate_connection_token`].
//! - [`connection_string`]: [`ConnectionString`] parsing/printing (spec §3).
//! - [`jwt`]: issuing tokens byte-compatible with the SDKs
//!   ([`TokenBuilder`], [`issue_token`]) and verifying them
//!   ([`verify_token`] → [`VerifiedToken`] with claim helpers, [`AuthError`]).
//! - [`verifier`]: [`TokenVerifier`], [`verify_token`] for fixed keys that remembers the
//!   tokens that passed (a negotiate and its connect, a REST caller's repeated token).
//! - [`audience`]: the audience rule shared by client and REST endpoints
//!   ([`audience_matches`], [`RequestTarget`], [`client_audience`]).
//! - [`upstream`]: the `X-ASRS-Signature` of upstream webhooks
//!   ([`upstream_signature`], [`verify_upstream_signature`]).
//! - `jwt_crypto` (private): the HMAC-only crypto provider that
//!   `jsonwebtoken` signs and verifies with (no RSA/ECDSA/EdDSA crates).
//!
//! An access key is always used as the UTF-8 bytes of the key string, never
//! base64-decoded.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

pub mod audience;
pub mod connection_string;
pub mod jwt;
mod jwt_crypto;
pub mod keys;
pub mod upstream;
pub mod verifier;

pub use audience::{
    audience_matches, audience_matches_strictly, client_audience, server_audience, RequestTarget,
    Strictness,
};
pub use connection_string::{ConnectionString, ConnectionStringError};
pub use jwt::{
    bearer_token, claim_types, issue_token, sanitize_user_claims, transports, verify_token,
    verify_token_ignoring_audience, AuthError, JwtAlgorithm, TokenBuilder, VerifiedToken,
    DEFAULT_TOKEN_LIFETIME, EXPIRY_LEEWAY_SECS, MAX_TOKEN_LEN, NOT_BEFORE_LEEWAY_SECS,
    SDK_MAX_TOKEN_LEN,
};
pub use keys::{generate_connection_token, AccessKeys, SigningKey, EMULATOR_ACCESS_KEY};
pub use upstream::{upstream_signature, verify_upstream_signature, SIGNATURE_HEADER};
pub use verifier::{TokenVerifier, DEFAULT_CACHE_BYTES};
