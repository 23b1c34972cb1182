// The inbox page against a gatehouse with a tokens file (spec §10), in a real headless Chromium: the
// login form, the HttpOnly cookie it trades a token for (which survives a restart), answers recorded
// under the token's name, the page refusing agent tokens, and no secret ever in the server's log;
// and the refusals that keep other pages away: a page of another origin cannot answer with the
// login cookie (CSRF), and a hostname rebound to the loopback is not served (DNS rebinding).
// Run with `node --test` (see run.sh).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import path from 'node:path';
import {
  PHONE,
  TEST_TIMEOUT,
  WAIT,
  api,
  assertDarkScheme,
  assertFitsItsViewport,
  createWorld,
  launchBrowser,
  newToken,
  openGate,
  readGate,
  sharedBrowser,
  shot,
  sleep,
  stopServer,
  waitForText,
  watchProblems,
  withToken,
  writeTokensFile,
} from './harness.mjs';

const browser = sharedBrowser();

// ---- one test's world: tokens, a server that needs them, pages ------------------------------------

/** Not in the tokens file: typed into the page as a wrong token, and never to be logged either. */
const WRONG_SECRET = 'not-a-token-of-this-server-0123456789';

async function setup(t) {
  const base = await createWorld(t, browser(), 'gatehouse-auth-');
  const tokens = {
    agent: newToken('agent', 'build-bot'),
    responder: newToken('responder', 'alice'),
    admin: newToken('admin', 'root'),
  };
  const args = await writeTokensFile(path.join(base.dir, 'tokens'), Object.values(tokens));
  const world = {
    ...base,
    tokens,
    server: null,
    /** Starts a gatehouse with the tokens file (on `port`, and the same database every time). */
    async start({ port = 0 } = {}) {
      world.server = await base.startServer('auth.db', { port, args });
      return world.server;
    },
    /** The server as each token's holder calls it. */
    as(role) {
      return withToken(world.server, tokens[role]);
    },
    /**
     * A new page on the inbox; not waited for, as it may end on the login form. `watch(page)` runs
     * before the page is loaded.
     */
    async page(options = {}, watch = () => {}) {
      const page = await base.newPage(options);
      watch(page);
      await page.goto(`${world.server.url}/`);
      return page;
    },
    /** No secret of this test in any server's log. */
    assertNoSecretLogged() {
      base.assertNotLogged([...Object.values(tokens).map((token) => token.secret), WRONG_SECRET]);
    },
    /** How most tests end: no problem on any page, and no secret in any server's log. */
    assertNoProblemsAndNoSecretLogged() {
      world.assertNoProblems();
      world.assertNoSecretLogged();
    },
    /** A new page on the inbox, logged in with the responder's token: the lists shown, live. */
    async loggedInPage() {
      const page = await world.page();
      await waitForLoginForm(page);
      await logIn(page, tokens.responder);
      return page;
    },
  };
  await world.start();
  return world;
}

// ---- reading and driving the page ----------------------------------------------------------------

const openCard = (page, view) => page.locator(`[data-testid="open-gate"][data-gate-id="${view.gate.id}"]`);
const resolvedItem = (page, view) => page.locator(`[data-testid="resolved-gate"][data-gate-id="${view.gate.id}"]`);
const answerPath = (view) => `/v1/sessions/${view.session_id}/gates/${view.gate.id}`;
const isPath = (pathname) => (url) => url.pathname === pathname;

async function waitForConnection(page, state) {
  await page.locator(`[data-testid="connection"][data-state="${state}"]`).waitFor({ timeout: 15_000 });
}

/** Waits for the login form, and checks the lists are not shown meanwhile. */
async function waitForLoginForm(page) {
  await page.getByTestId('login').waitFor({ state: 'visible' });
  await waitForConnection(page, 'login');
  assert.equal(await page.getByTestId('inbox').isHidden(), true, 'the lists are hidden behind the login form');
}

/** Types a token into the login form and submits it with Enter, as a keyboard user would. */
async function typeToken(page, secret) {
  const field = page.getByLabel('Token');
  await field.fill(secret);
  await field.press('Enter');
}

