'use strict';
// 9. Default mode: real `switchyard-bench app-server` processes connect to the service's
//    /server endpoint; clients negotiate with an app server, are redirected to the service,
//    and call the benchmark hub, whose sends the service routes. Clients receive
//    `Measure(ts, payload)`.
//
// Absence checks: every send is made with invoke(), whose completion comes back over the same
// server connection after the send, so by then the service has queued the send for every
// recipient. A marker Broadcast sent afterwards must then be the next `Measure` of every
// client: anything else that arrived first is an unexpected message.

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const {
  VALID, connect, connectApp, startFailure, closeAll, uniqueHub, waitFor, sleep, signalR,
} = require('../lib/client');
const { startAppServer, stopAppServers } = require('../lib/appserver');
const { startService } = require('../lib/service');

const NOT_CONNECTED = /app servers are not connected/;
const ASK = { Ask: (x) => x * 2 };

let idCounter = 0;
/** A server id unique within the run. */
function serverId(name) {
  idCounter += 1;
  return `e2e-${name}-${process.pid}-${idCounter}`;
}

let markerCounter = 0;
/**
 * Broadcast a marker from `via` and check it is the next `Measure` of every one of `handles`:
 * nothing unexpected reached them before it (see the note at the top).
 */
async function quiet(handles, via) {
  markerCounter += 1;
  const tag = `marker-${markerCounter}`;
  await waitFor(via.connection.invoke('Broadcast', 'marker', tag), 5000, 'marker Broadcast completion');
  for (const h of handles) {
    const got = await nextMeasure(h, ['marker', tag]);
    assert.deepEqual(got, ['marker', tag], `${h.label}: expected no message before the marker, got Measure${JSON.stringify(got)}`);
  }
}

/** The next `Measure` arguments of `h`; a timeout names the client and what was expected. */
async function nextMeasure(h, expected) {
  try {
    return await h.inbox.next('Measure');
  } catch (e) {
    throw new Error(`${h.label}: ${e.message} ${JSON.stringify(expected)}`);
  }
}

/** invoke() with a timeout that names the call. */
function call(h, method, ...args) {
  return waitFor(h.connection.invoke(method, ...args), 5000, `${h.label}: invoke('${method}')`);
}

/** The next `Measure` of `h` equals [ts, payload]. */
async function expectMeasure(h, ts, payload) {
  const got = await nextMeasure(h, [ts, payload]);
  assert.deepEqual(got, [ts, payload], `${h.label} received Measure${JSON.stringify(got)}`);
}

