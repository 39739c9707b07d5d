'use strict';
// Entry point: starts ONE switchyard service, then runs every case file against it (the
// Default-mode cases add their own app servers and one `--mode default` service).
// Run with `npm test` (see README.md).

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { startService } = require('./lib/service');
const { Rest } = require('./lib/rest');
const { closeAll } = require('./lib/client');
const { stopAppServers } = require('./lib/appserver');

const CASES = [
  'connect', // 1: connect + 2022-06-01 and v1 broadcasts; MessagePack over SSE refused
  'exclude', // 2: broadcast with excluded=
  'targets', // 3: user / connection / group / user-group sends
  'close', // 4: close a connection via REST with a reason
  'auth', // 5: rejected client tokens; REST auth; --claim
  'args', // 6: argument types round-trip
  'invoke', // 7: invoking client gets closed, bystander unaffected
  'skip-negotiation', // 8: id-less WebSocket connect
  'default-mode', // 9: app servers (switchyard-bench): redirect, hub methods, two servers, order
  'upstream', // 10: upstream webhooks: events, signatures, invocation results (own service)
  'streams', // 12: Default-mode streams both ways (stream(), Subject uploads, cancel)
  'throttling', // 13: a throttled start() rejects with 429 (own service)
];

/** Filled in by the before() hook; case files read it lazily inside their tests. */
const env = { service: undefined, rest: undefined };

describe('switchyard e2e (@microsoft/signalr client)', () => {
  before(async () => {
    env.service = await startService();
    env.rest = new Rest(env.service);
  });

  after(async () => {
    await closeAll();
    await stopAppServers();
    if (env.service) {
      const exit = await env.service.stop();
      if (env.service.killedHard) {
        process.stderr.write('warning: switchyard did not exit within 5 s of SIGTERM and was killed\n');
      }
      if (process.env.E2E_VERBOSE) process.stderr.write(`switchyard exited: ${JSON.stringify(exit)}\n`);
    }
  });

  for (const name of CASES) require(`./cases/${name}`)(env);

  it('the service process stayed up through the run', () => {
    assert.ok(env.service, 'service was started');
    assert.equal(env.service.exited, false, `service exited: ${JSON.stringify(env.service.exitInfo)}\n${env.service.log()}`);
  });
});
