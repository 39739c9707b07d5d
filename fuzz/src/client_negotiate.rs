//! Target `client_negotiate`: the client SDK's reading of negotiate answers
//! (`crates/client/src/connection/negotiate.rs`), through its public API against a scripted
//! HTTP server of the target: `switchyard_client::negotiate` (one request) and
//! `switchyard_client::connect` over long polling (redirects followed, then the transport
//! started).
//!
//! The knob picks the status (bits 0–1: 200, 200, 401, 500), which call (bit 2: `connect`),
//! the negotiate version asked for (bit 3: 0 or 1) and whether the third run's body ends at
//! the close (bit 4). The payload is the body of every negotiate answer, written whole, in
//! two chunks at the cut, and in two writes at the cut: all three runs must agree. `negotiate`
//! must read it as the SignalR rules say (checked against a reading of the JSON written here):
//! a non-200 status or an `error` is a negotiate error with that text, a body that is not JSON
//! or names `ProtocolVersion` or a redirect `url` is a protocol error, anything else is
//! negotiated with `connectionId`, `negotiateVersion`, the `id=` value (`connectionToken`
//! from version 1) and the transports as listed. `connect` goes through a proxy that is the
//! stub itself, so whatever URL a redirect names, every request stays on this machine (the
//! first three negotiates get the payload, later ones a 500 that ends a redirect loop): each
//! negotiate a POST to a `…/negotiate` URL with `negotiateVersion=1`, each
//! after a redirect carrying the redirect's token; a long poll only after an answer that
//! offers long polling with text, with the answer's `id=` value; no answer here completes a
//! handshake, so it always fails.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use switchyard_client::{ClientError, ConnectOptions, Negotiated, Transport};
use switchyard_hub_protocol::Format;

use crate::http_stub::{self, Framing, Reply, Seen};
use crate::Input;

const TOKEN: &str = "fuzz-token";
/// Real time a run may take (every answer comes at once; 100 redirects take well under it).
const STUCK: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, Debug)]
struct Setup {
    status: u16,
    follow: bool,
    version: u8,
    until_close: bool,
}

impl Setup {
    fn from_knob(knob: u8) -> Setup {
        Setup {
            status: [200, 200, 401, 500][usize::from(knob & 3)],
            follow: knob & 4 != 0,
            version: (knob >> 3) & 1,
            until_close: knob & 0x10 != 0,
        }
    }
}

/// What one run saw: the result as text (ids aside) and the requests made.
#[derive(Debug, PartialEq)]
struct Outcome {
    result: String,
    requests: Vec<String>,
}

fn describe(result: &Result<Negotiated, ClientError>) -> String {
    match result {
        Ok(n) => format!(
            "ok {} {:?} {} {} {:?} {:?} token {:?}",
            n.url, n.raw, n.version, n.connection_id, n.id_value, n.transfer_formats, n.token
        ),
        Err(error) => format!("error {error}"),
    }
}

/// Negotiates after the first few that get the payload: answered 500, which ends a redirect
/// loop (each run would otherwise make 100 requests: too slow to fuzz, and the bound itself
/// is one loop counter).
const PAYLOAD_ANSWERS: usize = 3;

fn answer(setup: Setup, body: Arc<Vec<u8>>, framing: Framing) -> http_stub::Script {
    let negotiates = std::sync::atomic::AtomicUsize::new(0);
    Arc::new(move |seen: &Seen| {
        let negotiate = seen.line.starts_with("POST ") && seen.target().contains("/negotiate");
        let nth = match negotiate {
            true => negotiates.fetch_add(1, std::sync::atomic::Ordering::SeqCst),
            false => usize::MAX,
        };
        match (negotiate, nth < PAYLOAD_ANSWERS) {
            (true, true) => Reply {
                status: setup.status,
                headers: vec![("content-type", "application/json".into())],
                body: body.to_vec(),
                framing,
            },
            (true, false) => Reply {
                status: 500,
                headers: Vec::new(),
                body: b"enough redirects".to_vec(),
                framing: Framing::Whole,
            },
            (false, _) => Reply {
                status: 404,
                headers: Vec::new(),
                body: Vec::new(),
                framing: Framing::Whole,
            },
        }
    })
}

async fn one(setup: Setup, body: Arc<Vec<u8>>, framing: Framing) -> Outcome {
    let stub = http_stub::start(answer(setup, body, framing)).await;
    let base = format!("http://127.0.0.1:{}/client/?hub=chat", stub.port);
    let result = if setup.follow {
        let proxy =
            reqwest::Proxy::all(format!("http://127.0.0.1:{}", stub.port)).expect("a proxy URL");
        let http = reqwest::Client::builder()
            .proxy(proxy)
            .build()
            .expect("an HTTP client");
        let mut options = ConnectOptions::new(Transport::LongPolling, Format::Json);
        options.access_token = Some(TOKEN.into());
        options.http = Some(http);
        match switchyard_client::connect(&base, &options).await {
            Ok(_) => panic!("connected, though nothing here answers a handshake"),
            Err(error) => format!("error {error}"),
        }
    } else {
        describe(&switchyard_client::negotiate(&base, TOKEN, setup.version).await)
    };
    // Each run has its own port: it is written PORT so that runs compare.
    let port = format!(":{}", stub.port);
    let requests = stub
        .seen
        .lock()
        .iter()
        .map(|s| format!("{} {:?}", s.line, s.header("authorization")).replace(&port, ":PORT"))
        .collect();
    Outcome {
        result: result.replace(&port, ":PORT"),
        requests,
    }
}

