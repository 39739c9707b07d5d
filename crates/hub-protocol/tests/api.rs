//! Hot-path helpers, peek, and decoder edge cases not covered by the shared vectors.

use bytes::Bytes;
use serde_json::json;
use switchyard_core::Protocol;
use switchyard_hub_protocol::{
    encode_ack, encode_close, encode_completion, encode_invocation, encode_message,
    encode_sequence, json, msgpack, peek, ping, CompletionResult, DecodeError, Format, HubMessage,
    Peek,
};

fn hex(bytes: &Bytes) -> String {
    hex::encode(bytes)
}

#[test]
fn format_from_protocol() {
    assert_eq!(Format::from_protocol(&Protocol::Json), Some(Format::Json));
    assert_eq!(
        Format::from_protocol(&Protocol::from_name("MessagePack")),
        Some(Format::MessagePack)
    );
    assert_eq!(
        Format::from_protocol(&Protocol::from_name("blazorpack")),
        None
    );
    assert_eq!(Format::MessagePack.protocol(), Protocol::MessagePack);
    assert!(Format::MessagePack.is_binary() && !Format::Json.is_binary());
}

#[test]
fn ping_is_static() {
    assert_eq!(&ping(Format::Json)[..], b"{\"type\":6}\x1e");
    assert_eq!(&ping(Format::MessagePack)[..], &[0x02, 0x91, 0x06]);
}

#[test]
fn invocation_helper_matches_the_dotnet_writer() {
    let json_bytes = encode_invocation(Format::Json, "Send", &[json!(42), json!("hi")]);
    assert_eq!(
        &json_bytes[..],
        b"{\"type\":1,\"target\":\"Send\",\"arguments\":[42,\"hi\"]}\x1e"
    );
    // Vector MessagePack_InvocationWithNoHeadersNoIdAndSingleIntArg.
    let mp = encode_invocation(Format::MessagePack, "method", &[json!(42)]);
    assert_eq!(hex(&mp), "0e960180c0a66d6574686f64912a90");
    // Objects keep their key order; non-integers become float64.
    let mp = encode_invocation(Format::MessagePack, "M", &[json!({"b": 0.5, "a": [-33]})]);
    assert_eq!(
        hex(&mp),
        "19960180c0a14d9182a162cb3fe0000000000000a16191d0df90"
    );
    // The same through the general path.
    let message = HubMessage::Invocation {
        headers: vec![],
        invocation_id: None,
        target: "M".into(),
        arguments: vec![json!({"b": 0.5, "a": [-33]})],
        stream_ids: None,
    };
    assert_eq!(encode_message(Format::MessagePack, &message), mp);
}

#[test]
fn close_helper() {
    let cases: [(Option<&str>, bool, &str, &str); 4] = [
        (None, false, "{\"type\":7}\x1e", "049307c0c2"),
        (
            None,
            true,
            "{\"type\":7,\"allowReconnect\":true}\x1e",
            "049307c0c3",
        ),
        (
            Some("Error!"),
            false,
            "{\"type\":7,\"error\":\"Error!\"}\x1e",
            "0a9307a64572726f7221c2",
        ),
        (
            Some(""),
            false,
            "{\"type\":7,\"error\":\"\"}\x1e",
            "049307a0c2",
        ),
    ];
    for (error, allow, json_text, mp_hex) in cases {
        assert_eq!(
            &encode_close(Format::Json, error, allow)[..],
            json_text.as_bytes()
        );
        assert_eq!(
            hex(&encode_close(Format::MessagePack, error, allow)),
            mp_hex
        );
    }
}

