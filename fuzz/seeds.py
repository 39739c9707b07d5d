#!/usr/bin/env python3
"""Writes the seed inputs of every fuzz target into fuzz/corpus/<target>/.

Seeds come from the repository's protocol vectors (testdata/hub-protocol.json,
testdata/service-protocol.json) plus a few hand-written connection strings. Every input
has the layout of switchyard_fuzz::Input: u16 split position (little endian), one knob
byte, then the payload. Seed files are named by the SHA-1 of their content, like
libFuzzer's own corpus entries, so re-running this script adds nothing twice.

Usage: python3 fuzz/seeds.py
"""

import hashlib
import hmac
import json
import os
import struct

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "fuzz", "corpus")


def seed(target, payload, cut=None, knob=64):
    if isinstance(payload, str):
        payload = payload.encode()
    if cut is None:
        cut = len(payload) // 2
    data = struct.pack("<HB", cut & 0xFFFF, knob) + payload
    folder = os.path.join(CORPUS, target)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, hashlib.sha1(data).hexdigest()), "wb") as f:
        f.write(data)


def load(name):
    with open(os.path.join(ROOT, "testdata", name), encoding="utf-8") as f:
        return json.load(f)


def hub_protocol():
    json_frames, msgpack_frames = [], []
    for v in load("hub-protocol.json"):
        encoded = v.get("encoded")
        if not isinstance(encoded, str):
            continue
        if v["name"].startswith("Handshake"):
            seed("handshake", encoded)
            # The same record followed by a hub message, split right after the separator.
            seed("handshake", encoded + '{"type":6}\x1e', cut=len(encoded.encode()))
        elif v["protocol"] == "json":
            json_frames.append(encoded.encode())
        elif v["protocol"] == "messagepack":
            msgpack_frames.append(bytes.fromhex(encoded))
    for target, frames in (("hub_frames_json", json_frames), ("hub_frames_msgpack", msgpack_frames)):
        for frame in frames:
            seed(target, frame)
            seed(target, frame, cut=1, knob=8)
        # A few multi-message streams, cut inside the second message.
        for i in range(0, len(frames), 6):
            group = frames[i:i + 6]
            stream = b"".join(group)
            seed(target, stream, cut=len(group[0]) + 1)
    # Handshake responses and a request followed by a MessagePack ping.
    for text in ('{}\x1e', '{"error":"Handshake was canceled."}\x1e', '{"error":null}\x1e',
                 '{"type":7,"error":"x"}\x1e'):
        seed("handshake", text)
    seed("handshake", b'{"protocol":"messagepack","version":1}\x1e\x02\x91\x06', cut=10)


def service_protocol_messages():
    frames = []
    for v in load("service-protocol.json"):
        if v.get("kind") != "service-protocol-message":
            continue
        framed = bytes.fromhex(v["framed_hex"])
        frames.append(framed)
        seed("service_protocol", framed)
        seed("service_protocol", framed, cut=1, knob=8)
        # The bare body: the target also decodes the whole payload as one body.
        seed("service_protocol", bytes.fromhex(v["hex"]))
    # A few multi-message streams, cut inside the second message.
    for i in range(0, len(frames), 6):
        group = frames[i:i + 6]
        seed("service_protocol", b"".join(group), cut=len(group[0]) + 1)


def service_protocol():
    for v in load("service-protocol.json"):
        if v.get("kind") != "jwt-hs256":
            continue
        fields = v["fields"]
        header, payload = fields["header_json"], fields["payload_json"]
        # Split mode: header JSON | payload JSON; the knob picks the clock (0 = 1700000000).
        seed("jwt_verify", header + payload, cut=len(header.encode()), knob=0)
        token = v.get("expected_token")
        if token:
            seed("jwt_verify", token, knob=0)
        # Audience / issue seeds: aud | scheme \n host \n path \n query.
        aud = json.loads(payload).get("aud", "")
        request = "http\nlocalhost:8080\n/client/\nhub=chat"
        seed("jwt_verify", aud + request, cut=len(aud.encode()), knob=0)


