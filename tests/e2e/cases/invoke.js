'use strict';
// 7. In serverless mode a client that invokes a hub method is closed; another
//    connection in the same hub keeps receiving broadcasts.

const { describe, it, after } = require('node:test');
const assert = require('node:assert/strict');
const { VALID, connect, closeAll, uniqueHub, waitFor, signalR } = require('../lib/client');

module.exports = (env) => {
  describe('7. a client invocation closes only that client', () => {
    after(closeAll);

    for (const combo of VALID) {
      it(`${combo.name}: send('x') closes the sender; the bystander is unaffected`, async (t) => {
        const hub = uniqueHub('invoke');
        const sender = await connect(env.service, { hub, ...combo });
        const bystander = await connect(env.service, { hub, ...combo });

        await env.rest.broadcast(hub, 'msg', ['before']);
        assert.deepEqual(await sender.inbox.next('msg'), ['before']);
        assert.deepEqual(await bystander.inbox.next('msg'), ['before']);

        // send() may resolve (message written) or reject if the transport closes first.
        await sender.connection.send('x').catch(() => {});
        const error = await waitFor(sender.closed, 5000, 'the invoking client to be closed');
        t.diagnostic(`sender onclose error: ${error ? error.message : error}`);
        assert.equal(sender.connection.state, signalR.HubConnectionState.Disconnected);

        await env.rest.broadcast(hub, 'msg', ['after']);
        assert.deepEqual(await bystander.inbox.next('msg'), ['after']);
        assert.equal(bystander.connection.state, signalR.HubConnectionState.Connected);
      });
    }

    it('WebSockets/json: invoke("x") rejects and the client is closed', async () => {
      const hub = uniqueHub('invoke_blocking');
      const sender = await connect(env.service, { hub });
      const bystander = await connect(env.service, { hub });
      await assert.rejects(waitFor(sender.connection.invoke('x', 1, 2), 5000, 'invoke() to settle'));
      await waitFor(sender.closed, 5000, 'onclose');
      await env.rest.broadcast(hub, 'msg', ['after invoke']);
      assert.deepEqual(await bystander.inbox.next('msg'), ['after invoke']);
    });
  });
};