module.exports = (env) => {
  describe('9. Default mode (app servers, switchyard-bench)', () => {
    after(async () => {
      await closeAll();
      await stopAppServers();
    });

    // --- hub methods over every transport × protocol, one app server ----------------------
    describe('hub methods through one app server', () => {
      const hubs = new Map(VALID.map((combo) => [combo.name, uniqueHub('dm')]));
      const mixedHub = uniqueHub('dm_mixed');
      const id = serverId('features');
      let app;

      before(async () => {
        app = await startAppServer(env.service, { serverId: id, hubs: [...hubs.values(), mixedHub] });
      });
      after(async () => {
        await closeAll();
        if (app) await app.stop();
      });

      for (const combo of VALID) {
        describe(combo.name, () => {
          const hub = hubs.get(combo.name);
          const c = {}; // a1, a2 (user alice), b (bob), c (carol)
          let everyone;
          const open = async (label, user) => {
            const h = await connectApp(app, { hub, user, handlers: ASK, ...combo });
            h.label = `${label} (${combo.name})`;
            return h;
          };

          before(async () => {
            c.a1 = await open('a1', 'alice');
            c.a2 = await open('a2', 'alice');
            c.b = await open('b', 'bob');
            c.c = await open('c', 'carol');
            everyone = [c.a1, c.a2, c.b, c.c];
          });

          it('connects through the negotiate redirect; Echo answers the caller only and completes', async () => {
            // The service knows each connection: the client was redirected to it.
            for (const h of everyone) {
              await env.rest.expect(200, 'HEAD', `/api/hubs/${hub}/connections/${h.connection.connectionId}`, { query: 'api-version=2022-06-01' });
            }
            const ts = Date.now();
            const result = await call(c.a1, 'Echo', ts, 'echo payload');
            assert.equal(result ?? null, null, 'Echo completes without a result');
            await expectMeasure(c.a1, ts, 'echo payload');
            await quiet(everyone, c.b);
          });

          it('GetConnectionId, GetUserId and GetServerId', async () => {
            for (const h of everyone) {
              assert.equal(await call(h, 'GetConnectionId'), h.connection.connectionId, `${h.label} connection id`);
              assert.equal(await call(h, 'GetServerId'), id, `${h.label} server id`);
            }
            assert.equal(await call(c.a1, 'GetUserId'), 'alice');
            assert.equal(await call(c.a2, 'GetUserId'), 'alice');
            assert.equal(await call(c.b, 'GetUserId'), 'bob');
          });

          it('Broadcast reaches every client, the caller too', async () => {
            await call(c.b, 'Broadcast', 1, 'to all');
            for (const h of everyone) await expectMeasure(h, 1, 'to all');
            await quiet(everyone, c.a1);
          });

          it('BroadcastExcept skips the excluded connections', async () => {
            await call(c.b, 'BroadcastExcept', [c.a2.connection.connectionId], 2, 'all but a2');
            for (const h of [c.a1, c.b, c.c]) await expectMeasure(h, 2, 'all but a2');
            await quiet(everyone, c.a1);
            await call(c.b, 'BroadcastExcept', [c.a1.connection.connectionId, c.b.connection.connectionId], 3, 'all but a1, b');
            for (const h of [c.a2, c.c]) await expectMeasure(h, 3, 'all but a1, b');
            await quiet(everyone, c.a1);
          });

          it('SendToConnection and SendToConnections', async () => {
            await call(c.a1, 'SendToConnection', c.c.connection.connectionId, 4, 'to c');
            await expectMeasure(c.c, 4, 'to c');
            await quiet(everyone, c.a1);
            await call(c.a1, 'SendToConnections', [c.a2.connection.connectionId, c.b.connection.connectionId], 5, 'to a2, b');
            await expectMeasure(c.a2, 5, 'to a2, b');
            await expectMeasure(c.b, 5, 'to a2, b');
            await quiet(everyone, c.a1);
          });

          it('SendToUser and SendToUsers (users from the negotiate ?user=)', async () => {
            await call(c.b, 'SendToUser', 'alice', 6, 'to alice');
            await expectMeasure(c.a1, 6, 'to alice');
            await expectMeasure(c.a2, 6, 'to alice');
            await quiet(everyone, c.b);
            await call(c.a1, 'SendToUsers', ['bob', 'carol', 'nobody'], 7, 'to bob, carol');
            await expectMeasure(c.b, 7, 'to bob, carol');
            await expectMeasure(c.c, 7, 'to bob, carol');
            await quiet(everyone, c.b);
          });

          it('JoinGroup, SendToGroup, SendToGroupExcept, SendToOthersInGroup, SendToGroups, LeaveGroup', async () => {
            // The join's completion comes after the service's ack: a send from another client
            // (possibly over another server connection) right after it must reach the member.
            assert.equal((await call(c.a1, 'JoinGroup', 'g')) ?? null, null, 'JoinGroup completes without a result');
            await call(c.c, 'SendToGroup', 'g', 8, 'to g');
            await expectMeasure(c.a1, 8, 'to g');
            await quiet(everyone, c.c);

            await call(c.b, 'JoinGroup', 'g');
            await call(c.c, 'SendToGroupExcept', 'g', [c.a1.connection.connectionId], 9, 'g but a1');
            await expectMeasure(c.b, 9, 'g but a1');
            await quiet(everyone, c.c);

            await call(c.a1, 'SendToOthersInGroup', 'g', 10, 'g but the caller');
            await expectMeasure(c.b, 10, 'g but the caller');
            await quiet(everyone, c.c);

            await call(c.c, 'JoinGroup', 'h');
            await call(c.a2, 'SendToGroups', ['g', 'h', 'empty'], 11, 'to g and h');
            for (const h of [c.a1, c.b, c.c]) await expectMeasure(h, 11, 'to g and h');
            await quiet(everyone, c.a2);

            await call(c.a1, 'LeaveGroup', 'g');
            await call(c.c, 'SendToGroup', 'g', 12, 'g after a1 left');
            await expectMeasure(c.b, 12, 'g after a1 left');
            await quiet(everyone, c.c);
          });

          it('AddUserToGroup / RemoveUserFromGroup reach every connection of the user', async () => {
            await call(c.b, 'AddUserToGroup', 'alice', 'ua');
            await call(c.c, 'SendToGroup', 'ua', 13, 'to ua');
            await expectMeasure(c.a1, 13, 'to ua');
            await expectMeasure(c.a2, 13, 'to ua');
            await quiet(everyone, c.c);
            await call(c.b, 'RemoveUserFromGroup', 'alice', 'ua');
            await call(c.c, 'SendToGroup', 'ua', 14, 'ua after removal');
            await quiet(everyone, c.c);
          });

          it('Check* ask the service about connections, users and groups', async () => {
            assert.equal(await call(c.a1, 'CheckConnection', c.b.connection.connectionId), true);
            assert.equal(await call(c.a1, 'CheckConnection', 'no-such-connection'), false);
            assert.equal(await call(c.a1, 'CheckUser', 'carol'), true);
            assert.equal(await call(c.a1, 'CheckUser', 'nobody'), false);
            await call(c.b, 'JoinGroup', 'checked');
            assert.equal(await call(c.a1, 'CheckGroup', 'checked'), true);
            assert.equal(await call(c.a1, 'CheckGroup', 'no-such-group'), false);
            await call(c.a1, 'AddUserToGroup', 'carol', 'checked-users');
            assert.equal(await call(c.a1, 'CheckUserInGroup', 'carol', 'checked-users'), true);
            assert.equal(await call(c.a1, 'CheckUserInGroup', 'bob', 'checked-users'), false);
          });

          it('AskClient: a client result from another client of the same app server', async () => {
            assert.equal(await call(c.a1, 'AskClient', c.b.connection.connectionId, 'Ask', 21), 42);
            assert.equal(await call(c.c, 'AskClient', c.a2.connection.connectionId, 'Ask', 50), 100);
          });

          it('CloseConnection closes the target with the reason; a bystander keeps working', async () => {
            const victim = await open('victim', 'victim');
            await call(c.a1, 'CloseConnection', victim.connection.connectionId, 'kicked by e2e');
            const error = await waitFor(victim.closed, 5000, 'onclose of the closed connection');
            assert.ok(error instanceof Error, `onclose got an Error (got ${error})`);
            assert.match(error.message, /kicked by e2e/);
            assert.equal(victim.connection.state, signalR.HubConnectionState.Disconnected);

            const ts = Date.now();
            await call(c.a1, 'Echo', ts, 'still here');
            await expectMeasure(c.a1, ts, 'still here');
            await call(c.a2, 'Broadcast', 15, 'after the close');
            for (const h of everyone) await expectMeasure(h, 15, 'after the close');
            assert.equal(victim.inbox.all('Measure').length, 0, 'the closed connection received nothing');
            await quiet(everyone, c.a1);
          });
        });
      }

      it('a Broadcast reaches clients of every transport and protocol', async () => {
        const clients = [];
        for (const combo of VALID) {
          const h = await connectApp(app, { hub: mixedHub, user: combo.name, ...combo });
          h.label = combo.name;
          clients.push(h);
        }
        for (const [i, sender] of clients.entries()) {
          await call(sender, 'Broadcast', i, `from ${sender.label}`);
          for (const h of clients) await expectMeasure(h, i, `from ${sender.label}`);
        }
        await quiet(clients, clients[0]);
      });
    });

    // --- two app servers ----------------------------------------------------------------
    describe('two app servers sharing a hub', () => {
      const hub = uniqueHub('dm_two');
      const PER_SERVER = 10;
      let appA;
      let appB;
      const onA = [];
      const onB = [];

      before(async () => {
        [appA, appB] = await Promise.all([
          startAppServer(env.service, { serverId: serverId('A'), hubs: [hub] }),
          startAppServer(env.service, { serverId: serverId('B'), hubs: [hub] }),
        ]);
        const open = (app, list, prefix) =>
          Promise.all(
            Array.from({ length: PER_SERVER }, async (_, i) => {
              const combo = VALID[i % VALID.length];
              const h = await connectApp(app, { hub, user: `${prefix}${i}`, handlers: ASK, ...combo });
              h.label = `${prefix}${i} via ${app.serverId} (${combo.name})`;
              list[i] = h;
            }),
          );
        await Promise.all([open(appA, onA, 'a'), open(appB, onB, 'b')]);
      });
      after(async () => {
        await closeAll();
        await Promise.all([appA, appB].filter(Boolean).map((a) => a.stop()));
      });

      it('each client is served by the app server it negotiated with', async () => {
        for (const h of onA) assert.equal(await call(h, 'GetServerId'), appA.serverId, h.label);
        for (const h of onB) assert.equal(await call(h, 'GetServerId'), appB.serverId, h.label);
        for (const h of [...onA, ...onB]) assert.equal(await call(h, 'GetConnectionId'), h.connection.connectionId, h.label);
        assert.equal(await call(onA[0], 'Count'), PER_SERVER, 'Count: clients of app server A');
        assert.equal(await call(onB[0], 'Count'), PER_SERVER, 'Count: clients of app server B');
      });

      it('a Broadcast from a client of A reaches the clients of B, and the other way round', async () => {
        await call(onA[0], 'Broadcast', 1, 'from A');
        for (const h of [...onA, ...onB]) await expectMeasure(h, 1, 'from A');
        await call(onB[3], 'Broadcast', 2, 'from B');
        for (const h of [...onA, ...onB]) await expectMeasure(h, 2, 'from B');
        await quiet([...onA, ...onB], onA[1]);
      });

      it('SendToUser / SendToConnection / groups across app servers', async () => {
        await call(onA[2], 'SendToUser', 'b7', 3, 'to b7');
        await expectMeasure(onB[7], 3, 'to b7');
        await call(onB[1], 'SendToConnection', onA[5].connection.connectionId, 4, 'to a5');
        await expectMeasure(onA[5], 4, 'to a5');
        await call(onB[2], 'JoinGroup', 'both');
        await call(onA[3], 'JoinGroup', 'both');
        await call(onA[9], 'SendToGroup', 'both', 5, 'to both');
        await expectMeasure(onB[2], 5, 'to both');
        await expectMeasure(onA[3], 5, 'to both');
        await quiet([...onA, ...onB], onA[0]);
      });

      it('AskClient reaches a client pinned to the other app server', async () => {
        for (const [i, target] of onB.entries()) {
          assert.equal(await call(onA[i], 'AskClient', target.connection.connectionId, 'Ask', 21), 42, `${onA[i].label} asks ${target.label}`);
        }
        for (const [i, target] of onA.entries()) {
          assert.equal(await call(onB[i], 'AskClient', target.connection.connectionId, 'Ask', i), 2 * i, `${onB[i].label} asks ${target.label}`);
        }
      });

      it('SIGKILL of app server B closes its clients with an error; clients of A keep receiving', async (t) => {
        // A client of A broadcasts a tick every 20 ms while B is killed.
        let ticking = true;
        let ticks = 0;
        let tickError;
        const ticker = (async () => {
          while (ticking) {
            try {
              await call(onA[0], 'Broadcast', 'tick', ticks);
            } catch (e) {
              tickError = e;
              return;
            }
            ticks += 1;
            await sleep(20);
          }
        })();
        try {
          await sleep(200);
          const exit = await waitFor(appB.kill(), 5000, 'app server B to exit after SIGKILL');
          assert.equal(exit.signal, 'SIGKILL');
          const started = Date.now();
          const errors = await Promise.all(onB.map((h) => waitFor(h.closed, 5000, `onclose of ${h.label} after app server B was killed`)));
          t.diagnostic(`B's clients closed ${Date.now() - started} ms after the kill; first error: ${errors[0] && errors[0].message}`);
          for (const [i, error] of errors.entries()) {
            assert.ok(error instanceof Error, `${onB[i].label}: onclose got an Error (got ${error})`);
            assert.match(error.message, /app server/, `${onB[i].label}: the close error names the reason`);
          }
          await sleep(200);
        } finally {
          ticking = false;
          await ticker;
        }
        assert.equal(tickError, undefined, `Broadcast from a client of A failed: ${tickError}`);
        assert.ok(ticks >= 10, `only ${ticks} ticks were sent`);
        assert.equal(appA.exited, false, 'app server A is still running');

        // Every client of A got every tick, in order, and a broadcast after the kill.
        await call(onA[4], 'Broadcast', 'after', 'the kill');
        for (const h of onA) {
          for (let i = 0; i < ticks; i++) await expectMeasure(h, 'tick', i);
          await expectMeasure(h, 'after', 'the kill');
        }
        await quiet(onA, onA[1]);

        // A new client negotiating with A is served by A and reaches the others.
        const late = await connectApp(appA, { hub, user: 'late' });
        late.label = 'late client of A';
        assert.equal(await call(late, 'GetServerId'), appA.serverId);
        await call(late, 'Broadcast', 'late', 'hello');
        for (const h of [...onA, late]) await expectMeasure(h, 'late', 'hello');
        onA.push(late);
      });

      it('SIGTERM stops app server A within 5 s; its clients are closed with an error', async () => {
        const exit = await appA.stop();
        assert.equal(appA.killedHard, false, 'app server A exited within 5 s of SIGTERM');
        assert.deepEqual(exit, { code: 0, signal: null }, `app server A exit status; log:\n${appA.log()}`);
        const errors = await Promise.all(onA.map((h) => waitFor(h.closed, 5000, `onclose of ${h.label} after app server A stopped`)));
        for (const [i, error] of errors.entries()) {
          assert.ok(error instanceof Error, `${onA[i].label}: onclose got an Error (got ${error})`);
          assert.match(error.message, /app server/, `${onA[i].label}: the close error names the reason`);
        }
      });
    });

    // --- per-sender order ---------------------------------------------------------------
    describe('per-sender order with several server connections', () => {
      const hub = uniqueHub('dm_order');
      const COUNT = 10000;
      const WINDOW = 500;
      const SENDERS = [
        { transport: 'WebSockets', protocol: 'json' },
        { transport: 'WebSockets', protocol: 'messagepack' },
        { transport: 'LongPolling', protocol: 'json' },
      ];
      const RECEIVERS = [
        { transport: 'WebSockets', protocol: 'messagepack' },
        { transport: 'ServerSentEvents', protocol: 'json' },
      ];
      let app;

      before(async () => {
        app = await startAppServer(env.service, { serverId: serverId('order'), hubs: [hub], connections: 5 });
      });
      after(async () => {
        await closeAll();
        if (app) await app.stop();
      });

      it(`${SENDERS.length} senders × ${COUNT} broadcasts arrive complete and in order at every receiver`, async (t) => {
        // Every client checks each sender's sequence as it arrives.
        const track = (label) => {
          const state = { label, next: new Map(), errors: [], total: 0 };
          state.done = new Promise((resolve) => {
            state.handler = (seq, sender) => {
              state.total += 1;
              const expected = state.next.get(sender) || 0;
              if (seq !== expected && state.errors.length < 5) {
                state.errors.push(`from ${sender} got seq ${seq}, expected ${expected}`);
              }
              state.next.set(sender, seq + 1);
              if (state.total === SENDERS.length * COUNT) resolve();
            };
          });
          return state;
        };
        const open = async (label, combo) => {
          const state = track(`${label} (${combo.transport}/${combo.protocol})`);
          const h = await connectApp(app, { hub, user: label, methods: [], handlers: { Measure: state.handler }, ...combo });
          h.label = state.label;
          h.state = state;
          return h;
        };
        // One at a time on a fresh app server: the service pins each new client to the least
        // loaded of the app server's 5 server connections, so every sender (and receiver) has
        // a server connection of its own.
        const senders = [];
        for (const [i, combo] of SENDERS.entries()) senders.push(await open(`s${i}`, combo));
        const receivers = [];
        for (const [i, combo] of RECEIVERS.entries()) receivers.push(await open(`r${i}`, combo));
        const everyone = [...senders, ...receivers];
        const senderIds = senders.map((s) => s.connection.connectionId);

        // A client closed during the run fails the test with its close error.
        const closures = [];
        const closedEarly = Promise.race(
          everyone.map((h) => h.closed.then((error) => {
            closures.push(`${h.label} was closed during the run: ${error ? error.message : 'no error'}`);
            throw new Error(closures.join('; '));
          })),
        );
        closedEarly.catch(() => {}); // after() closes every client
        const explain = async (e) => {
          await sleep(100);
          throw closures.length ? new Error(`${e.message} (${closures.join('; ')})`) : e;
        };

        // Each sender fires send() (no completion) in windows, yielding to the event loop in
        // between so the receivers in this process keep reading. The senders are excluded
        // from their broadcasts: 30,000 messages to a long-polling client in ~2 s would
        // exceed the service's per-connection outbound budget (1 MiB) and rightly close it
        // as a slow consumer.
        const started = Date.now();
        const sending = Promise.all(
          senders.map(async (s, i) => {
            const name = `s${i}`;
            for (let seq = 0; seq < COUNT; seq += WINDOW) {
              const batch = [];
              for (let k = seq; k < Math.min(seq + WINDOW, COUNT); k++) {
                batch.push(s.connection.send('BroadcastExcept', senderIds, k, name));
              }
              await waitFor(Promise.all(batch), 10000, `${s.label}: send() of messages ${seq}..${seq + WINDOW - 1}`);
              await new Promise(setImmediate);
            }
          }),
        );
        await Promise.race([sending, closedEarly]).catch(explain);
        const sent = Date.now();
        const receiving = Promise.all(
          receivers.map((h) =>
            waitFor(h.state.done, 20000, `${h.label} to receive all ${SENDERS.length * COUNT} broadcasts`).catch((e) => {
              const counts = [...h.state.next.entries()].map(([k, v]) => `${k}:${v}`).join(' ');
              throw new Error(`${e.message} (received ${h.state.total}; next seq per sender ${counts}; ${h.state.errors.join('; ')})`);
            }),
          ),
        );
        await Promise.race([receiving, closedEarly]);
        t.diagnostic(`sent in ${sent - started} ms, all received after ${Date.now() - started} ms`);
        for (const h of receivers) {
          assert.deepEqual(h.state.errors, [], `${h.label}: out-of-order or missing messages`);
          for (let i = 0; i < SENDERS.length; i++) assert.equal(h.state.next.get(`s${i}`), COUNT, `${h.label}: all of s${i}`);
          assert.equal(h.state.total, SENDERS.length * COUNT, `${h.label}: no extra messages`);
        }
        // The excluded senders got none of it; a last Broadcast reaches everyone.
        await call(receivers[0], 'Broadcast', 0, 'done');
        await waitFor(
          Promise.all(everyone.map((h) => (async () => {
            while (h.state.next.get('done') !== 1) await sleep(10);
          })())),
          5000,
          'the final Broadcast at every client',
        );
        for (const h of senders) assert.equal(h.state.total, 1, `${h.label}: only the final Broadcast (excluded from the others)`);
      });
    });

    // --- no app server ------------------------------------------------------------------
    describe('no app server connected', () => {
      let defaultService;

      before(async () => {
        const logPath = process.env.E2E_SERVICE_LOG ? `${process.env.E2E_SERVICE_LOG}.mode-default` : undefined;
        defaultService = await startService(['--mode', 'default'], { logPath });
      });
      after(async () => {
        await closeAll();
        if (defaultService) await defaultService.stop();
      });

      for (const combo of VALID) {
        it(`${combo.name}: mode=default refuses the client: "app servers are not connected"`, async (t) => {
          const h = await connect(defaultService, { hub: uniqueHub('dm_none'), start: false, ...combo });
          const error = await startFailure(h.connection, NOT_CONNECTED);
          assert.ok(error instanceof Error, `start() rejected (got ${error})`);
          t.diagnostic(`start() error: ${error.message}`);
          assert.match(error.message, NOT_CONNECTED);
          assert.equal(h.connection.state, signalR.HubConnectionState.Disconnected);
        });

        it(`${combo.name}: mode=auto, token naming an app server (asrs.s.sn) that is not connected: refused the same way`, async () => {
          const h = await connect(env.service, { hub: uniqueHub('dm_gone'), claims: { 'asrs.s.sn': 'gone' }, start: false, ...combo });
          const error = await startFailure(h.connection, NOT_CONNECTED);
          assert.ok(error instanceof Error, `start() rejected (got ${error})`);
          assert.match(error.message, NOT_CONNECTED);
        });
      }

      it('the mode=default service stayed up', () => {
        assert.equal(defaultService.exited, false, `exited: ${JSON.stringify(defaultService.exitInfo)}\n${defaultService.log()}`);
      });
    });
  });
};
