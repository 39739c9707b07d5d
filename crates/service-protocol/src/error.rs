//! Typed errors. Framing errors are fatal for the connection (the stream cannot be
//! resynchronised); a decode error concerns one message body only.

/// A byte stream could not be split into service messages. Close the connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The VarInt length prefix is longer than 5 bytes or announces more than `i32::MAX`
    /// bytes (the SDK's wording, which covers both cases).
    #[error("Messages over 2GB in size are not supported.")]
    LengthPrefixTooLarge,
    /// One message body is larger than the configured maximum.
    #[error("The message size of {size}B exceeds the maximum of {limit}B.")]
    TooLarge {
        /// The body length the prefix announced.
        size: usize,
        /// The configured maximum body size.
        limit: usize,
    },
}

/// One message body could not be decoded.
///
/// Texts name the message type and the field in the §1.5 spelling, e.g.
/// `message type 13 (GroupBroadcastData): expected string for groupName`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The body is empty.
    #[error("service message: empty body")]
    Empty,
    /// The body does not start with a MessagePack array header.
    #[error("service message: expected a MessagePack array")]
    NotAnArray,
    /// The array has no elements, so no message type.
    #[error("service message: empty array (no message type)")]
    EmptyArray,
    /// Element 0 is missing, truncated or not an int32.
    #[error("service message: expected an int32 message type id")]
    InvalidTypeId,
    /// The array is shorter than the oldest layout of its message type.
    #[error(
        "message type {type_id} ({message}): array has {len} element(s), expected at least {min}"
    )]
    TooFewElements {
        type_id: i32,
        message: &'static str,
        len: u32,
        min: u32,
    },
    /// One field could not be read.
    #[error("message type {type_id} ({message}): {}", .problem.describe(.field))]
    Field {
        type_id: i32,
        message: &'static str,
        /// The field name as spelled in the protocol description (`groupName`).
        field: &'static str,
        problem: FieldProblem,
    },
}

/// What was wrong with a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldProblem {
    /// A value of another MessagePack type is in its place (the text says which was expected).
    Expected(&'static str),
    /// The body ends inside the field.
    Truncated,
    /// A string is not valid UTF-8.
    InvalidUtf8,
    /// An integer does not fit the field's type (named).
    OutOfRange(&'static str),
    /// A value that had to be skipped nests deeper than [`MAX_SKIP_DEPTH`](crate::MAX_SKIP_DEPTH).
    TooDeep,
}

impl FieldProblem {
    fn describe(&self, field: &str) -> String {
        match self {
            FieldProblem::Expected(what) => format!("expected {what} for {field}"),
            FieldProblem::Truncated => format!("input ends inside {field}"),
            FieldProblem::InvalidUtf8 => format!("invalid UTF-8 in {field}"),
            FieldProblem::OutOfRange(what) => format!("{field} is out of range for {what}"),
            FieldProblem::TooDeep => {
                format!("{field} nests deeper than {} levels", crate::MAX_SKIP_DEPTH)
            }
        }
    }
}
