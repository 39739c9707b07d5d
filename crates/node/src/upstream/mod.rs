//! Serverless upstream webhooks: what serverless clients do is POSTed to the app's HTTP
//! endpoint (Azure Functions' SignalR trigger, or anything speaking the same protocol), as
//! Azure's "upstream settings" do.
//!
//! # Events
//! - `connections`/`connected` once the client's handshake succeeded; `connections`/
//!   `disconnected` when it ends (`{"type":11}`, with `"error"` when it did not end cleanly).
//! - `messages`/`{target}` for each Invocation, the body being the message without framing in
//!   the client's protocol. A blocking invocation is answered with the upstream's framed
//!   Completion, or with one the service writes (see `reply`). A StreamInvocation gets an
//!   error completion. With no template for the invocation, the client is closed as before.
//!
//! # Ordering and isolation (a choice: Azure sends a client's events concurrently)
//! A connection's events are sent one at a time, in order: `connected`, its invocations as
//! they came, `disconnected` last. So a hub method sees its client connected first and one
//! client's calls in the order made. They wait on a per-connection queue drained by a task
//! that exists only while there is something to send (an idle connection has no task); the
//! connection's reader only queues, so it never waits for the upstream, and a slow upstream
//! delays only the later events of the connections waiting on it. Requests to one origin are
//! bounded (`upstream.max_concurrency`); every request, its wait for a slot included, ends
//! within `upstream.timeout`. Queued invocations are bounded per connection by
//! `limits.max_pending_bytes_per_connection`; past it they get an error completion.
//!
//! # Layout
//! - `template`: patterns and URL templates, checked at start.
//! - `connection`: a client's header values and its queue.
//! - `request`: the shared HTTP client and one bounded POST.
//! - `reply`: an invocation's answer as a frame for the client.

mod connection;
mod reply;
mod request;
mod template;

pub(crate) use connection::ClientUpstream;
pub(crate) use template::Template;

use std::sync::Arc;

use bytes::Bytes;
use reqwest::header::HeaderMap;
use switchyard_auth::{upstream_signature, AccessKeys};
use switchyard_core::CloseReason;
use switchyard_hub_protocol::{Format, Peek};

use crate::client::ClientConnection;
use crate::metrics::{Metrics, UpstreamLabel};
use crate::node::Node;
use connection::{Event, Pushed, Queued};
use request::{header, Answer, Failure, Sender};
use template::Templates;

pub(crate) const CONNECTIONS: &str = "connections";
pub(crate) const MESSAGES: &str = "messages";
pub(crate) const CONNECTED: &str = "connected";
pub(crate) const DISCONNECTED: &str = "disconnected";

const TYPE_STREAM_INVOCATION: u8 = 4;
const JSON: &str = "application/json";
const MSGPACK: &str = "application/x-msgpack";

/// The node's upstream: templates, the HTTP client, and what signs requests.
pub(crate) struct Upstream {
    templates: Templates,
    sender: Sender,
    keys: AccessKeys,
    metrics: Arc<Metrics>,
}

impl Upstream {
    /// `None` when no template is configured.
    pub(crate) fn new(
        config: &crate::config::Upstream,
        keys: AccessKeys,
        metrics: Arc<Metrics>,
    ) -> Option<Arc<Upstream>> {
        let templates = Templates::new(&config.templates);
        if templates.is_empty() {
            return None;
        }
        Some(Arc::new(Upstream {
            templates,
            sender: Sender::new(
                config.timeout,
                config.max_concurrency,
                config.max_response_size,
            ),
            keys,
            metrics,
        }))
    }

    /// Whether clients of `hub` need upstream state (some template may match their events).
    pub(crate) fn serves_hub(&self, hub: &str) -> bool {
        self.templates.serves_hub(hub)
    }

