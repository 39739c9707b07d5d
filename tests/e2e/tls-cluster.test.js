'use strict';
// TLS between nodes: three nodes serving TLS with one real redis-server, each reached by the
// others at an https internal URL (cluster.internal_url). The official client negotiates on
// one node and sends its transport requests to another, which passes them on over TLS (a
// WebSocket as an upgrade over TLS), trusting the other node's certificate by its own
// tls.cert chain or by cluster.ca_file. A fourth node whose certificate comes from another CA
// is refused: forwarding to it fails closed, with a log line saying why.

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync, execFile } = require('node:child_process');
const fs = require('node:fs');
const http = require('node:http');
const https = require('node:https');
const path = require('node:path');
const { uniqueHub } = require('./lib/client');
const { startService, stopProcess, childEnv } = require('./lib/service');
const { startRedis, freePort } = require('./lib/cluster');
const { signJwt } = require('./lib/rest');
const { ownedTempDir, removeOwnedDir } = require('./lib/reaper');

const CHILD = path.join(__dirname, 'lib', 'tls-client.js');
const CHILD_TIMEOUT_MS = 30000;

function openssl(args, cwd) {
  execFileSync('openssl', args, { cwd, stdio: ['ignore', 'ignore', 'pipe'], timeout: 20000 });
}

const EC = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];

/** A CA `<name>.pem` (key `<name>.key`) in `dir`. */
function makeCa(dir, name) {
  openssl(['req', '-x509', ...EC, '-keyout', `${name}.key`, '-out', `${name}.pem`, '-days', '2',
    '-subj', `/CN=Switchyard e2e ${name}`,
    '-addext', 'basicConstraints=critical,CA:TRUE',
    '-addext', 'keyUsage=critical,keyCertSign,cRLSign'], dir);
  return path.join(dir, `${name}.pem`);
}

/**
 * A leaf for 127.0.0.1 and localhost signed by CA `ca`: `<name>.key`, `<name>.pem` (the leaf
 * alone) and `<name>-chain.pem` (the leaf, then the CA).
 */
