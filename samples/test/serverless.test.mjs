// The serverless chat sample (samples/serverless-chat), started with its own one command
// (start.mjs: the app and a service in development mode), in two Chromium pages: they join a
// room, chat both ways (an upstream webhook per message, REST sends back), a page in another
// room hears nothing, one leaves and the other sees it. Screenshots in target/sample-screenshots/.
import assert from "node:assert/strict";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { REPO, binary, childEnv, joinChat, launch, lines, say, screenshot, sees, start } from "./lib.mjs";

describe("serverless chat sample", () => {
  let sample;
  let browser;
  before(async () => {
    sample = await start(process.execPath, [path.join(REPO, "samples/serverless-chat/start.mjs")], {
      env: childEnv({ CHAT_PORT: "0", SERVICE_PORT: "0", SWITCHYARD: binary("switchyard") }),
      ready: /^Chat room: (\S+)/,
    });
    browser = await launch();
  });
  after(async () => {
    if (process.env.DEBUG_SAMPLES) console.log(sample?.output.join(""));
    await browser?.close();
    if (sample) assert.equal(await sample.stop(), 0, "start.mjs stops cleanly");
  });

  it("two pages chat in a room, another room hears nothing, and a leave is seen", async () => {
    const url = sample.match[1];
    const alice = await joinChat(browser, url, "alice", "lobby");
    const bob = await joinChat(browser, url, "bob", "lobby");
    const carol = await joinChat(browser, url, "carol", "garden");
    await sees(alice, "bob joined lobby");
    await sees(bob, "bob joined lobby");

    await say(alice, "hello bob");
    await sees(bob, "alice: hello bob");
    await say(bob, "hi alice");
    await sees(alice, "bob: hi alice");
    await say(carol, "anyone in the garden?");
    await sees(carol, "carol: anyone in the garden?");
    assert.deepEqual(
      (await lines(carol)).filter((line) => /alice|bob/.test(line)),
      [],
      "the garden hears nothing of the lobby",
    );
    assert.ok(!(await lines(alice)).some((line) => line.includes("garden?")), "the lobby hears nothing of the garden");
    await screenshot(alice, "serverless-alice");
    await screenshot(bob, "serverless-bob");

    await bob.page.click("#leave");
    await sees(alice, "bob left");
    await bob.page.waitForFunction(() => document.getElementById("status").textContent === "not connected");
    await say(alice, "bye");
    await sees(alice, "alice: bye");
    assert.ok(!(await lines(bob)).includes("alice: bye"), "who left hears no more");
    await screenshot(alice, "serverless-alice-after-bob-left");
    for (const person of [alice, bob, carol]) assert.deepEqual(person.errors, [], `${person.name}'s console`);
  });
});
