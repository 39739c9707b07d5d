'use strict';
// The cluster through a load balancer: three `switchyard serve --backplane` nodes, one real
// redis-server, and nginx balancing round-robin WITHOUT sticky sessions in front. The
// single-node cases run again with every URL pointing at nginx, so a client's negotiate, its
// transport requests, the REST calls and the other clients land on whichever node nginx picks:
// senders, REST callers and receivers end up on different nodes, over every transport and
// protocol. Then checks that the spread really happened.

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const WebSocket = require('ws');
const { startCluster, metric, nginxConfig, nginxBinary, NGINX_CONF } = require('./lib/cluster');
const { Rest } = require('./lib/rest');
const { VALID, connect, closeAll, uniqueHub, waitFor } = require('./lib/client');
const { CutProxy } = require('./lib/proxy');
const { build, cutDuring, until, range, assertExactly } = require('./lib/stateful');
const { ownedTempDir, removeOwnedDir } = require('./lib/reaper');

// The single-node cases that hold for any serverless service (the others start processes of
// their own).
const CASES = ['connect', 'exclude', 'targets', 'close', 'args', 'invoke', 'skip-negotiation', 'default-mode'];

/**
 * Opens the dashboard's admin hub as the page does (a WebSocket from a page of `origin`, the
 * JSON hub protocol) and waits for a snapshot that `ready` accepts. Resolves with
 * `{ status: 101, snapshot }`, or `{ status }` when the upgrade is refused.
 */
