'use strict';
// A tiny static server for the test page, on its own port: another origin than the service.

const fs = require('node:fs');
const http = require('node:http');
const path = require('node:path');

const ROOT = path.resolve(__dirname, '..');
const FILES = {
  '/': ['page/index.html', 'text/html; charset=utf-8'],
  '/harness.js': ['page/harness.js', 'text/javascript; charset=utf-8'],
  '/signalr.min.js': [
    'node_modules/@microsoft/signalr/dist/browser/signalr.min.js',
    'text/javascript; charset=utf-8',
  ],
  '/signalr-protocol-msgpack.min.js': [
    'node_modules/@microsoft/signalr-protocol-msgpack/dist/browser/signalr-protocol-msgpack.min.js',
    'text/javascript; charset=utf-8',
  ],
};

/** Serves the page on 127.0.0.1:0; resolves to { origin, close() }. */
async function startPageServer() {
  const server = http.createServer((req, res) => {
    const file = FILES[new URL(req.url, 'http://x').pathname];
    if (!file || req.method !== 'GET') {
      res.writeHead(404, { 'Content-Type': 'text/plain' }).end('not found');
      return;
    }
    const [relative, type] = file;
    fs.readFile(path.join(ROOT, relative), (error, data) => {
      if (error) {
        res.writeHead(500, { 'Content-Type': 'text/plain' }).end(String(error));
        return;
      }
      res.writeHead(200, { 'Content-Type': type, 'Cache-Control': 'no-store' }).end(data);
    });
  });
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  const { port } = server.address();
  return {
    origin: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

module.exports = { startPageServer };
