"""Python `pysignalr` (asyncio, WebSockets only) against a real switchyard process.

pysignalr negotiates without `negotiateVersion` (version 0), then opens a WebSocket
with `id=<connectionId>`. After an Azure-style redirect (`{"url","accessToken"}` from
an app server) it skips the second negotiate and opens an id-less WebSocket to `url`
with `Authorization: Bearer <accessToken>`. It is stopped by cancelling `run()`, which
closes the WebSocket with a close frame.
"""

import asyncio
import logging
import time

import pytest
from pysignalr.client import SignalRClient
from pysignalr.exceptions import AuthorizationError
from pysignalr.protocol.messagepack import MessagepackProtocol

from harness import RedirectAppServer

HUB = "compat"
USER = "bob"
BROADCAST_ARGS = ["hello", 42]
USER_ARGS = ["hello user", 43]
TIMEOUT = 15

logging.getLogger("pysignalr").setLevel(logging.ERROR)
logging.getLogger("websockets").setLevel(logging.ERROR)


async def async_wait_until(predicate, timeout=TIMEOUT, what="condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = await asyncio.to_thread(predicate) if not asyncio.iscoroutinefunction(predicate) else await predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.05)


async def exchange(service, client: SignalRClient):
    """Run the client, receive a broadcast and a user send, cancel it; check the close
    handshake and that the service dropped the connection."""
    received = []
    opened = asyncio.Event()

    async def on_new_message(args):
        received.append(list(args))

    async def on_open():
        opened.set()

    client.on("newMessage", on_new_message)
    client.on_open(on_open)
    task = asyncio.create_task(client.run())
    try:
        done, _ = await asyncio.wait({task, asyncio.ensure_future(opened.wait())}, timeout=TIMEOUT,
                                     return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            task.result()  # raises the client's error
        assert opened.is_set(), "client never opened (handshake)"
        await async_wait_until(lambda: service.user_exists(HUB, USER), what="user connection registered")
        await asyncio.to_thread(service.broadcast, HUB, "newMessage", BROADCAST_ARGS)
        await async_wait_until(lambda: BROADCAST_ARGS in received, what=f"broadcast; got {received}")
        await asyncio.to_thread(service.send_to_user, HUB, USER, "newMessage", USER_ARGS)
        await async_wait_until(lambda: USER_ARGS in received, what=f"user send; got {received}")
        assert received == [BROADCAST_ARGS, USER_ARGS]
        ws = client._transport._ws  # the live websockets connection, to inspect its close
        assert ws is not None
    finally:
        task.cancel()
        try:
            await asyncio.wait_for(task, TIMEOUT)
        except asyncio.CancelledError:
            pass
    # Cancelling leaves `async with connect(...)` by an exception, so websockets sends a close
    # frame with 1011 and waits for the service's answering close frame.
    await asyncio.wait_for(ws.wait_closed(), TIMEOUT)
    print("close sent", ws.protocol.close_sent, "received", ws.protocol.close_rcvd)
    assert ws.protocol.close_sent is not None, "client sent no close frame"
    assert ws.protocol.close_rcvd is not None, "service did not answer the close frame"
    await async_wait_until(lambda: not service.user_exists(HUB, USER), what="connection gone after stop")
    await asyncio.to_thread(service.assert_healthy)


def assert_v0_websocket(wire, token):
    reqs = wire.requests()
    assert [r.method for r in reqs] == ["POST", "GET"], reqs
    negotiate, ws = reqs
    assert negotiate.path == "/client/negotiate" and negotiate.query.get("hub") == [HUB], negotiate
    assert "negotiateVersion" not in negotiate.query, negotiate
    responses = wire.negotiate_responses()
    assert len(responses) == 1 and responses[0]["negotiateVersion"] == 0, responses
    assert ws.is_websocket and ws.status == 101, ws
    assert ws.path == "/client/" and ws.query.get("id") == [responses[0]["connectionId"]], ws
    for r in reqs:
        assert r.header("authorization") == f"Bearer {token}", r


def test_websockets_json(service, wire):
    token = service.client_token(HUB, USER, public_endpoint=wire.base)
    client = SignalRClient(token["url"], headers={"Authorization": f"Bearer {token['accessToken']}"})
    asyncio.run(exchange(service, client))
    assert_v0_websocket(wire, token["accessToken"])


def test_websockets_messagepack(service, wire):
    token = service.client_token(HUB, USER, public_endpoint=wire.base)
    client = SignalRClient(token["url"], protocol=MessagepackProtocol(),
                           headers={"Authorization": f"Bearer {token['accessToken']}"})
    asyncio.run(exchange(service, client))
    assert_v0_websocket(wire, token["accessToken"])


def test_access_token_factory_alone_is_not_sent_on_negotiate(service, wire):
    """pysignalr 1.3.3 calls `access_token_factory` only in its hub handshake step, after
    negotiate and the WebSocket upgrade, so a client configured with the factory alone
    negotiates without a token: the service answers 401 (as Azure SignalR does) and the
    client raises AuthorizationError. A client bug; pass the token in `headers` instead."""
    token = service.client_token(HUB, USER, public_endpoint=wire.base)
    client = SignalRClient(token["url"], access_token_factory=lambda: token["accessToken"])

    async def run():
        with pytest.raises(AuthorizationError):
            await asyncio.wait_for(client.run(), TIMEOUT)

    asyncio.run(run())
    reqs = wire.requests()
    assert [(r.method, r.path, r.status) for r in reqs] == [("POST", "/client/negotiate", 401)], reqs
    assert reqs[0].header("authorization") is None
    service.assert_healthy()


def test_redirect_from_app_server(service, wire):
    """App server negotiate -> {url, accessToken}; pysignalr goes straight to an id-less
    WebSocket at `url` with the bearer header (no negotiate at the service)."""
    token = service.client_token(HUB, USER, public_endpoint=wire.base)
    app = RedirectAppServer(token["url"], token["accessToken"])
    try:
        client = SignalRClient(f"{app.base}/{HUB}")
        asyncio.run(exchange(service, client))
        assert app.seen == [f"/{HUB}/negotiate"]
    finally:
        app.close()
    reqs = wire.requests()
    assert len(reqs) == 1, reqs
    ws = reqs[0]
    assert ws.is_websocket and ws.status == 101, ws
    assert ws.path == "/client/" and ws.query == {"hub": [HUB]}, ws
    assert ws.header("authorization") == f"Bearer {token['accessToken']}"