def connection_strings():
    key = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789ABCDEFGH"
    for text in (
        f"Endpoint=http://localhost;Port=8888;AccessKey={key};Version=1.0;",
        f"Endpoint=https://demo.example.org/prefix/;AccessKey={key}==;Version=1.0-preview;",
        "Endpoint=http://[::1]:7071;AuthType=aad;ClientId=abc;",
        "endpoint = http://127.0.0.1 ; accesskey = k=v= ; ;",
        "Endpoint=https://a.example;ClientEndpoint=https://c.example:8443/x;"
        "ServerEndpoint=http://s.example/y/",
        "Endpoint=http://h:1234;Port=65535;Version=1.10",
        "Endpoint=ftp://h;Port=0;Version=2.0;AccessKey=;x",
    ):
        seed("connection_string", text)


def msgpack_str(text):
    data = text.encode()
    assert len(data) < 32
    return bytes([0xA0 | len(data)]) + data


def msgpack_bin(data):
    assert len(data) < 256
    return bytes([0xC4, len(data)]) + data


def rest_body():
    """Path and query | body; knob bits 0-2 method (POST GET HEAD PUT DELETE PATCH OPTIONS
    FUZZ), 3-5 content type (none, json, x-msgpack, …), 6-7 3 = a bad token."""
    json_frame = b'{"type":1,"target":"t","arguments":[1]}\x1e'
    msgpack_body = bytes([0x96, 0x01, 0x80, 0xC0, 0xA1, 0x74, 0x91, 0x01, 0x90])
    msgpack_frame = bytes([len(msgpack_body)]) + msgpack_body
    payload_map = bytes([0x82]) + msgpack_str("json") + msgpack_bin(json_frame) + \
        msgpack_str("messagepack") + msgpack_bin(msgpack_frame)
    bodies = [
        (b'{"target":"hello","arguments":[1,"a",{"x":null},[true,2.5]]}', 0),
        (b'{"Target":"t","Arguments":null}', 1 << 3),
        (b'{"TARGET":"t","target":"u","arguments":{}}', 1 << 3),
        (b'[' * 200 + b']' * 200, 0),
        (b'{"target":"\xff"}', 0),
        (payload_map, 2 << 3),
        (bytes([0x81]) + msgpack_str("json") + msgpack_bin(b'{"type":6}'), 4 << 3),
        (bytes([0x81, 0xA0, 0xC4, 0x00]), 3 << 3),
        (b'', 0),
    ]
    paths = [
        "/api/health", "/api/v1/health?api-version=2022-06-01", "/api/openapi.json",
        "/api/hubs/chat/:send?api-version=2022-06-01",
        "/api/hubs/Chat/:send?application=MyApp&api-version=2022-06-01",
        "/api/hubs/chat/:send?excluded={cid}&excluded=&excluded=x%20y",
        "/api/hubs/chat/:closeConnections?excluded={cid}&reason=all",
        "/api/hubs/chat/users/u1/:send", "/api/hubs/chat/users/u1/:closeConnections?reason=r",
        "/api/hubs/chat/users/u1", "/api/hubs/chat/users/u1/groups/g1?ttl=60",
        "/api/hubs/chat/users/u1/groups/g1?ttl=-1", "/api/hubs/chat/users/u1/groups",
        "/api/hubs/chat/connections/{cid}", "/api/hubs/chat/connections/{cid}/:send",
        "/api/hubs/chat/connections/{cid}/groups", "/api/hubs/chat/connections/{cid}?reason=bye",
        "/api/hubs/chat/groups/g1", "/api/hubs/chat/groups/g1/:send?excluded={cid}",
        "/api/hubs/chat/groups/g1/:closeConnections",
        "/api/hubs/chat/groups/g1/connections?api-version=2024-12-01&maxpagesize=1&top=3",
        "/api/hubs/chat/groups/g1/connections?continuationToken=a&maxpagesize=200",
        "/api/hubs/chat/groups/g1/connections/{cid}",
        "/api/v1/hubs/chat", "/api/v1/hubs/chat/users/u1", "/api/v1/hubs/chat/connections/{cid}",
        "/api/v1/hubs/chat/groups/g1", "/api/v1/hubs/chat/groups/g1/users/u1",
        "/api/v1/hubs/chat/groups/g1/connections/{cid}",
        "/api/v1-preview/hub/chat", "/api/v1-preview/hub/chat/users/u1,u2",
        "/api/v1-preview/hub/chat/groups/g1,,g2", "/api/v1-preview/hub/chat/user/u1",
        "/api/hubs/ch%2Fat/:send", "/api/hubs/chat/groups/%20%20", "/api/hubs/chat/users/%FF",
        "/api/hubs/chat/groups/..%2F..%2Fx/:send", "/api/hubs/chat/groups/%2e%2e/:send",
        "/API/HUBS/chat/Users/u1/Groups/g1/", "/api/hubs/chat/groups/:send",
        "/api/hubs/chat/users/" + "x" * 1100 + "/:send",
    ]
    for path in paths:
        for body, content in bodies[:2]:
            for method in (0, 1, 3, 4):
                seed("rest_body", path.encode() + body, cut=len(path.encode()),
                     knob=method | content)
    for body, content in bodies:
        seed("rest_body", b"/api/hubs/chat/:send" + body, cut=len(b"/api/hubs/chat/:send"),
             knob=content)
        seed("rest_body", b"/api/hubs/chat/:send" + body, cut=len(b"/api/hubs/chat/:send"),
             knob=0x80 | 16 | content)


