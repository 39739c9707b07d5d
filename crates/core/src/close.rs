//! Why a connection ended. Reasons are data with stable codes so logs, metrics and
//! tests can tell a bad client from a slow one from an operator action.

use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CloseReason {
    /// The client closed (Close message, WebSocket close, DELETE, stream ended).
    ClientClosed,
    /// The outbound queue passed its byte budget: the client reads too slowly.
    SlowConsumer { pending_bytes: usize, budget: usize },
    /// No message or ping from a client that pings, within the client timeout.
    ClientTimeout,
    /// The handshake did not complete in time.
    HandshakeTimeout,
    /// The client broke the protocol; the text says how.
    ProtocolError(String),
    /// The socket failed under the connection (reset, broken pipe, TLS or other IO error,
    /// or the peer vanished without a close): a network or client crash, not a protocol
    /// violation. The text is the error.
    SocketError(String),
    /// A message from the client was larger than the configured maximum
    /// (`limits.max_client_message_size`, in bytes).
    MessageTooLarge { limit: usize },
    /// The access token expired (`asrs.s.coae`).
    AuthExpired,
    /// Closed through the REST API or by an app server; the text is the caller's reason.
    ClosedByApi(Option<String>),
    /// A client invoked a hub method in serverless mode with nowhere to send it.
    InvocationNotSupported,
    /// A long-polling connection stopped polling, or a negotiated connection never connected.
    Inactive,
    /// The service is shutting down.
    ServiceShutdown,
    /// Default mode: the app-server connection carrying this client went away.
    AppServerGone,
    /// Default mode: the app server does not read its connection, and this client's message
    /// would have overflowed the connection's queue.
    AppServerBusy,
}

impl CloseReason {
    /// Stable machine-readable code for logs and metrics labels.
    pub fn code(&self) -> &'static str {
        match self {
            CloseReason::ClientClosed => "client_closed",
            CloseReason::SlowConsumer { .. } => "slow_consumer",
            CloseReason::ClientTimeout => "client_timeout",
            CloseReason::HandshakeTimeout => "handshake_timeout",
            CloseReason::ProtocolError(_) => "protocol_error",
            CloseReason::SocketError(_) => "socket_error",
            CloseReason::MessageTooLarge { .. } => "message_too_large",
            CloseReason::AuthExpired => "auth_expired",
            CloseReason::ClosedByApi(_) => "closed_by_api",
            CloseReason::InvocationNotSupported => "invocation_not_supported",
            CloseReason::Inactive => "inactive",
            CloseReason::ServiceShutdown => "service_shutdown",
            CloseReason::AppServerGone => "app_server_gone",
            CloseReason::AppServerBusy => "app_server_busy",
        }
    }

    /// The `error` text of the hub Close message sent to the client, if any.
    pub fn close_error(&self) -> Option<String> {
        match self {
            CloseReason::ClientClosed | CloseReason::Inactive => None,
            CloseReason::ClosedByApi(reason) => reason.clone(),
            other => Some(format!("Connection closed with an error. {other}")),
        }
    }

    /// Whether the client may reconnect (`allowReconnect` of the Close message).
    pub fn allow_reconnect(&self) -> bool {
        match self {
            CloseReason::ClientClosed
            | CloseReason::ProtocolError(_)
            | CloseReason::MessageTooLarge { .. }
            | CloseReason::InvocationNotSupported
            | CloseReason::Inactive => false,
            CloseReason::SlowConsumer { .. }
            | CloseReason::SocketError(_)
            | CloseReason::ClientTimeout
            | CloseReason::HandshakeTimeout
            | CloseReason::AuthExpired
            | CloseReason::ClosedByApi(_)
            | CloseReason::ServiceShutdown
            | CloseReason::AppServerGone
            | CloseReason::AppServerBusy => true,
        }
    }
}

impl fmt::Display for CloseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CloseReason::ClientClosed => f.write_str("client closed the connection"),
            CloseReason::SlowConsumer {
                pending_bytes,
                budget,
            } => write!(
                f,
                "slow consumer: {pending_bytes} bytes pending exceeds the outbound budget of {budget} bytes"
            ),
            CloseReason::ClientTimeout => f.write_str(
                "client timeout: no message or ping received within the client timeout",
            ),
            CloseReason::HandshakeTimeout => f.write_str("handshake was not completed in time"),
            CloseReason::ProtocolError(text) => write!(f, "protocol error: {text}"),
            CloseReason::SocketError(text) => write!(f, "socket error: {text}"),
            // ASP.NET Core's wording, which the client shows.
            CloseReason::MessageTooLarge { limit } => {
                write!(f, "The maximum message size of {limit}B was exceeded.")
            }
            CloseReason::AuthExpired => f.write_str("the access token expired"),
            CloseReason::ClosedByApi(Some(reason)) => write!(f, "closed by the API: {reason}"),
            CloseReason::ClosedByApi(None) => f.write_str("closed by the API"),
            CloseReason::InvocationNotSupported => f.write_str(
                "hub invocations from clients are not supported in serverless mode without an upstream",
            ),
            CloseReason::Inactive => f.write_str("connection inactive"),
            CloseReason::ServiceShutdown => f.write_str("the service is shutting down"),
            CloseReason::AppServerGone => {
                f.write_str("the app server connection carrying this client was lost")
            }
            CloseReason::AppServerBusy => f.write_str(
                "the app server is not reading its connection, whose queue this client's messages would overflow",
            ),
        }
    }
}
