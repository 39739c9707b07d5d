//! What the node logs for operators, with stable targets, event names and field names
//! (docs/operations.md, "Logs", lists them; log pipelines match on them):
//!
//! - target `switchyard::connections`, at info: every client and app-server connection's
//!   open (`event="connected"`) and end (`event="disconnected"`, `reason` = a stable code,
//!   `detail` = the text for errors), and refused connects (`event="refused"`).
//! - target `switchyard::messages`, at info, only with `log.messages = true`: one line per
//!   hub message in either direction, its size and method, never its payload.
//!
//! Refused connects are the lines an outsider can cause at will (a bad token in a retry
//! loop), so they pass a [`Gate`]: a few per second, the rest counted and reported in the
//! next line that is written.

use std::time::{Duration, Instant};

use parking_lot::Mutex;
use switchyard_core::CloseReason;
use switchyard_hub_protocol::{message_type, peek, Format, FrameSplitter};

/// Target of the connectivity lines.
pub(crate) const CONNECTIONS: &str = "switchyard::connections";
/// Target of the message lines.
pub(crate) const MESSAGES: &str = "switchyard::messages";

/// Refused connects written per second, at most.
pub(crate) const REFUSALS_PER_SECOND: u32 = 10;

/// Lets through at most `per_second` lines a second and counts the others.
pub(crate) struct Gate {
    per_second: u32,
    state: Mutex<GateState>,
}

struct GateState {
    window_start: Instant,
    written: u32,
    suppressed: u64,
}

impl Gate {
    pub(crate) fn new(per_second: u32) -> Gate {
        Gate {
            per_second,
            state: Mutex::new(GateState {
                window_start: Instant::now(),
                written: 0,
                suppressed: 0,
            }),
        }
    }

    /// `Some(k)` when a line may be written now, `k` being how many were left out since the
    /// last line written; `None` when this one is to be left out (it is counted).
    pub(crate) fn admit(&self) -> Option<u64> {
        self.admit_at(Instant::now())
    }

    fn admit_at(&self, now: Instant) -> Option<u64> {
        let mut state = self.state.lock();
        if now.saturating_duration_since(state.window_start) >= Duration::from_secs(1) {
            state.window_start = now;
            state.written = 0;
        }
        if state.written >= self.per_second {
            state.suppressed += 1;
            return None;
        }
        state.written += 1;
        Some(std::mem::take(&mut state.suppressed))
    }

    /// The lines left out in a second that has ended, which no later line reported yet (a
    /// flood that stopped): taken, so that the heartbeat can say so.
    pub(crate) fn left_out(&self) -> u64 {
        self.left_out_at(Instant::now())
    }

    fn left_out_at(&self, now: Instant) -> u64 {
        let mut state = self.state.lock();
        if now.saturating_duration_since(state.window_start) < Duration::from_secs(1) {
            return 0;
        }
        std::mem::take(&mut state.suppressed)
    }
}

/// A client connection finished its handshake.
pub(crate) fn client_connected(
    hub: &str,
    connection_id: &str,
    user_id: Option<&str>,
    transport: &str,
    protocol: &str,
) {
    tracing::info!(
        target: CONNECTIONS,
        event = "connected",
        kind = "client",
        hub,
        connection_id,
        user_id,
        transport,
        protocol,
        "client connected"
    );
}

/// A client connection ended, for `reason`.
pub(crate) fn client_disconnected(
    hub: &str,
    connection_id: &str,
    transport: Option<&str>,
    reason: &CloseReason,
) {
    tracing::info!(
        target: CONNECTIONS,
        event = "disconnected",
        kind = "client",
        hub,
        connection_id,
        transport,
        reason = reason.code(),
        detail = detail(reason).as_deref(),
        "client disconnected"
    );
}

/// The text of a reason that is not a plain close (none for those).
fn detail(reason: &CloseReason) -> Option<String> {
    match reason {
        CloseReason::ClientClosed | CloseReason::ClosedByApi(None) | CloseReason::Inactive => None,
        other => Some(other.to_string()),
    }
}

/// An app-server connection finished its handshake (`connection_type`: `Default`,
/// `OnDemand`, `Weak`; `through`: the node it reached this one through, in a cluster).
pub(crate) fn server_connected(
    hub: &str,
    server_id: &str,
    connection_id: &str,
    connection_type: &str,
    through: Option<&str>,
) {
    tracing::info!(
        target: CONNECTIONS,
        event = "connected",
        kind = "server",
        hub,
        server_id,
        connection_id,
        connection_type,
        through,
        "app server connected"
    );
}

