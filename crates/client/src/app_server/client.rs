//! Clients pinned to this app server: their SignalR handshake, the hub messages they
//! send (split from ConnectionData chunks), and the task that runs their invocations one
//! at a time, as ASP.NET Core does by default.

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use serde_json::Value;
use switchyard_hub_protocol::{
    encode_completion, handshake, ping, CompletionResult, Format, FrameSplitter, HubMessage,
};
use switchyard_service_protocol::{
    ClientCompletion, CloseConnection, ConnectionData, Extensions, OpenConnection,
};
use tokio::sync::mpsc;

use super::hub::Hub;
use super::link::Link;
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

/// An invocation for the client's worker task.
pub enum Job {
    Invoke {
        invocation_id: Option<String>,
        target: String,
        arguments: Vec<Value>,
    },
    /// Answer with an error completion, in order with the other jobs.
    Reject {
        invocation_id: String,
        error: String,
    },
}

pub struct ClientEntry {
    pub client: Arc<Client>,
    jobs: mpsc::UnboundedSender<Job>,
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
}

struct Stream {
    handshake_done: bool,
    buffer: BytesMut,
    scanned: usize,
}

/// What a chunk of client bytes amounted to.
enum Event {
    HandshakeOk,
    HandshakeFailed(String),
    Message(HubMessage<Value>, Bytes),
    Broken(String),
}

