// The official JavaScript client against an installed service, as a user would connect: a
// token signed with the service's access key, a WebSocket, a REST broadcast it must receive.
//
//   node smoke-client.mjs ENDPOINT ACCESS_KEY            connect, receive a REST send, leave
//   node smoke-client.mjs ENDPOINT ACCESS_KEY --hold     connect, then wait for the service to
//                                                        close the connection (a graceful stop)
// Prints what happened on stdout; exit status 0 when it went as expected.
import { createHmac } from "node:crypto";
import * as signalR from "@microsoft/signalr";

const [endpoint, key, mode] = process.argv.slice(2);
if (!endpoint || !key) {
  console.error("usage: node smoke-client.mjs ENDPOINT ACCESS_KEY [--hold]");
  process.exit(2);
}
const hub = "smoke";

// An HS256 token as Azure SignalR Service's SDKs sign them: the key's UTF-8 bytes are the secret.
function token(audience, claims = {}) {
  const encode = (value) => Buffer.from(JSON.stringify(value)).toString("base64url");
  const now = Math.floor(Date.now() / 1000);
  const body = `${encode({ alg: "HS256", typ: "JWT" })}.${encode({ aud: audience, iat: now, exp: now + 600, ...claims })}`;
  return `${body}.${createHmac("sha256", key).update(body).digest("base64url")}`;
}

const fail = (why) => {
  console.log(`FAILED: ${why}`);
  process.exit(1);
};
setTimeout(() => fail("timed out"), 60_000).unref();

const clientUrl = `${endpoint}/client/?hub=${hub}`;
const connection = new signalR.HubConnectionBuilder()
  .withUrl(clientUrl, {
    accessTokenFactory: () => token(clientUrl, { nameid: "smoke-user" }),
    transport: signalR.HttpTransportType.WebSockets,
  })
  .configureLogging(signalR.LogLevel.Warning)
  .build();
const received = new Promise((resolve) => connection.on("smoke", resolve));
const closed = new Promise((resolve) => connection.onclose(resolve));
await connection.start().catch((e) => fail(`start: ${e.message}`));
console.log(`connected ${connection.connectionId}`);

if (mode === "--hold") {
  const error = await closed;
  // A graceful stop is the service's Close message: the client reports it as an error that
  // carries the server's reason, not as a broken socket.
  console.log(`closed by the service: ${error ? error.message : "no error"}`);
  process.exit(0);
}

const sendUrl = `${endpoint}/api/hubs/${hub}/:send?api-version=2022-06-01`;
const response = await fetch(sendUrl, {
  method: "POST",
  headers: { Authorization: `Bearer ${token(sendUrl.split("?")[0])}`, "Content-Type": "application/json" },
  body: JSON.stringify({ target: "smoke", arguments: ["hello"] }),
});
if (response.status !== 202) fail(`REST send answered ${response.status}: ${await response.text()}`);
const argument = await received;
if (argument !== "hello") fail(`received ${JSON.stringify(argument)}`);
console.log("received the REST broadcast");
await connection.stop();
console.log("ok");