#[test]
fn completion_ack_sequence_helpers() {
    let c = encode_completion(Format::Json, "123", CompletionResult::Value(json!(null)));
    assert_eq!(
        &c[..],
        b"{\"type\":3,\"invocationId\":\"123\",\"result\":null}\x1e"
    );
    let c = encode_completion(Format::Json, "1", CompletionResult::Error("No".into()));
    assert_eq!(
        &c[..],
        b"{\"type\":3,\"invocationId\":\"1\",\"error\":\"No\"}\x1e"
    );
    let c = encode_completion(
        Format::MessagePack,
        "xyz",
        CompletionResult::Value(json!(42)),
    );
    assert_eq!(hex(&c), "09950380a378797a032a");
    let c = encode_completion(Format::MessagePack, "xyz", CompletionResult::Void);
    assert_eq!(hex(&c), "08940380a378797a02");
    assert_eq!(
        &encode_ack(Format::Json, 42)[..],
        b"{\"type\":8,\"sequenceId\":42}\x1e"
    );
    assert_eq!(
        hex(&encode_sequence(Format::MessagePack, 146)),
        "049209cc92"
    );
}

#[test]
fn json_to_msgpack_is_plain() {
    let v = msgpack::json_to_msgpack(&json!({"i": -5, "u": 7, "f": 2.0, "s": "x", "n": null}));
    let expected = rmpv::Value::Map(vec![
        ("i".into(), rmpv::Value::from(-5)),
        ("u".into(), rmpv::Value::from(7)),
        ("f".into(), rmpv::Value::F64(2.0)),
        ("s".into(), rmpv::Value::from("x")),
        ("n".into(), rmpv::Value::Nil),
    ]);
    assert_eq!(v, expected);
    // Marker-looking objects are ordinary maps.
    let v = msgpack::json_to_msgpack(&json!({"$bin": "0102"}));
    assert!(matches!(v, rmpv::Value::Map(_)));
}

#[test]
fn varint_roundtrip() {
    for len in [0usize, 1, 127, 128, 16_383, 16_384, 0x7FFF_FFFF] {
        let mut out = Vec::new();
        msgpack::write_varint(len, &mut out);
        assert_eq!(
            msgpack::read_varint(&out),
            Ok(Some((len as u32, out.len()))),
            "{len}"
        );
        assert_eq!(msgpack::read_varint(&out[..out.len() - 1]), Ok(None));
    }
    let mut out = Vec::new();
    msgpack::write_varint(128, &mut out);
    assert_eq!(out, [0x80, 0x01]);
}

