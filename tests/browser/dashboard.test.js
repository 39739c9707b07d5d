'use strict';
// The dashboard in headless Chromium: a service with an access key, real clients of the
// official @microsoft/signalr client in Node over every transport (JSON and MessagePack), an
// app server, groups and a REST broadcast; the page, opened with `switchyard token --admin`,
// must show those numbers, stream a live trace with a message the test sends, and close a
// client with a reason the client receives. Without a token the page and the admin hub refuse.
// Screenshots go to $DASHBOARD_SCREENSHOTS (default tests/browser/output/).

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { execFile } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const signalR = require('@microsoft/signalr');
const { MessagePackHubProtocol } = require('@microsoft/signalr-protocol-msgpack');
const WebSocket = require('ws');
const { startService, childEnv } = require('../e2e/lib/service');
const { Rest, signJwt } = require('../e2e/lib/rest');
const { startAppServer, stopAppServers } = require('../e2e/lib/appserver');
const { launch } = require('./lib/chromium');

const KEY = 'dashboard-test-access-key-of-at-least-32-characters';
const HUB = 'chat';
const WAIT_MS = 15000;
const OUTPUT = process.env.DASHBOARD_SCREENSHOTS || path.join(__dirname, 'output');

/** The clients the test makes: 3 WebSockets (one MessagePack), 2 SSE, 1 long polling. */
const CLIENTS = [
  { user: 'ada', transport: 'WebSockets', protocol: 'json' },
  { user: 'bob', transport: 'WebSockets', protocol: 'json' },
  { user: 'cy', transport: 'WebSockets', protocol: 'messagepack' },
  { user: 'dee', transport: 'ServerSentEvents', protocol: 'json' },
  { user: 'eve', transport: 'ServerSentEvents', protocol: 'json' },
  { user: 'fay', transport: 'LongPolling', protocol: 'json' },
];
const BROADCASTS = 5;

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function until(what, check, timeout = WAIT_MS) {
  const deadline = Date.now() + timeout;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

/** `switchyard token --admin --json` against the service: the address that opens the page. */
function adminUrl(service) {
  return new Promise((resolve, reject) => {
    execFile(
      service.bin,
      ['token', '--admin', '--json', '--access-key', KEY, '--public-endpoint', service.baseUrl],
      { env: childEnv(), timeout: 10000 },
      (error, stdout, stderr) => {
        if (error) return reject(new Error(`switchyard token --admin failed: ${error.message}\n${stderr}`));
        resolve(JSON.parse(stdout));
      },
    );
  });
}

/** The status the admin hub answers a WebSocket upgrade with (101 when it opens). */
function hubStatus(url) {
  return new Promise((resolve) => {
    const socket = new WebSocket(url);
    socket.on('open', () => {
      socket.close();
      resolve(101);
    });
    socket.on('unexpected-response', (request, response) => {
      resolve(response.statusCode);
      request.destroy();
    });
    socket.on('error', () => {});
  });
}

describe('the dashboard (headless Chromium)', () => {
  let service;
  let rest;
  let browser;
  let page;
  const clients = [];
  const consoleLines = [];

  async function shot(name) {
    fs.mkdirSync(OUTPUT, { recursive: true });
    const file = path.join(OUTPUT, `dashboard-${name}.png`);
    await page.screenshot({ path: file, fullPage: true });
    return file;
  }

  const text = (selector) => page.locator(selector).first().textContent();
  const hubCell = (field) => text(`#hubs tbody tr[data-hub="${HUB}"] td.${field}`);

  before(async () => {
    service = await startService(['--access-key', KEY]);
    // The printed connection string hides a configured key.
    service.accessKey = KEY;
    service.connectionString = service.connectionString.replace('<access_key>', KEY);
    rest = new Rest(service);
    for (const c of CLIENTS) {
      const token = signJwt(KEY, { aud: `${service.baseUrl}/client/?hub=${HUB}`, 'asrs.s.uid': c.user });
      const builder = new signalR.HubConnectionBuilder()
        .withUrl(`${service.baseUrl}/client/?hub=${HUB}`, {
          accessTokenFactory: () => token,
          transport: signalR.HttpTransportType[c.transport],
        })
        .configureLogging(signalR.LogLevel.None);
      if (c.protocol === 'messagepack') builder.withHubProtocol(new MessagePackHubProtocol());
      const connection = builder.build();
      const client = { ...c, connection, received: [], closedWith: undefined };
      connection.on('news', (...args) => client.received.push(args));
      connection.on('traced', (...args) => client.received.push(args));
      connection.onclose((error) => {
        client.closedWith = error ? error.message : 'no error';
      });
      await connection.start();
      client.id = connection.connectionId;
      clients.push(client);
    }
    // Two groups.
    await rest.addConnectionToGroup(HUB, 'red', clients[0].id);
    await rest.addConnectionToGroup(HUB, 'red', clients[1].id);
    await rest.addConnectionToGroup(HUB, 'blue', clients[2].id);
    for (let i = 0; i < BROADCASTS; i++) await rest.broadcast(HUB, 'news', [i]);
    await until('every client got every broadcast', () => clients.every((c) => c.received.length === BROADCASTS));
    // An app server (Default mode) on another hub, with two connections.
    await startAppServer(service, { serverId: 'app-one', hubs: ['bench'], connections: 2 });

    browser = await launch();
    page = await browser.newPage({ viewport: { width: 1500, height: 1100 } });
    // What the browser's console shows as an error: a failed load (such as a 404 for
    // /favicon.ico, whose text says no "error"), a script error, a console.error call.
    page.on('console', (message) => {
      if (message.type() === 'error' || /error/i.test(message.text())) consoleLines.push(`${message.type()}: ${message.text()}`);
    });
    page.on('pageerror', (error) => consoleLines.push(`pageerror: ${error.message}`));
    page.on('response', (response) => {
      if (response.status() >= 400) consoleLines.push(`${response.status()}: ${response.url()}`);
    });
  });

  after(async () => {
    for (const c of clients) await c.connection.stop().catch(() => {});
    await stopAppServers();
    if (browser) await browser.close();
    if (service) await service.stop();
  });

  it('asks for a token without one, refuses the admin hub without a good one, and takes one in its form', async () => {
    const refused = await browser.newPage();
    const refusedErrors = [];
    refused.on('console', (message) => {
      if (message.type() === 'error') refusedErrors.push(message.text());
    });
    const response = await refused.goto(`${service.baseUrl}/dashboard`);
    // The page holds no data: it is served, and asks for a token before it connects.
    assert.equal(response.status(), 200);
    await until('the sign-in form', async () => refused.locator('#sign-in').isVisible());
    assert.match(await refused.locator('#refusal').textContent(), /operators/);
    fs.mkdirSync(OUTPUT, { recursive: true });
    await refused.screenshot({ path: path.join(OUTPUT, 'dashboard-refused.png') });
    // Nothing was tried without a token, so nothing failed. This is the first page the
    // browser opens: Chromium does not ask again for an icon that failed once.
    assert.deepEqual(refusedErrors, [], 'the page asking for a token logged no error');
    // A wrong token in the form is refused by the admin hub, and the page says so.
    await refused.fill('#sign-in-token', 'not-a-token');
    await refused.click('#sign-in-form button');
    await until('the refusal of a wrong token', async () => /refused the token/.test(await refused.locator('#refusal').textContent()));
    // A good one in the form opens it; it never appears in the address.
    const { accessToken } = await adminUrl(service);
    await refused.fill('#sign-in-token', accessToken);
    await refused.click('#sign-in-form button');
    await until('the link to the admin hub', async () => (await refused.locator('#link-state').textContent()) === 'connected');
    assert.ok(!refused.url().includes(accessToken), 'the token is not in the address');
    await refused.close();
    const hubUrl = `${service.baseUrl.replace('http', 'ws')}/dashboard/hub`;
    assert.equal(await hubStatus(hubUrl), 401);
    const clientToken = signJwt(KEY, { aud: `${service.baseUrl}/client/?hub=${HUB}`, role: 'admin' });
    assert.equal(await hubStatus(`${hubUrl}?access_token=${clientToken}`), 401);
    assert.equal(await hubStatus(`${hubUrl}?access_token=${accessToken}`), 101);
  });

  it('ends a session when its token expires and asks for a fresh one', async () => {
    const short = signJwt(KEY, { aud: `${service.baseUrl}/dashboard`, role: 'admin' }, { lifetimeSeconds: 3 });
    const expiring = await browser.newPage();
    await expiring.goto(`${service.baseUrl}/dashboard#access_token=${short}`);
    await until('the link to the admin hub', async () => (await expiring.locator('#link-state').textContent()) === 'connected');
    await until('the sign-in form after expiry', async () => expiring.locator('#sign-in').isVisible(), 15000);
    assert.match(await expiring.locator('#refusal').textContent(), /expired/);
    assert.equal(await expiring.locator('#link-state').textContent(), 'disconnected');
    await expiring.close();
  });

  it('shows the clients, transports, protocols, groups, users, app servers and messages the test made', async () => {
    const { url } = await adminUrl(service);
    await page.goto(url);
    // The token follows `#` (never sent to the service) and is taken out of the address bar.
    assert.match(url, /\/dashboard#access_token=/);
    await until('the address without the token', async () => !(await page.evaluate(() => location.hash + location.search)));
    await until('the link to the admin hub', async () => (await text('#link-state')) === 'connected');
    await until('the hub row with six connections', async () => (await hubCell('connections').catch(() => '')) === '6');
    assert.equal(await hubCell('websockets'), '3');
    assert.equal(await hubCell('sse'), '2');
    assert.equal(await hubCell('longpolling'), '1');
    assert.equal(await hubCell('json'), '5');
    assert.equal(await hubCell('messagepack'), '1');
    assert.equal(await hubCell('groups'), '2');
    assert.equal(await hubCell('users'), '6');
    const outbound = await page.locator(`#hubs tbody tr[data-hub="${HUB}"]`).getAttribute('data-messages-out');
    assert.equal(Number(outbound), CLIENTS.length * BROADCASTS, 'every broadcast delivery is counted');
    await until('the app server', async () => (await page.locator('#hubs tbody tr[data-hub="bench"] td.servers').textContent().catch(() => '')) === '1');
    assert.equal(await text('#node-clients'), '6');

    // The connection list, then filtered.
    await until('six rows', async () => (await page.locator('#connections tbody tr').count()) === 6);
    const row = page.locator(`#connections tbody tr[data-connection-id="${clients[3].id}"]`);
    const cells = await row.locator('td').allTextContents();
    assert.deepEqual(cells.slice(0, 5), [HUB, clients[3].id, 'dee', 'ServerSentEvents', 'json']);
    assert.equal(cells[5], '127.0.0.1');
    await page.fill('#filter-search', 'fay');
    await until('one row for fay', async () => (await page.locator('#connections tbody tr').count()) === 1);
    assert.equal(await page.locator('#connections tbody tr td.id').textContent(), clients[5].id);
    await page.fill('#filter-search', '');
    await page.selectOption('#filter-transport', 'WebSockets');
    await until('three WebSockets rows', async () => (await page.locator('#connections tbody tr').count()) === 3);
    await page.selectOption('#filter-transport', '');
    await until('six rows again', async () => (await page.locator('#connections tbody tr').count()) === 6);

    // The page declares an icon that loads, so the browser does not ask for /favicon.ico.
    const icon = await page.evaluate(async () => {
      const link = document.querySelector('link[rel~="icon"]');
      if (!link) return 'no icon declared';
      const response = await fetch(link.href);
      return { status: response.status, type: response.headers.get('content-type') };
    });
    assert.deepEqual(icon, { status: 200, type: 'image/svg+xml' });

    // The charts have points (uPlot draws into canvases).
    assert.ok((await page.locator('#chart-messages canvas').count()) > 0);
    await sleep(2500); // a few chart points
    console.log('screenshot:', await shot('overview'));
  });

  it('streams a live trace with a message the test sends, and downloads it as JSON lines', async () => {
    await page.selectOption('#trace-hub', HUB);
    await page.fill('#trace-minutes', '5');
    await page.click('#trace-start');
    await until('the trace to start', async () => (await text('#trace-state')).startsWith(`tracing ${HUB}`));
    await rest.sendToUser(HUB, 'ada', 'traced', ['marker-4711']);
    await until('ada to get it', () => clients[0].received.some((args) => args[0] === 'marker-4711'));
    await until('the message in the trace', async () => {
      const methods = await page.locator('#trace tbody td.method').allTextContents();
      return methods.includes('traced');
    });
    const traced = page.locator('#trace tbody tr', { hasText: 'traced' }).first();
    const cells = await traced.locator('td').allTextContents();
    assert.equal(cells[1], 'message');
    assert.equal(cells[3], 'out');
    assert.equal(cells[4], 'user:ada');
    console.log('screenshot:', await shot('trace'));

    const [download] = await Promise.all([page.waitForEvent('download'), page.click('#trace-download')]);
    const file = path.join(OUTPUT, 'trace.jsonl');
    await download.saveAs(file);
    const events = fs.readFileSync(file, 'utf8').trim().split('\n').map((line) => JSON.parse(line));
    const event = events.find((e) => e.target === 'traced');
    assert.ok(event, `the download has the message: ${JSON.stringify(events)}`);
    assert.equal(event.hub, HUB);
    assert.ok(event.node, `every event names its node: ${JSON.stringify(event)}`);
    assert.equal(event.preview, undefined, 'payloads stay out of the trace unless enabled');
  });

  it('closes a client from the page, and the client gets the reason', async () => {
    const victim = clients[4];
    await page.fill('#close-reason', 'Maintenance window, please reconnect later.');
    await page.click(`#connections tbody tr[data-connection-id="${victim.id}"] button.close`);
    await until('the client to be closed', () => victim.closedWith !== undefined);
    assert.match(victim.closedWith, /Maintenance window, please reconnect later\./);
    await until('the trace to show the close', async () => {
      const reasons = await page.locator('#trace tbody tr.disconnected td.reason').allTextContents();
      return reasons.includes('closed_by_api');
    });
    await until('five rows', async () => (await page.locator('#connections tbody tr').count()) === 5);
    assert.equal(clients.filter((c) => c.closedWith !== undefined).length, 1, 'only that client was closed');
    console.log('screenshot:', await shot('closed'));
    assert.deepEqual(consoleLines, [], 'the page logged no errors and no request of it failed');
  });
});