/// An app-server connection ended; `reason` is the code of
/// `switchyard_server_connections_closed_total{reason}`. With an error (its `fault`:
/// `app_server`, `network`, `service`, and its text) the line is a warning.
pub(crate) fn server_disconnected(
    hub: &str,
    server_id: &str,
    connection_id: &str,
    reason: &str,
    error: Option<(&str, String)>,
) {
    match error {
        None => tracing::info!(
            target: CONNECTIONS,
            event = "disconnected",
            kind = "server",
            hub,
            server_id,
            connection_id,
            reason,
            "app server disconnected"
        ),
        Some((fault, detail)) => tracing::warn!(
            target: CONNECTIONS,
            event = "disconnected",
            kind = "server",
            hub,
            server_id,
            connection_id,
            reason,
            fault,
            detail,
            "app server disconnected"
        ),
    }
}

/// A connect refused before any connection existed (`kind`: `client` or `server`), if the
/// gate lets the line through.
pub(crate) fn refused(
    gate: &Gate,
    kind: &'static str,
    hub: Option<&str>,
    reason: &'static str,
    detail: &str,
    source: Option<std::net::IpAddr>,
) {
    let Some(suppressed) = gate.admit() else {
        return;
    };
    tracing::info!(
        target: CONNECTIONS,
        event = "refused",
        kind,
        hub,
        reason,
        detail,
        source = source.map(tracing::field::display),
        suppressed,
        "connect refused"
    );
}

/// Refused connects the gate left out of the log, once their flood has stopped (run every
/// second: otherwise the count would wait for the next refusal, maybe for ever).
pub(crate) fn refusals_left_out(gate: &Gate) {
    let suppressed = gate.left_out();
    if suppressed > 0 {
        tracing::info!(
            target: CONNECTIONS,
            event = "refused",
            suppressed,
            "connects refused and not logged (at most {REFUSALS_PER_SECOND} a second are)"
        );
    }
}

/// One hub message from a client (`direction="in"`), already parsed.
pub(crate) fn message_in(
    hub: &str,
    connection_id: &str,
    kind: u8,
    method: Option<&str>,
    size: usize,
) {
    tracing::info!(
        target: MESSAGES,
        event = "message",
        direction = "in",
        hub,
        connection_id,
        r#type = message_type::name(kind),
        method,
        size,
    );
}

/// Hub messages written to a client (`direction="out"`): one line per message of `frame`,
/// which may hold several. Only called with message logs on, so the parsing costs nothing
/// otherwise.
pub(crate) fn messages_out(hub: &str, connection_id: &str, format: Option<Format>, frame: &[u8]) {
    let Some(format) = format else {
        // Before the handshake (its response): not a hub message.
        return;
    };
    let splitter = FrameSplitter::new(format, usize::MAX);
    let mut rest = frame;
    while !rest.is_empty() {
        let mut scanned = 0;
        let Ok(Some(found)) = splitter.locate(rest, &mut scanned) else {
            break;
        };
        let body = &rest[found.body_start..found.body_end];
        let message = peek(format, body).ok();
        let kind = message.as_ref().map_or(0, |m| m.message_type);
        // Pings are keep-alives, not traffic; the handshake response has no type.
        if kind != message_type::PING && message.is_some() {
            tracing::info!(
                target: MESSAGES,
                event = "message",
                direction = "out",
                hub,
                connection_id,
                r#type = message_type::name(kind),
                method = message.as_ref().and_then(|m| m.target.as_deref()),
                size = found.end,
            );
        }
        rest = &rest[found.end..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_lets_a_few_through_a_second_and_counts_the_rest() {
        let gate = Gate::new(3);
        let start = Instant::now();
        let admitted: Vec<_> = (0..10).map(|_| gate.admit_at(start)).collect();
        assert_eq!(admitted[..3], [Some(0), Some(0), Some(0)]);
        assert!(admitted[3..].iter().all(Option::is_none));
        // The next second: the first line says how many were left out.
        let later = start + Duration::from_millis(1_001);
        assert_eq!(gate.admit_at(later), Some(7));
        assert_eq!(gate.admit_at(later), Some(0));
        // A flood that stops: its count is taken once its second has ended, and only once.
        for _ in 0..5 {
            gate.admit_at(later);
        }
        assert_eq!(gate.left_out_at(later), 0, "its second runs still");
        let after = later + Duration::from_millis(1_001);
        assert_eq!(gate.left_out_at(after), 4);
        assert_eq!(gate.left_out_at(after), 0);
        assert_eq!(gate.admit_at(after), Some(0));
    }
}
