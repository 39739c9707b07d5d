'use strict';
// The harness itself: whatever a test file started (services, redis-server, nginx and its
// workers, app servers, scratch directories) is gone soon after the file ends, however it
// ends: abandoned by node --test at its timeout (which runs no after() hook), or killed.

const { describe, it } = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const { ownedTempDir, removeOwnedDir } = require('./lib/reaper');

const FIXTURE = path.join(__dirname, 'fixtures', 'abandoned.js');
const CLEANUP_BOUND_MS = 15000;

function alive(pid) {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    // A zombie has ended; its parent (here: init) has not read its status yet.
    return !/^\S+ \(.*\) Z/s.test(stat);
  } catch {
    return false;
  }
}

/** Every process whose parent chain leads to `root` (nginx's workers included). */
function descendants(root) {
  const parent = new Map();
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${name}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      parent.set(Number(name), Number(fields[1]));
    } catch {
      // ended meanwhile
    }
  }
  const found = [];
  for (const pid of parent.keys()) {
    for (let p = parent.get(pid); p !== undefined && p > 1; p = parent.get(p)) {
      if (p === root) {
        found.push(pid);
        break;
      }
    }
  }
  return found;
}

/** Run the fixture with `args` until it has written what it started; `abandon` ends it. */
async function startFixture(args, abandon) {
  const out = path.join(ownedTempDir('switchyard-e2e-harness-'), 'started.json');
  // A runner of its own, not a part of this one (which NODE_TEST_CONTEXT would make it).
  const env = { ...process.env, E2E_HARNESS_OUT: out };
  delete env.NODE_TEST_CONTEXT;
  const child = spawn(process.execPath, [...args, FIXTURE], {
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (d) => { output += d; });
  child.stderr.on('data', (d) => { output += d; });
  const exited = new Promise((resolve) => child.on('exit', resolve));
  const deadline = Date.now() + 60000;
  while (!fs.existsSync(out)) {
    assert.ok(Date.now() < deadline, `the fixture did not start everything within 60 s:\n${output}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  const started = JSON.parse(fs.readFileSync(out, 'utf8'));
  removeOwnedDir(path.dirname(out));
  // nginx's workers and the reaper too.
  started.all = [...new Set([...started.pids, ...descendants(started.pid)])];
  await abandon(child, started, exited);
  return { started, output: () => output };
}

async function assertAllGone({ started, output }) {
  const deadline = Date.now() + CLEANUP_BOUND_MS;
  for (;;) {
    const left = started.all.filter(alive);
    const dirs = started.dirs.filter((d) => fs.existsSync(d));
    if (left.length === 0 && dirs.length === 0) return;
    if (Date.now() > deadline) {
      const named = left.map((pid) => {
        try {
          return `${pid} (${fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ').trim()})`;
        } catch {
          return String(pid);
        }
      });
      // Not left for the next file either.
      for (const pid of left) {
        try { process.kill(pid, 'SIGKILL'); } catch { /* gone */ }
      }
      for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
      assert.fail(`still there ${CLEANUP_BOUND_MS} ms after the file ended: processes ${named.join(', ')}; directories ${dirs.join(', ')}\nfixture output:\n${output()}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe('test harness', () => {
  it('a file abandoned at node --test\'s timeout leaves no process or directory behind', async () => {
    const run = await startFixture(['--test', '--test-timeout=25000'], async (child, started, exited) => {
      // The runner's timeout (25 s from the file's start) ends the file.
      const code = await exited;
      assert.notEqual(code, 0, 'the fixture\'s test timed out');
      assert.ok(started.all.length >= 6, `started: ${JSON.stringify(started)}`);
    });
    await assertAllGone(run);
  });

  it('a file killed with SIGKILL leaves no process or directory behind', async () => {
    const run = await startFixture([], async (child, started, exited) => {
      process.kill(started.pid, 'SIGKILL');
      await exited;
    });
    await assertAllGone(run);
  });
});
