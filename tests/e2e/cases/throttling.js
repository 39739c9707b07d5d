'use strict';
// 13. Throttling: a service of its own with a node-wide connect rate of 1/s (burst 2). Once
//     the burst is spent, start() rejects with the 429 the service answered at negotiate (a
//     WebSocket that skips negotiate is refused too, though the client does not say with
//     what); a client connected before keeps receiving.

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { connect, closeAll, uniqueHub, waitFor, signalR } = require('../lib/client');
const { startService } = require('../lib/service');
const { Rest } = require('../lib/rest');

module.exports = () => {
  describe('13. throttling (connect rate)', () => {
    let service;

    before(async () => {
      service = await startService(['--set', 'throttling.connect_rate=1', '--set', 'throttling.connect_burst=2']);
    });

    after(async () => {
      await closeAll();
      if (service) await service.stop();
    });

    /** Starts clients until one is refused (a slow machine may see a token come back). */
    async function firstRefusal(hub, token, url, options = {}) {
      for (let attempt = 0; attempt < 5; attempt += 1) {
        const c = await connect(service, { hub, token, url, start: false, ...options });
        const error = await waitFor(c.connection.start().then(() => undefined, (e) => e), 10000, 'start()');
        if (error) return error;
      }
      assert.fail('five immediate connects and none refused');
    }

    it('a throttled start() rejects with 429; a connected client is unaffected', async () => {
      const hub = uniqueHub('throttled');
      const { accessToken: token, url } = await service.token({ hub });
      const first = await connect(service, { hub, token, url });
      assert.equal(first.connection.state, signalR.HubConnectionState.Connected);

      const negotiateError = await firstRefusal(hub, token, url);
      assert.match(String(negotiateError), /429/);
      if (process.env.E2E_VERBOSE) process.stderr.write(`throttled negotiate: ${negotiateError}\n`);
      // The client does not pass on the status of a refused WebSocket upgrade; the counter
      // below shows it was this refusal.
      const skipError = await firstRefusal(hub, token, url, { skipNegotiation: true });
      assert.match(String(skipError), /WebSocket failed to connect/);

      await new Rest(service).broadcast(hub, 'msg', ['still here']);
      assert.deepEqual(await first.inbox.next('msg'), ['still here']);
      const metrics = await (await fetch(`${service.baseUrl}/metrics`)).text();
      const refused = Number(/switchyard_throttled_total\{kind="connect_node"\} (\d+)/.exec(metrics)[1]);
      assert.ok(refused >= 2, `connect_node refusals: ${refused}`);
    });
  });
};
