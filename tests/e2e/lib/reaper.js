'use strict';
// Processes and scratch directories a test file starts must not outlive it, however it ends:
// `node --test` abandons a file at its timeout without running its after() hooks, and a file
// killed by a signal runs nothing at all. So each test process has a reaper: a small process
// of its own (its own session, so a signal to the test's group does not reach it) that reads
// what to clean up from a pipe. When the pipe closes, which the kernel does however the test
// process ended, it stops every process group still listed (SIGTERM, SIGKILL after a grace)
// and removes every directory still listed.
//
// Run as a script, this file is the reaper; required, it is the test side.

const { spawn } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const GRACE_MS = 3000;

let reaper;

function send(line) {
  if (!reaper) {
    reaper = spawn(process.execPath, [__filename], {
      detached: true,
      stdio: ['pipe', 'ignore', 'ignore'],
    });
    // Neither the reaper nor its pipe keeps the test process alive.
    reaper.unref();
    reaper.stdin.unref();
    // The reaper gone early (it never should) must not fail the test with EPIPE.
    reaper.stdin.on('error', () => {});
  }
  reaper.stdin.write(`${line}\n`);
}

/**
 * Start `command` as `child_process.spawn` does, in a process group of its own (so nginx's
 * workers go with their master), listed with the reaper until it exits.
 */
function spawnOwned(command, args, options = {}) {
  const child = spawn(command, args, { ...options, detached: true });
  if (child.pid !== undefined) {
    const pid = child.pid;
    send(`+${pid}`);
    child.on('exit', () => send(`-${pid}`));
  }
  return child;
}

/** `fs.mkdtempSync(os.tmpdir()/prefix…)`, removed by the reaper if the test does not. */
function ownedTempDir(prefix) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  send(`+d${dir}`);
  return dir;
}

/** Remove a directory from ownedTempDir() now (the reaper forgets it). */
function removeOwnedDir(dir) {
  fs.rmSync(dir, { recursive: true, force: true });
  send(`-d${dir}`);
}

function alive(group) {
  try {
    process.kill(-group, 0);
    return true;
  } catch {
    return false;
  }
}

function signalAll(groups, signal) {
  for (const group of groups) {
    try {
      process.kill(-group, signal);
    } catch {
      // gone already
    }
  }
}

function runReaper() {
  const groups = new Set();
  const dirs = new Set();
  let pending = '';
  process.stdin.setEncoding('utf8');
  process.stdin.on('data', (chunk) => {
    pending += chunk;
    let newline;
    while ((newline = pending.indexOf('\n')) >= 0) {
      const line = pending.slice(0, newline);
      pending = pending.slice(newline + 1);
      if (line.startsWith('+d')) dirs.add(line.slice(2));
      else if (line.startsWith('-d')) dirs.delete(line.slice(2));
      else if (line.startsWith('+')) groups.add(Number(line.slice(1)));
      else if (line.startsWith('-')) groups.delete(Number(line.slice(1)));
    }
  });
  process.stdin.on('end', async () => {
    signalAll(groups, 'SIGTERM');
    const deadline = Date.now() + GRACE_MS;
    while ([...groups].some(alive) && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    signalAll(groups, 'SIGKILL');
    for (const dir of dirs) fs.rmSync(dir, { recursive: true, force: true });
    process.exit(0);
  });
}

if (require.main === module) runReaper();

module.exports = { spawnOwned, ownedTempDir, removeOwnedDir };