    /// A connection event with its URL, if a template takes it.
    fn connection_event(&self, client: &ClientConnection, event: Event) -> Option<Queued> {
        let state = client.upstream.as_deref()?;
        let hub = hub_of(client, state);
        let template = self.templates.find(hub, CONNECTIONS, event.name())?;
        let url = template.url(hub, CONNECTIONS, event.name());
        Some(Queued { url, event })
    }

    fn enqueue(
        &self,
        node: &Node,
        client: &ClientConnection,
        state: &ClientUpstream,
        queued: Queued,
        last: bool,
    ) {
        let budget = node.config.limits.max_pending_bytes_per_connection;
        self.pushed(node, client, state, state.push(queued, budget, last));
    }

    /// Starts the draining task, or answers what was refused.
    fn pushed(
        &self,
        node: &Node,
        client: &ClientConnection,
        state: &ClientUpstream,
        pushed: Pushed,
    ) {
        match pushed {
            Pushed::Queued => {}
            Pushed::Start => {
                // The task owns the connection until the queue is empty; found in the table,
                // which still holds it (the end of a connection is queued before it leaves).
                let me = node
                    .client(&client.key)
                    .filter(|c| std::ptr::eq(&**c, client));
                let runtime = tokio::runtime::Handle::try_current();
                match (me, runtime, node.upstream.clone()) {
                    (Some(me), Ok(runtime), Some(upstream)) => {
                        runtime.spawn(drain(upstream, me));
                    }
                    _ => state.abandon(),
                }
            }
            Pushed::Refused(event) => {
                self.count(event.category(), "rejected");
                if let Event::Invocation {
                    invocation_id: Some(id),
                    format,
                    ..
                } = &event
                {
                    let text = "Invocation failed, too many invocations of this connection are \
                                waiting for the upstream";
                    client
                        .connection
                        .outbound()
                        .push(reply::refused(*format, id, text));
                }
            }
        }
    }

    /// Sends one event and answers the client if it waits for a result.
    async fn deliver(&self, client: &ClientConnection, state: &ClientUpstream, queued: Queued) {
        let Queued { url, event } = queued;
        let connection_id = client.connection.id().as_str();
        let mut headers = HeaderMap::new();
        header(&mut headers, "x-asrs-connection-id", connection_id);
        header(&mut headers, "x-asrs-hub", hub_of(client, state));
        header(&mut headers, "x-asrs-category", event.category());
        header(&mut headers, "x-asrs-event", event.name());
        header(
            &mut headers,
            "x-asrs-signature",
            &upstream_signature(&self.keys, connection_id),
        );
        if let Some(user) = client.connection.user() {
            header(&mut headers, "x-asrs-user-id", user.as_str());
        }
        if !state.claims().is_empty() {
            header(&mut headers, "x-asrs-user-claims", state.claims());
        }
        if !state.query().is_empty() {
            header(&mut headers, "x-asrs-client-query", state.query());
        }
        let (body, content_type) = match &event {
            Event::Connected => (Bytes::from_static(b"{\"type\":10}"), JSON),
            Event::Disconnected { error: None } => (Bytes::from_static(b"{\"type\":11}"), JSON),
            Event::Disconnected { error: Some(error) } => (
                Bytes::from(serde_json::json!({"type": 11, "error": error}).to_string()),
                JSON,
            ),
            Event::Invocation { body, format, .. } => (
                body.clone(),
                if *format == Format::MessagePack {
                    MSGPACK
                } else {
                    JSON
                },
            ),
        };
        header(&mut headers, "content-type", content_type);
        let answer = self.sender.post(&url, headers, body).await;
        let outcome = match &event {
            Event::Invocation {
                invocation_id: Some(id),
                format,
                ..
            } => {
                let (frame, outcome) = reply::completion(
                    *format,
                    id,
                    &answer,
                    self.sender.timeout(),
                    self.sender.max_response_size(),
                );
                if client.connection.outbound().push(frame) {
                    self.metrics.frames_delivered.inc();
                }
                outcome
            }
            _ => plain_outcome(&answer),
        };
        if outcome != "ok" {
            let origin = reqwest::Url::parse(&url)
                .map(|u| u.origin().ascii_serialization())
                .unwrap_or_default();
            let detail = match &answer {
                Ok(answer) => format!("status {}", answer.status),
                Err(Failure::Unreachable(text)) => text.clone(),
                Err(other) => other.outcome().to_string(),
            };
            tracing::warn!(
                connection = connection_id,
                category = event.category(),
                event = event.name(),
                %origin,
                outcome,
                %detail,
                "upstream request failed"
            );
        }
        self.count(event.category(), outcome);
    }

