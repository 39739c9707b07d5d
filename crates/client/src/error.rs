//! What can go wrong for a client.

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// With its causes: reqwest's own text ("error sending request for url …") leaves out
    /// why (refused, reset, no free port).
    #[error("http: {}", with_causes(.0))]
    Http(#[from] reqwest::Error),
    #[error("negotiate failed with status {status}: {body}")]
    Negotiate { status: u16, body: String },
    #[error("websocket: {0}")]
    WebSocket(#[from] tokio_tungstenite::tungstenite::Error),
    #[error("handshake refused: {0}")]
    HandshakeRefused(String),
    #[error("protocol: {0}")]
    Protocol(String),
    #[error("connection closed")]
    Closed,
}

/// An error's text followed by each of its causes.
pub fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(next) = cause {
        let more = next.to_string();
        // hyper and reqwest sometimes repeat a cause's text in their own.
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = next.source();
    }
    text
}