/** Logs in and waits for the lists, live. */
async function logIn(page, token) {
  await typeToken(page, token.secret);
  await page.getByTestId('login').waitFor({ state: 'hidden' });
  await waitForConnection(page, 'live');
}

/** Clicks a choice on a gate's card and returns the status the server answered the page's POST with. */
async function clickChoice(page, view, choice) {
  const response = page.waitForResponse((r) => r.request().method() === 'POST' && new URL(r.url()).pathname === answerPath(view));
  await openCard(page, view).getByRole('button', { name: choice }).click();
  return (await response).status();
}

/** Counts the requests of the pages it is given to `watch`, by path. */
function requestCounter() {
  const counts = new Map();
  return {
    watch(page) {
      page.on('request', (request) => {
        const { pathname } = new URL(request.url());
        counts.set(pathname, (counts.get(pathname) ?? 0) + 1);
      });
    },
    count: (pathname) => counts.get(pathname) ?? 0,
  };
}

// ---- the tests ------------------------------------------------------------------------------------

test('with a tokens file the page asks for a login; a wrong token is refused inline; a responder sees gates live and answers as itself', { timeout: TEST_TIMEOUT }, async (t) => {
  const world = await setup(t);
  const before = await openGate(world.as('agent'), { question: 'Asked before anyone logged in?', choices: ['yes', 'no'] });

  const requests = requestCounter();
  const page = await world.page({ viewport: { width: 1100, height: 800 } }, requests.watch);
  await waitForLoginForm(page);
  const field = page.getByLabel('Token');
  assert.equal(await field.getAttribute('type'), 'password');
  assert.equal(await page.evaluate(() => document.activeElement?.id), 'login-token', 'the token field has the focus');
  assert.equal(await page.getByRole('button', { name: 'Log in' }).count(), 1);
  assert.equal(await page.getByTestId('login-error').isHidden(), true);
  assert.equal(await page.getByTestId('login-forbidden').isHidden(), true);
  assert.equal(await page.getByTestId('connection').textContent(), 'Not logged in');
  await shot(page, 'login.png');

  // Refused once, the page waits for a login instead of asking again and again.
  await sleep(1500);
  assert.equal(requests.count('/v1/gates'), 1, 'the listing was asked once');
  assert.equal(requests.count('/v1/events'), 0, 'no stream without a login');

  await typeToken(page, WRONG_SECRET);
  await waitForText(page.getByTestId('login-error'), 'This token is not valid. Check it and try again.');
  assert.equal(await field.getAttribute('aria-invalid'), 'true');
  assert.equal(await page.getByTestId('login').isVisible(), true);
  await shot(page, 'login-error.png');

  await logIn(page, world.tokens.responder);
  assert.equal(await page.getByTestId('inbox').isVisible(), true);
  assert.equal(await page.getByTestId('login-error').isHidden(), true, 'the error went with the form');
  assert.equal(await field.inputValue(), '', 'the form keeps no copy of the token');
  await openCard(page, before).waitFor();

  // The secret went into the cookie only, and the script cannot read that.
  const kept = await page.evaluate(() => ({ local: localStorage.length, session: sessionStorage.length, cookie: document.cookie }));
  assert.deepEqual(kept, { local: 0, session: 0, cookie: '' });
  const [cookie, ...others] = await page.context().cookies();
  assert.deepEqual(others, []);
  assert.match(cookie.name, /^gatehouse_login_[0-9a-f]{12}$/, 'a name of its own, unique to this server');
  assert.equal(cookie.httpOnly, true);
  assert.equal(cookie.sameSite, 'Strict');
  assert.ok(!cookie.value.includes(world.tokens.responder.secret));

  // The authenticated stream: a gate the agent opens now appears without a reload.
  const live = await openGate(world.as('agent'), { question: 'Ship the hotfix to production now?', choices: ['ship', 'wait'] });
  await openCard(page, live).waitFor();
  await shot(page, 'logged-in.png');

  assert.equal(await clickChoice(page, live, 'ship'), 202);
  await openCard(page, live).waitFor({ state: 'detached' });
  await waitForText(resolvedItem(page, live).getByTestId('answer'), 'ship');
  const stored = await readGate(world.as('admin'), live);
  assert.equal(stored.answer, 'ship');
  assert.equal(stored.resolution.source.principal, 'alice', 'the answer is recorded under the responder token’s name');

  world.assertNoProblemsAndNoSecretLogged();
});

