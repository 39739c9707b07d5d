//! Cutting the server's byte stream, as a transport delivers it, into message bodies:
//! without copying where a read holds whole messages, gathering only a message that spans
//! reads.

use bytes::{Buf, Bytes, BytesMut};
use switchyard_hub_protocol::{handshake, Format, FrameSplitter};

use crate::ClientError;

/// Cuts the server's byte stream, as the transport delivers it, into message bodies.
pub(super) struct Reassembler {
    format: Format,
    max_message_size: usize,
    /// What is left of the last transport read, all of it unsplit.
    pending: Bytes,
    /// A message that spans reads (and whatever followed it in the same reads). Only used
    /// while `pending` is empty.
    partial: BytesMut,
    /// Leading bytes of `partial` known to hold no record separator.
    scanned: usize,
}

impl Reassembler {
    pub(super) fn new(format: Format, max_message_size: usize) -> Self {
        Reassembler {
            format,
            max_message_size,
            pending: Bytes::new(),
            partial: BytesMut::new(),
            scanned: 0,
        }
    }

    /// Stores one transport read.
    pub(super) fn push(&mut self, chunk: Bytes) {
        if chunk.is_empty() {
            return;
        }
        if self.partial.is_empty() && self.pending.is_empty() {
            self.pending = chunk;
        } else {
            // `take_frame` moves an unsplittable `pending` into `partial`, so a read that
            // continues a message always lands here.
            self.partial.extend_from_slice(&chunk);
        }
    }

    /// The handshake response's error (`Some(None)`: accepted), once it is complete.
    pub(super) fn take_handshake_response(
        &mut self,
    ) -> Result<Option<Option<String>>, ClientError> {
        if !self.pending.is_empty() {
            self.partial.extend_from_slice(&self.pending);
            self.pending = Bytes::new();
        }
        let parsed = handshake::parse_response(&self.partial)
            .map_err(|e| ClientError::Protocol(format!("handshake response: {e}")))?;
        let Some((error, consumed)) = parsed else {
            if self.partial.len() > self.max_message_size {
                return Err(ClientError::Protocol(
                    "the handshake response exceeds the maximum message size".into(),
                ));
            }
            return Ok(None);
        };
        self.partial.advance(consumed);
        if self.partial.is_empty() {
            self.partial = BytesMut::new();
        }
        Ok(Some(error))
    }

    /// Takes the next complete message body off what has been read, if there is one.
    pub(super) fn take_frame(&mut self) -> Result<Option<Bytes>, ClientError> {
        if self.partial.is_empty() {
            if self.pending.is_empty() {
                return Ok(None);
            }
            let splitter = FrameSplitter::new(self.format, self.max_message_size);
            match splitter.locate(&self.pending, &mut 0) {
                Ok(Some(found)) => {
                    let body = self.pending.slice(found.body_start..found.body_end);
                    if found.end == self.pending.len() {
                        // Let go of the transport's buffer.
                        self.pending = Bytes::new();
                    } else {
                        self.pending.advance(found.end);
                    }
                    return Ok(Some(body));
                }
                Ok(None) => {
                    self.partial.extend_from_slice(&self.pending);
                    self.pending = Bytes::new();
                    self.scanned = 0;
                    return Ok(None);
                }
                Err(e) => return Err(ClientError::Protocol(e.to_string())),
            }
        }
        let splitter = FrameSplitter::new(self.format, self.max_message_size);
        let frame = splitter
            .next_frame_resuming(&mut self.partial, &mut self.scanned)
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        if self.partial.is_empty() {
            self.partial = BytesMut::new();
            self.scanned = 0;
        }
        Ok(frame.map(|frame| frame.body_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_hub_protocol::RECORD_SEPARATOR;

    /// Every way of cutting a stream of messages into three reads yields the same bodies.
    #[test]
    fn reassembly_across_reads() {
        let json: Vec<Bytes> = [
            "{\"type\":6}",
            "{\"type\":1,\"target\":\"x\",\"arguments\":[]}",
            "{}",
        ]
        .iter()
        .map(|b| Bytes::from(b.to_string()))
        .collect();
        let msgpack: Vec<Bytes> = [&b"\x91\x06"[..], &[0xa5; 200][..], b"\x90"]
            .iter()
            .map(|b| Bytes::copy_from_slice(b))
            .collect();
        for (format, bodies) in [(Format::Json, json), (Format::MessagePack, msgpack)] {
            let mut stream = Vec::new();
            for body in &bodies {
                match format {
                    Format::Json => {
                        stream.extend_from_slice(body);
                        stream.push(RECORD_SEPARATOR);
                    }
                    Format::MessagePack => {
                        switchyard_hub_protocol::msgpack::write_varint(body.len(), &mut stream);
                        stream.extend_from_slice(body);
                    }
                }
            }
            for a in 0..=stream.len() {
                for b in a..=stream.len() {
                    let mut frames = Reassembler::new(format, 1024);
                    let mut out = Vec::new();
                    for piece in [&stream[..a], &stream[a..b], &stream[b..]] {
                        frames.push(Bytes::copy_from_slice(piece));
                        while let Some(body) = frames.take_frame().unwrap() {
                            out.push(body);
                        }
                    }
                    assert_eq!(out, bodies, "{format:?} cut at {a} and {b}");
                    assert!(frames.pending.is_empty() && frames.partial.is_empty());
                }
            }
        }
    }

    #[test]
    fn handshake_response_then_messages() {
        let mut frames = Reassembler::new(Format::Json, 1024);
        frames.push(Bytes::from_static(b"{}"));
        assert_eq!(frames.take_handshake_response().unwrap(), None);
        frames.push(Bytes::from_static(b"\x1e{\"type\":6}\x1e{\"ty"));
        assert_eq!(frames.take_handshake_response().unwrap(), Some(None));
        assert_eq!(
            frames.take_frame().unwrap(),
            Some(Bytes::from_static(b"{\"type\":6}"))
        );
        assert_eq!(frames.take_frame().unwrap(), None);
        frames.push(Bytes::from_static(b"pe\":6}\x1e"));
        assert_eq!(
            frames.take_frame().unwrap(),
            Some(Bytes::from_static(b"{\"type\":6}"))
        );
        let mut refused = Reassembler::new(Format::Json, 1024);
        refused.push(Bytes::from_static(b"{\"error\":\"no\"}\x1e"));
        assert_eq!(
            refused.take_handshake_response().unwrap(),
            Some(Some("no".to_string()))
        );
    }
}
