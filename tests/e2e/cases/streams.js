'use strict';
// 12. Streams in Default mode, both ways, through the service unchanged: the official client's
//     `stream()` (StreamInvocation → StreamItems → Completion; dispose → CancelInvocation) and
//     upload streams (`send`/`invoke`/`stream` with a `signalR.Subject` argument: streamIds,
//     StreamItems, Completion), over every transport × protocol, against the benchmark hub's
//     `Counter(count, delayMs)`, `Upload([tag,] stream)` and `EchoStream(stream)`.

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { VALID, connectApp, closeAll, uniqueHub, waitFor, sleep, signalR } = require('../lib/client');
const { startAppServer } = require('../lib/appserver');

/** Items per stream: a few thousand, each checked in order. */
const ITEMS = 3000;
/**
 * Upload items over SSE and long polling: the client sends each item only once the POST of the
 * one before has been answered (one round trip per item, about 1.5 ms on a debug build).
 */
const HTTP_UPLOAD_ITEMS = 1000;
/** The same for the other upload checks, which would otherwise dominate the run's time. */
const HTTP_UPLOAD_ITEMS_SHORT = 300;
const STREAM_WAIT_MS = 20000;
/** A stream faster than the client reads (see the flow-control test). */
const FAST_ITEMS = Number(process.env.E2E_FAST_STREAM_ITEMS || 50000);

let idCounter = 0;
function serverId(name) {
  idCounter += 1;
  return `e2e-${name}-${process.pid}-${idCounter}`;
}

const range = (n) => Array.from({ length: n }, (_, i) => i);

/** Every item of `stream(method, ...args)` once it completes; rejects with its error. */
function collect(h, method, ...args) {
  const items = [];
  const done = new Promise((resolve, reject) => {
    h.connection.stream(method, ...args).subscribe({
      next: (item) => items.push(item),
      complete: () => resolve(items),
      error: (e) => reject(e),
    });
  });
  return waitFor(done, STREAM_WAIT_MS, `${h.label}: stream('${method}') to complete`);
}

/** A Subject that is fed `values` and then completed (or failed with `error`), in the background. */
function feed(values, { error, every = 500 } = {}) {
  const subject = new signalR.Subject();
  const run = async () => {
    for (const v of values) {
      subject.next(v);
      // Give the client's send loop a turn now and then, as a real producer would.
      if (v % every === every - 1) await sleep(0);
    }
    if (error) subject.error(new Error(error));
    else subject.complete();
  };
  return { subject, run };
}

function expectSummary(got, tag, n) {
  assert.deepEqual(got, { tag, count: n, sum: (n * (n - 1)) / 2, inOrder: true, first: 0, last: n - 1 });
}

