//! Hub protocols and the pre-encoded payloads of one message.

use bytes::Bytes;
use std::sync::Arc;

/// The hub protocol a client speaks. The service encodes `Json` and `MessagePack` itself;
/// other names (e.g. `blazorpack`) only occur in Default mode, where app servers encode.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Protocol {
    Json,
    MessagePack,
    Other(Arc<str>),
}

impl Protocol {
    /// Protocol names are matched case-insensitively, as ASP.NET Core does.
    pub fn from_name(name: &str) -> Protocol {
        if name.eq_ignore_ascii_case("json") {
            Protocol::Json
        } else if name.eq_ignore_ascii_case("messagepack") {
            Protocol::MessagePack
        } else {
            Protocol::Other(name.to_ascii_lowercase().into())
        }
    }

    pub fn name(&self) -> &str {
        match self {
            Protocol::Json => "json",
            Protocol::MessagePack => "messagepack",
            Protocol::Other(name) => name,
        }
    }

    /// Whether frames go out as binary (WebSocket binary frames, not SSE).
    pub fn is_binary(&self) -> bool {
        !matches!(self, Protocol::Json)
    }
}

/// One message, already framed for the wire, once per protocol. Cloning shares the bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Payloads {
    json: Option<Bytes>,
    messagepack: Option<Bytes>,
    others: Vec<(Arc<str>, Bytes)>,
}

impl Payloads {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn insert(&mut self, protocol: Protocol, bytes: Bytes) {
        match protocol {
            Protocol::Json => self.json = Some(bytes),
            Protocol::MessagePack => self.messagepack = Some(bytes),
            Protocol::Other(name) => {
                self.others.retain(|(n, _)| *n != name);
                self.others.push((name, bytes));
            }
        }
    }

    pub fn with(mut self, protocol: Protocol, bytes: Bytes) -> Self {
        self.insert(protocol, bytes);
        self
    }

    /// The framed message for a recipient speaking `protocol`, if the sender encoded one.
    pub fn get(&self, protocol: &Protocol) -> Option<&Bytes> {
        match protocol {
            Protocol::Json => self.json.as_ref(),
            Protocol::MessagePack => self.messagepack.as_ref(),
            Protocol::Other(name) => self
                .others
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, b)| b),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.json.is_none() && self.messagepack.is_none() && self.others.is_empty()
    }

    /// Total encoded size over all protocols (for metrics and quotas).
    pub fn total_len(&self) -> usize {
        self.json.as_ref().map_or(0, Bytes::len)
            + self.messagepack.as_ref().map_or(0, Bytes::len)
            + self.others.iter().map(|(_, b)| b.len()).sum::<usize>()
    }

    pub fn iter(&self) -> impl Iterator<Item = (Protocol, &Bytes)> {
        self.json
            .iter()
            .map(|b| (Protocol::Json, b))
            .chain(self.messagepack.iter().map(|b| (Protocol::MessagePack, b)))
            .chain(
                self.others
                    .iter()
                    .map(|(n, b)| (Protocol::Other(n.clone()), b)),
            )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_is_case_insensitive() {
        assert_eq!(Protocol::from_name("MessagePack"), Protocol::MessagePack);
        let p = Payloads::new().with(Protocol::from_name("BlazorPack"), Bytes::from_static(b"x"));
        assert_eq!(
            p.get(&Protocol::from_name("blazorpack")).unwrap().as_ref(),
            b"x"
        );
        assert!(p.get(&Protocol::Json).is_none());
    }
}
