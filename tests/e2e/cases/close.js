'use strict';
// 4. DELETE /api/hubs/{hub}/connections/{id}?reason=bye closes the client with that reason.

const { describe, it, after } = require('node:test');
const assert = require('node:assert/strict');
const { VALID, connect, closeAll, uniqueHub, waitFor, sleep, signalR } = require('../lib/client');

module.exports = (env) => {
  describe('4. close a connection via REST', () => {
    after(closeAll);

    for (const combo of VALID) {
      it(`${combo.name}: onclose fires with an error mentioning the reason; others stay connected`, async (t) => {
        const hub = uniqueHub('close');
        const victim = await connect(env.service, { hub, ...combo });
        const other = await connect(env.service, { hub, ...combo });
        const id = victim.connection.connectionId;
        const path = `/api/hubs/${hub}/connections/${id}`;

        await env.rest.expect(200, 'HEAD', path, { query: 'api-version=2022-06-01' });
        await env.rest.closeConnection(hub, id, 'bye');

        const error = await waitFor(victim.closed, 5000, 'onclose after REST close');
        assert.ok(error instanceof Error, `onclose got an Error (got ${error})`);
        t.diagnostic(`onclose error: ${error.message}`);
        assert.match(error.message, /bye/);
        assert.equal(victim.connection.state, signalR.HubConnectionState.Disconnected);

        // The connection is gone from the service's point of view.
        let status;
        for (let i = 0; i < 20; i++) {
          status = (await env.rest.call('HEAD', path, { query: 'api-version=2022-06-01' })).status;
          if (status === 404) break;
          await sleep(100);
        }
        assert.equal(status, 404, 'HEAD connection answers 404 after the close');

        await env.rest.broadcast(hub, 'msg', ['still here']);
        assert.deepEqual(await other.inbox.next('msg'), ['still here']);
        assert.equal(victim.inbox.all('msg').length, 0);
      });
    }

    it('v1 DELETE /api/v1/hubs/{hub}/connections/{id}?reason= closes the client too', async () => {
      const hub = uniqueHub('close_v1');
      const victim = await connect(env.service, { hub });
      await env.rest.expect(202, 'DELETE', `/api/v1/hubs/${hub}/connections/${victim.connection.connectionId}`, {
        query: 'reason=v1bye',
      });
      const error = await waitFor(victim.closed, 5000, 'onclose after v1 REST close');
      assert.ok(error instanceof Error, `onclose got an Error (got ${error})`);
      assert.match(error.message, /v1bye/);
    });
  });
};
