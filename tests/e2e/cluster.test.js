'use strict';
// The cluster through a load balancer: three `switchyard serve --redis` nodes, one real
// redis-server, and nginx balancing round-robin WITHOUT sticky sessions in front. The
// single-node cases run again with every URL pointing at nginx, so a client's negotiate, its
// transport requests, the REST calls and the other clients land on whichever node nginx picks:
// senders, REST callers and receivers end up on different nodes, over every transport and
// protocol. Then checks that the spread really happened.

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { startCluster, metric } = require('./lib/cluster');
const { Rest } = require('./lib/rest');
const { VALID, connect, closeAll, uniqueHub, waitFor } = require('./lib/client');
const { CutProxy } = require('./lib/proxy');
const { build, cutDuring, until, range, assertExactly } = require('./lib/stateful');

// The single-node cases that hold for any serverless service (the others start processes of
// their own).
const CASES = ['connect', 'exclude', 'targets', 'close', 'args', 'invoke', 'skip-negotiation', 'default-mode'];

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