fn run(setup: Setup, body: &[u8], framing: Framing) -> Outcome {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let body = Arc::new(body.to_vec());
    runtime.block_on(async {
        tokio::time::timeout(STUCK, one(setup, body, framing))
            .await
            .expect("the client got stuck")
    })
}

/// `negotiate`'s result as the rules read the body.
fn expected(setup: Setup, body: &[u8]) -> Result<(), String> {
    if setup.status != 200 {
        return Err(format!("status {}", setup.status));
    }
    let text = String::from_utf8_lossy(body);
    let Ok(raw) = serde_json::from_str::<Value>(&text) else {
        return Err("protocol".into());
    };
    if let Some(error) = raw.get("error").and_then(Value::as_str) {
        return Err(format!("error {error}"));
    }
    if raw.get("ProtocolVersion").is_some() || raw.get("url").and_then(Value::as_str).is_some() {
        return Err("protocol".into());
    }
    Ok(())
}

fn check_negotiate(setup: Setup, body: &[u8]) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let body_copy = Arc::new(body.to_vec());
    let result = runtime.block_on(async {
        let stub = http_stub::start(answer(setup, body_copy, Framing::Whole)).await;
        let base = format!("http://127.0.0.1:{}/client/?hub=chat", stub.port);
        let result = switchyard_client::negotiate(&base, TOKEN, setup.version).await;
        let seen = stub.seen.lock().clone();
        assert_eq!(seen.len(), 1, "one negotiate request");
        let wanted = match setup.version {
            0 => "/client/negotiate?hub=chat HTTP/1.1".to_string(),
            v => format!("/client/negotiate?hub=chat&negotiateVersion={v} HTTP/1.1"),
        };
        assert_eq!(seen[0].line, format!("POST {wanted}"));
        assert_eq!(
            seen[0].header("authorization"),
            Some(format!("Bearer {TOKEN}").as_str())
        );
        result
    });
    match (expected(setup, body), result) {
        (Ok(()), Ok(n)) => {
            let raw: Value =
                serde_json::from_str(&String::from_utf8_lossy(body)).expect("parsed above");
            assert_eq!(n.raw, raw);
            let id = raw["connectionId"].as_str().unwrap_or_default();
            let version = raw["negotiateVersion"].as_i64().unwrap_or(0);
            assert_eq!(n.connection_id, id);
            assert_eq!(n.version, version);
            let id_value = match raw.get("connectionToken").and_then(Value::as_str) {
                Some(token) if version >= 1 => token,
                _ => id,
            };
            assert_eq!(n.id_value, id_value);
            let listed: Vec<&str> = raw["availableTransports"]
                .as_array()
                .map(|list| {
                    list.iter()
                        .filter_map(|t| t["transport"].as_str())
                        .collect()
                })
                .unwrap_or_default();
            assert_eq!(n.transports, listed);
            assert_eq!(n.token.as_deref(), Some(TOKEN));
        }
        (Err(want), Err(ClientError::Negotiate { status, body: text })) => {
            if setup.status != 200 {
                assert_eq!(want, format!("status {status}"));
                assert_eq!(text, String::from_utf8_lossy(body));
            } else {
                assert_eq!(want, format!("error {text}"));
            }
        }
        (Err(want), Err(ClientError::Protocol(_))) => assert_eq!(want, "protocol"),
        (want, got) => panic!("expected {want:?}, got {}", describe(&got)),
    }
}

/// The requests `connect` made: negotiates (at most the stub's three answers and the 500 after them, each with the version and the token
/// the last redirect gave), then at most one long poll with the id the answer gave.
fn check_connect(outcome: &Outcome, body: &[u8]) {
    let raw: Option<Value> = serde_json::from_str(&String::from_utf8_lossy(body)).ok();
    let redirect_token = raw
        .as_ref()
        .and_then(|r| r.get("accessToken"))
        .and_then(Value::as_str);
    assert!(
        outcome.requests.len() <= PAYLOAD_ANSWERS + 2,
        "{} requests",
        outcome.requests.len()
    );
    for (n, request) in outcome.requests.iter().enumerate() {
        if request.starts_with("POST ") {
            assert!(request.contains("/negotiate"), "{request}");
            assert_eq!(
                request.matches("negotiateVersion=1").count(),
                1,
                "{request}"
            );
            // The first negotiate carries the caller's token; later ones the redirect's, if
            // it named one.
            let token = match (n, redirect_token) {
                (0, _) | (_, None) => TOKEN,
                (_, Some(token)) => token,
            };
            assert!(
                request.ends_with(&format!("{:?}", Some(format!("Bearer {token}")))),
                "{request} (token {token})"
            );
        } else {
            // The long poll, or the proxy CONNECT of a redirect to https: the last request.
            assert!(
                request.starts_with("GET ") || request.starts_with("CONNECT "),
                "{request}"
            );
            assert_eq!(
                n + 1,
                outcome.requests.len(),
                "{request} is not the last request"
            );
        }
    }
}

pub fn check(data: &[u8]) {
    let input = Input::parse(data);
    let setup = Setup::from_knob(input.knob);
    let body = input.payload;
    if !setup.follow {
        check_negotiate(setup, body);
    }
    let whole = run(setup, body, Framing::Whole);
    let chunked = run(setup, body, Framing::Chunked(input.cut));
    assert_eq!(whole.result, chunked.result, "whole vs two chunks");
    assert_eq!(whole.requests.len(), chunked.requests.len());
    let third = if setup.until_close {
        Framing::UntilClose(input.cut)
    } else {
        Framing::Halves(input.cut)
    };
    let other = run(setup, body, third);
    assert_eq!(whole.result, other.result, "whole vs {third:?}");
    if setup.follow {
        check_connect(&whole, body);
    }
}
