//! The admin hub: one session per open dashboard page, over a WebSocket in the SignalR JSON
//! hub protocol, so the page uses the official browser client. The service pushes:
//! - `snapshot(snapshot)` every second (the node and its hubs);
//! - `connections(list)` every two seconds, for the filter the page set;
//! - `trace(hub, events)`, `traceLost(hub, count)`, `traceEnded(hub)` while it watches a trace.
//!
//! The page invokes: `SetFilter(filter) -> list`, `CloseConnection(hub, id, reason)`,
//! `StartTrace(hub, seconds) -> until`, `WatchTrace(hub) -> until`, `StopTrace(hub)`. A trace
//! covers every node of a cluster (see `relay`).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{Message as WsMessage, WebSocket};
use serde_json::{json, Value};
use switchyard_core::{ConnectionId, HubName, Target};
use switchyard_hub_protocol::{
    encode_completion, handshake, json as hub_json, CompletionResult, Format, HubMessage,
    RECORD_SEPARATOR,
};
use tokio::time::{interval, Instant, MissedTickBehavior};

use super::view::Filter;
use super::Dashboard;
use crate::command::Command;
use crate::live_trace::{Shown, Watch, LOOK_EVERY};

/// Largest message the page may send (its invocations are small).
pub(super) const MAX_MESSAGE: usize = 64 * 1024;
/// The page pings every 15 s; silence for this long ends the session.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(60);
/// Most trace events in one `trace` message.
const TRACE_BATCH: usize = 500;

/// How often a watched trace is announced to the cluster again, for nodes that joined since.
const ANNOUNCE_EVERY: Duration = Duration::from_secs(5);

/// One page's session.
pub(crate) struct Session {
    dashboard: Arc<Dashboard>,
    filter: Option<Filter>,
    trace: Option<(HubName, Watch)>,
    /// When the watched trace was last announced to the other nodes.
    announced: Instant,
}

