// The Default-mode chat sample (samples/default-mode-chat, an app server on the Rust SDK)
// against a service in development mode, in Chromium pages: they join a room through the app
// server's negotiate redirect, chat both ways, run a poll that the app server answers with
// client results (it invokes `answerPoll` on each member and waits for the button clicked),
// one leaves with the Leave button and one by closing its tab, and the others see both.
// Screenshots in target/sample-screenshots/.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { binary, joinChat, launch, lines, say, screenshot, sees, start, WAIT_MS } from "./lib.mjs";

describe("Default-mode chat sample", () => {
  let service;
  let app;
  let browser;
  before(async () => {
    service = await start(binary("switchyard"), ["serve", "--listen", "127.0.0.1:0"], {
      ready: /^ConnectionString: (.*)$/,
    });
    app = await start(binary("default-mode-chat"), ["--connection-string", service.match[1], "--listen", "127.0.0.1:0"], {
      ready: /^Chat room: (\S+)/,
    });
    browser = await launch();
  });
  after(async () => {
    if (process.env.DEBUG_SAMPLES) console.log(service?.output.join(""), app?.output.join(""));
    await browser?.close();
    if (app) assert.equal(await app.stop(), 0, "the app server stops cleanly on SIGTERM");
    if (service) assert.equal(await service.stop(), 0, "the service stops cleanly on SIGTERM");
  });

  it("two pages chat, a poll is answered by a client, and leaves are seen", async () => {
    const url = app.match[1];
    const alice = await joinChat(browser, url, "alice", "lobby");
    const bob = await joinChat(browser, url, "bob", "lobby");
    await sees(alice, "bob joined lobby");

    await say(alice, "hello bob");
    await sees(bob, "alice: hello bob");
    await say(bob, "hi alice");
    await sees(alice, "bob: hi alice");

    // The poll: alice asks, the app server invokes answerPoll on bob's client and waits for
    // the value bob's handler returns once he clicks Yes.
    await alice.page.fill("#question", "pizza tonight?");
    await alice.page.click("#ask");
    await bob.page.waitForSelector("#poll-question:not([hidden])", { timeout: WAIT_MS });
    assert.equal(await bob.page.textContent("#poll-text"), "alice asks: pizza tonight?");
    await screenshot(bob, "default-mode-bob-asked");
    await bob.page.click("#poll-yes");
    await sees(alice, 'poll "pizza tonight?": bob: yes');
    await sees(bob, 'poll "pizza tonight?": bob: yes');
    await screenshot(alice, "default-mode-alice-poll");

    // Carol closes her tab without leaving: the app server finds her connection gone.
    const carol = await joinChat(browser, url, "carol", "lobby");
    await sees(alice, "carol joined lobby");
    await carol.context.close();
    await sees(alice, "carol left");

    await bob.page.click("#leave");
    await sees(alice, "bob left");
    await say(alice, "bye");
    await sees(alice, "alice: bye");
    assert.ok(!(await lines(bob)).includes("alice: bye"), "who left hears no more");
    await screenshot(alice, "default-mode-alice-after-leaves");
    for (const person of [alice, bob]) assert.deepEqual(person.errors, [], `${person.name}'s console`);
  });
});
