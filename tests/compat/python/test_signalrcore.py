"""Python `signalrcore` (threaded client) against a real switchyard process.

signalrcore negotiates without `negotiateVersion` (version 0) and uses the
`connectionId` as `id=`. It implements WebSockets, Server-Sent Events and long
polling, and the JSON and MessagePack hub protocols.
"""

import logging
import threading

from signalrcore.hub_connection_builder import HubConnectionBuilder
from signalrcore.protocol.messagepack_protocol import MessagePackHubProtocol
from signalrcore.types import HttpTransportType

from harness import RedirectAppServer, wait_until

HUB = "compat"
USER = "alice"
BROADCAST_ARGS = ["hello", 42]
USER_ARGS = ["hello user", 43]
TIMEOUT = 15

logging.getLogger("SignalRCoreClient").setLevel(logging.WARNING)


class Received:
    def __init__(self):
        self.items = []
        self.lock = threading.Lock()

    def __call__(self, args):
        with self.lock:
            self.items.append(list(args))

    def has(self, args):
        with self.lock:
            return list(args) in self.items

    def snapshot(self):
        with self.lock:
            return list(self.items)


def build(url, token, transport=None, protocol=None, skip_negotiation=False):
    options = {"access_token_factory": lambda: token}
    if transport is not None:
        options["transport"] = transport
    if skip_negotiation:
        options["skip_negotiation"] = True
    builder = HubConnectionBuilder().with_url(url, options=options)
    if protocol is not None:
        builder = builder.with_hub_protocol(protocol)
    conn = builder.build()
    received = Received()
    opened, closed = threading.Event(), threading.Event()
    conn.on_open(opened.set)
    conn.on_close(closed.set)
    conn.on("newMessage", received)
    return conn, received, opened, closed


def stop(service, conn):
    """`conn.stop()`, bounded. signalrcore's socket transports close the socket from the
    caller's thread and then join the receive thread, which stays blocked in `recv()` until
    the next frame arrives (closing an fd does not wake a blocked recv on Linux), so a plain
    stop takes up to the server's 15 s keep-alive. A broadcast of a target nobody handles
    wakes it at once; the client's own code then closes the TCP connection."""
    stopper = threading.Thread(target=conn.stop, daemon=True)
    stopper.start()
    stopper.join(0.5)
    if stopper.is_alive():
        service.broadcast(HUB, "wakeUp", [])
    stopper.join(TIMEOUT)
    assert not stopper.is_alive(), "conn.stop() did not return"


def exchange(service, conn, received, opened, closed):
    """Start, receive a broadcast and a user send, stop; check the service saw it all."""
    conn.start()
    try:
        assert opened.wait(TIMEOUT), "client never reported open (handshake)"
        wait_until(lambda: service.user_exists(HUB, USER), TIMEOUT, what="user connection registered")
        service.broadcast(HUB, "newMessage", BROADCAST_ARGS)
        wait_until(lambda: received.has(BROADCAST_ARGS), TIMEOUT, what=f"broadcast; got {received.snapshot()}")
        service.send_to_user(HUB, USER, "newMessage", USER_ARGS)
        wait_until(lambda: received.has(USER_ARGS), TIMEOUT, what=f"user send; got {received.snapshot()}")
        assert received.snapshot() == [BROADCAST_ARGS, USER_ARGS]
    finally:
        stop(service, conn)
    assert closed.wait(TIMEOUT), "client never reported close"
    wait_until(lambda: not service.user_exists(HUB, USER), TIMEOUT, what="connection gone after stop")
    service.assert_healthy()


def assert_v0_negotiate(wire, expect_transport):
    """Negotiate without negotiateVersion, version 0 answer, connectionId used as id=."""
    reqs = wire.requests()
    negotiates = [r for r in reqs if r.path.endswith("/negotiate")]
    assert len(negotiates) == 1, reqs
    assert negotiates[0].method == "POST"
    assert negotiates[0].query.get("hub") == [HUB]
    assert "negotiateVersion" not in negotiates[0].query, negotiates[0]
    responses = wire.negotiate_responses()
    assert len(responses) == 1 and responses[0]["negotiateVersion"] == 0, responses
    assert "connectionToken" not in responses[0]
    conn_id = responses[0]["connectionId"]
    transport_reqs = [r for r in reqs if not r.path.endswith("/negotiate")]
    assert transport_reqs, reqs
    for r in transport_reqs:
        assert r.path == "/client/", r
        assert r.query.get("id") == [conn_id], (r, conn_id)
    if expect_transport == "WebSockets":
        assert [r.is_websocket for r in transport_reqs] == [True], transport_reqs
    elif expect_transport == "ServerSentEvents":
        gets = [r for r in transport_reqs if r.method == "GET"]
        assert len(gets) == 1 and gets[0].is_sse, transport_reqs
        assert any(r.method == "POST" for r in transport_reqs), transport_reqs
    elif expect_transport == "LongPolling":
        gets = [r for r in transport_reqs if r.method == "GET"]
        assert len(gets) >= 2 and not any(r.is_sse or r.is_websocket for r in gets), transport_reqs
        assert any(r.method == "POST" for r in transport_reqs), transport_reqs
        assert any(r.method == "DELETE" for r in transport_reqs), transport_reqs
    return reqs


