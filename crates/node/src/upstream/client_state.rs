//! What one serverless client keeps for its upstream: the header values fixed at connect, and
//! the queue that sends its events one at a time.
//!
//! Only clients of a hub some template can match have this (boxed, so others pay a pointer).

use std::collections::VecDeque;
use std::sync::OnceLock;

use axum::http::Uri;
use bytes::Bytes;
use parking_lot::Mutex;
use switchyard_auth::VerifiedToken;
use switchyard_hub_protocol::Format;
use tokio::sync::Notify;

/// One event waiting for its request.
pub(crate) struct Queued {
    pub(crate) url: String,
    pub(crate) event: Event,
}

/// What an event costs while it waits beyond its body and URL: the queue entry and the
/// request built from it (headers, signature). Counted so that many tiny invocations are
/// charged for the memory and the requests they really cost.
const EVENT_OVERHEAD: usize = 512;

impl Queued {
    /// Bytes counted against the connection's queue budget.
    fn size(&self) -> usize {
        self.event.body_len() + self.url.len() + EVENT_OVERHEAD
    }
}

pub(crate) enum Event {
    Connected,
    Disconnected {
        error: Option<String>,
    },
    Invocation {
        target: Box<str>,
        invocation_id: Option<Box<str>>,
        /// The message as the client sent it, without framing.
        body: Bytes,
        format: Format,
    },
}

impl Event {
    pub(crate) fn category(&self) -> &'static str {
        match self {
            Event::Connected | Event::Disconnected { .. } => super::CONNECTIONS,
            Event::Invocation { .. } => super::MESSAGES,
        }
    }

    pub(crate) fn name(&self) -> &str {
        match self {
            Event::Connected => super::CONNECTED,
            Event::Disconnected { .. } => super::DISCONNECTED,
            Event::Invocation { target, .. } => target,
        }
    }

    fn body_len(&self) -> usize {
        match self {
            Event::Invocation { body, .. } => body.len(),
            _ => 0,
        }
    }
}

#[derive(Default)]
struct Queue {
    events: VecDeque<Queued>,
    bytes: usize,
    /// A task is draining `events`.
    running: bool,
    /// The handshake completed: the upstream is told of the connection.
    opened: bool,
    /// The connection ended: nothing more is queued.
    closed: bool,
}

/// What [`ClientUpstream::push`] did.
pub(crate) enum Pushed {
    /// Queued; start a task to drain the queue.
    Start,
    /// Queued behind events a task is already sending.
    Queued,
    /// Not queued: over the byte budget, or the connection has ended.
    Refused(Event),
}

pub(crate) struct ClientUpstream {
    /// `X-ASRS-User-Claims`: the token's claims as `type: value, type: value`.
    claims: Box<str>,
    /// From the first transport request: the hub as the client wrote it, and the query.
    connect: OnceLock<(Box<str>, Box<str>)>,
    queue: Mutex<Queue>,
    /// Past these many queued bytes the client's transport stops reading until the queue
    /// drains below them (half the connection's budget): a client that invokes faster than
    /// its upstream answers is held back rather than having invocations dropped.
    hold_above: usize,
    /// Woken as the queue drains, for a transport that is held back.
    drained: Notify,
}

impl ClientUpstream {
    /// `budget`: bytes of events the connection may have waiting.
    pub(crate) fn new(token: &VerifiedToken, budget: usize) -> Box<ClientUpstream> {
        let claims = token
            .claims
            .iter()
            .map(|(kind, value)| format!("{kind}: {value}"))
            .collect::<Vec<_>>()
            .join(", ");
        Box::new(ClientUpstream {
            claims: claims.into_boxed_str(),
            connect: OnceLock::new(),
            queue: Mutex::new(Queue::default()),
            hold_above: budget / 2,
            drained: Notify::new(),
        })
    }

    /// Keeps the hub and query of the first transport request (later ones are the same
    /// connection's polls and sends).
    pub(crate) fn capture(&self, uri: &Uri) {
        if self.connect.get().is_some() {
            return;
        }
        let raw = uri.query().unwrap_or("");
        let hub = url::form_urlencoded::parse(raw.as_bytes())
            .find(|(k, _)| k.eq_ignore_ascii_case("hub"))
            .map(|(_, v)| v.into_owned())
            .unwrap_or_default();
        let query = crate::http::scrub_query(raw);
        let _ = self.connect.set((hub.into(), query.into()));
    }

    pub(crate) fn claims(&self) -> &str {
        &self.claims
    }

    /// The hub as connected, if known.
    pub(crate) fn hub(&self) -> Option<&str> {
        self.connect
            .get()
            .map(|(hub, _)| &**hub)
            .filter(|h| !h.is_empty())
    }

    pub(crate) fn query(&self) -> &str {
        self.connect.get().map_or("", |(_, query)| query)
    }

    /// Marks the connection open and queues `connected` (when a template takes it) in one
    /// step, so an end racing with the handshake is queued after it. `None` when nothing was
    /// queued: no `connected` was given, or the connection already ended (it then stays
    /// unopened, and nothing is sent for it).
    pub(crate) fn open(&self, connected: Option<Queued>) -> Option<Pushed> {
        let mut queue = self.queue.lock();
        if queue.closed {
            return None;
        }
        queue.opened = true;
        connected.map(|queued| Self::push_locked(&mut queue, queued))
    }

