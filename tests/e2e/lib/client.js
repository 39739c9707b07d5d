'use strict';
// Helpers around the official @microsoft/signalr client.

const assert = require('node:assert/strict');
const signalR = require('@microsoft/signalr');
const { MessagePackHubProtocol } = require('@microsoft/signalr-protocol-msgpack');

const TRANSPORTS = ['WebSockets', 'ServerSentEvents', 'LongPolling'];
const PROTOCOLS = ['json', 'messagepack'];

/** Every transport × protocol pair, with `valid` false for MessagePack over SSE. */
const MATRIX = TRANSPORTS.flatMap((transport) =>
  PROTOCOLS.map((protocol) => ({
    transport,
    protocol,
    valid: !(transport === 'ServerSentEvents' && protocol === 'messagepack'),
    name: `${transport}/${protocol}`,
  })),
);
const VALID = MATRIX.filter((c) => c.valid);

const DEFAULT_WAIT_MS = 5000;

/** Resolve/reject like `promise`, or reject after `ms` with a message naming `what`. */
function waitFor(promise, ms = DEFAULT_WAIT_MS, what = 'operation') {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

let hubCounter = 0;
/** A hub name unique within the run: a letter, then letters/digits/underscores. */
function uniqueHub(prefix = 'hub') {
  hubCounter += 1;
  return `${prefix.replace(/[^A-Za-z0-9_]/g, '_')}_${process.pid}_${hubCounter}`;
}

function clientLogLevel() {
  const wanted = (process.env.E2E_CLIENT_LOG || 'none').toLowerCase();
  const map = {
    trace: signalR.LogLevel.Trace,
    debug: signalR.LogLevel.Debug,
    info: signalR.LogLevel.Information,
    information: signalR.LogLevel.Information,
    warning: signalR.LogLevel.Warning,
    error: signalR.LogLevel.Error,
    none: signalR.LogLevel.None,
  };
  return map[wanted] !== undefined ? map[wanted] : signalR.LogLevel.None;
}

/**
 * Records every invocation of the registered client methods, in arrival order,
 * and lets a test await the next one of a given method.
 */
class Inbox {
  constructor(connection, methods) {
    this.received = []; // {method, args}
    this.cursor = new Map(); // method -> index of next unread message of that method
    this.waiters = [];
    for (const method of methods) {
      connection.on(method, (...args) => {
        this.received.push({ method, args });
        this._wake();
      });
    }
  }

  _wake() {
    for (const w of [...this.waiters]) w();
  }

  /** Messages of `method` received so far (arguments arrays). */
  all(method) {
    return this.received.filter((m) => m.method === method).map((m) => m.args);
  }

  /** The next not-yet-consumed arguments array of `method`. */
  next(method, ms = DEFAULT_WAIT_MS) {
    const p = new Promise((resolve) => {
      const check = () => {
        const seen = this.all(method);
        const i = this.cursor.get(method) || 0;
        if (seen.length > i) {
          this.cursor.set(method, i + 1);
          this.waiters = this.waiters.filter((w) => w !== check);
          resolve(seen[i]);
          return true;
        }
        return false;
      };
      if (!check()) this.waiters.push(check);
    });
    return waitFor(p, ms, `client method '${method}'`);
  }

  /** Number of `method` messages not yet consumed by next(). */
  unread(method) {
    return this.all(method).length - (this.cursor.get(method) || 0);
  }
}

/** Connections opened by the tests, stopped by closeAll(). */
const open = new Set();

/**
 * Build (and by default start) a HubConnection.
 * @returns {Promise<{connection, inbox: Inbox, closed: Promise<Error|undefined>, url: string, token: string}>}
 */
async function connect(service, {
  hub,
  user,
  claims,
  transport = 'WebSockets',
  protocol = 'json',
  skipNegotiation = false,
  token,
  url,
  methods = ['msg', 'marker', 'args', 'noargs'],
  start = true,
} = {}) {
  if (token === undefined || url === undefined) {
    const minted = await service.token({ hub, user, claims });
    if (token === undefined) token = minted.accessToken;
    if (url === undefined) url = minted.url;
  }
  return build({
    url,
    options: { transport: signalR.HttpTransportType[transport], skipNegotiation, accessTokenFactory: () => token },
    transport,
    protocol,
    methods,
    start,
    extra: { url, token },
  });
}

/**
 * Build (and by default start) a HubConnection to an app server's hub (Default mode): the
 * client negotiates at `${app.baseUrl}/${hub}/negotiate?user=…`, is redirected to the service
 * with the app server's token, negotiates there and connects. `handlers` are client methods
 * that return a value (client results), e.g. `{ Ask: (x) => x * 2 }`.
 * @returns {Promise<{connection, inbox: Inbox, closed: Promise<Error|undefined>, url: string, app, user}>}
 */
async function connectApp(app, {
  hub,
  user,
  transport = 'WebSockets',
  protocol = 'json',
  methods = ['Measure'],
  handlers = {},
  start = true,
  reconnect,
} = {}) {
  const url = app.hubUrl(hub, user);
  return build({
    url,
    options: { transport: signalR.HttpTransportType[transport] },
    transport,
    protocol,
    methods,
    handlers,
    start,
    reconnect,
    extra: { url, app, user, name: `${transport}/${protocol}` },
  });
}

/** `reconnect`: retry delays (ms) for `withAutomaticReconnect`; none: no reconnecting. */
async function build({ url, options, transport, protocol, methods, handlers = {}, start, reconnect, extra }) {
  let builder = new signalR.HubConnectionBuilder()
    .withUrl(url, options)
    .configureLogging(clientLogLevel());
  if (reconnect) builder = builder.withAutomaticReconnect(reconnect);
  if (protocol === 'messagepack') builder = builder.withHubProtocol(new MessagePackHubProtocol());
  const connection = builder.build();
  const inbox = new Inbox(connection, methods);
  for (const [method, handler] of Object.entries(handlers)) connection.on(method, handler);
  let resolveClosed;
  const closed = new Promise((r) => {
    resolveClosed = r;
  });
  connection.onclose((error) => resolveClosed(error));
  open.add(connection);
  const handle = { connection, inbox, closed, ...extra };
  if (start) await waitFor(connection.start(), 10000, `start() over ${transport}/${protocol} (${url})`);
  return handle;
}

/**
 * Start `connection` expecting start() to fail; resolves with the error start() rejected with.
 *
 * @microsoft/signalr creates its handshake promise before it sends the handshake request and
 * attaches a handler to it only once that send has completed. Over SSE and long polling the
 * send is an HTTP POST, so a handshake *error* that the service writes to the other HTTP
 * stream can arrive before the POST's response and reject that promise while nothing handles
 * it yet. Node reports that as an unhandled rejection (node:test fails the running test),
 * although the client handles it a moment later and start() rejects with that same error.
 * While start() runs, such a rejection whose message matches `expected` is not passed on to
 * node:test; any other is.
 */
async function startFailure(connection, expected, ms = 10000) {
  const listeners = process.listeners('unhandledRejection');
  const filter = (reason, promise) => {
    if (reason instanceof Error && expected.test(reason.message)) return;
    for (const l of listeners) l(reason, promise);
  };
  const handledLate = () => {}; // and no PromiseRejectionHandledWarning for it
  process.removeAllListeners('unhandledRejection');
  process.on('unhandledRejection', filter);
  process.on('rejectionHandled', handledLate);
  try {
    return await waitFor(connection.start().then(() => undefined, (e) => e), ms, 'start() to fail');
  } finally {
    process.removeListener('unhandledRejection', filter);
    for (const l of listeners) process.on('unhandledRejection', l);
    // Let a late rejectionHandled event find the listener before it goes.
    await new Promise(setImmediate);
    process.removeListener('rejectionHandled', handledLate);
  }
}

async function closeAll() {
  const all = [...open];
  open.clear();
  await Promise.all(
    all.map((c) => waitFor(c.stop(), 5000, 'stop()').catch(() => {})),
  );
}

/**
 * Assert that none of `inboxes` has an unread `method` message (one not taken
 * by next()), including any still in flight: sends one broadcast marker via
 * `sendMarker(tag)` and waits until every inbox has it; because a connection's
 * messages arrive in order, anything sent to it before the marker has been seen
 * by then. No waiting time can prove that, so the marker is required.
 */
async function expectNothing(inboxes, method, sendMarker) {
  assert.equal(typeof sendMarker, 'function', 'expectNothing needs a marker to send');
  const list = Array.isArray(inboxes) ? inboxes : [inboxes];
  const tag = `marker-${Math.random().toString(36).slice(2)}`;
  await sendMarker(tag);
  await Promise.all(
    list.map(async (inbox) => {
      for (;;) {
        const [got] = await inbox.next('marker');
        if (got === tag) break;
      }
    }),
  );
  for (const inbox of list) {
    const unread = inbox.unread(method);
    if (unread !== 0) {
      const all = inbox.all(method);
      throw new Error(`expected no '${method}' message, but got ${JSON.stringify(all.slice(all.length - unread))}`);
    }
  }
}

module.exports = {
  signalR,
  MessagePackHubProtocol,
  TRANSPORTS,
  PROTOCOLS,
  MATRIX,
  VALID,
  waitFor,
  sleep,
  uniqueHub,
  Inbox,
  connect,
  connectApp,
  startFailure,
  closeAll,
  expectNothing,
};
