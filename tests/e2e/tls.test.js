'use strict';
// TLS in the binary (`--tls-cert`/`--tls-key`) with the official @microsoft/signalr client:
// over wss, Server-Sent Events and long polling on https, with a certificate signed by a CA
// made here with the openssl CLI. Node trusts that CA only through NODE_EXTRA_CA_CERTS,
// which it reads at start, so each client runs in a child `node` (lib/tls-client.js).

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync, execFile } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const { uniqueHub } = require('./lib/client');
const { startService, childEnv } = require('./lib/service');
const { signJwt } = require('./lib/rest');
const { ownedTempDir, removeOwnedDir } = require('./lib/reaper');

const CHILD = path.join(__dirname, 'lib', 'tls-client.js');
const CHILD_TIMEOUT_MS = 30000;

function openssl(args, cwd) {
  execFileSync('openssl', args, { cwd, stdio: ['ignore', 'ignore', 'pipe'], timeout: 20000 });
}

/** A CA and a leaf for 127.0.0.1 signed by it, as PEM files in `dir`. */
function makeCertificates(dir) {
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  openssl(['req', '-x509', ...ec, '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '2',
    '-subj', '/CN=Switchyard e2e CA',
    '-addext', 'basicConstraints=critical,CA:TRUE',
    '-addext', 'keyUsage=critical,keyCertSign,cRLSign'], dir);
  openssl(['req', ...ec, '-keyout', 'key.pem', '-out', 'leaf.csr', '-subj', '/CN=127.0.0.1'], dir);
  fs.writeFileSync(path.join(dir, 'leaf.ext'), [
    'subjectAltName=IP:127.0.0.1,DNS:localhost',
    'basicConstraints=CA:FALSE',
    'extendedKeyUsage=serverAuth',
    '',
  ].join('\n'));
  openssl(['x509', '-req', '-in', 'leaf.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial',
    '-out', 'cert.pem', '-days', '2', '-extfile', 'leaf.ext'], dir);
  return { ca: path.join(dir, 'ca.pem'), cert: path.join(dir, 'cert.pem'), key: path.join(dir, 'key.pem') };
}

/** Runs lib/tls-client.js with `job`, trusting `caFile` if given; its JSON answer. */
function runClient(job, caFile) {
  const env = childEnv();
  delete env.NODE_EXTRA_CA_CERTS;
  if (caFile) env.NODE_EXTRA_CA_CERTS = caFile;
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

describe('TLS (--tls-cert/--tls-key) with @microsoft/signalr', () => {
  let dir;
  let files;
  let service;

  before(async () => {
    dir = ownedTempDir('switchyard-e2e-tls-');
    files = makeCertificates(dir);
    service = await startService(['--tls-cert', files.cert, '--tls-key', files.key]);
  });

  after(async () => {
    if (service) await service.stop();
    if (dir) removeOwnedDir(dir);
  });

  it('prints https in the connection string', () => {
    assert.equal(service.tls, true);
    assert.match(service.connectionString, /^Endpoint=https:\/\/127\.0\.0\.1;Port=\d+;/);
  });

  async function job(transport) {
    const hub = uniqueHub('tls');
    const { url, accessToken } = await service.token({ hub, user: 'alice' });
    const restUrl = `${service.baseUrl}/api/hubs/${hub}/:send`;
    return {
      url,
      token: accessToken,
      transport,
      restUrl,
      restToken: signJwt(service.accessKey, { aud: restUrl }),
      text: `hello over ${transport}`,
    };
  }

  for (const transport of ['WebSockets', 'ServerSentEvents', 'LongPolling']) {
    it(`${transport}: connects and receives a REST broadcast over https`, async () => {
      const work = await job(transport);
      assert.match(work.url, /^https:\/\//);
      const result = await runClient(work, files.ca);
      assert.equal(result.ok, true, result.error);
      assert.equal(result.text, work.text);
      assert.equal(result.transport, {
        WebSockets: 'WebSocketTransport',
        ServerSentEvents: 'ServerSentEventsTransport',
        LongPolling: 'LongPollingTransport',
      }[transport]);
    });
  }

  it('refuses to connect without trusting the CA', async () => {
    const result = await runClient(await job('WebSockets'), undefined);
    assert.equal(result.ok, false);
    assert.match(result.error, /negotiat/i);
    assert.match(String(result.cause), /UNABLE_TO_VERIFY|CERT|self.signed|issuer/i);
  });
});
