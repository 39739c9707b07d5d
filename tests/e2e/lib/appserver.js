'use strict';
// Starts and stops `switchyard-bench app-server` processes: Rust app servers that connect to
// the service's /server endpoint (Default mode), run the benchmark hub, and serve the
// negotiate redirect on `POST /{hub}/negotiate`.

const fs = require('node:fs');
const path = require('node:path');
const readline = require('node:readline');
const { childEnv, stopProcess } = require('./service');
const { spawnOwned } = require('./reaper');

const E2E_DIR = path.resolve(__dirname, '..');
const DEFAULT_BIN = path.resolve(E2E_DIR, '../../target/debug/switchyard-bench');
const START_TIMEOUT_MS = 20000;

function benchBinaryPath() {
  const bin = process.env.TEST_SWITCHYARD_BENCH_BIN
    ? path.resolve(process.env.TEST_SWITCHYARD_BENCH_BIN)
    : DEFAULT_BIN;
  if (!fs.existsSync(bin)) {
    throw new Error(
      `switchyard-bench binary not found at ${bin}: run \`cargo build -p switchyard -p switchyard-bench\` ` +
        'in the repository root, or point TEST_SWITCHYARD_BENCH_BIN at a built binary',
    );
  }
  return bin;
}

/** Every app server started and not yet known to have exited; see stopAppServers(). */
const running = new Set();

// Whatever the after() hooks leave, the reaper (lib/reaper.js) stops when the file ends.

class AppServer {
  constructor(child, { serverId, hubs }) {
    this.child = child;
    this.serverId = serverId;
    this.hubs = hubs;
    this.addr = undefined; // "127.0.0.1:PORT"
    this.baseUrl = undefined; // "http://127.0.0.1:PORT"
    this.exited = false;
    this.exitInfo = undefined;
    this.killedHard = false;
    this.logTail = [];
    this.exitPromise = new Promise((resolve) => {
      child.on('exit', (code, signal) => {
        this.exited = true;
        this.exitInfo = { code, signal };
        running.delete(this);
        resolve(this.exitInfo);
      });
    });
  }

  /** Last lines the app server printed on stderr (its log). */
  log() {
    return this.logTail.join('\n');
  }

  /** The hub URL a client is built with: negotiate goes to `${hubUrl}/negotiate?user=…`. */
  hubUrl(hub, user) {
    return `${this.baseUrl}/${hub}${user !== undefined ? `?user=${encodeURIComponent(user)}` : ''}`;
  }

  /** SIGTERM (graceful stop), then SIGKILL if it has not exited after 5 s. */
  async stop() {
    return stopProcess(this);
  }

  /** SIGKILL at once (a crashed app server); resolves when the process is gone. */
  async kill() {
    if (this.exited) return this.exitInfo;
    this.child.kill('SIGKILL');
    return this.exitPromise;
  }
}

/**
 * Start `switchyard-bench app-server` against `service` and wait until it prints its address
 * (it does so once every server connection is up, or after 10 s).
 * @param {{connectionString: string}} service
 * @param {{serverId: string, hubs?: string[], connections?: number, gracefulShutdown?: string, extraArgs?: string[]}} opts
 * @returns {Promise<AppServer>}
 */
async function startAppServer(service, { serverId, hubs = ['bench'], connections, gracefulShutdown, extraArgs = [] } = {}) {
  if (!serverId) throw new Error('startAppServer needs a serverId');
  const bin = benchBinaryPath();
  const args = ['app-server', '--connection-string', service.connectionString, '--listen', '127.0.0.1:0', '--server-id', serverId];
  for (const hub of hubs) args.push('--hub', hub);
  if (connections !== undefined) args.push('--connections', String(connections));
  if (gracefulShutdown !== undefined) args.push('--graceful-shutdown', gracefulShutdown);
  args.push(...extraArgs);
  const child = spawnOwned(bin, args, { env: childEnv(), stdio: ['ignore', 'pipe', 'pipe'] });
  const app = new AppServer(child, { serverId, hubs });
  running.add(app);
  const logFile = process.env.E2E_APP_SERVER_LOG
    ? fs.createWriteStream(`${process.env.E2E_APP_SERVER_LOG}.${serverId}`)
    : null;
  readline.createInterface({ input: child.stderr }).on('line', (line) => {
    app.logTail.push(line);
    if (app.logTail.length > 200) app.logTail.shift();
    if (logFile) logFile.write(line + '\n');
  });

  const stdoutLines = [];
  try {
    await new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        reject(new Error(`switchyard-bench app-server ${serverId} did not print its address within ${START_TIMEOUT_MS} ms; stdout:\n${stdoutLines.join('\n')}\nstderr:\n${app.log()}`));
      }, START_TIMEOUT_MS);
      child.on('error', (e) => {
        clearTimeout(timer);
        reject(new Error(`could not run ${bin}: ${e.message}`));
      });
      child.on('exit', (code, signal) => {
        clearTimeout(timer);
        reject(new Error(`switchyard-bench app-server ${serverId} exited early (code ${code}, signal ${signal}); stdout:\n${stdoutLines.join('\n')}\nstderr:\n${app.log()}`));
      });
      readline.createInterface({ input: child.stdout }).on('line', (line) => {
        stdoutLines.push(line);
        const m = /^App server listening on http:\/\/(\S+)\s*$/.exec(line);
        if (m) {
          app.addr = m[1];
          app.baseUrl = `http://${app.addr}`;
          clearTimeout(timer);
          resolve();
        }
      });
    });
  } catch (e) {
    await app.kill();
    throw e;
  }
  return app;
}

/** Stop every app server still running (SIGTERM, SIGKILL after 5 s); for after() hooks. */
async function stopAppServers() {
  await Promise.all([...running].map((app) => app.stop()));
}

module.exports = { startAppServer, stopAppServers, benchBinaryPath, AppServer };