def negotiate_query():
    """Authorization text | negotiate query; knob bits 0-1 token in the header, in
    access_token, none, the raw text; bits 2-3 = 3: GET."""
    queries = [
        "hub=chat", "hub=chat&negotiateVersion=1", "HUB=Chat&negotiateversion=0",
        "hub=chat&negotiateVersion=-1", "hub=chat&negotiateVersion=abc",
        "hub=chat&negotiateVersion=99999999999", "hub=chat&hub=other", "hub=",
        "hub=ch%2Fat", "hub=%F0%9F%98%80", "hub=chat&access_token=abc",
        "hub=chat&id=1&excluded=a&excluded=&reason=%20", "hub=1chat", "a=1&&b=%zz&=x&c",
        "hub=chat&negotiateVersion=1&useStatefulReconnect=true",
    ]
    headers = ["Bearer abc", "bearer   x.y.z  ", "Basic abc", "Bearer", "", "Bearer a b"]
    for query in queries:
        for header in headers[:2]:
            for knob in (0, 1, 2, 3, 12):
                seed("negotiate_query", header + query, cut=len(header.encode()), knob=knob)
    for header in headers:
        seed("negotiate_query", header + "hub=chat", cut=len(header.encode()), knob=3)


def client_session():
    """Handshake and hub messages; knob bits 0-1 transport, 2-3 mode (serverless, Default
    with an app server, Default without, auto), 4 a 64-byte limit, 5-7 small piece size."""
    json_frames, msgpack_frames, handshakes = [], [], []
    for v in load("hub-protocol.json"):
        encoded = v.get("encoded")
        if not isinstance(encoded, str):
            continue
        if v["name"].startswith("Handshake_Request"):
            handshakes.append(encoded.encode())
        elif v["protocol"] == "json" and not v["name"].startswith("Handshake"):
            json_frames.append(encoded.encode())
        elif v["protocol"] == "messagepack":
            msgpack_frames.append(bytes.fromhex(encoded))
    json_hs = b'{"protocol":"json","version":1}\x1e'
    msgpack_hs = b'{"protocol":"messagepack","version":1}\x1e'
    blazor_hs = b'{"protocol":"blazorpack","version":1}\x1e'
    for hs in handshakes:
        seed("client_session", hs + b'{"type":6}\x1e', cut=len(hs))
    for knob in (0, 1, 2, 4, 8, 12, 16 | 4, 0x20, 0xE4):
        for i in range(0, len(json_frames), 8):
            stream = json_hs + b"".join(json_frames[i:i + 8])
            seed("client_session", stream, cut=len(json_hs) + 3, knob=knob)
        for i in range(0, len(msgpack_frames), 8):
            stream = msgpack_hs + b"".join(msgpack_frames[i:i + 8])
            seed("client_session", stream, cut=len(msgpack_hs) + 1, knob=knob)
    seed("client_session", blazor_hs + bytes([0x02, 0x91, 0x06]), knob=4)
    seed("client_session", json_hs + json_hs, knob=0)
    seed("client_session", b'{"type":6}\x1e' + json_hs, knob=0)
    seed("client_session", msgpack_hs + bytes([0xFF, 0xFF, 0xFF, 0xFF, 0x7F]), knob=0)
    seed("client_session", msgpack_hs + bytes([0x80] * 6), knob=4)
    seed("client_session", json_hs + b"[" * 5000 + b"\x1e", knob=0)
    seed("client_session", json_hs + b'{"type":1,"target":"\xff\xfe"}\x1e', knob=4)
    seed("client_session", json_hs + b'{"type":99}\x1e{"type":7}\x1e', knob=4)
    seed("client_session", b'{"protocol":"json","version":1', knob=0x10)


