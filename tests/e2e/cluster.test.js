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
const { VALID, connect, closeAll, uniqueHub } = require('./lib/client');

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