    /// Marks the connection ended and drops the invocations still waiting (nobody is left
    /// to answer, and a client must not keep the upstream busy after it left). True if it
    /// had been opened, so the upstream must hear of the end; then `disconnected` is the
    /// last event queued.
    pub(crate) fn close(&self) -> bool {
        let mut queue = self.queue.lock();
        let was_open = queue.opened && !queue.closed;
        queue.closed = true;
        queue
            .events
            .retain(|queued| !matches!(queued.event, Event::Invocation { .. }));
        queue.bytes = queue.events.iter().map(Queued::size).sum();
        drop(queue);
        self.drained.notify_waiters();
        was_open
    }

    /// Queues an event. Invocations wait within `budget` bytes (at least one is always
    /// accepted); connection events always fit. `last` queues even after the close (the
    /// `disconnected` event itself).
    pub(crate) fn push(&self, queued: Queued, budget: usize, last: bool) -> Pushed {
        let mut queue = self.queue.lock();
        let size = queued.size();
        let over_budget = !queue.events.is_empty() && queue.bytes + size > budget;
        if (queue.closed && !last) || over_budget {
            return Pushed::Refused(queued.event);
        }
        Self::push_locked(&mut queue, queued)
    }

    fn push_locked(queue: &mut Queue, queued: Queued) -> Pushed {
        queue.bytes += queued.size();
        queue.events.push_back(queued);
        if queue.running {
            Pushed::Queued
        } else {
            queue.running = true;
            Pushed::Start
        }
    }

    /// The next event to send; `None` ends the draining task (and frees the queue's memory).
    pub(crate) fn next(&self) -> Option<Queued> {
        let mut queue = self.queue.lock();
        let next = match queue.events.pop_front() {
            Some(queued) => {
                queue.bytes -= queued.size();
                Some(queued)
            }
            None => {
                queue.running = false;
                queue.events = VecDeque::new();
                None
            }
        };
        let room = queue.bytes <= self.hold_above;
        drop(queue);
        if room {
            self.drained.notify_waiters();
        }
        next
    }

    /// Whether the client's transport should stop reading: its queue is past half the budget.
    pub(crate) fn congested(&self) -> bool {
        let queue = self.queue.lock();
        queue.bytes > self.hold_above && !queue.closed
    }

    /// Returns once the queue has drained below half the budget (or the connection ended).
    pub(crate) async fn room(&self) {
        loop {
            let drained = self.drained.notified();
            tokio::pin!(drained);
            // Registered before the look, so a drain between the two is not missed.
            drained.as_mut().enable();
            if !self.congested() {
                return;
            }
            drained.await;
        }
    }

    /// A draining task could not be started: forget what was queued.
    pub(crate) fn abandon(&self) {
        let mut queue = self.queue.lock();
        queue.running = false;
        queue.events = VecDeque::new();
        queue.bytes = 0;
        drop(queue);
        self.drained.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client() -> Box<ClientUpstream> {
        ClientUpstream::new(
            &VerifiedToken {
                claims: vec![
                    ("asrs.s.uid".into(), "alice".into()),
                    ("role".into(), "admin".into()),
                ],
                expires_at: 0,
                audiences: vec![],
                signed_with: Default::default(),
            },
            1000,
        )
    }

    fn invocation(size: usize) -> Queued {
        Queued {
            url: String::new(),
            event: Event::Invocation {
                target: "t".into(),
                invocation_id: None,
                body: Bytes::from(vec![0; size]),
                format: Format::Json,
            },
        }
    }

    #[test]
    fn claims_and_query() {
        let c = client();
        assert_eq!(c.claims(), "asrs.s.uid: alice, role: admin");
        assert_eq!(c.hub(), None);
        c.capture(
            &"/client/?hub=Chat&id=secret&a=1&access_token=t&b=x%20y"
                .parse()
                .unwrap(),
        );
        c.capture(&"/client/?hub=other".parse().unwrap());
        assert_eq!(c.hub(), Some("Chat"));
        assert_eq!(c.query(), "?hub=Chat&a=1&b=x%20y");
    }

    #[test]
    fn queue_budget_and_lifecycle() {
        let c = client();
        // Over budget, but the first always fits.
        assert!(matches!(c.push(invocation(100), 10, false), Pushed::Start));
        assert!(matches!(
            c.push(invocation(1), 10, false),
            Pushed::Refused(_)
        ));
        assert!(c.next().is_some());
        // Each event costs its body, URL and EVENT_OVERHEAD.
        let budget = 2 * (5 + EVENT_OVERHEAD);
        assert!(matches!(
            c.push(invocation(5), budget, false),
            Pushed::Queued
        ));
        assert!(matches!(
            c.push(invocation(5), budget, false),
            Pushed::Queued
        ));
        assert!(matches!(
            c.push(invocation(5), budget, false),
            Pushed::Refused(_)
        ));
        assert!(c.next().is_some());
        assert!(c.next().is_some());
        assert!(c.next().is_none());
        // Ending drops waiting invocations but keeps connection events.
        let c = client();
        assert!(c.open(None).is_none());
        assert!(matches!(
            c.push(invocation(5), 1 << 20, false),
            Pushed::Start
        ));
        assert!(matches!(
            c.push(invocation(5), 1 << 20, false),
            Pushed::Queued
        ));
        assert!(c.close());
        assert!(c.next().is_none(), "the waiting invocations were dropped");
        // Closed before opened: nothing to tell.
        let c = client();
        assert!(!c.close());
        assert!(c.open(Some(invocation(1))).is_none());
        let c = client();
        assert!(c.open(None).is_none());
        assert!(c.close());
        assert!(!c.close());
        assert!(matches!(
            c.push(invocation(1), 10, false),
            Pushed::Refused(_)
        ));
    }
}
