'use strict';
// 8. WebSockets with skipNegotiation: an id-less WebSocket connect.

const { describe, it, after } = require('node:test');
const assert = require('node:assert/strict');
const { PROTOCOLS, connect, closeAll, uniqueHub, signalR, waitFor } = require('../lib/client');

module.exports = (env) => {
  describe('8. skipNegotiation (id-less WebSocket)', () => {
    after(closeAll);

    for (const protocol of PROTOCOLS) {
      it(`WebSockets/${protocol}: connects without negotiate and receives broadcasts and user sends`, async () => {
        const hub = uniqueHub('skipneg');
        const c = await connect(env.service, { hub, user: 'sk', transport: 'WebSockets', protocol, skipNegotiation: true });
        assert.equal(c.connection.state, signalR.HubConnectionState.Connected);
        await env.rest.broadcast(hub, 'msg', ['skip', protocol]);
        assert.deepEqual(await c.inbox.next('msg'), ['skip', protocol]);
        await env.rest.sendToUser(hub, 'sk', 'msg', ['user']);
        assert.deepEqual(await c.inbox.next('msg'), ['user']);
        await waitFor(c.connection.stop(), 5000, 'stop()');
        assert.equal(await waitFor(c.closed, 1000, 'onclose'), undefined);
      });
    }

    it('skipNegotiation with a non-WebSocket transport is refused by the client', async () => {
      const hub = uniqueHub('skipneg_sse');
      const c = await connect(env.service, { hub, transport: 'LongPolling', skipNegotiation: true, start: false });
      await assert.rejects(waitFor(c.connection.start(), 5000, 'start()'), /Negotiation can only be skipped/);
    });
  });
};
