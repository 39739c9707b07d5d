// What the samples' browser tests share: the system's Chromium (Debian's `chromium`, driven by
// playwright-core, which downloads nothing), processes started until a line says they are
// ready, and a chat page driven as a person would: name, room, Join, type, Send, Leave.
import { spawn } from "node:child_process";
import { existsSync, mkdirSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

export const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");
/** Binaries of cargo's debug build (CI's), unless PROFILE=release. */
export const PROFILE = process.env.PROFILE || "debug";
export const binary = (name) => path.join(REPO, "target", PROFILE, name);
export const SCREENSHOTS = process.env.SAMPLE_SCREENSHOTS || path.join(REPO, "target", "sample-screenshots");
export const WAIT_MS = 20_000;

const CHROMIUM = ["/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"];

export async function launch() {
  const executablePath = process.env.CHROMIUM_PATH || CHROMIUM.find((file) => existsSync(file));
  if (!executablePath) throw new Error(`no Chromium at ${CHROMIUM.join(", ")}: apt-get install chromium`);
  // Chromium's sandbox refuses to run as root (CI runs as root).
  const args = process.getuid?.() === 0 ? ["--no-sandbox"] : [];
  return chromium.launch({ executablePath, headless: true, args, timeout: 30_000 });
}

/** The environment for a child: ours, without SWITCHYARD_* (the binary refuses unknown ones). */
export function childEnv(extra = {}) {
  const env = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith("SWITCHYARD_")));
  return { ...env, ...extra };
}

/** Starts a process and resolves once a line of its stdout matches `ready` (with the match). */
export function start(command, args, { env = childEnv(), ready, cwd = REPO }) {
  const child = spawn(command, args, { env, cwd, stdio: ["ignore", "pipe", "pipe"] });
  const output = [];
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => fail(new Error(`${command} was not ready within ${WAIT_MS} ms`)), WAIT_MS);
    function fail(error) {
      clearTimeout(timer);
      child.kill("SIGKILL");
      reject(new Error(`${error.message}\n${output.join("")}`));
    }
    let buffered = "";
    child.stdout.on("data", (chunk) => {
      output.push(chunk.toString());
      buffered += chunk.toString();
      const lines = buffered.split("\n");
      buffered = lines.pop();
      for (const line of lines) {
        const match = line.match(ready);
        if (match) {
          clearTimeout(timer);
          resolve({ child, match, output, stop: () => stop(child) });
        }
      }
    });
    child.stderr.on("data", (chunk) => output.push(chunk.toString()));
    child.on("exit", (code) => fail(new Error(`${command} exited (${code}) before it was ready`)));
  });
}

/** SIGTERM, and the exit status once it has gone. */
export function stop(child) {
  if (child.exitCode !== null) return Promise.resolve(child.exitCode);
  return new Promise((resolve) => {
    child.once("exit", (code, signal) => resolve(code ?? signal));
    child.kill("SIGTERM");
  });
}

/** A person in a browser tab: opens the page, joins `room` as `name`. */
export async function joinChat(browser, url, name, room) {
  const context = await browser.newContext({ viewport: { width: 760, height: 640 } });
  const page = await context.newPage();
  const errors = [];
  page.on("pageerror", (error) => errors.push(error.message));
  page.on("console", (message) => message.type() === "error" && errors.push(message.text()));
  await page.goto(url);
  await page.fill("#name", name);
  await page.fill("#room", room);
  await page.click("#join");
  await page.waitForFunction((text) => document.getElementById("status").textContent === text, `in ${room} as ${name}`, {
    timeout: WAIT_MS,
  });
  return { page, context, name, errors };
}

export async function say(person, text) {
  await person.page.fill("#text", text);
  await person.page.click("#send");
}

/** Resolves once a line of the person's chat reads exactly `text`. */
export async function sees(person, text) {
  await person.page.waitForFunction(
    (wanted) => [...document.querySelectorAll("#messages li")].some((item) => item.textContent === wanted),
    text,
    { timeout: WAIT_MS },
  );
}

export async function lines(person) {
  return person.page.$$eval("#messages li", (items) => items.map((item) => item.textContent));
}

export async function screenshot(person, name) {
  mkdirSync(SCREENSHOTS, { recursive: true });
  await person.page.screenshot({ path: path.join(SCREENSHOTS, `${name}.png`), fullPage: true });
}
