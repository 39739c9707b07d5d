//! The wire form of a [`Message`] between nodes: encoded once by the publisher, published on
//! every target channel, decoded by each receiving node. No I/O.
//!
//! An envelope is a MessagePack array:
//! `[version, origin, seq, kind, hub, ...fields of the kind]`. `origin` names the publishing
//! backplane instance (random per process start), `seq` counts its publishes, so a receiver
//! can drop its own echoes and the copies of a message published on several channels.
//! Payload bytes are binary fields; decoding slices them out of the received buffer without
//! copying. A control message's body (the node's own encoding) is one binary field: kind 6
//! when published, kind 7 when asked (an ask reaches its own node through the network too,
//! so a receiver must not drop it as an echo).
//!
//! On a network the envelope travels sealed: followed by a [`Seal`]'s tag, which the receiver
//! checks before it decodes ([`encode_sealed`], [`open`]).
//!
//! Version 2 carries control messages as opaque bodies; version 1 named every question and
//! answer here. Nodes of the two versions cannot share a backplane: each logs and drops the
//! other's envelopes.

mod fields;
mod seal;

pub use fields::{Reader, Writer};
pub use seal::{derive, Seal, TAG_LEN};

use bytes::Bytes;
use switchyard_core::{
    Channel, CloseReason, ConnectionId, GroupName, HubName, Message, NameError, UserId,
};

const VERSION: u8 = 2;

