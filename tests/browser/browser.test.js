'use strict';
// Switchyard from a real browser: headless Chromium loads a page from another origin (its own
// port) with the official @microsoft/signalr browser bundle, and connects to services started
// here: one allowing any origin (the default), one allowing only another origin, one allowing
// only the page's origin. Run with `npm test` (see README.md).

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { startService } = require('../e2e/lib/service');
const { Rest, signJwt, API } = require('../e2e/lib/rest');
const { launch } = require('./lib/chromium');
const { startPageServer } = require('./lib/pages');

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
