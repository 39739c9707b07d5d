//! Checks every `jwt-hs256` and `upstream-signature` vector of
//! `testdata/service-protocol.json`.

use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde_json::Value;
use switchyard_auth::{
    audience_matches, upstream_signature, verify_token, verify_upstream_signature, AccessKeys,
    AuthError, RequestTarget, TokenBuilder,
};

fn vectors(kind: &str) -> Vec<Value> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/service-protocol.json"
    );
    let text = std::fs::read_to_string(path).expect("read test vectors");
    let all: Vec<Value> = serde_json::from_str(&text).expect("parse test vectors");
    all.into_iter().filter(|v| v["kind"] == kind).collect()
}

fn field<'a>(v: &'a Value, name: &str) -> &'a str {
    v["fields"][name]
        .as_str()
        .unwrap_or_else(|| panic!("field {name}"))
}

#[test]
fn upstream_signature_vectors() {
    let vs = vectors("upstream-signature");
    assert_eq!(vs.len(), 3);
    for v in &vs {
        let name = v["name"].as_str().unwrap();
        let keys = AccessKeys::new(field(v, "access_key").to_owned(), None);
        let cid = field(v, "connection_id");
        let expected = v["expected_header"].as_str().unwrap();
        assert_eq!(upstream_signature(&keys, cid), expected, "{name}");
        assert_eq!(
            expected
                .strip_prefix("sha256=")
                .unwrap()
                .to_ascii_lowercase(),
            v["hex"].as_str().unwrap(),
            "{name}"
        );
        assert!(verify_upstream_signature(expected, &keys, cid), "{name}");
        assert!(
            verify_upstream_signature(&expected.to_ascii_lowercase(), &keys, cid),
            "{name}: hex compared case-insensitively"
        );
        assert!(
            !verify_upstream_signature(expected, &keys, "other"),
            "{name}"
        );
    }
}

#[test]
fn upstream_signature_two_keys_comma_joined() {
    let vs = vectors("upstream-signature");
    // Vectors 1 and 3 share the connection id "conn1" with different keys.
    let (a, b) = (&vs[0], &vs[2]);
    assert_eq!(field(a, "connection_id"), field(b, "connection_id"));
    let keys = AccessKeys::new(
        field(a, "access_key").to_owned(),
        Some(field(b, "access_key").to_owned()),
    );
    let header = upstream_signature(&keys, "conn1");
    assert_eq!(
        header,
        format!(
            "{},{}",
            a["expected_header"].as_str().unwrap(),
            b["expected_header"].as_str().unwrap()
        )
    );
    // A receiver that only knows the secondary key still accepts it.
    let only_b = AccessKeys::new(field(b, "access_key").to_owned(), None);
    assert!(verify_upstream_signature(&header, &only_b, "conn1"));
}

/// The vector's payload as `VerifiedToken::claims` gives it: every member
/// in order, strings as they are and numbers as their JSON text.
fn claims_of(payload: &serde_json::Map<String, Value>) -> Vec<(String, String)> {
    payload
        .iter()
        .map(|(k, v)| {
            let text = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (k.clone(), text)
        })
        .collect()
}

/// Our tokens are `jsonwebtoken`'s encoding, whose header lists `typ` before
/// `alg`, so the token bytes differ from the SDK's in the header (and so in
/// the signature). What must hold: the SDK's tokens verify with their claims
/// intact, our payload is byte-identical to the SDK's, and our header has
/// the same members.
#[test]
fn jwt_vectors() {
    let vs = vectors("jwt-hs256");
    assert_eq!(vs.len(), 2);
    for v in &vs {
        let name = v["name"].as_str().unwrap();
        let key = field(v, "access_key");
        let header_json = field(v, "header_json");
        let payload_json = field(v, "payload_json");
        let expected = v["expected_token"].as_str().unwrap();

        let header: Value = serde_json::from_str(header_json).unwrap();
        let payload: serde_json::Map<String, Value> = serde_json::from_str(payload_json).unwrap();
        let now = payload["iat"].as_i64().unwrap();
        assert_eq!(payload["nbf"].as_i64().unwrap(), now);
        let exp = payload["exp"].as_i64().unwrap();
        let aud = payload["aud"].as_str().unwrap();
        let claims: Vec<(String, String)> = payload
            .iter()
            .filter(|(k, _)| !["nbf", "exp", "iat", "aud"].contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
            .collect();

        // The SDK's token decodes to the vector's JSON.
        let parts: Vec<&str> = expected.split('.').collect();
        assert_eq!(
            URL_SAFE_NO_PAD.decode(parts[0]).unwrap(),
            header_json.as_bytes()
        );
        assert_eq!(
            URL_SAFE_NO_PAD.decode(parts[1]).unwrap(),
            payload_json.as_bytes()
        );

        // It verifies, with the audience rule applied to the URL the audience
        // names (with a port and extra query, as a real request would have),
        // and its claims come back whole and in order.
        let url = url::Url::parse(aud).unwrap();
        let query = format!("{}&extra=1", url.query().unwrap());
        let target = RequestTarget {
            scheme: url.scheme(),
            host: "localhost:8888",
            path: url.path(),
            query: Some(&query),
        };
        let keys = AccessKeys::new(key.to_owned(), None);
        let verified = verify_token(expected, &keys, now + 10, |a| audience_matches(a, &target))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(verified.expires_at, exp, "{name}");
        assert_eq!(verified.audiences, vec![aud.to_owned()], "{name}");
        assert_eq!(verified.claims, claims_of(&payload), "{name}");
        assert_eq!(verified.claim("exp"), Some(exp.to_string().as_str()));
        // Under another key it does not.
        let other = AccessKeys::new("another key".to_owned(), None);
        assert_eq!(
            verify_token(expected, &other, now + 10, |_| true),
            Err(AuthError::BadSignature),
            "{name}"
        );

        // What we issue for the same claims: the SDK's payload bytes, the
        // SDK's header members.
        let builder = TokenBuilder::new(aud)
            .claims(claims.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .key_id(header["kid"].as_str().unwrap())
            .lifetime(Duration::from_secs((exp - now) as u64));
        assert_eq!(builder.payload_json(now), payload_json, "{name}");
        let token = builder.sign(key, now);
        let ours: Vec<&str> = token.split('.').collect();
        assert_eq!(ours.len(), 3, "{name}");
        assert_eq!(ours[1], parts[1], "{name}: payload segment");
        let our_header = URL_SAFE_NO_PAD.decode(ours[0]).unwrap();
        assert_eq!(our_header, builder.header_json().as_bytes(), "{name}");
        assert_eq!(
            serde_json::from_slice::<Value>(&our_header).unwrap(),
            header,
            "{name}: same header members"
        );
        // And it verifies to the same claims.
        let ours_verified = verify_token(&token, &keys, now + 10, |a| audience_matches(a, &target))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(ours_verified, verified, "{name}");
    }
}

#[test]
fn jwt_vector_user_ids() {
    let vs = vectors("jwt-hs256");
    let keys = AccessKeys::emulator();
    let ids: Vec<Option<String>> = vs
        .iter()
        .map(|v| {
            let token = v["expected_token"].as_str().unwrap();
            verify_token(token, &keys, 1_700_000_001, |_| true)
                .unwrap()
                .user_id()
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(
        ids,
        vec![Some("user1".to_owned()), Some("server1".to_owned())]
    );
}
