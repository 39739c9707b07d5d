//! Splitting a byte stream into complete hub messages without decoding them.

use bytes::{Bytes, BytesMut};

use crate::error::FrameError;
use crate::msgpack::read_varint;
use crate::{Format, RECORD_SEPARATOR};

/// One complete hub message as it was on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The message including its framing (trailing record separator for JSON, VarInt
    /// prefix for MessagePack). Forward this to peers of the same format as is.
    pub framed: Bytes,
    body_start: usize,
    body_end: usize,
}

impl Frame {
    /// The message body without framing: what `json::decode`, `msgpack::decode` and
    /// [`peek`](crate::peek) take.
    pub fn body(&self) -> &[u8] {
        &self.framed[self.body_start..self.body_end]
    }

    /// The body as a cheap shared slice of [`Frame::framed`].
    pub fn body_bytes(&self) -> Bytes {
        self.framed.slice(self.body_start..self.body_end)
    }

    /// The body length in bytes.
    pub fn body_len(&self) -> usize {
        self.body_end - self.body_start
    }
}

/// Where one complete message lies in a buffer: its body, and the end of its framing
/// (where the next message starts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Located {
    pub body_start: usize,
    pub body_end: usize,
    pub end: usize,
}

/// Splits a byte stream into complete hub messages WITHOUT decoding them.
///
/// The splitter is stateless: all buffering is in the caller's `BytesMut`, which keeps any
/// incomplete message between calls. Once an error is returned the stream cannot be
/// resynchronised and the connection must be closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameSplitter {
    format: Format,
    max_message_size: usize,
}

impl FrameSplitter {
    /// `max_message_size` limits one message body in bytes, framing excluded
    /// (ASP.NET Core's default is 32768). Use `usize::MAX` for no limit.
    pub fn new(format: Format, max_message_size: usize) -> Self {
        FrameSplitter {
            format,
            max_message_size,
        }
    }

    pub fn format(&self) -> Format {
        self.format
    }

    pub fn max_message_size(&self) -> usize {
        self.max_message_size
    }

    /// Takes the next complete message off the front of `buf`.
    ///
    /// `Ok(None)`: no complete message yet; `buf` is left untouched. An oversized message
    /// is reported as early as possible: for JSON as soon as more than the limit is
    /// buffered without a record separator, for MessagePack as soon as the length prefix
    /// has been read.
    pub fn next_frame(&self, buf: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
        self.next_frame_resuming(buf, &mut 0)
    }

    /// [`next_frame`](Self::next_frame) for a caller that keeps `scanned` between calls: the
    /// number of leading bytes of `buf` already known to hold no record separator. A JSON
    /// message arriving in many small pieces is then searched once, not once per piece
    /// (which would be quadratic in its size). Keep `scanned` at 0 for a new buffer.
    pub fn next_frame_resuming(
        &self,
        buf: &mut BytesMut,
        scanned: &mut usize,
    ) -> Result<Option<Frame>, FrameError> {
        match self.locate(buf, scanned)? {
            Some(found) => Ok(Some(Frame {
                framed: buf.split_to(found.end).freeze(),
                body_start: found.body_start,
                body_end: found.body_end,
            })),
            None => Ok(None),
        }
    }

    /// Where the first complete message of `buf` lies, without taking it: the one
    /// frame-boundary scanner every reader of hub messages uses. `scanned` is as for
    /// [`next_frame_resuming`](Self::next_frame_resuming): it is reset when a message is
    /// found and advanced when none is.
    pub fn locate(&self, buf: &[u8], scanned: &mut usize) -> Result<Option<Located>, FrameError> {
        let too_large = FrameError::TooLarge {
            limit: self.max_message_size,
        };
        match self.format {
            Format::Json => {
                // Only the first limit + 1 bytes can hold the separator of an acceptable body.
                let window = buf.len().min(self.max_message_size.saturating_add(1));
                let start = (*scanned).min(window);
                match buf[start..window]
                    .iter()
                    .position(|&b| b == RECORD_SEPARATOR)
                {
                    Some(offset) => {
                        let end = start + offset;
                        *scanned = 0;
                        Ok(Some(Located {
                            body_start: 0,
                            body_end: end,
                            end: end + 1,
                        }))
                    }
                    None if buf.len() > self.max_message_size => Err(too_large),
                    None => {
                        *scanned = window;
                        Ok(None)
                    }
                }
            }
            Format::MessagePack => {
                let Some((len, prefix)) = read_varint(buf)? else {
                    return Ok(None);
                };
                let len = len as usize;
                if len > self.max_message_size {
                    return Err(too_large);
                }
                if buf.len() - prefix < len {
                    return Ok(None);
                }
                Ok(Some(Located {
                    body_start: prefix,
                    body_end: prefix + len,
                    end: prefix + len,
                }))
            }
        }
    }

