'use strict';
// 3. Sends to a user, a connection, a group (with and without excluded), and
//    to a group the user joined via REST; removal stops delivery.

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { VALID, connect, closeAll, uniqueHub, expectNothing } = require('../lib/client');

module.exports = (env) => {
  describe('3. targeted sends', () => {
    after(closeAll);

    for (const combo of VALID) {
      describe(combo.name, () => {
        const hub = uniqueHub('targets');
        let alice1;
        let alice2;
        let bob;
        const marker = (tag) => env.rest.broadcast(hub, 'marker', [tag]);
        const quiet = (...handles) => expectNothing(handles.map((h) => h.inbox), 'msg', marker);

        before(async () => {
          alice1 = await connect(env.service, { hub, user: 'alice', ...combo });
          alice2 = await connect(env.service, { hub, user: 'alice', ...combo });
          bob = await connect(env.service, { hub, user: 'bob', ...combo });
        });

        it('send to a user reaches all of that user\'s connections only', async () => {
          await env.rest.sendToUser(hub, 'alice', 'msg', ['to alice']);
          assert.deepEqual(await alice1.inbox.next('msg'), ['to alice']);
          assert.deepEqual(await alice2.inbox.next('msg'), ['to alice']);
          await quiet(bob);
        });

        it('send to an unknown user is accepted and delivers nothing', async () => {
          await env.rest.sendToUser(hub, 'nobody', 'msg', ['to nobody']);
          await quiet(alice1, alice2, bob);
        });

        it('send to a connection reaches only that connection', async () => {
          await env.rest.sendToConnection(hub, alice2.connection.connectionId, 'msg', ['to alice2']);
          assert.deepEqual(await alice2.inbox.next('msg'), ['to alice2']);
          await quiet(alice1, bob);
        });

        it('group send after PUT groups/{group}/connections/{id} reaches the member only', async () => {
          await env.rest.addConnectionToGroup(hub, 'g1', alice1.connection.connectionId);
          await env.rest.sendToGroup(hub, 'g1', 'msg', ['to g1']);
          assert.deepEqual(await alice1.inbox.next('msg'), ['to g1']);
          await quiet(alice2, bob);
        });

        it('group send with excluded skips the excluded member', async () => {
          await env.rest.addConnectionToGroup(hub, 'g1', bob.connection.connectionId);
          await env.rest.sendToGroup(hub, 'g1', 'msg', ['g1 minus alice1'], {
            excluded: [alice1.connection.connectionId],
          });
          assert.deepEqual(await bob.inbox.next('msg'), ['g1 minus alice1']);
          await quiet(alice1, alice2);
        });

        it('after DELETE groups/{group}/connections/{id} the connection gets no group sends', async () => {
          await env.rest.removeConnectionFromGroup(hub, 'g1', alice1.connection.connectionId);
          await env.rest.sendToGroup(hub, 'g1', 'msg', ['g1 after removal']);
          assert.deepEqual(await bob.inbox.next('msg'), ['g1 after removal']);
          await quiet(alice1, alice2);
        });

        it('PUT users/{user}/groups/{group} makes group sends reach all the user\'s connections', async () => {
          await env.rest.addUserToGroup(hub, 'alice', 'g2');
          await env.rest.sendToGroup(hub, 'g2', 'msg', ['to g2']);
          assert.deepEqual(await alice1.inbox.next('msg'), ['to g2']);
          assert.deepEqual(await alice2.inbox.next('msg'), ['to g2']);
          await quiet(bob);
        });

        it('after DELETE users/{user}/groups/{group} the user gets no group sends', async () => {
          await env.rest.removeUserFromGroup(hub, 'alice', 'g2');
          await env.rest.sendToGroup(hub, 'g2', 'msg', ['g2 after removal']);
          await quiet(alice1, alice2, bob);
        });
      });
    }

    it('user membership added before the user connects applies to the later connection', async () => {
      const hub = uniqueHub('targets_late');
      await env.rest.addUserToGroup(hub, 'late', 'g');
      const late = await connect(env.service, { hub, user: 'late' });
      await env.rest.sendToGroup(hub, 'g', 'msg', ['to g']);
      assert.deepEqual(await late.inbox.next('msg'), ['to g']);
    });
  });
};
