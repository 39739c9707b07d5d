//! The node-to-node control plane: questions and their answers, heartbeats and live-trace
//! events. Each travels as the body of a backplane `Message::Control`, which the router and
//! the backplane carry without looking inside; only this folder reads or writes it.
//!
//! A body is a MessagePack array `[kind, ...fields of the kind]`, written with the
//! backplane's field writer (so binary fields share the received buffer when read).

use bytes::Bytes;
use switchyard_backplane::envelope::{EnvelopeError, Reader, Writer};
use switchyard_backplane::NodeId;
use switchyard_core::{HubName, Message};

use super::question::{Answer, Question};

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Control {
    /// A question from node `from` to every node listening on the channel it is asked on;
    /// each of them sends one [`Control::Answer`] with the same `id` to `from`'s node channel.
    Ask {
        from: NodeId,
        id: u64,
        question: Question,
    },
    Answer {
        id: u64,
        answer: Answer,
    },
    /// A node's heartbeat, published to every node each second.
    Presence(Presence),
    /// Live-trace events of a hub that happened on node `from`, for the node whose dashboard
    /// traces the hub (published on that node's channel). `events` is the dashboard's JSON.
    Trace {
        from: NodeId,
        events: String,
    },
}

/// Per hub, the ids of the app servers a node holds direct connections from.
pub(crate) type ServerList = Vec<(HubName, Vec<String>)>;

/// What a node tells the others about itself (see [`Control::Presence`]): other nodes learn
/// which nodes are alive and which app servers each one has connections from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Presence {
    pub(crate) node: NodeId,
    /// This run of the node (`{node}~{random}`): a node restarted under the same id is a new
    /// instance, so what is said of the old one never touches the new one.
    pub(crate) instance: String,
    /// Said once by a node shutting down: forget it now rather than after the timeout.
    pub(crate) leaving: bool,
    /// Counts the changes of the node's list of app servers: a heartbeat without the list
    /// says it is still the one of this generation.
    pub(crate) generation: u64,
    /// App servers with connections that carry clients on the node: per hub, their ids.
    /// Sent when the list changes, to a node heard for the first time, and every few seconds
    /// (a node that missed a change catches up then); `None` in the heartbeats between.
    pub(crate) servers: Option<ServerList>,
}

/// The hub that places control messages about no hub in particular (a partitioned backplane
/// keeps one hub's messages together).
pub(crate) fn node_wide_hub() -> HubName {
    HubName::new("switchyard", None).expect("a valid hub name")
}

impl Control {
    /// The backplane message that carries this control message, placed with `hub`.
    pub(crate) fn into_message(self, hub: HubName) -> Message {
        Message::Control {
            hub,
            body: self.encode(),
        }
    }

    pub(crate) fn encode(&self) -> Bytes {
        let mut w = Writer::with_capacity(32 + self.payload_len());
        match self {
            Control::Ask { from, id, question } => {
                w.array(4);
                w.uint(0);
                w.str(from);
                w.uint(*id);
                question.write(&mut w);
            }
            Control::Answer { id, answer } => {
                w.array(3);
                w.uint(1);
                w.uint(*id);
                answer.write(&mut w);
            }
            Control::Presence(presence) => {
                w.array(6);
                w.uint(2);
                w.str(&presence.node);
                w.str(&presence.instance);
                w.bool(presence.leaving);
                w.uint(presence.generation);
                match &presence.servers {
                    None => w.nil(),
                    Some(list) => {
                        w.array(list.len());
                        for (hub, servers) in list {
                            w.array(2);
                            w.str(hub.as_str());
                            w.ids(servers.iter().map(String::as_str));
                        }
                    }
                }
            }
            Control::Trace { from, events } => {
                w.array(3);
                w.uint(3);
                w.str(from);
                w.str(events);
            }
        }
        w.finish()
    }

    /// Reads a body; binary fields share its buffer.
    pub(crate) fn decode(body: &Bytes) -> Result<Control, EnvelopeError> {
        let mut r = Reader::new(body);
        let len = r.array()?;
        let kind = r.uint()?;
        let want = match kind {
            0 => 4,
            2 => 6,
            _ => 3,
        };
        if len != want {
            return Err(EnvelopeError::Fields { kind, len });
        }
        let control = match kind {
            0 => Control::Ask {
                from: r.str()?.to_string(),
                id: r.uint()?,
                question: Question::read(&mut r)?,
            },
            1 => Control::Answer {
                id: r.uint()?,
                answer: Answer::read(&mut r)?,
            },
            2 => Control::Presence(read_presence(&mut r)?),
            3 => Control::Trace {
                from: r.str()?.to_string(),
                events: r.str()?.to_string(),
            },
            tag => {
                return Err(EnvelopeError::Tag {
                    what: "control kind",
                    tag,
                })
            }
        };
        r.end()?;
        Ok(control)
    }

