//! VarInt length-prefix framing (§1.2), identical to the SignalR MessagePack hub protocol's.

use bytes::{Buf, Bytes, BytesMut};

use crate::error::FrameError;

/// The longest legal prefix: 5 groups of 7 bits cover `i32::MAX`.
const MAX_PREFIX_LEN: usize = 5;

/// Splits a byte stream into message bodies without decoding them.
///
/// Stateless: the caller's `BytesMut` keeps any incomplete message between calls. After an
/// error the stream cannot be resynchronised and the connection must be closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameReader {
    max_message_size: usize,
}

impl FrameReader {
    /// `max_message_size` limits one body in bytes (prefix excluded); `usize::MAX` for none.
    pub fn new(max_message_size: usize) -> Self {
        FrameReader { max_message_size }
    }

    pub fn max_message_size(&self) -> usize {
        self.max_message_size
    }

    /// Takes one complete message body (without its prefix) off the front of `buf`.
    ///
    /// `Ok(None)`: the message is incomplete and `buf` is untouched. An oversized message is
    /// reported as soon as its prefix is read, before the body is buffered. The body is a
    /// shared slice of the buffer's allocation, so payloads decoded from it copy nothing.
    pub fn next_body(&self, buf: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
        let Some((len, prefix)) = read_prefix(buf)? else {
            return Ok(None);
        };
        if len > self.max_message_size {
            return Err(FrameError::TooLarge {
                size: len,
                limit: self.max_message_size,
            });
        }
        if buf.len() - prefix < len {
            return Ok(None);
        }
        let mut frame = buf.split_to(prefix + len);
        frame.advance(prefix);
        Ok(Some(frame.freeze()))
    }
}

/// Reads a length prefix: `Ok(None)` while incomplete, else `(body length, prefix length)`.
fn read_prefix(buf: &[u8]) -> Result<Option<(usize, usize)>, FrameError> {
    let mut value: u32 = 0;
    for (i, &byte) in buf.iter().take(MAX_PREFIX_LEN).enumerate() {
        // The fifth group may only carry bits 28..=30 and must end the prefix; anything
        // else is a sixth byte or a length over i32::MAX.
        if i == MAX_PREFIX_LEN - 1 && byte > 0x07 {
            return Err(FrameError::LengthPrefixTooLarge);
        }
        value |= u32::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(Some((value as usize, i + 1)));
        }
    }
    Ok(None)
}

/// Appends the VarInt prefix for a body of `len` bytes.
pub(crate) fn write_prefix(len: usize, out: &mut impl bytes::BufMut) {
    let mut rest = len;
    while rest > 0x7f {
        out.put_u8((rest & 0x7f) as u8 | 0x80);
        rest >>= 7;
    }
    out.put_u8(rest as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_round_trip() {
        for len in [0usize, 1, 127, 128, 5248, 16383, 16384, 70_000, 0x7fff_ffff] {
            let mut out = Vec::new();
            write_prefix(len, &mut out);
            assert!(out.len() <= MAX_PREFIX_LEN);
            assert_eq!(read_prefix(&out), Ok(Some((len, out.len()))), "{len}");
            assert_eq!(read_prefix(&out[..out.len() - 1]), Ok(None), "{len}");
        }
    }

    #[test]
    fn six_byte_prefix_is_rejected() {
        let reader = FrameReader::new(usize::MAX);
        let mut buf = BytesMut::from(&[0x80, 0x80, 0x80, 0x80][..]);
        assert_eq!(reader.next_body(&mut buf), Ok(None), "may still end");
        buf.extend_from_slice(&[0x80, 0x01]);
        let err = reader.next_body(&mut buf).unwrap_err();
        assert_eq!(err, FrameError::LengthPrefixTooLarge);
        assert_eq!(
            err.to_string(),
            "Messages over 2GB in size are not supported."
        );
    }

    #[test]
    fn two_gigabytes() {
        let reader = FrameReader::new(usize::MAX);
        // i32::MAX is legal: waiting for the body.
        let mut buf = BytesMut::from(&[0xff, 0xff, 0xff, 0xff, 0x07][..]);
        assert_eq!(reader.next_body(&mut buf), Ok(None));
        assert_eq!(buf.len(), 5);
        // 2^31 is not.
        let mut buf = BytesMut::from(&[0x80, 0x80, 0x80, 0x80, 0x08][..]);
        assert_eq!(
            reader.next_body(&mut buf),
            Err(FrameError::LengthPrefixTooLarge)
        );
    }

    #[test]
    fn size_limit_applies_to_the_prefix() {
        let reader = FrameReader::new(4);
        let mut buf = BytesMut::from(&[0x05][..]);
        let err = reader.next_body(&mut buf).unwrap_err();
        assert_eq!(err, FrameError::TooLarge { size: 5, limit: 4 });
        assert_eq!(
            err.to_string(),
            "The message size of 5B exceeds the maximum of 4B."
        );
        let mut buf = BytesMut::from(&[0x04, 1, 2, 3, 4, 0x00][..]);
        assert_eq!(
            reader.next_body(&mut buf).unwrap().unwrap(),
            &[1, 2, 3, 4][..]
        );
        assert_eq!(reader.next_body(&mut buf).unwrap().unwrap(), &b""[..]);
        assert!(buf.is_empty());
    }

    #[test]
    fn non_minimal_prefix_is_accepted() {
        let mut buf = BytesMut::from(&[0x82, 0x00, 0x91, 0x03][..]);
        let body = FrameReader::new(16).next_body(&mut buf).unwrap().unwrap();
        assert_eq!(body, &[0x91, 0x03][..]);
    }
}
