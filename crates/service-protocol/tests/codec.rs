//! Behaviour beyond the vectors: streaming, robustness, extension-map rules, errors.

use bytes::{Bytes, BytesMut};
use switchyard_service_protocol::*;

fn body(hex: &str) -> Bytes {
    Bytes::from(hex::decode(hex).unwrap())
}

fn all_vector_bodies() -> Vec<Bytes> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/service-protocol.json"
    );
    let all: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    all.iter()
        .filter(|v| v["kind"] == "service-protocol-message")
        .map(|v| body(v["hex"].as_str().unwrap()))
        .collect()
}

fn sample_messages() -> Vec<ServiceMessage> {
    vec![
        HandshakeRequest {
            version: VERSION,
            allow_stateful_reconnects: Some(true),
            ..Default::default()
        }
        .into(),
        HandshakeResponse::ok().into(),
        Ping::new(&[("status", "1")]).into(),
        OpenConnection {
            connection_id: "c1".into(),
            claims: vec![("role".into(), "a".into()), ("role".into(), "b".into())],
            headers: vec![("X-Forwarded-For".into(), vec!["1.2.3.4".into()])],
            query_string: Some("?a=b".into()),
            ext: Extensions {
                protocol: Some("json".into()),
                ..Default::default()
            },
        }
        .into(),
        // 200 payload bytes so that the length prefix takes two bytes.
        ConnectionData {
            connection_id: "c1".into(),
            payload: Bytes::from(vec![0x1e; 200]),
            ext: Extensions {
                data_message_type: Some(data_message_type::INVOCATION),
                is_partial: Some(false),
                ..Default::default()
            },
        }
        .into(),
        Ack::new(7, AckStatus::NotFound, "nope").into(),
        ServiceMessage::Unknown { type_id: 41 },
        ConnectionFlowControl {
            connection_id: "c1".into(),
            connection_type: ConnectionFlowControl::CLIENT,
            operation: ConnectionFlowControl::PAUSE,
            ext: Extensions::default(),
        }
        .into(),
    ]
}

#[test]
fn split_at_every_byte_position_gives_the_same_messages() {
    let messages = sample_messages();
    let mut stream = BytesMut::new();
    for m in &messages {
        encode(m, &mut stream);
    }
    let stream = stream.freeze();
    let reader = FrameReader::new(1 << 20);

    let drain = |buf: &mut BytesMut, out: &mut Vec<ServiceMessage>| {
        while let Some(body) = reader.next_body(buf).unwrap() {
            out.push(decode(&body).unwrap());
        }
    };

    for cut in 0..=stream.len() {
        let mut buf = BytesMut::from(&stream[..cut]);
        let mut got = Vec::new();
        drain(&mut buf, &mut got);
        buf.extend_from_slice(&stream[cut..]);
        drain(&mut buf, &mut got);
        assert!(buf.is_empty(), "cut {cut}");
        assert_eq!(got, messages, "cut {cut}");
    }

    // And one byte at a time: nothing comes out before a message's last byte.
    let mut buf = BytesMut::new();
    let mut got = Vec::new();
    for &b in stream.iter() {
        buf.extend_from_slice(&[b]);
        let before = buf.len();
        match reader.next_body(&mut buf).unwrap() {
            Some(body) => {
                assert!(buf.is_empty());
                got.push(decode(&body).unwrap());
            }
            None => assert_eq!(buf.len(), before, "Ok(None) leaves the buffer alone"),
        }
    }
    assert_eq!(got, messages);
}

#[test]
fn unknown_type_ids_are_reported_not_rejected() {
    // [41, "token", {…}] (RefreshAuth, layout unknown) and a bare [99].
    let msg = decode(&body("9329a5746f6b656e80")).unwrap();
    assert_eq!(msg, ServiceMessage::Unknown { type_id: 41 });
    assert_eq!(msg.type_id(), 41);
    assert_eq!(msg.name(), "Unknown");
    assert_eq!(
        decode(&body("9163")).unwrap(),
        ServiceMessage::Unknown { type_id: 99 }
    );
    assert_eq!(hex::encode(encoded(&msg)), "029129");
    // Negative ids too.
    assert_eq!(
        decode(&body("91ff")).unwrap(),
        ServiceMessage::Unknown { type_id: -1 }
    );
}

