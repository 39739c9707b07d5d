//! Sends: the hot path of every message REST and app servers send.

use switchyard_core::{HubName, Message, Payloads, Protocol, Target};
use switchyard_hub_protocol::{encode_invocation, Format};

use super::{channels_for, Executor};
use crate::live_trace::{bodies, describe_target, TraceEvent};

impl Executor {
    /// Sends pre-encoded payloads to the target.
    pub fn send(&self, hub: &HubName, target: Target, payloads: Payloads) {
        if payloads.is_empty() {
            return;
        }
        if self.tracer.on() {
            self.trace_send(hub, &target, &payloads);
        }
        // A connection this node holds is its channel's only reader: the copy through Redis
        // would only come back to be dropped (measured: ~25 µs of service and ~15 µs of Redis
        // CPU per message). Delivered here, in order with everything else this node publishes,
        // whose local deliveries also happen at publish time. (App servers send to one
        // connection as a list of one.)
        // (On one node there is no Redis to skip: no lookup.)
        let local = self.cluster.in_cluster()
            && match &target {
                Target::Connection(id) => self.holds(hub, id),
                Target::Connections(ids) => ids.iter().all(|id| self.holds(hub, id)),
                _ => false,
            };
        if local {
            let message = Message::Send {
                hub: hub.clone(),
                target,
                payloads,
            };
            let delivered = self.router.apply(&message);
            self.metrics.frames_delivered.inc_by(delivered as u64);
            return;
        }
        let channels = channels_for(hub, &target);
        self.cluster.publish(
            channels,
            Message::Send {
                hub: hub.clone(),
                target,
                payloads,
            },
        );
    }

    /// A send, in the live trace of its hub (one event for all its recipients).
    #[cold]
    fn trace_send(&self, hub: &HubName, target: &Target, payloads: &Payloads) {
        // One protocol's encoding tells what was sent; JSON reads best.
        let shown = [Format::Json, Format::MessagePack]
            .into_iter()
            .find_map(|format| Some((format, payloads.get(&format.protocol())?)));
        let Some((format, payload)) = shown else {
            return;
        };
        for body in bodies(format, payload) {
            self.tracer.emit(hub, || {
                let mut event = TraceEvent::new("message");
                event.direction = Some("out");
                event.to = Some(describe_target(target));
                self.tracer.describe(&mut event, format, body);
                event
            });
        }
    }

    /// Encodes a non-blocking invocation once for each service-encoded protocol that the hub's
    /// connections use (both, when other processes' nodes may hold connections).
    pub fn encode_invocation(
        &self,
        hub: &HubName,
        method: &str,
        arguments: &[serde_json::Value],
    ) -> Payloads {
        let (json, messagepack) = if self.cluster.in_cluster() {
            (true, true)
        } else {
            self.router
                .find_hub(hub)
                .map_or((false, false), |h| h.protocols_in_use())
        };
        let mut payloads = Payloads::new();
        if json {
            payloads.insert(
                Protocol::Json,
                encode_invocation(Format::Json, method, arguments),
            );
        }
        if messagepack {
            payloads.insert(
                Protocol::MessagePack,
                encode_invocation(Format::MessagePack, method, arguments),
            );
        }
        payloads
    }
}
