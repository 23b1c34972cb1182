// The inbox page in a real headless Chromium (Debian's /usr/bin/chromium, driven by playwright-core).
// Every test starts its own gatehouse on a temporary database, talks to it with fetch as an agent
// (or curl) would, and drives one or more pages. Run with `node --test` (see run.sh).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import {
  PHONE,
  TEST_TIMEOUT,
  WAIT,
  answerViaApi,
  api,
  assertDarkScheme,
  assertFitsItsViewport,
  createWorld,
  openGate,
  readGate,
  sharedBrowser,
  shot,
  sleep,
  stopServer,
  waitForText,
} from './harness.mjs';

const browser = sharedBrowser();

// ---- one test's world: a temporary directory, its servers and its pages ------------------------

async function setup(t) {
  const base = await createWorld(t, browser(), 'gatehouse-browser-');
  const world = {
    dir: base.dir,
    server: null,
    /** Starts a gatehouse (on `port`, and on the database file `name` in this test's directory). */
    async start({ port = 0, name = 'inbox.db' } = {}) {
      world.server = await base.startServer(name, { port });
      return world.server;
    },
    /** A new page (in its own browser context) on the inbox, once its stream is live. */
    async page(options = {}) {
      const page = await base.newPage(options);
      await page.goto(`${world.server.url}/`);
      await waitForConnection(page, 'live');
      return page;
    },
    /** No page threw, broke the CSP or opened a dialog. */
    assertNoProblems: base.assertNoProblems,
  };
  await world.start();
  return world;
}

// ---- reading the page ----------------------------------------------------------------------------

const openCard = (page, view) => page.locator(`[data-testid="open-gate"][data-gate-id="${view.gate.id}"]`);
const resolvedItem = (page, view) => page.locator(`[data-testid="resolved-gate"][data-gate-id="${view.gate.id}"]`);
const openIds = (page) => page.getByTestId('open-gate').evaluateAll((cards) => cards.map((card) => card.dataset.gateId));

async function waitForConnection(page, state) {
  await page.locator(`[data-testid="connection"][data-state="${state}"]`).waitFor({ timeout: 15_000 });
}

/** Waits for a resolved entry to show its final answer (the full view replaces a provisional one). */
async function waitForResolved(page, view, { answer, how }) {
  const item = resolvedItem(page, view);
  await item.waitFor();
  await waitForText(item.getByTestId('answer'), answer);
  await waitForText(item.getByTestId('how'), how);
  return item;
}

