//! Serverless upstream webhooks: what serverless clients do is POSTed to the app's HTTP
//! endpoint (Azure Functions' SignalR trigger, or anything speaking the same protocol), as
//! Azure's "upstream settings" do.
//!
//! # Events
//! - `connections`/`connected` once the client's handshake succeeded and the backplane
//!   subscriptions that reach it are live (so a send answering it arrives); `connections`/
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
//! - here: [`Upstream`], and [`UpstreamClient`], the narrow view of a client it works with
//!   (templates are parsed with the config: `crate::config::Templates`).
//! - `client_state`: a client's header values and its queue.
//! - `request`: the shared HTTP client and one bounded POST.
//! - `reply`: an invocation's answer as a frame for the client.

mod client_state;
mod reply;
mod request;

pub(crate) use client_state::ClientUpstream;

use std::sync::Arc;

use bytes::Bytes;
use reqwest::header::HeaderMap;
use switchyard_auth::{upstream_signature, AccessKeys};
use switchyard_core::{CloseReason, HubName};
use switchyard_hub_protocol::{message_type, Format, Peek};
use switchyard_router::{Connection, Hub, TrafficTotals};

use crate::config::{Templates, ValidConfig};
use crate::live_trace::{TraceEvent, Tracer};
use crate::metrics::{Metrics, UpstreamLabel};
use client_state::{Event, Pushed, Queued};
use request::{header, Answer, Failure, Sender};

pub(crate) const CONNECTIONS: &str = "connections";
pub(crate) const MESSAGES: &str = "messages";
pub(crate) const CONNECTED: &str = "connected";
pub(crate) const DISCONNECTED: &str = "disconnected";

const JSON: &str = "application/json";
const MSGPACK: &str = "application/x-msgpack";

/// What the upstream needs of a client connection.
pub(crate) trait UpstreamClient: Send + Sync + 'static {
    /// The client as the router knows it: id, user, outbound queue.
    fn connection(&self) -> &Connection;
    fn hub_name(&self) -> &HubName;
    /// Its hub, which counts what is delivered to it.
    fn hub(&self) -> &Hub;
    /// Present for clients of a hub some template may serve.
    fn upstream(&self) -> Option<&ClientUpstream>;
}

/// Waits for the node's subscriptions so far (see `Executor::settle`).
pub(crate) type Settle = Arc<dyn Fn() -> switchyard_backplane::Barrier + Send + Sync>;

/// The node's upstream: templates, the HTTP client, and what signs requests.
pub(crate) struct Upstream {
    templates: Templates,
    sender: Sender,
    keys: AccessKeys,
    metrics: Arc<Metrics>,
    /// Failed and refused requests show in a live trace of the client's hub.
    tracer: Arc<Tracer>,
    /// Resolves once the node's subscriptions so far are live on the backplane (bounded).
    settle: Settle,
    /// Bytes of invocations one connection may have waiting.
    max_pending_bytes: usize,
}

impl Upstream {
    /// `None` when no template is configured.
    pub(crate) fn new(
        config: &ValidConfig,
        keys: AccessKeys,
        metrics: Arc<Metrics>,
        tracer: Arc<Tracer>,
        settle: Settle,
    ) -> Option<Arc<Upstream>> {
        let templates = config.templates().clone();
        if templates.is_empty() {
            return None;
        }
        let settings = &config.upstream;
        Some(Arc::new(Upstream {
            templates,
            sender: Sender::new(
                settings.timeout,
                settings.max_concurrency,
                settings.max_response_size,
                config.upstream_roots(),
            ),
            keys,
            metrics,
            tracer,
            settle,
            max_pending_bytes: config.limits.max_pending_bytes_per_connection,
        }))
    }

    /// Whether clients of `hub` need upstream state (some template may match their events).
    pub(crate) fn serves_hub(&self, hub: &str) -> bool {
        self.templates.serves_hub(hub)
    }

    /// A connection event with its URL, if a template takes it.
    fn connection_event(&self, client: &impl UpstreamClient, event: Event) -> Option<Queued> {
        let state = client.upstream()?;
        let hub = hub_of(client, state);
        let template = self.templates.find(hub, CONNECTIONS, event.name())?;
        let url = template.url(hub, CONNECTIONS, event.name());
        Some(Queued { url, event })
    }

    fn enqueue<C: UpstreamClient>(
        self: &Arc<Self>,
        client: &Arc<C>,
        state: &ClientUpstream,
        queued: Queued,
        last: bool,
    ) {
        let pushed = state.push(queued, self.max_pending_bytes, last);
        self.pushed(client, state, pushed);
    }

