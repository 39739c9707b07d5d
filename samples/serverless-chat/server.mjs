// The serverless chat room's app: what Azure Functions would be in an Azure deployment, in
// one file of Node's own modules.
//
// - POST /api/negotiate: mints the client's access token the way the Functions SignalR
//   input binding (SignalRConnectionInfo) does, and answers { url, accessToken }: the
//   official client follows it to the service. The name and room come from request headers.
// - POST /api/upstream/{category}/{event}: the service's upstream webhooks (configured as
//   `[[upstream.templates]]`), checked by their X-ASRS-Signature. `connected` puts the
//   connection in its room's group and tells the room; a `broadcast` invocation becomes a
//   message to the room; `disconnected` tells the room who left. All through the REST API.
// - GET /: the page (public/), and the official browser client from node_modules.
//
// Run directly with SIGNALR_CONNECTION_STRING set (start.mjs does that for you):
//   SIGNALR_CONNECTION_STRING="Endpoint=…;AccessKey=…;Version=1.0;" node server.mjs
// SIGNALR_REST_URL: where to send REST calls when the app reaches the service by another
// address than clients do (e.g. inside a compose network); tokens still name the endpoint.
// PORT (default 3000, 0 for any free port) and HOST (default 127.0.0.1).
import { createHmac, timingSafeEqual } from "node:crypto";
import { readFile } from "node:fs/promises";
import { createServer } from "node:http";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const HUB = "chat";
const HERE = path.dirname(fileURLToPath(import.meta.url));
const NAME = /^[A-Za-z0-9 _.-]{1,32}$/;
const ROOM = /^[A-Za-z0-9_-]{1,32}$/;
const TOKEN_LIFETIME_SECONDS = 3600;

/** `Endpoint=…;Port=…;AccessKey=…` as Azure's SDKs read it: the endpoint URL and the key. */
export function parseConnectionString(text) {
  const fields = Object.fromEntries(
    text.split(";").filter(Boolean).map((pair) => {
      const at = pair.indexOf("=");
      return [pair.slice(0, at).trim().toLowerCase(), pair.slice(at + 1).trim()];
    }),
  );
  if (!fields.endpoint || !fields.accesskey) throw new Error("the connection string needs Endpoint and AccessKey");
  const endpoint = new URL(fields.endpoint);
  if (fields.port) endpoint.port = fields.port;
  return { endpoint: endpoint.origin, key: fields.accesskey };
}

/** An HS256 JWT signed with the access key, as the Functions binding and the SDKs sign them. */
export function sign(key, claims) {
  const encode = (value) => Buffer.from(JSON.stringify(value)).toString("base64url");
  const now = Math.floor(Date.now() / 1000);
  const body = `${encode({ alg: "HS256", typ: "JWT" })}.${encode({ iat: now, exp: now + TOKEN_LIFETIME_SECONDS, ...claims })}`;
  return `${body}.${createHmac("sha256", key).update(body).digest("base64url")}`;
}

/**
 * X-ASRS-Signature: `sha256=<hex HMAC-SHA256 of the connection id>` per access key, comma-joined
 * (the hex and the prefix in any case, as the Functions host reads them).
 */
function signatureValid(key, connectionId, header) {
  if (!connectionId || !header) return false;
  const expected = Buffer.from(`sha256=${createHmac("sha256", key).update(connectionId).digest("hex")}`);
  return header.split(",").some((value) => {
    const given = Buffer.from(value.trim().toLowerCase());
    return given.length === expected.length && timingSafeEqual(given, expected);
  });
}

/** X-ASRS-User-Claims: `type: value, type: value`. */
function claim(header, type) {
  for (const pair of (header || "").split(", ")) {
    const at = pair.indexOf(": ");
    if (at > 0 && pair.slice(0, at) === type) return pair.slice(at + 2);
  }
  return undefined;
}

async function body(request) {
  const chunks = [];
  for await (const chunk of request) chunks.push(chunk);
  return Buffer.concat(chunks).toString("utf8");
}

function reply(response, status, value, type = "application/json") {
  const text = typeof value === "string" ? value : JSON.stringify(value);
  response.writeHead(status, { "content-type": type, "cache-control": "no-store" });
  response.end(text);
}

const STATIC = {
  "/": ["public/index.html", "text/html; charset=utf-8"],
  "/chat.js": ["public/chat.js", "text/javascript; charset=utf-8"],
  "/chat.css": ["public/chat.css", "text/css; charset=utf-8"],
};

/** The official browser client, from this sample's node_modules (`npm ci`). */
function browserClientPath() {
  const require = createRequire(import.meta.url);
  const main = require.resolve("@microsoft/signalr");
  return path.join(main.slice(0, main.lastIndexOf(`${path.sep}dist${path.sep}`)), "dist", "browser", "signalr.min.js");
}

/**
 * Starts the app. `service` is { endpoint, key, restUrl? }, or null until the service is up
 * (set it later with `setService`). Resolves to { url, port, setService, close }.
 */
