//! Target `admin_hub`: what a dashboard page sends the admin hub (`/dashboard/hub`) after its
//! handshake — JSON hub messages, invocations of `SetFilter`, `CloseConnection`, `StartTrace`,
//! `WatchTrace`, `StopTrace` with any arguments — through the real session of a node of its
//! own.
//!
//! The payload is the text of WebSocket messages: sent as one message, and as two messages cut
//! at the cut, each run on a fresh node. Knob bit 0 puts a client in hub `chat` first (so
//! closes and the connection list find someone); bit 1 lets traces show payloads. Checked:
//! nothing panics; an invocation the session cannot take ends it with a non-empty error;
//! everything it sends back (completions and pushes, trace batches included) is whole JSON
//! hub messages with a record separator each; a completion answers an invocation id the
//! page sent.

use switchyard_hub_protocol::{json, HubMessage, RECORD_SEPARATOR};
use switchyard_node::config::Dashboard;
use switchyard_node::fuzzing::{AdminSession, ClientSession, SessionTransport};
use switchyard_node::Config;

use crate::service_node::node;
use crate::{split_str, text, Input};

pub fn check(data: &[u8]) {
    let input = Input::parse(data);
    let payload = text(input.payload);
    run(&input, &[&payload]);
    let (first, second) = split_str(&payload, input.cut);
    run(&input, &[first, second]);
}

/// Feeds `messages` to a fresh session, one WebSocket message each, until one ends it.
fn run(input: &Input<'_>, messages: &[&str]) {
    let node = node(Config {
        dashboard: Dashboard {
            trace_payloads: input.knob & 2 != 0,
            trace_preview_bytes: 16,
            ..Dashboard::default()
        },
        ..Config::default()
    });
    let _client = (input.knob & 1 != 0).then(|| {
        let client = ClientSession::open(&node, "chat", Some("ada"), SessionTransport::WebSockets)
            .expect("a client of a fresh node opens");
        client
            .receive(b"{\"protocol\":\"json\",\"version\":1}\x1e")
            .expect("a JSON handshake is taken");
        client
    });
    let mut session = AdminSession::open(&node);
    for message in messages {
        let Some(result) = session.receive(message) else {
            return;
        };
        match result {
            Ok(frames) => {
                for frame in &frames {
                    check_frame(frame, Some(message));
                }
            }
            Err(error) => {
                assert!(!error.is_empty(), "a session ends with a reason");
                return;
            }
        }
        for frame in session.trace_news() {
            check_frame(&frame, None);
        }
    }
}

/// One thing the session sends the page: a whole JSON hub message. A completion answers an
/// invocation id that appears in what the page sent (`sent`).
fn check_frame(frame: &str, sent: Option<&str>) {
    let body = frame
        .as_bytes()
        .strip_suffix(&[RECORD_SEPARATOR])
        .unwrap_or_else(|| panic!("no record separator at the end: {frame:?}"));
    assert!(
        !body.contains(&RECORD_SEPARATOR),
        "one message per frame: {frame:?}"
    );
    match json::decode(body) {
        Ok(HubMessage::Completion { invocation_id, .. }) => {
            let sent = sent.expect("completions answer the page's invocations");
            assert!(
                invocation_ids(sent).contains(&invocation_id),
                "a completion for an id the page never sent: {invocation_id:?}"
            );
        }
        Ok(HubMessage::Invocation {
            invocation_id: None,
            ..
        }) => {}
        Ok(other) => panic!("the admin hub sends completions and pushes only: {other:?}"),
        Err(error) => panic!("not a JSON hub message ({error}): {frame:?}"),
    }
}

/// The invocation ids of the messages in one WebSocket message of the page.
fn invocation_ids(sent: &str) -> Vec<String> {
    sent.as_bytes()
        .split(|&b| b == RECORD_SEPARATOR)
        .filter_map(|body| match json::decode(body) {
            Ok(HubMessage::Invocation {
                invocation_id: Some(id),
                ..
            }) => Some(id),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pages_calls_are_answered() {
        let calls = concat!(
            r#"{"type":1,"invocationId":"1","target":"SetFilter","arguments":[{"hub":"chat"}]}"#,
            "\u{1e}",
            r#"{"type":1,"invocationId":"2","target":"StartTrace","arguments":["chat",5]}"#,
            "\u{1e}",
            r#"{"type":1,"invocationId":"3","target":"CloseConnection","arguments":["chat","nobody",null]}"#,
            "\u{1e}",
            r#"{"type":6}"#,
            "\u{1e}",
            r#"{"type":1,"invocationId":"4","target":"StopTrace","arguments":["chat"]}"#,
            "\u{1e}",
        );
        for knob in 0..4 {
            check(&Input::encode(40, knob, calls.as_bytes()));
        }
        // Whole, every call is answered: the session really ran them.
        let node = node(Config::default());
        let mut session = AdminSession::open(&node);
        let frames = session
            .receive(calls)
            .expect("no waiting on a node of its own")
            .expect("the page's calls are taken");
        let ids: Vec<String> = frames
            .iter()
            .filter_map(
                |frame| match json::decode(frame.trim_end_matches('\u{1e}').as_bytes()) {
                    Ok(HubMessage::Completion { invocation_id, .. }) => Some(invocation_id),
                    _ => None,
                },
            )
            .collect();
        assert_eq!(ids, ["1", "2", "3", "4"]);
        let broken = session.receive(r#"{"type":1,"target":"SetFilter","arguments":[1]}"#);
        assert!(
            matches!(broken, Some(Ok(_))),
            "a non-blocking call with bad arguments is ignored"
        );
        let broken = session.receive("{not json");
        assert!(matches!(broken, Some(Err(_))), "bad JSON ends the session");
    }
}