def backplane_envelope():
    """Envelopes as crates/backplane/src/envelope/mod.rs writes them (version 2):
    [version, origin, seq, kind, hub, ...fields]; kinds 6 and 7 carry a control body (the
    node's own encoding, crates/node/src/cluster/control.rs) as one binary field."""
    def arr(*items):
        return bytes([0x90 | len(items)]) + b"".join(items)

    def u(n):
        return bytes([n]) if n < 128 else b"\xcf" + struct.pack(">Q", n)

    def body(data):
        assert len(data) < 65536
        if len(data) < 256:
            return msgpack_bin(data)
        return b"\xc5" + struct.pack(">H", len(data)) + data

    s = msgpack_str
    hub = s("app_chat")
    payloads = arr(s("json"), msgpack_bin(b'{"type":1,"target":"m","arguments":[]}\x1e'),
                   s("messagepack"), msgpack_bin(b"\x96\x01\x80\xc0\xa1m\x90\x90"))
    targets = [
        arr(u(0), arr(s("x"))),
        arr(u(1), s("conn")),
        arr(u(2), arr(s("a"), s("b"))),
        arr(u(3), s("user")),
        arr(u(4), arr()),
        arr(u(5), s("g"), arr(s("c")), arr(s("u"))),
        arr(u(6), arr(s("g1"), s("g2"))),
    ]
    origin = u(2**63 + 5)
    v = u(2)
    for target in targets:
        seed("backplane_envelope", arr(v, origin, u(7), u(0), hub, target, payloads))
    seed("backplane_envelope", arr(v, origin, u(8), u(1), hub, s("c"), s("g")))
    seed("backplane_envelope", arr(v, origin, u(9), u(2), hub, s("c"), b"\xc0"))
    seed("backplane_envelope", arr(v, origin, u(10), u(3), hub, s("u"), s("g"), b"\xcd\x05\xdc"))
    seed("backplane_envelope", arr(v, origin, u(11), u(4), hub, s("u"), s("g")))
    seed("backplane_envelope",
         arr(v, origin, u(12), u(5), hub, targets[3], arr(s("k")), arr(u(0), s("bye"))))
    seed("backplane_envelope", arr(v, origin, u(13), u(5), hub, targets[0], arr(), arr(u(1))))
    # Control bodies: asks [0, from, id, question], answers [1, id, answer], presence
    # [2, node, instance, leaving, generation, [[hub, [server ids]]…] or nil], trace events
    # [3, from, events].
    questions = [
        arr(u(0), s("c"), s("g")),
        arr(u(1), s("c"), b"\xc0"),
        arr(u(2), s("c"), s("why")),
        arr(u(3), s("c")),
        arr(u(7), s("g"), s("after"), u(100)),
        arr(u(8), s("u"), s("g"), b"\xc0"),
        arr(u(9)),
        arr(u(10), b"\xc0", u(100)),
        arr(u(10), arr(hub, s("u"), s("g")), u(2)),
        arr(u(11), s("c"), s("c-1-2"), s("host_1"), payloads),
        arr(u(12), s('{"filter":null}')),
    ]
    controls = [arr(u(0), s("n1"), u(i), q) for i, q in enumerate(questions)]
    answers = [
        arr(u(0)),
        arr(u(2), arr(s("c1"), b"\xc0", s("c2"), s("u"))),
        arr(u(3), s("http://10.0.0.1:8080")),
        arr(u(4), arr(hub, s("u"), s("g"), b"\xc0", hub, s("u"), s("g2"), b"\xcd\x05\xdc")),
        arr(u(5), u(1000)),
        arr(u(6), s('{"node":{"id":"n1"}}')),
    ]
    controls += [arr(u(1), u(i), a) for i, a in enumerate(answers)]
    controls.append(arr(u(2), s("n1"), s("n1~abcd1234"), b"\xc2", u(1), arr()))
    controls.append(arr(u(2), s("n2"), s("n2~x"), b"\xc3", u(7),
                        arr(arr(hub, arr(s("host_1"), s("host_2"))), arr(s("other"), arr()))))
    controls.append(arr(u(2), s("n2"), s("n2~x"), b"\xc2", u(8), b"\xc0"))
    events = '[{"node":"n2","time":1,"kind":"connected","connectionId":"c1"}]'
    controls.append(arr(u(3), s("n2"), b"\xd9" + bytes([len(events)]) + events.encode()))
    for i, control in enumerate(controls):
        kind = u(7) if i % 3 == 0 else u(6)
        envelope = arr(v, origin, u(20 + i), kind, hub, body(control))
        seed("backplane_envelope", envelope)
        # Cut inside the control body, so that its strict prefix is checked too.
        seed("backplane_envelope", envelope, cut=len(envelope) - 2)
    seed("backplane_envelope", b"garbage", cut=3)
    # Sealed as on the network: the envelope, then HMAC-SHA256 under the key derived from
    # the target's KEY (crates/backplane/src/envelope/seal.rs: HMAC(secret, label)).
    key = hmac.new(b"switchyard fuzz cluster key", b"switchyard cluster v1", hashlib.sha256).digest()
    for envelope in [arr(v, origin, u(7), u(0), hub, targets[0], payloads),
                     arr(v, origin, u(8), u(1), hub, s("c"), s("g")),
                     arr(v, origin, u(20), u(7), hub, body(controls[6]))]:
        tag = hmac.new(key, envelope, hashlib.sha256).digest()
        seed("backplane_envelope", envelope + tag)
        seed("backplane_envelope", envelope + tag, cut=len(envelope) + 5)


