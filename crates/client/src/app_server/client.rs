//! Clients pinned to this app server: their SignalR handshake, the hub messages they
//! send (split from ConnectionData chunks), and the task that runs their invocations one
//! at a time, as ASP.NET Core does by default.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use serde_json::Value;
use switchyard_hub_protocol::{handshake, CompletionResult, Format, FrameSplitter, HubMessage};
use switchyard_service_protocol::{ConnectionData, Extensions, OpenConnection};
use tokio::sync::{mpsc, oneshot};

use super::link::Link;
use super::upload::ClientStream;
use super::InvokeError;

/// ASP.NET Core's keep-alive interval towards clients.
pub const CLIENT_PING_INTERVAL: Duration = Duration::from_secs(15);
/// Largest hub message accepted from a client (generous: this is a load generator).
const MAX_CLIENT_MESSAGE: usize = 16 * 1024 * 1024;
/// Largest handshake request.
const MAX_HANDSHAKE: usize = 64 * 1024;
/// The claim types tried, in order, for the user id.
const USER_CLAIMS: [&str; 4] = [
    "asrs.s.uid",
    "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/nameidentifier",
    "nameid",
    "sub",
];

/// What an upload stream ends with when the client goes before completing it.
const UPLOAD_ABANDONED: &str = "The client disconnected before completing the stream.";

/// An invocation for the client's worker task.
pub enum Job {
    Invoke {
        invocation_id: Option<String>,
        target: String,
        arguments: Vec<Value>,
        /// Upload streams, in `streamIds` order; registered when the message arrived, so the
        /// items that follow it are never lost.
        streams: Vec<ClientStream>,
    },
    /// A StreamInvocation; `cancel` fires on CancelInvocation or when the client leaves.
    Stream {
        invocation_id: String,
        target: String,
        arguments: Vec<Value>,
        streams: Vec<ClientStream>,
        cancel: oneshot::Receiver<()>,
    },
    /// Answer with an error completion, in order with the other jobs.
    Reject {
        invocation_id: String,
        error: String,
    },
}

/// A client and the queue of its worker task.
pub struct ClientEntry {
    pub client: Arc<Client>,
    pub(super) jobs: mpsc::UnboundedSender<Job>,
}

pub struct Client {
    pub id: String,
    pub user: Option<String>,
    /// The server connection the service pinned this client to.
    pub link: Arc<Link>,
    /// `Asrs-Instance-Id`: the service instance holding the client.
    pub instance_id: Option<String>,
    /// Known after the handshake (or from OpenConnection's `protocol` for migrated clients).
    format: OnceLock<Format>,
    stream: Mutex<Stream>,
    /// Upload streams not yet completed by the client, by stream id.
    uploads: Mutex<HashMap<String, mpsc::UnboundedSender<Result<Value, String>>>>,
    /// Streams to the client still running, by invocation id; dropping a sender cancels.
    streaming: Mutex<HashMap<String, oneshot::Sender<()>>>,
    /// The service asked to pause sending to this client (ConnectionFlowControl): its queue
    /// there is backed up. Streams wait until it resumes.
    paused: tokio::sync::watch::Sender<bool>,
}

struct Stream {
    handshake_done: bool,
    buffer: BytesMut,
    scanned: usize,
}

/// What a chunk of client bytes amounted to.
pub(super) enum Event {
    HandshakeOk,
    HandshakeFailed(String),
    Message(HubMessage<Value>, Bytes),
    Broken(String),
}

