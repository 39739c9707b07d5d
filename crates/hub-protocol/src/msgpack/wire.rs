//! MessagePack primitives: a bounds-checked reader over a body, infallible writers that pick
//! the smallest encoding (as both the .NET and the JS writers do), and the VarInt prefix.

use crate::error::FrameError;

/// Maximum nesting accepted when decoding payload values.
pub(crate) const MAX_DEPTH: usize = 256;

/// The largest body a VarInt prefix may announce (`i32::MAX`).
pub const MAX_VARINT_VALUE: u32 = 0x7FFF_FFFF;

/// Appends the VarInt length prefix for a body of `len` bytes: 7 bits per byte, least
/// significant group first, high bit = more bytes follow.
pub fn write_varint(len: usize, out: &mut Vec<u8>) {
    let mut rest = len;
    loop {
        let group = (rest & 0x7F) as u8;
        rest >>= 7;
        if rest == 0 {
            out.push(group);
            return;
        }
        out.push(group | 0x80);
    }
}

/// Reads a VarInt length prefix from the start of `buf`.
///
/// `Ok(None)` = the prefix is not complete yet. `Ok(Some((len, prefix_len)))` otherwise.
/// A prefix longer than 5 bytes or announcing more than `i32::MAX` bytes is an error.
pub fn read_varint(buf: &[u8]) -> Result<Option<(u32, usize)>, FrameError> {
    let mut value: u32 = 0;
    for (i, &byte) in buf.iter().take(5).enumerate() {
        if i == 4 && byte > 0x07 {
            // A fifth byte may only carry bits 28..=30 and must end the prefix.
            return Err(FrameError::LengthPrefixTooLarge);
        }
        value |= u32::from(byte & 0x7F) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(Some((value, i + 1)));
        }
    }
    Ok(None)
}

/// A cursor over one MessagePack body. Every read returns `None` when the bytes at the
/// cursor are not of the requested kind or are truncated.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn peek(&self) -> Option<u8> {
        self.buf.get(self.pos).copied()
    }

    fn byte(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.pos += 1;
        Some(b)
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let slice = self.buf.get(self.pos..end)?;
        self.pos = end;
        Some(slice)
    }

    fn be<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }

    fn be_len(&mut self, width: usize) -> Option<usize> {
        Some(match width {
            1 => usize::from(self.byte()?),
            2 => usize::from(u16::from_be_bytes(self.be()?)),
            _ => u32::from_be_bytes(self.be()?) as usize,
        })
    }

    pub(crate) fn array_len(&mut self) -> Option<usize> {
        match self.peek()? {
            m @ 0x90..=0x9f => {
                self.pos += 1;
                Some(usize::from(m & 0x0f))
            }
            0xdc => {
                self.pos += 1;
                self.be_len(2)
            }
            0xdd => {
                self.pos += 1;
                self.be_len(4)
            }
            _ => None,
        }
    }

    pub(crate) fn map_len(&mut self) -> Option<usize> {
        match self.peek()? {
            m @ 0x80..=0x8f => {
                self.pos += 1;
                Some(usize::from(m & 0x0f))
            }
            0xde => {
                self.pos += 1;
                self.be_len(2)
            }
            0xdf => {
                self.pos += 1;
                self.be_len(4)
            }
            _ => None,
        }
    }

    /// Any integer format, as i64 (uint64 values above `i64::MAX` fail).
    pub(crate) fn int(&mut self) -> Option<i64> {
        let v = match self.peek()? {
            m @ 0x00..=0x7f => {
                self.pos += 1;
                i64::from(m)
            }
            m @ 0xe0..=0xff => {
                self.pos += 1;
                i64::from(m as i8)
            }
            0xcc => {
                self.pos += 1;
                i64::from(self.byte()?)
            }
            0xcd => {
                self.pos += 1;
                i64::from(u16::from_be_bytes(self.be()?))
            }
            0xce => {
                self.pos += 1;
                i64::from(u32::from_be_bytes(self.be()?))
            }
            0xcf => {
                self.pos += 1;
                i64::try_from(u64::from_be_bytes(self.be()?)).ok()?
            }
            0xd0 => {
                self.pos += 1;
                i64::from(i8::from_be_bytes(self.be()?))
            }
            0xd1 => {
                self.pos += 1;
                i64::from(i16::from_be_bytes(self.be()?))
            }
            0xd2 => {
                self.pos += 1;
                i64::from(i32::from_be_bytes(self.be()?))
            }
            0xd3 => {
                self.pos += 1;
                i64::from_be_bytes(self.be()?)
            }
            _ => return None,
        };
        Some(v)
    }

    pub(crate) fn bool(&mut self) -> Option<bool> {
        let v = match self.peek()? {
            0xc2 => false,
            0xc3 => true,
            _ => return None,
        };
        self.pos += 1;
        Some(v)
    }

    /// A UTF-8 string.
    pub(crate) fn str(&mut self) -> Option<&'a str> {
        let len = match self.peek()? {
            m @ 0xa0..=0xbf => {
                self.pos += 1;
                usize::from(m & 0x1f)
            }
            0xd9 => {
                self.pos += 1;
                self.be_len(1)?
            }
            0xda => {
                self.pos += 1;
                self.be_len(2)?
            }
            0xdb => {
                self.pos += 1;
                self.be_len(4)?
            }
            _ => return None,
        };
        std::str::from_utf8(self.take(len)?).ok()
    }

    /// Nil (`Some(None)`) or a UTF-8 string.
    pub(crate) fn nil_or_str(&mut self) -> Option<Option<&'a str>> {
        if self.peek()? == 0xc0 {
            self.pos += 1;
            return Some(None);
        }
        self.str().map(Some)
    }

    /// One complete value, decoded into an `rmpv::Value`.
    pub(crate) fn value(&mut self) -> Result<rmpv::Value, String> {
        let mut rest = &self.buf[self.pos..];
        let value = rmpv::decode::read_value_with_max_depth(&mut rest, MAX_DEPTH)
            .map_err(|e| e.to_string())?;
        self.pos = self.buf.len() - rest.len();
        Ok(value)
    }

    /// Skips one complete value without allocating.
    pub(crate) fn skip(&mut self) -> Option<()> {
        // Number of values still to skip; every value needs at least one byte, so a
        // hostile length can only make this fail at the end of the buffer.
        let mut pending: u64 = 1;
        while pending > 0 {
            pending -= 1;
            let m = self.byte()?;
            let data = match m {
                0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => 0,
                0x80..=0x8f => {
                    pending += 2 * u64::from(m & 0x0f);
                    0
                }
                0x90..=0x9f => {
                    pending += u64::from(m & 0x0f);
                    0
                }
                0xa0..=0xbf => usize::from(m & 0x1f),
                0xc4 | 0xd9 => self.be_len(1)?,
                0xc5 | 0xda => self.be_len(2)?,
                0xc6 | 0xdb => self.be_len(4)?,
                0xc7 => self.be_len(1)?.checked_add(1)?,
                0xc8 => self.be_len(2)?.checked_add(1)?,
                0xc9 => self.be_len(4)?.checked_add(1)?,
                0xcc | 0xd0 => 1,
                0xcd | 0xd1 => 2,
                0xca | 0xce | 0xd2 => 4,
                0xcb | 0xcf | 0xd3 => 8,
                0xd4 => 2,
                0xd5 => 3,
                0xd6 => 5,
                0xd7 => 9,
                0xd8 => 17,
                0xdc => {
                    pending += self.be_len(2)? as u64;
                    0
                }
                0xdd => {
                    pending += self.be_len(4)? as u64;
                    0
                }
                0xde => {
                    pending += 2 * self.be_len(2)? as u64;
                    0
                }
                0xdf => {
                    pending += 2 * self.be_len(4)? as u64;
                    0
                }
                // 0xc1 is never used.
                _ => return None,
            };
            self.take(data)?;
        }
        Some(())
    }
}

