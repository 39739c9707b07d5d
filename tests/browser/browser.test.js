'use strict';
// Switchyard from a real browser: headless Chromium loads a page from another origin (its own
// port) with the official @microsoft/signalr browser bundle, and connects to services started
// here: one allowing any origin (the default), one allowing only another origin, one allowing
// only the page's origin. Run with `npm test` (see README.md).

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { startService } = require('../e2e/lib/service');
const { Rest, signJwt, API } = require('../e2e/lib/rest');
const { startAppServer, stopAppServers } = require('../e2e/lib/appserver');
const { CutProxy } = require('../e2e/lib/proxy');
const { cutDuring, until, range, assertExactly, Upstream, countedNumbers } = require('../e2e/lib/stateful');
const { launch } = require('./lib/chromium');
const fs = require('node:fs');
const path = require('node:path');
const { startPageServer } = require('./lib/pages');
const { ownedTempDir, removeOwnedDir } = require('../e2e/lib/reaper');

/** Every transport with JSON, and MessagePack where the JS client supports it over HTTP too. */
const CONNECTIONS = [
  { transport: 'WebSockets', protocol: 'json' },
  { transport: 'ServerSentEvents', protocol: 'json' },
  { transport: 'LongPolling', protocol: 'json' },
  { transport: 'WebSockets', protocol: 'messagepack' },
  { transport: 'LongPolling', protocol: 'messagepack' },
];
const WAIT_MS = 10000;

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

