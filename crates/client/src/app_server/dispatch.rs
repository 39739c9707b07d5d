//! What clients pinned to this app server do: the service announces them (OpenConnection),
//! carries their bytes (ConnectionData), and each client's invocations run one at a time on a
//! task of its own, calling the application's [`HubMethods`], as ASP.NET Core does by default.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::Value;
use switchyard_hub_protocol::{
    encode_completion, encode_message, handshake, ping, CompletionResult, Format, HubMessage,
};
use switchyard_service_protocol::{
    ClientCompletion, ConnectionData, ConnectionFlowControl, Extensions, OpenConnection,
    ServiceMessage,
};
use tokio::sync::{mpsc, oneshot};

use super::client::{result_value, Client, ClientEntry, Event, Job, CLIENT_PING_INTERVAL};
use super::context::HubContext;
use super::hub::Hub;
use super::link::Link;
use super::methods::{Caller, HubMethods, ItemStream};
use super::results::Routed;
use super::InvokeError;

impl Hub {
    /// Handles one message from the service on `link`.
    pub fn on_message(
        self: &Arc<Self>,
        link: &Arc<Link>,
        message: ServiceMessage,
        methods: &Arc<dyn HubMethods>,
    ) {
        match message {
            ServiceMessage::Ping(ping) => {
                if let Some(instance) = ping.get("target").filter(|t| !t.is_empty()) {
                    super::connection::open_on_demand(self.clone(), instance, methods.clone());
                } else {
                    self.on_ping(link, ping);
                }
            }
            ServiceMessage::OpenConnection(open) => self.on_open(link, open, methods),
            ServiceMessage::CloseConnection(close) => self.on_close(close),
            ServiceMessage::ConnectionData(data) => self.on_data(link, data),
            ServiceMessage::ServiceError(error) => {
                tracing::warn!(hub = %self.name, cid = %link.cid, "service error: {}", error.error_message);
                link.fail();
            }
            ServiceMessage::Ack(ack) => self.acks.resolve(ack.ack_id, ack.status, ack.message),
            ServiceMessage::ClientInvocation(invocation) => self.results.route(
                invocation.invocation_id,
                Routed {
                    connection_id: invocation.connection_id,
                    caller_server_id: invocation.caller_server_id,
                },
            ),
            ServiceMessage::ClientCompletion(completion) => self.on_client_completion(completion),
            ServiceMessage::ConnectionFlowControl(flow)
                if flow.connection_type == ConnectionFlowControl::CLIENT =>
            {
                self.on_flow_control(link, flow)
            }
            ServiceMessage::ErrorCompletion(error) => {
                if !self
                    .results
                    .complete(&error.invocation_id, Err(InvokeError::Failed(error.error)))
                {
                    self.results.take_route(&error.invocation_id);
                }
            }
            ServiceMessage::ServiceMapping(mapping) => tracing::debug!(
                invocation = %mapping.invocation_id,
                instance = %mapping.instance_id,
                "client invocation mapped"
            ),
            other => tracing::trace!("ignored service message {}", other.name()),
        }
    }

    /// OpenConnection: a client is now pinned to `link`.
    pub fn on_open(
        self: &Arc<Self>,
        link: &Arc<Link>,
        open: OpenConnection,
        methods: &Arc<dyn HubMethods>,
    ) {
        let client = Arc::new(Client::from_open(link, &open));
        let (jobs, rx) = mpsc::unbounded_channel();
        let previous = self.clients.lock().insert(
            open.connection_id.clone(),
            ClientEntry {
                client: client.clone(),
                jobs,
            },
        );
        match previous {
            Some(old) => {
                old.client.abandon_streams();
                old.client.link.clients.fetch_sub(1, Ordering::Relaxed)
            }
            None => self.info.clients.fetch_add(1, Ordering::Relaxed),
        };
        link.clients.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(worker(self.clone(), client, rx, methods.clone()));
    }

