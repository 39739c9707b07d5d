//! Stateful reconnect (ASP.NET Core 8, the clients' `withStatefulReconnect()`): the state that
//! lets a WebSocket client whose socket dropped come back to the same connection and miss
//! nothing. Plain bookkeeping, no I/O: the WebSocket writer and the session call it.
//!
//! Both directions number their trackable messages (invocations, stream items, completions,
//! stream invocations, cancels) implicitly from 1. The service keeps what it wrote until the
//! client acknowledges it, acknowledges what the client sent at most once a second, and after
//! a reconnect sends `Sequence` (the first id it replays) and the unacknowledged messages. The
//! service ends the protocol itself in both modes: an app server sees a plain connection that
//! never dropped.

use std::collections::VecDeque;

use bytes::Bytes;
use switchyard_hub_protocol::{
    count_trackable, encode_ack, encode_sequence, is_trackable_type, message_type, Format,
    RECORD_SEPARATOR,
};

/// What the session does with a message the client sent.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Incoming {
    /// Act on it (or pass it to the app server) as usual.
    Process,
    /// Already processed before a reconnect, or stateful-reconnect bookkeeping: drop it.
    Skip,
}

/// A frame the client has not acknowledged yet.
struct Unacked {
    /// Id of its first trackable message.
    first: u64,
    /// Id of its last trackable message.
    last: u64,
    frame: Bytes,
}

pub(crate) struct Resume {
    format: Format,
    /// Unacknowledged bytes beyond which the writer stops taking frames until an Ack.
    limit: usize,
    /// The next frame written starts with the handshake response, which is not numbered and
    /// never replayed.
    handshake_ahead: bool,
    /// Trackable messages written so far: the last id used.
    sent: u64,
    /// The highest id the client acknowledged.
    acked_by_client: u64,
    unacked: VecDeque<Unacked>,
    unacked_bytes: usize,
    /// Implicit id of the next trackable message from the client.
    next_in: u64,
    /// The highest id processed.
    processed: u64,
    /// The highest id acknowledged to the client.
    acked_to_client: u64,
    /// When the Ack of what the client sent last is due, once one is owed.
    ack_due: Option<tokio::time::Instant>,
    /// After a reconnect the client's first message must be its Sequence; until then
    /// everything is skipped (as the reference server does).
    awaiting_sequence: bool,
    /// Generation of the transport that owns the connection; a new WebSocket takes it over
    /// by raising it.
    owner: u64,
    /// Generation of the transport task still running, if any.
    writer: Option<u64>,
    /// When the last transport dropped (ms, node clock); 0 while one is attached.
    detached_at_ms: u64,
    /// The connection is over: nothing more is kept.
    ended: bool,
}

impl Resume {
    /// State for a connection whose handshake just agreed to stateful reconnect; its first
    /// transport is generation 0.
    pub(crate) fn new(format: Format, limit: usize) -> Resume {
        Resume {
            format,
            limit,
            handshake_ahead: true,
            sent: 0,
            acked_by_client: 0,
            unacked: VecDeque::new(),
            unacked_bytes: 0,
            next_in: 1,
            processed: 0,
            acked_to_client: 0,
            ack_due: None,
            awaiting_sequence: false,
            owner: 0,
            writer: Some(0),
            detached_at_ms: 0,
            ended: false,
        }
    }

    /// Numbers the trackable messages of a frame about to be written and keeps the frame for
    /// replay. Returns the bytes now kept (for the gauge).
    pub(crate) fn track(&mut self, frame: &Bytes) -> usize {
        if self.ended {
            return 0;
        }
        let mut frame = frame.clone();
        if self.handshake_ahead {
            // The response ends at its record separator, in either protocol; what follows it
            // in the same frame (Default mode relays the app server's bytes as they come) is
            // numbered as usual.
            let Some(end) = frame.iter().position(|&b| b == RECORD_SEPARATOR) else {
                return 0;
            };
            self.handshake_ahead = false;
            frame = frame.slice(end + 1..);
        }
        let count = count_trackable(self.format, &frame);
        if count == 0 {
            return 0;
        }
        let first = self.sent + 1;
        self.sent += count;
        self.unacked_bytes += frame.len();
        let kept = frame.len();
        self.unacked.push_back(Unacked {
            first,
            last: self.sent,
            frame,
        });
        kept
    }

