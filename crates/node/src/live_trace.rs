//! Live trace: an operator switches it on for one hub, for a while, from the dashboard; the
//! hub's connection events, messages and errors then stream to whoever watches. While no hub
//! is traced the hot paths test one word that nobody writes ([`Tracer::on`]) and do nothing
//! else: events are only built behind that test.
//!
//! In a cluster the node whose dashboard starts a trace asks every node to trace the hub too;
//! they pass their events back to it (`dashboard::relay`), and they reach its watchers here
//! as [`Event::Forwarded`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::RwLock;
use serde::{Serialize, Serializer};
use serde_json::value::RawValue;
use switchyard_core::clock::unix_now_ms;
use switchyard_core::{HubName, Target};
use switchyard_hub_protocol::{message_type, peek, Format, FrameSplitter};
use tokio::sync::broadcast;
use tokio::sync::broadcast::error::TryRecvError;

use crate::config::Dashboard;

/// Events a watcher may fall behind by before it loses some (it is told how many).
const BACKLOG: usize = 4096;
/// How often watchers (a dashboard page's session, another node's relay) take what a trace
/// gathered: on a timer, not woken per event.
pub(crate) const LOOK_EVERY: Duration = Duration::from_millis(100);

/// One thing that happened in a traced hub, as the page and the JSON-lines download show it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TraceEvent {
    /// Unix milliseconds.
    pub(crate) time: i64,
    /// `connected`, `disconnected`, `message`, `error`.
    pub(crate) kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) connection_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) user_id: Option<String>,
    /// Messages: `in` (from a client) or `out` (to clients).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) direction: Option<&'static str>,
    /// Outbound messages: who they were sent to (`all`, `group:g`, `user:u`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) to: Option<String>,
    /// The hub method of an invocation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) target: Option<String>,
    /// The hub message type name (`invocation`, `completion`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) message_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) protocol: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) transport: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) size: Option<usize>,
    /// The start of the payload, only with `dashboard.trace_payloads`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) preview: Option<String>,
    /// Disconnects and errors: the close reason's code.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) reason: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) detail: Option<String>,
    /// `lost`: how many events a node could not pass on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) count: Option<u64>,
}

/// What a trace's watchers receive.
// Each event sits in its own Arc already: boxing the large variant would allocate twice.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Event {
    /// Happened on this node.
    Local(TraceEvent),
    /// Happened on another node, which sent it as JSON (with its `node`).
    Forwarded(Box<RawValue>),
}

/// An event as the page and other nodes read it: a local one gets this node's id in front.
#[derive(Serialize)]
pub(crate) struct OnNode<'a> {
    pub(crate) node: &'a str,
    #[serde(flatten)]
    pub(crate) event: &'a TraceEvent,
}

/// An [`Event`] for the page: local ones say they happened on `node`.
pub(crate) struct Shown<'a> {
    pub(crate) node: &'a str,
    pub(crate) event: &'a Event,
}

impl Serialize for Shown<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.event {
            Event::Local(event) => OnNode {
                node: self.node,
                event,
            }
            .serialize(serializer),
            Event::Forwarded(json) => json.serialize(serializer),
        }
    }
}

impl TraceEvent {
    pub(crate) fn new(kind: &'static str) -> TraceEvent {
        TraceEvent {
            time: unix_now_ms(),
            kind,
            connection_id: None,
            user_id: None,
            direction: None,
            to: None,
            target: None,
            message_type: None,
            protocol: None,
            transport: None,
            size: None,
            preview: None,
            reason: None,
            detail: None,
            count: None,
        }
    }
}

/// A hub being traced.
struct Traced {
    until: Instant,
    until_unix_ms: i64,
    events: broadcast::Sender<Arc<Event>>,
}

/// What watching a trace gives: its end (unix ms) and the events.
pub(crate) struct Watch {
    pub(crate) until_unix_ms: i64,
    pub(crate) events: broadcast::Receiver<Arc<Event>>,
}

/// What a watcher gathered since it last looked ([`Watch::news`]).
#[derive(Default)]
pub(crate) struct News {
    pub(crate) events: Vec<Arc<Event>>,
    /// Events it fell behind by.
    pub(crate) lost: u64,
    /// The trace has ended.
    pub(crate) ended: bool,
}

impl Watch {
    /// Takes what arrived since the last look, without waiting: watchers look on a timer
    /// rather than being woken per event, so a busy traced hub costs its publishers no
    /// wake-ups.
    pub(crate) fn news(&mut self) -> News {
        let mut news = News::default();
        loop {
            match self.events.try_recv() {
                Ok(event) => news.events.push(event),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Lagged(count)) => news.lost += count,
                Err(TryRecvError::Closed) => {
                    news.ended = true;
                    break;
                }
            }
        }
        news
    }
}

