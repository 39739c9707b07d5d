//! Errors of the app-server peer.

/// Starting or talking to the service failed.
#[derive(Debug, thiserror::Error)]
pub enum AppServerError {
    #[error("the connection string has no AccessKey (Entra ID is not supported)")]
    NoAccessKey,
    #[error("no hubs configured")]
    NoHubs,
    #[error("connections_per_hub must be at least 1")]
    NoConnections,
    #[error("unknown hub '{0}'")]
    UnknownHub(String),
    #[error("websocket: {0}")]
    WebSocket(#[from] tokio_tungstenite::tungstenite::Error),
    #[error("service refused the handshake: {0}")]
    HandshakeRefused(String),
    #[error("protocol: {0}")]
    Protocol(String),
    #[error("timed out: {0}")]
    Timeout(&'static str),
    #[error("connection closed")]
    Closed,
}

/// A send found no usable server connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no server connection is up for hub '{0}'")]
pub struct NotConnected(pub String);

/// A `*WithAck` request did not succeed (spec §1.5 Ack status codes).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AckError {
    #[error(transparent)]
    NotConnected(#[from] NotConnected),
    /// No Ack within 10 s (the SDK's ack timeout).
    #[error("Timeout waiting for ack {0}")]
    Timeout(i32),
    /// Status 3 (Timeout) or 4 (InternalServerError) or anything unknown.
    #[error("ack status {status}: {message}")]
    Failed { status: i32, message: String },
    /// The app server stopped before the ack came.
    #[error("the app server stopped")]
    Stopped,
}

/// A client invocation (`invoke_client`) did not produce a result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvokeError {
    #[error(transparent)]
    NotConnected(#[from] NotConnected),
    /// The client answered with an error, or the service sent an ErrorCompletion.
    #[error("{0}")]
    Failed(String),
    /// The client left, or the server connection carrying it dropped.
    #[error("Connection '{0}' disconnected.")]
    Disconnected(String),
    #[error("client invocation timed out")]
    Timeout,
}
