// The serverless chat page on the compose cluster (packaging/compose/compose.yaml, started by
// packaging/compose/test.sh, which sets CHAT_URL, PODMAN and COMPOSE_PROJECT): two Chromium
// pages whose connections are on different nodes (each node's /metrics says how many clients
// it holds) chat through Redis, one leaves and the other sees it. Screenshots in
// target/sample-screenshots/.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import { joinChat, launch, say, screenshot, sees } from "./lib.mjs";

const run = promisify(execFile);
const NODES = ["node1", "node2", "node3"];
const { CHAT_URL, PODMAN, COMPOSE_PROJECT } = process.env;

/** Clients a node holds: its `switchyard_client_connections` series summed, read inside its container. */
async function clientsOn(node) {
  const request = 'exec 3<>/dev/tcp/127.0.0.1/8888; printf "GET /metrics HTTP/1.0\\r\\n\\r\\n" >&3; cat <&3';
  const { stdout } = await run(PODMAN, ["exec", `${COMPOSE_PROJECT}_${node}_1`, "bash", "-c", request]);
  return stdout
    .split("\n")
    .filter((line) => line.startsWith("switchyard_client_connections{"))
    .reduce((sum, line) => sum + Number(line.split(" ").pop()), 0);
}

async function clientsPerNode() {
  return Object.fromEntries(await Promise.all(NODES.map(async (node) => [node, await clientsOn(node)])));
}

/** The node whose count went up by one since `before`, once the counts settle. */
async function nodeOfNewClient(before) {
  for (let attempt = 0; attempt < 50; attempt++) {
    const now = await clientsPerNode();
    const grown = NODES.filter((node) => now[node] === before[node] + 1);
    if (grown.length === 1) return [grown[0], now];
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  assert.fail("no node counts the new client");
}

describe("the chat sample on the compose cluster", { skip: !CHAT_URL && "run by packaging/compose/test.sh" }, () => {
  let browser;
  before(async () => {
    browser = await launch();
  });
  after(async () => {
    await browser?.close();
  });

  it("pages on different nodes chat, and a leave is seen", async () => {
    let counts = await clientsPerNode();
    const alice = await joinChat(browser, CHAT_URL, "alice", "lobby");
    let aliceNode;
    [aliceNode, counts] = await nodeOfNewClient(counts);
    // nginx picks the node; join again until bob's connection is on another one.
    let bob;
    let bobNode;
    for (let attempt = 1; ; attempt++) {
      bob = await joinChat(browser, CHAT_URL, attempt === 1 ? "bob" : `bob${attempt}`, "lobby");
      [bobNode, counts] = await nodeOfNewClient(counts);
      if (bobNode !== aliceNode) break;
      assert.ok(attempt < 6, `six joins in a row landed on ${aliceNode}`);
      await bob.context.close();
      await sees(alice, `${bob.name} left`);
      counts = await clientsPerNode();
    }
    console.log(`alice is on ${aliceNode}, ${bob.name} on ${bobNode}`);
    await sees(alice, `${bob.name} joined lobby`);

    await say(alice, "hello from " + aliceNode);
    await sees(bob, `alice: hello from ${aliceNode}`);
    await say(bob, "hello from " + bobNode);
    await sees(alice, `${bob.name}: hello from ${bobNode}`);
    await screenshot(alice, "cluster-alice");
    await screenshot(bob, "cluster-bob");

    await bob.page.click("#leave");
    await sees(alice, `${bob.name} left`);
    await screenshot(alice, "cluster-alice-after-bob-left");
    for (const person of [alice, bob]) assert.deepEqual(person.errors, [], `${person.name}'s console`);
  });
});
