//! What an invocation's upstream answer becomes for the client: the upstream's own framed
//! Completion, or one the service writes.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use switchyard_hub_protocol::{
    encode_completion, message_type, peek, CompletionResult, Format, FrameSplitter,
};

use super::request::{Answer, Failure};

/// The frame for the client, and the outcome label for metrics.
pub(crate) fn completion(
    format: Format,
    invocation_id: &str,
    answer: &Result<Answer, Failure>,
    timeout: Duration,
    max_response_size: usize,
) -> (Bytes, &'static str) {
    let error =
        |text: String| encode_completion(format, invocation_id, CompletionResult::Error(text));
    match answer {
        Ok(answer) if (200..300).contains(&answer.status) => {
            if answer.body.is_empty() {
                let frame = encode_completion(format, invocation_id, CompletionResult::Void);
                return (frame, "ok");
            }
            if is_completion_frame(format, invocation_id, &answer.body, max_response_size) {
                (answer.body.clone(), "ok")
            } else {
                let text = format!(
                    "Invocation failed, the upstream's response is not one framed completion \
                     message for this invocation in the {} protocol",
                    format.name()
                );
                (error(text), "invalid_response")
            }
        }
        Ok(answer) => (
            error(format!("Invocation failed, status code {}", answer.status)),
            "error_status",
        ),
        Err(failure) => {
            let text = match failure {
                Failure::Timeout => format!(
                    "Invocation failed, the upstream did not answer within {}",
                    humantime::format_duration(timeout)
                ),
                Failure::Unreachable(_) => "Invocation failed, the upstream could not be reached".into(),
                Failure::TooLarge => format!(
                    "Invocation failed, the upstream's response is larger than {max_response_size} bytes"
                ),
            };
            (error(text), failure.outcome())
        }
    }
}

/// Whether `body` is exactly one whole message in `format`'s framing, and a Completion of
/// this invocation (anything else would confuse the client).
fn is_completion_frame(format: Format, invocation_id: &str, body: &Bytes, max: usize) -> bool {
    let mut buffer = BytesMut::from(&body[..]);
    let Ok(Some(frame)) = FrameSplitter::new(format, max).next_frame(&mut buffer) else {
        return false;
    };
    if !buffer.is_empty() {
        return false;
    }
    peek(format, frame.body()).is_ok_and(|message| {
        message.message_type == message_type::COMPLETION
            && message.invocation_id.as_deref() == Some(invocation_id)
    })
}

/// The error completion for an invocation the service does not take.
pub(crate) fn refused(format: Format, invocation_id: &str, text: &str) -> Bytes {
    encode_completion(
        format,
        invocation_id,
        CompletionResult::Error(text.to_string()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const MAX: usize = 1 << 20;

    fn answer(status: u16, body: &[u8]) -> Result<Answer, Failure> {
        Ok(Answer {
            status,
            body: Bytes::copy_from_slice(body),
        })
    }

    fn reply(format: Format, answer: Result<Answer, Failure>) -> (Bytes, &'static str) {
        completion(format, "7", &answer, Duration::from_secs(2), MAX)
    }

    #[test]
    fn a_completion_frame_passes_as_is() {
        for format in [Format::Json, Format::MessagePack] {
            let frame = encode_completion(format, "7", CompletionResult::Value(json!(3)));
            let (out, outcome) = reply(format, answer(200, &frame));
            assert_eq!(out, frame);
            assert_eq!(outcome, "ok");
        }
    }

    #[test]
    fn empty_answers_are_empty_completions() {
        for status in [200, 204] {
            let (out, _) = reply(Format::Json, answer(status, b""));
            assert_eq!(&out[..], b"{\"type\":3,\"invocationId\":\"7\"}\x1e");
        }
    }

    #[test]
    fn everything_else_is_an_error_completion() {
        let text = |(out, _): (Bytes, &str)| String::from_utf8_lossy(&out).into_owned();
        assert!(text(reply(Format::Json, answer(500, b"oops")))
            .contains("Invocation failed, status code 500"));
        assert!(text(reply(Format::Json, Err(Failure::Timeout))).contains("within 2s"));
        assert!(
            text(reply(Format::Json, Err(Failure::Unreachable("x".into()))))
                .contains("could not be reached")
        );
        assert!(text(reply(Format::Json, Err(Failure::TooLarge))).contains("larger than"));
        // Not framed, two frames, wrong id, wrong type, wrong protocol.
        let good = encode_completion(Format::Json, "7", CompletionResult::Void);
        let mut two = good.to_vec();
        two.extend_from_slice(&good);
        for body in [
            &b"{\"type\":3,\"invocationId\":\"7\"}"[..],
            &two,
            &encode_completion(Format::Json, "8", CompletionResult::Void),
            b"{\"type\":6}\x1e",
            &encode_completion(Format::MessagePack, "7", CompletionResult::Void),
        ] {
            let (out, outcome) = reply(Format::Json, answer(200, body));
            assert_eq!(outcome, "invalid_response");
            assert!(String::from_utf8_lossy(&out).contains("not one framed completion"));
        }
    }
}