    /// The length of the longest prefix of `buf` made of whole messages (0 if the first one
    /// is incomplete), for a relay that forwards runs of whole messages without splitting
    /// them. `scanned`: leading bytes known to hold no record separator. For JSON only the
    /// incomplete rest is held against the size limit: whole messages arrived inside one frame
    /// that was itself within the peer's limit. JSON is searched backwards from the end, so a large
    /// message that arrives whole costs no scan of its body.
    pub fn whole_prefix_len(&self, buf: &[u8], scanned: usize) -> Result<usize, FrameError> {
        let too_large = FrameError::TooLarge {
            limit: self.max_message_size,
        };
        match self.format {
            Format::Json => {
                let end = buf[scanned.min(buf.len())..]
                    .iter()
                    .rposition(|&b| b == RECORD_SEPARATOR)
                    .map_or(0, |p| scanned + p + 1);
                if buf.len() - end > self.max_message_size {
                    return Err(too_large);
                }
                Ok(end)
            }
            Format::MessagePack => {
                let mut at = 0;
                while at < buf.len() {
                    let Some((len, prefix)) = read_varint(&buf[at..])? else {
                        break;
                    };
                    let len = len as usize;
                    if len > self.max_message_size {
                        return Err(too_large);
                    }
                    if buf.len() - at - prefix < len {
                        break;
                    }
                    at += prefix + len;
                }
                Ok(at)
            }
        }
    }

