//! `--dashboard`: keeps the service's dashboard open during a run, as an operator's page
//! would (an admin-hub session that receives a snapshot each second and the connection list
//! every two), and with `--trace` also a live trace of the hub, so the cost of watching shows
//! in the service's CPU per delivery.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde_json::{json, Value};
use switchyard_auth::TokenBuilder;
use switchyard_client::WsClient;
use switchyard_hub_protocol::{Format, HubMessage};

/// What the session received.
#[derive(Default)]
pub struct Seen {
    pub snapshots: AtomicU64,
    pub lists: AtomicU64,
    pub trace_events: AtomicU64,
    pub trace_lost: AtomicU64,
}

/// An open dashboard; closed when dropped.
pub struct Watcher {
    pub seen: Arc<Seen>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Watcher {
    pub fn summary(&self) -> String {
        let seen = &self.seen;
        format!(
            "dashboard open: {} snapshots, {} connection lists, {} trace events ({} lost)",
            seen.snapshots.load(Ordering::Relaxed),
            seen.lists.load(Ordering::Relaxed),
            seen.trace_events.load(Ordering::Relaxed),
            seen.trace_lost.load(Ordering::Relaxed),
        )
    }
}

fn invocation(id: &str, target: &str, arguments: Vec<Value>) -> HubMessage<Value> {
    HubMessage::Invocation {
        headers: Default::default(),
        invocation_id: Some(id.into()),
        target: target.into(),
        arguments,
        stream_ids: None,
    }
}

/// Opens the dashboard of the service at `base` (http URL) with an operator token signed by
/// `access_key`; with `trace`, starts a live trace of `hub` for an hour.
pub async fn open(base: &str, access_key: &str, hub: &str, trace: bool) -> Result<Watcher, String> {
    let base = base.trim_end_matches('/');
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|e| e.to_string())?
        .as_secs() as i64;
    let token = TokenBuilder::new(format!("{base}/dashboard"))
        .claim("role", "admin")
        .sign(access_key, now);
    let url = format!("{}/dashboard/hub", base.replacen("http", "ws", 1));
    let mut client = WsClient::connect(&url, Some(&token), Format::Json)
        .await
        .map_err(|e| format!("the dashboard's admin hub at {url}: {e}"))?;
    client
        .send(&invocation(
            "1",
            "SetFilter",
            vec![json!({"hub": hub, "limit": 200})],
        ))
        .await
        .map_err(|e| e.to_string())?;
    if trace {
        client
            .send(&invocation(
                "2",
                "StartTrace",
                vec![json!(hub), json!(3600)],
            ))
            .await
            .map_err(|e| e.to_string())?;
    }
    let seen = Arc::new(Seen::default());
    let counts = seen.clone();
    let task = tokio::spawn(async move {
        let mut pinged = tokio::time::Instant::now();
        while let Ok(message) = client.next().await {
            if let HubMessage::Invocation {
                target, arguments, ..
            } = &message
            {
                match target.as_str() {
                    "snapshot" => counts.snapshots.fetch_add(1, Ordering::Relaxed),
                    "connections" => counts.lists.fetch_add(1, Ordering::Relaxed),
                    "trace" => counts.trace_events.fetch_add(
                        arguments
                            .get(1)
                            .and_then(Value::as_array)
                            .map_or(0, |events| events.len() as u64),
                        Ordering::Relaxed,
                    ),
                    "traceLost" => counts.trace_lost.fetch_add(
                        arguments.get(1).and_then(Value::as_u64).unwrap_or(0),
                        Ordering::Relaxed,
                    ),
                    _ => 0,
                };
            }
            // The admin hub ends a session it has not heard from in 60 s.
            if pinged.elapsed().as_secs() >= 15 {
                pinged = tokio::time::Instant::now();
                if client.send(&HubMessage::Ping).await.is_err() {
                    break;
                }
            }
        }
    });
    Ok(Watcher { seen, task })
}
