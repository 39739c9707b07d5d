'use strict';
// A cluster on one machine for the tests: a real redis-server, N `switchyard serve --backplane`
// nodes, and a real nginx in front of them that balances round-robin with no sticky sessions.
// Every process listens on 127.0.0.1, on a free port, and is stopped by stop().

const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const path = require('node:path');
const { startService, stopProcess, childEnv } = require('./service');
const { spawnOwned, ownedTempDir, removeOwnedDir } = require('./reaper');

const START_TIMEOUT_MS = 10000;

/** A port nothing listens on right now (the OS's choice for port 0). */
function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

function answers(port) {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    socket.on('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.on('error', () => resolve(false));
  });
}

/**
 * A port for a cluster-enabled redis-server: its bus listens on port + 10000, which must be a
 * valid port and free too.
 */
async function freeClusterPort() {
  for (let i = 0; i < 100; i += 1) {
    const port = await freePort();
    if (port < 55000 && (await portIsFree(port + 10000))) return port;
  }
  throw new Error('no free port pair (port, port + 10000) for a cluster-enabled redis-server');
}

function portIsFree(port) {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.on('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

async function waitUntilListening(port, what, proc) {
  const deadline = Date.now() + START_TIMEOUT_MS;
  while (!(await answers(port))) {
    if (proc.exited) throw new Error(`${what} exited early: ${JSON.stringify(proc.exitInfo)}\n${proc.log()}`);
    if (Date.now() > deadline) throw new Error(`${what} did not listen on ${port} within ${START_TIMEOUT_MS} ms\n${proc.log()}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** A child process with the shape stopProcess() takes, and its output kept for errors. */
function managed(child, name) {
  const proc = { child, name, exited: false, exitInfo: undefined, tail: [] };
  proc.log = () => proc.tail.join('');
  const keep = (chunk) => {
    proc.tail.push(chunk.toString());
    if (proc.tail.length > 100) proc.tail.shift();
  };
  if (child.stdout) child.stdout.on('data', keep);
  if (child.stderr) child.stderr.on('data', keep);
  proc.exitPromise = new Promise((resolve) => {
    child.on('exit', (code, signal) => {
      proc.exited = true;
      proc.exitInfo = { code, signal };
      resolve(proc.exitInfo);
    });
  });
  child.on('error', (e) => keep(`spawn error: ${e.message}\n`));
  return proc;
}

function need(command, apt) {
  try {
    execFileSync('sh', ['-c', `command -v ${command}`], { stdio: 'ignore' });
  } catch {
    throw new Error(`${command} is needed by the cluster tests: install Debian's ${apt} package (scripts/test.sh does)`);
  }
}

async function startRedis(dir, parts, port) {
  need('redis-server', 'redis-server');
  if (port === undefined) port = await freePort();
  const child = spawnOwned('redis-server', ['--bind', '127.0.0.1', '--port', String(port), '--save', '', '--appendonly', 'no', '--dir', dir], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const proc = managed(child, 'redis-server');
  parts.push(proc);
  await waitUntilListening(port, 'redis-server', proc);
  proc.url = `redis://127.0.0.1:${port}`;
  return proc;
}

/** Three cluster-enabled redis-server masters joined with `redis-cli --cluster create`. */
async function startRedisCluster(dir, parts) {
  need('redis-server', 'redis-server');
  need('redis-cli', 'redis-server (redis-tools)');
  const masters = [];
  for (let i = 0; i < 3; i += 1) {
    const port = await freeClusterPort();
    const own = path.join(dir, `redis-${port}`);
    fs.mkdirSync(own);
    const child = spawnOwned('redis-server', [
      '--bind', '127.0.0.1', '--port', String(port), '--save', '', '--appendonly', 'no',
      '--dir', own, '--cluster-enabled', 'yes', '--cluster-config-file', path.join(own, 'nodes.conf'),
      '--cluster-node-timeout', '5000',
    ], { stdio: ['ignore', 'pipe', 'pipe'] });
    const proc = managed(child, `redis-server ${port}`);
    proc.port = port;
    masters.push(proc);
    parts.push(proc);
    await waitUntilListening(port, 'redis-server (cluster)', proc);
  }
  try {
    execFileSync('redis-cli', ['--cluster', 'create', ...masters.map((m) => `127.0.0.1:${m.port}`), '--cluster-replicas', '0', '--cluster-yes'], { encoding: 'utf8', timeout: 20000 });
  } catch (e) {
    throw new Error(`redis-cli --cluster create failed: ${e.message}\n${e.stdout || ''}${e.stderr || ''}\n${masters.map((m) => m.log()).join('\n')}`);
  }
  const deadline = Date.now() + START_TIMEOUT_MS;
  for (const m of masters) {
    for (;;) {
      const info = execFileSync('redis-cli', ['-p', String(m.port), 'cluster', 'info'], { encoding: 'utf8', timeout: 5000 });
      if (info.includes('cluster_state:ok')) break;
      if (Date.now() > deadline) throw new Error(`redis cluster not ok on ${m.port}:\n${info}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  return { masters, url: `redis-cluster://${masters.map((m) => `127.0.0.1:${m.port}`).join(',')}` };
}

/** The balancer's configuration as the project ships it (docs/cluster.md shows this file). */
const NGINX_CONF = path.join(__dirname, '..', '..', '..', 'deploy', 'nginx', 'switchyard.conf');

/**
 * deploy/nginx/switchyard.conf for other ports, replaced the way its header says (and
 * scripts/local-cluster.sh does): the `listen 127.0.0.1:8888;` line by `listen`, the
 * `server 127.0.0.1:800N;` lines by one per upstream. `hostHeader` replaces the Host header's
 * value (`$host`: the configuration docs/cluster.md showed before, still found in the field).
 */
function nginxConfig(listen, upstreams, { hostHeader } = {}) {
  const shipped = fs.readFileSync(NGINX_CONF, 'utf8');
  const listenLine = /^(\s*)listen 127\.0\.0\.1:8888;$/m;
  const serverLines = /^(\s*)server 127\.0\.0\.1:800\d;\n(?:\s*server 127\.0\.0\.1:800\d;\n)*/m;
  const hostLine = /^(\s*)proxy_set_header Host \$http_host;$/m;
  for (const [what, pattern] of [['listen', listenLine], ['server', serverLines], ['Host', hostLine]]) {
    if (!pattern.test(shipped)) throw new Error(`${NGINX_CONF} has no ${what} line to replace: update nginxConfig()`);
  }
  let conf = shipped
    .replace(listenLine, (_, indent) => `${indent}listen ${listen};`)
    .replace(serverLines, (_, indent) => upstreams.map((u) => `${indent}server ${u};\n`).join(''));
  if (hostHeader) conf = conf.replace(hostLine, (_, indent) => `${indent}proxy_set_header Host ${hostHeader};`);
  return conf;
}

function nginxBinary() {
  const nginx = ['/usr/sbin/nginx', '/usr/bin/nginx'].find((p) => fs.existsSync(p));
  if (!nginx) need('nginx', 'nginx-light (or nginx)');
  return nginx || 'nginx';
}

/**
 * nginx in the foreground with its own prefix directory (pid, logs, temporary files), the
 * shipped configuration balancing round-robin over `upstreams`.
 */
async function startNginx(dir, port, upstreams, parts, options = {}) {
  const nginx = nginxBinary();
  fs.mkdirSync(dir, { recursive: true });
  const conf = nginxConfig(`127.0.0.1:${port}`, upstreams, options);
  const confPath = path.join(dir, 'nginx.conf');
  fs.writeFileSync(confPath, conf);
  const child = spawnOwned(nginx, ['-p', dir, '-c', confPath, '-e', path.join(dir, 'error.log'), '-g', 'daemon off;'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const proc = managed(child, 'nginx');
  parts.push(proc);
  proc.log = () => {
    let errors = '';
    try {
      errors = fs.readFileSync(path.join(dir, 'error.log'), 'utf8');
    } catch {
      // not written yet
    }
    return proc.tail.join('') + errors;
  };
  await waitUntilListening(port, 'nginx', proc);
  return proc;
}

/**
 * Starts redis-server (or, with `redisCluster`, a Redis Cluster of three masters), `nodes`
 * switchyard nodes sharing it (node ids n1…), and nginx before
 * them. Returns { lb, nodes, redis, stop() }; `lb` has the shape the cases take as a service
 * (baseUrl, accessKey, token()), with every URL pointing at the load balancer.
 */
async function startCluster({ nodes: count = 3, extraArgs = [], redisCluster = false } = {}) {
  const dir = ownedTempDir('switchyard-cluster-');
  const parts = [];
  const stop = async () => {
    await Promise.all(parts.map((p) => stopProcess(p).catch(() => {})));
    removeOwnedDir(dir);
  };
  try {
    let redis;
    if (redisCluster) {
      const started = await startRedisCluster(dir, parts);
      redis = { url: started.url, masters: started.masters };
      Object.defineProperty(redis, 'exited', { get: () => started.masters.some((m) => m.exited) });
    } else {
      redis = await startRedis(dir, parts);
    }
    const lbPort = await freePort();
    const lbUrl = `http://127.0.0.1:${lbPort}`;
    const nodes = [];
    for (let i = 1; i <= count; i += 1) {
      const node = await startService([
        '--backplane', redis.url,
        '--node-id', `n${i}`,
        '--public-endpoint', lbUrl,
        ...extraArgs,
      ]);
      node.nodeId = `n${i}`;
      parts.push(node);
      nodes.push(node);
    }
    const upstreams = nodes.map((n) => `127.0.0.1:${n.port}`);
    const nginx = await startNginx(path.join(dir, 'nginx'), lbPort, upstreams, parts);
    const lb = Object.create(Object.getPrototypeOf(nodes[0]));
    Object.assign(lb, nodes[0], { baseUrl: lbUrl, port: lbPort });
    const cluster = { lb, nodes, redis, nginx, stop };
    /**
     * Stops the balancer and starts nginx again on its port (the address the nodes' tokens
     * name), with `options` for nginxConfig() (e.g. `{ hostHeader: '$host' }`; none: the
     * shipped file as it is).
     */
    cluster.restartBalancer = async (options = {}) => {
      await stopProcess(cluster.nginx);
      const own = fs.mkdtempSync(path.join(dir, 'nginx-'));
      cluster.nginx = await startNginx(own, lbPort, upstreams, parts, options);
      return cluster.nginx;
    };
    /** Kills redis-server (SIGKILL) and starts a fresh one on the same port (one redis-server only). */
    cluster.restartRedis = async () => {
      const port = Number(new URL(cluster.redis.url).port);
      cluster.redis.child.kill('SIGKILL');
      await cluster.redis.exitPromise;
      cluster.redis = await startRedis(dir, parts, port);
      return cluster.redis;
    };
    return cluster;
  } catch (e) {
    await stop();
    throw e;
  }
}

/** The value of a counter or gauge (summed over its label sets matching `labels`) on a node. */
async function metric(node, name, labels = {}) {
  const res = await fetch(`${node.baseUrl}/metrics`, { signal: AbortSignal.timeout(5000) });
  const text = await res.text();
  let sum = 0;
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})? ([0-9.eE+-]+)/.exec(line);
    if (!m || (m[1] !== name && m[1] !== `${name}_total`)) continue;
    const have = Object.fromEntries([...(m[3] || '').matchAll(/(\w+)="([^"]*)"/g)].map((x) => [x[1], x[2]]));
    if (Object.entries(labels).every(([k, v]) => have[k] === v)) sum += Number(m[4]);
  }
  return sum;
}

module.exports = { startCluster, startRedis, startNginx, nginxConfig, nginxBinary, NGINX_CONF, metric, freePort, childEnv };
