'use strict';
// Stateful reconnect with the official client (`withStatefulReconnect()`), in serverless and
// Default mode, JSON and MessagePack. Every client connects through a TCP proxy owned by the
// test (lib/proxy.js), which resets the client's WebSocket (both TCP connections, no close
// frame) again and again while numbered messages flow both ways. The client reconnects to
// the same connection and both sides replay what the other had not acknowledged: every
// number must arrive exactly once and in order, groups are kept, and the upstream or the app
// server never sees the connection end.

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { waitFor, sleep, uniqueHub, signalR } = require('./lib/client');
const { startService } = require('./lib/service');
const { startAppServer, stopAppServers } = require('./lib/appserver');
const { Rest } = require('./lib/rest');
const { CutProxy } = require('./lib/proxy');
const {
  NO_CUTS, build, cutDuring, assertCuts, until, range, metric, describeMismatch, assertExactly, Upstream, countedNumbers,
} = require('./lib/stateful');
const { ownedTempDir, removeOwnedDir } = require('./lib/reaper');

/** Numbered messages each way per case. */
const COUNT = Number(process.env.E2E_STATEFUL_COUNT || 10000);
const PROTOCOLS = ['json', 'messagepack'];

describe('stateful reconnect (@microsoft/signalr withStatefulReconnect, TCP resets by a proxy)', () => {
  describe('serverless', () => {
    const upstream = new Upstream();
    const proxy = new CutProxy();
    let service;
    let rest;
    let dir;

    before(async () => {
      await upstream.start();
      await proxy.start();
      dir = ownedTempDir('switchyard-e2e-stateful-');
      const file = path.join(dir, 'switchyard.toml');
      fs.writeFileSync(file, [
        '[stateful_reconnect]',
        'window = "2s"',
        '',
        '[upstream]',
        'timeout = "5s"',
        '',
        '[[upstream.templates]]',
        `url_template = "http://127.0.0.1:${upstream.port}/api/{hub}/{category}/{event}"`,
        '',
      ].join('\n'));
      service = await startService(['--config', file]);
      proxy.target = service.port;
      rest = new Rest(service);
    });

    after(async () => {
      await proxy.stop();
      if (service) await service.stop();
      await upstream.stop();
      if (dir) removeOwnedDir(dir);
    });

    /** A client URL and token of the service, with the URL through the proxy. */
    async function viaProxy(hub, user) {
      const minted = await service.token({ hub, user });
      return { url: minted.url.replace(`:${service.port}/`, `:${proxy.port}/`), token: minted.accessToken };
    }

    it('negotiate offers it only to clients that ask', async () => {
      const hub = uniqueHub('sr');
      const { token } = await viaProxy(hub, 'alice');
      const ask = async (query) => {
        const res = await fetch(`${service.baseUrl}/client/negotiate?hub=${hub}&negotiateVersion=1${query}`, {
          method: 'POST',
          headers: { authorization: `Bearer ${token}` },
        });
        return res.json();
      };
      const asked = await ask('&useStatefulReconnect=true');
      assert.equal(Object.keys(asked)[0], 'useStatefulReconnect', 'first, as ASP.NET writes it');
      assert.equal(asked.useStatefulReconnect, true);
      assert.equal('useStatefulReconnect' in (await ask('')), false);
      assert.equal('useStatefulReconnect' in (await ask('&useStatefulReconnect=false')), false);
    });

    for (const protocol of PROTOCOLS) {
      it(`${protocol}: ${COUNT} numbered messages each way across resets: none lost, duplicated or reordered; group and connection kept`, async (t) => {
        const hub = uniqueHub('sr');
        const { url, token } = await viaProxy(hub, 'alice');
        const { connection, closed } = build(url, { protocol, token });
        const numbers = [];
        const grouped = [];
        connection.on('n', (n) => numbers.push(n));
        connection.on('g', (text) => grouped.push(text));
        let reconnecting = 0;
        connection.onreconnecting(() => {
          reconnecting += 1;
        });
        await waitFor(connection.start(), 10000, 'start()');
        const id = connection.connectionId;
        await rest.addConnectionToGroup(hub, 'room', id);
        const resumedBefore = await metric(service.baseUrl, 'switchyard_stateful_reconnects_total{kind="resumed"}');

        const toClient = (async () => {
          for (const n of range(COUNT)) await rest.sendToConnection(hub, id, 'n', [n]);
        })();
        // Paced to the upstream, which takes one call at a time: a connection's calls waiting
        // for the upstream are bounded (limits.max_pending_bytes_per_connection), and a
        // non-blocking call past that bound is dropped, reset or not.
        const toServer = (async () => {
          for (const n of range(COUNT)) {
            await connection.send('count', n);
            if (n % 100 === 0) await until(() => upstream.of(id, 'count').length >= n - 500, 20000, 'the upstream to catch up');
          }
        })();
        const progress = process.env.E2E_VERBOSE && setInterval(() => {
          process.stderr.write(`# at client ${numbers.length}, at upstream ${upstream.of(id, 'count').length}, cuts ${proxy.cuts}, state ${connection.state}\n`);
        }, 1000);
        const cuts = await cutDuring(proxy, Promise.all([toClient, toServer])).finally(() => clearInterval(progress));
        assertCuts(t, cuts, 'while the messages flowed');

        await until(() => numbers.length >= COUNT, 20000, `${COUNT} messages at the client (have ${numbers.length})`);
        await until(() => upstream.of(id, 'count').length >= COUNT, 20000, `${COUNT} invocations at the upstream`)
          .catch((e) => {
            throw new Error(`${e.message}: ${describeMismatch(countedNumbers(upstream, id), range(COUNT))}`);
          });
        // The fence: a marker each way after the numbers. A connection's messages arrive in
        // order, so a duplicate still on its way would come before the marker.
        const fences = [];
        connection.on('fence', (tag) => fences.push(tag));
        await rest.sendToConnection(hub, id, 'fence', ['to the client']);
        await connection.send('fence', 'to the upstream');
        await until(() => fences.includes('to the client'), 10000, 'the fence at the client');
        await until(() => upstream.of(id, 'fence').length === 1, 10000, 'the fence at the upstream');
        assertExactly(numbers, range(COUNT), 'service → client');
        assertExactly(countedNumbers(upstream, id), range(COUNT), 'client → upstream');

        assert.equal(connection.state, signalR.HubConnectionState.Connected);
        assert.equal(connection.connectionId, id, 'the same connection');
        assert.equal(reconnecting, 0, 'no new connection was made');
        await rest.sendToGroup(hub, 'room', 'g', ['after the resets']);
        await until(() => grouped.length === 1, 5000, 'the group message');
        assert.equal(upstream.of(id, 'connected').length, 1);
        assert.equal(upstream.of(id, 'disconnected').length, 0, 'the upstream saw no disconnect');
        const resumed = await metric(service.baseUrl, 'switchyard_stateful_reconnects_total{kind="resumed"}');
        if (!NO_CUTS) assert.ok(resumed - resumedBefore >= 1, `resumed counter moved by ${resumed - resumedBefore}`);
        process.stderr.write(`# serverless ${protocol}: ${cuts} resets, ${resumed - resumedBefore} resumed\n`);

        await waitFor(connection.stop(), 5000, 'stop()');
        await closed;
        await until(() => upstream.of(id, 'disconnected').length === 1, 5000, 'disconnected after stop()');
      });
    }

    it('a client that comes back after the window finds its connection gone and is told so', async () => {
      const hub = uniqueHub('sr');
      const { url, token } = await viaProxy(hub, 'bob');
      const { connection, closed } = build(url, { protocol: 'json', token });
      await waitFor(connection.start(), 10000, 'start()');
      const id = connection.connectionId;
      const windowBefore = await metric(service.baseUrl, 'switchyard_stateful_reconnects_total{kind="window"}');
      await sleep(proxy.settleMs);
      proxy.delayNew(3500); // the window is 2 s
      assert.equal(proxy.cut(), 1);
      const error = await waitFor(closed, 10000, 'the client to give up');
      assert.ok(error instanceof Error);
      await until(() => upstream.of(id, 'disconnected').length === 1, 5000, 'disconnected at the upstream');
      const expired = await metric(service.baseUrl, 'switchyard_stateful_reconnects_total{kind="window"}');
      assert.equal(expired - windowBefore, 1);
    });

    it('a client that did not ask gets no stateful reconnect: a reset ends its connection', async () => {
      const hub = uniqueHub('sr');
      const { url, token } = await viaProxy(hub, 'carol');
      const { connection, closed } = build(url, { protocol: 'json', token, stateful: false });
      await waitFor(connection.start(), 10000, 'start()');
      const id = connection.connectionId;
      await sleep(proxy.settleMs);
      assert.equal(proxy.cut(), 1);
      await waitFor(closed, 5000, 'the close');
      await until(() => upstream.of(id, 'disconnected').length === 1, 5000, 'disconnected at the upstream');
    });
  });

  describe('Default mode (switchyard-bench app-server)', () => {
    const proxy = new CutProxy();
    let service;

    before(async () => {
      await proxy.start();
      // Everything reaches the service through the proxy (the connection string names it),
      // but only client WebSockets are ever cut.
      service = await startService(['--mode', 'default', '--public-endpoint', proxy.baseUrl]);
      proxy.target = service.port;
    });

    after(async () => {
      await stopAppServers();
      await proxy.stop();
      if (service) await service.stop();
    });

    for (const protocol of PROTOCOLS) {
      it(`${protocol}: ${COUNT} echoes and streams both ways across resets: none lost, duplicated or reordered; group and connection kept at the app server`, async (t) => {
        const hub = uniqueHub('srd');
        const app = await startAppServer(service, {
          serverId: `e2e-sr-${protocol}-${process.pid}`,
          hubs: [hub],
          connections: 2,
          extraArgs: ['--allow-stateful-reconnects'],
        });
        const { connection, closed } = build(app.hubUrl(hub, 'dave'), { protocol });
        const numbers = [];
        const other = [];
        const uploaded = [];
        connection.on('Measure', (n, payload) => (typeof n === 'number' ? numbers.push(n) : other.push([n, payload])));
        connection.on('Uploaded', (summary) => uploaded.push(summary));
        await waitFor(connection.start(), 10000, 'start()');
        const id = connection.connectionId;
        await waitFor(connection.invoke('JoinGroup', 'room'), 5000, 'JoinGroup');

        // Paced by the echoes (at most 1,000 in flight), so the stream lasts long enough to
        // be cut many times; the resets go on until every echo is in.
        const cuts = await cutDuring(proxy, (async () => {
          for (const n of range(COUNT)) {
            await connection.send('Echo', n, 'x');
            if (n % 100 === 0) await until(() => numbers.length >= n - 1000, 20000, `echoes up to ${n - 1000}`);
          }
          await until(() => numbers.length >= COUNT, 30000, `${COUNT} echoes (have ${numbers.length})`);
        })());
        assertCuts(t, cuts, 'during the echoes');
        // The fence: one more echo, of a marker; a duplicate still on its way would come first.
        await connection.send('Echo', 'fence', 'x');
        await until(() => other.some(([n]) => n === 'fence'), 10000, 'the fence echo');
        other.splice(other.findIndex(([n]) => n === 'fence'), 1);
        assertExactly(numbers, range(COUNT), 'client → app server → client');

        assert.equal(connection.state, signalR.HubConnectionState.Connected);
        // The app server still holds the connection under its first id: it saw no
        // disconnect and no new connect.
        assert.equal(await waitFor(connection.invoke('GetConnectionId'), 5000, 'GetConnectionId'), id);
        await waitFor(connection.invoke('SendToGroup', 'room', 'group', 'after'), 5000, 'SendToGroup');
        await until(() => other.length === 1, 5000, 'the group message');
        assert.deepEqual(other[0], ['group', 'after']);

        // Streams both ways across resets: a server stream and an upload at once.
        const items = 3000;
        const streamed = [];
        const streamDone = new Promise((resolve, reject) => {
          connection.stream('Counter', items, 1).subscribe({
            next: (item) => streamed.push(item),
            complete: resolve,
            error: reject,
          });
        });
        const subject = new signalR.Subject();
        await connection.send('Upload', 'across resets', subject);
        // How far each stream was at every reset: the resets must fall inside both streams,
        // not only before the first item or after the last.
        let sent = 0;
        const midStream = { down: 0, up: 0 };
        const streamCuts = await cutDuring(proxy, (async () => {
          const cutsBefore = proxy.cuts;
          for (let v = 0; v < items; v += 1) {
            subject.next(v);
            sent = v + 1;
            if (v % 50 === 49) await sleep(2);
            // Half way, the upload waits for a reset: it is short enough to slip between two.
            if (sent === items / 2 && !NO_CUTS) {
              await until(() => proxy.cuts > cutsBefore, 10000, 'a reset in the middle of the upload');
            }
          }
          subject.complete();
          await waitFor(streamDone, 60000, 'the Counter stream');
          await until(() => uploaded.length === 1, 20000, 'the upload summary');
        })(), () => {
          if (streamed.length > 0 && streamed.length < items) midStream.down += 1;
          if (sent > 0 && sent < items) midStream.up += 1;
        });
        assertCuts(t, streamCuts, 'while the streams ran');
        assertCuts(t, midStream.down, 'inside the server stream (after its first item, before its last)', 1);
        assertCuts(t, midStream.up, 'inside the upload (after its first item, before its last)', 1);
        assert.deepEqual(streamed, Array.from({ length: items }, (_, i) => i), 'server stream in order, once each');
        assert.deepEqual(uploaded[0], {
          tag: 'across resets', count: items, sum: (items * (items - 1)) / 2, inOrder: true, first: 0, last: items - 1,
        });
        process.stderr.write(`# default ${protocol}: ${cuts} resets during echoes, ${streamCuts} during streams `
          + `(${midStream.down} inside the server stream, ${midStream.up} inside the upload)\n`);
        await waitFor(connection.stop(), 5000, 'stop()');
        await closed;
        await app.stop();
      });
    }

    it('an app server that does not allow it: negotiate does not offer it', async () => {
      const hub = uniqueHub('srd');
      const app = await startAppServer(service, { serverId: `e2e-sr-off-${process.pid}`, hubs: [hub], connections: 1 });
      const { connection, closed } = build(app.hubUrl(hub, 'erin'), { protocol: 'json' });
      await waitFor(connection.start(), 10000, 'start()');
      assert.equal(connection.connection.features.reconnect, false, 'the client did not get stateful reconnect');
      await sleep(proxy.settleMs);
      assert.equal(proxy.cut(), 1);
      await waitFor(closed, 5000, 'the close after a reset');
      await app.stop();
    });
  });
});