test('the login form in the dark scheme and at phone width', { timeout: TEST_TIMEOUT }, async (t) => {
  const world = await setup(t);
  const dark = await world.page({ colorScheme: 'dark', viewport: { width: 1100, height: 700 } });
  await waitForLoginForm(dark);
  await assertDarkScheme(dark);
  await shot(dark, 'login-dark.png');
  await typeToken(dark, WRONG_SECRET);
  await dark.getByTestId('login-error').waitFor();
  await shot(dark, 'login-dark-error.png');

  const phone = await world.page(PHONE);
  await waitForLoginForm(phone);
  await typeToken(phone, world.tokens.agent.secret);
  await phone.getByTestId('login-forbidden').waitFor();
  await assertFitsItsViewport(phone);
  await shot(phone, 'login-phone.png');

  world.assertNoProblemsAndNoSecretLogged();
});

test('the login cookie survives a server restart: the stream reconnects, a reload needs no login, answers still work', { timeout: TEST_TIMEOUT }, async (t) => {
  const world = await setup(t);
  const page = await world.loggedInPage();
  const first = await openGate(world.as('agent'), { question: 'Before the restart?', choices: ['a', 'b'] });
  await openCard(page, first).waitFor();

  const { port } = world.server;
  await stopServer(world.server); // SIGTERM, by PID
  await waitForConnection(page, 'offline');
  await world.start({ port });

  // Without a reload: the stream reconnects with the cookie the old process issued.
  const during = await openGate(world.as('agent'), { question: 'Opened after the restart?', choices: ['yes', 'no'] });
  await openCard(page, during).waitFor({ timeout: 15_000 });
  await waitForConnection(page, 'live');
  assert.equal(await page.getByTestId('login').isHidden(), true);

  // And with one: no login form, the list as it was.
  await page.reload();
  await waitForConnection(page, 'live');
  assert.equal(await page.getByTestId('login').isHidden(), true, 'no login after the reload');
  await openCard(page, first).waitFor();
  await openCard(page, during).waitFor();

  assert.equal(await clickChoice(page, during, 'yes'), 202);
  await waitForText(resolvedItem(page, during).getByTestId('answer'), 'yes');
  assert.equal((await readGate(world.as('admin'), during)).resolution.source.principal, 'alice');

  world.assertNoProblemsAndNoSecretLogged();
});

test('an agent token may not use the page: it says so, and another token can log in from there', { timeout: TEST_TIMEOUT }, async (t) => {
  const world = await setup(t);
  const gate = await openGate(world.as('agent'), { question: 'Which region first?', choices: ['eu', 'us'] });
  const requests = requestCounter();
  const page = await world.page({ viewport: { width: 1100, height: 700 } }, requests.watch);
  await waitForLoginForm(page);

  await typeToken(page, world.tokens.agent.secret);
  const forbidden = page.getByTestId('login-forbidden');
  await forbidden.waitFor();
  assert.match(await forbidden.textContent(), /^This token may not use this page \(.*build-bot.*\)\. Log in with a responder or admin token instead\.$/);
  await waitForLoginForm(page);
  assert.equal(await page.evaluate(() => document.activeElement?.id), 'login-token', 'ready for another token');
  await shot(page, 'login-forbidden.png');
  await sleep(1000);
  assert.equal(requests.count('/v1/events'), 0, 'no stream for a token refused the listing');

  await logIn(page, world.tokens.admin);
  assert.equal(await forbidden.isHidden(), true);
  await openCard(page, gate).waitFor();

  world.assertNoProblemsAndNoSecretLogged();
});