describe('switchyard from a page on another origin (headless Chromium, @microsoft/signalr)', () => {
  let browser;
  let pages;
  let page;
  const consoleLines = [];
  const services = [];

  async function serve(args = []) {
    const service = await startService(args);
    services.push(service);
    return service;
  }

  const connect = (name, options) =>
    page.evaluate(([n, o]) => window.harness.connect(n, o), [name, options]);
  const received = (name) => page.evaluate((n) => window.harness.received(n), name);
  const pageRest = (method, url, token, body) =>
    page.evaluate(([m, u, t, b]) => window.harness.rest(m, u, t, b), [method, url, token, body]);

  /** Waits until connection `name` has received `args` as a newMessage. */
  async function waitForMessage(name, args) {
    const deadline = Date.now() + WAIT_MS;
    for (;;) {
      const inbox = await received(name);
      if (inbox.some((got) => JSON.stringify(got) === JSON.stringify(args))) return;
      if (Date.now() > deadline) {
        assert.fail(`${name} did not receive ${JSON.stringify(args)}; it has ${JSON.stringify(inbox)}`);
      }
      await sleep(25);
    }
  }

  /** `switchyard_client_connections{transport=…}` from the service's metrics. */
  async function connectionsByTransport(service) {
    const text = await (await fetch(`${service.baseUrl}/metrics`)).text();
    const counts = {};
    for (const m of text.matchAll(/^switchyard_client_connections\{transport="(\w+)"\} (\d+)/gm)) {
      counts[m[1]] = Number(m[2]);
    }
    return counts;
  }

  before(async () => {
    pages = await startPageServer();
    browser = await launch();
    page = await browser.newPage();
    page.on('console', (message) => consoleLines.push(message.text()));
    await page.goto(`${pages.origin}/`);
    await page.waitForFunction(
      () => window.harness && window.signalR && window.signalR.protocols && window.signalR.protocols.msgpack,
    );
  });

  after(async () => {
    if (page) await page.evaluate(() => window.harness.stopAll()).catch(() => {});
    if (browser) await browser.close();
    if (pages) await pages.close();
    await Promise.all(services.map((s) => s.stop()));
    for (const service of services) {
      assert.equal(service.killedHard, undefined, `a service did not stop on SIGTERM:\n${service.log()}`);
    }
  });

  describe('any origin allowed (the default)', () => {
    let service;
    let rest;
    const hub = 'browser';

    before(async () => {
      service = await serve();
      rest = new Rest(service);
    });

    it('the page is on another origin than the service', async () => {
      const origin = await page.evaluate(() => location.origin);
      assert.equal(origin, pages.origin);
      assert.notEqual(origin, service.baseUrl);
    });

    it('connects over WebSockets, SSE and long polling (JSON, and MessagePack on WS and LP) and receives a REST broadcast', async () => {
      const { url, accessToken } = await service.token({ hub, user: 'page-user' });
      const results = await Promise.all(
        CONNECTIONS.map((c) =>
          connect(`any-${c.transport}-${c.protocol}`, { url, token: accessToken, ...c }),
        ),
      );
      results.forEach((result, i) => {
        const c = CONNECTIONS[i];
        assert.equal(result.error, undefined, `${c.transport}/${c.protocol}: ${result.error}\n${consoleLines.join('\n')}`);
        assert.equal(result.state, 'Connected', `${c.transport}/${c.protocol}`);
        assert.ok(result.connectionId, `${c.transport}/${c.protocol} has a connection id`);
      });
      // The service counts the transports the browser really used.
      assert.deepEqual(await connectionsByTransport(service), {
        WebSockets: 2,
        ServerSentEvents: 1,
        LongPolling: 2,
      });

      await rest.broadcast(hub, 'newMessage', ['from REST', 42, { nested: [true, null] }]);
      for (const c of CONNECTIONS) {
        await waitForMessage(`any-${c.transport}-${c.protocol}`, ['from REST', 42, { nested: [true, null] }]);
      }
    });

    it('the page calls the REST API and health itself (preflighted, credentials included)', async () => {
      const path = `/api/hubs/${hub}/:send`;
      const token = signJwt(service.accessKey, { aud: `${service.baseUrl}${path}` });
      const sent = await pageRest('POST', `${service.baseUrl}${path}?${API}`, token, {
        target: 'newMessage',
        arguments: ['from the page', 7],
      });
      assert.equal(sent.status, 202, JSON.stringify(sent));
      for (const c of CONNECTIONS) {
        await waitForMessage(`any-${c.transport}-${c.protocol}`, ['from the page', 7]);
      }
      const health = await page.evaluate(async (u) => {
        const r = await fetch(u, { credentials: 'include' });
        return r.status;
      }, `${service.baseUrl}/api/health`);
      assert.equal(health, 200);
      // An error answer is readable by the page too.
      const unauthorized = await pageRest('POST', `${service.baseUrl}${path}?${API}`, 'not-a-token', {
        target: 'newMessage',
        arguments: [],
      });
      assert.equal(unauthorized.status, 401, JSON.stringify(unauthorized));
    });
  });

  describe('only another origin allowed (--set cors.allowed_origins=…)', () => {
    let service;
    const hub = 'blocked';

    before(async () => {
      service = await serve(['--set', 'cors.allowed_origins=https://app.example,https://other.example']);
    });

    it('every transport fails: negotiate is blocked by CORS', async () => {
      const { url, accessToken } = await service.token({ hub });
      const before = consoleLines.length;
      for (const c of CONNECTIONS) {
        const result = await connect(`blocked-${c.transport}-${c.protocol}`, { url, token: accessToken, ...c });
        assert.notEqual(result.state, 'Connected', `${c.transport}/${c.protocol} should not connect`);
        assert.match(result.error || '', /negotiat/i, `${c.transport}/${c.protocol}: ${result.error}`);
        assert.match(result.error, /Failed to fetch/, `${c.transport}/${c.protocol}: ${result.error}`);
      }
      // Chromium says why on the console.
      const cors = consoleLines.slice(before).filter((line) => /CORS policy/.test(line));
      assert.ok(cors.length > 0, `no CORS message on the console:\n${consoleLines.slice(before).join('\n')}`);
      assert.deepEqual(await connectionsByTransport(service), {});
    });

    it('a WebSocket without negotiate is refused', async () => {
      const { url, accessToken } = await service.token({ hub });
      const result = await connect('blocked-skip-negotiation', {
        url,
        token: accessToken,
        transport: 'WebSockets',
        skipNegotiation: true,
      });
      assert.notEqual(result.state, 'Connected');
      assert.match(result.error || '', /WebSocket/, result.error);
      assert.deepEqual(await connectionsByTransport(service), {});
    });

    it('the page cannot call the REST API', async () => {
      const path = `/api/hubs/${hub}/:send`;
      const token = signJwt(service.accessKey, { aud: `${service.baseUrl}${path}` });
      const sent = await pageRest('POST', `${service.baseUrl}${path}?${API}`, token, {
        target: 'newMessage',
        arguments: [],
      });
      assert.equal(sent.status, undefined, JSON.stringify(sent));
      assert.match(sent.error, /Failed to fetch/);
    });
  });

  describe('stateful reconnect: the page\'s WebSockets reset by a TCP proxy under traffic', () => {
    const COUNT = 10000;
    const upstream = new Upstream();
    // One proxy per service: the browser reuses keep-alive sockets, and a proxied socket
    // stays with the service it was opened to.
    const proxies = new Map();
    let dir;
    let serverless;
    let defaultMode;
    const status = (name) => page.evaluate((n) => window.harness.status(n), name);
    const numbersOf = (name) => page.evaluate((n) => window.harness.numbersOf(n), name);
    const sendNumbers = (name, method, first, last, extra) =>
      page.evaluate(([n, m, f, l, e]) => window.harness.sendNumbers(n, m, f, l, e), [name, method, first, last, extra]);

    before(async () => {
      await upstream.start();
      dir = ownedTempDir('switchyard-browser-stateful-');
      const file = path.join(dir, 'switchyard.toml');
      fs.writeFileSync(file, [
        '[[upstream.templates]]',
        `url_template = "http://127.0.0.1:${upstream.port}/api/{hub}/{category}/{event}"`,
        '',
      ].join('\n'));
      // One serverless service (with an upstream) and one in Default mode, both reached
      // through the proxy: the page's sockets go through it, REST and app servers do not.
      serverless = await serve(['--config', file]);
      defaultMode = await serve(['--mode', 'default']);
      for (const service of [serverless, defaultMode]) {
        // Sockets are cut only once open for 250 ms: the official client makes a single
        // attempt to come back and replays its buffer over it, and a page under load can
        // take tens of milliseconds for that; a cut in the middle ends the client (by its
        // design), which is not what this test is about.
        const proxy = await new CutProxy({ settleMs: 250 }).start();
        proxy.target = service.port;
        proxies.set(service, proxy);
      }
    });

    after(async () => {
      await stopAppServers();
      for (const proxy of proxies.values()) await proxy.stop();
      await upstream.stop();
      if (dir) removeOwnedDir(dir);
    });

    const viaProxy = (service, url) => url.replace(`:${service.port}/`, `:${proxies.get(service).port}/`);

    for (const protocol of ['json', 'messagepack']) {
      it(`serverless, ${protocol}: ${COUNT} numbered messages each way, none lost, duplicated or reordered, same connection`, async () => {
        const hub = `sr${protocol}`;
        const name = `sr-serverless-${protocol}`;
        const { url, accessToken } = await serverless.token({ hub, user: 'page-user' });
        const started = await connect(name, {
          url: viaProxy(serverless, url), token: accessToken, transport: 'WebSockets', protocol, stateful: true,
        });
        assert.equal(started.error, undefined, started.error);
        assert.equal((await status(name)).stateful, true, 'negotiated stateful reconnect');
        const id = started.connectionId;
        const rest = new Rest(serverless);
        const cuts = await cutDuring(proxies.get(serverless), (async () => {
          // Paced by the upstream (one call at a time; calls waiting for it are bounded).
          const sent = (async () => {
            for (let first = 1; first <= COUNT; first += 100) {
              const refused = await sendNumbers(name, 'count', first, first + 99, []);
              assert.equal(refused, null, `every send was accepted; the page logged:\n${consoleLines.slice(-20).join('\n')}`);
              await until(() => upstream.of(id, 'count').length >= first - 300, 20000, 'the upstream to catch up');
            }
          })();
          for (const n of range(COUNT)) await rest.sendToConnection(hub, id, 'n', [n]);
          await sent;
          await until(() => upstream.of(id, 'count').length >= COUNT, 30000, 'every count at the upstream');
        })());
        await until(async () => (await status(name)).count >= COUNT, 20000, 'every message in the page');
        await sleep(300);
        assertExactly(await numbersOf(name), range(COUNT), 'service → page');
        assertExactly(countedNumbers(upstream, id), range(COUNT), 'page → upstream');
        const after = await status(name);
        assert.deepEqual([after.state, after.connectionId, after.reconnecting], ['Connected', id, 0]);
        assert.equal(upstream.of(id, 'disconnected').length, 0, 'the upstream saw no disconnect');
        assert.ok(cuts >= 3, `only ${cuts} resets`);
        process.stderr.write(`# browser serverless ${protocol}: ${cuts} resets\n`);
        await page.evaluate(() => window.harness.stopAll());
      });

      it(`Default mode, ${protocol}: ${COUNT} echoes through the app server across resets, none lost, duplicated or reordered`, async () => {
        const hub = `srd${protocol}`;
        const name = `sr-default-${protocol}`;
        const app = await startAppServer(defaultMode, {
          serverId: `browser-sr-${protocol}-${process.pid}`,
          hubs: [hub],
          connections: 1,
          extraArgs: ['--allow-stateful-reconnects'],
        });
        // The redirect the app server's negotiate gives, followed here (the bench app server
        // answers no CORS preflight); the page then negotiates with the service as usual.
        const redirect = await (await fetch(`${app.baseUrl}/${hub}/negotiate?user=page-user`, { method: 'POST' })).json();
        const started = await connect(name, {
          url: viaProxy(defaultMode, redirect.url), token: redirect.accessToken, transport: 'WebSockets', protocol, stateful: true,
        });
        assert.equal(started.error, undefined, started.error);
        assert.equal((await status(name)).stateful, true, 'negotiated stateful reconnect');
        const cuts = await cutDuring(proxies.get(defaultMode), (async () => {
          const refused = await sendNumbers(name, 'Echo', 1, COUNT, ['x']);
          assert.equal(refused, null, `every send was accepted; the page logged:\n${consoleLines.slice(-20).join('\n')}`);
          await until(async () => (await status(name)).count >= COUNT, 30000, 'every echo in the page');
        })());
        await sleep(300);
        assertExactly(await numbersOf(name), range(COUNT), 'page → app server → page');
        const after = await status(name);
        assert.deepEqual([after.state, after.connectionId, after.reconnecting], ['Connected', started.connectionId, 0]);
        assert.ok(cuts >= 3, `only ${cuts} resets`);
        process.stderr.write(`# browser default ${protocol}: ${cuts} resets\n`);
        await page.evaluate(() => window.harness.stopAll());
        await app.stop();
      });
    }
  });

  describe("only the page's origin allowed (--cors-origin)", () => {
    it('connects and receives a broadcast', async () => {
      const service = await serve(['--cors-origin', 'https://app.example', '--cors-origin', pages.origin]);
      const hub = 'listed';
      const { url, accessToken } = await service.token({ hub });
      for (const c of [CONNECTIONS[0], CONNECTIONS[1], CONNECTIONS[4]]) {
        const result = await connect(`listed-${c.transport}-${c.protocol}`, { url, token: accessToken, ...c });
        assert.equal(result.error, undefined, `${c.transport}/${c.protocol}: ${result.error}`);
      }
      await new Rest(service).broadcast(hub, 'newMessage', ['listed']);
      for (const c of [CONNECTIONS[0], CONNECTIONS[1], CONNECTIONS[4]]) {
        await waitForMessage(`listed-${c.transport}-${c.protocol}`, ['listed']);
      }
    });
  });
});