/// Infallible MessagePack writers into a `Vec<u8>`, always choosing the smallest format.
pub(crate) mod write {
    pub(crate) fn nil(out: &mut Vec<u8>) {
        out.push(0xc0);
    }

    pub(crate) fn bool(out: &mut Vec<u8>, v: bool) {
        out.push(if v { 0xc3 } else { 0xc2 });
    }

    pub(crate) fn uint(out: &mut Vec<u8>, v: u64) {
        if v <= 0x7f {
            out.push(v as u8);
        } else if v <= 0xff {
            out.extend_from_slice(&[0xcc, v as u8]);
        } else if v <= 0xffff {
            out.push(0xcd);
            out.extend_from_slice(&(v as u16).to_be_bytes());
        } else if v <= 0xffff_ffff {
            out.push(0xce);
            out.extend_from_slice(&(v as u32).to_be_bytes());
        } else {
            out.push(0xcf);
            out.extend_from_slice(&v.to_be_bytes());
        }
    }

    pub(crate) fn int(out: &mut Vec<u8>, v: i64) {
        if v >= 0 {
            uint(out, v as u64);
        } else if v >= -32 {
            out.push(v as i8 as u8);
        } else if v >= i64::from(i8::MIN) {
            out.extend_from_slice(&[0xd0, v as i8 as u8]);
        } else if v >= i64::from(i16::MIN) {
            out.push(0xd1);
            out.extend_from_slice(&(v as i16).to_be_bytes());
        } else if v >= i64::from(i32::MIN) {
            out.push(0xd2);
            out.extend_from_slice(&(v as i32).to_be_bytes());
        } else {
            out.push(0xd3);
            out.extend_from_slice(&v.to_be_bytes());
        }
    }

    pub(crate) fn f32(out: &mut Vec<u8>, v: f32) {
        out.push(0xca);
        out.extend_from_slice(&v.to_be_bytes());
    }