pub(crate) struct Tracer {
    /// How many hubs are traced: 0 almost always, and then read-only, so testing it on every
    /// message shares a clean cache line between cores.
    active: AtomicUsize,
    hubs: RwLock<HashMap<HubName, Traced>>,
    /// Bytes of payload an event shows; 0 = none (`dashboard.trace_payloads` off).
    preview_bytes: usize,
    max_duration: Duration,
}

impl Tracer {
    pub(crate) fn new(settings: &Dashboard) -> Tracer {
        Tracer {
            active: AtomicUsize::new(0),
            hubs: RwLock::new(HashMap::new()),
            preview_bytes: match settings.trace_payloads {
                true => settings.trace_preview_bytes,
                false => 0,
            },
            max_duration: settings.max_trace_duration,
        }
    }

    /// Whether any hub is traced. The only cost of tracing while it is off.
    #[inline]
    pub(crate) fn on(&self) -> bool {
        self.active.load(Ordering::Relaxed) != 0
    }

    /// Records an event of `hub` if it is traced (`make` runs only then).
    pub(crate) fn emit(&self, hub: &HubName, make: impl FnOnce() -> TraceEvent) {
        let hubs = self.hubs.read();
        if let Some(traced) = hubs.get(hub) {
            if traced.until > Instant::now() {
                // No receiver is fine: the page may be reconnecting.
                let _ = traced.events.send(Arc::new(Event::Local(make())));
            }
        }
    }

    /// Takes events another node passed on (a JSON array of events), while `hub` is traced
    /// here; false when it is not (or the JSON is not an array).
    pub(crate) fn forwarded(&self, hub: &HubName, events: &str) -> bool {
        let Ok(events) = serde_json::from_str::<Vec<Box<RawValue>>>(events) else {
            return false;
        };
        let hubs = self.hubs.read();
        let Some(traced) = hubs.get(hub).filter(|t| t.until > Instant::now()) else {
            return false;
        };
        for event in events {
            let _ = traced.events.send(Arc::new(Event::Forwarded(event)));
        }
        true
    }

    /// Starts (or extends, or shortens) the trace of `hub` for `duration`, capped at
    /// `dashboard.max_trace_duration`, and watches it.
    pub(crate) fn start(&self, hub: &HubName, duration: Duration) -> Watch {
        let duration = duration.clamp(Duration::from_secs(1), self.max_duration);
        let until = Instant::now() + duration;
        let until_unix_ms = unix_now_ms() + duration.as_millis() as i64;
        let mut hubs = self.hubs.write();
        let traced = hubs.entry(hub.clone()).or_insert_with(|| {
            self.active.fetch_add(1, Ordering::Relaxed);
            // Once per trace: in a cluster the trace is announced again every few seconds.
            tracing::info!(hub = %hub, seconds = duration.as_secs(), "live trace started");
            Traced {
                until,
                until_unix_ms,
                events: broadcast::channel(BACKLOG).0,
            }
        });
        traced.until = until;
        traced.until_unix_ms = until_unix_ms;
        Watch {
            until_unix_ms,
            events: traced.events.subscribe(),
        }
    }

    /// Watches the trace of `hub` if one runs.
    pub(crate) fn watch(&self, hub: &HubName) -> Option<Watch> {
        let hubs = self.hubs.read();
        hubs.get(hub).map(|traced| Watch {
            until_unix_ms: traced.until_unix_ms,
            events: traced.events.subscribe(),
        })
    }

    /// Ends the trace of `hub`; its watchers see their stream end.
    pub(crate) fn stop(&self, hub: &HubName) -> bool {
        let stopped = self.hubs.write().remove(hub).is_some();
        if stopped {
            self.active.fetch_sub(1, Ordering::Relaxed);
            tracing::info!(hub = %hub, "live trace stopped");
        }
        stopped
    }

    /// Ends the traces whose time is up. Run every second.
    pub(crate) fn sweep(&self, now: Instant) {
        if !self.on() {
            return;
        }
        let mut hubs = self.hubs.write();
        let before = hubs.len();
        hubs.retain(|hub, traced| {
            let keep = traced.until > now;
            if !keep {
                tracing::info!(hub = %hub, "live trace ended (time limit)");
            }
            keep
        });
        self.active
            .fetch_sub(before - hubs.len(), Ordering::Relaxed);
    }

    /// When the trace of `hub` ends (unix ms), while one runs.
    pub(crate) fn until(&self, hub: &HubName) -> Option<i64> {
        self.hubs.read().get(hub).map(|traced| traced.until_unix_ms)
    }

    /// The traced hubs and when each trace ends (unix ms).
    pub(crate) fn traced(&self) -> Vec<(HubName, i64)> {
        let hubs = self.hubs.read();
        hubs.iter()
            .map(|(hub, traced)| (hub.clone(), traced.until_unix_ms))
            .collect()
    }

