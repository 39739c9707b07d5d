'use strict';
// Helpers of the stateful-reconnect tests (and the upstream case's MessagePack framing): a
// client with `withStatefulReconnect()`, resets while work runs, and exact checks of numbered
// messages.

const assert = require('node:assert/strict');
const http = require('node:http');
const { sleep, signalR, MessagePackHubProtocol } = require('./client');

function build(url, { protocol, token, stateful = true }) {
  let builder = new signalR.HubConnectionBuilder()
    .withUrl(url, {
      transport: signalR.HttpTransportType.WebSockets,
      ...(token ? { accessTokenFactory: () => token } : {}),
    })
    .configureLogging(process.env.E2E_CLIENT_LOG ? signalR.LogLevel.Debug : signalR.LogLevel.None);
  if (stateful) builder = builder.withStatefulReconnect();
  if (protocol === 'messagepack') builder = builder.withHubProtocol(new MessagePackHubProtocol());
  const connection = builder.build();
  const closed = new Promise((resolve) => connection.onclose((error) => resolve(error || new Error('closed'))));
  return { connection, closed };
}

/** Set for a run without resets (to tell a reset bug from another); the tests that need
 * resets then still run, and report themselves skipped. */
const NO_CUTS = Boolean(process.env.E2E_NO_CUTS);

/** Cuts the proxy's client WebSockets every 30–180 ms until `work` settles; `onCut(n)` is
 * called after each reset that cut `n` > 0 sockets (the test notes how far its work was). */
async function cutDuring(proxy, work, onCut = () => {}) {
  let done = false;
  const finished = work.finally(() => {
    done = true;
  });
  let cuts = 0;
  while (!done) {
    await Promise.race([sleep(30 + Math.floor(Math.random() * 150)), finished.catch(() => {})]);
    if (!done && !NO_CUTS) {
      const cut = proxy.cut();
      cuts += cut;
      if (cut > 0) onCut(cut);
    }
  }
  await finished;
  return cuts;
}

/** At least `least` resets happened (`what`); with E2E_NO_CUTS the test is reported skipped
 * instead, so a run without resets cannot pass as one with them. */
function assertCuts(t, cuts, what, least = 3) {
  if (NO_CUTS) {
    t.skip(`E2E_NO_CUTS is set: ran without resets, so nothing was tested across them (${what})`);
    return;
  }
  assert.ok(cuts >= least, `only ${cuts} resets ${what}`);
}

/** Resolves once `check()` (sync or async) is true (polled), or rejects naming `what`. */
async function until(check, ms, what) {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(20);
  }
}

function range(n) {
  return Array.from({ length: n }, (_, i) => i + 1);
}

/** The value of a Prometheus sample, 0 when absent. */
async function metric(baseUrl, name) {
  const text = await (await fetch(`${baseUrl}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  return line ? Number(line.split(' ')[1]) : 0;
}

/** The first differences between two number lists, for a readable failure. */
function describeMismatch(got, want) {
  const seen = new Set();
  const duplicated = got.filter((n) => (seen.has(n) ? true : (seen.add(n), false)));
  const missing = want.filter((n) => !seen.has(n));
  const firstOutOfOrder = got.findIndex((n, i) => i > 0 && n < got[i - 1]);
  return `got ${got.length} of ${want.length}: missing ${missing.length} (first ${missing.slice(0, 5)}), `
    + `duplicated ${duplicated.length} (first ${duplicated.slice(0, 5)}), first out of order at index ${firstOutOfOrder}`;
}

function assertExactly(got, want, what) {
  const ok = got.length === want.length && got.every((n, i) => n === want[i]);
  assert.ok(ok, `${what}: ${describeMismatch(got, want)}`);
}

/** The upstream of the serverless cases: records events and `count` invocations. */
class Upstream {
  constructor() {
    this.events = []; // { id, event, body }
    this.server = http.createServer((req, res) => {
      const chunks = [];
      req.on('data', (c) => chunks.push(c));
      req.on('end', () => {
        this.events.push({
          id: req.headers['x-asrs-connection-id'],
          event: req.headers['x-asrs-event'],
          type: req.headers['content-type'],
          body: Buffer.concat(chunks),
        });
        res.writeHead(200);
        res.end();
      });
    });
  }

  async start() {
    await new Promise((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.port = this.server.address().port;
  }

  of(id, event) {
    return this.events.filter((e) => e.id === id && e.event === event);
  }

  stop() {
    this.server.closeAllConnections();
    return new Promise((resolve) => this.server.close(resolve));
  }
}

/** A MessagePack body as the protocol reads it: with its VarInt length prefix. */
function framedBinary(body) {
  const prefix = [];
  let length = body.length;
  do {
    let byte = length & 0x7f;
    length >>= 7;
    if (length > 0) byte |= 0x80;
    prefix.push(byte);
  } while (length > 0);
  const framed = Buffer.concat([Buffer.from(prefix), body]);
  return framed.buffer.slice(framed.byteOffset, framed.byteOffset + framed.length);
}

/** The numbers in the upstream's `count` invocations, in arrival order. */
function countedNumbers(upstream, id) {
  const json = new signalR.JsonHubProtocol();
  const msgpack = new MessagePackHubProtocol();
  return upstream.of(id, 'count').map(({ type, body }) => {
    if (type === 'application/json') {
      return json.parseMessages(`${body.toString('utf8')}\x1e`, signalR.NullLogger.instance)[0].arguments[0];
    }
    return msgpack.parseMessages(framedBinary(body), signalR.NullLogger.instance)[0].arguments[0];
  });
}

module.exports = {
  framedBinary,
  NO_CUTS, build, cutDuring, assertCuts, until, range, metric, describeMismatch, assertExactly, Upstream, countedNumbers,
};