test('a stream or an answer refused with 401 brings the login form back, without retrying in a loop', { timeout: TEST_TIMEOUT }, async (t) => {
  const world = await setup(t);
  const page = await world.loggedInPage();
  const gate = await openGate(world.as('agent'), { question: 'Roll back the schema change?', choices: ['roll back', 'keep'] });
  await openCard(page, gate).waitFor();

  // The login goes away (an expired cookie, a token taken out of the file): the next answer is
  // refused, the card says why, and the form is back.
  await page.context().clearCookies();
  assert.equal(await clickChoice(page, gate, 'keep'), 401);
  await waitForLoginForm(page);
  assert.match(await openCard(page, gate).getByTestId('gate-error').textContent(), /login has expired/);
  await logIn(page, world.tokens.responder);
  assert.equal(await openCard(page, gate).getByTestId('gate-error').isVisible(), true, 'the card kept its message');
  assert.equal(await clickChoice(page, gate, 'keep'), 202);
  await waitForText(resolvedItem(page, gate).getByTestId('answer'), 'keep');

  // A stream refused with 401 (the listing still works): one try, then the form, no reconnect loop.
  const requests = requestCounter();
  requests.watch(page);
  const isStream = isPath('/v1/events');
  await page.route(isStream, (route) =>
    route.fulfill({
      status: 401,
      contentType: 'application/json',
      body: JSON.stringify({ error: { code: 'unauthorized', message: 'the login has expired or is no longer valid; log in again', retryable: false } }),
    }),
  );
  await page.reload();
  await waitForLoginForm(page);
  await sleep(2000); // four retries' worth of the first backoff steps
  assert.equal(requests.count('/v1/events'), 1, 'the refused stream was not retried');

  await page.unroute(isStream);
  await logIn(page, world.tokens.responder);
  assert.equal(requests.count('/v1/events'), 2);

  world.assertNoProblemsAndNoSecretLogged();
});

test('without a tokens file the page needs no login', { timeout: TEST_TIMEOUT }, async (t) => {
  const base = await createWorld(t, browser(), 'gatehouse-open-');
  const server = await base.startServer('open.db');
  const gate = await openGate(server, { question: 'Open mode?', choices: ['yes'] });
  const page = await base.newPage();
  const statuses = [];
  page.on('response', (response) => statuses.push(response.status()));
  await page.goto(`${server.url}/`);
  await waitForConnection(page, 'live');
  await openCard(page, gate).waitFor();
  assert.equal(await page.getByTestId('login').isHidden(), true);
  assert.ok(!statuses.includes(401) && !statuses.includes(403), `statuses: ${statuses}`);
  // A login in open mode is accepted and sets nothing.
  const login = await api(server, 'POST', '/v1/login', { token: WRONG_SECRET });
  assert.equal(login.status, 204);
  base.assertNoProblems();
  base.assertNotLogged([WRONG_SECRET]);
});

// ---- other pages: CSRF and DNS rebinding (spec §10) -------------------------------------------------

/**
 * A site of its own on another 127.0.0.1 port: `pages` maps a path to the HTML it serves. A real
 * server rather than `page.route`, because while any route is set Playwright answers CORS preflights
 * itself (allowing everything), and the browser's own preflight is part of what is shown here.
 * Stopped after the test.
 * @param {{ onCleanup: (cleanup: () => Promise<unknown>) => void }} world the test's world
 * @param {Record<string, string>} pages
 * @returns {Promise<string>} its origin, e.g. `http://127.0.0.1:41235`
 */
function startOtherSite(world, pages) {
  const site = createServer((request, response) => {
    const html = pages[new URL(request.url, 'http://site').pathname];
    response.writeHead(html ? 200 : 404, { 'Content-Type': 'text/html; charset=utf-8', 'Cache-Control': 'no-store' });
    response.end(html ?? 'not here');
  });
  world.onCleanup(() => {
    site.closeAllConnections();
    return new Promise((resolve) => site.close(resolve));
  });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('the other site did not start in time')), WAIT);
    site.once('error', reject);
    site.listen(0, '127.0.0.1', () => {
      clearTimeout(timer);
      resolve(`http://127.0.0.1:${site.address().port}`);
    });
  });
}

