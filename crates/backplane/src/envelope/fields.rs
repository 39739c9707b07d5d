//! The MessagePack fields envelopes are made of, written to memory and read from a received
//! buffer without copying binary fields. Public so that what rides inside an envelope (the
//! node's control messages) is written and read the same way.

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use rmp::Marker;
use switchyard_core::{ConnectionId, GroupName, NameError, Payloads, Protocol, Target, UserId};

use super::EnvelopeError;

/// Writes MessagePack into memory (writing to memory cannot fail).
pub struct Writer(bytes::buf::Writer<BytesMut>);

impl Writer {
    pub fn with_capacity(capacity: usize) -> Writer {
        Writer(BytesMut::with_capacity(capacity).writer())
    }

    pub fn finish(self) -> Bytes {
        self.0.into_inner().freeze()
    }

    /// What was written, to append to (the seal's tag).
    pub(super) fn into_buffer(self) -> BytesMut {
        self.0.into_inner()
    }

    pub fn array(&mut self, len: usize) {
        rmp::encode::write_array_len(&mut self.0, len as u32).expect("writing to memory");
    }

    pub fn uint(&mut self, value: u64) {
        rmp::encode::write_uint(&mut self.0, value).expect("writing to memory");
    }

    pub fn bool(&mut self, value: bool) {
        rmp::encode::write_bool(&mut self.0, value).expect("writing to memory");
    }

    pub fn str(&mut self, value: &str) {
        rmp::encode::write_str(&mut self.0, value).expect("writing to memory");
    }

    pub fn nil(&mut self) {
        rmp::encode::write_nil(&mut self.0).expect("writing to memory");
    }

    pub fn opt_str(&mut self, value: Option<&str>) {
        match value {
            Some(v) => self.str(v),
            None => self.nil(),
        }
    }

    /// A duration as whole milliseconds, or nil.
    pub fn opt_ms(&mut self, value: Option<Duration>) {
        match value {
            Some(ttl) => self.uint(ttl.as_millis().min(u64::MAX as u128) as u64),
            None => self.nil(),
        }
    }

    pub fn bin(&mut self, value: &[u8]) {
        rmp::encode::write_bin(&mut self.0, value).expect("writing to memory");
    }

    /// An array of texts.
    pub fn ids<'a>(&mut self, ids: impl ExactSizeIterator<Item = &'a str>) {
        self.array(ids.len());
        for id in ids {
            self.str(id);
        }
    }

    /// Protocol names and their payloads, alternating.
    pub fn payloads(&mut self, payloads: &Payloads) {
        self.array(payloads.iter().count() * 2);
        for (protocol, bytes) in payloads.iter() {
            self.str(protocol.name());
            self.bin(bytes);
        }
    }

    pub(super) fn target(&mut self, target: &Target) {
        match target {
            Target::All { excluded } => {
                self.array(2);
                self.uint(0);
                self.ids(excluded.iter().map(|c| c.as_str()));
            }
            Target::Connection(id) => {
                self.array(2);
                self.uint(1);
                self.str(id.as_str());
            }
            Target::Connections(ids) => {
                self.array(2);
                self.uint(2);
                self.ids(ids.iter().map(|c| c.as_str()));
            }
            Target::User(user) => {
                self.array(2);
                self.uint(3);
                self.str(user.as_str());
            }
            Target::Users(users) => {
                self.array(2);
                self.uint(4);
                self.ids(users.iter().map(|u| u.as_str()));
            }
            Target::Group {
                group,
                excluded,
                excluded_users,
            } => {
                self.array(4);
                self.uint(5);
                self.str(group.as_str());
                self.ids(excluded.iter().map(|c| c.as_str()));
                self.ids(excluded_users.iter().map(|u| u.as_str()));
            }
            Target::Groups(groups) => {
                self.array(2);
                self.uint(6);
                self.ids(groups.iter().map(|g| g.as_str()));
            }
        }
    }
}

