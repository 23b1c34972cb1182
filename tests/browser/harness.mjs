// What the browser tests share: where gatehouse and Chromium are, the bounds every wait obeys, a
// headless Chromium, gatehouse servers on temporary databases (open, or with a tokens file), the JSON
// API as an agent (or curl) calls it, with or without a bearer token, a webhook receiver that hands
// out answer links, and one test's world (its directory, servers and pages, all cleaned up after it).
// Not a test file itself: `node --test` only runs the `*.test.mjs` files that import it.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { EventEmitter } from 'node:events';
import http from 'node:http';
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before } from 'node:test';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, '../..');

/** The gatehouse binary under test: $GATEHOUSE_BIN, else the debug build in the cargo target dir. */
export const binary = process.env.GATEHOUSE_BIN ?? path.join(process.env.CARGO_TARGET_DIR ?? path.join(repo, 'target'), 'debug/gatehouse');
/** The system's Chromium that playwright-core drives ($CHROMIUM, else Debian's). */
export const chromiumPath = process.env.CHROMIUM ?? '/usr/bin/chromium';
/** Where screenshots of the main states land (git-ignored). */
export const screenshots = path.join(here, 'screenshots');
/** Every Playwright wait and every condition the tests wait for is bounded by this (ms). */
export const WAIT = 10_000;
/** The timeout of each test (ms). */
export const TEST_TIMEOUT = 60_000;

// ---- the browser ----------------------------------------------------------------------------------

/**
 * Makes sure the screenshots directory exists and launches a headless Chromium: a test file's own
 * (see `sharedBrowser`), or a test's that needs a browser of its own.
 * @param {string[]} [extraArgs] more Chromium switches, e.g. `--host-resolver-rules=…`
 * @returns {Promise<import('playwright-core').Browser>}
 */
export async function launchBrowser(extraArgs = []) {
  await mkdir(screenshots, { recursive: true });
  return chromium.launch({
    executablePath: chromiumPath,
    timeout: 15_000,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--no-first-run',
      ...extraArgs,
    ],
  });
}

/**
 * One headless Chromium for the tests of the file that calls this (at its top level): launched in a
 * `before` hook, closed in an `after` hook.
 * @returns {() => import('playwright-core').Browser} gives that browser, once the hook has run
 */
export function sharedBrowser() {
  let browser;
  before(async () => {
    browser = await launchBrowser();
  });
  after(async () => {
    await browser?.close();
  });
  return () => browser;
}

/** The page options of a phone: its viewport, touch, and the mobile meta viewport honoured. */
export const PHONE = { viewport: { width: 375, height: 740 }, isMobile: true, hasTouch: true };

/**
 * Asserts that the page shows the dark scheme's background (a page opened with `colorScheme: 'dark'`).
 * @param {import('playwright-core').Page} page
 */
export async function assertDarkScheme(page) {
  const background = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  assert.equal(background, 'rgb(18, 20, 23)', 'the dark scheme applies');
}

/**
 * Asserts that nothing on the page is wider than its viewport (on a `PHONE`: no sideways scrolling).
 * @param {import('playwright-core').Page} page
 */
export async function assertFitsItsViewport(page) {
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
  assert.equal(overflow, 0, 'nothing wider than a phone');
}

/**
 * Asserts that every visible button of `scope` lies within the viewport's width, and is big enough
 * to tap.
 * @param {import('playwright-core').Page} page
 * @param {import('playwright-core').Locator} scope
 */
export async function assertButtonsReachable(page, scope) {
  const { width } = page.viewportSize();
  const buttons = scope.locator('button:visible');
  const count = await buttons.count();
  assert.ok(count > 0, 'there are buttons');
  for (let i = 0; i < count; i += 1) {
    const one = buttons.nth(i);
    await one.scrollIntoViewIfNeeded();
    const box = await one.boundingBox();
    const name = await one.textContent();
    assert.ok(box && box.x >= 0 && box.x + box.width <= width + 0.5, `“${name}” lies within the ${width} px viewport: ${JSON.stringify(box)}`);
    assert.ok(box.height >= 40, `“${name}” is tall enough to tap: ${box.height}`);
  }
}

/**
 * Takes a full-page screenshot into the screenshots directory.
 * @param {import('playwright-core').Page} page
 * @param {string} name the file name, e.g. `open-list.png`
 */
export function shot(page, name) {
  return page.screenshot({ path: path.join(screenshots, name), fullPage: true });
}

/**
 * Records on `page.problems` what a page must never do: throw, break the Content Security Policy or
 * open a dialog (which is dismissed). Failed requests (a refused connection, a 400, a 409) are
 * logged as console errors too: only CSP violations count among those.
 * @param {import('playwright-core').Page} page
 */