function makeLeaf(dir, ca, name) {
  fs.writeFileSync(path.join(dir, `${name}.ext`), [
    'subjectAltName=IP:127.0.0.1,DNS:localhost',
    'basicConstraints=CA:FALSE',
    'extendedKeyUsage=serverAuth',
    '',
  ].join('\n'));
  openssl(['req', ...EC, '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=${name}`], dir);
  openssl(['x509', '-req', '-in', `${name}.csr`, '-CA', `${ca}.pem`, '-CAkey', `${ca}.key`, '-CAcreateserial',
    '-out', `${name}.pem`, '-days', '2', '-extfile', `${name}.ext`], dir);
  const chain = path.join(dir, `${name}-chain.pem`);
  fs.writeFileSync(chain, fs.readFileSync(path.join(dir, `${name}.pem`), 'utf8') + fs.readFileSync(path.join(dir, `${ca}.pem`), 'utf8'));
  return { key: path.join(dir, `${name}.key`), leaf: path.join(dir, `${name}.pem`), chain };
}

/** Runs lib/tls-client.js with `job`, trusting the PEM bundle `caFile`; its JSON answer. */
function runClient(job, caFile) {
  const env = childEnv();
  env.NODE_EXTRA_CA_CERTS = caFile;
  return new Promise((resolve, reject) => {
    execFile(process.execPath, [CHILD, JSON.stringify(job)], { env, timeout: CHILD_TIMEOUT_MS },
      (error, stdout, stderr) => {
        if (error) return reject(new Error(`client process failed: ${error.message}\n${stderr}`));
        try {
          resolve(JSON.parse(stdout.trim().split('\n').pop()));
        } catch {
          reject(new Error(`client process printed no JSON: ${stdout}\n${stderr}`));
        }
      });
  });
}

/** The upstream: answers every invocation with a completion whose result is its first argument. */
function startEchoUpstream() {
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      if (!req.url.includes('/messages/')) {
        res.writeHead(200).end();
        return;
      }
      const invocation = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      const completion = { type: 3, invocationId: invocation.invocationId, result: invocation.arguments[0] };
      res.writeHead(200, { 'Content-Type': 'application/json' }).end(`${JSON.stringify(completion)}\x1e`);
    });
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

/** A counter's value on a node over https, trusting `ca` (summed over matching label sets). */
function metric(node, ca, name, labels) {
  return new Promise((resolve, reject) => {
    https.get(`${node.baseUrl}/metrics`, { ca: fs.readFileSync(ca), timeout: 5000 }, (res) => {
      let text = '';
      res.on('data', (c) => { text += c; });
      res.on('end', () => {
        let sum = 0;
        for (const line of text.split('\n')) {
          const m = /^([a-z_]+)(\{([^}]*)\})? ([0-9.eE+-]+)/.exec(line);
          if (!m || (m[1] !== name && m[1] !== `${name}_total`)) continue;
          const have = Object.fromEntries([...(m[3] || '').matchAll(/(\w+)="([^"]*)"/g)].map((x) => [x[1], x[2]]));
          if (Object.entries(labels).every(([k, v]) => have[k] === v)) sum += Number(m[4]);
        }
        resolve(sum);
      });
    }).on('error', reject);
  });
}

describe('TLS between nodes (https cluster.internal_url) with @microsoft/signalr', () => {
  let dir;
  let redis;
  const parts = [];
  let upstream;
  const nodes = {};
  let publicEndpoint;
  let bothCas;

  before(async () => {
    dir = ownedTempDir('switchyard-e2e-tls-cluster-');
    makeCa(dir, 'ca');
    makeCa(dir, 'other-ca');
    bothCas = path.join(dir, 'both-cas.pem');
    fs.writeFileSync(bothCas, fs.readFileSync(path.join(dir, 'ca.pem'), 'utf8') + fs.readFileSync(path.join(dir, 'other-ca.pem'), 'utf8'));
    upstream = await startEchoUpstream();
    const config = path.join(dir, 'switchyard.toml');
    fs.writeFileSync(config, `[[upstream.templates]]\nurl_template = "http://127.0.0.1:${upstream.address().port}/{hub}/{category}/{event}"\n`);
    // No balancer: each client picks its nodes itself.
    redis = await startRedis(dir, parts);
    const ports = { n1: await freePort(), n2: await freePort(), n3: await freePort(), n4: await freePort() };
    publicEndpoint = `https://localhost:${ports.n1}`;
    const start = async (id, tls, extra) => {
      const node = await startService([
        '--listen', `127.0.0.1:${ports[id]}`,
        '--config', config,
        '--backplane', redis.url,
        '--node-id', id,
        '--public-endpoint', publicEndpoint,
        '--tls-cert', tls.cert, '--tls-key', tls.key,
        ...extra,
      ]);
      node.nodeId = id;
      nodes[id] = node;
    };
    const leaf = (ca, name) => makeLeaf(dir, ca, name);
    // n1, n2: the CA is in their tls.cert (leaf, then CA), which is what they trust other
    // nodes by; n3: its leaf alone, trusting cluster.ca_file, at the internal URL derived
    // from its address (https://127.0.0.1:port, checked against the certificate's IP).
    const l1 = leaf('ca', 'n1');
    await start('n1', { cert: l1.chain, key: l1.key }, ['--internal-url', `https://localhost:${ports.n1}`]);
    const l2 = leaf('ca', 'n2');
    await start('n2', { cert: l2.chain, key: l2.key }, ['--internal-url', `https://localhost:${ports.n2}`]);
    const l3 = leaf('ca', 'n3');
    await start('n3', { cert: l3.leaf, key: l3.key }, ['--set', `cluster.ca_file=${path.join(dir, 'ca.pem')}`]);
    // n4: a certificate of another CA, which the others do not trust.
    const l4 = leaf('other-ca', 'n4');
    await start('n4', { cert: l4.chain, key: l4.key }, ['--internal-url', `https://localhost:${ports.n4}`]);
  });

  after(async () => {
    await Promise.all(Object.values(nodes).map((n) => stopProcess(n).catch(() => {})));
    await Promise.all(parts.map((p) => stopProcess(p).catch(() => {})));
    if (upstream) upstream.close();
    if (dir) removeOwnedDir(dir);
  });

  /** A client job that negotiates on `negotiating` and sends everything else to `serving`. */
  async function job(negotiating, serving, transport) {
    const hub = uniqueHub('tlsnodes');
    const tokens = Object.create(Object.getPrototypeOf(nodes.n1));
    Object.assign(tokens, nodes.n1, { baseUrl: publicEndpoint });
    const { url, accessToken } = await tokens.token({ hub, user: 'alice' });
    const audience = `${publicEndpoint}/api/hubs/${hub}/:send`;
    const onServing = new URL(url);
    onServing.host = new URL(serving.baseUrl).host;
    return {
      url: onServing.toString(),
      negotiateOrigin: negotiating.baseUrl,
      token: accessToken,
      transport,
      // The broadcast enters at the serving node and reaches the owner through Redis.
      restUrl: `${serving.baseUrl}/api/hubs/${hub}/:send`,
      restToken: signJwt(nodes.n1.accessKey, { aud: audience }),
      text: `hello over ${transport}`,
      echo: `echo over ${transport}`,
    };
  }

  const forwarded = (node, reason) => metric(node, path.join(dir, 'ca.pem'), 'switchyard_cluster_requests_forwarded', { reason });

  for (const [transport, from, to] of [['WebSockets', 'n1', 'n2'], ['LongPolling', 'n2', 'n3'], ['ServerSentEvents', 'n3', 'n1']]) {
    it(`${transport}: negotiated on ${from}, served through ${to} over TLS; messages flow both ways`, async () => {
      const before = await forwarded(nodes[to], 'ok');
      const work = await job(nodes[from], nodes[to], transport);
      const result = await runClient(work, path.join(dir, 'ca.pem'));
      assert.equal(result.ok, true, `${result.error}\n${from}:\n${nodes[from].log()}\n${to}:\n${nodes[to].log()}`);
      assert.equal(result.text, work.text);
      assert.equal(result.echoed, work.echo);
      assert.equal(result.transport, `${transport === 'WebSockets' ? 'WebSocket' : transport}Transport`);
      assert.ok((await forwarded(nodes[to], 'ok')) > before, `${to} passed the transport requests on to ${from}`);
    });
  }

  it('no node warned at start about its internal URL (plain, or a host its certificate lacks)', () => {
    for (const id of ['n1', 'n2', 'n3']) {
      assert.doesNotMatch(nodes[id].log(), /does not name|cluster\.internal_url is plain HTTP/, `${id}:\n${nodes[id].log()}`);
    }
  });

  it('a node whose certificate is not trusted gets no forwarded request: it fails closed, logged', async (t) => {
    const before = await forwarded(nodes.n1, 'unreachable');
    const work = await job(nodes.n4, nodes.n1, 'WebSockets');
    const result = await runClient(work, bothCas);
    assert.equal(result.ok, false, 'the client connected through an untrusted node');
    assert.ok((await forwarded(nodes.n1, 'unreachable')) > before, 'n1 counted the node as unreachable');
    assert.match(nodes.n1.log(), /refused TLS to another node: its certificate is not trusted/);
    assert.match(nodes.n1.log(), /UnknownIssuer|unknown issuer/i);
    t.diagnostic(nodes.n1.log().split('\n').find((line) => line.includes('refused TLS to another node')));
  });
});
