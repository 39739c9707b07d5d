//! A bounds-checked MessagePack cursor over one message body. The type dispatch and the
//! number/length decoding are `rmp`'s; this adds positions (for zero-copy binaries),
//! nil handling and skipping.

use bytes::Bytes;
use rmp::decode::{self as rd, NumValueReadError, ValueReadError};
use rmp::Marker;

use crate::error::FieldProblem;

pub(crate) type Result<T> = std::result::Result<T, FieldProblem>;

fn value_err<E>(err: ValueReadError<E>, expected: &'static str) -> FieldProblem
where
    E: rmp::decode::RmpReadErr,
{
    match err {
        ValueReadError::TypeMismatch(_) => FieldProblem::Expected(expected),
        ValueReadError::InvalidMarkerRead(_) | ValueReadError::InvalidDataRead(_) => {
            FieldProblem::Truncated
        }
    }
}

fn num_err<E>(err: NumValueReadError<E>, expected: &'static str) -> FieldProblem
where
    E: rmp::decode::RmpReadErr,
{
    match err {
        NumValueReadError::TypeMismatch(_) => FieldProblem::Expected(expected),
        NumValueReadError::OutOfRange => FieldProblem::OutOfRange(expected),
        _ => FieldProblem::Truncated,
    }
}

pub(crate) struct Reader<'a> {
    body: &'a Bytes,
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(body: &'a Bytes) -> Self {
        Reader { body, pos: 0 }
    }

    pub(crate) fn remaining(&self) -> usize {
        self.body.len() - self.pos
    }

    /// Runs an `rmp` reader on the rest of the body and advances past what it consumed.
    fn run<T, E>(
        &mut self,
        f: impl FnOnce(&mut &'a [u8]) -> std::result::Result<T, E>,
    ) -> std::result::Result<T, E> {
        let all: &'a [u8] = self.body;
        let mut rest = &all[self.pos..];
        let out = f(&mut rest);
        self.pos = all.len() - rest.len();
        out
    }

    fn marker(&self) -> Result<Marker> {
        self.body
            .get(self.pos)
            .map(|&b| Marker::from_u8(b))
            .ok_or(FieldProblem::Truncated)
    }

    /// Consumes a nil if there is one.
    pub(crate) fn nil(&mut self) -> Result<bool> {
        if self.marker()? == Marker::Null {
            self.pos += 1;
            return Ok(true);
        }
        Ok(false)
    }

    fn take(&mut self, len: usize) -> Result<std::ops::Range<usize>> {
        if len > self.remaining() {
            return Err(FieldProblem::Truncated);
        }
        let start = self.pos;
        self.pos += len;
        Ok(start..self.pos)
    }

    pub(crate) fn array_len(&mut self) -> Result<u32> {
        self.run(rd::read_array_len)
            .map_err(|e| value_err(e, "array"))
    }

    pub(crate) fn map_len(&mut self) -> Result<u32> {
        self.run(rd::read_map_len).map_err(|e| value_err(e, "map"))
    }

    pub(crate) fn i32(&mut self) -> Result<i32> {
        self.run(rd::read_int::<i32, _>)
            .map_err(|e| num_err(e, "int32"))
    }

    pub(crate) fn u64(&mut self) -> Result<u64> {
        self.run(rd::read_int::<u64, _>)
            .map_err(|e| num_err(e, "uint64"))
    }

    pub(crate) fn bool(&mut self) -> Result<bool> {
        self.run(rd::read_bool).map_err(|e| value_err(e, "bool"))
    }

    /// A UTF-8 string, borrowed from the body.
    pub(crate) fn str(&mut self) -> Result<&'a str> {
        let len = self
            .run(rd::read_str_len)
            .map_err(|e| value_err(e, "string"))?;
        let range = self.take(len as usize)?;
        let all: &'a [u8] = self.body;
        std::str::from_utf8(&all[range]).map_err(|_| FieldProblem::InvalidUtf8)
    }

    pub(crate) fn string(&mut self) -> Result<String> {
        self.str().map(str::to_owned)
    }

    /// Nil or a string.
    pub(crate) fn opt_string(&mut self) -> Result<Option<String>> {
        if self.nil()? {
            return Ok(None);
        }
        self.string().map(Some).map_err(|p| match p {
            FieldProblem::Expected(_) => FieldProblem::Expected("string or nil"),
            p => p,
        })
    }

    /// Nil (read as `""`) or a string.
    pub(crate) fn text(&mut self) -> Result<String> {
        self.opt_string().map(Option::unwrap_or_default)
    }

    /// Binary data as a zero-copy slice of the body.
    pub(crate) fn bin(&mut self) -> Result<Bytes> {
        let len = self
            .run(rd::read_bin_len)
            .map_err(|e| value_err(e, "binary"))?;
        let range = self.take(len as usize)?;
        Ok(self.body.slice(range))
    }

    /// Nil (read as empty, like the SDK) or binary data.
    pub(crate) fn bin_or_nil(&mut self) -> Result<Bytes> {
        if self.nil()? {
            return Ok(Bytes::new());
        }
        self.bin().map_err(|p| match p {
            FieldProblem::Expected(_) => FieldProblem::Expected("binary or nil"),
            p => p,
        })
    }

    /// Runs `read`; when it fails with anything but truncation, rewinds and skips the value
    /// instead (`Ok(None)`). For extension values whose type we cannot use.
    pub(crate) fn or_skip<T>(
        &mut self,
        read: impl FnOnce(&mut Self) -> Result<T>,
    ) -> Result<Option<T>> {
        let start = self.pos;
        match read(self) {
            Ok(v) => Ok(Some(v)),
            Err(FieldProblem::Truncated) => Err(FieldProblem::Truncated),
            Err(_) => {
                self.pos = start;
                self.skip().map(|()| None)
            }
        }
    }

    /// Skips one complete value of any type.
    pub(crate) fn skip(&mut self) -> Result<()> {
        self.skip_nested(0)
    }

    fn skip_nested(&mut self, depth: usize) -> Result<()> {
        let marker = self.marker()?;
        self.pos += 1;
        let data = match marker {
            Marker::FixPos(_) | Marker::FixNeg(_) | Marker::Null | Marker::True | Marker::False => {
                0
            }
            Marker::Reserved => return Err(FieldProblem::Expected("a MessagePack value")),
            Marker::U8 | Marker::I8 => 1,
            Marker::U16 | Marker::I16 => 2,
            Marker::U32 | Marker::I32 | Marker::F32 => 4,
            Marker::U64 | Marker::I64 | Marker::F64 => 8,
            Marker::FixStr(n) => usize::from(n),
            Marker::Str8 | Marker::Bin8 => self.be_len(1)?,
            Marker::Str16 | Marker::Bin16 => self.be_len(2)?,
            Marker::Str32 | Marker::Bin32 => self.be_len(4)?,
            // Extension types: a type byte, then the data.
            Marker::FixExt1 => 2,
            Marker::FixExt2 => 3,
            Marker::FixExt4 => 5,
            Marker::FixExt8 => 9,
            Marker::FixExt16 => 17,
            Marker::Ext8 => self.be_len(1)? + 1,
            Marker::Ext16 => self.be_len(2)? + 1,
            Marker::Ext32 => self.be_len(4)? + 1,
            Marker::FixArray(n) => return self.skip_items(usize::from(n), depth),
            Marker::Array16 => {
                let n = self.be_len(2)?;
                return self.skip_items(n, depth);
            }
            Marker::Array32 => {
                let n = self.be_len(4)?;
                return self.skip_items(n, depth);
            }
            // A map is twice as many values; 2 * u32::MAX fits a 64-bit usize, and on
            // 32-bit targets saturating is harmless (every value takes at least one byte).
            Marker::FixMap(n) => return self.skip_items(2 * usize::from(n), depth),
            Marker::Map16 => {
                let n = self.be_len(2)?;
                return self.skip_items(n.saturating_mul(2), depth);
            }
            Marker::Map32 => {
                let n = self.be_len(4)?;
                return self.skip_items(n.saturating_mul(2), depth);
            }
        };
        self.take(data).map(drop)
    }

    /// Skips `n` values inside a container at `depth`. Every value takes at least one byte,
    /// so a huge `n` fails at the end of the body, after at most `remaining()` iterations.
    fn skip_items(&mut self, n: usize, depth: usize) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        if depth >= crate::MAX_SKIP_DEPTH {
            return Err(FieldProblem::TooDeep);
        }
        for _ in 0..n {
            self.skip_nested(depth + 1)?;
        }
        Ok(())
    }

    fn be_len(&mut self, width: usize) -> Result<usize> {
        let range = self.take(width)?;
        Ok(self.body[range]
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | usize::from(b)))
    }
}

