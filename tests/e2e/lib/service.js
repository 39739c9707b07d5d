'use strict';
// Starts and stops one `switchyard serve` process for the test run, and mints
// client tokens with `switchyard token`.

const { execFile } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const readline = require('node:readline');
const { spawnOwned } = require('./reaper');

const E2E_DIR = path.resolve(__dirname, '..');
const DEFAULT_BIN = path.resolve(E2E_DIR, '../../target/debug/switchyard');
const EMULATOR_KEY = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789ABCDEFGH';
const START_TIMEOUT_MS = 20000;
const STOP_GRACE_MS = 5000;

function binaryPath() {
  const bin = process.env.TEST_SWITCHYARD_BIN
    ? path.resolve(process.env.TEST_SWITCHYARD_BIN)
    : DEFAULT_BIN;
  if (!fs.existsSync(bin)) {
    throw new Error(
      `switchyard binary not found at ${bin}: run \`cargo build -p switchyard\` ` +
        'in the repository root, or point TEST_SWITCHYARD_BIN at a built binary',
    );
  }
  return bin;
}

/** Parse `Endpoint=…;Port=…;AccessKey=…;Version=1.0;` into a lower-cased-key map. */
function parseConnectionString(text) {
  const out = {};
  for (const part of text.split(';')) {
    const i = part.indexOf('=');
    if (i <= 0) continue;
    out[part.slice(0, i).trim().toLowerCase()] = part.slice(i + 1).trim();
  }
  return out;
}

class Service {
  constructor(child, bin) {
    this.child = child;
    this.bin = bin;
    this.port = undefined;
    this.baseUrl = undefined;
    this.connectionString = undefined;
    this.accessKey = undefined;
    this.exited = false;
    this.exitInfo = undefined;
    this.logTail = [];
    this.exitPromise = new Promise((resolve) => {
      child.on('exit', (code, signal) => {
        this.exited = true;
        this.exitInfo = { code, signal };
        resolve(this.exitInfo);
      });
    });
  }

  /** Last lines the service printed on stderr (its log). */
  log() {
    return this.logTail.join('\n');
  }

  /**
   * A client URL and token from `switchyard token … --json`.
   * @param {{hub: string, user?: string, ttl?: string, claims?: Record<string,string>|string[]}} opts
   */
  async token({ hub, user, ttl = '1h', claims = [] }) {
    const args = ['token', '--hub', hub, '--ttl', ttl, '--json', '--public-endpoint', this.baseUrl];
    if (user !== undefined) args.push('--user', user);
    const pairs = Array.isArray(claims) ? claims : Object.entries(claims).map(([k, v]) => `${k}=${v}`);
    for (const pair of pairs) args.push('--claim', pair);
    const stdout = await new Promise((resolve, reject) => {
      execFile(
        this.bin,
        args,
        { env: childEnv(), timeout: 10000 },
        (error, out, err) => {
          if (error) reject(new Error(`switchyard ${args.join(' ')} failed: ${error.message}\n${err}`));
          else resolve(out);
        },
      );
    });
    let parsed;
    try {
      parsed = JSON.parse(stdout.trim());
    } catch (e) {
      throw new Error(`switchyard token printed something that is not JSON: ${JSON.stringify(stdout)}`);
    }
    if (typeof parsed.url !== 'string' || typeof parsed.accessToken !== 'string') {
      throw new Error(`switchyard token JSON lacks url/accessToken: ${stdout}`);
    }
    return parsed;
  }

  /** SIGTERM, then SIGKILL if it has not exited after 5 s. */
  async stop() {
    return stopProcess(this);
  }
}

/**
 * SIGTERM, then SIGKILL if `proc` (with `child`, `exited`, `exitInfo`, `exitPromise`) has not
 * exited after 5 s; sets `proc.killedHard` then. Resolves with the exit info.
 */
async function stopProcess(proc) {
  if (proc.exited) return proc.exitInfo;
  proc.child.kill('SIGTERM');
  let timer;
  const killed = new Promise((resolve) => {
    timer = setTimeout(() => {
      if (!proc.exited) {
        proc.killedHard = true;
        proc.child.kill('SIGKILL');
      }
      resolve();
    }, STOP_GRACE_MS);
  });
  await Promise.race([proc.exitPromise, killed]);
  clearTimeout(timer);
  return proc.exitPromise;
}

function childEnv() {
  // No SWITCHYARD_* setting of the caller's may change what is tested (and the service refuses
  // unknown ones): development mode, only the log level passed on.
  const env = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (!name.startsWith('SWITCHYARD_')) env[name] = value;
  }
  env.SWITCHYARD_LOG = process.env.SWITCHYARD_LOG || 'warn';
  return env;
}

/**
 * Start `switchyard serve --listen 127.0.0.1:0` (plus `extraArgs`, e.g. `['--mode', 'default']`)
 * and wait for its address. Its stderr log goes to `logPath` when given (default: E2E_SERVICE_LOG).
 */
async function startService(extraArgs = [], { logPath = process.env.E2E_SERVICE_LOG } = {}) {
  const bin = binaryPath();
  // A test that must know the port beforehand (to name it in other settings) gives its own.
  const listen = extraArgs.includes('--listen') ? [] : ['--listen', '127.0.0.1:0'];
  const child = spawnOwned(bin, ['serve', ...listen, ...extraArgs], {
    env: childEnv(),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const service = new Service(child, bin);
  const logFile = logPath ? fs.createWriteStream(logPath) : null;
  readline.createInterface({ input: child.stderr }).on('line', (line) => {
    service.logTail.push(line);
    if (service.logTail.length > 200) service.logTail.shift();
    if (logFile) logFile.write(line + '\n');
  });

  await new Promise((resolve, reject) => {
    const stdoutLines = [];
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`switchyard did not print its address within ${START_TIMEOUT_MS} ms; stdout:\n${stdoutLines.join('\n')}\nstderr:\n${service.log()}`));
    }, START_TIMEOUT_MS);
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`switchyard exited early (code ${code}, signal ${signal}); stdout:\n${stdoutLines.join('\n')}\nstderr:\n${service.log()}`));
    });
    readline.createInterface({ input: child.stdout }).on('line', (line) => {
      stdoutLines.push(line);
      let m;
      if ((m = /^Listening on 127\.0\.0\.1:(\d+)( \(TLS[^)]*\))?\s*$/.exec(line))) {
        service.port = Number(m[1]);
        service.tls = m[2] !== undefined;
        service.baseUrl = `${service.tls ? 'https' : 'http'}://127.0.0.1:${service.port}`;
      } else if ((m = /^ConnectionString: (.+)$/.exec(line))) {
        service.connectionString = m[1].trim();
        const parsed = parseConnectionString(service.connectionString);
        service.connectionStringParts = parsed;
        service.accessKey = parsed.accesskey;
      }
      if (service.port !== undefined && service.connectionString !== undefined) {
        clearTimeout(timer);
        resolve();
      }
    });
  });
  return service;
}

module.exports = { startService, parseConnectionString, childEnv, stopProcess, EMULATOR_KEY };