    fn payload_len(&self) -> usize {
        match self {
            Control::Ask { question, .. } => question.payload_len(),
            Control::Answer { answer, .. } => answer.payload_len(),
            Control::Presence(presence) => presence.servers.as_ref().map_or(0, Vec::len) * 64,
            Control::Trace { events, .. } => events.len(),
        }
    }
}

fn read_presence(r: &mut Reader<'_>) -> Result<Presence, EnvelopeError> {
    let node = r.str()?.to_string();
    let instance = r.str()?.to_string();
    let leaving = r.bool()?;
    let generation = r.uint()?;
    if r.nil()? {
        return Ok(Presence {
            node,
            instance,
            leaving,
            generation,
            servers: None,
        });
    }
    let count = r.array()?;
    // Each entry takes at least four bytes: do not reserve for more than could follow.
    let mut servers = Vec::with_capacity(count.min(r.rest().len() / 4));
    for _ in 0..count {
        if r.array()? != 2 {
            return Err(EnvelopeError::Type(r.position()));
        }
        let hub = HubName::from_key(r.str()?)?;
        servers.push((hub, r.ids(|id| Ok(id.to_string()))?));
    }
    Ok(Presence {
        node,
        instance,
        leaving,
        generation,
        servers: Some(servers),
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use switchyard_core::{ConnectionId, GroupName, Payloads, Protocol, UserGroupEntry, UserId};

    use super::*;
    use crate::cluster::question::Invocation;

    fn hub() -> HubName {
        HubName::new("Chat", Some("App")).unwrap()
    }

    fn c(id: &str) -> ConnectionId {
        ConnectionId::new(id).unwrap()
    }

    fn questions() -> Vec<Question> {
        let (g, u) = (GroupName::new("g").unwrap(), UserId::new("u").unwrap());
        vec![
            Question::AddToGroup {
                connection: c("c"),
                group: g.clone(),
            },
            Question::RemoveFromGroup {
                connection: c("c"),
                group: None,
            },
            Question::RemoveFromGroup {
                connection: c("c"),
                group: Some(g.clone()),
            },
            Question::CloseConnection {
                connection: c("c"),
                reason: Some("why".into()),
            },
            Question::ConnectionExists(c("c")),
            Question::UserExists(u.clone()),
            Question::GroupExists(g.clone()),
            Question::UserInGroup(u.clone(), g.clone()),
            Question::GroupMembers {
                group: g.clone(),
                after: Some("c1".into()),
                max: 201,
            },
            Question::UserJoinGroup {
                user: u.clone(),
                group: g.clone(),
                ttl: Some(Duration::from_secs(60)),
            },
            Question::UserJoinGroup {
                user: u.clone(),
                group: g.clone(),
                ttl: None,
            },
            Question::Address,
            Question::UserGroups {
                after: None,
                max: 1000,
            },
            Question::UserGroups {
                after: Some((hub(), u.clone(), g.clone())),
                max: 2,
            },
            Question::Invoke(Invocation {
                connection: c("c"),
                invocation_id: "c-1-2".into(),
                caller_server_id: "host_1".into(),
                payloads: Payloads::new().with(Protocol::Json, Bytes::from_static(b"{}\x1e")),
            }),
            Question::View(r#"{"filter":null}"#.into()),
        ]
    }

    fn answers() -> Vec<Answer> {
        let (g, u) = (GroupName::new("g").unwrap(), UserId::new("u").unwrap());
        vec![
            Answer::Yes,
            Answer::No,
            Answer::Members(vec![(c("a"), None), (c("b"), Some(u.clone()))]),
            Answer::Members(vec![]),
            Answer::View(r#"{"node":{"id":"n1"}}"#.into()),
            Answer::At("http://10.0.0.1:8080".into()),
            Answer::Full(1000),
            Answer::UserGroups(vec![]),
            Answer::UserGroups(vec![
                UserGroupEntry {
                    hub: hub(),
                    user: u.clone(),
                    group: g.clone(),
                    ttl: None,
                },
                UserGroupEntry {
                    hub: hub(),
                    user: u,
                    group: g,
                    ttl: Some(Duration::from_millis(1500)),
                },
            ]),
        ]
    }

    fn samples() -> Vec<Control> {
        let mut out: Vec<Control> = questions()
            .into_iter()
            .enumerate()
            .map(|(n, question)| Control::Ask {
                from: "node-1".into(),
                id: n as u64 * 77_777,
                question,
            })
            .collect();
        out.extend(answers().into_iter().map(|answer| Control::Answer {
            id: u64::MAX,
            answer,
        }));
        for (leaving, generation, servers) in [
            (false, 0, Some(vec![])),
            (false, u64::MAX, None),
            (
                true,
                7,
                Some(vec![
                    (hub(), vec!["host_1".to_string(), "host_2".to_string()]),
                    (HubName::new("other", Some("app")).unwrap(), vec![]),
                ]),
            ),
        ] {
            out.push(Control::Presence(Presence {
                node: "n1".into(),
                instance: "n1~0a1b".into(),
                leaving,
                generation,
                servers,
            }));
        }
        out.push(Control::Trace {
            from: "n2".into(),
            events: r#"[{"node":"n2","time":1,"kind":"connected"}]"#.into(),
        });
        out
    }

    #[test]
    fn every_control_message_round_trips() {
        for (n, control) in samples().into_iter().enumerate() {
            let body = control.encode();
            assert_eq!(Control::decode(&body), Ok(control), "sample {n}");
        }
    }

    #[test]
    fn invocation_payloads_are_not_copied() {
        let invoke = samples()
            .into_iter()
            .find(|c| {
                matches!(
                    c,
                    Control::Ask {
                        question: Question::Invoke(_),
                        ..
                    }
                )
            })
            .unwrap();
        let body = invoke.encode();
        let Ok(Control::Ask {
            question: Question::Invoke(invocation),
            ..
        }) = Control::decode(&body)
        else {
            panic!("not an invocation")
        };
        let json = invocation.payloads.get(&Protocol::Json).unwrap();
        assert!(
            body.as_ptr_range().contains(&json.as_ptr()),
            "payload was copied"
        );
    }

    #[test]
    fn every_truncation_and_bad_byte_is_an_error_not_a_panic() {
        for control in samples() {
            let body = control.encode();
            for cut in 0..body.len() {
                assert!(Control::decode(&body.slice(..cut)).is_err(), "cut at {cut}");
            }
            for at in 0..body.len() {
                let mut bad = body.to_vec();
                bad[at] ^= 0xff;
                let _ = Control::decode(&Bytes::from(bad));
            }
        }
        let mut trailing = samples()[0].encode().to_vec();
        trailing.push(0);
        assert_eq!(
            Control::decode(&Bytes::from(trailing)),
            Err(EnvelopeError::Trailing(1))
        );
    }

    #[test]
    fn a_control_message_rides_the_envelope_whole() {
        use switchyard_backplane::envelope::{decode, encode, Stamp};
        let stamp = Stamp {
            origin: 7,
            seq: 8,
            asked: true,
        };
        for control in samples() {
            let message = control.clone().into_message(hub());
            let (got_stamp, got) = decode(&encode(stamp, &message)).unwrap();
            assert_eq!(got_stamp, stamp);
            let Message::Control { body, .. } = got else {
                panic!("not a control message")
            };
            assert_eq!(Control::decode(&body), Ok(control));
        }
    }

    /// What a heartbeat costs at 100 app servers × 100 hubs, printed, not asserted:
    /// `cargo test -p switchyard-node --release --lib -- --ignored --nocapture presence_cost`.
    #[test]
    #[ignore]
    fn presence_cost() {
        let ids: Vec<String> = (0..100)
            .map(|n| format!("app-server-0123456789abcdef0123456789abcdef-{n:02}"))
            .collect();
        let list: Vec<(HubName, Vec<String>)> = (0..100)
            .map(|n| {
                (
                    HubName::new(&format!("hub{n:02}"), None).unwrap(),
                    ids.clone(),
                )
            })
            .collect();
        let presence = |servers| {
            Control::Presence(Presence {
                node: "node-1".into(),
                instance: "node-1~0a1b2c3d".into(),
                leaving: false,
                generation: 42,
                servers,
            })
        };
        for (what, control) in [
            ("with the list", presence(Some(list))),
            ("without", presence(None)),
        ] {
            let body = control.encode();
            let rounds = 200u32;
            let start = std::time::Instant::now();
            for _ in 0..rounds {
                std::hint::black_box(Control::decode(&body).unwrap());
            }
            let each = start.elapsed().as_secs_f64() * 1e6 / f64::from(rounds);
            println!("{what}: {} bytes, decoded in {each:.1} µs", body.len());
        }
    }
}
