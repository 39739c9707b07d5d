'use strict';
// 1. Connect over every transport × protocol and receive REST broadcasts
//    (2022-06-01 `:send` and v1). MessagePack over Server-Sent Events must fail.

const { describe, it, after } = require('node:test');
const assert = require('node:assert/strict');
const { MATRIX, connect, closeAll, uniqueHub, waitFor, signalR } = require('../lib/client');

module.exports = (env) => {
  describe('1. connect and receive broadcasts', () => {
    after(closeAll);

    for (const combo of MATRIX.filter((c) => c.valid)) {
      it(`${combo.name}: connects, receives a 2022-06-01 and a v1 broadcast`, async () => {
        const hub = uniqueHub('connect');
        const c = await connect(env.service, { hub, user: 'u1', ...combo });
        assert.equal(c.connection.state, signalR.HubConnectionState.Connected);
        assert.equal(typeof c.connection.connectionId, 'string');
        assert.ok(c.connection.connectionId.length > 0, 'connectionId is non-empty');

        await env.rest.broadcast(hub, 'msg', ['hello', combo.name]);
        assert.deepEqual(await c.inbox.next('msg'), ['hello', combo.name]);

        await env.rest.v1Broadcast(hub, 'msg', ['hello-v1', 7]);
        assert.deepEqual(await c.inbox.next('msg'), ['hello-v1', 7]);

        await waitFor(c.connection.stop(), 5000, 'stop()');
        assert.equal(c.connection.state, signalR.HubConnectionState.Disconnected);
        assert.equal(await waitFor(c.closed, 1000, 'onclose'), undefined, 'a client-initiated stop closes without error');
      });
    }

    for (const combo of MATRIX.filter((c) => !c.valid)) {
      it(`${combo.name}: start() fails with a clear error`, async () => {
        const hub = uniqueHub('connect_invalid');
        const c = await connect(env.service, { hub, ...combo, start: false });
        await assert.rejects(waitFor(c.connection.start(), 10000, 'start()'), (err) => {
          assert.match(String(err && err.message), /ServerSentEvents.*does not support Binary/);
          return true;
        });
        assert.equal(c.connection.state, signalR.HubConnectionState.Disconnected);
      });
    }

    it('ServerSentEvents (raw HTTP): the service refuses a messagepack handshake with a handshake error', async () => {
      // The official client refuses MessagePack over SSE before talking to the
      // service; this checks the service side of the same rule.
      const hub = uniqueHub('connect_raw_sse');
      const { url, accessToken } = await env.service.token({ hub });
      const auth = { Authorization: `Bearer ${accessToken}` };
      const base = new URL(url); // http://127.0.0.1:PORT/client/?hub=H
      const negotiateUrl = `${base.origin}${base.pathname.replace(/\/?$/, '/')}negotiate${base.search}&negotiateVersion=1`;
      const neg = await fetch(negotiateUrl, { method: 'POST', headers: auth, signal: AbortSignal.timeout(5000) });
      assert.equal(neg.status, 200);
      const body = await neg.json();
      assert.ok(body.connectionToken, `negotiate response has a connectionToken: ${JSON.stringify(body)}`);
      const sse = body.availableTransports.find((t) => t.transport === 'ServerSentEvents');
      assert.deepEqual(sse && sse.transferFormats, ['Text'], 'SSE is advertised as Text only');

      const connectUrl = `${url}&id=${encodeURIComponent(body.connectionToken)}`;
      const abort = new AbortController();
      const stream = await fetch(connectUrl, { headers: { ...auth, Accept: 'text/event-stream' }, signal: abort.signal });
      try {
        assert.equal(stream.status, 200);
        assert.match(stream.headers.get('content-type') || '', /text\/event-stream/);
        const post = await fetch(connectUrl, {
          method: 'POST',
          headers: { ...auth, 'Content-Type': 'text/plain;charset=UTF-8' },
          body: '{"protocol":"messagepack","version":1}\u001e',
          signal: AbortSignal.timeout(5000),
        });
        assert.ok(post.status === 200 || post.status === 404, `handshake POST status ${post.status}`);

        let text = '';
        const reader = stream.body.getReader();
        const decoder = new TextDecoder();
        const readUntilError = (async () => {
          for (;;) {
            const { value, done } = await reader.read();
            if (done) return;
            text += decoder.decode(value, { stream: true });
            if (/"error"/.test(text)) return;
          }
        })();
        await waitFor(readUntilError, 5000, 'the handshake error on the SSE stream');
        const data = text
          .split(/\r?\n/)
          .filter((l) => l.startsWith('data: '))
          .map((l) => l.slice(6))
          .join('');
        const record = JSON.parse(data.replace(/\u001e$/, ''));
        assert.match(record.error, /messagepack/i);
        assert.match(record.error, /transport/i);
      } finally {
        abort.abort();
      }
    });
  });
};
