'use strict';
// 2. A broadcast with `excluded=<connectionId>` skips that connection.

const { describe, it, after } = require('node:test');
const assert = require('node:assert/strict');
const { VALID, connect, closeAll, uniqueHub, expectNothing } = require('../lib/client');

module.exports = (env) => {
  describe('2. broadcast with excluded connections', () => {
    after(closeAll);

    for (const combo of VALID) {
      it(`${combo.name}: excluded connection gets nothing, the others get the message`, async () => {
        const hub = uniqueHub('exclude');
        const a = await connect(env.service, { hub, user: 'a', ...combo });
        const b = await connect(env.service, { hub, user: 'b', ...combo });
        const c = await connect(env.service, { hub, user: 'c', ...combo });
        const marker = (tag) => env.rest.broadcast(hub, 'marker', [tag]);

        await env.rest.broadcast(hub, 'msg', ['not for a'], { excluded: [a.connection.connectionId] });
        assert.deepEqual(await b.inbox.next('msg'), ['not for a']);
        assert.deepEqual(await c.inbox.next('msg'), ['not for a']);
        await expectNothing(a.inbox, 'msg', marker);

        // Two excluded ids (the query parameter repeats).
        await env.rest.broadcast(hub, 'msg', ['only c'], {
          excluded: [a.connection.connectionId, b.connection.connectionId],
        });
        assert.deepEqual(await c.inbox.next('msg'), ['only c']);
        await expectNothing([a.inbox, b.inbox], 'msg', marker);
      });
    }

    it('v1 broadcast honours ?excluded= too', async () => {
      const hub = uniqueHub('exclude_v1');
      const a = await connect(env.service, { hub });
      const b = await connect(env.service, { hub });
      const path = `/api/v1/hubs/${hub}`;
      await env.rest.expect(202, 'POST', path, {
        query: `excluded=${encodeURIComponent(a.connection.connectionId)}`,
        body: { target: 'msg', arguments: ['v1 not for a'] },
      });
      assert.deepEqual(await b.inbox.next('msg'), ['v1 not for a']);
      await expectNothing(a.inbox, 'msg', (tag) => env.rest.broadcast(hub, 'marker', [tag]));
    });
  });
};
