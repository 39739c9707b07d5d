//! One task publishes every envelope of this process, in order, on one connection: batches
//! of whatever is queued go out as one pipeline.

use std::sync::Arc;

use bytes::Bytes;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::{mpsc, oneshot};

use crate::shared::{count, Shared};

/// Publishes at most this many envelopes per pipeline, so one round trip stays short.
const MAX_BATCH: usize = 256;

pub(crate) struct Outgoing {
    pub(crate) names: Vec<String>,
    pub(crate) bytes: Bytes,
    /// For an ask: told how many subscribers Redis delivered it to (one name only).
    pub(crate) receipt: Option<oneshot::Sender<Option<usize>>>,
}

pub(crate) async fn connect(shared: &Shared) -> redis::RedisResult<ConnectionManager> {
    let config = ConnectionManagerConfig::new()
        .set_response_timeout(Some(shared.settings.response_timeout))
        .set_connection_timeout(Some(shared.settings.response_timeout))
        .set_number_of_retries(0);
    shared
        .client
        .get_connection_manager_with_config(config)
        .await
}

pub(crate) async fn run(
    shared: Arc<Shared>,
    mut connection: ConnectionManager,
    mut queue: mpsc::UnboundedReceiver<Outgoing>,
) {
    let mut batch: Vec<Outgoing> = Vec::with_capacity(MAX_BATCH);
    while queue.recv_many(&mut batch, MAX_BATCH).await > 0 {
        let mut pipe = redis::pipe();
        for outgoing in &batch {
            for name in &outgoing.names {
                let publish = pipe.cmd("PUBLISH").arg(name).arg(outgoing.bytes.as_ref());
                // Only asks want the subscriber count; the pipeline answers those in order.
                if outgoing.receipt.is_none() {
                    publish.ignore();
                }
            }
        }
        // A failed pipeline is not retried: some of it may have been published already, and
        // a retry would deliver those twice. Pub/sub is at most once across an outage.
        match pipe.query_async::<Vec<i64>>(&mut connection).await {
            Ok(counts) => {
                let mut counts = counts.into_iter();
                for outgoing in batch.drain(..) {
                    count(&shared.stats.published);
                    if let Some(receipt) = outgoing.receipt {
                        let reached = counts.next().and_then(|n| usize::try_from(n).ok());
                        let _ = receipt.send(reached);
                    }
                }
            }
            Err(error) => {
                tracing::warn!(%error, lost = batch.len(), "redis publish failed");
                for _ in batch.drain(..) {
                    count(&shared.stats.publish_errors);
                }
            }
        }
    }
}