/// Capacity for `n` announced items of at least `min_item_bytes` each: never more than the
/// rest of the body could hold, so a hostile count cannot force a large allocation.
pub(crate) fn capacity(n: u32, reader: &Reader<'_>, min_item_bytes: usize) -> usize {
    (n as usize).min(reader.remaining() / min_item_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skip_every_kind() {
        let body = Bytes::from_static(&[
            0x92, 0x01, 0xa1, b'x', // [1, "x"]
            0x81, 0xc0, 0xc4, 0x01, 0x00, // {nil: bin(1)}
            0xd6, 0x05, 1, 2, 3, 4, // fixext4
            0xcb, 0, 0, 0, 0, 0, 0, 0, 0, // float64
            0xdc, 0x00, 0x01, 0xc3, // array16 [true]
            0xc7, 0x01, 0x02, 0xff, // ext8 len 1
        ]);
        let mut r = Reader::new(&body);
        for _ in 0..6 {
            r.skip().unwrap();
        }
        assert_eq!(r.remaining(), 0);
    }

    #[test]
    fn skip_rejects_nesting_bombs_and_truncation() {
        let deep = Bytes::from(vec![0x91; 10_000]);
        assert_eq!(Reader::new(&deep).skip(), Err(FieldProblem::TooDeep));
        let ok = Bytes::from([vec![0x91; crate::MAX_SKIP_DEPTH], vec![0xc0]].concat());
        assert_eq!(Reader::new(&ok).skip(), Ok(()));
        let too_deep = Bytes::from([vec![0x91; crate::MAX_SKIP_DEPTH + 1], vec![0xc0]].concat());
        assert_eq!(Reader::new(&too_deep).skip(), Err(FieldProblem::TooDeep));
        let huge = Bytes::from_static(&[0xdf, 0xff, 0xff, 0xff, 0xff, 0xc0]);
        assert_eq!(Reader::new(&huge).skip(), Err(FieldProblem::Truncated));
        let reserved = Bytes::from_static(&[0xc1]);
        assert!(matches!(
            Reader::new(&reserved).skip(),
            Err(FieldProblem::Expected(_))
        ));
    }

    #[test]
    fn binaries_share_the_body() {
        let body = Bytes::from(vec![0xc4, 0x03, 7, 8, 9]);
        let bin = Reader::new(&body).bin().unwrap();
        assert_eq!(&bin[..], &[7, 8, 9]);
        assert_eq!(bin.as_ptr(), body[2..].as_ptr());
    }

    #[test]
    fn strings() {
        let body = Bytes::from_static(&[0xa2, 0xff, 0xfe]);
        assert_eq!(Reader::new(&body).str(), Err(FieldProblem::InvalidUtf8));
        let body = Bytes::from_static(&[0xd9, 0x05, b'a']);
        assert_eq!(Reader::new(&body).str(), Err(FieldProblem::Truncated));
        let body = Bytes::from_static(&[0x01]);
        assert_eq!(
            Reader::new(&body).str(),
            Err(FieldProblem::Expected("string"))
        );
        let body = Bytes::from_static(&[0xc0]);
        assert_eq!(Reader::new(&body).text(), Ok(String::new()));
        assert_eq!(Reader::new(&body).opt_string(), Ok(None));
    }

    #[test]
    fn ints() {
        let body = Bytes::from_static(&[0xd2, 0, 0, 0, 1]);
        assert_eq!(Reader::new(&body).i32(), Ok(1));
        let body = Bytes::from_static(&[0xce, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(
            Reader::new(&body).i32(),
            Err(FieldProblem::OutOfRange("int32"))
        );
        let body = Bytes::from_static(&[0xcd, 0x01]);
        assert_eq!(Reader::new(&body).i32(), Err(FieldProblem::Truncated));
        let body = Bytes::from_static(&[0xff]);
        assert_eq!(
            Reader::new(&body).u64(),
            Err(FieldProblem::OutOfRange("uint64"))
        );
    }
}