/** Whether a response answers a POST to the gate's answer route. */
const answersGate = (view) => (response) => response.request().method() === 'POST' && new URL(response.url()).pathname === answerPath(view);

test('a page of another origin cannot answer with the login cookie: simple requests get 403, a JSON request never passes the preflight, the gate stays open', { timeout: TEST_TIMEOUT }, async (t) => {
  const world = await setup(t);
  const page = await world.loggedInPage();
  // The attacker's answer is one of the gate's choices, so nothing about the answer itself is wrong.
  const gate = await openGate(world.as('agent'), { question: 'Wire the funds to the new account?', choices: ['keep', 'evil'] });
  await openCard(page, gate).waitFor();

  const target = world.server.url + answerPath(gate);
  const body = JSON.stringify({ action: 'answer', values: { answer: 'evil' } });
  const other = await startOtherSite(world, {
    // Its script makes the requests any page's script may make; the test calls them one by one.
    '/': `<!doctype html><title>Free prizes</title><script>
      const target = ${JSON.stringify(target)};
      const body = ${JSON.stringify(body)};
      window.attack = {
        async simple() {
          const response = await fetch(target, { method: 'POST', credentials: 'include', mode: 'no-cors', headers: { 'Content-Type': 'text/plain' }, body });
          return response.type;
        },
        async json() {
          try {
            const response = await fetch(target, { method: 'POST', credentials: 'include', headers: { 'Content-Type': 'application/json' }, body });
            return 'sent: ' + response.status;
          } catch (error) {
            return error.name;
          }
        },
      };
    </script>`,
    // A form that posts itself as soon as it is loaded; text/plain makes its body valid JSON:
    // the name is the JSON up to a string, the value closes it.
    '/form': `<!doctype html><title>Free prizes</title>
      <form method="POST" enctype="text/plain" action="${target}"><input type="hidden" name='{"action":"answer","values":{"answer":"evil"},"padding":"' value='"}'></form>
      <script>document.forms[0].submit();</script>`,
  });
  assert.notEqual(new URL(other).origin, new URL(world.server.url).origin);

  // The victim opens the other site in a tab of the same browser, which holds the login cookie.
  // SameSite=Strict does not keep the cookie back here: 127.0.0.1:<one port> and 127.0.0.1:<another>
  // are different origins but the SAME site (a site ignores the port), so the browser sends the
  // cookie with every one of these requests. That is why the server also checks Content-Type and
  // Origin on requests the cookie authenticates.
  const attacker = await page.context().newPage();
  watchProblems(attacker);
  const answered = [];
  attacker.on('response', (response) => answersGate(gate)(response) && answered.push(response));
  await attacker.goto(`${other}/`);

  // (a) A no-cors fetch: sent as is, its answer opaque to the script (and its body kept from
  // devtools too), but the browser saw its status: 403, where a request without the cookie gets
  // 401 (and not the 415 a text/plain body gets past the guard), so the cookie went along and the
  // guard refused it.
  const simple = attacker.waitForResponse(answersGate(gate));
  assert.equal(await attacker.evaluate(() => window.attack.simple()), 'opaque');
  assert.equal((await simple).status(), 403);

  // (b) A fetch with Content-Type: application/json needs a CORS preflight, which the server does
  // not grant without --cors-origin: the browser never sends the POST.
  assert.equal(await attacker.evaluate(() => window.attack.json()), 'TypeError');
  await sleep(300); // room for a response that should not come
  assert.equal(answered.length, 1, 'the JSON POST was never answered, as it was never sent');

  // (c) The auto-submitted form: a top-level navigation, whose response is the server's JSON 403
  // (readable here, unlike the opaque one), naming the cookie.
  const form = attacker.waitForResponse(answersGate(gate));
  await attacker.goto(`${other}/form`, { waitUntil: 'commit' });
  const formResponse = await form;
  assert.equal(formResponse.status(), 403);
  const formError = (await formResponse.json()).error;
  assert.equal(formError.code, 'forbidden');
  assert.match(formError.message, /login cookie must send JSON/);
  await attacker.waitForURL(target);
  assert.equal(JSON.parse(await attacker.locator('body').textContent()).error.code, 'forbidden', 'the tab shows the refusal');
  assert.equal(answered.length, 2);

  // Nothing the other site did answered the gate.
  const stored = await readGate(world.as('admin'), gate);
  assert.equal(stored.state, 'open');
  assert.equal(stored.answer ?? null, null);
  assert.deepEqual(attacker.problems, []);

  // The cookie itself was good: the inbox's own tab answers with it.
  assert.equal(await clickChoice(page, gate, 'keep'), 202);
  await waitForText(resolvedItem(page, gate).getByTestId('answer'), 'keep');
  const answer = await readGate(world.as('admin'), gate);
  assert.equal(answer.answer, 'keep');
  assert.equal(answer.resolution.source.principal, 'alice');

  world.assertNoProblemsAndNoSecretLogged();
});

