//! Candidate 2: fred, the way the backplane would use it. RESP3; the publisher is a `Client`
//! that sends each batch as one `pipeline()`; the subscriber is a `SubscriberClient` with
//! `manage_subscriptions()` (resubscribes after a reconnect) read through `message_rx()`.
//! Both reconnect forever with an exponential backoff from 100 ms to 2 s (fred does not
//! reconnect at all unless a policy is set).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fred::clients::SubscriberClient;
use fred::prelude::*;
use fred::types::config::{Config, ReconnectPolicy};
use fred::types::RespVersion;
use futures_util::stream::{FuturesOrdered, StreamExt};
use tokio::sync::broadcast::error::RecvError;

use crate::common::{channel_chunks, now_ns, Stats, CHANNEL};

const TIMEOUT: Duration = Duration::from_secs(10);

/// Capacity of the subscriber client's broadcast channels (fred sizes all eight of its event
/// channels with it, pub/sub messages among them): `FRED_BCAST`, default fred's own (32). A
/// reader that falls further behind than this loses messages (`lagged`). The publisher client
/// keeps fred's default.
pub fn broadcast_capacity() -> usize {
    std::env::var("FRED_BCAST")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(32)
}

fn builder(port: u16, broadcast_capacity: usize) -> Result<Builder, String> {
    let mut config =
        Config::from_url(&format!("redis://127.0.0.1:{port}")).map_err(|e| e.to_string())?;
    config.version = RespVersion::RESP3;
    let mut builder = Builder::from_config(config);
    builder
        .with_performance_config(|p| {
            p.default_command_timeout = TIMEOUT;
            p.broadcast_channel_capacity = broadcast_capacity;
        })
        .with_connection_config(|c| {
            c.connection_timeout = TIMEOUT;
        })
        .set_policy(ReconnectPolicy::new_exponential(0, 100, 2000, 2));
    Ok(builder)
}

pub struct Pub(Client);

impl Pub {
    pub async fn connect(port: u16) -> Result<Self, String> {
        let client = builder(port, 32)?.build().map_err(|e| e.to_string())?;
        client.init().await.map_err(|e| e.to_string())?;
        Ok(Pub(client))
    }

    /// One pipeline (fred has no way to skip replies: all are read as subscriber counts).
    pub async fn batch(&mut self, messages: &[Bytes]) -> Result<(), String> {
        let pipeline = self.0.pipeline();
        for m in messages {
            let () = pipeline
                .publish(CHANNEL, m.clone())
                .await
                .map_err(|e| e.to_string())?;
        }
        pipeline
            .all::<Vec<i64>>()
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    pub async fn one(&mut self, message: Bytes) -> Result<i64, String> {
        self.0
            .publish::<i64, _, _>(CHANNEL, message)
            .await
            .map_err(|e| e.to_string())
    }

    /// fred's own way: up to `window` concurrent PUBLISH commands, which the client
    /// pipelines on its connection (auto-pipelining).
    pub async fn window(
        &mut self,
        stats: &Stats,
        window: usize,
        mut next: impl FnMut() -> Option<Bytes>,
    ) {
        let mut in_flight = FuturesOrdered::new();
        loop {
            while in_flight.len() < window {
                let Some(m) = next() else { break };
                let client = self.0.clone();
                in_flight
                    .push_back(async move { client.publish::<i64, _, _>(CHANNEL, m).await });
            }
            match in_flight.next().await {
                Some(Ok(_)) => stats.published_ok(1),
                Some(Err(_)) => {
                    stats.pub_errors.fetch_add(1, Relaxed);
                }
                None => {
                    if stats.stopped() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
        }
    }
}

pub struct Sub {
    _client: SubscriberClient,
}

impl Sub {
    pub async fn connect(port: u16, stats: Arc<Stats>) -> Result<Self, String> {
        let client = builder(port, broadcast_capacity())?
            .build_subscriber_client()
            .map_err(|e| e.to_string())?;
        client.init().await.map_err(|e| e.to_string())?;
        let _ = client.manage_subscriptions();
        let mut messages = client.message_rx();
        let subscribe_stats = stats.clone();
        tokio::spawn(async move {
            loop {
                match messages.recv().await {
                    Ok(message) => match message.value.as_bytes() {
                        Some(payload) => stats.on_message(payload),
                        None => {
                            stats.bad_payload.fetch_add(1, Relaxed);
                        }
                    },
                    Err(RecvError::Lagged(n)) => {
                        stats.lagged.fetch_add(n, Relaxed);
                    }
                    Err(RecvError::Closed) => return,
                }
            }
        });
        let start = now_ns();
        for names in channel_chunks(&subscribe_stats) {
            client.subscribe(names).await.map_err(|e| e.to_string())?;
        }
        subscribe_stats.subscribe_ns.store(now_ns() - start, Relaxed);
        Ok(Sub { _client: client })
    }
}
