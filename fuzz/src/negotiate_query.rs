//! Target `negotiate_query`: query strings as the client endpoint and the REST API parse them
//! (`Query::parse`; `get`, `all` and `count` matching keys in any ASCII case), the client
//! endpoint's bearer token (`Authorization`, else `access_token`), and
//! `POST /client/negotiate` plus a send and a delete on the connection it made.
//!
//! The payload is text cut in two: the query parser sees both pieces alone, joined with `&`
//! and whole; the first piece is also an `Authorization` value and the second the negotiate
//! query. The knob picks how the token is given and the method.

use serde_json::Value;
use switchyard_core::HubName;
use switchyard_node::fuzzing::{self, Call, QueryParams};
use switchyard_node::Config;

use crate::service_node::{node, percent_all, token};
use crate::{split_str, text, Input};

fn parse(query: &str) -> Option<QueryParams> {
    QueryParams::parse(&format!("/client/?{query}"))
}

/// `get`, `all` and `count` agree with the pairs, whatever the case of the key.
fn lookups(query: &QueryParams) {
    for (key, _) in query.pairs().iter().take(16) {
        let expected: Vec<&str> = query
            .pairs()
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v.as_str())
            .collect();
        assert_eq!(query.all(key), expected);
        assert_eq!(query.count(key), expected.len());
        assert_eq!(query.get(key), expected.first().copied());
        assert_eq!(query.get(&key.to_ascii_uppercase()), query.get(key));
        assert_eq!(query.get(&key.to_ascii_lowercase()), query.get(key));
    }
}

fn queries(whole: &str, first: &str, second: &str) {
    if let Some(query) = parse(whole) {
        lookups(&query);
    }
    // A fragment would end the query early; pieces with one are not comparable.
    if first.contains('#') || second.contains('#') {
        return;
    }
    if let (Some(a), Some(b), Some(joined)) = (
        parse(first),
        parse(second),
        parse(&format!("{first}&{second}")),
    ) {
        let mut pairs = a.pairs().to_vec();
        pairs.extend_from_slice(b.pairs());
        assert_eq!(joined.pairs(), &pairs[..], "a&b = a then b");
    }
}

/// A header value `HeaderValue::to_str` accepts: tab and visible ASCII.
fn header_text(bytes: &[u8]) -> Option<&str> {
    bytes
        .iter()
        .all(|&b| b == b'\t' || (0x20..0x7f).contains(&b))
        .then(|| std::str::from_utf8(bytes).expect("ASCII"))
}

fn bearer(header: &str, query_text: &str) {
    let Some(query) = parse(query_text) else {
        return;
    };
    let found = fuzzing::bearer_token(Some(header.as_bytes()), &query);
    // The header as the REST API reads it, then the query parameter.
    let from_header = header_text(header.as_bytes()).and_then(switchyard_auth::bearer_token);
    let expected = from_header
        .or_else(|| query.get("access_token").filter(|t| !t.is_empty()))
        .map(str::to_string);
    assert_eq!(
        found, expected,
        "bearer token of {header:?} / {query_text:?}"
    );
    if let Some(token) = from_header {
        assert!(!token.is_empty() && token.trim() == token);
    }
    assert_eq!(
        fuzzing::bearer_token(None, &query),
        query
            .get("access_token")
            .filter(|t| !t.is_empty())
            .map(str::to_string)
    );
}