def admin_hub():
    def call(invocation_id, target, *arguments):
        return json.dumps({"type": 1, "invocationId": invocation_id, "target": target,
                           "arguments": list(arguments)}) + "\x1e"

    calls = [
        call("1", "SetFilter", {"hub": "chat", "search": "ada", "limit": 5}),
        call("2", "StartTrace", "chat", 60),
        call("3", "WatchTrace", "chat"),
        call("4", "CloseConnection", "chat", "c1", "maintenance"),
        call("5", "StopTrace", "chat"),
        call("6", "SetFilter", {"transport": "WebSockets", "protocol": "json", "limit": 10**12}),
        call("7", "StartTrace", "chat", 2**64 - 1),
        call("8", "StartTrace", "bad hub name!", -1),
        call("9", "CloseConnection", "chat", None, 5),
        call("10", "Nope"),
        call("11", "SetFilter", "not an object"),
        '{"type":6}\x1e',
        '{"type":7,"error":"bye"}\x1e',
    ]
    for knob in (0, 1, 2, 3):
        seed("admin_hub", "".join(calls), knob=knob)
        seed("admin_hub", calls[1] + calls[0], cut=len(calls[1]), knob=knob)
    for one in calls:
        seed("admin_hub", one, knob=1)
    seed("admin_hub", calls[0][:-1], knob=1)
    seed("admin_hub", "\x1e\x1e[" * 100, knob=0)