def test_websockets_json(service, wire):
    token = service.client_token(HUB, USER, public_endpoint=wire.base)
    conn, received, opened, closed = build(token["url"], token["accessToken"], HttpTransportType.web_sockets)
    exchange(service, conn, received, opened, closed)
    reqs = assert_v0_negotiate(wire, "WebSockets")
    ws = [r for r in reqs if r.is_websocket][0]
    assert ws.header("authorization") == f"Bearer {token['accessToken']}"


def test_websockets_messagepack(service, wire):
    token = service.client_token(HUB, USER, public_endpoint=wire.base)
    conn, received, opened, closed = build(
        token["url"], token["accessToken"], HttpTransportType.web_sockets, MessagePackHubProtocol())
    exchange(service, conn, received, opened, closed)
    assert_v0_negotiate(wire, "WebSockets")


def test_server_sent_events_json(service, wire):
    token = service.client_token(HUB, USER, public_endpoint=wire.base)
    conn, received, opened, closed = build(token["url"], token["accessToken"], HttpTransportType.server_sent_events)
    exchange(service, conn, received, opened, closed)
    reqs = assert_v0_negotiate(wire, "ServerSentEvents")
    sse = [r for r in reqs if r.is_sse][0]
    assert sse.header("authorization") == f"Bearer {token['accessToken']}"
    # signalrcore passes the negotiate version into its handshake: version 0, accepted (as
    # ASP.NET Core accepts any version up to its own).
    posts = [s for s in wire.sent_streams() if s.startswith(b"POST /client/?")]
    assert posts and posts[0].endswith(b'{"protocol": "json", "version": 0}\x1e'), posts[:1]


def test_long_polling_polls_carry_no_token(service, wire):
    """signalrcore 1.0.2 sends its long-polling GETs with only `Accept: Text`: no
    `Authorization` header and no `access_token` (its negotiate, POSTs and DELETE do carry
    the header). The service, like Azure SignalR, requires the client token on every poll
    (fact sheet §1.7), so each poll gets 401 and the client never sees the handshake
    answer (it re-polls in a tight loop). This pins that behaviour: a client bug, not ours."""
    token = service.client_token(HUB, USER, public_endpoint=wire.base)
    conn, received, opened, closed = build(token["url"], token["accessToken"], HttpTransportType.long_polling)
    conn.start()
    try:
        assert not opened.wait(2), "signalrcore long polling opened: its polls now authenticate?"
    finally:
        stop(service, conn)
    polls = [r for r in wire.requests() if r.method == "GET"]
    assert polls and all(r.header("authorization") is None for r in polls), polls
    assert all("access_token" not in r.query for r in polls), polls
    # The client polls in a tight loop: the last poll may still be in flight when the
    # recorder stops (no status yet). Every answered poll got 401.
    answered = [r for r in polls if r.status is not None]
    assert answered and {r.status for r in answered} == {401}, polls
    service.assert_healthy()


def test_long_polling_json_token_patched(service, wire, monkeypatch):
    """The rest of signalrcore's long polling (handshake POSTed before the first poll,
    `Accept: Text` polls, one message handled per poll, DELETE on stop), with its poll
    requests given the same Authorization header its other requests carry."""
    from signalrcore.transport.long_polling import long_polling_client as lp

    original_init = lp.LongPollingBaseClient.__init__

    def init_with_token(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        if "Authorization" in self.headers:
            self._receive_headers["Authorization"] = self.headers["Authorization"]

    monkeypatch.setattr(lp.LongPollingBaseClient, "__init__", init_with_token)
    token = service.client_token(HUB, USER, public_endpoint=wire.base)
    conn, received, opened, closed = build(token["url"], token["accessToken"], HttpTransportType.long_polling)
    exchange(service, conn, received, opened, closed)
    assert_v0_negotiate(wire, "LongPolling")


def test_redirect_from_app_server(service, wire):
    """App server answers negotiate with {url, accessToken}: signalrcore opens an id-less
    WebSocket to `url` with `Authorization: Bearer <accessToken>` (no second negotiate)."""
    token = service.client_token(HUB, USER, public_endpoint=wire.base)
    app = RedirectAppServer(token["url"], token["accessToken"])
    try:
        conn, received, opened, closed = build(f"{app.base}/{HUB}", "app-server-token",
                                               HttpTransportType.web_sockets)
        exchange(service, conn, received, opened, closed)
        assert app.seen == [f"/{HUB}/negotiate"]
    finally:
        app.close()
    reqs = wire.requests()
    assert not any(r.path.endswith("/negotiate") for r in reqs), reqs
    assert len(reqs) == 1 and reqs[0].is_websocket, reqs
    assert reqs[0].path == "/client/" and reqs[0].query.get("hub") == [HUB]
    assert "id" not in reqs[0].query, reqs[0]
    assert reqs[0].header("authorization") == f"Bearer {token['accessToken']}"
