//! Candidate 1: redis-rs, used the way crates/backplane-redis uses it. One RESP3 client; the
//! publisher is a `ConnectionManager` with no retries that sends each batch as one pipeline
//! (`ignore()`d PUBLISH replies, like every envelope that is not an ask); the subscriber is a
//! `ConnectionManager` with a push sender (a synchronous callback) and automatic resubscription.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::{FuturesOrdered, StreamExt};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{IntoConnectionInfo, ProtocolVersion, PushInfo, PushKind, Value};

use std::sync::atomic::Ordering::Relaxed;

use crate::common::{channel_chunks, now_ns, Stats, CHANNEL};

/// The backplane's default response timeout.
const TIMEOUT: Duration = Duration::from_secs(10);

fn client(port: u16) -> redis::RedisResult<redis::Client> {
    let info = format!("redis://127.0.0.1:{port}").into_connection_info()?;
    let resp3 = info.redis_settings().clone().set_protocol(ProtocolVersion::RESP3);
    redis::Client::open(info.set_redis_settings(resp3))
}

pub struct Pub(ConnectionManager);

impl Pub {
    pub async fn connect(port: u16) -> Result<Self, String> {
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(TIMEOUT))
            .set_connection_timeout(Some(TIMEOUT))
            .set_number_of_retries(0);
        let connection = client(port)
            .map_err(|e| e.to_string())?
            .get_connection_manager_with_config(config)
            .await
            .map_err(|e| e.to_string())?;
        Ok(Pub(connection))
    }

    /// One pipeline, replies ignored (as publisher.rs does for every envelope but asks).
    pub async fn batch(&mut self, messages: &[Bytes]) -> Result<(), String> {
        let mut pipe = redis::pipe();
        for m in messages {
            pipe.cmd("PUBLISH").arg(CHANNEL).arg(m.as_ref()).ignore();
        }
        pipe.query_async::<Vec<i64>>(&mut self.0)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    /// One PUBLISH whose reply (the subscriber count, an ask's receipt) is read.
    pub async fn one(&mut self, message: Bytes) -> Result<i64, String> {
        let mut pipe = redis::pipe();
        pipe.cmd("PUBLISH").arg(CHANNEL).arg(message.as_ref());
        let counts = pipe
            .query_async::<Vec<i64>>(&mut self.0)
            .await
            .map_err(|e| e.to_string())?;
        Ok(counts.first().copied().unwrap_or(-1))
    }

    /// Not how the backplane publishes: up to `window` single PUBLISH commands in flight on
    /// the multiplexed connection (the crate pipelines concurrent requests by itself).
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
                let mut c = self.0.clone();
                in_flight.push_back(async move {
                    redis::cmd("PUBLISH")
                        .arg(CHANNEL)
                        .arg(m.as_ref())
                        .query_async::<i64>(&mut c)
                        .await
                });
            }
            match in_flight.next().await {
                Some(Ok(_)) => stats.published_ok(1),
                Some(Err(_)) => {
                    stats.pub_errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
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

pub struct Sub(#[allow(dead_code)] ConnectionManager);

impl Sub {
    pub async fn connect(port: u16, stats: Arc<Stats>) -> Result<Self, String> {
        let subscribe_stats = stats.clone();
        let mut config = ConnectionManagerConfig::new();
        // Like the backplane, the subscriber keeps the crate's reconnect retries (6) unless
        // `RS_SUB_RETRIES` says otherwise (used to show what happens when they run out).
        if let Some(n) = std::env::var("RS_SUB_RETRIES").ok().and_then(|v| v.parse().ok()) {
            config = config.set_number_of_retries(n);
        }
        let config = config
            .set_response_timeout(Some(TIMEOUT))
            .set_connection_timeout(Some(TIMEOUT))
            .set_automatic_resubscription()
            .set_push_sender(move |push: PushInfo| {
                if push.kind == PushKind::Message {
                    if let Some(Value::BulkString(payload)) = push.data.get(1) {
                        stats.on_message(payload);
                    }
                }
                Ok::<(), ()>(())
            });
        let mut connection = client(port)
            .map_err(|e| e.to_string())?
            .get_connection_manager_with_config(config)
            .await
            .map_err(|e| e.to_string())?;
        let start = now_ns();
        for names in channel_chunks(&subscribe_stats) {
            connection
                .subscribe(&names)
                .await
                .map_err(|e| e.to_string())?;
        }
        subscribe_stats.subscribe_ns.store(now_ns() - start, Relaxed);
        Ok(Sub(connection))
    }
}