fn negotiate(query_text: &str, raw_authorization: &str, knob: u8) {
    let Some(query) = parse(query_text) else {
        return;
    };
    let hub = query.get("hub").unwrap_or("").to_string();
    let valid_hub = query.count("hub") == 1 && HubName::new(&hub, None).is_ok();
    let aud = format!("http://localhost/client/?hub={}", percent_all(&hub));
    let signed = token(&aud);
    let mut uri = format!("/client/negotiate?{query_text}");
    let mut headers: Vec<(&str, &[u8])> = vec![("host", b"localhost")];
    let authorization = format!("Bearer {signed}");
    let how = knob & 3;
    match how {
        0 => headers.push(("authorization", authorization.as_bytes())),
        1 => uri.push_str(&format!("&access_token={signed}")),
        2 => {}
        _ => headers.push(("authorization", raw_authorization.as_bytes())),
    }
    let post = knob & 0x0c != 0x0c;
    let method: &[u8] = if post { b"POST" } else { b"GET" };
    let node = node(Config::default());
    let reply = match fuzzing::call(&node, method, &uri, &headers, &[]) {
        Call::Invalid => return,
        Call::Pending => panic!("negotiate did not answer at once"),
        Call::Done(reply) => reply,
    };
    assert!(reply.status < 500, "{reply:?}");
    if !post {
        assert_eq!(reply.status, 405);
        return;
    }
    if query.count("hub") != 1 {
        assert_eq!(reply.status, 400);
        assert_eq!(
            &reply.body[..],
            b"exactly one 'hub' query parameter is required"
        );
        return;
    }
    if !valid_hub {
        assert_eq!(reply.status, 400, "{reply:?}");
        return;
    }
    // The token we signed is the one the endpoint reads (header, else the first
    // access_token).
    let ours = match how {
        0 => true,
        1 => parse(uri.split_once('?').map_or("", |(_, q)| q))
            .and_then(|q| q.get("access_token").map(|t| t == signed))
            .unwrap_or(false),
        _ => false,
    };
    if ours {
        assert_eq!(reply.status, 200, "a valid token was refused: {reply:?}");
    }
    if reply.status != 200 {
        assert!(matches!(reply.status, 400 | 401), "{reply:?}");
        assert!(!reply.body.is_empty(), "an error without text");
        return;
    }
    let body: Value = serde_json::from_slice(&reply.body).expect("negotiate answers JSON");
    let requested = query.get("negotiateVersion");
    if let Some(error) = body.get("error") {
        assert!(error.as_str().is_some_and(|e| !e.is_empty()));
        let requested = requested.expect("an error only for a requested version");
        assert!(requested.parse::<i32>().map_or(true, |v| v < 0));
        assert_eq!(node.client_connection_count(), 0);
        return;
    }
    let version = requested.map_or(0, |v| v.parse::<i32>().expect("an integer version").min(1));
    assert_eq!(body["negotiateVersion"], Value::from(version));
    let id = body["connectionId"].as_str().expect("a connection id");
    let key = match body.get("connectionToken") {
        Some(token) => {
            assert_eq!(version, 1, "a connection token for version 0");
            token.as_str().expect("a string token")
        }
        None => {
            assert_eq!(version, 0, "no connection token for version 1");
            id
        }
    };
    assert_eq!(
        body["availableTransports"].as_array().map(Vec::len),
        Some(3)
    );
    assert_eq!(node.client_connection_count(), 1);

    // A send (the raw Authorization text as hub-protocol bytes) and a delete on it.
    let base = format!("/client/?hub={}&id={}", percent_all(&hub), percent_all(key));
    let auth: Vec<(&str, &[u8])> = vec![
        ("host", b"localhost"),
        ("authorization", authorization.as_bytes()),
    ];
    for (method, body) in [
        (&b"POST"[..], raw_authorization.as_bytes()),
        (b"DELETE", b""),
        (b"POST", b"{}"),
    ] {
        match fuzzing::call(&node, method, &base, &auth, &[body]) {
            Call::Done(reply) => assert!(reply.status < 500, "{reply:?}"),
            other => panic!(
                "{} on the client endpoint: {other:?}",
                String::from_utf8_lossy(method)
            ),
        }
    }
}

pub fn check(data: &[u8]) {
    let input = Input::parse(data);
    let whole = text(input.payload);
    let (first, second) = split_str(&whole, input.cut);
    queries(&whole, first, second);
    bearer(first, second);
    negotiate(second, first, input.knob);
}
