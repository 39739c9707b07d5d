//! Behaviour tests: verification, rotation, lifetimes, audiences,
//! connection strings and claim helpers.

use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use switchyard_auth::*;

const NOW: i64 = 1_700_000_000;
const KEY2: &str = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ012345";
const AUD: &str = "http://localhost/client/?hub=chat";

fn owned(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Sign an arbitrary header/payload pair with HS256.
fn raw_token(key: &str, header: &str, payload: &str) -> String {
    let signed = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header),
        URL_SAFE_NO_PAD.encode(payload)
    );
    let mut mac = Hmac::<Sha256>::new_from_slice(key.as_bytes()).unwrap();
    mac.update(signed.as_bytes());
    format!(
        "{signed}.{}",
        URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
    )
}

/// Sign already-encoded header and payload parts with HS256.
fn raw_token_parts(key: &str, header_b64: &str, payload_b64: &str) -> String {
    let signed = format!("{header_b64}.{payload_b64}");
    let mut mac = Hmac::<Sha256>::new_from_slice(key.as_bytes()).unwrap();
    mac.update(signed.as_bytes());
    format!(
        "{signed}.{}",
        URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
    )
}

const HS256: &str = r#"{"alg":"HS256","typ":"JWT"}"#;

fn emulator_keys() -> AccessKeys {
    AccessKeys::emulator()
}

fn any_aud(_: &str) -> bool {
    true
}

fn token_with(claims: &[(&str, &str)]) -> VerifiedToken {
    let token = issue_token(
        EMULATOR_ACCESS_KEY,
        AUD,
        &owned(claims),
        Duration::from_secs(3600),
        NOW,
    );
    verify_token(&token, &emulator_keys(), NOW, any_aud).unwrap()
}

// ---------------------------------------------------------------- keys

#[test]
fn access_keys_order_and_empties() {
    let keys = AccessKeys::new("a".into(), Some("b".into()));
    assert_eq!(keys.primary(), "a");
    assert_eq!(keys.secondary(), Some("b"));
    assert_eq!(keys.all().collect::<Vec<_>>(), ["a", "b"]);
    let keys = AccessKeys::new("a".into(), Some(String::new()));
    assert_eq!(keys.secondary(), None);
    assert_eq!(keys.all().count(), 1);
    let keys = AccessKeys::new(String::new(), None);
    assert_eq!(keys.all().count(), 0);
    assert!(!format!("{:?}", AccessKeys::emulator()).contains(EMULATOR_ACCESS_KEY));
}

#[test]
fn empty_key_never_verifies() {
    let token = issue_token("", AUD, &[], Duration::from_secs(60), NOW);
    let keys = AccessKeys::new(String::new(), None);
    assert_eq!(
        verify_token(&token, &keys, NOW, any_aud),
        Err(AuthError::BadSignature)
    );
}

