'use strict';
// 6. Argument values of different JSON types round-trip REST -> client.

const { describe, it, after } = require('node:test');
const assert = require('node:assert/strict');
const { VALID, connect, closeAll, uniqueHub } = require('../lib/client');

const CASES = [
  ['strings', ['plain', '', 'ünïcødé ✓ 漢字 🚀', 'quote " backslash \\ newline \n tab \t', '\u001e record separator']],
  ['integers', [0, 1, -1, 127, 128, 255, 256, 65535, 65536, -32769, 2147483647, -2147483648, 4294967296, Number.MAX_SAFE_INTEGER, Number.MIN_SAFE_INTEGER]],
  ['floats', [0.5, -2.25, 3.141592653589793, 1e-300, 1.7976931348623157e308]],
  ['booleans and null', [true, false, null]],
  ['objects', [{}, { a: 1, b: 'two', c: null, d: [1, 2], e: { nested: { deep: true } } }]],
  ['arrays', [[], [1, 'two', null, false, { x: [] }], [[[]]]]],
  ['a long string', ['x'.repeat(20000)]],
];

module.exports = (env) => {
  describe('6. argument types round-trip', () => {
    after(closeAll);

    for (const combo of VALID) {
      it(`${combo.name}: strings, numbers, booleans, null, objects, arrays`, async () => {
        const hub = uniqueHub('args');
        const c = await connect(env.service, { hub, ...combo });
        for (const [label, args] of CASES) {
          await env.rest.broadcast(hub, 'args', args);
          assert.deepEqual(await c.inbox.next('args'), args, `${label} over ${combo.name}`);
        }
        // Zero arguments: the handler runs with none.
        await env.rest.broadcast(hub, 'noargs', []);
        assert.deepEqual(await c.inbox.next('noargs'), []);
        // Mixed types in one message, via the per-connection route.
        const mixed = ['s', 42, 4.5, true, null, { k: 'v' }, [1, 2, 3]];
        await env.rest.sendToConnection(hub, c.connection.connectionId, 'args', mixed);
        assert.deepEqual(await c.inbox.next('args'), mixed);
      });
    }

    it('client method names match case-insensitively (JS client lower-cases them)', async () => {
      const hub = uniqueHub('args_case');
      const c = await connect(env.service, { hub });
      await env.rest.broadcast(hub, 'MSG', ['upper']);
      assert.deepEqual(await c.inbox.next('msg'), ['upper']);
    });
  });
};
