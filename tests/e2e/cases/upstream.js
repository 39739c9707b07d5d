'use strict';
// 10. Upstream webhooks: a second service, started with a config file whose template points
//     at a Node HTTP server of this test, POSTs serverless clients' events there. The upstream
//     answers an invocation with a framed CompletionMessage in the client's protocol, written
//     with the official client's own protocol classes, as the Functions SignalR trigger does.

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const fs = require('node:fs');
const http = require('node:http');
const path = require('node:path');
const { VALID, connect, closeAll, uniqueHub, waitFor, signalR, MessagePackHubProtocol } = require('../lib/client');
const { startService, EMULATOR_KEY } = require('../lib/service');
const { framedBinary } = require('../lib/stateful');
const { ownedTempDir, removeOwnedDir } = require('../lib/reaper');

const PROTOCOLS = {
  'application/json': new signalR.JsonHubProtocol(),
  'application/x-msgpack': new MessagePackHubProtocol(),
};

/** The invocation in an upstream request body (sent without framing). */
function parseInvocation(contentType, body) {
  const protocol = PROTOCOLS[contentType];
  const input = contentType === 'application/json' ? `${body.toString('utf8')}\x1e` : framedBinary(body);
  const [message] = protocol.parseMessages(input, signalR.NullLogger.instance);
  return message;
}

/** A framed completion in the client's protocol. */
function completion(contentType, invocationId, result) {
  const written = PROTOCOLS[contentType].writeMessage({
    type: signalR.MessageType.Completion,
    invocationId,
    result,
    headers: {},
  });
  return typeof written === 'string' ? Buffer.from(written, 'utf8') : Buffer.from(written);
}

/** The upstream: records every request; answers `add` with the sum, `fail` with 500. */
class Upstream {
  constructor() {
    this.requests = [];
    this.waiters = [];
    this.server = http.createServer((req, res) => {
      const chunks = [];
      req.on('data', (c) => chunks.push(c));
      req.on('end', () => {
        const request = { method: req.method, url: req.url, headers: req.headers, body: Buffer.concat(chunks) };
        this.requests.push(request);
        for (const w of [...this.waiters]) w();
        this.answer(request, res);
      });
    });
  }

  answer(request, res) {
    const event = request.headers['x-asrs-event'];
    const contentType = request.headers['content-type'];
    if (event === 'add') {
      const invocation = parseInvocation(contentType, request.body);
      const sum = invocation.arguments.reduce((a, b) => a + b, 0);
      res.writeHead(200, { 'content-type': contentType });
      res.end(completion(contentType, invocation.invocationId, sum));
    } else if (event === 'fail') {
      res.writeHead(500);
      res.end('upstream failure');
    } else {
      res.writeHead(200);
      res.end();
    }
  }

  async start() {
    await new Promise((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.port = this.server.address().port;
  }

  stop() {
    this.server.closeAllConnections();
    return new Promise((resolve) => this.server.close(resolve));
  }

  /** The first request of `connectionId` for `event`. */
  next(connectionId, event, ms = 5000) {
    const find = () => this.requests.find(
      (r) => r.headers['x-asrs-connection-id'] === connectionId && r.headers['x-asrs-event'] === event,
    );
    return waitFor(new Promise((resolve) => {
      const check = () => {
        const found = find();
        if (found) {
          this.waiters = this.waiters.filter((w) => w !== check);
          resolve(found);
        }
      };
      this.waiters.push(check);
      check();
    }), ms, `upstream '${event}' of ${connectionId}`);
  }
}

/** `sha256=` + uppercase hex HMAC-SHA256 of the connection id with the access key. */
function signature(key, connectionId) {
  return `sha256=${crypto.createHmac('sha256', key).update(connectionId).digest('hex').toUpperCase()}`;
}

function checkHeaders(request, { hub, connectionId, category, event }) {
  const h = request.headers;
  assert.equal(request.method, 'POST');
  assert.equal(request.url, `/api/${hub}/${category}/${event}`);
  assert.equal(h['x-asrs-connection-id'], connectionId);
  assert.equal(h['x-asrs-hub'], hub);
  assert.equal(h['x-asrs-category'], category);
  assert.equal(h['x-asrs-event'], event);
  assert.equal(h['x-asrs-signature'], signature(EMULATOR_KEY, connectionId));
  assert.equal(h['x-asrs-user-id'], 'alice');
  assert.match(h['x-asrs-user-claims'], /asrs\.s\.uid: alice/);
  const query = h['x-asrs-client-query'];
  assert.match(query, new RegExp(`^\\?hub=${hub}`));
  assert.doesNotMatch(query, /access_token=|[?&]id=/);
}

module.exports = () => {
  describe('10. upstream webhooks (a service started with an upstream config file)', () => {
    const upstream = new Upstream();
    let service;
    let dir;

    before(async () => {
      await upstream.start();
      dir = ownedTempDir('switchyard-e2e-upstream-');
      const file = path.join(dir, 'switchyard.toml');
      fs.writeFileSync(file, [
        '[upstream]',
        'timeout = "5s"',
        '',
        '[[upstream.templates]]',
        `url_template = "http://127.0.0.1:${upstream.port}/api/{hub}/{category}/{event}"`,
        '',
      ].join('\n'));
      service = await startService(['--config', file]);
    });

    after(async () => {
      await closeAll();
      if (service) await service.stop();
      await upstream.stop();
      if (dir) removeOwnedDir(dir);
    });

    for (const combo of VALID) {
      it(`${combo.name}: connected, invoke('add') answered by the upstream, a 500 rejects, disconnected`, async () => {
        const hub = uniqueHub('up');
        const h = await connect(service, { hub, user: 'alice', ...combo });
        const connectionId = h.connection.connectionId;
        const ids = { hub, connectionId };

        const connected = await upstream.next(connectionId, 'connected');
        checkHeaders(connected, { ...ids, category: 'connections', event: 'connected' });
        assert.equal(connected.headers['content-type'], 'application/json');
        assert.deepEqual(JSON.parse(connected.body), { type: 10 });

        assert.equal(await waitFor(h.connection.invoke('add', 1, 2), 5000, "invoke('add')"), 3);
        const add = await upstream.next(connectionId, 'add');
        checkHeaders(add, { ...ids, category: 'messages', event: 'add' });
        const contentType = combo.protocol === 'json' ? 'application/json' : 'application/x-msgpack';
        assert.equal(add.headers['content-type'], contentType);
        const invocation = parseInvocation(contentType, add.body);
        assert.equal(invocation.target, 'add');
        assert.deepEqual(invocation.arguments, [1, 2]);

        await assert.rejects(
          waitFor(h.connection.invoke('fail'), 5000, "invoke('fail')"),
          /status code 500/,
        );
        assert.equal(h.connection.state, signalR.HubConnectionState.Connected);

        await waitFor(h.connection.stop(), 5000, 'stop()');
        const disconnected = await upstream.next(connectionId, 'disconnected');
        checkHeaders(disconnected, { ...ids, category: 'connections', event: 'disconnected' });
        assert.deepEqual(JSON.parse(disconnected.body), { type: 11 });
      });
    }

    it('the upstream service stayed up', () => {
      assert.equal(service.exited, false, `service exited: ${JSON.stringify(service.exitInfo)}\n${service.log()}`);
    });
  });
};