#[test]
fn connection_tokens_are_22_chars_and_distinct() {
    let a = generate_connection_token();
    let b = generate_connection_token();
    assert_eq!(a.len(), 22);
    assert_eq!(URL_SAFE_NO_PAD.decode(&a).unwrap().len(), 16);
    assert!(a
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'));
    assert_ne!(a, b);
}

// ---------------------------------------------------------------- verify

#[test]
fn round_trip_preserves_claim_order_and_arrays() {
    let claims = owned(&[
        ("asrs.s.uid", "u1"),
        ("role", "admin"),
        ("name", "N"),
        ("role", "ops"),
    ]);
    let token = issue_token(
        EMULATOR_ACCESS_KEY,
        AUD,
        &claims,
        Duration::from_secs(60),
        NOW,
    );
    let v = verify_token(&token, &emulator_keys(), NOW, |a| a == AUD).unwrap();
    assert_eq!(
        v.claims,
        owned(&[
            ("asrs.s.uid", "u1"),
            ("role", "admin"),
            ("role", "ops"),
            ("name", "N"),
            ("nbf", "1700000000"),
            ("exp", "1700000060"),
            ("iat", "1700000000"),
            ("aud", AUD),
        ])
    );
    assert_eq!(v.expires_at, NOW + 60);
    assert_eq!(v.audiences, vec![AUD.to_owned()]);
    assert_eq!(v.claim_values("role").collect::<Vec<_>>(), ["admin", "ops"]);
}

#[test]
fn rotation_secondary_key_verifies() {
    let token = issue_token(KEY2, AUD, &[], Duration::from_secs(60), NOW);
    let both = AccessKeys::new(EMULATOR_ACCESS_KEY.into(), Some(KEY2.into()));
    let verified = verify_token(&token, &both, NOW, any_aud).unwrap();
    assert_eq!(verified.signed_with, SigningKey::Secondary);
    let by_primary = issue_token(EMULATOR_ACCESS_KEY, AUD, &[], Duration::from_secs(60), NOW);
    let verified = verify_token(&by_primary, &both, NOW, any_aud).unwrap();
    assert_eq!(verified.signed_with, SigningKey::Primary);
    let primary_only = emulator_keys();
    assert_eq!(
        verify_token(&token, &primary_only, NOW, any_aud),
        Err(AuthError::BadSignature)
    );
}

#[test]
fn hs384_and_hs512_accepted_kid_ignored() {
    for alg in [
        JwtAlgorithm::Hs256,
        JwtAlgorithm::Hs384,
        JwtAlgorithm::Hs512,
    ] {
        let token = TokenBuilder::new(AUD)
            .algorithm(alg)
            .key_id("whatever")
            .sign(EMULATOR_ACCESS_KEY, NOW);
        let v = verify_token(&token, &emulator_keys(), NOW, any_aud);
        assert!(v.is_ok(), "{alg:?}: {v:?}");
    }
}

#[test]
fn unsupported_algorithms_rejected() {
    for header in [
        r#"{"alg":"none","typ":"JWT"}"#,
        r#"{"alg":"RS256","typ":"JWT"}"#,
        r#"{"alg":"hs256","typ":"JWT"}"#,
        r#"{"typ":"JWT"}"#,
    ] {
        let token = raw_token(
            EMULATOR_ACCESS_KEY,
            header,
            &format!(r#"{{"exp":{},"aud":"{AUD}"}}"#, NOW + 60),
        );
        assert!(
            matches!(
                verify_token(&token, &emulator_keys(), NOW, any_aud),
                Err(AuthError::Malformed(_))
            ),
            "{header}"
        );
    }
}

#[test]
fn expired_token_rejected_with_leeway() {
    let token = issue_token(EMULATOR_ACCESS_KEY, AUD, &[], Duration::from_secs(60), NOW);
    let exp = NOW + 60;
    let keys = emulator_keys();
    assert!(verify_token(&token, &keys, exp, any_aud).is_ok());
    assert!(verify_token(&token, &keys, exp + EXPIRY_LEEWAY_SECS - 1, any_aud).is_ok());
    assert_eq!(
        verify_token(&token, &keys, exp + EXPIRY_LEEWAY_SECS, any_aud),
        Err(AuthError::Expired)
    );
    assert_eq!(
        verify_token(&token, &keys, exp + 3600, any_aud),
        Err(AuthError::Expired)
    );
}

#[test]
fn missing_exp_rejected() {
    let token = raw_token(
        EMULATOR_ACCESS_KEY,
        HS256,
        &format!(r#"{{"nameid":"x","nbf":{NOW},"aud":"{AUD}"}}"#),
    );
    let err = verify_token(&token, &emulator_keys(), NOW, any_aud).unwrap_err();
    assert_eq!(err, AuthError::MissingExpiry);
    assert!(err.to_string().contains("exp"));
}

#[test]
fn non_numeric_exp_is_malformed_but_string_number_ok() {
    let bad = raw_token(EMULATOR_ACCESS_KEY, HS256, r#"{"exp":"soon","aud":"a"}"#);
    assert!(matches!(
        verify_token(&bad, &emulator_keys(), NOW, any_aud),
        Err(AuthError::Malformed(_))
    ));
    let ok = raw_token(
        EMULATOR_ACCESS_KEY,
        HS256,
        &format!(r#"{{"exp":"{}","aud":"a"}}"#, NOW + 5),
    );
    assert_eq!(
        verify_token(&ok, &emulator_keys(), NOW, any_aud)
            .unwrap()
            .expires_at,
        NOW + 5
    );
}

#[test]
fn nbf_in_future_rejected() {
    let token = TokenBuilder::new(AUD).sign(EMULATOR_ACCESS_KEY, NOW);
    let keys = emulator_keys();
    // Issued on a clock slightly ahead of ours: tolerated.
    assert!(verify_token(&token, &keys, NOW - NOT_BEFORE_LEEWAY_SECS, any_aud).is_ok());
    assert_eq!(
        verify_token(&token, &keys, NOW - NOT_BEFORE_LEEWAY_SECS - 1, any_aud),
        Err(AuthError::NotYetValid)
    );
}

#[test]
fn forged_signature_rejected() {
    let token = issue_token(EMULATOR_ACCESS_KEY, AUD, &[], Duration::from_secs(60), NOW);
    let keys = emulator_keys();
    // Signed with another key.
    let other = issue_token(KEY2, AUD, &[], Duration::from_secs(60), NOW);
    assert_eq!(
        verify_token(&other, &keys, NOW, any_aud),
        Err(AuthError::BadSignature)
    );
    // Payload swapped (claims a different user) but signature kept.
    let parts: Vec<&str> = token.split('.').collect();
    let forged_payload = URL_SAFE_NO_PAD.encode(format!(
        r#"{{"asrs.s.uid":"admin","exp":{},"aud":"{AUD}"}}"#,
        NOW + 60
    ));
    let forged = format!("{}.{}.{}", parts[0], forged_payload, parts[2]);
    assert_eq!(
        verify_token(&forged, &keys, NOW, any_aud),
        Err(AuthError::BadSignature)
    );
    // Signature bit flipped.
    let mut sig = URL_SAFE_NO_PAD.decode(parts[2]).unwrap();
    sig[0] ^= 1;
    let flipped = format!("{}.{}.{}", parts[0], parts[1], URL_SAFE_NO_PAD.encode(sig));
    assert_eq!(
        verify_token(&flipped, &keys, NOW, any_aud),
        Err(AuthError::BadSignature)
    );
    // Signature removed.
    let stripped = format!("{}.{}.", parts[0], parts[1]);
    assert_eq!(
        verify_token(&stripped, &keys, NOW, any_aud),
        Err(AuthError::BadSignature)
    );
}

#[test]
fn malformed_tokens() {
    let keys = emulator_keys();
    for token in ["", "abc", "a.b", "a.b.c.d", "!!.@@.##", "e30.e30.%%%"] {
        assert!(
            matches!(
                verify_token(token, &keys, NOW, any_aud),
                Err(AuthError::Malformed(_))
            ),
            "{token:?}"
        );
    }
    // Correctly signed but the payload is not an object.
    let token = raw_token(EMULATOR_ACCESS_KEY, HS256, "[1,2]");
    assert!(matches!(
        verify_token(&token, &keys, NOW, any_aud),
        Err(AuthError::Malformed(_))
    ));
}

#[test]
fn too_long_rejected_but_8k_accepted() {
    let keys = emulator_keys();
    let huge = "a".repeat(MAX_TOKEN_LEN + 1);
    assert_eq!(
        verify_token(&huge, &keys, NOW, any_aud),
        Err(AuthError::TooLong)
    );
    // A legitimately large (over the SDK's 4 KiB) token still verifies.
    let token = TokenBuilder::new(AUD)
        .claim("big", "x".repeat(4000))
        .sign(EMULATOR_ACCESS_KEY, NOW);
    assert!(token.len() > SDK_MAX_TOKEN_LEN && token.len() <= MAX_TOKEN_LEN);
    assert!(verify_token(&token, &keys, NOW, any_aud).is_ok());
}

#[test]
fn wrong_audience_rejected() {
    let token = issue_token(EMULATOR_ACCESS_KEY, AUD, &[], Duration::from_secs(60), NOW);
    let target = RequestTarget {
        scheme: "http",
        host: "localhost:8888",
        path: "/client/",
        query: Some("hub=other"),
    };
    let err = verify_token(&token, &emulator_keys(), NOW, |a| {
        audience_matches(a, &target)
    })
    .unwrap_err();
    assert_eq!(
        err,
        AuthError::WrongAudience {
            found: vec![AUD.to_owned()]
        }
    );
    assert!(err.to_string().contains(AUD));
}

#[test]
fn missing_audience_rejected_unless_ignored() {
    let token = raw_token(
        EMULATOR_ACCESS_KEY,
        HS256,
        &format!(r#"{{"exp":{}}}"#, NOW + 60),
    );
    let keys = emulator_keys();
    assert_eq!(
        verify_token(&token, &keys, NOW, any_aud),
        Err(AuthError::WrongAudience { found: vec![] })
    );
    assert!(verify_token_ignoring_audience(&token, &keys, NOW).is_ok());
}

#[test]
fn audience_array_any_value_may_match() {
    let token = raw_token(
        EMULATOR_ACCESS_KEY,
        HS256,
        &format!(
            r#"{{"exp":{},"aud":["https://other.example/client/?hub=x","{AUD}"]}}"#,
            NOW + 60
        ),
    );
    let target = RequestTarget {
        scheme: "ws",
        host: "127.0.0.1:8888",
        path: "/client/",
        query: Some("hub=chat&id=abc"),
    };
    let v = verify_token(&token, &emulator_keys(), NOW, |a| {
        audience_matches(a, &target)
    })
    .unwrap();
    assert_eq!(v.audiences.len(), 2);
    assert_eq!(v.claim_values("aud").count(), 2);
    // A non-string inside the array is malformed.
    let bad = raw_token(
        EMULATOR_ACCESS_KEY,
        HS256,
        &format!(r#"{{"exp":{},"aud":["{AUD}",5]}}"#, NOW + 60),
    );
    assert!(matches!(
        verify_token(&bad, &emulator_keys(), NOW, any_aud),
        Err(AuthError::Malformed(_))
    ));
}

#[test]
fn only_the_injected_clock_is_used() {
    // Far from the real clock in both directions: only `now_unix` counts.
    let keys = emulator_keys();
    let future = 4_000_000_000;
    let token = issue_token(
        EMULATOR_ACCESS_KEY,
        AUD,
        &[],
        Duration::from_secs(60),
        future,
    );
    assert!(verify_token(&token, &keys, future, any_aud).is_ok());
    assert_eq!(
        verify_token(&token, &keys, NOW, any_aud),
        Err(AuthError::NotYetValid)
    );
    let past = 1_000_000_000;
    let token = issue_token(EMULATOR_ACCESS_KEY, AUD, &[], Duration::from_secs(60), past);
    assert!(verify_token(&token, &keys, past + 1, any_aud).is_ok());
    assert_eq!(
        verify_token(&token, &keys, NOW, any_aud),
        Err(AuthError::Expired)
    );
}

#[test]
fn header_problems_are_malformed_even_without_keys() {
    let token = raw_token(
        EMULATOR_ACCESS_KEY,
        r#"{"alg":"ES256","typ":"JWT"}"#,
        &format!(r#"{{"exp":{},"aud":"{AUD}"}}"#, NOW + 60),
    );
    let no_keys = AccessKeys::new(String::new(), None);
    for keys in [&no_keys, &emulator_keys()] {
        let err = verify_token(&token, keys, NOW, any_aud).unwrap_err();
        assert!(
            matches!(&err, AuthError::Malformed(m) if m.contains("ES256")),
            "{err:?}"
        );
    }
    // A non-string `kid` is not a JOSE header.
    let token = raw_token(
        EMULATOR_ACCESS_KEY,
        r#"{"alg":"HS256","typ":"JWT","kid":5}"#,
        &format!(r#"{{"exp":{},"aud":"{AUD}"}}"#, NOW + 60),
    );
    assert!(matches!(
        verify_token(&token, &emulator_keys(), NOW, any_aud),
        Err(AuthError::Malformed(_))
    ));
}

#[test]
fn padded_or_ambiguous_tokens_are_malformed() {
    let keys = emulator_keys();
    // base64url in a JWT is unpadded (RFC 7515 §2).
    let padded = raw_token(
        EMULATOR_ACCESS_KEY,
        &format!("{HS256} "),
        &format!(r#"{{"exp":{},"aud":"{AUD}"}}"#, NOW + 60),
    );
    let parts: Vec<&str> = padded.split('.').collect();
    assert_eq!(URL_SAFE_NO_PAD.decode(parts[0]).unwrap().len() % 3, 1);
    let with_padding = raw_token_parts(EMULATOR_ACCESS_KEY, &format!("{}==", parts[0]), parts[1]);
    assert!(matches!(
        verify_token(&with_padding, &keys, NOW, any_aud),
        Err(AuthError::Malformed(_))
    ));
    // A registered claim given twice is rejected rather than resolved.
    let twice = raw_token(
        EMULATOR_ACCESS_KEY,
        HS256,
        &format!(
            r#"{{"exp":{},"exp":{},"aud":"{AUD}"}}"#,
            NOW - 3600,
            NOW + 60
        ),
    );
    assert!(matches!(
        verify_token(&twice, &keys, NOW, any_aud),
        Err(AuthError::Malformed(_))
    ));
}

#[test]
fn malformed_payload_behind_a_good_signature_is_malformed() {
    // The signature is checked first (with the secondary key here), then the
    // payload is parsed.
    let keys = AccessKeys::new(EMULATOR_ACCESS_KEY.into(), Some(KEY2.into()));
    let token = raw_token_parts(KEY2, &URL_SAFE_NO_PAD.encode(HS256), "e30!");
    assert!(matches!(
        verify_token(&token, &keys, NOW, any_aud),
        Err(AuthError::Malformed(_))
    ));
    // Under a key that does not match, it is a signature failure.
    assert_eq!(
        verify_token(&token, &emulator_keys(), NOW, any_aud),
        Err(AuthError::BadSignature)
    );
}

#[test]
fn error_messages_are_human_readable() {
    assert_eq!(AuthError::Expired.to_string(), "access token has expired");
    assert!(AuthError::TooLong.to_string().contains("8192"));
    assert!(AuthError::BadSignature.to_string().contains("signature"));
    assert!(AuthError::NotYetValid.to_string().contains("nbf"));
    assert_eq!(
        AuthError::WrongAudience { found: vec![] }.to_string(),
        "access token has no 'aud' claim"
    );
}

// ---------------------------------------------------------------- audiences

struct Case {
    aud: &'static str,
    scheme: &'static str,
    host: &'static str,
    path: &'static str,
    query: Option<&'static str>,
    expect: bool,
    why: &'static str,
}

#[test]
fn audience_table() {
    #[rustfmt::skip]
    let cases = [
        Case { aud: "http://localhost/client/?hub=chat", scheme: "http", host: "localhost:8888", path: "/client/", query: Some("hub=chat"), expect: true, why: "aud without port, request with port" },
        Case { aud: "http://localhost:8888/client/?hub=chat", scheme: "http", host: "localhost", path: "/client/", query: Some("hub=chat"), expect: true, why: "aud with port, request without" },
        Case { aud: "http://localhost:8888/client/?hub=chat", scheme: "http", host: "localhost:8888", path: "/client/", query: Some("hub=chat&asrs.op=%2Fchat&id=x"), expect: true, why: "extra request query" },
        Case { aud: "http://localhost/client/?hub=chat", scheme: "ws", host: "localhost:8888", path: "/client/", query: Some("hub=chat"), expect: true, why: "ws == http" },
        Case { aud: "https://x.example/client/?hub=chat", scheme: "wss", host: "x.example", path: "/client/", query: Some("hub=chat"), expect: true, why: "wss == https" },
        Case { aud: "https://x.example/client/?hub=chat", scheme: "http", host: "x.example", path: "/client/", query: Some("hub=chat"), expect: false, why: "https != http" },
        Case { aud: "HTTP://LOCALHOST/Client/?hub=Chat", scheme: "http", host: "LocalHost", path: "/client/", query: Some("hub=chat"), expect: true, why: "case-insensitive scheme/host/path/hub" },
        Case { aud: "http://localhost/client/?hub=chat", scheme: "http", host: "127.0.0.1:8888", path: "/client/", query: Some("hub=chat"), expect: true, why: "localhost == 127.0.0.1" },
        Case { aud: "http://127.0.0.1:8888/client/?hub=chat", scheme: "http", host: "[::1]:8888", path: "/client/", query: Some("hub=chat"), expect: true, why: "127.0.0.1 == [::1]" },
        Case { aud: "http://[::1]/client/?hub=chat", scheme: "http", host: "localhost", path: "/client/", query: Some("hub=chat"), expect: true, why: "[::1] == localhost" },
        Case { aud: "http://localhost/client/?hub=chat", scheme: "http", host: "example.com", path: "/client/", query: Some("hub=chat"), expect: false, why: "different host" },
        Case { aud: "http://a.example/client/?hub=chat", scheme: "http", host: "b.example", path: "/client/", query: Some("hub=chat"), expect: false, why: "different host (non-loopback)" },
        Case { aud: "http://localhost/client/?hub=chat", scheme: "http", host: "localhost", path: "/client/", query: Some("hub=chat2"), expect: false, why: "different hub" },
        Case { aud: "http://localhost/client/?hub=chat", scheme: "http", host: "localhost", path: "/client/", query: None, expect: false, why: "hub missing from request" },
        Case { aud: "http://localhost/client/?hub=chat", scheme: "http", host: "localhost", path: "/server/", query: Some("hub=chat"), expect: false, why: "different path" },
        Case { aud: "http://localhost/client/?hub=chat", scheme: "http", host: "localhost", path: "/client", query: Some("?hub=chat"), expect: true, why: "trailing slash and leading '?' ignored" },
        Case { aud: "https://x.example/api/v1/hubs/myhub", scheme: "https", host: "x.example", path: "/api/v1/hubs/myhub", query: None, expect: true, why: "REST doc form: no query" },
        Case { aud: "https://x.example/api/v1/hubs/myhub", scheme: "https", host: "x.example", path: "/api/v1/hubs/myhub/", query: Some("excluded=a"), expect: true, why: "no aud query matches any request query" },
        Case { aud: "https://x.example/api/v1/hubs/myhub", scheme: "https", host: "x.example", path: "/api/v1/hubs/myhub/users/u1", query: None, expect: false, why: "REST path differs" },
        Case { aud: "http://localhost/api/hubs/chat/:send?api-version=2022-06-01", scheme: "http", host: "localhost:8888", path: "/api/hubs/chat/:send", query: Some("api-version=2022-06-01"), expect: true, why: "Management SDK aud" },
        Case { aud: "http://localhost/api/hubs/chat/groups/g1/:send?application=app&api-version=2022-06-01", scheme: "http", host: "localhost:8888", path: "/api/hubs/chat/groups/g1/:send", query: Some("excluded=c1&api-version=2022-06-01&excluded=c2&application=APP"), expect: true, why: "SDK query is a subset (order, excluded, case)" },
        Case { aud: "http://localhost/api/hubs/chat/:send?api-version=2022-06-01&application=app", scheme: "http", host: "localhost", path: "/api/hubs/chat/:send", query: Some("api-version=2022-06-01"), expect: false, why: "application missing from request" },
        Case { aud: "http://localhost/api/hubs/chat/:send?api-version=2022-06-01", scheme: "http", host: "localhost", path: "/api/hubs/chat/:send", query: Some("api-version=2024-12-01"), expect: false, why: "different api-version" },
        Case { aud: "http://localhost/api/hubs/chat/users/a%20b?api-version=2022-06-01", scheme: "http", host: "localhost", path: "/api/hubs/chat/users/a b", query: Some("api-version=2022-06-01"), expect: true, why: "percent-decoded path" },
        Case { aud: "http://localhost/client/?hub=chat&asrs.op=%2Fchat", scheme: "http", host: "localhost", path: "/client/", query: Some("asrs.op=/chat&hub=chat"), expect: true, why: "percent-decoded query values" },
        Case { aud: "http://localhost/client/?x=Abc", scheme: "http", host: "localhost", path: "/client/", query: Some("x=abc"), expect: false, why: "other query values are case-sensitive" },
        Case { aud: "not a url", scheme: "http", host: "localhost", path: "/client/", query: Some("hub=chat"), expect: false, why: "unparseable aud" },
        Case { aud: "/client/?hub=chat", scheme: "http", host: "localhost", path: "/client/", query: Some("hub=chat"), expect: false, why: "relative aud" },
        Case { aud: "http://localhost/client/?hub=chat", scheme: "http", host: "", path: "/client/", query: Some("hub=chat"), expect: false, why: "no Host header" },
    ];
    for c in &cases {
        let target = RequestTarget {
            scheme: c.scheme,
            host: c.host,
            path: c.path,
            query: c.query,
        };
        assert_eq!(
            audience_matches(c.aud, &target),
            c.expect,
            "{}: aud={} target={target:?}",
            c.why,
            c.aud
        );
    }
}

#[test]
fn client_and_server_audience_strings() {
    let base = url::Url::parse("http://127.0.0.1:8888/").unwrap();
    assert_eq!(
        client_audience(&base, "Chat"),
        "http://127.0.0.1:8888/client/?hub=chat"
    );
    assert_eq!(
        server_audience(&base, "App_Chat"),
        "http://127.0.0.1:8888/server/?hub=app_chat"
    );
    let base = url::Url::parse("https://x.example:443/sub/").unwrap();
    assert_eq!(
        client_audience(&base, "chat"),
        "https://x.example/client/?hub=chat"
    );
    // The audience we issue matches the connect request it is meant for.
    let aud = client_audience(&url::Url::parse("http://localhost:8888").unwrap(), "Chat");
    let target = RequestTarget {
        scheme: "ws",
        host: "localhost:8888",
        path: "/client/",
        query: Some("hub=Chat&id=tok"),
    };
    assert!(audience_matches(&aud, &target));
}

// ---------------------------------------------------------------- connection strings

#[test]
fn connection_string_emulator_form() {
    let cs: ConnectionString =
        "Endpoint=http://localhost;Port=8888;AccessKey=ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789ABCDEFGH;Version=1.0;"
            .parse()
            .unwrap();
    assert_eq!(cs.endpoint.as_str(), "http://localhost/");
    assert_eq!(cs.port, Some(8888));
    assert_eq!(cs.access_key.as_deref(), Some(EMULATOR_ACCESS_KEY));
    assert_eq!(cs.version.as_deref(), Some("1.0"));
    assert_eq!(cs.client_endpoint, None);
    assert_eq!(cs.server_endpoint, None);
    assert_eq!(cs.base_url().as_str(), "http://localhost:8888/");
    assert_eq!(cs.client_base_url().as_str(), "http://localhost:8888/");
    assert_eq!(
        cs.base_url().join("client/").unwrap().as_str(),
        "http://localhost:8888/client/"
    );
    assert!(!format!("{cs:?}").contains(EMULATOR_ACCESS_KEY));
}

#[test]
fn connection_string_round_trip() {
    let text =
        format!("Endpoint=http://127.0.0.1;Port=8888;AccessKey={EMULATOR_ACCESS_KEY};Version=1.0;");
    let cs: ConnectionString = text.parse().unwrap();
    assert_eq!(cs.to_string(), text);
    let text = "Endpoint=https://x.example/sub;AccessKey=k==;Version=1.0;ClientEndpoint=https://c.example;ServerEndpoint=https://s.example:8443;";
    let cs: ConnectionString = text.parse().unwrap();
    assert_eq!(cs.to_string(), text);
    assert_eq!(cs.to_string().parse::<ConnectionString>().unwrap(), cs);
    assert_eq!(cs.base_url().as_str(), "https://x.example/sub/");
    assert_eq!(cs.client_base_url().as_str(), "https://c.example/");
    assert_eq!(cs.server_base_url().as_str(), "https://s.example:8443/");
}

#[test]
fn connection_string_lenient_syntax() {
    // Case-insensitive keys, trimmed keys/values, empty segments, '=' in
    // values, trailing '/' trimmed, unknown keys ignored, no trailing ';'.
    let cs: ConnectionString =
        " endpoint = https://X.service.signalr.net/ ;;  ACCESSKEY=abc=def== ; authtype=aad;ClientId=123;TenantId=t;Version=1.0-preview"
            .parse()
            .unwrap();
    assert_eq!(cs.endpoint.as_str(), "https://x.service.signalr.net/");
    assert_eq!(cs.access_key.as_deref(), Some("abc=def=="));
    assert_eq!(cs.version.as_deref(), Some("1.0-preview"));
    assert_eq!(cs.port, None);
    assert_eq!(cs.base_url().as_str(), "https://x.service.signalr.net/");
    // AccessKey is optional (Entra ID connection strings).
    let cs: ConnectionString = "Endpoint=https://x.example;AuthType=azure.msi"
        .parse()
        .unwrap();
    assert_eq!(cs.access_key, None);
    // Port overrides an explicit endpoint port.
    let cs: ConnectionString = "Endpoint=http://h:1234;Port=5678".parse().unwrap();
    assert_eq!(cs.base_url().as_str(), "http://h:5678/");
}

#[test]
fn connection_string_errors() {
    use ConnectionStringError as E;
    let err = |s: &str| s.parse::<ConnectionString>().unwrap_err();
    assert_eq!(err(""), E::MissingEndpoint);
    assert_eq!(err("AccessKey=abc;Version=1.0"), E::MissingEndpoint);
    assert_eq!(err("Endpoint=;AccessKey=a"), E::MissingEndpoint);
    assert_eq!(
        err("Endpoint=http://a;endpoint=http://b"),
        E::DuplicateKey("endpoint".into())
    );
    assert_eq!(
        err("Endpoint=http://a;AccessKey=x;ACCESSKEY=y"),
        E::DuplicateKey("ACCESSKEY".into())
    );
    assert_eq!(
        err("Endpoint=http://a;garbage"),
        E::MalformedSegment { index: 2 }
    );
    assert_eq!(err("=x;Endpoint=http://a"), E::EmptyKey { index: 1 });
    assert_eq!(err("Endpoint=http://a;Port=0"), E::InvalidPort("0".into()));
    assert_eq!(
        err("Endpoint=http://a;Port=65536"),
        E::InvalidPort("65536".into())
    );
    assert_eq!(err("Endpoint=http://a;Port=x"), E::InvalidPort("x".into()));
    assert_eq!(
        err("Endpoint=http://a;Version=2.0"),
        E::InvalidVersion("2.0".into())
    );
    assert_eq!(
        err("Endpoint=http://a;Version=1"),
        E::InvalidVersion("1".into())
    );
    assert_eq!(err("Endpoint=http://a;AccessKey="), E::EmptyAccessKey);
    for bad in [
        "Endpoint=ftp://a",
        "Endpoint=ws://a",
        "Endpoint=localhost:8888",
        "Endpoint=not a url",
        "Endpoint=http://a/?x=1",
        "Endpoint=http://u:p@a/",
        "Endpoint=http://a;ClientEndpoint=ftp://c",
        "Endpoint=http://a;ServerEndpoint=nope",
    ] {
        assert!(
            matches!(err(bad), E::InvalidUrl { .. }),
            "{bad}: {:?}",
            err(bad)
        );
    }
    // Messages are clear and never echo the access key.
    let e = err("Endpoint=ftp://a;AccessKey=SECRET");
    assert_eq!(
        e.to_string(),
        "connection string Endpoint 'ftp://a' is invalid: scheme must be http or https, not 'ftp'"
    );
    assert!(!err("Endpoint=http://a;SECRET")
        .to_string()
        .contains("SECRET"));
    assert_eq!(
        err("Endpoint=http://a;Port=99999").to_string(),
        "connection string Port '99999' is invalid: expected an integer between 1 and 65535"
    );
}

// ---------------------------------------------------------------- claim helpers

#[test]
fn user_id_precedence() {
    assert_eq!(
        token_with(&[("sub", "s"), ("nameid", "n"), ("asrs.s.uid", "u")]).user_id(),
        Some("u")
    );
    assert_eq!(
        token_with(&[("sub", "s"), ("nameid", "n")]).user_id(),
        Some("n")
    );
    assert_eq!(token_with(&[("sub", "s")]).user_id(), Some("s"));
    assert_eq!(
        token_with(&[(
            "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/nameidentifier",
            "long"
        )])
        .user_id(),
        Some("long")
    );
    assert_eq!(
        token_with(&[("asrs.s.uid", ""), ("sub", "s")]).user_id(),
        Some("s")
    );
    assert_eq!(token_with(&[("name", "x")]).user_id(), None);
}

#[test]
fn claim_lookup() {
    let t = token_with(&[("a", "1"), ("b", "2"), ("a", "3")]);
    assert_eq!(t.claim("a"), Some("1"));
    assert_eq!(t.claim("b"), Some("2"));
    assert_eq!(t.claim("c"), None);
    assert_eq!(t.claim("exp"), Some("1700003600"));
}

#[test]
fn allowed_transports_helper() {
    assert_eq!(token_with(&[]).allowed_transports(), None);
    assert_eq!(
        token_with(&[("asrs.s.htt", "6")]).allowed_transports(),
        Some(6)
    );
    assert_eq!(
        token_with(&[("asrs.s.htt", "1")]).allowed_transports(),
        Some(transports::WEB_SOCKETS)
    );
    assert_eq!(
        token_with(&[("asrs.s.htt", "7")]).allowed_transports(),
        Some(transports::ALL)
    );
    for bad in ["0", "8", "15", "-1", "x", ""] {
        assert_eq!(
            token_with(&[("asrs.s.htt", bad)]).allowed_transports(),
            None,
            "{bad}"
        );
    }
}

#[test]
fn poll_interval_and_handshake_timeout_clamped() {
    assert_eq!(token_with(&[]).max_poll_interval_secs(), None);
    assert_eq!(
        token_with(&[("asrs.s.ttl", "20")]).max_poll_interval_secs(),
        Some(20)
    );
    assert_eq!(
        token_with(&[("asrs.s.ttl", "0")]).max_poll_interval_secs(),
        Some(1)
    );
    assert_eq!(
        token_with(&[("asrs.s.ttl", "1000")]).max_poll_interval_secs(),
        Some(300)
    );
    assert_eq!(
        token_with(&[("asrs.s.ttl", "abc")]).max_poll_interval_secs(),
        None
    );
    assert_eq!(token_with(&[]).handshake_timeout_secs(), None);
    assert_eq!(
        token_with(&[("asrs.s.cht", "10")]).handshake_timeout_secs(),
        Some(10)
    );
    assert_eq!(
        token_with(&[("asrs.s.cht", "-5")]).handshake_timeout_secs(),
        Some(1)
    );
    assert_eq!(
        token_with(&[("asrs.s.cht", "99")]).handshake_timeout_secs(),
        Some(30)
    );
}

#[test]
fn close_on_auth_expiry_helper() {
    assert_eq!(token_with(&[]).close_on_auth_expiry(), None);
    assert_eq!(
        token_with(&[("asrs.s.aeo", "1700000500")]).close_on_auth_expiry(),
        None
    );
    assert_eq!(
        token_with(&[("asrs.s.coae", "true"), ("asrs.s.aeo", "1700000500")]).close_on_auth_expiry(),
        Some(1_700_000_500)
    );
    assert_eq!(
        token_with(&[("asrs.s.coae", "True")]).close_on_auth_expiry(),
        Some(NOW + 3600)
    );
    assert_eq!(
        token_with(&[("asrs.s.coae", "false"), ("asrs.s.aeo", "1")]).close_on_auth_expiry(),
        None
    );
}

#[test]
fn numbers_and_bools_become_text() {
    let token = raw_token(
        EMULATOR_ACCESS_KEY,
        HS256,
        &format!(
            r#"{{"n":42,"f":1.5,"b":true,"z":null,"o":{{"k":1}},"exp":{}.0,"aud":"a"}}"#,
            NOW + 60
        ),
    );
    let v = verify_token(&token, &emulator_keys(), NOW, any_aud).unwrap();
    assert_eq!(v.claim("n"), Some("42"));
    assert_eq!(v.claim("f"), Some("1.5"));
    assert_eq!(v.claim("b"), Some("true"));
    assert_eq!(v.claim("z"), None);
    assert_eq!(v.claim("o"), Some(r#"{"k":1}"#));
    assert_eq!(v.expires_at, NOW + 60);
}
