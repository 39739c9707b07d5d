//! Channel names, and the slots Redis Cluster maps them to. A leaf module (no I/O).
//!
//! On one Redis a channel's name is [`envelope::channel_name`]. On a Redis Cluster every name
//! carries a hash tag, `{prefix}:{<tag>}:<key>`, and the tag decides the slot and so the shard
//! (the master that owns the slot). The tag of a hub's channels is derived from the hub's name
//! (one of [`TAGS`]), so all of a hub's channels share one slot: one publisher connection and
//! one subscriber connection carry them, which keeps their order and lets receivers drop the
//! copies of a message published on several of them. Hubs spread over the shards.
//!
//! `Channel::All` and `Channel::Node` belong to no hub. Their subscribers listen on every tag
//! (one name per tag), and a message on them is published under the tag of the message's own
//! hub: so it travels with the rest of its hub's traffic, in order with it and on the same
//! connection, and every subscriber reads it exactly once.

use switchyard_backplane::envelope;
use switchyard_core::{Channel, HubName};

/// Slots of a Redis Cluster.
pub(crate) const SLOTS: usize = 16384;

/// How many hash tags hubs are spread over. Each node listens on `All` and its own `Node`
/// channel under every tag, so this is also the count of those subscriptions per node.
pub(crate) const TAGS: u16 = 128;

/// How channel names are formed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Naming {
    /// One Redis: `prefix:key`, classic pub/sub.
    Plain,
    /// Redis Cluster: `prefix:{tag}:key`, sharded pub/sub.
    Sharded,
}

impl Naming {
    /// The names a node subscribes to for `channel`.
    pub(crate) fn subscription(self, prefix: &str, channel: &Channel) -> Vec<String> {
        match (self, hub_of(channel)) {
            (Naming::Plain, _) => vec![envelope::channel_name(prefix, channel)],
            (Naming::Sharded, Some(hub)) => vec![tagged(prefix, hub_tag(hub), channel)],
            (Naming::Sharded, None) => (0..TAGS).map(|t| tagged(prefix, t, channel)).collect(),
        }
    }

    /// The name a message of `hub` is published under on `channel`.
    pub(crate) fn publication(self, prefix: &str, channel: &Channel, hub: &HubName) -> String {
        match self {
            Naming::Plain => envelope::channel_name(prefix, channel),
            Naming::Sharded => {
                let tag = hub_tag(hub_of(channel).unwrap_or(hub));
                tagged(prefix, tag, channel)
            }
        }
    }
}

fn hub_of(channel: &Channel) -> Option<&HubName> {
    match channel {
        Channel::Hub(hub)
        | Channel::Group(hub, _)
        | Channel::User(hub, _)
        | Channel::Connection(hub, _) => Some(hub),
        Channel::All | Channel::Node(_) => None,
    }
}

fn tagged(prefix: &str, tag: u16, channel: &Channel) -> String {
    format!("{prefix}:{{{tag}}}:{}", channel.key())
}

/// The tag of a hub's channels: stable across processes and versions.
pub(crate) fn hub_tag(hub: &HubName) -> u16 {
    crc16(hub.to_string().as_bytes()) % TAGS
}

/// The cluster slot of a key or channel name: CRC16 of its hash tag (the text between the
/// first `{` and the next `}`, when not empty) or else of the whole name, modulo 16384.
pub(crate) fn slot(name: &[u8]) -> u16 {
    let tag = name
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &name[open + 1..];
            let close = rest.iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(name);
    crc16(tag) % SLOTS as u16
}

/// CRC-16/XMODEM (polynomial 0x1021, initial value 0, not reflected): the checksum Redis
/// Cluster hashes keys with.
fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_core::GroupName;

    #[test]
    fn crc16_matches_the_xmodem_check_value() {
        assert_eq!(crc16(b"123456789"), 0x31C3);
    }

    #[test]
    fn slots_follow_hash_tags() {
        // Values from the Redis Cluster specification's examples and `CLUSTER KEYSLOT`.
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"{user1000}.following"), slot(b"user1000"));
        assert_eq!(slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") % 16384);
        assert_eq!(slot(b"foo{{bar}}zap"), slot(b"{bar"));
        assert_eq!(slot(b"foo{bar}{zap}"), slot(b"bar"));
    }

    #[test]
    fn a_hubs_channels_share_a_slot_and_plain_names_are_unchanged() {
        let hub = HubName::new("chat", None).unwrap();
        let group = Channel::Group(hub.clone(), GroupName::new("g").unwrap());
        let naming = Naming::Sharded;
        let names = [
            naming.subscription("sy", &Channel::Hub(hub.clone())),
            naming.subscription("sy", &group),
            vec![naming.publication("sy", &Channel::All, &hub)],
            vec![naming.publication("sy", &Channel::Node("n1".into()), &hub)],
        ];
        let slots: Vec<u16> = names.iter().flatten().map(|n| slot(n.as_bytes())).collect();
        assert!(slots.iter().all(|s| *s == slots[0]), "{names:?}");
        assert_eq!(
            names[0][0],
            format!("sy:{{{}}}:h:{hub}", hub_tag(&hub)),
            "prefix first, then the tag"
        );
        assert_eq!(
            Naming::Plain.subscription("sy", &group),
            vec![envelope::channel_name("sy", &group)]
        );
        assert_eq!(
            Naming::Plain.publication("sy", &Channel::All, &hub),
            "sy:all"
        );
    }

    #[test]
    fn hubless_channels_are_heard_under_every_tag() {
        let hub = HubName::new("chat", None).unwrap();
        let all = Naming::Sharded.subscription("sy", &Channel::All);
        assert_eq!(all.len(), usize::from(TAGS));
        assert!(all.contains(&Naming::Sharded.publication("sy", &Channel::All, &hub)));
    }

    #[test]
    fn hubs_spread_over_tags() {
        let tags: std::collections::HashSet<u16> = (0..200)
            .map(|i| hub_tag(&HubName::new(&format!("hub{i}"), None).unwrap()))
            .collect();
        assert!(tags.len() > 64, "{}", tags.len());
    }
}