export function watchProblems(page) {
  page.problems = [];
  page.on('pageerror', (error) => page.problems.push(`uncaught: ${error.message}`));
  page.on('console', (message) => {
    if (message.type() === 'error' && /Content Security Policy/i.test(message.text())) page.problems.push(`csp: ${message.text()}`);
  });
  page.on('dialog', (dialog) => {
    page.problems.push(`dialog: ${dialog.message()}`);
    dialog.dismiss().catch(() => {});
  });
}

/**
 * Records the JSON bodies of the POSTs the page sends to `pathname` (a gate's answer route, or a
 * link), as the page sent them.
 * @param {import('playwright-core').Page} page
 * @param {string} pathname
 * @returns {any[]} filled as the page sends
 */
export function watchPosts(page, pathname) {
  const posts = [];
  page.on('request', (request) => {
    if (request.method() === 'POST' && new URL(request.url()).pathname === pathname) posts.push(JSON.parse(request.postData() ?? 'null'));
  });
  return posts;
}

// ---- the server -------------------------------------------------------------------------------------

/**
 * @typedef {object} Server A running `gatehouse serve`.
 * @property {import('node:child_process').ChildProcess} child the process
 * @property {string} db its database file
 * @property {string} log all it wrote to stderr so far (read for its whole life, so the pipe never fills)
 * @property {string} url where it listens, e.g. `http://127.0.0.1:41234`
 * @property {number} port the port it listens on
 */

/**
 * Starts `gatehouse serve` on 127.0.0.1 and the database `db`, and resolves once it says where it
 * listens (rejects if it exits first or does not say so within WAIT).
 * @param {string} db the database file
 * @param {{ port?: number, args?: string[] }} [options] `port` (0: any); `args`: more `serve` options
 * @returns {Promise<Server>}
 */
export function startServer(db, { port = 0, args = [] } = {}) {
  const child = spawn(binary, ['serve', '--bind', `127.0.0.1:${port}`, '--db', db, ...args], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  const server = { child, db, log: '', url: null, port: null };
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`gatehouse did not start in time:\n${server.log}`)), WAIT);
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (chunk) => {
      server.log += chunk;
      const match = !server.url && server.log.match(/listening on (http:\/\/127\.0\.0\.1:(\d+))/);
      if (match) {
        clearTimeout(timer);
        server.url = match[1];
        server.port = Number(match[2]);
        resolve(server);
      }
    });
    child.on('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`gatehouse exited (${code ?? signal}) before listening:\n${server.log}`));
    });
  });
}

/**
 * Ends a server by its PID with `signal` and waits until it is gone (SIGKILL if it lingers 5 s).
 * @param {Server} server
 * @param {NodeJS.Signals} [signal]
 */
export async function stopServer(server, signal = 'SIGTERM') {
  const { child } = server;
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  process.kill(child.pid, signal);
  const timer = setTimeout(() => child.exitCode === null && child.signalCode === null && process.kill(child.pid, 'SIGKILL'), 5000);
  await exited;
  clearTimeout(timer);
}

// ---- tokens ------------------------------------------------------------------------------------------

/**
 * @typedef {object} Token One line of a tokens file.
 * @property {'agent' | 'responder' | 'admin'} role
 * @property {string} name its principal, recorded with what it answers
 * @property {string} secret what it presents (`Authorization: Bearer …`, or typed into the page)
 * @property {string} [prefix] an agent token's session prefix
 */

/**
 * A token with a fresh random secret (32 characters; the server wants at least 16).
 * @param {Token['role']} role
 * @param {string} name
 * @param {string} [prefix]
 * @returns {Token}
 */
export function newToken(role, name, prefix) {
  return { role, name, secret: `${role}-${randomBytes(24).toString('base64url')}`, prefix };
}

/**
 * Writes a tokens file (`ROLE NAME SECRET [SESSION_PREFIX]` lines) for `serve --tokens-file`.
 * @param {string} file where
 * @param {Token[]} tokens
 * @returns {Promise<string[]>} the `serve` options that use it
 */
export async function writeTokensFile(file, tokens) {
  const lines = tokens.map(({ role, name, secret, prefix }) => [role, name, secret, prefix].filter(Boolean).join(' '));
  await writeFile(file, `# written by the browser tests\n${lines.join('\n')}\n`, { mode: 0o600 });
  return ['--tokens-file', file];
}

/**
 * The server as a client holding `token` sees it: pass it wherever a Server goes to the API
 * ({@link api}, {@link openGate}, {@link answerViaApi}, {@link readGate}) and every request carries
 * `Authorization: Bearer <secret>`.
 * @param {Server} server
 * @param {Token} token
 * @returns {{ url: string, token: Token }}
 */