module.exports = (env) => {
  describe('12. Streams through the service (Default mode, switchyard-bench)', () => {
    const hubs = new Map(VALID.map((combo) => [combo.name, uniqueHub('st')]));
    let app;

    before(async () => {
      app = await startAppServer(env.service, { serverId: serverId('streams'), hubs: [...hubs.values()] });
    });
    after(async () => {
      await closeAll();
      if (app) await app.stop();
    });

    for (const combo of VALID) {
      describe(combo.name, () => {
        let h;
        const ws = combo.transport === 'WebSockets';
        const uploads = ws ? ITEMS : HTTP_UPLOAD_ITEMS;
        const shortUploads = ws ? ITEMS : HTTP_UPLOAD_ITEMS_SHORT;
        before(async () => {
          h = await connectApp(app, {
            hub: hubs.get(combo.name),
            user: 'streamer',
            methods: ['Uploaded', 'StreamCancelled'],
            ...combo,
          });
          h.label = combo.name;
        });

        it(`server to client: stream('Counter', ${ITEMS}) delivers every item in order, then completes`, async () => {
          const items = await collect(h, 'Counter', ITEMS, 0);
          assert.equal(items.length, ITEMS);
          assert.deepEqual(items, range(ITEMS));
        });

        if (combo.transport !== 'ServerSentEvents') {
          // Faster than this client reads: without flow control the service's queue for the
          // client overflowed and closed it as a slow consumer (after 11,086 items on
          // WebSockets/JSON, 3,047 on long polling). The service now asks the app server to
          // pause (ConnectionFlowControl) and to resume once the backlog is written.
          it(`a fast stream of ${FAST_ITEMS} items is paced by flow control: all arrive, the client stays connected`, async () => {
            const items = await waitFor(
              new Promise((resolve, reject) => {
                const got = [];
                h.connection.stream('Counter', FAST_ITEMS, 0).subscribe({
                  next: (item) => {
                    got.push(item);
                    // A slow reader: the event loop is busy now and then, so the socket
                    // backs up and the service's queue for this client grows.
                    if (item % 500 === 499) {
                      const until = Date.now() + 50;
                      while (Date.now() < until);
                    }
                  },
                  complete: () => resolve(got),
                  error: reject,
                });
              }),
              120000,
              `${h.label}: stream('Counter', ${FAST_ITEMS}) to complete`,
            );
            assert.equal(items.length, FAST_ITEMS);
            assert.ok(items.every((item, i) => item === i), 'in order, each once');
            assert.equal(h.connection.state, signalR.HubConnectionState.Connected);
          });
        }

        it('two streams at once on one connection each arrive in order', async () => {
          const [a, b] = await Promise.all([collect(h, 'Counter', ITEMS, 0), collect(h, 'Counter', 200, 1)]);
          assert.deepEqual(a, range(ITEMS));
          assert.deepEqual(b, range(200));
        });

        it('disposing the subscription cancels the stream: the app server stops it', async () => {
          const items = [];
          let subscription;
          const gotSome = new Promise((resolve, reject) => {
            subscription = h.connection.stream('Counter', 1000000, 2).subscribe({
              next: (item) => {
                items.push(item);
                if (items.length === 20) resolve();
              },
              complete: () => reject(new Error('the stream completed instead of being cancelled')),
              error: reject,
            });
          });
          await waitFor(gotSome, STREAM_WAIT_MS, `${h.label}: 20 Counter items`);
          subscription.dispose(); // sends CancelInvocation
          // The app server reports the cancel when its stream is dropped, with what it produced.
          const [produced] = await h.inbox.next('StreamCancelled', STREAM_WAIT_MS);
          assert.ok(produced >= 20 && produced < 1000000, `produced ${produced}`);
          assert.deepEqual(items.slice(0, 20), range(20));
          // The connection goes on working, and a new stream starts from 0.
          assert.deepEqual(await collect(h, 'Counter', 10, 0), range(10));
          assert.equal(h.inbox.unread('StreamCancelled'), 0, 'only one stream was cancelled');
        });

        it(`client to server: send('Upload', subject) with ${uploads} items reaches the app server in order`, async () => {
          const { subject, run } = feed(range(uploads));
          await waitFor(h.connection.send('Upload', 'sent', subject), 5000, `${h.label}: send('Upload')`);
          await run();
          const [summary] = await h.inbox.next('Uploaded', STREAM_WAIT_MS);
          expectSummary(summary, 'sent', uploads);
        });

        it('client to server: invoke(\'Upload\', subject) resolves with the summary once the subject completes', async () => {
          const { subject, run } = feed(range(shortUploads));
          const result = h.connection.invoke('Upload', 'invoked', subject);
          await run();
          expectSummary(await waitFor(result, STREAM_WAIT_MS, `${h.label}: invoke('Upload')`), 'invoked', shortUploads);
          expectSummary((await h.inbox.next('Uploaded'))[0], 'invoked', shortUploads);
        });

        it('an upload the client fails ends with its error at the app server', async () => {
          const { subject, run } = feed(range(10), { error: 'boom' });
          await h.connection.send('Upload', 'failed', subject);
          await run();
          const [summary] = await h.inbox.next('Uploaded', STREAM_WAIT_MS);
          assert.equal(summary.tag, 'failed');
          assert.match(summary.error, /boom/);
        });

        it(`both ways at once: stream('EchoStream', subject) echoes ${shortUploads} items in order`, async () => {
          const { subject, run } = feed(range(shortUploads));
          const echoed = collect(h, 'EchoStream', subject);
          await run();
          assert.deepEqual(await echoed, range(shortUploads));
        });

        it('streaming and non-streaming methods called the wrong way fail with ASP.NET\'s errors', async () => {
          await assert.rejects(collect(h, 'GetServerId'), /non-streaming 'GetServerId' method with a streaming invocation/);
          await assert.rejects(h.connection.invoke('Counter', 1, 0), /streaming 'Counter' method with a non-streaming invocation/);
          await assert.rejects(collect(h, 'NoSuchStream'), /Unknown hub method 'NoSuchStream'/);
          // Still connected and serving.
          assert.equal(await h.connection.invoke('GetServerId'), app.serverId);
        });
      });
    }
  });
};
