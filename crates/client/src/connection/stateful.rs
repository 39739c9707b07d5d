//! Stateful reconnect, the client side (ASP.NET Core 8's `withStatefulReconnect()`): the
//! bookkeeping only, no I/O; [`super::Connection`] does the reads, writes and reconnects.
//!
//! Both directions number their trackable messages (Invocation, StreamItem, Completion,
//! StreamInvocation, CancelInvocation) implicitly from 1. What this client sent stays kept
//! until the server acknowledges it; what it received is acknowledged about a second later.
//! After a new socket opens, everything from the server is ignored until its `Sequence`, and
//! a message whose id was processed already is a duplicate and is dropped.

use std::collections::VecDeque;
use std::net::IpAddr;
use std::time::Duration;

use bytes::Bytes;
use switchyard_hub_protocol::{
    count_trackable, encode_ack, encode_sequence, is_trackable_type, message_type, peek, Format,
};
use tokio::time::Instant;
use url::Url;

use crate::{ClientError, TlsRoots};

/// How long after the first unacknowledged receipt the Ack goes out (the JS client's delay).
pub(super) const ACK_DELAY: Duration = Duration::from_secs(1);
/// Pause between two failed attempts to open the new socket (after the first, immediate one).
pub(super) const RETRY_DELAY: Duration = Duration::from_millis(250);

/// Counters of one connection's stateful reconnects.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatefulStats {
    /// New sockets opened to carry on after a drop.
    pub reconnects: u64,
    /// Frames this client wrote again after a reconnect (the server had not acknowledged
    /// them).
    pub replayed: u64,
    /// Trackable messages from the server dropped because they had been processed already.
    pub duplicates: u64,
}

/// What to do with a message body the server sent.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    Deliver,
    Skip,
}

/// A frame the server has not acknowledged.
struct Kept {
    /// Id of its last trackable message.
    last: u64,
    /// Id of its first one.
    first: u64,
    frame: Bytes,
}

/// The state of a connection that agreed to stateful reconnect (boxed in the connection:
/// connections without it pay one pointer).
pub(super) struct Stateful {
    /// Where the new socket goes: the URL with `id=`, and how it was opened.
    pub(super) target: Url,
    pub(super) token: Option<String>,
    pub(super) local_address: Option<IpAddr>,
    pub(super) tls_roots: TlsRoots,
    pub(super) max_message_size: usize,
    /// How long after a drop reconnecting is tried.
    pub(super) window: Duration,
    /// Unacknowledged bytes past which [`Stateful::is_full`] says so (sends do not wait).
    limit: usize,
    /// Trackable messages written: the last id used.
    sent: u64,
    kept: VecDeque<Kept>,
    kept_bytes: usize,
    /// Implicit id of the next trackable message from the server.
    next_in: u64,
    /// The highest id processed.
    processed: u64,
    /// The highest id acknowledged to the server.
    acked: u64,
    /// When the owed Ack is to be written.
    pub(super) ack_due: Option<Instant>,
    /// A new socket opened: everything is ignored until the server's Sequence.
    awaiting_sequence: bool,
    /// The socket dropped at this instant and no new one is open yet.
    pub(super) dropped_at: Option<Instant>,
    /// Failed attempts to open the new socket since the drop.
    pub(super) attempts: u32,
    /// A new socket is open; this client's Sequence and replay are still to be written.
    pub(super) replay_pending: bool,
    /// Reconnecting failed for good (the window passed, the server refused): why.
    pub(super) failed: Option<String>,
    pub(super) stats: StatefulStats,
}

impl Stateful {
    pub(super) fn new(
        target: Url,
        token: Option<String>,
        local_address: Option<IpAddr>,
        tls_roots: TlsRoots,
        max_message_size: usize,
        window: Duration,
        limit: usize,
    ) -> Stateful {
        Stateful {
            target,
            token,
            local_address,
            tls_roots,
            max_message_size,
            window,
            limit,
            sent: 0,
            kept: VecDeque::new(),
            kept_bytes: 0,
            next_in: 1,
            processed: 0,
            acked: 0,
            ack_due: None,
            awaiting_sequence: false,
            dropped_at: None,
            attempts: 0,
            replay_pending: false,
            failed: None,
            stats: StatefulStats::default(),
        }
    }

    /// Numbers the trackable messages of a frame just written and keeps it for replay.
    pub(super) fn track(&mut self, format: Format, frame: &Bytes) {
        let count = count_trackable(format, frame);
        if count == 0 {
            return;
        }
        let first = self.sent + 1;
        self.sent += count;
        self.kept_bytes += frame.len();
        self.kept.push_back(Kept {
            first,
            last: self.sent,
            frame: frame.clone(),
        });
    }