impl Client {
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
    fn feed(&self, payload: &[u8]) -> Vec<Event> {
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

fn result_value(result: CompletionResult<Value>) -> Result<Value, InvokeError> {
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

impl Hub {
    /// OpenConnection: a client is now pinned to `link`.
    pub fn on_open(self: &Arc<Self>, link: &Arc<Link>, open: OpenConnection) {
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
        let client = Arc::new(Client {
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
        });
        let (jobs, rx) = mpsc::unbounded_channel();
        let previous = self.clients.lock().insert(
            open.connection_id.clone(),
            ClientEntry {
                client: client.clone(),
                jobs,
            },
        );
        match previous {
            Some(old) => old.client.link.clients.fetch_sub(1, Ordering::Relaxed),
            None => self.info.clients.fetch_add(1, Ordering::Relaxed),
        };
        link.clients.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(worker(self.clone(), client, rx));
    }

    /// CloseConnection from the service: the client is gone (or migrated away).
    pub fn on_close(&self, close: CloseConnection) {
        self.forget_client(&close.connection_id);
    }

    /// Removes a client; its worker ends and its pending client invocations fail.
    pub fn forget_client(&self, id: &str) {
        let removed = self.clients.lock().remove(id);
        if let Some(entry) = removed {
            entry.client.link.clients.fetch_sub(1, Ordering::Relaxed);
            self.info.clients.fetch_sub(1, Ordering::Relaxed);
            self.results.client_gone(id);
        }
    }

    /// Closes a client from this side (CloseConnection A→S) and forgets it.
    pub fn close_client(&self, client: &Client, error: &str) {
        client.link.send(CloseConnection {
            connection_id: client.id.clone(),
            error_message: error.to_owned(),
            headers: Vec::new(),
            ext: Extensions::default(),
        });
        self.forget_client(&client.id);
    }

    pub fn client(&self, id: &str) -> Option<Arc<Client>> {
        self.clients.lock().get(id).map(|e| e.client.clone())
    }

    /// ConnectionData from the service: bytes the client sent.
    pub fn on_data(self: &Arc<Self>, _link: &Arc<Link>, data: ConnectionData) {
        let Some((client, jobs)) = self
            .clients
            .lock()
            .get(&data.connection_id)
            .map(|e| (e.client.clone(), e.jobs.clone()))
        else {
            tracing::debug!(connection = %data.connection_id, "data for an unknown client");
            return;
        };
        for event in client.feed(&data.payload) {
            match event {
                Event::HandshakeOk => {
                    client.send_raw(Bytes::from_static(handshake::RESPONSE_OK));
                }
                Event::HandshakeFailed(error) => {
                    client.send_raw(Bytes::from(handshake::encode_error_response(&error)));
                    self.close_client(&client, &error);
                    return;
                }
                Event::Broken(error) => {
                    self.close_client(&client, &error);
                    return;
                }
                Event::Message(message, framed) => {
                    if !self.on_hub_message(&client, &jobs, message, framed) {
                        return;
                    }
                }
            }
        }
    }

    /// One hub message from a client; `false` once the client is gone.
    fn on_hub_message(
        &self,
        client: &Arc<Client>,
        jobs: &mpsc::UnboundedSender<Job>,
        message: HubMessage<Value>,
        framed: Bytes,
    ) -> bool {
        match message {
            HubMessage::Invocation {
                invocation_id,
                target,
                arguments,
                ..
            } => {
                let _ = jobs.send(Job::Invoke {
                    invocation_id,
                    target,
                    arguments,
                });
            }
            HubMessage::StreamInvocation {
                invocation_id,
                target,
                ..
            } => {
                let _ = jobs.send(Job::Reject {
                    invocation_id,
                    error: format!("Unknown hub method '{target}'"),
                });
            }
            HubMessage::Completion {
                invocation_id,
                result,
                ..
            } => self.on_client_result(client, &invocation_id, result, framed),
            HubMessage::Close { .. } => {
                self.close_client(client, "");
                return false;
            }
            _ => {}
        }
        true
    }

    /// A client answered a client invocation: resolve it here if this server asked,
    /// else pass it on to the caller server if this server routes it.
    fn on_client_result(
        &self,
        client: &Client,
        invocation_id: &str,
        result: CompletionResult<Value>,
        framed: Bytes,
    ) {
        let protocol = client.format().unwrap_or(Format::Json).name().to_owned();
        if self.results.is_caller_of(invocation_id) {
            self.results.complete(invocation_id, result_value(result));
            client.link.send(ClientCompletion {
                invocation_id: invocation_id.to_owned(),
                connection_id: client.id.clone(),
                caller_server_id: self.info.server_id().to_owned(),
                protocol,
                payload: Bytes::new(),
                ext: Extensions::default(),
            });
        } else if let Some(routed) = self.results.take_route(invocation_id) {
            client.link.send(ClientCompletion {
                invocation_id: invocation_id.to_owned(),
                connection_id: routed.connection_id,
                caller_server_id: routed.caller_server_id,
                protocol,
                payload: framed,
                ext: Extensions::default(),
            });
        } else {
            tracing::debug!(invocation = %invocation_id, "completion for an unknown client invocation");
        }
    }
}

/// Runs one client's invocations in order and pings it every 15 s; ends when the client
/// is forgotten (its job sender is dropped).
async fn worker(hub: Arc<Hub>, client: Arc<Client>, mut jobs: mpsc::UnboundedReceiver<Job>) {
    let start = tokio::time::Instant::now() + CLIENT_PING_INTERVAL;
    let mut pings = tokio::time::interval_at(start, CLIENT_PING_INTERVAL);
    loop {
        tokio::select! {
            job = jobs.recv() => match job {
                None => return,
                Some(Job::Invoke { invocation_id, target, arguments }) => {
                    let outcome = super::bench_hub::invoke(&hub, &client, &target, arguments).await;
                    if let Some(id) = invocation_id {
                        let result = match outcome {
                            Ok(None) => CompletionResult::Void,
                            Ok(Some(value)) => CompletionResult::Value(value),
                            Err(error) => CompletionResult::Error(error),
                        };
                        complete(&client, &id, result);
                    }
                }
                Some(Job::Reject { invocation_id, error }) => {
                    complete(&client, &invocation_id, CompletionResult::Error(error));
                }
            },
            _ = pings.tick() => {
                if let Some(format) = client.format() {
                    client.send_raw(ping(format));
                }
            }
        }
    }
}

fn complete(client: &Client, invocation_id: &str, result: CompletionResult<Value>) {
    let format = client.format().unwrap_or(Format::Json);
    client.send_raw(encode_completion(format, invocation_id, result));
}