/** Until `promise` settles or WAIT passes, whichever is first. */
function bounded(promise, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out: ${what}`)), WAIT);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

const answerPath = (view) => `/v1/sessions/${view.session_id}/gates/${view.gate.id}`;
const isAnswerPost = (view) => (request) => request.method() === 'POST' && new URL(request.url()).pathname === answerPath(view);

/** Routes the page's answers to `view` through `handler`; everything else goes on untouched. */
function routeAnswers(page, view, handler) {
  return page.route(
    (url) => url.pathname === answerPath(view),
    (route) => (route.request().method() === 'POST' ? handler(route) : route.fallback()),
  );
}

// ---- the tests ------------------------------------------------------------------------------------

test('a gate opened through the API appears without reload; clicking a choice answers it', { timeout: TEST_TIMEOUT }, async (t) => {
  const world = await setup(t);
  const page = await world.page({ viewport: { width: 1100, height: 900 } });
  await page.evaluate(() => {
    window.sameDocument = true;
  });

  const session = randomUUID();
  const loop = randomUUID();
  const db = await openGate(world.server, { session, loop, question: 'Which database should I migrate first?', choices: ['postgres', 'mysql'] });
  const card = openCard(page, db);
  await card.waitFor();
  assert.equal(await card.getByTestId('question').textContent(), 'Which database should I migrate first?');
  assert.deepEqual(await card.getByTestId('choice').allTextContents(), ['postgres', 'mysql']);
  assert.equal(await card.getByTestId('answer-input').count(), 0, 'a select without allow_other has no free text');
  assert.equal(await card.getByTestId('session-id').textContent(), session.slice(0, 8));
  assert.equal(await card.getByTestId('session-id').getAttribute('title'), session);
  assert.equal(await card.getByTestId('loop-id').textContent(), loop.slice(0, 8));
  assert.equal(await card.getByTestId('loop-id').getAttribute('title'), loop);
  assert.match(await card.locator('time').textContent(), /^asked (just now|\d+ s ago)$/);

  // Two more, so the list shows its variety: free text, and choices with "other" and a deadline.
  const notes = await openGate(world.server, { session, loop, question: 'Anything to add to the release notes?\nOne line is enough.' });
  const deploy = await openGate(world.server, {
    session: randomUUID(),
    question: 'Deploy the billing service now?',
    title: 'Release train',
    choices: ['yes', 'no', 'after lunch'],
    allow_other: true,
    response_policy: { timeout: 3600e9, on_timeout: 'respond', response: { action: 'answer', values: { answer: 'no' } } },
  });
  await openCard(page, deploy).waitFor();
  assert.deepEqual(await openIds(page), [deploy.gate.id, notes.gate.id, db.gate.id], 'newest first');
  assert.equal(await openCard(page, deploy).getByTestId('deadline').textContent(), 'deadline in 1 h, then “no”');
  assert.equal(await openCard(page, deploy).getByTestId('title').textContent(), 'Release train');
  assert.equal(await openCard(page, deploy).getByLabel('Other answer').count(), 1);
  assert.equal(await page.getByTestId('open-count').textContent(), '(3)');
  await shot(page, 'open-list.png');

  await card.getByRole('button', { name: 'postgres' }).click();
  await card.waitFor({ state: 'detached' });
  const item = await waitForResolved(page, db, { answer: 'postgres', how: 'Answered by a person' });
  await item.getByTestId('own-answer').waitFor();
  const stored = await readGate(world.server, db);
  assert.equal(stored.state, 'resolved');
  assert.equal(stored.answer, 'postgres');
  assert.equal(await page.evaluate(() => window.sameDocument), true, 'the page was never reloaded');
  assert.deepEqual(await openIds(page), [deploy.gate.id, notes.gate.id]);
  await shot(page, 'answered.png');
  world.assertNoProblems();
});

test('answers, timeouts and closes made elsewhere update the page; the resolved list is loaded on start', { timeout: TEST_TIMEOUT }, async (t) => {
  const world = await setup(t);
  const earlier = await openGate(world.server, { question: 'Answered before the page was opened?', choices: ['yes', 'no'] });
  assert.equal((await answerViaApi(world.server, earlier, 'yes')).status, 202);
  const page = await world.page();
  await waitForResolved(page, earlier, { answer: 'yes', how: 'Answered by a person' });
  assert.equal(await resolvedItem(page, earlier).getByTestId('own-answer').count(), 0);

  // Answered with curl's request while the page is open: off the open list within a second.
  const gate = await openGate(world.server, { question: 'Which region first?', choices: ['eu', 'us'] });
  await openCard(page, gate).waitFor();
  assert.equal((await answerViaApi(world.server, gate, 'us')).status, 202);
  await openCard(page, gate).waitFor({ state: 'detached', timeout: 1000 });
  await waitForResolved(page, gate, { answer: 'us', how: 'Answered by a person' });

  // Answered by its policy at the deadline.
  const timed = await openGate(world.server, {
    question: 'Restart the workers?',
    choices: ['yes', 'no'],
    response_policy: { timeout: 1e9, on_timeout: 'respond', response: { action: 'answer', values: { answer: 'no' } } },
  });
  await waitForResolved(page, timed, { answer: 'no', how: 'Answered on timeout' });
  assert.equal(await openCard(page, timed).count(), 0);

  // Withdrawn by its agent.
  const closed = await openGate(world.server, { question: 'Still need this?' });
  await openCard(page, closed).waitFor();
  assert.equal((await api(world.server, 'POST', `/v1/sessions/${closed.session_id}/gates/${closed.gate.id}/close`)).status, 200);
  await waitForResolved(page, closed, { answer: 'No answer', how: 'Closed by its agent' });

  // Newest resolution first.
  const resolvedIds = await page.getByTestId('resolved-gate').evaluateAll((items) => items.map((item) => item.dataset.gateId));
  assert.deepEqual(resolvedIds, [closed.gate.id, timed.gate.id, gate.gate.id, earlier.gate.id]);
  assert.equal(await page.getByTestId('open-gate').count(), 0);
  world.assertNoProblems();
});

test('two pages answer the same gate at once: one wins, the other shows the winner’s answer', { timeout: TEST_TIMEOUT }, async (t) => {
  const world = await setup(t);
  const pages = [await world.page(), await world.page()];
  const gate = await openGate(world.server, { question: 'Which database should I migrate first?', choices: ['postgres', 'mysql'] });
  for (const page of pages) await openCard(page, gate).waitFor();

  // Hold both answers in the browsers until both were sent, so they reach the server together.
  let arrived = 0;
  let release;
  const bothSent = new Promise((resolve) => {
    release = resolve;
  });
  const statuses = [];
  for (const page of pages) {
    await routeAnswers(page, gate, async (route) => {
      arrived += 1;
      if (arrived === 2) release();
      await bounded(bothSent, 'both answers to be sent');
      await route.continue();
    });
    page.on('response', (response) => {
      if (isAnswerPost(gate)(response.request())) statuses.push(response.status());
    });
  }
  const choices = ['postgres', 'mysql'];
  await Promise.all(pages.map((page, i) => openCard(page, gate).getByRole('button', { name: choices[i] }).click()));

  const winner = (await bounded(waitForGateResolved(world.server, gate), 'the gate to resolve')).answer;
  const loserIndex = choices[0] === winner ? 1 : 0;
  for (const page of pages) {
    await openCard(page, gate).waitFor({ state: 'detached' });
    await waitForResolved(page, gate, { answer: winner, how: 'Answered by a person' });
  }
  const winnerPage = pages[1 - loserIndex];
  const loserPage = pages[loserIndex];
  await resolvedItem(winnerPage, gate).getByTestId('own-answer').waitFor();
  assert.equal(await resolvedItem(winnerPage, gate).getByTestId('lost-race').count(), 0);
  const lost = resolvedItem(loserPage, gate).getByTestId('lost-race');
  await waitForText(lost, `Someone else answered first; your answer “${choices[loserIndex]}” was not used.`);
  assert.deepEqual(statuses.sort(), [202, 409], 'one answer won, the other got 409');
  assert.equal(await loserPage.locator('[data-testid="gate-error"]:visible').count(), 0, 'losing is not shown as an error');
  await shot(loserPage, 'race-lost.png');
  world.assertNoProblems();
});

async function waitForGateResolved(server, view) {
  for (;;) {
    const { body } = await api(server, 'GET', `/v1/sessions/${view.session_id}/gates/${view.gate.id}/wait?timeout=10`);
    if (body.state !== 'open') return body;
  }
}

test('the server restarts while the page is open: it reconnects, resumes and shows a gate opened meanwhile', { timeout: TEST_TIMEOUT }, async (t) => {
  const world = await setup(t);
  const page = await world.page();
  const first = await openGate(world.server, { question: 'First, before the restart?', choices: ['a', 'b'] });
  const second = await openGate(world.server, { question: 'Second, before the restart?' });
  await openCard(page, first).waitFor();
  await openCard(page, second).waitFor();

  // Keep the page's stream requests from reaching the new server until a gate was opened on it,
  // so that gate is one the page can only learn of by resuming from its cursor.
  const isStream = (url) => url.pathname === '/v1/events';
  await page.route(isStream, (route) => route.abort('connectionrefused'));
  const requests = [];
  page.on('request', (request) => requests.push(new URL(request.url())));

  const { port } = world.server;
  await stopServer(world.server, 'SIGKILL');
  await waitForConnection(page, 'offline');
  assert.match(await page.getByTestId('connection').textContent(), /^Offline, reconnecting in \d+ s$/);
  await shot(page, 'offline.png');

  await world.start({ port });
  const during = await openGate(world.server, { question: 'Opened during the outage?', choices: ['yes', 'no'] });
  await page.unroute(isStream);
  await openCard(page, during).waitFor({ timeout: 15_000 });
  await waitForConnection(page, 'live');
  assert.deepEqual(await openIds(page), [during.gate.id, second.gate.id, first.gate.id], 'every gate once, newest first');

  // It resumed from the last event it applied rather than loading everything again.
  const streams = requests.filter(isStream).map((url) => Number(url.searchParams.get('after')));
  assert.ok(streams.length > 0 && streams.every((after) => after >= second.opened_seq), `resumed with ${streams}`);
  assert.equal(requests.filter((url) => url.pathname === '/v1/gates').length, 0, 'no re-snapshot');

  // And it is live again.
  assert.equal((await answerViaApi(world.server, first, 'b')).status, 202);
  await openCard(page, first).waitFor({ state: 'detached' });
  await waitForResolved(page, first, { answer: 'b', how: 'Answered by a person' });
  world.assertNoProblems();
});

test('a server with another journal answers the cursor with reset: the page loads everything again', { timeout: TEST_TIMEOUT }, async (t) => {
  const world = await setup(t);
  const page = await world.page();
  const old = [];
  for (const question of ['Old one?', 'Old two?', 'Old three?']) old.push(await openGate(world.server, { question }));
  await openCard(page, old[2]).waitFor();

  const isStream = (url) => url.pathname === '/v1/events';
  await page.route(isStream, (route) => route.abort('connectionrefused'));
  const { port } = world.server;
  await stopServer(world.server);
  await waitForConnection(page, 'offline');
  // A fresh database on the same address: its journal is shorter than the page's cursor.
  await world.start({ port, name: 'other.db' });
  const fresh = await openGate(world.server, { question: 'From the new database?' });
  await page.unroute(isStream);

  await openCard(page, fresh).waitFor({ timeout: 15_000 });
  for (const view of old) await openCard(page, view).waitFor({ state: 'detached' });
  await waitForConnection(page, 'live');
  assert.deepEqual(await openIds(page), [fresh.gate.id]);
  world.assertNoProblems();
});

test('free text is sent with Enter; an invalid answer shows the server’s message inline', { timeout: TEST_TIMEOUT }, async (t) => {
  const world = await setup(t);
  const page = await world.page({ viewport: { width: 1100, height: 800 } });
  const keys = [];
  page.on('request', (request) => {
    if (request.method() === 'POST') keys.push(request.headers()['idempotency-key']);
  });

  // What the server says about an answer over 16384 bytes, asked directly on a gate of its own.
  const probe = await openGate(world.server, { question: 'What does the server say?' });
  const refused = await answerViaApi(world.server, probe, 'x'.repeat(16385));
  assert.equal(refused.status, 400);
  const message = refused.body.error.fields[0].message;
  await api(world.server, 'POST', `/v1/sessions/${probe.session_id}/gates/${probe.gate.id}/close`);

  const gate = await openGate(world.server, { question: 'Anything to add to the release notes?' });
  const card = openCard(page, gate);
  const input = card.getByLabel('Your answer');
  await input.fill('x'.repeat(16385));
  await input.press('Enter');

  const error = card.getByTestId('gate-error');
  await error.waitFor();
  await waitForText(card.getByTestId('field-error'), message);
  assert.equal(await error.getAttribute('role'), 'alert');
  assert.equal(await input.getAttribute('aria-invalid'), 'true');
  assert.equal(await input.isEnabled(), true, 'controls are enabled again');
  assert.equal(await input.evaluate((element) => element === document.activeElement), true, 'focus is back in the field');
  assert.equal((await readGate(world.server, gate)).state, 'open', 'a refused answer leaves the gate open');
  await shot(page, 'error.png');

  await input.fill('Mention the new inbox page.');
  await input.press('Enter');
  await card.waitFor({ state: 'detached' });
  await waitForResolved(page, gate, { answer: 'Mention the new inbox page.', how: 'Answered by a person' });
  assert.equal((await readGate(world.server, gate)).answer, 'Mention the new inbox page.');
  assert.equal(keys.length, 2);
  assert.notEqual(keys[0], keys[1], 'a different answer is a new attempt with a new key');
  for (const key of keys) assert.match(key, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  world.assertNoProblems();
});

test('controls are disabled while sending, and a retry reuses the Idempotency-Key', { timeout: TEST_TIMEOUT }, async (t) => {
  const world = await setup(t);
  const page = await world.page();
  const gate = await openGate(world.server, { question: 'Ship it?', choices: ['yes', 'no'] });
  const card = openCard(page, gate);
  await card.waitFor();

  const keys = [];
  let letFirstGo;
  const firstMayGo = new Promise((resolve) => {
    letFirstGo = resolve;
  });
  await routeAnswers(page, gate, async (route) => {
    keys.push(route.request().headers()['idempotency-key']);
    if (keys.length > 1) return route.continue();
    await bounded(firstMayGo, 'the check of the disabled controls');
    // The answer reaches the server and is committed, but its 202 never reaches the page.
    await route.fetch();
    await route.abort('connectionreset');
  });

  await card.getByRole('button', { name: 'yes' }).click();
  await card.locator('fieldset:disabled').waitFor();
  assert.deepEqual(await card.getByTestId('choice').evaluateAll((buttons) => buttons.map((button) => button.matches(':disabled'))), [true, true]);
  assert.equal(await card.getByTestId('gate-status').textContent(), 'Sending…');
  await shot(page, 'sending.png');
  letFirstGo();

  const item = await waitForResolved(page, gate, { answer: 'yes', how: 'Answered by a person' });
  await item.getByTestId('own-answer').waitFor();
  assert.equal(await item.getByTestId('lost-race').count(), 0, 'the retry was recognised as the same answer');
  assert.equal(keys.length, 2, 'one retry');
  assert.equal(keys[0], keys[1], 'the retry carries the same key');
  world.assertNoProblems();
});

test('<script> in a question, a choice or an answer is shown literally', { timeout: TEST_TIMEOUT }, async (t) => {
  const world = await setup(t);
  const page = await world.page();
  const question = '<script>window.pwned = 1; alert("question")</script><img src=x onerror="alert(1)"> & <b>bold?</b>';
  const choice = '<b onmouseover="alert(2)">yes</b>';
  const answer = '<script>alert("answer")</script>';
  const gate = await openGate(world.server, { question, choices: [choice, 'no'], allow_other: true });
  const card = openCard(page, gate);
  await card.waitFor();
  assert.equal(await card.getByTestId('question').textContent(), question);
  assert.equal(await card.getByTestId('choice').first().textContent(), choice);
  assert.equal(await card.locator('script, img, b').count(), 0, 'no markup from the gate became elements');

  const input = card.getByLabel('Other answer');
  await input.fill(answer);
  await input.press('Enter');
  const item = await waitForResolved(page, gate, { answer, how: 'Answered by a person' });
  assert.equal(await item.getByTestId('question').textContent(), question);
  assert.equal(await item.locator('script, img, b').count(), 0);
  assert.equal(await page.evaluate(() => window.pwned), undefined);
  world.assertNoProblems(); // includes: no dialog opened
});

test('filters: by session, and a search over questions', { timeout: TEST_TIMEOUT }, async (t) => {
  const world = await setup(t);
  const page = await world.page();
  const billing = randomUUID();
  const search = randomUUID();
  const deployBilling = await openGate(world.server, { session: billing, question: 'Deploy the billing service?' });
  const rotate = await openGate(world.server, { session: billing, question: 'Rotate the API keys?' });
  const deploySearch = await openGate(world.server, { session: search, question: 'Deploy the search service?' });
  await openCard(page, deploySearch).waitFor();
  const visible = () => page.locator('[data-testid="open-gate"]:visible').evaluateAll((cards) => cards.map((card) => card.dataset.gateId));

  await page.getByLabel('Session').selectOption(search);
  assert.deepEqual(await visible(), [deploySearch.gate.id]);
  assert.equal(await page.getByTestId('open-count').textContent(), '(1 of 3)');
  assert.match(await page.getByLabel('Session').locator(`option[value="${billing}"]`).textContent(), /^[0-9a-f]{8} \(2 open\)$/);

  await page.getByLabel('Session').selectOption('');
  await page.getByLabel('Search questions').fill('deploy');
  assert.deepEqual(await visible(), [deploySearch.gate.id, deployBilling.gate.id]);
  await page.getByLabel('Search questions').fill('DEPLOY billing');
  assert.deepEqual(await visible(), [deployBilling.gate.id]);

  // A gate arriving live obeys the filters too.
  const later = await openGate(world.server, { session: search, question: 'Rotate the search keys?' });
  await openCard(page, later).waitFor({ state: 'attached' });
  assert.deepEqual(await visible(), [deployBilling.gate.id]);

  await page.getByLabel('Search questions').fill('nothing like this');
  await page.getByTestId('open-empty').waitFor();
  assert.equal(await page.getByTestId('open-empty').textContent(), 'No open question matches the filters.');
  await page.getByLabel('Search questions').fill('');
  assert.deepEqual(await visible(), [later.gate.id, deploySearch.gate.id, rotate.gate.id, deployBilling.gate.id]);
  world.assertNoProblems();
});

test('a deadline under a minute away counts down in seconds', { timeout: TEST_TIMEOUT }, async (t) => {
  const world = await setup(t);
  const soon = await openGate(world.server, {
    question: 'Roll back?',
    choices: ['yes', 'no'],
    response_policy: { timeout: 45e9, on_timeout: 'respond', response: { action: 'answer', values: { answer: 'no' } } },
  });
  const page = await world.page();
  const deadline = openCard(page, soon).getByTestId('deadline');
  const seconds = async () => {
    const text = await deadline.textContent();
    const match = text.match(/^deadline in (\d+) s, then “no”$/);
    assert.ok(match, `a deadline 45 s away shows seconds: ${JSON.stringify(text)}`);
    return Number(match[1]);
  };
  const first = await seconds();
  assert.ok(first > 0 && first <= 45, `at most 45 s: ${first}`);
  // It counts down while the page is open (the page rewrites it every second).
  const until = Date.now() + WAIT;
  let later = first;
  while (later >= first && Date.now() < until) {
    await sleep(200);
    later = await seconds();
  }
  assert.ok(later < first, `counted down from ${first} s, now ${later} s`);
  world.assertNoProblems();
});

test('keyboard only: reach a choice with Tab, answer with Enter, focus moves to the next question', { timeout: TEST_TIMEOUT }, async (t) => {
  const world = await setup(t);
  const older = await openGate(world.server, { question: 'Type an answer?' });
  const newer = await openGate(world.server, { question: 'Pick one?', choices: ['left', 'right'] });
  const page = await world.page();
  await openCard(page, newer).waitFor();

  const focused = () =>
    page.evaluate(() => ({
      testid: document.activeElement?.dataset.testid,
      text: document.activeElement?.textContent,
      gate: document.activeElement?.closest('[data-gate-id]')?.dataset.gateId,
      outline: getComputedStyle(document.activeElement).outlineStyle,
    }));
  let now;
  for (let presses = 0; presses < 10; presses += 1) {
    await page.keyboard.press('Tab');
    now = await focused();
    if (now.testid === 'choice') break;
  }
  assert.deepEqual(now, { testid: 'choice', text: 'left', gate: newer.gate.id, outline: 'solid' }, 'the first choice, with a visible focus ring');
  await page.keyboard.press('Tab');
  assert.equal((await focused()).text, 'right');
  await shot(page, 'keyboard-focus.png');
  await page.keyboard.press('Enter');
  await waitForResolved(page, newer, { answer: 'right', how: 'Answered by a person' });

  // Focus went on to the next question; its field is one Tab away: type and press Enter.
  assert.equal((await focused()).gate, older.gate.id);
  // The ring around that card is the focus colour, a blue: nothing like the page's error red.
  const ring = await openCard(page, older).evaluate((card) => {
    const style = getComputedStyle(card);
    const probe = document.createElement('div');
    probe.style.color = 'var(--danger)';
    document.body.append(probe);
    const danger = getComputedStyle(probe).color;
    probe.style.color = 'var(--focus)';
    const focus = getComputedStyle(probe).color;
    probe.remove();
    return { style: style.outlineStyle, color: style.outlineColor, focus, danger };
  });
  assert.equal(ring.style, 'solid', 'the next card is ringed');
  assert.equal(ring.color, ring.focus, 'in the focus colour');
  assert.notEqual(ring.color, ring.danger, 'not in the error colour');
  const [red, , blue] = ring.color.match(/\d+/g).map(Number);
  assert.ok(blue > red, `the focus ring is blue, not red: ${ring.color}`);
  await shot(page, 'keyboard-next.png');
  await page.keyboard.press('Tab');
  assert.equal((await focused()).testid, 'answer-input');
  await page.keyboard.type('typed without a mouse');
  await page.keyboard.press('Enter');
  await waitForResolved(page, older, { answer: 'typed without a mouse', how: 'Answered by a person' });
  world.assertNoProblems();
});

test('screenshots: dark scheme and phone width', { timeout: TEST_TIMEOUT }, async (t) => {
  const world = await setup(t);
  const session = randomUUID();
  const answered = await openGate(world.server, { session, question: 'Which database should I migrate first?', choices: ['postgres', 'mysql'] });
  await answerViaApi(world.server, answered, 'postgres');
  const closed = await openGate(world.server, { session, question: 'Still need the staging cluster?' });
  await api(world.server, 'POST', `/v1/sessions/${session}/gates/${closed.gate.id}/close`, { reason: 'abandoned' });
  await openGate(world.server, { session, question: 'Anything to add to the release notes?' });
  const deploy = await openGate(world.server, {
    question: 'Deploy the billing service now? The migration takes about ten minutes and locks the invoices table.',
    choices: ['yes', 'no', 'after lunch'],
    allow_other: true,
    response_policy: { timeout: 900e9, on_timeout: 'wait' },
  });

  const dark = await world.page({ colorScheme: 'dark', viewport: { width: 1100, height: 900 } });
  await openCard(dark, deploy).waitFor();
  await waitForResolved(dark, closed, { answer: 'No answer', how: 'Abandoned' });
  await assertDarkScheme(dark);
  await shot(dark, 'dark.png');

  const phone = await world.page(PHONE);
  await openCard(phone, deploy).waitFor();
  await assertFitsItsViewport(phone);
  await shot(phone, 'phone.png');
  world.assertNoProblems();
});

test('the stream parser reads the same frames however the bytes are split', { timeout: TEST_TIMEOUT }, async (t) => {
  const world = await setup(t);
  const page = await world.page();
  const readings = await page.evaluate(async () => {
    const { SseParser } = await import('/static/stream.js');
    const wire =
      'retry: 3000\n\nevent: enduring\nid: 7\ndata: {"v":1,"event":{"type":"GateOpened"}}\n\n: ping\n\n' +
      'event: reset\r\ndata: {"earliest":1,"head":3}\r\n\r\nevent: enduring\nid: 8\ndata:{"v":1}\n\n';
    const distinct = new Set();
    for (let size = 1; size <= wire.length; size += 1) {
      const frames = [];
      const parser = new SseParser((frame) => frames.push(frame));
      for (let at = 0; at < wire.length; at += size) parser.push(wire.slice(at, at + size));
      distinct.add(JSON.stringify(frames));
    }
    return [...distinct];
  });
  assert.equal(readings.length, 1, 'every split reads alike');
  assert.deepEqual(JSON.parse(readings[0]), [
    { type: 'enduring', id: '7', data: '{"v":1,"event":{"type":"GateOpened"}}' },
    { type: 'reset', id: null, data: '{"earliest":1,"head":3}' },
    { type: 'enduring', id: '8', data: '{"v":1}' },
  ]);
  world.assertNoProblems();
});