    /// Takes every complete message off the front of `buf`, leaving any incomplete rest.
    pub fn split_all(&self, buf: &mut BytesMut) -> Result<Vec<Frame>, FrameError> {
        let mut frames = Vec::new();
        while let Some(frame) = self.next_frame(buf)? {
            frames.push(frame);
        }
        Ok(frames)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const JSON_A: &[u8] = b"{\"type\":6}\x1e";
    const JSON_B: &[u8] = b"{\"type\":1,\"target\":\"T\",\"arguments\":[1]}\x1e";
    const MP_PING: &[u8] = &[0x02, 0x91, 0x06];
    const MP_CLOSE: &[u8] = &[0x04, 0x93, 0x07, 0xc0, 0xc2];

    fn splitter(format: Format) -> FrameSplitter {
        FrameSplitter::new(format, 32 * 1024)
    }

    #[test]
    fn resuming_search_finds_the_same_frames_byte_by_byte() {
        let stream: Vec<u8> = [JSON_A, JSON_B, JSON_A].concat();
        let splitter = splitter(Format::Json);
        let mut buf = BytesMut::new();
        let mut scanned = 0;
        let mut frames = Vec::new();
        for byte in &stream {
            buf.extend_from_slice(&[*byte]);
            while let Some(frame) = splitter
                .next_frame_resuming(&mut buf, &mut scanned)
                .unwrap()
            {
                frames.push(frame.framed);
            }
            assert!(scanned <= buf.len());
        }
        assert_eq!(frames, vec![JSON_A, JSON_B, JSON_A]);
        assert!(buf.is_empty());
    }

    #[test]
    fn whole_prefix_len_stops_before_an_incomplete_message() {
        let json: Vec<u8> = [JSON_A, JSON_B, b"{\"ty"].concat();
        let json_splitter = splitter(Format::Json);
        assert_eq!(
            json_splitter.whole_prefix_len(&json, 0).unwrap(),
            JSON_A.len() + JSON_B.len()
        );
        assert_eq!(json_splitter.whole_prefix_len(b"{\"ty", 0).unwrap(), 0);
        let msgpack: Vec<u8> = [MP_PING, MP_CLOSE, &[0x05, 0x01]].concat();
        assert_eq!(
            splitter(Format::MessagePack)
                .whole_prefix_len(&msgpack, 0)
                .unwrap(),
            MP_PING.len() + MP_CLOSE.len()
        );
        let small = FrameSplitter::new(Format::Json, 4);
        assert!(small.whole_prefix_len(b"{\"type\":", 0).is_err());
        assert_eq!(small.whole_prefix_len(JSON_B, 0).unwrap(), JSON_B.len());
        assert!(splitter(Format::MessagePack)
            .whole_prefix_len(&[0xff, 0xff, 0xff, 0xff, 0xff, 0x01], 0)
            .is_err());
    }

    #[test]
    fn locate_reports_body_and_end() {
        let mut scanned = 0;
        let found = splitter(Format::MessagePack)
            .locate(MP_CLOSE, &mut scanned)
            .unwrap()
            .unwrap();
        assert_eq!((found.body_start, found.body_end, found.end), (1, 5, 5));
        let found = splitter(Format::Json)
            .locate(JSON_A, &mut scanned)
            .unwrap()
            .unwrap();
        assert_eq!((found.body_start, found.body_end, found.end), (0, 10, 11));
    }

    #[test]
    fn json_multiple_messages_in_one_buffer() {
        let mut buf = BytesMut::new();
        buf.extend_from_slice(JSON_A);
        buf.extend_from_slice(JSON_B);
        buf.extend_from_slice(b"{\"ty");
        let frames = splitter(Format::Json).split_all(&mut buf).unwrap();
        assert_eq!(frames.len(), 2);
        assert_eq!(&frames[0].framed[..], JSON_A);
        assert_eq!(frames[0].body(), &JSON_A[..JSON_A.len() - 1]);
        assert_eq!(frames[1].body(), &JSON_B[..JSON_B.len() - 1]);
        assert_eq!(&buf[..], b"{\"ty", "the incomplete rest stays buffered");
    }

    #[test]
    fn msgpack_multiple_messages_in_one_buffer() {
        let mut buf = BytesMut::new();
        buf.extend_from_slice(MP_PING);
        buf.extend_from_slice(MP_CLOSE);
        buf.extend_from_slice(&[0x05, 0x01]);
        let frames = splitter(Format::MessagePack).split_all(&mut buf).unwrap();
        assert_eq!(frames.len(), 2);
        assert_eq!(&frames[0].framed[..], MP_PING);
        assert_eq!(frames[0].body(), &[0x91, 0x06]);
        assert_eq!(frames[1].body(), &MP_CLOSE[1..]);
        assert_eq!(
            frames[1].body_bytes(),
            Bytes::copy_from_slice(&MP_CLOSE[1..])
        );
        assert_eq!(&buf[..], &[0x05, 0x01]);
    }

    /// Feeds `stream` one byte at a time and returns the frames produced, checking that
    /// nothing is produced before a message's last byte has arrived.
    fn feed_byte_by_byte(format: Format, stream: &[u8]) -> Vec<Frame> {
        let s = splitter(format);
        let mut buf = BytesMut::new();
        let mut frames = Vec::new();
        for &b in stream {
            buf.extend_from_slice(&[b]);
            let before = buf.len();
            match s.next_frame(&mut buf).unwrap() {
                Some(frame) => {
                    assert!(buf.is_empty(), "a frame ends exactly at the newest byte");
                    frames.push(frame);
                }
                None => assert_eq!(buf.len(), before, "incomplete bytes are kept"),
            }
        }
        assert!(buf.is_empty());
        frames
    }

    #[test]
    fn split_at_every_byte_boundary() {
        let json: Vec<u8> = [JSON_A, JSON_B, JSON_A].concat();
        let frames = feed_byte_by_byte(Format::Json, &json);
        assert_eq!(frames.len(), 3);
        assert_eq!(&frames[1].framed[..], JSON_B);

        // Include a body of 200 bytes so that the length prefix itself is split (c8 01).
        let mut long = vec![0xc8, 0x01, 0xdc, 0x00, 0xc5];
        long.extend(std::iter::repeat_n(0xc0, 197));
        let mp: Vec<u8> = [MP_PING, &long, MP_CLOSE].concat();
        let frames = feed_byte_by_byte(Format::MessagePack, &mp);
        assert_eq!(frames.len(), 3);
        assert_eq!(frames[1].body_len(), 200);
        assert_eq!(&frames[1].framed[..], &long[..]);

        // Also every split into two chunks.
        for cut in 0..=mp.len() {
            let s = splitter(Format::MessagePack);
            let mut buf = BytesMut::from(&mp[..cut]);
            let mut got = s.split_all(&mut buf).unwrap();
            buf.extend_from_slice(&mp[cut..]);
            got.extend(s.split_all(&mut buf).unwrap());
            assert_eq!(got, frames, "cut at {cut}");
        }
    }

    #[test]
    fn varint_longer_than_five_bytes_is_rejected() {
        let s = FrameSplitter::new(Format::MessagePack, usize::MAX);
        let mut buf = BytesMut::from(&[0x80, 0x80, 0x80, 0x80][..]);
        assert_eq!(
            s.next_frame(&mut buf),
            Ok(None),
            "four continuation bytes may still end"
        );
        buf.extend_from_slice(&[0x80, 0x01]);
        let err = s.next_frame(&mut buf).unwrap_err();
        assert_eq!(err, FrameError::LengthPrefixTooLarge);
        assert_eq!(
            err.to_string(),
            "Messages over 2GB in size are not supported."
        );
    }

    #[test]
    fn two_gigabyte_prefix() {
        let s = FrameSplitter::new(Format::MessagePack, usize::MAX);
        // 2^31 - 1 is the largest legal length: accepted, waiting for the body.
        let mut buf = BytesMut::from(&[0xff, 0xff, 0xff, 0xff, 0x07][..]);
        assert_eq!(s.next_frame(&mut buf), Ok(None));
        assert_eq!(buf.len(), 5);
        // 2^31 is over the limit.
        let mut buf = BytesMut::from(&[0x80, 0x80, 0x80, 0x80, 0x08][..]);
        assert_eq!(
            s.next_frame(&mut buf),
            Err(FrameError::LengthPrefixTooLarge)
        );
        // With the default limit, the maximum prefix is a size error as soon as it is read.
        let mut buf = BytesMut::from(&[0xff, 0xff, 0xff, 0xff, 0x07][..]);
        assert_eq!(
            splitter(Format::MessagePack).next_frame(&mut buf),
            Err(FrameError::TooLarge { limit: 32768 })
        );
    }

    #[test]
    fn oversize_body_is_rejected_early() {
        let limit = 16;
        let s = FrameSplitter::new(Format::MessagePack, limit);
        // Prefix 17, no body bytes yet: rejected right away.
        let mut buf = BytesMut::from(&[0x11][..]);
        let err = s.next_frame(&mut buf).unwrap_err();
        assert_eq!(
            err.to_string(),
            "The maximum message size of 16B was exceeded."
        );
        // Exactly the limit is fine.
        let mut buf = BytesMut::from(&[0x10][..]);
        buf.extend_from_slice(&[0xc0; 16]);
        assert_eq!(s.next_frame(&mut buf).unwrap().unwrap().body_len(), 16);

        let s = FrameSplitter::new(Format::Json, limit);
        let mut buf = BytesMut::from(&b"{\"type\":1,\"targ"[..]); // 15 bytes
        assert_eq!(s.next_frame(&mut buf), Ok(None));
        buf.extend_from_slice(b"e"); // 16 bytes, could still end here
        assert_eq!(s.next_frame(&mut buf), Ok(None));
        buf.extend_from_slice(b"t"); // 17 bytes without a separator: too large
        assert_eq!(s.next_frame(&mut buf), Err(FrameError::TooLarge { limit }));
        // A separator that comes too late is still too large.
        let mut buf = BytesMut::from(&b"0123456789abcdefX\x1e"[..]);
        assert_eq!(s.next_frame(&mut buf), Err(FrameError::TooLarge { limit }));
        let mut buf = BytesMut::from(&b"0123456789abcdef\x1e"[..]);
        assert_eq!(s.next_frame(&mut buf).unwrap().unwrap().body_len(), 16);
    }

    #[test]
    fn empty_body() {
        let mut buf = BytesMut::from(&[0x00, 0x02, 0x91, 0x06][..]);
        let s = splitter(Format::MessagePack);
        let empty = s.next_frame(&mut buf).unwrap().unwrap();
        assert_eq!(empty.body(), b"");
        assert_eq!(&empty.framed[..], &[0x00]);
        assert!(crate::msgpack::decode(empty.body()).is_err());
        assert_eq!(
            s.next_frame(&mut buf).unwrap().unwrap().body(),
            &[0x91, 0x06]
        );

        let mut buf = BytesMut::from(&b"\x1e{\"type\":6}\x1e"[..]);
        let s = splitter(Format::Json);
        let empty = s.next_frame(&mut buf).unwrap().unwrap();
        assert_eq!(empty.body(), b"");
        assert!(crate::json::decode(empty.body()).is_err());
        assert_eq!(
            s.next_frame(&mut buf).unwrap().unwrap().body(),
            b"{\"type\":6}"
        );
    }

    #[test]
    fn empty_buffer_needs_more() {
        for format in [Format::Json, Format::MessagePack] {
            let mut buf = BytesMut::new();
            assert_eq!(splitter(format).next_frame(&mut buf), Ok(None));
        }
    }

    #[test]
    fn non_minimal_varint_is_accepted() {
        let mut buf = BytesMut::from(&[0x82, 0x00, 0x91, 0x06][..]);
        let frame = splitter(Format::MessagePack)
            .next_frame(&mut buf)
            .unwrap()
            .unwrap();
        assert_eq!(frame.body(), &[0x91, 0x06]);
    }
}