impl Client {
    /// The client OpenConnection announces on `link`.
    pub(super) fn from_open(link: &Arc<Link>, open: &OpenConnection) -> Client {
        let user = USER_CLAIMS.iter().find_map(|claim| {
            open.claims
                .iter()
                .find(|(k, v)| k == claim && !v.is_empty())
                .map(|(_, v)| v.clone())
        });
        let migrated = header(&open.headers, "Asrs-Migrate-From").is_some();
        let format = OnceLock::new();
        if let Some(f) = open.ext.protocol.as_deref().and_then(format_named) {
            let _ = format.set(f);
        } else if migrated {
            let _ = format.set(Format::Json);
        }
        Client {
            id: open.connection_id.clone(),
            user,
            link: link.clone(),
            instance_id: header(&open.headers, "Asrs-Instance-Id").map(str::to_owned),
            format,
            stream: Mutex::new(Stream {
                handshake_done: migrated,
                buffer: BytesMut::new(),
                scanned: 0,
            }),
            uploads: Mutex::default(),
            streaming: Mutex::default(),
            paused: tokio::sync::watch::Sender::new(false),
        }
    }

    /// ConnectionFlowControl Pause (true) or Resume (false) from the service.
    pub(super) fn set_paused(&self, paused: bool) {
        self.paused.send_replace(paused);
    }

    /// Resolves once the service has not asked to pause sending to this client.
    pub(super) async fn resumed(&self) {
        let mut paused = self.paused.subscribe();
        let _ = paused.wait_for(|paused| !*paused).await;
    }

    /// Registers the upload streams an invocation announces (`streamIds`).
    pub(super) fn open_uploads(&self, ids: &[String]) -> Vec<ClientStream> {
        let mut uploads = self.uploads.lock();
        ids.iter()
            .map(|id| {
                // Unbounded: the connection's reader must not wait on one handler (every
                // client on the server connection would stall behind it).
                let (tx, items) = mpsc::unbounded_channel();
                uploads.insert(id.clone(), tx);
                ClientStream {
                    id: id.clone(),
                    items,
                }
            })
            .collect()
    }

    /// A StreamItem of an upload; one for a stream not open is dropped, as in ASP.NET Core.
    pub(super) fn upload_item(&self, id: &str, item: Value) {
        match self.uploads.lock().get(id) {
            // A handler that dropped its stream just does not see the rest.
            Some(tx) => {
                let _ = tx.send(Ok(item));
            }
            None => {
                tracing::debug!(connection = %self.id, stream = %id, "item for an unknown stream")
            }
        }
    }

    /// A Completion that ends an upload; `false` if `id` is not an open upload (then it
    /// answers a client invocation).
    pub(super) fn end_upload(&self, id: &str, error: Option<String>) -> bool {
        let Some(tx) = self.uploads.lock().remove(id) else {
            return false;
        };
        if let Some(error) = error {
            let _ = tx.send(Err(error));
        }
        true
    }

    /// Registers a stream to the client; `None` if the id is in use.
    pub(super) fn start_streaming(&self, id: &str) -> Option<oneshot::Receiver<()>> {
        let mut streaming = self.streaming.lock();
        if streaming.contains_key(id) {
            return None;
        }
        let (tx, rx) = oneshot::channel();
        streaming.insert(id.to_owned(), tx);
        Some(rx)
    }

    /// CancelInvocation: unknown ids are ignored, as in ASP.NET Core.
    pub(super) fn cancel_streaming(&self, id: &str) {
        if let Some(tx) = self.streaming.lock().remove(id) {
            let _ = tx.send(());
        }
    }

    /// A stream to the client ended; its cancel receiver must be dropped first, so that a
    /// newer stream that took the same id after a cancel keeps its entry.
    pub(super) fn streaming_done(&self, id: &str) {
        let mut streaming = self.streaming.lock();
        if streaming.get(id).is_some_and(oneshot::Sender::is_closed) {
            streaming.remove(id);
        }
    }

    /// The client left: its uploads fail and its streams stop.
    pub(super) fn abandon_streams(&self) {
        for (_, tx) in self.uploads.lock().drain() {
            let _ = tx.send(Err(UPLOAD_ABANDONED.to_owned()));
        }
        self.streaming.lock().clear();
    }

    /// The client's hub protocol, once known.
    pub fn format(&self) -> Option<Format> {
        self.format.get().copied()
    }

