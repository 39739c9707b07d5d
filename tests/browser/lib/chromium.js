'use strict';
// Launches the system's Chromium (Debian's `chromium` package) with playwright-core. Nothing
// here downloads a browser: playwright-core ships none, and the binary is given explicitly.

const fs = require('node:fs');
const { chromium } = require('playwright-core');

const CANDIDATES = ['/usr/bin/chromium', '/usr/bin/chromium-browser', '/usr/bin/google-chrome'];

function executablePath() {
  if (process.env.CHROMIUM_PATH) return process.env.CHROMIUM_PATH;
  const found = CANDIDATES.find((p) => fs.existsSync(p));
  if (!found) {
    throw new Error(
      `no Chromium found (looked at ${CANDIDATES.join(', ')}): install it with ` +
        '`apt-get install -y chromium`, or point CHROMIUM_PATH at a Chromium/Chrome binary',
    );
  }
  return found;
}

async function launch() {
  const args = [];
  // Chromium's sandbox refuses to run as root (CI runs as root).
  if (typeof process.getuid === 'function' && process.getuid() === 0) args.push('--no-sandbox');
  return chromium.launch({ executablePath: executablePath(), headless: true, args, timeout: 30000 });
}

module.exports = { launch, executablePath };