#[test]
fn truncated_bodies_fail_cleanly() {
    for full in all_vector_bodies() {
        for len in 0..full.len() {
            let cut = full.slice(..len);
            assert!(
                decode(&cut).is_err(),
                "{} cut to {len} decoded",
                hex::encode(&full)
            );
        }
    }
}

#[test]
fn arbitrary_bytes_never_panic() {
    // A cheap deterministic generator; the fuzz target does the real work.
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let bodies = all_vector_bodies();
    for i in 0..20_000 {
        let mut b = bodies[i % bodies.len()].to_vec();
        for _ in 0..1 + next() % 4 {
            let pos = (next() as usize) % b.len();
            b[pos] = next() as u8;
        }
        // Whatever decodes re-encodes into one frame that decodes the same.
        if let Ok(msg) = decode(&Bytes::from(b)) {
            let mut buf = BytesMut::from(&encoded(&msg)[..]);
            let body = FrameReader::new(usize::MAX)
                .next_body(&mut buf)
                .unwrap()
                .unwrap();
            assert!(buf.is_empty());
            assert_eq!(decode(&body).unwrap(), msg);
        }
    }
}

#[test]
fn hostile_counts_do_not_allocate_or_loop() {
    // Ping claiming 2^32-1 elements with none present.
    let e = decode(&body("dd ffffffff 03".replace(' ', "").as_str())).unwrap_err();
    assert_eq!(
        e.to_string(),
        "message type 3 (Ping): input ends inside messages"
    );
    // MultiConnectionData with a connection list of 2^32-1 strings.
    let e = decode(&body("9407ddffffffff")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "message type 7 (MultiConnectionData): input ends inside connectionList"
    );
    // OpenConnection claims map of 2^32-1 entries.
    let e = decode(&body("9604a163dfffffffff")).unwrap_err();
    assert!(e.to_string().contains("claims"), "{e}");
}

#[test]
fn nesting_bombs_in_skipped_values_are_rejected() {
    // JoinGroup with ext {99: [[[[…]]]]}.
    let mut b = hex::decode("940ba163a1678163").unwrap();
    b.extend(std::iter::repeat_n(0x91, 100_000));
    b.push(0xc0);
    let e = decode(&Bytes::from(b)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "message type 11 (JoinGroup): ext nests deeper than 64 levels"
    );
    // 64 levels are fine.
    let mut b = hex::decode("940ba163a1678163").unwrap();
    b.extend(std::iter::repeat_n(0x91, 64));
    b.push(0xc0);
    assert!(decode(&Bytes::from(b)).is_ok());
}

#[test]
fn error_texts_name_type_and_field() {
    // GroupBroadcastData whose groupName is an int.
    let e = decode(&body("940d019080")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "message type 13 (GroupBroadcastData): expected string for groupName"
    );
    assert_eq!(
        e,
        DecodeError::Field {
            type_id: 13,
            message: "GroupBroadcastData",
            field: "groupName",
            problem: FieldProblem::Expected("string"),
        }
    );
    let e = decode(&body("920ba163")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "message type 11 (JoinGroup): array has 2 element(s), expected at least 3"
    );
    let e = decode(&body("9312a163a167")).unwrap_err();
    assert!(e.to_string().contains("at least 4"), "{e}");
    let e = decode(&body("9514ce8000000000a080")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "message type 20 (Ack): ackId is out of range for int32"
    );
    let e = decode(&body("930ba2fffea167")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "message type 11 (JoinGroup): invalid UTF-8 in connectionId"
    );
    assert_eq!(decode(&Bytes::new()), Err(DecodeError::Empty));
    assert_eq!(decode(&body("03")), Err(DecodeError::NotAnArray));
    assert_eq!(decode(&body("90")), Err(DecodeError::EmptyArray));
    assert_eq!(decode(&body("91a0")), Err(DecodeError::InvalidTypeId));
    assert_eq!(
        decode(&body("91cf8000000000000000")),
        Err(DecodeError::InvalidTypeId)
    );
}