    /// Sends already-framed bytes to this client as ConnectionData.
    pub fn send_raw(&self, payload: Bytes) -> bool {
        self.link.send(ConnectionData {
            connection_id: self.id.clone(),
            payload,
            ext: Extensions::default(),
        })
    }

    /// Appends bytes from the service and returns what they completed.
    pub(super) fn feed(&self, payload: &[u8]) -> Vec<Event> {
        let mut events = Vec::new();
        let mut stream = self.stream.lock();
        stream.buffer.extend_from_slice(payload);
        if !stream.handshake_done {
            match handshake::parse_request(&stream.buffer, MAX_HANDSHAKE) {
                Ok(None) => return events,
                Ok(Some((request, consumed))) => {
                    let _ = stream.buffer.split_to(consumed);
                    match check_handshake(&request) {
                        Ok(format) => {
                            let _ = self.format.set(format);
                            stream.handshake_done = true;
                            events.push(Event::HandshakeOk);
                        }
                        Err(error) => {
                            events.push(Event::HandshakeFailed(error));
                            return events;
                        }
                    }
                }
                Err(e) => {
                    events.push(Event::HandshakeFailed(e.to_string()));
                    return events;
                }
            }
        }
        let Some(format) = self.format() else {
            return events;
        };
        let splitter = FrameSplitter::new(format, MAX_CLIENT_MESSAGE);
        let Stream {
            buffer, scanned, ..
        } = &mut *stream;
        loop {
            match splitter.next_frame_resuming(buffer, scanned) {
                Ok(None) => break,
                Ok(Some(frame)) => match crate::decode(format, frame.body()) {
                    Ok(message) => events.push(Event::Message(message, frame.framed)),
                    Err(e) => {
                        events.push(Event::Broken(e.to_string()));
                        break;
                    }
                },
                Err(e) => {
                    events.push(Event::Broken(e.to_string()));
                    break;
                }
            }
        }
        events
    }
}

/// ASP.NET Core's handshake checks: a protocol this server has, version ≤ 2.
fn check_handshake(request: &handshake::HandshakeRequest) -> Result<Format, String> {
    let format = format_named(&request.protocol)
        .ok_or_else(|| format!("The protocol '{}' is not supported.", request.protocol))?;
    if request.version > 2 {
        return Err(format!(
            "The server does not support version {} of the '{}' protocol.",
            request.version, request.protocol
        ));
    }
    Ok(format)
}

pub fn format_named(name: &str) -> Option<Format> {
    if name.eq_ignore_ascii_case("json") {
        Some(Format::Json)
    } else if name.eq_ignore_ascii_case("messagepack") {
        Some(Format::MessagePack)
    } else {
        None
    }
}

/// The result carried by a ClientCompletion's payload (a framed CompletionMessage in
/// `protocol`; an unframed body is accepted too).
pub fn completion_result(protocol: &str, payload: &[u8]) -> Result<Value, InvokeError> {
    let format = format_named(protocol)
        .ok_or_else(|| InvokeError::Failed(format!("unsupported protocol '{protocol}'")))?;
    let mut buffer = BytesMut::from(payload);
    let body = match FrameSplitter::new(format, usize::MAX).next_frame(&mut buffer) {
        Ok(Some(frame)) => frame.body_bytes(),
        _ => Bytes::copy_from_slice(payload),
    };
    match crate::decode(format, &body) {
        Ok(HubMessage::Completion { result, .. }) => result_value(result),
        Ok(other) => Err(InvokeError::Failed(format!(
            "expected a completion, got message type {}",
            other.message_type()
        ))),
        Err(e) => Err(InvokeError::Failed(e.to_string())),
    }
}

pub(super) fn result_value(result: CompletionResult<Value>) -> Result<Value, InvokeError> {
    match result {
        CompletionResult::Void => Ok(Value::Null),
        CompletionResult::Value(v) => Ok(v),
        CompletionResult::Error(e) => Err(InvokeError::Failed(e)),
    }
}

fn header<'a>(headers: &'a [(String, Vec<String>)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .and_then(|(_, v)| v.first())
        .map(String::as_str)
}