export async function startChatServer({ service = null, port = 3000, host = "127.0.0.1", log = console.log } = {}) {
  let current = service;
  const rooms = new Map(); // connection id → { user, room }, for the leave notice

  async function rest(method, route, payload) {
    const audience = `${current.endpoint}/api/hubs/${HUB}${route}`;
    const url = `${current.restUrl || current.endpoint}/api/hubs/${HUB}${route}?api-version=2022-06-01`;
    const response = await fetch(url, {
      method,
      headers: { authorization: `Bearer ${sign(current.key, { aud: audience })}`, "content-type": "application/json" },
      body: payload === undefined ? undefined : JSON.stringify(payload),
    });
    if (!response.ok) throw new Error(`${method} ${route}: ${response.status} ${await response.text()}`);
  }
  const toRoom = (room, target, ...args) =>
    rest("POST", `/groups/${encodeURIComponent(room)}/:send`, { target, arguments: args });

  async function negotiate(request, response) {
    const user = request.headers["x-chat-user"];
    const room = request.headers["x-chat-room"];
    if (!NAME.test(user || "") || !ROOM.test(room || "")) {
      return reply(response, 400, { error: "a name (letters, digits, space, _.-; up to 32) and a room (letters, digits, _-) are needed" });
    }
    if (!current) return reply(response, 503, { error: "the service is not up yet" });
    const url = `${current.endpoint}/client/?hub=${HUB}`;
    // As the binding: audience = the client URL, the user id as `nameid`, app claims beside it.
    reply(response, 200, { url, accessToken: sign(current.key, { aud: url, nameid: user, room }) });
  }

  async function upstream(request, response, category, event) {
    const connectionId = request.headers["x-asrs-connection-id"];
    const text = await body(request);
    if (!current || !signatureValid(current.key, connectionId, request.headers["x-asrs-signature"])) {
      return reply(response, 401, { error: "bad signature" });
    }
    const user = request.headers["x-asrs-user-id"];
    if (category === "connections" && event === "connected") {
      const room = claim(request.headers["x-asrs-user-claims"], "room");
      if (!ROOM.test(room || "")) return reply(response, 400, { error: "no room claim" });
      rooms.set(connectionId, { user, room });
      await rest("PUT", `/groups/${encodeURIComponent(room)}/connections/${encodeURIComponent(connectionId)}`);
      await toRoom(room, "notice", `${user} joined ${room}`);
    } else if (category === "connections" && event === "disconnected") {
      const member = rooms.get(connectionId);
      rooms.delete(connectionId);
      if (member) await toRoom(member.room, "notice", `${member.user} left`);
    } else if (category === "messages" && event === "broadcast") {
      const member = rooms.get(connectionId);
      const message = JSON.parse(text);
      const said = String(message.arguments?.[0] ?? "").slice(0, 500);
      if (member && said) await toRoom(member.room, "newMessage", member.user, said);
    } else {
      return reply(response, 404, { error: `no handler for ${category}/${event}` });
    }
    // An invocation without an id gets no completion: the answer's body is ignored.
    response.writeHead(200).end();
  }

  const server = createServer(async (request, response) => {
    const url = new URL(request.url, "http://app");
    try {
      const match = url.pathname.match(/^\/api\/upstream\/([^/]+)\/([^/]+)$/);
      if (request.method === "POST" && url.pathname === "/api/negotiate") return await negotiate(request, response);
      if (request.method === "POST" && match) return await upstream(request, response, ...match.slice(1).map(decodeURIComponent));
      if (request.method === "GET" && url.pathname === "/signalr.min.js") {
        return reply(response, 200, await readFile(browserClientPath(), "utf8"), "text/javascript; charset=utf-8");
      }
      if (request.method === "GET" && STATIC[url.pathname]) {
        const [file, type] = STATIC[url.pathname];
        return reply(response, 200, await readFile(path.join(HERE, file), "utf8"), type);
      }
      reply(response, 404, { error: "not found" });
    } catch (error) {
      log(`chat: ${request.method} ${url.pathname} failed: ${error.message}`);
      if (!response.headersSent) reply(response, 500, { error: error.message });
    }
  });
  await new Promise((resolve, reject) => server.once("error", reject).listen(port, host, resolve));
  const bound = server.address().port;
  return {
    port: bound,
    url: `http://${host === "0.0.0.0" ? "localhost" : host}:${bound}/`,
    setService: (value) => { current = value; },
    close: () => new Promise((resolve) => { server.closeAllConnections(); server.close(resolve); }),
  };
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  const connectionString = process.env.SIGNALR_CONNECTION_STRING;
  if (!connectionString) {
    console.error("set SIGNALR_CONNECTION_STRING (or run start.mjs, which starts a service too)");
    process.exit(2);
  }
  const service = { ...parseConnectionString(connectionString), restUrl: process.env.SIGNALR_REST_URL };
  const app = await startChatServer({
    service,
    port: Number(process.env.PORT ?? 3000),
    host: process.env.HOST ?? "127.0.0.1",
  });
  console.log(`Chat room: ${app.url}`);
  for (const signal of ["SIGINT", "SIGTERM"]) process.on(signal, () => app.close().then(() => process.exit(0)));
}