#[test]
fn extension_keys_follow_the_message_type() {
    let all = Extensions {
        tracing_id: Some(1),
        ttl: Some(2),
        protocol: Some("p".into()),
        filter: Some("f".into()),
        data_message_type: Some(3),
        is_partial: Some(true),
    };
    // JoinGroup carries only the tracing id.
    let join = ServiceMessage::JoinGroup(JoinGroup {
        connection_id: "c".into(),
        group_name: "g".into(),
        ext: all.clone(),
    });
    assert_eq!(hex::encode(encoded(&join)).as_str(), "09940ba163a167810101");
    // UserJoinGroup: tracing id and ttl, in key order.
    let user_join = ServiceMessage::UserJoinGroup(UserJoinGroup {
        user_id: "u".into(),
        group_name: "g".into(),
        ext: all.clone(),
    });
    let mut b = Vec::new();
    encode_body(&user_join, &mut b);
    assert_eq!(hex::encode(&b), "9410a175a16782010102 02".replace(' ', ""));
    // ConnectionData: tracing id, data message type, is partial.
    let data = ServiceMessage::ConnectionData(ConnectionData {
        connection_id: "c".into(),
        payload: Bytes::new(),
        ext: all.clone(),
    });
    let mut b = Vec::new();
    encode_body(&data, &mut b);
    assert_eq!(hex::encode(&b), "9406a163c400830101050306c3");
    // Multicast data: tracing id and filter.
    let multi = ServiceMessage::BroadcastData(BroadcastData {
        excluded_list: vec![],
        payloads: vec![],
        ext: all.clone(),
    });
    let mut b = Vec::new();
    encode_body(&multi, &mut b);
    assert_eq!(hex::encode(&b), "940a9080820101 04a166".replace(' ', ""));
    // Ack carries none.
    let ack = ServiceMessage::Ack(Ack {
        ext: all.clone(),
        ..Ack::new(1, AckStatus::Ok, "")
    });
    let mut b = Vec::new();
    encode_body(&ack, &mut b);
    assert_eq!(hex::encode(&b), "95140101a080");

    // Decoding drops keys the type does not carry (their values are skipped).
    let every_key = "860101020203a1700 4a16605030 6c3".replace(' ', "");
    let join = decode(&body(&format!("940ba163a167{every_key}"))).unwrap();
    let ServiceMessage::JoinGroup(join) = join else {
        panic!()
    };
    assert_eq!(
        join.ext,
        Extensions {
            tracing_id: Some(1),
            ..Default::default()
        }
    );
    let data = decode(&body(&format!("9406a163c400{every_key}"))).unwrap();
    let ServiceMessage::ConnectionData(data) = data else {
        panic!()
    };
    assert_eq!(
        data.ext,
        Extensions {
            tracing_id: Some(1),
            data_message_type: Some(3),
            is_partial: Some(true),
            ..Default::default()
        }
    );
}

#[test]
fn unknown_extension_keys_and_value_types_are_skipped() {
    // OpenConnection ext: {9: {"x": [1, 2.5]}, "k": 1, 1: "not a number", 3: "json", -1: nil,
    // 1: 2^64-1 (fits uint64), 2: 5}
    let ext = "87 09 81a178920 1cb4004000000000000 a16b01 01a161 03a46a736f6e ffc0 01cfffffffffffffffff 0205"
        .replace(' ', "");
    let msg = decode(&body(&format!("9604a1638080c0{ext}"))).unwrap();
    let ServiceMessage::OpenConnection(open) = msg else {
        panic!()
    };
    assert_eq!(
        open.ext,
        Extensions {
            tracing_id: Some(u64::MAX),
            protocol: Some("json".into()),
            ..Default::default()
        }
    );
    assert_eq!(open.query_string, None);
    // A negative tracing id does not fit uint64: skipped, the message still decodes.
    let msg = decode(&body("940ba163a1678101ff")).unwrap();
    assert_eq!(msg.name(), "JoinGroup");
}