    /// Whether the client holds so much unacknowledged that nothing more may be written
    /// until it acknowledges some (the reference server waits the same way).
    pub(crate) fn is_full(&self) -> bool {
        self.unacked_bytes > self.limit
    }

    #[cfg(test)]
    pub(crate) fn unacked_bytes(&self) -> usize {
        self.unacked_bytes
    }

    /// The connection is over: frees what was kept; returns the bytes freed.
    pub(crate) fn end(&mut self) -> usize {
        self.ended = true;
        self.unacked.clear();
        std::mem::take(&mut self.unacked_bytes)
    }

    /// Looks at a message the client sent. Err: a protocol violation, with the text the
    /// client is closed with. Returns the bytes freed by an Ack beside the verdict.
    pub(crate) fn incoming(
        &mut self,
        message_type: u8,
        sequence_id: Option<i64>,
    ) -> Result<(Incoming, usize), String> {
        match message_type {
            message_type::SEQUENCE => {
                let id = sequence_id.unwrap_or(0);
                if id < 1 {
                    return Err(format!("Sequence ID {id} is out of range."));
                }
                // Against what was processed, not `next_in`: a replay cut short by another
                // drop leaves `next_in` behind while the client's first unacknowledged id moved on.
                if id as u64 > self.processed + 1 {
                    return Err(
                        "Sequence ID greater than amount of messages we've received.".into(),
                    );
                }
                self.next_in = id as u64;
                self.awaiting_sequence = false;
                Ok((Incoming::Skip, 0))
            }
            _ if self.awaiting_sequence => Ok((Incoming::Skip, 0)),
            message_type::ACK => {
                let id = sequence_id.unwrap_or(-1);
                if id < 0 || id as u64 > self.sent {
                    return Err(format!("Ack of message {id}, but {} were sent.", self.sent));
                }
                Ok((Incoming::Skip, self.acknowledged(id as u64)))
            }
            ty if is_trackable_type(i32::from(ty)) => {
                let id = self.next_in;
                self.next_in += 1;
                if id <= self.processed {
                    return Ok((Incoming::Skip, 0));
                }
                self.processed = id;
                Ok((Incoming::Process, 0))
            }
            _ => Ok((Incoming::Process, 0)),
        }
    }

    /// Frees what the client acknowledged; returns the bytes freed.
    fn acknowledged(&mut self, id: u64) -> usize {
        self.acked_by_client = self.acked_by_client.max(id);
        let mut freed = 0;
        while self.unacked.front().is_some_and(|kept| kept.last <= id) {
            let kept = self.unacked.pop_front().expect("checked");
            freed += kept.frame.len();
        }
        self.unacked_bytes -= freed;
        freed
    }

    /// Whether the client sent something not yet acknowledged.
    pub(crate) fn owes_ack(&self) -> bool {
        self.processed > self.acked_to_client
    }

    /// Sets the Ack's deadline to `due` if one is owed and none is set yet; returns the
    /// deadline newly set.
    pub(crate) fn schedule_ack(
        &mut self,
        due: tokio::time::Instant,
    ) -> Option<tokio::time::Instant> {
        if self.ack_due.is_some() || !self.owes_ack() {
            return None;
        }
        self.ack_due = Some(due);
        self.ack_due
    }

    /// When the owed Ack is due, if one is.
    pub(crate) fn ack_due(&self) -> Option<tokio::time::Instant> {
        self.ack_due
    }

    /// The Ack to write now, if one is owed.
    pub(crate) fn take_ack(&mut self) -> Option<Bytes> {
        self.ack_due = None;
        if !self.owes_ack() {
            return None;
        }
        self.acked_to_client = self.processed;
        Some(encode_ack(self.format, self.processed as i64))
    }

    /// Claims the connection for a new transport; returns its generation. The transport
    /// still writing (if any) is to stop when it sees that it no longer owns it.
    pub(crate) fn claim(&mut self) -> u64 {
        self.owner += 1;
        self.owner
    }