def mp(value):
    """A small MessagePack encoder for the seeds: ints, str, bytes, lists, dicts, None."""
    if value is None:
        return b"\xc0"
    if isinstance(value, bool):
        return b"\xc3" if value else b"\xc2"
    if isinstance(value, int):
        if 0 <= value < 128:
            return bytes([value])
        return b"\xd2" + struct.pack(">i", value)
    if isinstance(value, str):
        return msgpack_str(value)
    if isinstance(value, bytes):
        return msgpack_bin(value)
    if isinstance(value, list):
        assert len(value) < 16
        return bytes([0x90 | len(value)]) + b"".join(mp(v) for v in value)
    if isinstance(value, dict):
        assert len(value) < 16
        return bytes([0x80 | len(value)]) + b"".join(mp(k) + mp(v) for k, v in value.items())
    raise TypeError(value)


def varint_framed(body):
    """A service-protocol or MessagePack hub-protocol frame: VarInt length, then the body."""
    n, prefix = len(body), b""
    while True:
        byte = n & 0x7F
        n >>= 7
        prefix += bytes([byte | (0x80 if n else 0)])
        if not n:
            return prefix + body


def app_server_session():
    """After the handshake: every service-protocol vector (the handshakes are a second
    handshake now), and commands naming the client (`{client-connection-id}` is its id) in each setup."""
    CID = "{client-connection-id}"  # as long as a generated id: no length prefix changes
    frames = [bytes.fromhex(v["framed_hex"]) for v in load("service-protocol.json")
              if v.get("kind") == "service-protocol-message"]
    for framed in frames:
        seed("app_server_session", framed, knob=0x10)
        seed("app_server_session", framed, cut=1, knob=0x02)
    for i in range(0, len(frames), 5):
        group = frames[i:i + 5]
        seed("app_server_session", b"".join(group), cut=len(group[0]) + 1, knob=0x11)
    invocation = b'{"type":1,"target":"m","arguments":["hi"]}\x1e'
    payloads = {"json": invocation}
    commands = [
        [6, CID, b"{}\x1e" + invocation],            # ConnectionData: handshake + message
        [18, CID, "g1", 1],                          # JoinGroupWithAck
        [13, "g1", [], payloads],                        # GroupBroadcast
        [19, CID, "g1", 2],                          # LeaveGroupWithAck
        [16, "u1", "g2"],                                # UserJoinGroup
        [8, "u1", payloads],                             # UserData
        [10, [], payloads],                              # Broadcast
        [7, [CID, "nobody"], payloads],              # MultiConnectionData
        [18, "nobody", "g1", 3],                         # JoinGroupWithAck, unknown id
        [5, CID, "bye", {}],                         # CloseConnection
    ]
    stream = b"".join(varint_framed(mp(c)) for c in commands)
    for knob in (0x10, 0x11, 0x14, 0x18, 0x30, 0x50, 0x90, 0xD0):
        seed("app_server_session", stream, knob=knob)
        seed("app_server_session", stream, cut=len(varint_framed(mp(commands[0]))) + 2, knob=knob)
    for command in commands:
        seed("app_server_session", varint_framed(mp(command)), knob=0x10)
    # Broken: a frame longer than the limit, a truncated frame, an unknown type, a text-ish body.
    seed("app_server_session", varint_framed(mp([6, CID, b"x" * 100])), knob=0x30)
    seed("app_server_session", varint_framed(mp([18, CID, "g1", 4]))[:-2], knob=0x10)
    seed("app_server_session", varint_framed(mp([99, "x"])) + varint_framed(b"\xff\xff"), knob=0x10)
    seed("app_server_session", b"\xff\xff\xff\xff\xff\x01", knob=0x00)