#[test]
fn client_completion_protocol_lives_in_its_field() {
    let msg = ServiceMessage::ClientCompletion(ClientCompletion {
        invocation_id: "i".into(),
        connection_id: "c".into(),
        caller_server_id: "s".into(),
        protocol: "json".into(),
        payload: Bytes::from_static(b"x"),
        ext: Extensions {
            protocol: Some("ignored".into()),
            tracing_id: Some(5),
            ..Default::default()
        },
    });
    let framed = encoded(&msg);
    let decoded = decode(&framed.slice(1..)).unwrap();
    let ServiceMessage::ClientCompletion(c) = &decoded else {
        panic!()
    };
    assert_eq!(c.protocol, "json");
    assert_eq!(
        c.ext,
        Extensions {
            tracing_id: Some(5),
            ..Default::default()
        }
    );
    // The ext map on the wire: {1: 5, 3: "json"}.
    assert!(hex::encode(&framed).ends_with("82010503a46a736f6e"));
}

#[test]
fn shorter_and_longer_arrays() {
    // HandshakeRequest [1, 1]: everything else defaults, re-encoded as the 6-element form.
    let msg = decode(&body("920101")).unwrap();
    assert_eq!(
        msg,
        ServiceMessage::HandshakeRequest(HandshakeRequest {
            version: 1,
            ..Default::default()
        })
    );
    assert_eq!(hex::encode(encoded(&msg)), "0796010100a00080");
    // Extra trailing elements (and bytes after the array) are ignored.
    let msg = decode(&body("950ba163a16780c3c0ffff")).unwrap();
    assert_eq!(
        msg,
        ServiceMessage::JoinGroup(JoinGroup {
            connection_id: "c".into(),
            group_name: "g".into(),
            ext: Extensions::default(),
        })
    );
    // Ack: 6 elements with a nil payload = no payload; with one it is kept (zero-copy).
    let b = body("96140101a080c0");
    assert_eq!(
        decode(&b).unwrap(),
        ServiceMessage::Ack(Ack::new(1, AckStatus::Ok, ""))
    );
    let b = body("96140101a080c40161");
    let ServiceMessage::Ack(ack) = decode(&b).unwrap() else {
        panic!()
    };
    let payload = ack.payload.clone().unwrap();
    assert_eq!(&payload[..], b"a");
    assert_eq!(payload.as_ptr(), b[8..].as_ptr(), "a slice of the body");
    assert_eq!(ack.known_status(), Some(AckStatus::Ok));
}

#[test]
fn nil_handling() {
    // LeaveGroup with a nil group = all groups; CloseConnection nil error = "".
    let ServiceMessage::LeaveGroup(leave) = decode(&body("940ca163c080")).unwrap() else {
        panic!()
    };
    assert_eq!(leave.group_name, None);
    let ServiceMessage::CloseConnection(close) = decode(&body("9305a163c0")).unwrap() else {
        panic!()
    };
    assert_eq!(close.error_message, "");
    // A nil connection id is an error.
    let e = decode(&body("940bc0a16780")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "message type 11 (JoinGroup): expected string for connectionId"
    );
    // A nil ConnectionData payload reads as empty, as in the SDK.
    let ServiceMessage::ConnectionData(data) = decode(&body("9406a163c080")).unwrap() else {
        panic!()
    };
    assert!(data.payload.is_empty());
}

#[test]
fn ping_helpers() {
    let ping = Ping::new(&[("status", "1"), ("clientcount", "3")]);
    assert_eq!(ping.get("status"), Some("1"));
    assert_eq!(ping.get("clientcount"), Some("3"));
    assert_eq!(ping.get("1"), None, "values are not keys");
    assert_eq!(ping.get("missing"), None);
    assert_eq!(
        ping.pairs().collect::<Vec<_>>(),
        vec![("status", "1"), ("clientcount", "3")]
    );
    let odd = Ping {
        values: vec!["target".into()],
    };
    assert_eq!(odd.get("target"), None);
    assert!(Ping::keep_alive().is_keep_alive());
    assert_eq!(hex::encode(encoded(&Ping::keep_alive().into())), "029103");
}

#[test]
fn names_and_ids() {
    assert_eq!(message_type::GROUP_MEMBER_QUERY, 40);
    assert_eq!(type_name(13), "GroupBroadcastData");
    assert_eq!(type_name(0), "Unknown");
    let msg: ServiceMessage = ServiceError {
        error_message: "x".into(),
    }
    .into();
    assert_eq!((msg.type_id(), msg.name()), (15, "ServiceError"));
}