    /// The service's queue for a client is backed up (Pause) or drained (Resume). A pause is
    /// acknowledged once, as the SDK does; until the resume, streams to the client wait.
    fn on_flow_control(&self, link: &Arc<Link>, flow: ConnectionFlowControl) {
        let Some(client) = self.client(&flow.connection_id) else {
            return;
        };
        match flow.operation {
            ConnectionFlowControl::PAUSE => {
                client.set_paused(true);
                link.send(ConnectionFlowControl {
                    operation: ConnectionFlowControl::PAUSE_ACK,
                    ext: Extensions::default(),
                    ..flow
                });
            }
            ConnectionFlowControl::RESUME => client.set_paused(false),
            _ => {}
        }
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
                stream_ids,
                ..
            } => {
                let streams = client.open_uploads(stream_ids.as_deref().unwrap_or_default());
                let _ = jobs.send(Job::Invoke {
                    invocation_id,
                    target,
                    arguments,
                    streams,
                });
            }
            HubMessage::StreamInvocation {
                invocation_id,
                target,
                arguments,
                stream_ids,
                ..
            } => {
                let job = match client.start_streaming(&invocation_id) {
                    Some(cancel) => Job::Stream {
                        streams: client.open_uploads(stream_ids.as_deref().unwrap_or_default()),
                        invocation_id,
                        target,
                        arguments,
                        cancel,
                    },
                    None => Job::Reject {
                        error: format!("Invocation ID '{invocation_id}' is already in use."),
                        invocation_id,
                    },
                };
                let _ = jobs.send(job);
            }
            HubMessage::StreamItem {
                invocation_id,
                item,
                ..
            } => client.upload_item(&invocation_id, item),
            HubMessage::CancelInvocation { invocation_id, .. } => {
                client.cancel_streaming(&invocation_id)
            }
            HubMessage::Completion {
                invocation_id,
                result,
                ..
            } => {
                let error = match &result {
                    CompletionResult::Error(e) => Some(e.clone()),
                    _ => None,
                };
                if !client.end_upload(&invocation_id, error) {
                    self.on_client_result(client, &invocation_id, result, framed);
                }
            }
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
async fn worker(
    hub: Arc<Hub>,
    client: Arc<Client>,
    mut jobs: mpsc::UnboundedReceiver<Job>,
    methods: Arc<dyn HubMethods>,
) {
    let start = tokio::time::Instant::now() + CLIENT_PING_INTERVAL;
    let mut pings = tokio::time::interval_at(start, CLIENT_PING_INTERVAL);
    loop {
        tokio::select! {
            job = jobs.recv() => match job {
                None => return,
                Some(Job::Invoke { invocation_id, target, arguments, streams }) => {
                    let context = context_for(&hub, &client);
                    let caller = caller_of(&client);
                    let uploads = !streams.is_empty();
                    let run = methods.invoke(context, caller, target, arguments, streams);
                    let client = client.clone();
                    let finish = async move {
                        let outcome = run.await;
                        if let Some(id) = invocation_id {
                            let result = match outcome {
                                Ok(None) => CompletionResult::Void,
                                Ok(Some(value)) => CompletionResult::Value(value),
                                Err(error) => CompletionResult::Error(error),
                            };
                            complete(&client, &id, result);
                        }
                    };
                    // A method reading uploads runs in the background, as in ASP.NET Core:
                    // the client may invoke more while it streams.
                    if uploads {
                        tokio::spawn(finish);
                    } else {
                        finish.await;
                    }
                }
                Some(Job::Stream { invocation_id, target, arguments, streams, cancel }) => {
                    let context = context_for(&hub, &client);
                    let caller = caller_of(&client);
                    match methods.stream(context, caller, target, arguments, streams).await {
                        Ok(items) => {
                            tokio::spawn(send_stream(client.clone(), invocation_id, items, cancel));
                        }
                        Err(error) => {
                            drop(cancel);
                            client.streaming_done(&invocation_id);
                            complete(&client, &invocation_id, CompletionResult::Error(error));
                        }
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

fn context_for(hub: &Arc<Hub>, client: &Client) -> HubContext {
    HubContext {
        hub: hub.clone(),
        scope: Some(client.link.clone()),
    }
}

fn caller_of(client: &Client) -> Caller {
    Caller {
        connection_id: client.id.clone(),
        user_id: client.user.clone(),
        instance_id: client.instance_id.clone(),
    }
}

/// Bytes a server connection may have queued before streams to clients wait for its socket.
const STREAM_BACKLOG: usize = 1024 * 1024;

/// Sends a stream's items to the client as StreamItems, then a Completion (also after a
/// cancel, as ASP.NET Core does; the client ignores it). A cancel drops the stream, which is
/// how the method learns of it.
async fn send_stream(
    client: Arc<Client>,
    invocation_id: String,
    mut items: ItemStream,
    mut cancel: oneshot::Receiver<()>,
) {
    let format = client.format().unwrap_or(Format::Json);
    let mut error = None;
    let mut sent = 0u64;
    loop {
        let next = async {
            // A producer that is always ready must not hold this thread, nor outrun the
            // socket to the service.
            if sent % 64 == 63 {
                tokio::task::yield_now().await;
            }
            client.link.wait_room(STREAM_BACKLOG).await;
            client.resumed().await;
            items.next().await
        };
        tokio::select! {
            // A cancel wins over an item that is ready at the same time.
            biased;
            _ = &mut cancel => break,
            item = next => match item {
                Some(Ok(item)) => {
                    let message = HubMessage::StreamItem {
                        headers: Vec::new(),
                        invocation_id: invocation_id.clone(),
                        item,
                    };
                    if !client.send_raw(encode_message(format, &message)) {
                        break;
                    }
                    sent += 1;
                }
                Some(Err(e)) => {
                    error = Some(e);
                    break;
                }
                None => break,
            },
        }
    }
    drop(items);
    drop(cancel);
    client.streaming_done(&invocation_id);
    let result = error.map_or(CompletionResult::Void, CompletionResult::Error);
    complete(&client, &invocation_id, result);
}

fn complete(client: &Client, invocation_id: &str, result: CompletionResult<Value>) {
    let format = client.format().unwrap_or(Format::Json);
    client.send_raw(encode_completion(format, invocation_id, result));
}