#[test]
fn json_decode_is_order_independent_and_lenient() {
    let m = json::decode(br#"{"arguments":[1],"target":"A","type":1,"x":{"y":[]}}"#).unwrap();
    assert_eq!(m.message_type(), 1);
    assert_eq!(m.invocation_id(), None);
    let m = json::decode(br#"{"type":1,"invocationId":"","target":"A","arguments":[]}"#).unwrap();
    assert_eq!(m.invocation_id(), None, "empty id = non-blocking");
    let m = json::decode(br#"{"type":2,"invocationId":"a","invocationId":"b","item":1}"#).unwrap();
    assert_eq!(m.invocation_id(), Some("b"), "last duplicate wins");
    let m = json::decode(br#"{"type":99,"whatever":[1,2]}"#).unwrap();
    assert_eq!(m, HubMessage::Unknown { message_type: 99 });
    let m = json::decode(br#"{"type":7,"error":null,"allowReconnect":true}"#).unwrap();
    assert_eq!(
        m,
        HubMessage::Close {
            error: None,
            allow_reconnect: true
        }
    );
}

#[test]
fn json_decode_errors() {
    let err = |body: &[u8]| json::decode(body).unwrap_err();
    assert_eq!(
        err(br#"{"type":4,"invocationId":"","target":"A","arguments":[]}"#),
        DecodeError::EmptyInvocationId("StreamInvocation")
    );
    assert_eq!(
        err(br#"{"type":1,"target":"","arguments":[]}"#),
        DecodeError::EmptyTarget("Invocation")
    );
    assert!(matches!(
        err(br#"{"type":1,"target":"A","arguments":[],"streamIds":[1]}"#),
        DecodeError::WrongType {
            property: "streamIds",
            ..
        }
    ));
    assert!(matches!(
        err(br#"{"type":1.5}"#),
        DecodeError::NotAnInteger { .. }
    ));
    assert!(matches!(err(b"{\"type\":6}\x1e"), DecodeError::Json(_)));
    assert!(matches!(err(b""), DecodeError::Json(_)));
    let deep = format!(
        "{{\"type\":2,\"invocationId\":\"a\",\"item\":{}}}",
        "[".repeat(10_000)
    );
    assert!(matches!(err(deep.as_bytes()), DecodeError::Json(_)));
    assert!(matches!(
        peek(Format::Json, deep.as_bytes()),
        Err(DecodeError::Json(_))
    ));
}

#[test]
fn msgpack_decode_edge_cases() {
    let de = |h: &str| msgpack::decode(&hex::decode(h).unwrap());
    // Trailing bytes after the message array.
    assert_eq!(de("9106c0"), Err(DecodeError::TrailingBytes(1)));
    // A complete invocation whose array header declares only 2 elements.
    assert_eq!(
        de("920180a178a16d9190"),
        Err(DecodeError::TooFewElements(2))
    );
    // A huge declared argument count is an error, not an allocation.
    assert!(matches!(
        de("960180c0a14dddffffffff"),
        Err(DecodeError::Value {
            field: "arguments",
            ..
        })
    ));
    // Unknown types are accepted and their extra elements skipped.
    assert_eq!(
        de("9363dc0002c0c0c3"),
        Ok(HubMessage::Unknown { message_type: 99 })
    );
    // Any integer width for sequence ids.
    assert_eq!(
        de("9208d3000000000000002a"),
        Ok(HubMessage::Ack { sequence_id: 42 })
    );
    // uint64 above i64::MAX does not fit a sequence id.
    assert!(de("9208cfffffffffffffffff").is_err());
    // Binary, float32 and ext values survive a round trip byte for byte.
    let body = hex::decode("940280a161c403010203").unwrap();
    let m = msgpack::decode(&body).unwrap();
    let framed = msgpack::encode(&m);
    assert_eq!(&framed[1..], &body[..]);
}

#[test]
fn msgpack_deep_nesting_is_rejected_without_crashing() {
    let mut body = hex::decode("940280a161").unwrap();
    body.extend(std::iter::repeat_n(0x91, 100_000));
    body.push(0xc0);
    assert!(matches!(
        msgpack::decode(&body),
        Err(DecodeError::Value { field: "item", .. })
    ));
    // peek does not look at the item.
    let p = peek(Format::MessagePack, &body).unwrap();
    assert_eq!(p.invocation_id.as_deref(), Some("a"));
    // Deeply nested extra elements are skipped iteratively.
    let mut body = hex::decode("9206").unwrap();
    body.extend(std::iter::repeat_n(0x91, 100_000));
    body.push(0xc0);
    assert_eq!(msgpack::decode(&body), Ok(HubMessage::Ping));
}

#[test]
fn peek_reports_routing_fields() {
    let p = peek(
        Format::Json,
        br#"{"arguments":[{"deep":[1,2,{"x":null}]}],"target":"Broadcast","invocationId":"7","type":1}"#,
    )
    .unwrap();
    assert_eq!(
        p,
        Peek {
            message_type: 1,
            invocation_id: Some("7".into()),
            target: Some("Broadcast".into()),
            ..Peek::default()
        }
    );
    let p = peek(
        Format::Json,
        br#"{"type":7,"error":"bye","allowReconnect":true}"#,
    )
    .unwrap();
    assert_eq!((p.error.as_deref(), p.allow_reconnect), (Some("bye"), true));
    let p = peek(Format::Json, br#"{"type":300}"#).unwrap();
    assert_eq!(
        p.message_type, 0,
        "out-of-range types are reported as unknown (0)"
    );
    let p = peek(Format::MessagePack, &hex::decode("9209cc92").unwrap()).unwrap();
    assert_eq!((p.message_type, p.sequence_id), (9, Some(146)));
    let p = peek(
        Format::MessagePack,
        &hex::decode("950380a361626301a3457272").unwrap(),
    )
    .unwrap();
    assert_eq!(p.invocation_id.as_deref(), Some("abc"));
    assert_eq!(p.error.as_deref(), Some("Err"));
    assert!(peek(Format::Json, b"{\"type\":1,\"target\":\"A\"} x").is_err());
    assert_eq!(
        peek(Format::Json, b"[1,2]"),
        Err(DecodeError::NotAnObject("Array"))
    );
}
