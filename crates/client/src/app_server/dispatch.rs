//! What clients pinned to this app server do: the service announces them (OpenConnection),
//! carries their bytes (ConnectionData), and each client's invocations run one at a time on a
//! task of its own, calling the application's [`HubMethods`], as ASP.NET Core does by default.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;
use switchyard_hub_protocol::{
    encode_completion, handshake, ping, CompletionResult, Format, HubMessage,
};
use switchyard_service_protocol::{
    ClientCompletion, ConnectionData, Extensions, OpenConnection, ServiceMessage,
};
use tokio::sync::mpsc;

use super::client::{result_value, Client, ClientEntry, Event, Job, CLIENT_PING_INTERVAL};
use super::context::HubContext;
use super::hub::Hub;
use super::link::Link;
use super::methods::{Caller, HubMethods};
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
            Some(old) => old.client.link.clients.fetch_sub(1, Ordering::Relaxed),
            None => self.info.clients.fetch_add(1, Ordering::Relaxed),
        };
        link.clients.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(worker(self.clone(), client, rx, methods.clone()));
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
                Some(Job::Invoke { invocation_id, target, arguments }) => {
                    let context = HubContext {
                        hub: hub.clone(),
                        scope: Some(client.link.clone()),
                    };
                    let caller = Caller {
                        connection_id: client.id.clone(),
                        user_id: client.user.clone(),
                        instance_id: client.instance_id.clone(),
                    };
                    let outcome = methods.invoke(context, caller, target, arguments).await;
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