/// Reads MessagePack fields from a received buffer; binary fields share it.
pub struct Reader<'a> {
    input: &'a Bytes,
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(input: &'a Bytes) -> Reader<'a> {
        Reader { input, pos: 0 }
    }

    /// Bytes read so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// What is left unread.
    pub fn rest(&self) -> &'a [u8] {
        &self.input[self.pos..]
    }

    /// An error unless every byte was read.
    pub fn end(&self) -> Result<(), EnvelopeError> {
        match self.input.len() - self.pos {
            0 => Ok(()),
            left => Err(EnvelopeError::Trailing(left)),
        }
    }

    fn marker(&mut self) -> Result<Marker, EnvelopeError> {
        let byte = *self.rest().first().ok_or(EnvelopeError::Truncated)?;
        self.pos += 1;
        Ok(Marker::from_u8(byte))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], EnvelopeError> {
        let rest = self.rest();
        if rest.len() < n {
            return Err(EnvelopeError::Truncated);
        }
        self.pos += n;
        Ok(&rest[..n])
    }

    fn be(&mut self, n: usize) -> Result<u64, EnvelopeError> {
        Ok(self
            .take(n)?
            .iter()
            .fold(0u64, |acc, b| (acc << 8) | u64::from(*b)))
    }

    /// The error for a field of the wrong type (at the byte just read).
    pub fn type_error(&self) -> EnvelopeError {
        EnvelopeError::Type(self.pos.saturating_sub(1))
    }

    pub fn uint(&mut self) -> Result<u64, EnvelopeError> {
        match self.marker()? {
            Marker::FixPos(n) => Ok(u64::from(n)),
            Marker::U8 => self.be(1),
            Marker::U16 => self.be(2),
            Marker::U32 => self.be(4),
            Marker::U64 => self.be(8),
            _ => Err(self.type_error()),
        }
    }

    /// An array's length, which cannot pass what is left (every element takes a byte).
    pub fn array(&mut self) -> Result<usize, EnvelopeError> {
        let len = match self.marker()? {
            Marker::FixArray(n) => usize::from(n),
            Marker::Array16 => self.be(2)? as usize,
            Marker::Array32 => self.be(4)? as usize,
            _ => return Err(self.type_error()),
        };
        if len > self.rest().len() {
            return Err(EnvelopeError::Truncated);
        }
        Ok(len)
    }

    pub fn bool(&mut self) -> Result<bool, EnvelopeError> {
        match self.marker()? {
            Marker::True => Ok(true),
            Marker::False => Ok(false),
            _ => Err(self.type_error()),
        }
    }

    /// Whether the next field is nil (read if so).
    pub fn nil(&mut self) -> Result<bool, EnvelopeError> {
        if self.rest().first() == Some(&0xc0) {
            self.pos += 1;
            return Ok(true);
        }
        Ok(false)
    }

    pub fn str(&mut self) -> Result<&'a str, EnvelopeError> {
        let len = match self.marker()? {
            Marker::FixStr(n) => usize::from(n),
            Marker::Str8 => self.be(1)? as usize,
            Marker::Str16 => self.be(2)? as usize,
            Marker::Str32 => self.be(4)? as usize,
            _ => return Err(self.type_error()),
        };
        std::str::from_utf8(self.take(len)?).map_err(|_| EnvelopeError::Utf8)
    }

    pub fn opt_ms(&mut self) -> Result<Option<Duration>, EnvelopeError> {
        if self.nil()? {
            return Ok(None);
        }
        Ok(Some(Duration::from_millis(self.uint()?)))
    }

    pub fn opt_str(&mut self) -> Result<Option<&'a str>, EnvelopeError> {
        if self.nil()? {
            return Ok(None);
        }
        self.str().map(Some)
    }

    /// A binary field, sharing the input's buffer.
    pub fn bin(&mut self) -> Result<Bytes, EnvelopeError> {
        let len = match self.marker()? {
            Marker::Bin8 => self.be(1)? as usize,
            Marker::Bin16 => self.be(2)? as usize,
            Marker::Bin32 => self.be(4)? as usize,
            _ => return Err(self.type_error()),
        };
        let start = self.pos;
        self.take(len)?;
        Ok(self.input.slice(start..start + len))
    }

    pub fn payloads(&mut self) -> Result<Payloads, EnvelopeError> {
        let count = self.array()?;
        if count % 2 != 0 {
            return Err(EnvelopeError::Type(self.pos));
        }
        let mut payloads = Payloads::new();
        for _ in 0..count / 2 {
            let protocol = Protocol::from_name(self.str()?);
            payloads.insert(protocol, self.bin()?);
        }
        Ok(payloads)
    }

    /// An array of texts, each made into a name by `make`.
    pub fn ids<T>(
        &mut self,
        make: impl Fn(&str) -> Result<T, NameError>,
    ) -> Result<Vec<T>, EnvelopeError> {
        let len = self.array()?;
        let mut out = Vec::with_capacity(len);
        for _ in 0..len {
            out.push(make(self.str()?)?);
        }
        Ok(out)
    }

    pub(super) fn target(&mut self) -> Result<Target, EnvelopeError> {
        let len = self.array()?;
        let tag = self.uint()?;
        let want = if tag == 5 { 4 } else { 2 };
        if len != want {
            return Err(self.type_error());
        }
        Ok(match tag {
            0 => Target::All {
                excluded: self.ids(ConnectionId::new)?,
            },
            1 => Target::Connection(ConnectionId::new(self.str()?)?),
            2 => Target::Connections(self.ids(ConnectionId::new)?),
            3 => Target::User(UserId::new(self.str()?)?),
            4 => Target::Users(self.ids(UserId::new)?),
            5 => Target::Group {
                group: GroupName::new(self.str()?)?,
                excluded: self.ids(ConnectionId::new)?,
                excluded_users: self.ids(UserId::new)?,
            },
            6 => Target::Groups(self.ids(GroupName::new)?),
            tag => {
                return Err(EnvelopeError::Tag {
                    what: "target",
                    tag,
                })
            }
        })
    }
}