    /// Unacknowledged bytes kept for replay.
    pub(super) fn kept_bytes(&self) -> usize {
        self.kept_bytes
    }

    /// Whether more than the configured buffer is unacknowledged.
    pub(super) fn is_full(&self) -> bool {
        self.kept_bytes > self.limit
    }

    /// The socket is gone without a close: a new one is to be opened.
    pub(super) fn dropped(&mut self) {
        if self.dropped_at.is_none() {
            self.dropped_at = Some(Instant::now());
            self.attempts = 0;
        }
        self.replay_pending = false;
    }

    /// A new socket is open: the server's Sequence is awaited and ours is owed.
    pub(super) fn reopened(&mut self) {
        self.dropped_at = None;
        self.attempts = 0;
        self.awaiting_sequence = true;
        self.replay_pending = true;
        self.stats.reconnects += 1;
    }

    /// What this client writes first on a new socket: Sequence with the id of its first
    /// unacknowledged message (or the next id), then every unacknowledged frame in order.
    /// Writing it again on the same socket is harmless: the Sequence resets the server's
    /// count and it drops what it processed already.
    pub(super) fn replay(&self, format: Format) -> Vec<Bytes> {
        let first = self.kept.front().map_or(self.sent + 1, |kept| kept.first);
        let mut frames = Vec::with_capacity(self.kept.len() + 1);
        frames.push(encode_sequence(format, first as i64));
        frames.extend(self.kept.iter().map(|kept| kept.frame.clone()));
        frames
    }

    /// Looks at one message body the server sent.
    pub(super) fn incoming(&mut self, format: Format, body: &[u8]) -> Result<Verdict, ClientError> {
        let ty = quick_type(format, body);
        match ty {
            Some(message_type::SEQUENCE) => {
                let id = sequence_id(format, body)?;
                // Against what was processed, not `next_in`: a replay cut short by another
                // drop leaves `next_in` behind while the server's first unacknowledged id
                // moved on with an Ack.
                if id < 1 || id as u64 > self.processed + 1 {
                    return Err(ClientError::Protocol(format!(
                        "Sequence ID {id} greater than amount of messages we've received ({}).",
                        self.processed
                    )));
                }
                self.next_in = id as u64;
                self.awaiting_sequence = false;
                Ok(Verdict::Skip)
            }
            _ if self.awaiting_sequence => Ok(Verdict::Skip),
            Some(message_type::ACK) => {
                let id = sequence_id(format, body)?.max(0) as u64;
                while self.kept.front().is_some_and(|kept| kept.last <= id) {
                    let kept = self.kept.pop_front().expect("checked");
                    self.kept_bytes -= kept.frame.len();
                }
                Ok(Verdict::Skip)
            }
            Some(ty) if is_trackable_type(i32::from(ty)) => {
                let id = self.next_in;
                self.next_in += 1;
                if id <= self.processed {
                    self.stats.duplicates += 1;
                    // The server replays what it saw no Ack for: that Ack was lost with the
                    // old socket, so it is owed again.
                    self.acked = self.acked.min(id - 1);
                    self.owe_ack();
                    return Ok(Verdict::Skip);
                }
                self.processed = id;
                self.owe_ack();
                Ok(Verdict::Deliver)
            }
            _ => Ok(Verdict::Deliver),
        }
    }

    fn owe_ack(&mut self) {
        if self.ack_due.is_none() {
            self.ack_due = Some(Instant::now() + ACK_DELAY);
        }
    }

    /// Whether an Ack is owed and its time has come.
    pub(super) fn ack_is_due(&self, now: Instant) -> bool {
        self.ack_due.is_some_and(|due| due <= now)
    }

    /// The Ack to write now, if one is owed (cleared once written, see [`Stateful::acked`]).
    pub(super) fn ack(&self, format: Format) -> Option<(u64, Bytes)> {
        (self.processed > self.acked)
            .then(|| (self.processed, encode_ack(format, self.processed as i64)))
    }

    /// The Ack of `id` was written.
    pub(super) fn acked(&mut self, id: u64) {
        self.acked = self.acked.max(id);
        if self.processed <= self.acked {
            self.ack_due = None;
        }
    }

    /// Nothing owed after all (the Ack was written or none was needed).
    pub(super) fn ack_settled(&mut self) {
        if self.processed <= self.acked {
            self.ack_due = None;
        }
    }
}