def upstream_reply():
    """Upstream answers to invocation 7: completions in both protocols (value, void, error),
    for another id, twice, unframed, empty, over the 48-byte limit, not a completion."""
    json_completions = [
        b'{"type":3,"invocationId":"7","result":42}\x1e',
        b'{"type":3,"invocationId":"7"}\x1e',
        b'{"type":3,"invocationId":"7","error":"nope"}\x1e',
        b'{"type":3,"invocationId":"7","result":{"a":[1,2,3],"b":"' + b"x" * 60 + b'"}}\x1e',
        b'{"type":3,"invocationId":"8","result":1}\x1e',
        b'{"type":3,"invocationId":"7","result":1}',
        b'{"type":3,"invocationId":"7"}\x1e{"type":3,"invocationId":"7"}\x1e',
        b'{"type":1,"target":"m","arguments":[]}\x1e',
        b'{"type":3,"invocationId":7}\x1e',
        b'',
        b'not json',
    ]
    msgpack_completions = [
        varint_framed(mp([3, {}, "7", 3, 42])),
        varint_framed(mp([3, {}, "7", 2])),
        varint_framed(mp([3, {}, "7", 1, "nope"])),
        varint_framed(mp([3, {}, "8", 3, 1])),
        varint_framed(mp([3, {}, "7", 3, b"z" * 70])),
        mp([3, {}, "7", 2]),
    ]
    for body in json_completions:
        for knob in (0x00, 0x02, 0x08, 0x10, 0x11):
            seed("upstream_reply", body, knob=knob)
    for body in msgpack_completions:
        for knob in (0x04, 0x07, 0x0C, 0x14):
            seed("upstream_reply", body, knob=knob)


def client_negotiate():
    """Negotiate answers: this service's (v0 and v1), redirects (relative, absolute, https,
    with and without a token), errors, an ASP.NET SignalR answer, odd transports, non-JSON."""
    bodies = [
        {"negotiateVersion": 1, "connectionId": "c1", "connectionToken": "t1",
         "availableTransports": [
             {"transport": "WebSockets", "transferFormats": ["Text", "Binary"]},
             {"transport": "ServerSentEvents", "transferFormats": ["Text"]},
             {"transport": "LongPolling", "transferFormats": ["Text", "Binary"]}]},
        {"connectionId": "c0", "availableTransports": [
            {"transport": "LongPolling", "transferFormats": ["Text"]}]},
        {"negotiateVersion": 0, "connectionId": "c0", "connectionToken": "ignored",
         "availableTransports": []},
        {"negotiateVersion": 1, "connectionId": "c1", "availableTransports": [
            {"transport": "LongPolling"}, {"transferFormats": ["Text"]}, 5]},
        {"url": "/client/?hub=other", "accessToken": "redirected"},
        {"url": "http://127.0.0.1:9/client/?hub=chat", "accessToken": "redirected"},
        {"url": "https://example.invalid/client/?hub=chat"},
        {"url": "ws://nowhere/", "accessToken": "x"},
        {"error": "Not allowed"},
        {"error": 5},
        {"ProtocolVersion": "1.5", "Url": "/signalr"},
        {"negotiateVersion": "1", "connectionId": 7, "useStatefulReconnect": True},
    ]
    for body in bodies:
        text = json.dumps(body).encode()
        for knob in (0x00, 0x08, 0x04, 0x0C, 0x02, 0x03, 0x14):
            seed("client_negotiate", text, knob=knob)
    for raw in (b"", b"{", b"[]", b"null", b'{"connectionId":"\xff"}', b'"text"'):
        seed("client_negotiate", raw, knob=0x00)
        seed("client_negotiate", raw, knob=0x04)


