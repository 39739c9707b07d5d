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


if __name__ == "__main__":
    hub_protocol()
    service_protocol()
    service_protocol_messages()
    connection_strings()
    for target in sorted(os.listdir(CORPUS)):
        print(target, len(os.listdir(os.path.join(CORPUS, target))))
