'use strict';
// Run in a child `node` whose NODE_EXTRA_CA_CERTS names the test's CA (Node reads it only at
// start): connects the official client over one transport, asks for a REST broadcast over
// https, and prints one JSON line with what it received, or with the error.
//
// Input (JSON in argv[2]): {url, token, transport, restUrl, restToken, text}, and optionally
// `negotiateOrigin` (the negotiate goes to that node, every later request to `url`'s, so the
// transport is passed on between nodes) and `echo` (also invoke('echo', echo) and report the
// result: a message from the client to the service and back).

const signalR = require('@microsoft/signalr');

const WAIT_MS = 10000;

/** Sends the negotiate to another origin than the connection's other requests. */
class NegotiateElsewhere extends signalR.DefaultHttpClient {
  constructor(origin) {
    super(signalR.NullLogger.instance);
    this.origin = new URL(origin);
  }

  send(request) {
    const url = new URL(request.url);
    if (url.pathname.endsWith('/negotiate')) {
      url.protocol = this.origin.protocol;
      url.host = this.origin.host;
      return super.send({ ...request, url: url.toString() });
    }
    return super.send(request);
  }
}

async function main() {
  const job = JSON.parse(process.argv[2]);
  const connection = new signalR.HubConnectionBuilder()
    .withUrl(job.url, {
      transport: signalR.HttpTransportType[job.transport],
      accessTokenFactory: () => job.token,
      ...(job.negotiateOrigin ? { httpClient: new NegotiateElsewhere(job.negotiateOrigin) } : {}),
    })
    .configureLogging(signalR.LogLevel.None)
    .build();
  const received = new Promise((resolve) => connection.on('Notify', (text) => resolve(text)));
  await connection.start();
  const response = await fetch(`${job.restUrl}?api-version=2022-06-01`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${job.restToken}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ target: 'Notify', arguments: [job.text] }),
    signal: AbortSignal.timeout(WAIT_MS),
  });
  if (response.status !== 202) throw new Error(`REST broadcast answered ${response.status}`);
  let timer;
  const text = await Promise.race([
    received,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error('no Notify within 10 s')), WAIT_MS);
    }),
  ]);
  clearTimeout(timer);
  const echoed = job.echo === undefined ? undefined : await connection.invoke('echo', job.echo);
  const transport = connection.connection && connection.connection.transport
    ? connection.connection.transport.constructor.name
    : undefined;
  await connection.stop();
  return { ok: true, text, transport, echoed };
}

main().then(
  (result) => {
    console.log(JSON.stringify(result));
    process.exit(0);
  },
  async (error) => {
    // The client's message hides why fetch failed; one plain request shows the TLS cause.
    let cause;
    try {
      await fetch(new URL('/api/health', JSON.parse(process.argv[2]).url), { signal: AbortSignal.timeout(WAIT_MS) });
    } catch (e) {
      cause = e.cause ? e.cause.code || e.cause.message : String(e);
    }
    console.log(JSON.stringify({ ok: false, error: String(error && error.message ? error.message : error), cause }));
    process.exit(0);
  },
);
