// Runs in the page (another origin than the service). The test calls these through
// Playwright's page.evaluate; every call returns plain data, errors included.
'use strict';

window.harness = (() => {
  const connections = new Map();
  const inbox = new Map();
  // Stateful reconnect: numbers received (`n(i)` or `Measure(i, …)`) and reconnect attempts.
  const numbers = new Map();
  const reconnecting = new Map();

  function describe(error) {
    return { error: String((error && error.message) || error), name: error && error.name };
  }

  /**
   * Start a connection named `name` with one transport ('WebSockets', 'ServerSentEvents',
   * 'LongPolling') and protocol ('json' or 'messagepack'). Every `newMessage` it receives is kept.
   */
  async function connect(name, { url, token, transport, protocol = 'json', skipNegotiation = false, stateful = false }) {
    const builder = new signalR.HubConnectionBuilder()
      .withUrl(url, {
        transport: signalR.HttpTransportType[transport],
        accessTokenFactory: () => token,
        skipNegotiation,
      })
      .configureLogging(signalR.LogLevel.Warning);
    if (protocol === 'messagepack') {
      builder.withHubProtocol(new signalR.protocols.msgpack.MessagePackHubProtocol());
    }
    if (stateful) builder.withStatefulReconnect();
    const connection = builder.build();
    inbox.set(name, []);
    numbers.set(name, []);
    reconnecting.set(name, 0);
    connection.on('newMessage', (...args) => inbox.get(name).push(args));
    // Handlers return nothing: a value would be taken for a client result.
    connection.on('n', (n) => {
      numbers.get(name).push(n);
    });
    connection.on('Measure', (n) => {
      numbers.get(name).push(n);
    });
    connection.onreconnecting(() => reconnecting.set(name, reconnecting.get(name) + 1));
    connections.set(name, connection);
    try {
      await connection.start();
      return { connectionId: connection.connectionId, state: connection.state };
    } catch (e) {
      return { ...describe(e), state: connection.state };
    }
  }

  function received(name) {
    return inbox.get(name) || [];
  }

  /**
   * Sends `method(i, ...extra)` for i = first..last without waiting for answers, about one per
   * `everyMs` ms (a steady stream, not a burst); resolves with an error description or null.
   */
  async function sendNumbers(name, method, first, last, extra = [], everyMs = 1) {
    const connection = connections.get(name);
    try {
      for (let i = first; i <= last; i += 1) {
        await connection.send(method, i, ...extra);
        if (i % 10 === 0) await new Promise((resolve) => setTimeout(resolve, 10 * everyMs));
      }
      return null;
    } catch (e) {
      return describe(e);
    }
  }

  /** What the test checks after the resets. */
  function status(name) {
    const connection = connections.get(name);
    return {
      state: connection.state,
      connectionId: connection.connectionId,
      reconnecting: reconnecting.get(name),
      stateful: Boolean(connection.connection.features.reconnect),
      count: numbers.get(name).length,
    };
  }

  function numbersOf(name) {
    return numbers.get(name) || [];
  }

  /** A REST call made by the page itself (cross-origin, preflighted: Authorization + JSON). */
  async function rest(method, url, token, body) {
    try {
      const response = await fetch(url, {
        method,
        mode: 'cors',
        credentials: 'include',
        headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      return { status: response.status, text: await response.text() };
    } catch (e) {
      return describe(e);
    }
  }

  async function stopAll() {
    await Promise.all([...connections.values()].map((c) => c.stop().catch(() => {})));
    connections.clear();
  }

  return { connect, received, rest, stopAll, sendNumbers, status, numbersOf };
})();