/// Where a decoded envelope came from, and its place in that publisher's sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Stamp {
    pub origin: u64,
    pub seq: u64,
    /// Sent by an ask rather than a publish (control messages only).
    pub asked: bool,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EnvelopeError {
    #[error("envelope ends early")]
    Truncated,
    #[error("envelope version {0} is not supported (this node speaks {VERSION})")]
    Version(u64),
    #[error("unexpected MessagePack type at byte {0}")]
    Type(usize),
    #[error("unknown {what} tag {tag}")]
    Tag { what: &'static str, tag: u64 },
    #[error("text is not UTF-8")]
    Utf8,
    #[error(transparent)]
    Name(#[from] NameError),
    #[error("message kind {kind} with {len} fields")]
    Fields { kind: u64, len: usize },
    #[error("{0} trailing bytes")]
    Trailing(usize),
}

/// Encodes `message` stamped with its publisher and sequence number.
pub fn encode(stamp: Stamp, message: &Message) -> Bytes {
    write(stamp, message, 0).finish()
}

/// [`encode`], then the seal's tag over those bytes, in the same buffer (no copy).
pub fn encode_sealed(stamp: Stamp, message: &Message, seal: &Seal) -> Bytes {
    let mut buffer = write(stamp, message, TAG_LEN).into_buffer();
    seal.append_tag(&mut buffer);
    buffer.freeze()
}

/// Why a received message was dropped.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum OpenError {
    /// No tag of a key this node accepts: not from a node of this cluster (or one with
    /// another secret). Checked before anything is decoded.
    #[error("the envelope is not sealed with this cluster's secret")]
    Unauthenticated,
    #[error(transparent)]
    Envelope(#[from] EnvelopeError),
}

/// Checks the seal of a received message, then decodes the envelope inside it.
pub fn open(sealed: &Bytes, seal: &Seal) -> Result<(Stamp, Message), OpenError> {
    let inside = seal.open(sealed).ok_or(OpenError::Unauthenticated)?;
    Ok(decode(&inside)?)
}

fn write(stamp: Stamp, message: &Message, spare: usize) -> Writer {
    let mut w = Writer::with_capacity(64 + payload_len(message) + spare);
    let fields = match message {
        Message::UserJoinGroup { .. } | Message::Close { .. } => 3,
        Message::Control { .. } => 1,
        _ => 2,
    };
    w.array(5 + fields);
    w.uint(VERSION as u64);
    w.uint(stamp.origin);
    w.uint(stamp.seq);
    match message {
        Message::Send {
            hub,
            target,
            payloads,
        } => {
            w.uint(0);
            w.str(hub.as_str());
            w.target(target);
            w.payloads(payloads);
        }
        Message::AddToGroup {
            hub,
            connection,
            group,
        } => {
            w.uint(1);
            w.str(hub.as_str());
            w.str(connection.as_str());
            w.str(group.as_str());
        }
        Message::RemoveFromGroup {
            hub,
            connection,
            group,
        } => {
            w.uint(2);
            w.str(hub.as_str());
            w.str(connection.as_str());
            w.opt_str(group.as_ref().map(|g| g.as_str()));
        }
        Message::UserJoinGroup {
            hub,
            user,
            group,
            ttl,
        } => {
            w.uint(3);
            w.str(hub.as_str());
            w.str(user.as_str());
            w.str(group.as_str());
            w.opt_ms(*ttl);
        }
        Message::UserLeaveGroup { hub, user, group } => {
            w.uint(4);
            w.str(hub.as_str());
            w.str(user.as_str());
            w.opt_str(group.as_ref().map(|g| g.as_str()));
        }
        Message::Close {
            hub,
            target,
            excluded,
            reason,
        } => {
            w.uint(5);
            w.str(hub.as_str());
            w.target(target);
            w.ids(excluded.iter().map(|c| c.as_str()));
            write_close_reason(&mut w, reason);
        }
        Message::Control { hub, body } => {
            w.uint(if stamp.asked { 7 } else { 6 });
            w.str(hub.as_str());
            w.bin(body);
        }
    }
    w
}

/// Only closes asked for by a caller cross nodes; anything else travels as service shutdown,
/// the other reason a node closes connections it does not own.
fn write_close_reason(w: &mut Writer, reason: &CloseReason) {
    match reason {
        CloseReason::ClosedByApi(text) => {
            w.array(2);
            w.uint(0);
            w.opt_str(text.as_deref());
        }
        _ => {
            w.array(1);
            w.uint(1);
        }
    }
}

/// Decodes an envelope; payloads and control bodies share `input`'s buffer.
pub fn decode(input: &Bytes) -> Result<(Stamp, Message), EnvelopeError> {
    let mut r = Reader::new(input);
    let len = r.array()?;
    if len < 5 {
        return Err(EnvelopeError::Truncated);
    }
    let version = r.uint()?;
    if version != VERSION as u64 {
        return Err(EnvelopeError::Version(version));
    }
    let (origin, seq) = (r.uint()?, r.uint()?);
    let kind = r.uint()?;
    let hub = HubName::from_key(r.str()?)?;
    let want = match kind {
        3 | 5 => 8,
        6 | 7 => 6,
        _ => 7,
    };
    if len != want {
        return Err(EnvelopeError::Fields { kind, len });
    }
    let message = match kind {
        0 => Message::Send {
            hub,
            target: r.target()?,
            payloads: r.payloads()?,
        },
        1 => Message::AddToGroup {
            hub,
            connection: ConnectionId::new(r.str()?)?,
            group: GroupName::new(r.str()?)?,
        },
        2 => Message::RemoveFromGroup {
            hub,
            connection: ConnectionId::new(r.str()?)?,
            group: r.opt_str()?.map(GroupName::new).transpose()?,
        },
        3 => Message::UserJoinGroup {
            hub,
            user: UserId::new(r.str()?)?,
            group: GroupName::new(r.str()?)?,
            ttl: r.opt_ms()?,
        },
        4 => Message::UserLeaveGroup {
            hub,
            user: UserId::new(r.str()?)?,
            group: r.opt_str()?.map(GroupName::new).transpose()?,
        },
        5 => Message::Close {
            hub,
            target: r.target()?,
            excluded: r.ids(ConnectionId::new)?,
            reason: read_close_reason(&mut r)?,
        },
        6 | 7 => Message::Control {
            hub,
            body: r.bin()?,
        },
        tag => {
            return Err(EnvelopeError::Tag {
                what: "message kind",
                tag,
            })
        }
    };
    r.end()?;
    let stamp = Stamp {
        origin,
        seq,
        asked: kind == 7,
    };
    Ok((stamp, message))
}

fn read_close_reason(r: &mut Reader<'_>) -> Result<CloseReason, EnvelopeError> {
    match (r.array()?, r.uint()?) {
        (2, 0) => Ok(CloseReason::ClosedByApi(r.opt_str()?.map(str::to_string))),
        (1, 1) => Ok(CloseReason::ServiceShutdown),
        (_, tag) => Err(EnvelopeError::Tag {
            what: "close reason",
            tag,
        }),
    }
}

/// The channel name a networked backplane uses for `channel` under `prefix`.
pub fn channel_name(prefix: &str, channel: &Channel) -> String {
    format!("{prefix}:{}", channel.key())
}

fn payload_len(message: &Message) -> usize {
    match message {
        Message::Send { payloads, .. } => payloads.total_len() + 16,
        Message::Control { body, .. } => body.len() + 16,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use switchyard_core::{Payloads, Protocol, Target};

    use super::*;

    fn hub() -> HubName {
        HubName::new("Chat", Some("App")).unwrap()
    }

    fn c(id: &str) -> ConnectionId {
        ConnectionId::new(id).unwrap()
    }

    fn samples() -> Vec<Message> {
        let payloads = Payloads::new()
            .with(Protocol::Json, Bytes::from_static(b"{\"type\":1}\x1e"))
            .with(Protocol::MessagePack, Bytes::from(vec![7u8; 300]))
            .with(
                Protocol::from_name("blazorpack"),
                Bytes::from_static(b"\x01"),
            );
        let targets = [
            Target::All {
                excluded: vec![c("x"), c("y")],
            },
            Target::Connection(c("conn-1")),
            Target::Connections(vec![c("a"), c("b")]),
            Target::User(UserId::new("ü user").unwrap()),
            Target::Users(vec![]),
            Target::Group {
                group: GroupName::new("g:{1}").unwrap(),
                excluded: vec![c("z")],
                excluded_users: vec![UserId::new("u").unwrap()],
            },
            Target::Groups(vec![GroupName::new("g1").unwrap()]),
        ];
        let mut out: Vec<Message> = targets
            .iter()
            .map(|t| Message::Send {
                hub: hub(),
                target: t.clone(),
                payloads: payloads.clone(),
            })
            .collect();
        out.extend([
            Message::AddToGroup {
                hub: hub(),
                connection: c("c"),
                group: GroupName::new("g").unwrap(),
            },
            Message::RemoveFromGroup {
                hub: hub(),
                connection: c("c"),
                group: None,
            },
            Message::UserJoinGroup {
                hub: hub(),
                user: UserId::new("u").unwrap(),
                group: GroupName::new("g").unwrap(),
                ttl: Some(Duration::from_millis(1500)),
            },
            Message::UserJoinGroup {
                hub: hub(),
                user: UserId::new("u").unwrap(),
                group: GroupName::new("g").unwrap(),
                ttl: None,
            },
            Message::UserLeaveGroup {
                hub: hub(),
                user: UserId::new("u").unwrap(),
                group: Some(GroupName::new("g").unwrap()),
            },
            Message::Close {
                hub: hub(),
                target: Target::User(UserId::new("u").unwrap()),
                excluded: vec![c("keep")],
                reason: CloseReason::ClosedByApi(Some("bye".into())),
            },
            Message::Close {
                hub: hub(),
                target: Target::All { excluded: vec![] },
                excluded: vec![],
                reason: CloseReason::ClosedByApi(None),
            },
        ]);
        out.push(Message::Control {
            hub: hub(),
            body: Bytes::from_static(b"\x92\x00\xa2n1"),
        });
        out.push(Message::Control {
            hub: hub(),
            body: Bytes::from(vec![0xc1u8; 70_000]),
        });
        out
    }

    #[test]
    fn every_message_round_trips() {
        for (n, message) in samples().into_iter().enumerate() {
            for asked in [false, true] {
                let stamp = Stamp {
                    origin: u64::MAX - n as u64,
                    seq: n as u64 * 1_000_003,
                    // Only control messages are asked.
                    asked: asked && matches!(message, Message::Control { .. }),
                };
                let bytes = encode(stamp, &message);
                assert_eq!(decode(&bytes), Ok((stamp, message.clone())), "sample {n}");
            }
        }
    }

    #[test]
    fn payloads_are_not_copied() {
        let message = &samples()[0];
        let bytes = encode(
            Stamp {
                origin: 1,
                seq: 2,
                asked: false,
            },
            message,
        );
        let (_, Message::Send { payloads, .. }) = decode(&bytes).unwrap() else {
            panic!("not a send")
        };
        let json = payloads.get(&Protocol::Json).unwrap();
        let inside = bytes.as_ptr_range();
        assert!(inside.contains(&json.as_ptr()), "payload was copied");
    }

    #[test]
    fn every_truncation_and_bad_byte_is_an_error_not_a_panic() {
        for message in samples() {
            let bytes = encode(
                Stamp {
                    origin: 9,
                    seq: 9,
                    asked: false,
                },
                &message,
            );
            for cut in 0..bytes.len() {
                assert!(decode(&bytes.slice(..cut)).is_err(), "cut at {cut}");
            }
            for at in 0..bytes.len() {
                let mut bad = bytes.to_vec();
                bad[at] ^= 0xff;
                let _ = decode(&Bytes::from(bad));
            }
        }
        assert_eq!(
            decode(&Bytes::from_static(&[0x95, 1, 0, 0, 0, 0xa1, b'h'])),
            Err(EnvelopeError::Version(1))
        );
    }

    #[test]
    fn sealed_envelopes_open_only_under_the_cluster_key_and_share_the_buffer() {
        let seal = Seal::from_secrets(b"k1", &[]);
        let rotated = Seal::from_secrets(b"k2", &[b"k1"]);
        let stranger = Seal::from_secrets(b"k3", &[]);
        for (n, message) in samples().into_iter().enumerate() {
            let stamp = Stamp {
                origin: 3,
                seq: n as u64,
                asked: false,
            };
            let sealed = encode_sealed(stamp, &message, &seal);
            assert_eq!(sealed.len(), encode(stamp, &message).len() + TAG_LEN);
            assert_eq!(open(&sealed, &seal), Ok((stamp, message.clone())));
            assert_eq!(open(&sealed, &rotated), Ok((stamp, message.clone())));
            assert_eq!(open(&sealed, &stranger), Err(OpenError::Unauthenticated));
            // An unsealed envelope, valid as it is, is refused before decoding.
            let bare = encode(stamp, &message);
            assert_eq!(open(&bare, &seal), Err(OpenError::Unauthenticated));
        }
        let sealed = encode_sealed(
            Stamp {
                origin: 1,
                seq: 1,
                asked: false,
            },
            &samples()[0],
            &seal,
        );
        let (_, Message::Send { payloads, .. }) = open(&sealed, &seal).unwrap() else {
            panic!("not a send")
        };
        let json = payloads.get(&Protocol::Json).unwrap();
        assert!(sealed.as_ptr_range().contains(&json.as_ptr()), "copied");
    }

    /// What sealing costs per 2 KiB send, printed, not asserted (timings vary by machine):
    /// `cargo test -p switchyard-backplane --release --lib -- --ignored --nocapture seal_cost`.
    #[test]
    #[ignore]
    fn seal_cost() {
        let message = Message::Send {
            hub: hub(),
            target: Target::All { excluded: vec![] },
            payloads: Payloads::new().with(Protocol::Json, Bytes::from(vec![b'x'; 2048])),
        };
        let seal = Seal::from_secrets(b"a cluster secret of 32 characters", &[b"next"]);
        let stamp = Stamp {
            origin: 1,
            seq: 1,
            asked: false,
        };
        let rounds = 200_000u32;
        let time = |what: &str, f: &mut dyn FnMut()| {
            let start = std::time::Instant::now();
            for _ in 0..rounds {
                f();
            }
            let each = start.elapsed().as_secs_f64() * 1e6 / f64::from(rounds);
            println!("{what}: {each:.3} µs per 2 KiB envelope");
        };
        let bare = encode(stamp, &message);
        let sealed = encode_sealed(stamp, &message, &seal);
        time("encode", &mut || {
            std::hint::black_box(encode(stamp, &message));
        });
        time("encode_sealed", &mut || {
            std::hint::black_box(encode_sealed(stamp, &message, &seal));
        });
        time("decode", &mut || {
            std::hint::black_box(decode(&bare).unwrap());
        });
        time("open (check + decode)", &mut || {
            std::hint::black_box(open(&sealed, &seal).unwrap());
        });
    }

    #[test]
    fn other_close_reasons_travel_as_shutdown() {
        let message = Message::Close {
            hub: hub(),
            target: Target::All { excluded: vec![] },
            excluded: vec![],
            reason: CloseReason::ServiceShutdown,
        };
        let bytes = encode(
            Stamp {
                origin: 1,
                seq: 1,
                asked: false,
            },
            &message,
        );
        assert_eq!(decode(&bytes).unwrap().1, message);
    }

    #[test]
    fn control_bodies_are_not_copied() {
        let message = Message::Control {
            hub: hub(),
            body: Bytes::from(vec![7u8; 100]),
        };
        let stamp = Stamp {
            origin: 1,
            seq: 2,
            asked: true,
        };
        let bytes = encode(stamp, &message);
        let (got, Message::Control { body, .. }) = decode(&bytes).unwrap() else {
            panic!("not a control message")
        };
        assert!(got.asked);
        assert!(
            bytes.as_ptr_range().contains(&body.as_ptr()),
            "body was copied"
        );
    }
}