    /// Starts the draining task, or answers what was refused.
    fn pushed<C: UpstreamClient>(
        self: &Arc<Self>,
        client: &Arc<C>,
        state: &ClientUpstream,
        pushed: Pushed,
    ) {
        match pushed {
            Pushed::Queued => {}
            Pushed::Start => {
                // The task owns the connection until the queue is empty.
                match tokio::runtime::Handle::try_current() {
                    Ok(runtime) => {
                        runtime.spawn(drain(self.clone(), client.clone()));
                    }
                    Err(_) => state.abandon(),
                }
            }
            Pushed::Refused(event) => {
                self.count(event.category(), "rejected");
                if self.tracer.on() {
                    self.trace_failure(
                        client.as_ref(),
                        &event,
                        "too many events of this connection wait for the upstream".into(),
                    );
                }
                if let Event::Invocation {
                    invocation_id: Some(id),
                    format,
                    ..
                } = &event
                {
                    let text = "Invocation failed, too many invocations of this connection are \
                                waiting for the upstream";
                    client
                        .connection()
                        .outbound()
                        .push(reply::refused(*format, id, text));
                }
            }
        }
    }

    /// Sends one event and answers the client if it waits for a result.
    async fn deliver(&self, client: &impl UpstreamClient, state: &ClientUpstream, queued: Queued) {
        let Queued { url, event } = queued;
        let connection_id = client.connection().id().as_str();
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
        if let Some(user) = client.connection().user() {
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
        if let Event::Connected = event {
            // A back end often answers `connected` with a send to the connection, maybe
            // through another node: the connection's subscriptions must be live first (its
            // handshake response waits for the same).
            (self.settle)().await;
        }
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
                let mut totals = TrafficTotals::default();
                totals.add_out(frame.len());
                if client.hub().deliver(client.connection(), frame, &totals) {
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
            if self.tracer.on() {
                self.trace_failure(client, &event, format!("{origin}: {outcome}, {detail}"));
            }
        }
        self.count(event.category(), outcome);
    }

    /// An `error` event for the live trace of the client's hub: an upstream request failed
    /// (or was refused), for the client, with what happened.
    #[cold]
    fn trace_failure(&self, client: &impl UpstreamClient, event: &Event, detail: String) {
        self.tracer.emit(client.hub_name(), || {
            let mut traced = TraceEvent::new("error");
            traced.connection_id = Some(client.connection().id().to_string());
            traced.user_id = client.connection().user().map(|u| u.to_string());
            traced.reason = Some("upstream_failed");
            traced.target = Some(event.name().to_string());
            traced.detail = Some(format!(
                "upstream {} {}: {detail}",
                event.category(),
                event.name()
            ));
            traced
        });
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
fn hub_of<'a>(client: &'a impl UpstreamClient, state: &'a ClientUpstream) -> &'a str {
    state.hub().unwrap_or_else(|| client.hub_name().as_str())
}

/// Sends a connection's queued events in order, then ends.
async fn drain(upstream: Arc<Upstream>, client: Arc<impl UpstreamClient>) {
    let Some(state) = client.upstream() else {
        return;
    };
    while let Some(queued) = state.next() {
        upstream.deliver(&*client, state, queued).await;
    }
}

impl Upstream {
    /// A serverless client completed its handshake.
    pub(crate) fn client_opened<C: UpstreamClient>(self: &Arc<Self>, client: &Arc<C>) {
        let Some(state) = client.upstream() else {
            return;
        };
        let connected = self.connection_event(&**client, Event::Connected);
        if let Some(pushed) = state.open(connected) {
            self.pushed(client, state, pushed);
        }
    }

    /// A serverless client invoked a hub method. Err: no template takes it, so the client is
    /// closed (as Azure does without an upstream). `Ok(true)`: the client's queue is past half
    /// its budget, and its transport should stop reading until it drains.
    pub(crate) fn client_invoked<C: UpstreamClient>(
        self: &Arc<Self>,
        client: &Arc<C>,
        format: Format,
        message: &Peek,
        body: Bytes,
    ) -> Result<bool, CloseReason> {
        let Some(state) = client.upstream() else {
            return Err(CloseReason::InvocationNotSupported);
        };
        let target = message.target.as_deref().unwrap_or_default();
        let hub = hub_of(&**client, state);
        let Some(template) = self.templates.find(hub, MESSAGES, target) else {
            return Err(CloseReason::InvocationNotSupported);
        };
        if message.message_type == message_type::STREAM_INVOCATION {
            if let Some(id) = &message.invocation_id {
                let text = "Invocation failed, streaming is not supported in serverless mode";
                client
                    .connection()
                    .outbound()
                    .push(reply::refused(format, id, text));
            }
            return Ok(false);
        }
        let url = template.url(hub, MESSAGES, target);
        let event = Event::Invocation {
            target: target.into(),
            invocation_id: message.invocation_id.as_deref().map(Into::into),
            body,
            format,
        };
        self.enqueue(client, state, Queued { url, event }, false);
        Ok(state.congested())
    }

    /// A client ended: `disconnected`, if the upstream was told it connected.
    pub(crate) fn client_finished<C: UpstreamClient>(
        self: &Arc<Self>,
        client: &Arc<C>,
        reason: &CloseReason,
    ) {
        let Some(state) = client.upstream() else {
            return;
        };
        if !state.close() {
            return;
        }
        let error = match reason {
            CloseReason::ClientClosed | CloseReason::ClosedByApi(_) => None,
            other => Some(other.to_string()),
        };
        if let Some(queued) = self.connection_event(&**client, Event::Disconnected { error }) {
            self.enqueue(client, state, queued, true);
        }
    }
}
