// One command for the serverless chat room: starts the app (server.mjs), then a Switchyard
// service whose upstream template points at it, and prints the page's address.
//
//   npm start                 (after npm ci; or ./run.sh, which does both)
//
// The service runs in development mode (the Emulator's key, loopback only), in memory.
// SWITCHYARD: the binary (default: `switchyard` on PATH, else this repository's
// target/release or target/debug build). SERVICE_PORT (default 8888) and CHAT_PORT (default
// 3000); 0 picks a free port.
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { parseConnectionString, startChatServer } from "./server.mjs";

const HERE = path.dirname(fileURLToPath(import.meta.url));

function switchyardBinary() {
  if (process.env.SWITCHYARD) return process.env.SWITCHYARD;
  const onPath = (process.env.PATH || "").split(path.delimiter).map((dir) => path.join(dir, "switchyard"));
  const built = ["release", "debug"].map((profile) => path.join(HERE, "..", "..", "target", profile, "switchyard"));
  const found = [...onPath, ...built].find((file) => existsSync(file));
  if (!found) {
    console.error("no switchyard binary: cargo build --release -p switchyard (or set SWITCHYARD)");
    process.exit(1);
  }
  return found;
}

const app = await startChatServer({ port: Number(process.env.CHAT_PORT ?? 3000) });
const folder = mkdtempSync(path.join(tmpdir(), "switchyard-chat-"));
const config = path.join(folder, "switchyard.toml");
// Upstream templates are file settings: every event of the hub "chat" goes to the app.
writeFileSync(config, `listen = "127.0.0.1:${process.env.SERVICE_PORT ?? 8888}"

[[upstream.templates]]
url_template = "http://127.0.0.1:${app.port}/api/upstream/{category}/{event}"
hub_pattern = "chat"
`);

const service = spawn(switchyardBinary(), ["serve", "--config", config], { stdio: ["ignore", "pipe", "inherit"] });
let stopping = false;
function stop(code) {
  stopping = true;
  service.kill("SIGTERM");
  rmSync(folder, { recursive: true, force: true });
  app.close().then(() => process.exit(code));
}
service.on("exit", (code) => {
  if (!stopping) {
    console.error(`switchyard exited (${code})`);
    stop(1);
  }
});
for (const signal of ["SIGINT", "SIGTERM"]) process.on(signal, () => stop(0));

for await (const line of createInterface({ input: service.stdout })) {
  console.log(`switchyard: ${line}`);
  const connectionString = line.match(/^ConnectionString: (.*)$/);
  if (connectionString) {
    app.setService(parseConnectionString(connectionString[1]));
    console.log(`Chat room: ${app.url}  (open it in two browser windows)`);
  }
}
