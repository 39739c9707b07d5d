'use strict';
// A TCP proxy owned by a test: it passes bytes both ways between its clients and a target
// port, and can cut the client WebSockets it carries (both TCP connections destroyed, no
// WebSocket close) to play a network blip. Only sockets whose first request is a WebSocket
// upgrade of `/client` are cut: negotiate, REST and app servers' `/server` sockets are not.
// A socket is cut only once it has been open for `settleMs` after its 101: the official
// client makes a single attempt to come back, and gives up if that one is cut as well.

const net = require('node:net');

class CutProxy {
  constructor({ settleMs = 50 } = {}) {
    this.settleMs = settleMs;
    this.target = undefined; // port, set before the first connection
    this.cuttable = new Set();
    this.cuts = 0;
    this.server = net.createServer((socket) => this.accept(socket));
  }

  async start() {
    await new Promise((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.port = this.server.address().port;
    this.baseUrl = `http://127.0.0.1:${this.port}`;
    return this;
  }

  /** New connections in the next `ms` wait that long before they reach the target. */
  delayNew(ms) {
    this.delayUntil = Date.now() + ms;
  }

  accept(socket) {
    const wait = Math.max(0, (this.delayUntil || 0) - Date.now());
    if (wait > 0) {
      socket.pause();
      setTimeout(() => {
        this.connect(socket);
        socket.resume();
      }, wait);
      return;
    }
    this.connect(socket);
  }

  connect(socket) {
    if (socket.destroyed) return;
    const upstream = net.connect(this.target, '127.0.0.1');
    const pair = { socket, upstream, openAt: undefined };
    socket.setNoDelay(true);
    upstream.setNoDelay(true);
    socket.once('data', (first) => {
      const head = first.toString('latin1', 0, Math.min(first.length, 2048));
      if (!/^GET \/client/.test(head) || !/\r\nupgrade:\s*websocket/i.test(head)) return;
      upstream.once('data', (answer) => {
        if (answer.toString('latin1', 0, 12) === 'HTTP/1.1 101') {
          pair.openAt = Date.now();
          this.cuttable.add(pair);
        }
      });
    });
    socket.pipe(upstream);
    upstream.pipe(socket);
    const end = () => {
      this.cuttable.delete(pair);
      socket.destroy();
      upstream.destroy();
    };
    socket.on('error', end);
    upstream.on('error', end);
    socket.on('close', end);
    upstream.on('close', end);
  }

  /** Cuts every client WebSocket open for `settleMs`; returns how many. */
  cut() {
    const now = Date.now();
    const pairs = [...this.cuttable].filter((p) => now - p.openAt >= this.settleMs);
    for (const p of pairs) this.cuttable.delete(p);
    for (const { socket, upstream } of pairs) {
      // A reset on both sides: neither peer gets a WebSocket close frame.
      socket.resetAndDestroy();
      upstream.resetAndDestroy();
    }
    this.cuts += pairs.length;
    return pairs.length;
  }

  stop() {
    for (const { socket, upstream } of this.cuttable) {
      socket.destroy();
      upstream.destroy();
    }
    return new Promise((resolve) => this.server.close(resolve));
  }
}

module.exports = { CutProxy };
