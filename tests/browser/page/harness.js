// Runs in the page (another origin than the service). The test calls these through
// Playwright's page.evaluate; every call returns plain data, errors included.
'use strict';

window.harness = (() => {
  const connections = new Map();
  const inbox = new Map();

  function describe(error) {
    return { error: String((error && error.message) || error), name: error && error.name };
  }

  /**
   * Start a connection named `name` with one transport ('WebSockets', 'ServerSentEvents',
   * 'LongPolling') and protocol ('json' or 'messagepack'). Every `newMessage` it receives is kept.
   */
  async function connect(name, { url, token, transport, protocol = 'json', skipNegotiation = false }) {
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
    const connection = builder.build();
    inbox.set(name, []);
    connection.on('newMessage', (...args) => inbox.get(name).push(args));
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

  return { connect, received, rest, stopAll };
})();