    fn count(&self, category: &'static str, outcome: &'static str) {
        self.metrics
            .upstream_requests
            .get_or_create(&UpstreamLabel { category, outcome })
            .inc();
    }
}

/// The outcome of a request whose answer is not passed on.
fn plain_outcome(answer: &Result<Answer, Failure>) -> &'static str {
    match answer {
        Ok(answer) if (200..300).contains(&answer.status) => "ok",
        Ok(_) => "error_status",
        Err(failure) => failure.outcome(),
    }
}

/// The hub as the client wrote it in its connect request.
fn hub_of<'a>(client: &'a ClientConnection, state: &'a ClientUpstream) -> &'a str {
    state.hub().unwrap_or_else(|| client.hub.name().as_str())
}

/// Sends a connection's queued events in order, then ends.
async fn drain(upstream: Arc<Upstream>, client: Arc<ClientConnection>) {
    let Some(state) = client.upstream.as_deref() else {
        return;
    };
    while let Some(queued) = state.next() {
        upstream.deliver(&client, state, queued).await;
    }
}

/// A serverless client completed its handshake.
pub(crate) fn client_opened(node: &Node, client: &ClientConnection) {
    let (Some(upstream), Some(state)) = (&node.upstream, client.upstream.as_deref()) else {
        return;
    };
    let connected = upstream.connection_event(client, Event::Connected);
    if let Some(pushed) = state.open(connected) {
        upstream.pushed(node, client, state, pushed);
    }
}

/// A serverless client invoked a hub method. Err: no template takes it, so the client is
/// closed (as Azure does without an upstream).
pub(crate) fn client_invoked(
    node: &Node,
    client: &ClientConnection,
    format: Format,
    message: &Peek,
    body: Bytes,
) -> Result<(), CloseReason> {
    let (Some(upstream), Some(state)) = (&node.upstream, client.upstream.as_deref()) else {
        return Err(CloseReason::InvocationNotSupported);
    };
    let target = message.target.as_deref().unwrap_or_default();
    let hub = hub_of(client, state);
    let Some(template) = upstream.templates.find(hub, MESSAGES, target) else {
        return Err(CloseReason::InvocationNotSupported);
    };
    if message.message_type == TYPE_STREAM_INVOCATION {
        if let Some(id) = &message.invocation_id {
            let text = "Invocation failed, streaming is not supported in serverless mode";
            client
                .connection
                .outbound()
                .push(reply::refused(format, id, text));
        }
        return Ok(());
    }
    let url = template.url(hub, MESSAGES, target);
    let event = Event::Invocation {
        target: target.into(),
        invocation_id: message.invocation_id.as_deref().map(Into::into),
        body,
        format,
    };
    upstream.enqueue(node, client, state, Queued { url, event }, false);
    Ok(())
}

/// A client ended: `disconnected`, if the upstream was told it connected.
pub(crate) fn client_finished(node: &Node, client: &ClientConnection, reason: &CloseReason) {
    let (Some(upstream), Some(state)) = (&node.upstream, client.upstream.as_deref()) else {
        return;
    };
    if !state.close() {
        return;
    }
    let error = match reason {
        CloseReason::ClientClosed | CloseReason::ClosedByApi(_) => None,
        other => Some(other.to_string()),
    };
    if let Some(queued) = upstream.connection_event(client, Event::Disconnected { error }) {
        upstream.enqueue(node, client, state, queued, true);
    }
}
