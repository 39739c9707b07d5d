//! Typed errors. Their `Display` texts follow the wording of the ASP.NET Core reference
//! implementation where one exists, because they end up in client-visible Close messages.

/// A byte stream could not be split into hub messages. The connection must be closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// One message body is larger than the configured maximum.
    #[error("The maximum message size of {limit}B was exceeded.")]
    TooLarge {
        /// The configured maximum body size in bytes.
        limit: usize,
    },
    /// A MessagePack length prefix is longer than 5 bytes or larger than `i32::MAX`.
    #[error("Messages over 2GB in size are not supported.")]
    LengthPrefixTooLarge,
}

/// A single hub message body could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The body is not syntactically valid JSON (or not UTF-8).
    #[error("Error reading JSON: {0}")]
    Json(String),
    /// The JSON body is valid JSON but not an object.
    #[error("Unexpected JSON Token Type '{0}'. Expected a JSON Object.")]
    NotAnObject(&'static str),
    /// A required JSON property is absent.
    #[error("Missing required property '{0}'.")]
    MissingProperty(&'static str),
    /// A JSON property has the wrong JSON type.
    #[error("Expected '{property}' to be of type {expected}.")]
    WrongType {
        property: &'static str,
        expected: &'static str,
    },
    /// A number that must be an integer is fractional or out of range.
    #[error("Expected '{property}' to be an {range} integer.")]
    NotAnInteger {
        property: &'static str,
        range: &'static str,
    },
    /// A JSON header value is not a string.
    #[error("Expected header '{0}' to be of type String.")]
    HeaderNotString(String),
    /// A JSON completion carries both `error` and a non-null `result`.
    #[error("The 'error' and 'result' properties are mutually exclusive.")]
    ErrorAndResult,
    /// A MessagePack element is missing or has the wrong type.
    #[error("Reading '{field}' as {expected} failed.")]
    Read {
        field: String,
        expected: &'static str,
    },
    /// A MessagePack array or map header is missing or has the wrong type.
    #[error("Reading {kind} length for '{field}' failed.")]
    ReadLength {
        kind: &'static str,
        field: &'static str,
    },
    /// A MessagePack payload value (argument, item, result) is malformed.
    #[error("Reading '{field}' failed: {detail}")]
    Value { field: &'static str, detail: String },
    /// A header has an empty name.
    #[error("Null or empty key in header.")]
    EmptyHeaderKey,
    /// A message type that requires an invocation id has a null or empty one.
    #[error("Null or empty invocation ID for {0} message.")]
    EmptyInvocationId(&'static str),
    /// An invocation has a null or empty target.
    #[error("Null or empty target for {0} message.")]
    EmptyTarget(&'static str),
    /// A MessagePack completion has a result kind other than 1, 2 or 3.
    #[error("Invalid invocation result kind.")]
    InvalidResultKind(i64),
    /// The MessagePack array declares fewer elements than the message type requires.
    #[error("The message array has {0} element(s), fewer than its message type requires.")]
    TooFewElements(usize),
    /// Bytes follow the end of the MessagePack message.
    #[error("Unexpected {0} byte(s) after the end of the message.")]
    TrailingBytes(usize),
}

impl DecodeError {
    pub(crate) fn read(field: impl Into<String>, expected: &'static str) -> Self {
        DecodeError::Read {
            field: field.into(),
            expected,
        }
    }
}

/// The handshake could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    /// Malformed JSON, missing or mistyped fields. The text says what was wrong.
    #[error("{0}")]
    Malformed(String),
    /// More bytes than the limit arrived without a record separator.
    #[error("The handshake is larger than the maximum message size.")]
    TooLarge,
}