function adminHub(baseUrl, origin, ready = () => true, timeoutMs = 10000) {
  return new Promise((resolve, reject) => {
    const socket = new WebSocket(`${baseUrl.replace('http', 'ws')}/dashboard/hub`, { headers: { Origin: origin } });
    const timer = setTimeout(() => {
      socket.terminate();
      reject(new Error(`no snapshot from the admin hub within ${timeoutMs} ms`));
    }, timeoutMs);
    const done = (value) => {
      clearTimeout(timer);
      socket.terminate();
      resolve(value);
    };
    socket.on('unexpected-response', (request, response) => {
      clearTimeout(timer);
      request.destroy();
      resolve({ status: response.statusCode });
    });
    socket.on('open', () => socket.send('{"protocol":"json","version":1}\x1e'));
    socket.on('message', (data) => {
      for (const frame of data.toString().split('\x1e').filter(Boolean)) {
        const message = JSON.parse(frame);
        if (message.type === 1 && message.target === 'snapshot' && ready(message.arguments[0])) {
          done({ status: 101, snapshot: message.arguments[0] });
        }
      }
    });
    socket.on('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
  });
}

/**
 * The dashboard as a browser uses it through the balancer: the page, then its admin hub from
 * the page's origin (the balancer's address, port included), which must show every node;
 * a page of another site is refused.
 */
async function dashboardThroughBalancer(cluster) {
  const { baseUrl } = cluster.lb;
  const page = await fetch(`${baseUrl}/dashboard`, { signal: AbortSignal.timeout(5000) });
  assert.equal(page.status, 200);
  assert.match(await page.text(), /\/dashboard\/assets\/signalr\.min\.js/);
  const every = (snapshot) => snapshot.nodes.length === cluster.nodes.length;
  const own = await adminHub(baseUrl, baseUrl, every);
  assert.equal(own.status, 101, `the admin hub refused the dashboard's own page:\n${cluster.nginx.log()}`);
  assert.deepEqual(own.snapshot.nodes.map((n) => n.id).sort(), cluster.nodes.map((n) => n.nodeId).sort());
  assert.equal((await adminHub(baseUrl, 'http://evil.example')).status, 403);
  const otherPort = new URL(baseUrl);
  otherPort.port = String(Number(otherPort.port) + 1);
  assert.equal((await adminHub(baseUrl, otherPort.origin)).status, 403);
}

describe('deploy/nginx/switchyard.conf', () => {
  it('passes nginx -t as shipped, and with other ports put in the documented way', () => {
    const dir = ownedTempDir('switchyard-nginx-t-');
    try {
      const check = (file) => execFileSync(nginxBinary(), ['-t', '-p', dir, '-e', path.join(dir, 'error.log'), '-c', file], {
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      check(NGINX_CONF);
      const other = path.join(dir, 'other.conf');
      const conf = nginxConfig('127.0.0.1:9999', ['127.0.0.1:9001', '127.0.0.1:9002']);
      assert.match(conf, /listen 127\.0\.0\.1:9999;/);
      assert.match(conf, /server 127\.0\.0\.1:9001;\n\s*server 127\.0\.0\.1:9002;\n\s*\}/);
      const directives = conf.split('\n').filter((line) => !/^\s*#/.test(line)).join('\n');
      assert.doesNotMatch(directives, /8888|800\d/);
      fs.writeFileSync(other, conf);
      check(other);
    } finally {
      removeOwnedDir(dir);
    }
  });
});

describe('docs/cluster.md', () => {
  it('shows deploy/nginx/switchyard.conf as shipped', () => {
    const doc = fs.readFileSync(path.join(__dirname, '..', '..', 'docs', 'cluster.md'), 'utf8');
    const shipped = fs.readFileSync(NGINX_CONF, 'utf8');
    assert.ok(doc.includes('```nginx\n' + shipped + '```'), 'docs/cluster.md has a copy of the shipped nginx configuration that differs from it');
  });
});

function clusterSuite(title, options) {
  const env = { service: undefined, rest: undefined };
  let cluster;

  describe(title, () => {
    before(async () => {
      cluster = await startCluster({ nodes: 3, ...options });
      env.service = cluster.lb;
      env.rest = new Rest(cluster.lb);
    });

    after(async () => {
      await closeAll();
      if (cluster) await cluster.stop();
    });

    for (const name of CASES) require(`./cases/${name}`)(env);

    describe('the load was spread', () => {
      after(closeAll);

      it('clients of one hub are held by every node, and requests were passed between nodes', async () => {
        const hub = uniqueHub('spread');
        const clients = [];
        for (const combo of VALID) {
          for (let i = 0; i < 3; i += 1) clients.push(await connect(env.service, { hub, user: `u${i}`, ...combo }));
        }
        const held = await Promise.all(
          cluster.nodes.map((n) => metric(n, 'switchyard_client_connections')),
        );
        assert.ok(held.every((count) => count > 0), `every node holds clients: ${held}`);
        const forwarded = await Promise.all(
          cluster.nodes.map((n) => metric(n, 'switchyard_cluster_requests_forwarded', { reason: 'ok' })),
        );
        assert.ok(forwarded.reduce((a, b) => a + b, 0) > 0, `some transport requests were passed on: ${forwarded}`);
        // One broadcast through the balancer reaches every client, wherever it is.
        await env.rest.broadcast(hub, 'msg', ['everyone']);
        for (const c of clients) assert.deepEqual(await c.inbox.next('msg'), ['everyone']);
      });
    });

    if (!options.redisCluster) {
      it('stateful reconnect: a reset client comes back through the balancer to whichever node, and resumes', async () => {
        // Clients reach nginx through a resetting proxy; each reconnect is a new request that
        // nginx sends round-robin, so most land on a node that passes them on to the owner.
        const proxy = await new CutProxy().start();
        proxy.target = cluster.lb.port;
        try {
          const hub = uniqueHub('srcl');
          const count = 1500;
          const clients = [];
          for (let i = 0; i < 3; i += 1) {
            const minted = await cluster.lb.token({ hub, user: `s${i}` });
            const url = minted.url.replace(`:${cluster.lb.port}/`, `:${proxy.port}/`);
            const protocol = i % 2 ? 'messagepack' : 'json';
            const client = build(url, { protocol, token: minted.accessToken });
            client.numbers = [];
            client.connection.on('n', (n) => client.numbers.push(n));
            await waitFor(client.connection.start(), 10000, 'start()');
            client.id = client.connection.connectionId;
            clients.push(client);
          }
          const forwardedBefore = (await Promise.all(
            cluster.nodes.map((n) => metric(n, 'switchyard_cluster_requests_forwarded', { reason: 'ok' })),
          )).reduce((a, b) => a + b, 0);
          // REST through one node: sequential calls that enter different nodes are not
          // ordered with each other (each node publishes from its own queue).
          const rest = new Rest(cluster.nodes[0]);
          const cuts = await cutDuring(proxy, (async () => {
            for (const n of range(count)) {
              await Promise.all(clients.map((c) => rest.sendToConnection(hub, c.id, 'n', [n])));
            }
            await until(() => clients.every((c) => c.numbers.length >= count), 20000, 'every message');
          })());
          assert.ok(cuts >= 3, `only ${cuts} resets`);
          for (const c of clients) {
            assertExactly(c.numbers, range(count), `client ${c.id}`);
            assert.equal(c.connection.connectionId, c.id);
          }
          const resumed = (await Promise.all(
            cluster.nodes.map((n) => metric(n, 'switchyard_stateful_reconnects', { kind: 'resumed' })),
          )).reduce((a, b) => a + b, 0);
          const forwarded = (await Promise.all(
            cluster.nodes.map((n) => metric(n, 'switchyard_cluster_requests_forwarded', { reason: 'ok' })),
          )).reduce((a, b) => a + b, 0);
          assert.ok(resumed >= 1, `resumed ${resumed}`);
          assert.ok(forwarded > forwardedBefore, 'some reconnects reached the owner through another node');
          process.stderr.write(`# cluster: ${cuts} resets, ${resumed} resumed, ${forwarded - forwardedBefore} requests passed on\n`);
          await Promise.all(clients.map((c) => waitFor(c.connection.stop(), 5000, 'stop()')));
        } finally {
          await proxy.stop();
        }
      });
    }

    if (!options.redisCluster) {
      describe('the dashboard through the balancer', () => {
        it('loads, and its admin hub takes the page (deploy/nginx/switchyard.conf: Host $http_host)', async () => {
          await dashboardThroughBalancer(cluster);
        });

        it('also behind nginx with Host $host, which drops the port (the public endpoint names it)', async () => {
          await cluster.restartBalancer({ hostHeader: '$host' });
          try {
            await dashboardThroughBalancer(cluster);
          } finally {
            await cluster.restartBalancer();
          }
        });
      });
    }

    it('every process of the cluster stayed up through the run', () => {
      for (const node of cluster.nodes) {
        assert.equal(node.exited, false, `node ${node.nodeId} exited: ${JSON.stringify(node.exitInfo)}\n${node.log()}`);
      }
      assert.equal(cluster.redis.exited, false, 'redis-server exited');
      assert.equal(cluster.nginx.exited, false, `nginx exited:\n${cluster.nginx.log()}`);
    });
  });
}

clusterSuite('switchyard cluster on redis-server behind nginx (@microsoft/signalr client)', {});
clusterSuite('switchyard cluster on a Redis Cluster (3 masters, sharded pub/sub) behind nginx', { redisCluster: true });
