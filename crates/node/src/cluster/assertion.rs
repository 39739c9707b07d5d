//! What a node vouches for when it passes a request on to the node that holds a connection:
//! it checked the client's token and computed the client's address. The owner believes
//! that, not the request's credentials (which are not passed on) nor its
//! `X-Forwarded-For`, and only when the assertion's HMAC under the cluster's secret holds.
//!
//! The header is `base64url(json).base64url(tag)`; the tag covers a label, the method, the
//! path and query as sent, and the JSON (the passing node, an expiry a few seconds away, the
//! client's address and the verified token's claims). It is good for that method, path and
//! query until it expires, not once: the body is not covered and there is no nonce, so links
//! between nodes that others can read need TLS (docs/cluster.md says so).

use std::net::IpAddr;

use axum::http::{HeaderName, HeaderValue, Method};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use switchyard_auth::{SigningKey, VerifiedToken};
use switchyard_backplane::envelope::Seal;

pub(crate) const ASSERTION: HeaderName = HeaderName::from_static("x-switchyard-assertion");

/// How long an assertion is good for: one hop, plus the clock difference between nodes.
const LIFETIME_SECS: i64 = 10;

/// The tag's domain, so it can be no envelope's tag (those start with a MessagePack array).
const LABEL: &[u8] = b"switchyard forwarded v1\n";

/// What the owner learns from a passed-on request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Vouched {
    /// The client's address as the passing node computed it (its peer, or what its trusted
    /// proxies said).
    pub(crate) client: Option<IpAddr>,
    /// The token the passing node verified.
    pub(crate) token: VerifiedToken,
}

#[derive(Serialize, Deserialize)]
struct Claims {
    by: String,
    exp: i64,
    ip: Option<IpAddr>,
    claims: Vec<(String, String)>,
    token_exp: i64,
    aud: Vec<String>,
    secondary: bool,
}

fn tag(seal: &Seal, method: &Method, path: &str, payload: &str) -> [u8; 32] {
    seal.tag(&[
        LABEL,
        method.as_str().as_bytes(),
        b"\n",
        path.as_bytes(),
        b"\n",
        payload.as_bytes(),
    ])
}

/// The assertion for a request `method path` that node `by` passes on at unix time `now`.
pub(crate) fn make(
    seal: &Seal,
    by: &str,
    method: &Method,
    path: &str,
    vouched: &Vouched,
    now: i64,
) -> HeaderValue {
    let claims = Claims {
        by: by.to_string(),
        exp: now + LIFETIME_SECS,
        ip: vouched.client,
        claims: vouched.token.claims.clone(),
        token_exp: vouched.token.expires_at,
        aud: vouched.token.audiences.clone(),
        secondary: vouched.token.signed_with == SigningKey::Secondary,
    };
    let json = serde_json::to_vec(&claims).expect("plain data serializes");
    let payload = URL_SAFE_NO_PAD.encode(json);
    let tag = URL_SAFE_NO_PAD.encode(tag(seal, method, path, &payload));
    HeaderValue::from_str(&format!("{payload}.{tag}")).expect("base64url is header-safe")
}

/// What a request marked as passed on by node `by` is vouched for, or why it is not.
pub(crate) fn check(
    seal: &Seal,
    by: &str,
    method: &Method,
    path: &str,
    value: Option<&HeaderValue>,
    now: i64,
) -> Result<Vouched, &'static str> {
    let value = value
        .ok_or("no assertion")?
        .to_str()
        .map_err(|_| "not text")?;
    let (payload, sent_tag) = value.split_once('.').ok_or("malformed")?;
    let sent_tag = URL_SAFE_NO_PAD
        .decode(sent_tag)
        .map_err(|_| "malformed tag")?;
    // The tag first: nothing of an unauthenticated payload is parsed.
    if !seal.verify(
        &[
            LABEL,
            method.as_str().as_bytes(),
            b"\n",
            path.as_bytes(),
            b"\n",
            payload.as_bytes(),
        ],
        &sent_tag,
    ) {
        return Err("the tag does not hold under the cluster's secret");
    }
    let json = URL_SAFE_NO_PAD
        .decode(payload)
        .map_err(|_| "malformed payload")?;
    let claims: Claims = serde_json::from_slice(&json).map_err(|_| "malformed payload")?;
    if claims.by != by {
        return Err("made by another node");
    }
    if claims.exp < now || claims.exp > now + 2 * LIFETIME_SECS {
        return Err("expired (or the nodes' clocks differ by more than a few seconds)");
    }
    Ok(Vouched {
        client: claims.ip,
        token: VerifiedToken {
            claims: claims.claims,
            expires_at: claims.token_exp,
            audiences: claims.aud,
            signed_with: if claims.secondary {
                SigningKey::Secondary
            } else {
                SigningKey::Primary
            },
        },
    })
}

pub(crate) fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vouched() -> Vouched {
        Vouched {
            client: Some("203.0.113.9".parse().unwrap()),
            token: VerifiedToken {
                claims: vec![("nameid".into(), "ü".into())],
                expires_at: 2_000_000_000,
                audiences: vec!["http://lb/client/?hub=chat".into()],
                signed_with: SigningKey::Secondary,
            },
        }
    }

    #[test]
    fn an_assertion_holds_for_its_request_only_and_briefly() {
        let seal = Seal::from_secrets(b"cluster", &[]);
        let path = "/client/?hub=chat&id=k.n2";
        let value = make(&seal, "n1", &Method::GET, path, &vouched(), 1000);
        let ok = |seal: &Seal, by: &str, method: &Method, path: &str, now: i64| {
            check(seal, by, method, path, Some(&value), now)
        };
        assert_eq!(ok(&seal, "n1", &Method::GET, path, 1005), Ok(vouched()));
        let rotated = Seal::from_secrets(b"next", &[b"cluster"]);
        assert_eq!(ok(&rotated, "n1", &Method::GET, path, 1005), Ok(vouched()));
        let other = Seal::from_secrets(b"other", &[]);
        assert!(ok(&other, "n1", &Method::GET, path, 1005).is_err());
        assert!(ok(&seal, "n3", &Method::GET, path, 1005).is_err());
        assert!(ok(&seal, "n1", &Method::POST, path, 1005).is_err());
        assert!(ok(&seal, "n1", &Method::GET, "/client/?hub=chat&id=x.n2", 1005).is_err());
        assert!(ok(&seal, "n1", &Method::GET, path, 1011).is_err());
        assert!(ok(&seal, "n1", &Method::GET, path, 970).is_err());
        assert!(check(&seal, "n1", &Method::GET, path, None, 1000).is_err());
        let junk = HeaderValue::from_static("e30.AAAA");
        assert!(check(&seal, "n1", &Method::GET, path, Some(&junk), 1000).is_err());
    }
}