    pub(crate) fn f64(out: &mut Vec<u8>, v: f64) {
        out.push(0xcb);
        out.extend_from_slice(&v.to_be_bytes());
    }

    fn header(out: &mut Vec<u8>, len: usize, fix: Option<(u8, usize)>, markers: [u8; 3]) {
        match fix {
            Some((base, max)) if len <= max => out.push(base | len as u8),
            _ if len <= 0xff && markers[0] != 0 => out.extend_from_slice(&[markers[0], len as u8]),
            _ if len <= 0xffff => {
                out.push(markers[1]);
                out.extend_from_slice(&(len as u16).to_be_bytes());
            }
            _ => {
                out.push(markers[2]);
                out.extend_from_slice(&(len as u32).to_be_bytes());
            }
        }
    }

    /// A str whose bytes are written as given (they need not be valid UTF-8).
    pub(crate) fn str_bytes(out: &mut Vec<u8>, s: &[u8]) {
        header(out, s.len(), Some((0xa0, 31)), [0xd9, 0xda, 0xdb]);
        out.extend_from_slice(s);
    }

    pub(crate) fn str(out: &mut Vec<u8>, s: &str) {
        str_bytes(out, s.as_bytes());
    }

    pub(crate) fn nil_or_str(out: &mut Vec<u8>, s: Option<&str>) {
        match s {
            Some(s) => str(out, s),
            None => nil(out),
        }
    }

    pub(crate) fn bin(out: &mut Vec<u8>, b: &[u8]) {
        header(out, b.len(), None, [0xc4, 0xc5, 0xc6]);
        out.extend_from_slice(b);
    }

    pub(crate) fn array_len(out: &mut Vec<u8>, len: usize) {
        header(out, len, Some((0x90, 15)), [0, 0xdc, 0xdd]);
    }

    pub(crate) fn map_len(out: &mut Vec<u8>, len: usize) {
        header(out, len, Some((0x80, 15)), [0, 0xde, 0xdf]);
    }

    pub(crate) fn ext(out: &mut Vec<u8>, ty: i8, data: &[u8]) {
        let fixed = match data.len() {
            1 => Some(0xd4),
            2 => Some(0xd5),
            4 => Some(0xd6),
            8 => Some(0xd7),
            16 => Some(0xd8),
            _ => None,
        };
        match fixed {
            Some(marker) => out.push(marker),
            None => header(out, data.len(), None, [0xc7, 0xc8, 0xc9]),
        }
        out.push(ty as u8);
        out.extend_from_slice(data);
    }

    pub(crate) fn strings(out: &mut Vec<u8>, items: &[String]) {
        array_len(out, items.len());
        for s in items {
            str(out, s);
        }
    }

    pub(crate) fn headers(out: &mut Vec<u8>, headers: &[(String, String)]) {
        map_len(out, headers.len());
        for (k, v) in headers {
            str(out, k);
            str(out, v);
        }
    }

    /// Any `rmpv::Value`. Strings holding invalid UTF-8 are written back as str, unchanged.
    pub(crate) fn value(out: &mut Vec<u8>, v: &rmpv::Value) {
        use rmpv::Value;
        match v {
            Value::Nil => nil(out),
            Value::Boolean(b) => bool(out, *b),
            Value::Integer(n) => match (n.as_u64(), n.as_i64()) {
                (Some(u), _) => uint(out, u),
                (None, Some(i)) => int(out, i),
                (None, None) => nil(out),
            },
            Value::F32(f) => f32(out, *f),
            Value::F64(f) => f64(out, *f),
            Value::String(s) => str_bytes(out, s.as_bytes()),
            Value::Binary(b) => bin(out, b),
            Value::Array(items) => {
                array_len(out, items.len());
                for item in items {
                    value(out, item);
                }
            }
            Value::Map(entries) => {
                map_len(out, entries.len());
                for (k, v) in entries {
                    value(out, k);
                    value(out, v);
                }
            }
            Value::Ext(ty, data) => ext(out, *ty, data),
        }
    }

    /// A `serde_json::Value`, mapped the plain way: integers as ints, other numbers as
    /// float64, objects as string-keyed maps.
    pub(crate) fn json(out: &mut Vec<u8>, v: &serde_json::Value) {
        use serde_json::Value;
        match v {
            Value::Null => nil(out),
            Value::Bool(b) => bool(out, *b),
            Value::Number(n) => {
                if let Some(u) = n.as_u64() {
                    uint(out, u);
                } else if let Some(i) = n.as_i64() {
                    int(out, i);
                } else {
                    f64(out, n.as_f64().unwrap_or(0.0));
                }
            }
            Value::String(s) => str(out, s),
            Value::Array(items) => {
                array_len(out, items.len());
                for item in items {
                    json(out, item);
                }
            }
            Value::Object(map) => {
                map_len(out, map.len());
                for (k, v) in map {
                    str(out, k);
                    json(out, v);
                }
            }
        }
    }
}