export function withToken(server, token) {
  return { url: server.url, token };
}

// ---- the API, as an agent calls it -----------------------------------------------------------------

/**
 * One JSON request to the server; with a bearer token when `server` came from {@link withToken}.
 * @param {Server | { url: string, token?: Token }} server
 * @param {string} method
 * @param {string} route e.g. `/v1/gates/…`
 * @param {unknown} [body] sent as JSON when given
 * @param {Record<string, string>} [headers]
 * @returns {Promise<{ status: number, body: any }>} the status and the parsed body (null when empty)
 */
export async function api(server, method, route, body, headers = {}) {
  const response = await fetch(server.url + route, {
    method,
    headers: {
      'Content-Type': 'application/json',
      ...(server.token ? { Authorization: `Bearer ${server.token.secret}` } : {}),
      ...headers,
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : null };
}

/**
 * Opens a gate as an agent would and asserts it was created (201).
 * @param {Server} server
 * @param {{ session?: string, loop?: string | null, [field: string]: unknown }} content the gate's
 *   fields (question, choices, …); `session` and `loop` default to new UUIDs; `loop: null` opens a
 *   host-owned gate, with neither a loop nor a tool execution
 * @returns {Promise<any>} the gate's view
 */
export async function openGate(server, { session = randomUUID(), loop = randomUUID(), ...content }) {
  const owner = loop === null ? {} : { loop_id: loop, tool_execution_id: randomUUID() };
  const { status, body } = await api(server, 'POST', `/v1/sessions/${session}/gates`, { ...owner, ...content });
  assert.equal(status, 201, JSON.stringify(body));
  return body;
}

/**
 * Answers a gate through the API (as curl would).
 * @param {Server} server
 * @param {any} view the gate's view
 * @param {string} answer
 * @param {string} [key] the Idempotency-Key (a new UUID by default)
 * @returns {Promise<{ status: number, body: any }>}
 */
export function answerViaApi(server, view, answer, key = randomUUID()) {
  return api(server, 'POST', `/v1/sessions/${view.session_id}/gates/${view.gate.id}`, { action: 'answer', values: { answer } }, { 'Idempotency-Key': key });
}

/**
 * The gate as the server has it now; asserts it was found (200).
 * @param {Server} server
 * @param {any} view the gate's view
 * @returns {Promise<any>}
 */
export async function readGate(server, view) {
  const { status, body } = await api(server, 'GET', `/v1/gates/${view.gate.id}`);
  assert.equal(status, 200);
  return body;
}

/**
 * The gate as the server has it, once it is no longer open (bounded by WAIT).
 * @param {Server} server
 * @param {any} view the gate's view
 * @returns {Promise<any>}
 */
export async function waitForDecided(server, view) {
  const deadline = Date.now() + WAIT;
  for (;;) {
    const gate = await readGate(server, view);
    if (gate.state !== 'open') return gate;
    if (Date.now() > deadline) throw new Error(`gate ${view.gate.id} still open`);
    await sleep(50);
  }
}

// ---- a webhook receiver (where answer links come from) -------------------------------------------

/** A webhook endpoint on 127.0.0.1 (any port) that answers 200 and keeps every body it got. */
export function startReceiver() {
  const receiver = { bodies: [], events: new EventEmitter(), url: null, server: null };
  receiver.server = http.createServer((request, response) => {
    let raw = '';
    request.setEncoding('utf8');
    request.on('data', (chunk) => {
      raw += chunk;
    });
    request.on('end', () => {
      response.writeHead(200, { 'Content-Type': 'text/plain' }).end('ok');
      let body;
      try {
        body = JSON.parse(raw);
      } catch {
        body = { unparsable: raw };
      }
      receiver.bodies.push(body);
      receiver.events.emit('body', body);
    });
  });
  return new Promise((resolve, reject) => {
    receiver.server.once('error', reject);
    receiver.server.listen(0, '127.0.0.1', () => {
      receiver.url = `http://127.0.0.1:${receiver.server.address().port}/hook`;
      resolve(receiver);
    });
  });
}

export function stopReceiver(receiver) {
  receiver.server.closeAllConnections();
  return new Promise((resolve) => receiver.server.close(() => resolve()));
}

/** The `answer_url` of the GateOpened notification for `gateId`, once the receiver has it. */
export function answerUrlFor(receiver, gateId) {
  const matches = (body) => body?.event?.type === 'GateOpened' && body.event.gate?.id === gateId;
  return new Promise((resolve, reject) => {
    const done = (body) => {
      clearTimeout(timer);
      receiver.events.off('body', onBody);
      if (typeof body.answer_url === 'string') resolve(body.answer_url);
      else reject(new Error(`GateOpened without answer_url: ${JSON.stringify(body)}`));
    };
    const onBody = (body) => matches(body) && done(body);
    const timer = setTimeout(() => {
      receiver.events.off('body', onBody);
      reject(new Error(`no GateOpened notification for ${gateId}; got ${JSON.stringify(receiver.bodies)}`));
    }, WAIT);
    receiver.events.on('body', onBody);
    const already = receiver.bodies.find(matches);
    if (already) done(already);
  });
}

// ---- waiting ------------------------------------------------------------------------------------------

/**
 * Resolves after `ms` milliseconds.
 * @param {number} ms
 */
export function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * Waits until the locator's text is exactly `expected` (polling every 50 ms, bounded by WAIT); fails
 * with the text it had, or with why it could not be read.
 * @param {import('playwright-core').Locator} locator
 * @param {string} expected
 * @param {{ minReadTimeout?: number }} [options] the least time (ms) one read may wait for the
 *   element to be there, even on the last read past the deadline (default 1)
 */
export async function waitForText(locator, expected, { minReadTimeout = 1 } = {}) {
  const deadline = Date.now() + WAIT;
  for (;;) {
    const actual = await locator.textContent({ timeout: Math.max(minReadTimeout, deadline - Date.now()) }).catch((error) => `(${error.message.split('\n')[0]})`);
    if (actual === expected) return;
    if (Date.now() > deadline) throw new Error(`expected text ${JSON.stringify(expected)}, found ${JSON.stringify(actual)}`);
    await sleep(50);
  }
}

// ---- one test's world ---------------------------------------------------------------------------------

/**
 * @typedef {object} World What one test owns; all of it is cleaned up after the test.
 * @property {string} dir its temporary directory
 * @property {(name: string, options?: { port?: number, args?: string[] }) => Promise<Server>} startServer
 *   starts a gatehouse on the database file `name` in `dir` (options as for {@link startServer})
 * @property {(options?: import('playwright-core').BrowserContextOptions) => Promise<import('playwright-core').Page>} newPage
 *   a new blank page in its own browser context, waits bounded by WAIT, watched by {@link watchProblems}
 * @property {(cleanup: () => Promise<unknown>) => void} onCleanup
 *   runs `cleanup` after the test, once its pages are closed and its servers killed
 * @property {() => void} assertNoProblems asserts that no page threw, broke the CSP or opened a dialog
 * @property {(secrets: string[]) => void} assertNotLogged asserts that none of `secrets` is in what
 *   any of its servers (running or stopped) wrote to stderr
 */

/**
 * Makes a test's world: a temporary directory (named `prefix…`), and the servers and pages started
 * through it. After the test its pages are closed, its servers killed (SIGKILL), its other cleanups
 * run (in the order given) and its directory removed; failures while cleaning up are ignored.
 * @param {import('node:test').TestContext} t
 * @param {import('playwright-core').Browser} browser
 * @param {string} prefix
 * @returns {Promise<World>}
 */
export async function createWorld(t, browser, prefix) {
  const dir = await mkdtemp(path.join(tmpdir(), prefix));
  const contexts = [];
  const servers = [];
  const cleanups = [];
  const pages = [];
  t.after(async () => {
    for (const context of contexts) await context.close().catch(() => {});
    for (const server of servers) await stopServer(server, 'SIGKILL').catch(() => {});
    for (const cleanup of cleanups) {
      try {
        await cleanup();
      } catch {
        // ignored, as every failure while cleaning up
      }
    }
    await rm(dir, { recursive: true, force: true });
  });
  return {
    dir,
    async startServer(name, options) {
      const server = await startServer(path.join(dir, name), options);
      servers.push(server);
      return server;
    },
    async newPage(options = {}) {
      const context = await browser.newContext(options);
      contexts.push(context);
      context.setDefaultTimeout(WAIT);
      const page = await context.newPage();
      watchProblems(page);
      pages.push(page);
      return page;
    },
    onCleanup(cleanup) {
      cleanups.push(cleanup);
    },
    assertNoProblems() {
      for (const page of pages) assert.deepEqual(page.problems, [], 'problems on the page');
    },
    assertNotLogged(secrets) {
      assert.ok(servers.length > 0 && servers.every((server) => server.log.length > 0), 'every server logged something');
      for (const server of servers) {
        for (const secret of secrets) assert.ok(!server.log.includes(secret), `a secret is in the log of the server at ${server.url}`);
      }
    },
  };
}