/// The message type, read cheaply where the writer put it first; else looked at properly.
fn quick_type(format: Format, body: &[u8]) -> Option<u8> {
    match format {
        Format::Json => {
            if let Some([digit @ b'1'..=b'9', b',' | b'}', ..]) = body.strip_prefix(b"{\"type\":") {
                return Some(digit - b'0');
            }
        }
        // A fixarray whose first element is a positive fixint.
        Format::MessagePack => {
            if let [0x90..=0x9f, ty @ 0x00..=0x7f, ..] = body {
                return Some(*ty);
            }
        }
    }
    peek(format, body).ok().map(|found| found.message_type)
}

fn sequence_id(format: Format, body: &[u8]) -> Result<i64, ClientError> {
    peek(format, body)
        .ok()
        .and_then(|found| found.sequence_id)
        .ok_or_else(|| ClientError::Protocol("an Ack or Sequence without its sequenceId".into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_hub_protocol::{encode_close, encode_invocation, ping};

    fn state() -> Stateful {
        Stateful::new(
            Url::parse("http://127.0.0.1:1/client/?hub=h&id=x").unwrap(),
            None,
            None,
            TlsRoots::default(),
            1 << 20,
            Duration::from_secs(15),
            100,
        )
    }

    fn body(frame: &Bytes, format: Format) -> Vec<u8> {
        match format {
            Format::Json => frame[..frame.len() - 1].to_vec(),
            // One-byte length prefix for these small messages.
            Format::MessagePack => frame[1..].to_vec(),
        }
    }

    #[test]
    fn types_are_read_in_both_formats() {
        for format in [Format::Json, Format::MessagePack] {
            let cases = [
                (encode_invocation(format, "a", &[1.into()]), 1),
                (ping(format), 6),
                (encode_close(format, None, false), 7),
                (encode_ack(format, 3), 8),
                (encode_sequence(format, 3), 9),
            ];
            for (frame, ty) in cases {
                assert_eq!(quick_type(format, &body(&frame, format)), Some(ty));
            }
        }
        assert_eq!(
            quick_type(
                Format::Json,
                b"{\"target\":\"x\",\"arguments\":[],\"type\":1}"
            ),
            Some(1)
        );
    }

    #[tokio::test]
    async fn duplicates_after_a_sequence_are_dropped_and_acked_again() {
        let format = Format::Json;
        let mut state = state();
        let inv = body(&encode_invocation(format, "a", &[]), format);
        for _ in 0..3 {
            assert_eq!(state.incoming(format, &inv).unwrap(), Verdict::Deliver);
        }
        let (id, _) = state.ack(format).unwrap();
        assert_eq!(id, 3);
        state.acked(3);
        assert!(state.ack(format).is_none());
        // New socket: everything up to the Sequence is ignored; the server replays from 2.
        state.reopened();
        assert_eq!(state.incoming(format, &inv).unwrap(), Verdict::Skip);
        let seq = body(&encode_sequence(format, 2), format);
        assert_eq!(state.incoming(format, &seq).unwrap(), Verdict::Skip);
        let verdicts: Vec<_> = (0..3)
            .map(|_| state.incoming(format, &inv).unwrap())
            .collect();
        assert_eq!(verdicts, [Verdict::Skip, Verdict::Skip, Verdict::Deliver]);
        assert_eq!(state.stats.duplicates, 2);
        assert_eq!(state.ack(format).unwrap().0, 4);
        // A Sequence past what was received is fatal.
        let far = body(&encode_sequence(format, 9), format);
        assert!(state.incoming(format, &far).is_err());
    }

    #[test]
    fn acks_free_and_replay_starts_at_the_first_unacknowledged() {
        let format = Format::MessagePack;
        let mut state = state();
        let frames: Vec<Bytes> = (0..3)
            .map(|n| encode_invocation(format, "a", &[n.into()]))
            .collect();
        for frame in &frames {
            state.track(format, frame);
        }
        state.track(format, &ping(format));
        assert_eq!(
            state.kept_bytes(),
            frames.iter().map(Bytes::len).sum::<usize>()
        );
        let ack = body(&encode_ack(format, 2), format);
        assert_eq!(state.incoming(format, &ack).unwrap(), Verdict::Skip);
        assert_eq!(
            state.replay(format),
            vec![encode_sequence(format, 3), frames[2].clone()]
        );
        let ack = body(&encode_ack(format, 3), format);
        state.incoming(format, &ack).unwrap();
        assert_eq!(state.replay(format), vec![encode_sequence(format, 4)]);
        assert_eq!(state.kept_bytes(), 0);
    }
}
