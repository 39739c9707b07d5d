//! MessagePack writing through `rmp`, always in the shortest encoding (as the .NET writer
//! does), into any `std::io::Write` sink.
//!
//! The sinks used here (a `Vec<u8>`, a `BytesMut` writer, a byte counter) cannot fail, so
//! the `rmp` results carry no information and are dropped.

use std::io;

use rmp::encode as wr;

use crate::message::{Claims, Headers, Payloads};

/// Counts the bytes written: sizes a body before it is written behind its length prefix.
#[derive(Default)]
pub(crate) struct Counter(pub(crate) usize);

impl io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Lengths beyond u32 cannot be expressed in MessagePack; such a message would also exceed
/// the 2 GB frame limit, so clamping only affects bodies no peer accepts anyway.
fn len32(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

pub(crate) struct Out<'w, W: io::Write>(pub(crate) &'w mut W);

impl<W: io::Write> Out<'_, W> {
    /// The array header and the type id that open every message.
    pub(crate) fn head(&mut self, type_id: i32, len: usize) {
        self.array(len);
        self.int(type_id);
    }

    pub(crate) fn array(&mut self, len: usize) {
        let _ = wr::write_array_len(self.0, len32(len));
    }

    pub(crate) fn map(&mut self, len: usize) {
        let _ = wr::write_map_len(self.0, len32(len));
    }

    pub(crate) fn nil(&mut self) {
        let _ = wr::write_nil(self.0);
    }

    pub(crate) fn bool(&mut self, v: bool) {
        let _ = wr::write_bool(self.0, v);
    }

    /// Shortest form; non-negative values use the unsigned markers, like the .NET writer.
    pub(crate) fn int(&mut self, v: i32) {
        let _ = wr::write_sint(self.0, i64::from(v));
    }

    /// Always the 5-byte `0xd2` form (ConnectionFlowControl only).
    pub(crate) fn fixed_i32(&mut self, v: i32) {
        let _ = wr::write_i32(self.0, v);
    }

    pub(crate) fn uint(&mut self, v: u64) {
        let _ = wr::write_uint(self.0, v);
    }

    pub(crate) fn str(&mut self, s: &str) {
        let _ = wr::write_str_len(self.0, len32(s.len()));
        let _ = self.0.write_all(s.as_bytes());
    }

    pub(crate) fn opt_str(&mut self, s: Option<&str>) {
        match s {
            Some(s) => self.str(s),
            None => self.nil(),
        }
    }

    pub(crate) fn bin(&mut self, b: &[u8]) {
        let _ = wr::write_bin_len(self.0, len32(b.len()));
        let _ = self.0.write_all(b);
    }

    pub(crate) fn strings(&mut self, items: &[String]) {
        self.array(items.len());
        for s in items {
            self.str(s);
        }
    }

    pub(crate) fn payloads(&mut self, payloads: &Payloads) {
        self.map(payloads.len());
        for (protocol, bytes) in payloads {
            self.str(protocol);
            self.bin(bytes);
        }
    }

    pub(crate) fn claims(&mut self, claims: &Claims) {
        self.map(claims.len());
        for (ty, value) in claims {
            self.str(ty);
            self.str(value);
        }
    }

    pub(crate) fn headers(&mut self, headers: &Headers) {
        self.map(headers.len());
        for (name, values) in headers {
            self.str(name);
            self.strings(values);
        }
    }
}