/// `expires_at`: the token's `exp` (Unix seconds) when the page came in with one; the
/// session ends then, as client connections do, so a token's lifetime bounds the access it gave.
pub(super) async fn run(dashboard: Arc<Dashboard>, mut socket: WebSocket, expires_at: Option<i64>) {
    if !handshake(&mut socket).await {
        return;
    }
    let expiry = async move {
        match expires_at {
            Some(at) => tokio::time::sleep(until_unix(at)).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(expiry);
    let mut session = Session::new(dashboard);
    let mut snapshots = interval(Duration::from_secs(1));
    snapshots.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut lists = interval(Duration::from_secs(2));
    lists.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut traces = interval(LOOK_EVERY);
    traces.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut heard = Instant::now();
    loop {
        let out = tokio::select! {
            received = socket.recv() => {
                let Some(Ok(message)) = received else { return };
                heard = Instant::now();
                let text = match message {
                    WsMessage::Text(text) => text.to_string(),
                    WsMessage::Binary(_) => return close(&mut socket, "the admin hub speaks JSON").await,
                    WsMessage::Close(_) => return,
                    _ => continue,
                };
                match session.received(&text).await {
                    Ok(out) => out,
                    Err(error) => return close(&mut socket, &error).await,
                }
            }
            _ = &mut expiry => {
                return close(&mut socket, "the dashboard's token has expired: sign in with a fresh one").await;
            }
            _ = snapshots.tick() => {
                if heard.elapsed() > CLIENT_TIMEOUT {
                    return close(&mut socket, "no message from the page within 60 s").await;
                }
                let snapshot = session.dashboard.snapshot().await;
                vec![push("snapshot", &(snapshot,))]
            }
            _ = lists.tick(), if session.filter.is_some() => {
                let filter = session.filter.as_ref().expect("checked");
                vec![push("connections", &(session.dashboard.connections(filter).await,))]
            }
            _ = traces.tick(), if session.trace.is_some() => {
                session.announce().await;
                session.trace_news()
            }
        };
        for frame in out {
            if socket.send(WsMessage::Text(frame.into())).await.is_err() {
                return;
            }
        }
    }
}

/// Reads the handshake request; answers it. False: the page is gone or spoke nonsense.
async fn handshake(socket: &mut WebSocket) -> bool {
    let mut buffer = Vec::new();
    let deadline = tokio::time::sleep(Duration::from_secs(15));
    tokio::pin!(deadline);
    loop {
        let message = tokio::select! {
            message = socket.recv() => message,
            _ = &mut deadline => return false,
        };
        match message {
            Some(Ok(WsMessage::Text(text))) => buffer.extend_from_slice(text.as_bytes()),
            Some(Ok(WsMessage::Binary(bytes))) => buffer.extend_from_slice(&bytes),
            Some(Ok(_)) => continue,
            _ => return false,
        }
        match handshake::parse_request(&buffer, MAX_MESSAGE) {
            Ok(None) => continue,
            Ok(Some((request, _))) if request.protocol == "json" => {
                let ok = String::from_utf8_lossy(handshake::RESPONSE_OK).into_owned();
                return socket.send(WsMessage::Text(ok.into())).await.is_ok();
            }
            Ok(Some(_)) => {
                let refusal = handshake::encode_error_response(
                    "The admin hub speaks the 'json' protocol only.",
                );
                let text = String::from_utf8_lossy(&refusal).into_owned();
                let _ = socket.send(WsMessage::Text(text.into())).await;
                return false;
            }
            Err(_) => return false,
        }
    }
}

/// How long until the Unix time `at` (zero once it has passed).
fn until_unix(at: i64) -> Duration {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Duration::from_secs(u64::try_from(at).unwrap_or(0)).saturating_sub(now)
}

/// Sends a Close message with `error`, then ends.
async fn close(socket: &mut WebSocket, error: &str) {
    let frame = switchyard_hub_protocol::encode_close(Format::Json, Some(error), false);
    let text = String::from_utf8_lossy(&frame).into_owned();
    let _ = socket.send(WsMessage::Text(text.into())).await;
    let _ = socket.send(WsMessage::Close(None)).await;
}

impl Session {
    pub(crate) fn new(dashboard: Arc<Dashboard>) -> Session {
        Session {
            dashboard,
            filter: None,
            trace: None,
            announced: Instant::now(),
        }
    }

    /// Tells the other nodes again, now and then, that the watched trace runs: a node that
    /// joined (or restarted) since it started traces the hub from then on.
    async fn announce(&mut self) {
        if self.announced.elapsed() < ANNOUNCE_EVERY {
            return;
        }
        self.announced = Instant::now();
        if let Some((hub, _)) = &self.trace {
            self.dashboard.announce_trace(hub).await;
        }
    }

    /// What the watched trace gathered since the last look: its events in batches, how
    /// many were lost (the page fell behind), and its end.
    pub(crate) fn trace_news(&mut self) -> Vec<String> {
        let Some((hub, watch)) = self.trace.as_mut() else {
            return Vec::new();
        };
        let news = watch.news();
        let node = self.dashboard.cluster.node_id().as_str();
        let hub = hub.as_str().to_string();
        let mut out: Vec<String> = news
            .events
            .chunks(TRACE_BATCH)
            .map(|batch| {
                let batch: Vec<Shown<'_>> =
                    batch.iter().map(|event| Shown { node, event }).collect();
                push("trace", &(hub.as_str(), batch))
            })
            .collect();
        if news.lost > 0 {
            out.push(push("traceLost", &(hub.as_str(), news.lost)));
        }
        if news.ended {
            self.trace = None;
            out.push(push("traceEnded", &(hub.as_str(),)));
        }
        out
    }

    /// The page's messages in one WebSocket message; what to send back. `Err`: end the
    /// session with this error.
    pub(crate) async fn received(&mut self, text: &str) -> Result<Vec<String>, String> {
        let mut out = Vec::new();
        for body in text.as_bytes().split(|&b| b == RECORD_SEPARATOR) {
            if body.is_empty() {
                continue;
            }
            let message = hub_json::decode(body).map_err(|e| format!("bad message: {e}"))?;
            match message {
                HubMessage::Invocation {
                    invocation_id,
                    target,
                    arguments,
                    ..
                } => {
                    let result = self.invoke(&target, arguments).await;
                    if let Some(id) = invocation_id {
                        out.push(completion(&id, result));
                    }
                }
                HubMessage::Close { .. } => return Err("closed by the page".into()),
                // Pings keep the session alive; nothing else is expected.
                _ => {}
            }
        }
        Ok(out)
    }

    async fn invoke(&mut self, target: &str, arguments: Vec<Value>) -> Result<Value, String> {
        let dashboard = self.dashboard.clone();
        match target {
            "SetFilter" => {
                let filter: Filter = serde_json::from_value(argument(&arguments, 0)?)
                    .map_err(|e| format!("bad filter: {e}"))?;
                let list = dashboard.connections(&filter).await;
                self.filter = Some(filter);
                Ok(json!(list))
            }
            "CloseConnection" => {
                let hub = hub_name(&arguments)?;
                let id = string(&arguments, 1)?;
                let reason = string(&arguments, 2).unwrap_or_default();
                let connection = ConnectionId::new(&id).map_err(|e| e.to_string())?;
                let reason = match reason.trim() {
                    "" => "Closed by an operator from the dashboard.".to_string(),
                    text => text.to_string(),
                };
                tracing::info!(hub = %hub, connection_id = %connection, reason = %reason, "connection closed from the dashboard");
                let command = Command::Close {
                    target: Target::Connection(connection),
                    excluded: Vec::new(),
                    reason: Some(reason),
                };
                dashboard
                    .executor
                    .execute(&hub, command)
                    .await
                    .map(|()| Value::Null)
                    .map_err(|missing| missing.to_string())
            }
            "StartTrace" => {
                let hub = hub_name(&arguments)?;
                let seconds = argument(&arguments, 1)?
                    .as_u64()
                    .ok_or("the trace's duration is a number of seconds")?;
                let watch = dashboard
                    .start_trace(&hub, Duration::from_secs(seconds))
                    .await;
                let until = watch.until_unix_ms;
                self.trace = Some((hub, watch));
                self.announced = Instant::now();
                Ok(json!(until))
            }
            "WatchTrace" => {
                let hub = hub_name(&arguments)?;
                match dashboard.shared.tracer.watch(&hub) {
                    Some(watch) => {
                        let until = watch.until_unix_ms;
                        self.trace = Some((hub, watch));
                        Ok(json!(until))
                    }
                    None => Err(format!("no trace runs for hub '{hub}'")),
                }
            }
            "StopTrace" => {
                let hub = hub_name(&arguments)?;
                dashboard.stop_trace(&hub).await;
                Ok(Value::Null)
            }
            other => Err(format!("the admin hub has no method '{other}'")),
        }
    }
}

fn argument(arguments: &[Value], index: usize) -> Result<Value, String> {
    arguments
        .get(index)
        .cloned()
        .ok_or_else(|| format!("argument {} is missing", index + 1))
}

fn string(arguments: &[Value], index: usize) -> Result<String, String> {
    match argument(arguments, index)? {
        Value::String(text) => Ok(text),
        Value::Null => Ok(String::new()),
        _ => Err(format!("argument {} must be a string", index + 1)),
    }
}

fn hub_name(arguments: &[Value]) -> Result<HubName, String> {
    HubName::new(&string(arguments, 0)?, None).map_err(|e| e.to_string())
}

/// A non-blocking Invocation of the page's `target` with `arguments` (a tuple: a JSON
/// array), written straight from the values (no JSON tree in between: a trace batch carries
/// up to hundreds of events).
fn push(target: &str, arguments: &impl serde::Serialize) -> String {
    #[derive(serde::Serialize)]
    struct Invocation<'a, A> {
        #[serde(rename = "type")]
        kind: u8,
        target: &'a str,
        arguments: &'a A,
    }
    let invocation = Invocation {
        kind: 1,
        target,
        arguments,
    };
    let mut text = serde_json::to_string(&invocation).expect("dashboard values serialise");
    text.push(char::from(RECORD_SEPARATOR));
    text
}

fn completion(id: &str, result: Result<Value, String>) -> String {
    let result = match result {
        Ok(Value::Null) => CompletionResult::Void,
        Ok(value) => CompletionResult::Value(value),
        Err(error) => CompletionResult::Error(error),
    };
    let frame = encode_completion(Format::Json, id, result);
    String::from_utf8_lossy(&frame).into_owned()
}