/** A made-up hostname that the rebinding browser resolves to 127.0.0.1, as a rebound DNS name would. */
const REBIND_HOST = 'rebind.test';

test('a hostname rebound to the loopback gets 403 for the page and the API, even in open mode; 127.0.0.1 and --allowed-host are served', { timeout: TEST_TIMEOUT }, async (t) => {
  // A browser of its own, whose resolver maps the made-up name to the server's address.
  const rebinding = await launchBrowser([`--host-resolver-rules=MAP ${REBIND_HOST} 127.0.0.1`]);
  const world = await createWorld(t, rebinding, 'gatehouse-rebind-');
  world.onCleanup(() => rebinding.close());
  // Open mode: no tokens, no cookie, so the Host check is the only thing between a rebinding page
  // and the API.
  const server = await world.startServer('open.db');
  const gate = await openGate(server, { question: 'Guarded by the Host check alone?', choices: ['yes', 'no'] });

  const page = await world.newPage();
  const rebound = `http://${REBIND_HOST}:${server.port}`;
  const response = await page.goto(`${rebound}/`);
  assert.equal(response.status(), 403);
  const refusal = (await response.json()).error;
  assert.equal(refusal.code, 'forbidden');
  assert.match(refusal.message, /DNS-rebinding/);

  // The tab now shows the refusal, but its origin is the rebound name's: a script run in it is what
  // a rebinding page's own script would be, and every request it makes to the API (same-origin, so
  // no CORS stands in the way) is refused too.
  const statuses = await page.evaluate(
    async ({ answerRoute, secret }) => {
      const post = (route, body) => fetch(route, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
      return {
        origin: location.origin,
        list: (await fetch('/v1/gates')).status,
        answer: (await post(answerRoute, { action: 'answer', values: { answer: 'no' } })).status,
        login: (await post('/v1/login', { token: secret })).status,
      };
    },
    { answerRoute: answerPath(gate), secret: WRONG_SECRET },
  );
  assert.deepEqual(statuses, { origin: rebound, list: 403, answer: 403, login: 403 });
  assert.equal((await readGate(server, gate)).state, 'open', 'the rebinding page answered nothing');

  // The same server by its address serves the page, in the same browser.
  const direct = await page.goto(`${server.url}/`);
  assert.equal(direct.status(), 200);
  await waitForConnection(page, 'live');
  await openCard(page, gate).waitFor();

  // And a name the server is told about is served like 127.0.0.1, the API included.
  const allowing = await world.startServer('allowed.db', { args: ['--allowed-host', REBIND_HOST] });
  const welcome = await openGate(allowing, { question: 'Served under the allowed name?', choices: ['yes'] });
  const allowed = await page.goto(`http://${REBIND_HOST}:${allowing.port}/`);
  assert.equal(allowed.status(), 200);
  await waitForConnection(page, 'live');
  await openCard(page, welcome).waitFor();

  world.assertNoProblems();
  world.assertNotLogged([WRONG_SECRET]);
});