    pub(crate) fn owns(&self, generation: u64) -> bool {
        self.owner == generation
    }

    /// Whether the transport of `generation` may start: it still owns the connection and no
    /// earlier transport task runs. Marks it as the running one.
    pub(crate) fn start_writer(&mut self, generation: u64) -> bool {
        if self.owner != generation || self.writer.is_some() {
            return false;
        }
        self.writer = Some(generation);
        self.detached_at_ms = 0;
        true
    }

    /// The transport task of `generation` ended: if it still owned the connection, the
    /// connection now waits for its client to come back.
    pub(crate) fn writer_ended(&mut self, generation: u64, now_ms: u64) {
        if self.writer == Some(generation) {
            self.writer = None;
        }
        if self.owner == generation {
            self.detached_at_ms = now_ms.max(1);
        }
    }

    /// Since when no transport serves the connection (ms), if none does.
    pub(crate) fn detached_since(&self) -> Option<u64> {
        (self.detached_at_ms != 0).then_some(self.detached_at_ms)
    }

    /// What a returning client gets first: `Sequence` with the id of the first message
    /// replayed, every unacknowledged frame in order, and an Ack of all it sent that was
    /// processed (the last Ack may have been lost with the old socket, and a client that
    /// waits for one sends nothing new). From now on its own messages are skipped until its
    /// Sequence.
    pub(crate) fn replay(&mut self) -> Vec<Bytes> {
        let first = self
            .unacked
            .front()
            .map_or(self.sent + 1, |kept| kept.first);
        self.awaiting_sequence = true;
        let mut frames = Vec::with_capacity(self.unacked.len() + 2);
        frames.push(encode_sequence(self.format, first as i64));
        frames.extend(self.unacked.iter().map(|kept| kept.frame.clone()));
        self.ack_due = None;
        if self.processed > 0 {
            self.acked_to_client = self.processed;
            frames.push(encode_ack(self.format, self.processed as i64));
        }
        frames
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_hub_protocol::{encode_invocation, ping};

    fn invocation(n: i64) -> Bytes {
        encode_invocation(Format::Json, "n", &[n.into()])
    }

    #[test]
    fn the_handshake_response_is_not_numbered_or_kept() {
        let mut resume = Resume::new(Format::Json, 1000);
        let mut first = b"{}\x1e".to_vec();
        first.extend_from_slice(&invocation(1));
        assert_eq!(resume.track(&Bytes::from(first)), invocation(1).len());
        let frames = resume.replay();
        assert_eq!(frames[0], encode_sequence(Format::Json, 1));
        assert_eq!(frames[1..], [invocation(1)]);
    }

    #[test]
    fn acks_free_and_replay_starts_at_the_first_unacknowledged() {
        let mut resume = Resume::new(Format::Json, 1000);
        resume.track(&Bytes::from_static(b"{}\x1e"));
        for n in 1..=3 {
            resume.track(&invocation(n));
        }
        assert_eq!(resume.track(&ping(Format::Json)), 0);
        let (verdict, freed) = resume.incoming(message_type::ACK, Some(2)).unwrap();
        assert_eq!((verdict, freed), (Incoming::Skip, 2 * invocation(1).len()));
        let frames = resume.replay();
        assert_eq!(
            frames,
            vec![encode_sequence(Format::Json, 3), invocation(3)]
        );
        // Nothing left: the next id.
        resume.incoming(message_type::SEQUENCE, Some(1)).unwrap();
        resume.incoming(message_type::ACK, Some(3)).unwrap();
        assert_eq!(resume.replay(), vec![encode_sequence(Format::Json, 4)]);
    }

    #[test]
    fn bad_acks_and_sequences_are_refused() {
        let mut resume = Resume::new(Format::Json, 1000);
        resume.track(&Bytes::from_static(b"{}\x1e"));
        resume.track(&invocation(1));
        assert!(resume.incoming(message_type::ACK, Some(2)).is_err());
        assert!(resume.incoming(message_type::ACK, Some(-1)).is_err());
        assert!(resume.incoming(message_type::ACK, None).is_err());
        assert!(resume.incoming(message_type::SEQUENCE, Some(0)).is_err());
        assert!(resume.incoming(message_type::SEQUENCE, Some(2)).is_err());
        assert!(resume
            .incoming(message_type::SEQUENCE, Some(i64::MAX))
            .is_err());
        assert!(resume.incoming(message_type::SEQUENCE, Some(1)).is_ok());
    }

    #[test]
    fn replayed_client_messages_are_processed_once() {
        let mut resume = Resume::new(Format::Json, 1000);
        for _ in 0..3 {
            let (verdict, _) = resume.incoming(message_type::INVOCATION, None).unwrap();
            assert_eq!(verdict, Incoming::Process);
        }
        assert!(resume.owes_ack());
        assert_eq!(resume.take_ack(), Some(encode_ack(Format::Json, 3)));
        assert_eq!(resume.take_ack(), None);
        // The socket drops; the client had not seen the Ack and replays from 2. The Ack is
        // sent again after the replay.
        assert_eq!(
            resume.replay(),
            vec![
                encode_sequence(Format::Json, 1),
                encode_ack(Format::Json, 3)
            ]
        );
        let (skipped, _) = resume.incoming(message_type::INVOCATION, None).unwrap();
        assert_eq!(
            skipped,
            Incoming::Skip,
            "nothing counts before its Sequence"
        );
        resume.incoming(message_type::SEQUENCE, Some(2)).unwrap();
        let verdicts: Vec<_> = (0..3)
            .map(|_| resume.incoming(message_type::STREAM_ITEM, None).unwrap().0)
            .collect();
        assert_eq!(
            verdicts,
            [Incoming::Skip, Incoming::Skip, Incoming::Process],
            "2 and 3 were processed before"
        );
        assert_eq!(resume.take_ack(), Some(encode_ack(Format::Json, 4)));
    }

    #[test]
    fn a_sequence_after_a_replay_cut_short_is_accepted() {
        let mut resume = Resume::new(Format::Json, 1000);
        for _ in 0..3 {
            resume.incoming(message_type::INVOCATION, None).unwrap();
        }
        // The client comes back unaware of the Ack of 3 and replays from 1; its socket drops
        // again after one replayed message, and by then the Ack reached it.
        resume.replay();
        resume.incoming(message_type::SEQUENCE, Some(1)).unwrap();
        let (verdict, _) = resume.incoming(message_type::INVOCATION, None).unwrap();
        assert_eq!(verdict, Incoming::Skip);
        resume.replay();
        resume.incoming(message_type::SEQUENCE, Some(4)).unwrap();
        let (verdict, _) = resume.incoming(message_type::INVOCATION, None).unwrap();
        assert_eq!(verdict, Incoming::Process, "4 is new");
        assert!(
            resume.incoming(message_type::SEQUENCE, Some(6)).is_err(),
            "5 was never received"
        );
    }

    #[test]
    fn a_full_buffer_is_reported_and_freed_by_acks() {
        let mut resume = Resume::new(Format::Json, 2 * invocation(1).len());
        resume.track(&Bytes::from_static(b"{}\x1e"));
        for n in 1..=3 {
            resume.track(&invocation(n));
        }
        assert!(resume.is_full());
        resume.incoming(message_type::ACK, Some(1)).unwrap();
        assert!(!resume.is_full());
        assert_eq!(resume.unacked_bytes(), 2 * invocation(1).len());
        assert_eq!(resume.end(), 2 * invocation(1).len());
        assert_eq!(
            resume.track(&invocation(4)),
            0,
            "nothing is kept once it ended"
        );
        assert_eq!(resume.unacked_bytes(), 0);
    }

    #[test]
    fn a_new_transport_waits_for_the_old_one() {
        let mut resume = Resume::new(Format::Json, 1000);
        let next = resume.claim();
        assert!(!resume.owns(0));
        assert!(!resume.start_writer(next), "generation 0 still runs");
        resume.writer_ended(0, 50);
        assert_eq!(resume.detached_since(), None, "it no longer owned it");
        assert!(resume.start_writer(next));
        resume.writer_ended(next, 70);
        assert_eq!(resume.detached_since(), Some(70));
        let third = resume.claim();
        assert!(resume.start_writer(third));
        assert_eq!(resume.detached_since(), None);
    }
}