    /// Fills a message event from one hub message body: its type, method, size and (when
    /// allowed) the start of its payload.
    pub(crate) fn describe(&self, event: &mut TraceEvent, format: Format, body: &[u8]) {
        event.size = Some(body.len());
        event.protocol = Some(format.name());
        match peek(format, body) {
            Ok(peeked) => {
                event.message_type = Some(message_type::name(peeked.message_type));
                event.target = peeked.target;
            }
            Err(error) => event.detail = Some(format!("unreadable message: {error}")),
        }
        if self.preview_bytes > 0 {
            let shown = &body[..body.len().min(self.preview_bytes)];
            event.preview = Some(match format {
                Format::Json => String::from_utf8_lossy(shown).into_owned(),
                Format::MessagePack => shown.iter().map(|b| format!("{b:02x}")).collect(),
            });
        }
    }
}

/// Whether a hub message type is transport chatter a trace leaves out: pings, acks,
/// sequences.
pub(crate) fn is_chatter_type(kind: u8) -> bool {
    matches!(
        kind,
        message_type::PING | message_type::ACK | message_type::SEQUENCE
    )
}

/// [`is_chatter_type`] of a message body.
pub(crate) fn is_chatter(format: Format, body: &[u8]) -> bool {
    peek(format, body).is_ok_and(|peeked| is_chatter_type(peeked.message_type))
}

/// The bodies of the whole hub messages in `framed` (what a send or a relay carries).
pub(crate) fn bodies(format: Format, framed: &[u8]) -> Vec<&[u8]> {
    let splitter = FrameSplitter::new(format, usize::MAX);
    let mut rest = framed;
    let mut found = Vec::new();
    while let Ok(Some(located)) = splitter.locate(rest, &mut 0) {
        found.push(&rest[located.body_start..located.body_end]);
        rest = &rest[located.end..];
    }
    found
}

/// How a send's target reads in a trace.
pub(crate) fn describe_target(target: &Target) -> String {
    match target {
        Target::All { .. } => "all".into(),
        Target::Connection(id) => format!("connection:{id}"),
        Target::Connections(ids) => format!("connections:{}", ids.len()),
        Target::User(user) => format!("user:{user}"),
        Target::Users(users) => format!("users:{}", users.len()),
        Target::Group { group, .. } => format!("group:{group}"),
        Target::Groups(groups) => format!("groups:{}", groups.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hub(name: &str) -> HubName {
        HubName::new(name, None).unwrap()
    }

    #[tokio::test]
    async fn a_trace_streams_its_hub_only_and_ends_by_itself() {
        let settings = Dashboard {
            max_trace_duration: Duration::from_secs(2),
            ..Dashboard::default()
        };
        let tracer = Tracer::new(&settings);
        assert!(!tracer.on());
        let mut watch = tracer.start(&hub("chat"), Duration::from_secs(3600));
        assert!(tracer.on());
        tracer.emit(&hub("other"), || panic!("an untraced hub builds no event"));
        tracer.emit(&hub("chat"), || TraceEvent::new("connected"));
        let shown = |event: &Event| serde_json::to_value(Shown { node: "n1", event }).unwrap();
        let event = watch.events.recv().await.unwrap();
        let local = shown(&event);
        assert_eq!(local["kind"], "connected");
        assert_eq!(local["node"], "n1");
        // Another node's events arrive as it sent them (with its node).
        assert!(tracer.forwarded(
            &hub("chat"),
            r#"[{"node":"n2","kind":"message"},{"node":"n2","kind":"disconnected"}]"#
        ));
        assert!(!tracer.forwarded(&hub("other"), r#"[{"node":"n2"}]"#));
        assert!(!tracer.forwarded(&hub("chat"), "not json"));
        let news = watch.news();
        let kinds: Vec<_> = news
            .events
            .iter()
            .map(|e| shown(e)["kind"].clone())
            .collect();
        assert_eq!(kinds, ["message", "disconnected"]);
        assert_eq!(shown(&news.events[0])["node"], "n2");
        assert!(!news.ended);
        // Capped at max_trace_duration.
        assert!(watch.until_unix_ms <= unix_now_ms() + 2_000);
        tracer.sweep(Instant::now() + Duration::from_secs(3));
        assert!(!tracer.on());
        assert!(
            watch.events.recv().await.is_err(),
            "the stream ends with the trace"
        );
    }

    #[test]
    fn payloads_are_shown_only_when_allowed() {
        let body = br#"{"type":1,"target":"send","arguments":["secret"]}"#;
        let quiet = Tracer::new(&Dashboard::default());
        let mut event = TraceEvent::new("message");
        quiet.describe(&mut event, Format::Json, body);
        assert_eq!(event.target.as_deref(), Some("send"));
        assert_eq!(event.message_type, Some("invocation"));
        assert_eq!(event.size, Some(body.len()));
        assert!(event.preview.is_none());
        let open = Tracer::new(&Dashboard {
            trace_payloads: true,
            trace_preview_bytes: 10,
            ..Dashboard::default()
        });
        let mut event = TraceEvent::new("message");
        open.describe(&mut event, Format::Json, body);
        assert_eq!(event.preview.as_deref(), Some(r#"{"type":1,"#));
    }
}
