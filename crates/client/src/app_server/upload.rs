//! [`ClientStream`]: one stream a client uploads, on its own so that the client table (which
//! feeds it) and the hub methods (which read it) do not depend on each other.

use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::Stream;
use serde_json::Value;
use tokio::sync::mpsc;

/// One stream the client uploads (a `Subject` / `ChannelReader` argument): its items in the
/// order sent. It ends (`None`) at the client's Completion for it; a Completion with an
/// error, or the client leaving, yields one `Err` first.
#[derive(Debug)]
pub struct ClientStream {
    pub(super) id: String,
    pub(super) items: mpsc::UnboundedReceiver<Result<Value, String>>,
}

impl ClientStream {
    /// The stream id the client chose.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The next item; `None` once the stream is complete.
    pub async fn recv(&mut self) -> Option<Result<Value, String>> {
        self.items.recv().await
    }
}

impl Stream for ClientStream {
    type Item = Result<Value, String>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.items.poll_recv(cx)
    }
}