def config():
    """Config files (the sample `upstream init` writes among them), setting lines after a
    NUL (variables before the cut, flags after), templates and proxy lists."""
    files = [
        "",
        'listen = "127.0.0.1:9000"\naccess_key = "%s"\n' % ("k" * 40),
        "[limits]\nmax_client_message_size = \"64KiB\"\nmax_request_body_size = 2048\n",
        "[timeouts]\nclient_timeout = \"45s\"\nkeep_alive_interval = \"500ms\"\n",
        "[cors]\nallowed_origins = [\"https://a.example\", \"null\"]\nmax_age = \"1h\"\n",
        "trusted_proxies = [\"10.0.0.0/8\", \"::1\"]\nmode = \"serverless\"\n",
        "[cluster]\nredis = \"redis://u:p@h:6379\"\nnode_id = \"n-1\"\nask_timeout = \"2s\"\n",
        "[[upstream.templates]]\nurl_template = \"http://localhost:7071/api/{hub}/{category}/{event}\"\n"
        "hub_pattern = \"chat, game\"\n\n[[upstream.templates]]\n"
        "url_template = \"https://f.example/runtime/webhooks/signalr?code=x\"\n",
        "upstream.templates = [{url_template = \"http://h/{hub}\", event_pattern = \"a,b\"}]\n",
        "[dashboard]\nkey = \"%s\"\ntrace_payloads = true\nmax_trace_duration = \"1h\"\n" % ("d" * 32),
        "[stateful_reconnect]\nbuffer_size = \"1MB\"\nwindow = \"30s\"\n[tls]\nreload_interval = \"1s\"\n",
        "[throttling]\nconnect_rate = 10\nconnect_burst = 20\n[log]\nformat = \"json\"\n",
        "lisen = 1\n[limits]\nmax_foo = 2\n",
        "[limits]\nmax_client_message_size = \"1XB\"\n",
        "limits = 5\n",
    ]
    with open(os.path.join(ROOT, "crates", "switchyard", "src", "upstream_init.rs"), encoding="utf-8") as f:
        source = f.read()
    files.append(source.split('r#"', 1)[1].split('"#;', 1)[0])
    lines = [
        "",
        "listen=127.0.0.1:0\nlimits.max_client_message_size=64KiB\ntimeouts.client_timeout=45s",
        "SWITCHYARD_CORS_ALLOWED_ORIGINS=https://a.example,https://b.example\ncors.max_age=10m",
        "SWITCHYARD_PORT=tcp://10.0.0.1:8888\nSWITCHYARD_SERVICE_HOST=10.0.0.1\n"
        "SWITCHYARD_PORT_8888_TCP_PROTO=tcp\nmode=default",
        "access_key=%s\nsecondary_access_key=%s\nlisten=0.0.0.0:8888\npublic_endpoint=https://x.example" % ("a" * 32, "b" * 33),
        "stateful_reconnect.enabled=false\nthrottling.connect_rate=5\nthrottling.connect_burst=abc",
        "SWITCHYARD_LISTN=x\nupstream.templates=http://x",
        "trusted_proxies=10.0.0.0/8, 192.168.1.1,::ffff:1.2.3.4\ndashboard.enabled=true",
    ]
    for i, text in enumerate(files):
        seed("config", text, knob=0)
        seed("config", text, cut=len(text.encode()) // 3, knob=1)
        for j, line in enumerate(lines):
            if (i + j) % 3 == 0:
                payload = text + "\0" + line
                seed("config", payload, cut=(i + 2 * j) % 5, knob=(i + j) % 2)
    for extra in [
        "http://localhost/{hub}/{event}\n*\n*\n*\nchat room\nmessages\nsend/../x",
        "https://h:8443/api?hub={HUB}&e={event}\nchat,game\nconnected\nconnections\ngame\nconnections\nconnected",
        "http://[::1]:1/{category}\n*\n*\n*\n\u00e9\n#\n?",
        "ftp://x/{hub}", "http://{hub}/", "http://h/{@kv}", "http://h/{nope}", "{",
        "10.0.0.0/8,::1,1.2.3.4/33", " 10.1.1.1 ,fe80::/10", "", ",",
    ]:
        seed("config", extra, knob=0)


if __name__ == "__main__":
    backplane_envelope()
    hub_protocol()
    service_protocol()
    service_protocol_messages()
    connection_strings()
    rest_body()
    negotiate_query()
    client_session()
    admin_hub()
    app_server_session()
    upstream_reply()
    client_negotiate()
    config()
    for target in sorted(os.listdir(CORPUS)):
        print(target, len(os.listdir(os.path.join(CORPUS, target))))
