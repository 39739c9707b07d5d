//! The handshake: always a UTF-8 JSON object followed by the record separator, whatever hub
//! protocol is negotiated.
//!
//! Request `{"protocol":"json","version":1}`; success response `{}`; error response
//! `{"error":"…"}`. The first JSON value inside the record is read; anything after it inside
//! the record is ignored; unknown properties are skipped and a later duplicate wins.

use serde_json::Value;

use crate::error::HandshakeError;
use crate::json::{token_name, write_json};
use crate::RECORD_SEPARATOR;

/// The client's handshake request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandshakeRequest {
    /// The protocol name as sent (match it case-insensitively).
    pub protocol: String,
    /// The hub protocol version (1, or 2 with stateful reconnect).
    pub version: u32,
}

/// The success response: `{}` + RS.
pub const RESPONSE_OK: &[u8] = b"{}\x1e";

/// Parses the client's handshake from the start of `buf`.
///
/// `Ok(None)`: no record separator yet, more bytes needed. `Ok(Some((request, consumed)))`:
/// `consumed` counts the bytes up to and including the separator; bytes after it are
/// hub messages. `max_len` limits the JSON text (separator excluded): more than that without
/// a separator is [`HandshakeError::TooLarge`].
pub fn parse_request(
    buf: &[u8],
    max_len: usize,
) -> Result<Option<(HandshakeRequest, usize)>, HandshakeError> {
    let window = buf.len().min(max_len.saturating_add(1));
    let Some(end) = buf[..window].iter().position(|&b| b == RECORD_SEPARATOR) else {
        return if buf.len() > max_len {
            Err(HandshakeError::TooLarge)
        } else {
            Ok(None)
        };
    };
    let record = &buf[..end];
    let mut obj = first_object(record)?;
    let protocol = match obj.remove("protocol") {
        None => None,
        Some(Value::String(s)) => Some(s),
        Some(_) => return Err(malformed("Expected 'protocol' to be of type String.")),
    };
    let version = match obj.remove("version") {
        None => None,
        Some(Value::Number(n)) => Some(
            n.as_u64()
                .and_then(|v| u32::try_from(v).ok())
                .ok_or_else(|| malformed("Expected 'version' to be a non-negative integer."))?,
        ),
        Some(_) => return Err(malformed("Expected 'version' to be of type Number.")),
    };
    let missing = |name: &str| {
        HandshakeError::Malformed(format!(
            "Missing required property '{name}'. Message content: {}",
            String::from_utf8_lossy(record)
        ))
    };
    let protocol = protocol.ok_or_else(|| missing("protocol"))?;
    let version = version.ok_or_else(|| missing("version"))?;
    Ok(Some((HandshakeRequest { protocol, version }, end + 1)))
}

/// Encodes a handshake request: `{"protocol":"<name>","version":<v>}` + RS.
pub fn encode_request(protocol: &str, version: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(40);
    out.extend_from_slice(b"{\"protocol\":");
    write_json(&mut out, protocol);
    out.extend_from_slice(b",\"version\":");
    out.extend_from_slice(version.to_string().as_bytes());
    out.push(b'}');
    out.push(RECORD_SEPARATOR);
    out
}

/// Encodes an error response: `{"error":"<text>"}` + RS, JSON-escaped.
pub fn encode_error_response(error: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(error.len() + 12);
    out.extend_from_slice(b"{\"error\":");
    write_json(&mut out, error);
    out.push(b'}');
    out.push(RECORD_SEPARATOR);
    out
}

/// Parses the server's handshake response from the start of `buf` (client side).
///
/// `Ok(None)`: incomplete. `Ok(Some((error, consumed)))`: `error` is `None` on success.
/// A response with a `type` property is a hub message, not a handshake response, and is
/// rejected as the JS and .NET clients do.
pub fn parse_response(buf: &[u8]) -> Result<Option<(Option<String>, usize)>, HandshakeError> {
    let Some(end) = buf.iter().position(|&b| b == RECORD_SEPARATOR) else {
        return Ok(None);
    };
    let mut obj = first_object(&buf[..end])?;
    if obj.contains_key("type") {
        return Err(malformed("Expected a handshake response from the server."));
    }
    let error = match obj.remove("error") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s),
        Some(_) => return Err(malformed("Expected 'error' to be of type String.")),
    };
    Ok(Some((error, end + 1)))
}

fn malformed(text: &str) -> HandshakeError {
    HandshakeError::Malformed(text.to_owned())
}

/// Reads the first JSON value of the record, which must be an object.
fn first_object(record: &[u8]) -> Result<serde_json::Map<String, Value>, HandshakeError> {
    let first = serde_json::Deserializer::from_slice(record)
        .into_iter::<Value>()
        .next();
    match first {
        None => Err(malformed("The handshake message is empty.")),
        Some(Err(e)) => Err(HandshakeError::Malformed(format!(
            "Error reading JSON: {e}"
        ))),
        Some(Ok(Value::Object(obj))) => Ok(obj),
        Some(Ok(other)) => Err(HandshakeError::Malformed(format!(
            "Unexpected JSON Token Type '{}'. Expected a JSON Object.",
            token_name(&other)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_incomplete_then_complete_with_trailing_messages() {
        let full = b"{\"protocol\":\"messagepack\",\"version\":2}\x1e\x02\x91\x06";
        for cut in 0..full.len() - 3 {
            assert_eq!(parse_request(&full[..cut], 1024), Ok(None), "cut {cut}");
        }
        let (req, used) = parse_request(full, 1024).unwrap().unwrap();
        assert_eq!(req.protocol, "messagepack");
        assert_eq!(req.version, 2);
        assert_eq!(&full[used..], &[0x02, 0x91, 0x06]);
    }

    #[test]
    fn request_too_large() {
        let body = b"{\"protocol\":\"json\",\"version\":1}"; // 31 bytes
        let mut framed = body.to_vec();
        framed.push(RECORD_SEPARATOR);
        assert!(parse_request(&framed, 31).unwrap().is_some());
        assert_eq!(parse_request(&framed, 30), Err(HandshakeError::TooLarge));
        assert_eq!(parse_request(&body[..30], 30), Ok(None));
        assert_eq!(
            parse_request(&body[..31], 30),
            Err(HandshakeError::TooLarge)
        );
    }

    #[test]
    fn request_errors() {
        let err = |s: &[u8]| parse_request(s, 1024).unwrap_err().to_string();
        assert_eq!(
            err(b"{\"protocol\":\"json\",\"version\":-1}\x1e"),
            "Expected 'version' to be a non-negative integer."
        );
        assert!(err(b"{\"protocol\":\x1e").starts_with("Error reading JSON"));
        assert_eq!(err(b"\x1e"), "The handshake message is empty.");
    }

    #[test]
    fn encode_request_and_error_escape() {
        assert_eq!(
            encode_request("json", 1),
            b"{\"protocol\":\"json\",\"version\":1}\x1e"
        );
        assert_eq!(
            encode_error_response("a \"quoted\"\nline"),
            b"{\"error\":\"a \\\"quoted\\\"\\nline\"}\x1e"
        );
        let encoded = encode_error_response("x\"y");
        let (error, used) = parse_response(&encoded).unwrap().unwrap();
        assert_eq!(error.as_deref(), Some("x\"y"));
        assert_eq!(used, encoded.len());
    }

    #[test]
    fn response_with_type_is_rejected() {
        assert!(parse_response(b"{\"type\":6}\x1e").is_err());
        assert_eq!(parse_response(b"{}"), Ok(None));
        assert_eq!(parse_response(RESPONSE_OK), Ok(Some((None, 3))));
    }
}
