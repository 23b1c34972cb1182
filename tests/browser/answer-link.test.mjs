// The answer-link confirm page (spec §9) in a real headless Chromium (Debian's /usr/bin/chromium,
// driven by playwright-core). Every test starts a tiny webhook receiver and its own gatehouse on a
// temporary database that notifies it; the link comes from the `answer_url` of the GateOpened
// notification, exactly as a person would get it. Run with `node --test` (see run.sh).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import {
  TEST_TIMEOUT,
  WAIT,
  answerUrlFor,
  answerViaApi,
  createWorld,
  openGate,
  readGate,
  sharedBrowser,
  shot,
  sleep,
  startReceiver,
  stopReceiver,
  waitForText as waitForTextWithin,
} from './harness.mjs';

const SECRET = 'whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD';

const browser = sharedBrowser();

// ---- one test's world: a receiver, a server, its gates and its pages ----------------------------

async function setup(t) {
  const base = await createWorld(t, browser(), 'gatehouse-answer-link-');
  const secretFile = path.join(base.dir, 'webhook-secret');
  await writeFile(secretFile, SECRET);
  const receiver = await startReceiver();
  base.onCleanup(() => stopReceiver(receiver));
  const server = await base.startServer('links.db', {
    args: ['--webhook-url', receiver.url, '--webhook-secret-file', secretFile, '--webhook-allow-cidr', '127.0.0.1/32'],
  });

  const world = {
    server,
    receiver,
    /** Opens a gate as an agent would; resolves with its view and its answer link. */
    async open(content) {
      const view = await openGate(server, content);
      const link = await answerUrlFor(receiver, view.gate.id);
      assert.ok(link.startsWith(`${server.url}/v1/answers/`), `the link points at this server: ${link}`);
      return { view, link };
    },
    /** A new page (in its own browser context), watched for errors, CSP breaks and dialogs. */
    page: base.newPage,
    assertNoProblems: base.assertNoProblems,
  };
  return world;
}

/** Records the JSON body of every POST the page sends to its link. */
function watchAnswers(page, link) {
  const posts = [];
  page.on('request', (request) => {
    if (request.method() === 'POST' && request.url() === link) posts.push(JSON.parse(request.postData() ?? 'null'));
  });
  return posts;
}

/**
 * Waits until the locator's text is exactly `expected` (bounded); each read may wait at least 250 ms
 * for the element, even past the deadline.
 */
const waitForText = (locator, expected) => waitForTextWithin(locator, expected, { minReadTimeout: 250 });

/** The gate as the server has it, once it is no longer open. */
async function waitForResolvedGate(server, view) {
  const deadline = Date.now() + WAIT;
  for (;;) {
    const gate = await readGate(server, view);
    if (gate.state !== 'open') return gate;
    if (Date.now() > deadline) throw new Error(`gate ${view.gate.id} still open`);
    await sleep(50);
  }
}

/** The form's controls in document order: what Enter's implicit submission picks is the first button. */
const controls = (page) =>
  page.locator('#answer').evaluate((form) => [...form.elements].map((element) => ({ tag: element.localName, type: element.type, name: element.name, value: element.value })));

// ---- the tests ------------------------------------------------------------------------------------

test('Enter in the text field answers the typed text, never the first choice', { timeout: TEST_TIMEOUT }, async (t) => {
  const world = await setup(t);
  const { view, link } = await world.open({ question: 'Which database should I migrate first?', choices: ['postgres', 'mysql'], allow_other: true });
  const page = await world.page({ viewport: { width: 800, height: 600 } });
  const posts = watchAnswers(page, link);
  await page.goto(link);

  assert.equal(await page.locator('.question').textContent(), 'Which database should I migrate first?');
  assert.deepEqual(await controls(page), [
    { tag: 'input', type: 'text', name: 'text', value: '' },
    { tag: 'button', type: 'submit', name: 'send', value: '' },
    { tag: 'button', type: 'submit', name: 'answer', value: 'postgres' },
    { tag: 'button', type: 'submit', name: 'answer', value: 'mysql' },
  ]);
  assert.equal(await page.getByRole('button', { name: 'Send' }).count(), 1);

  const input = page.locator('#answer input[name="text"]');
  await input.fill('my own answer');
  await shot(page, 'answer-link.png');
  await input.press('Enter');

  await waitForText(page.locator('#result'), 'Answered: my own answer');
  assert.equal(await page.locator('#answer').isHidden(), true, 'the form is gone once answered');
  assert.deepEqual(posts, [{ action: 'answer', values: { answer: 'my own answer' } }], 'exactly one answer, the typed text');
  const gate = await waitForResolvedGate(world.server, view);
  assert.equal(gate.state, 'resolved');
  assert.equal(gate.answer, 'my own answer');
  assert.equal(gate.resolution?.source?.principal, 'answer-link', JSON.stringify(gate.resolution));
  world.assertNoProblems();
});

test('clicking a choice with the text box empty answers that choice; Enter on an empty box sends nothing', { timeout: TEST_TIMEOUT }, async (t) => {
  const world = await setup(t);
  const { view, link } = await world.open({ question: 'Deploy the billing service now?', choices: ['yes', 'no', 'after lunch'], allow_other: true });
  const page = await world.page();
  const posts = watchAnswers(page, link);
  await page.goto(link);

  // Enter with nothing typed: a hint, no request, the gate stays open.
  const input = page.locator('#answer input[name="text"]');
  await input.press('Enter');
  await waitForText(page.locator('#result'), 'Type an answer first.');
  assert.deepEqual(posts, []);
  assert.equal((await readGate(world.server, view)).state, 'open');

  // A choice that is not the first one, so sending "the first button" would show.
  assert.equal(await input.inputValue(), '');
  await page.getByRole('button', { name: 'after lunch' }).click();
  await waitForText(page.locator('#result'), 'Answered: after lunch');
  assert.deepEqual(posts, [{ action: 'answer', values: { answer: 'after lunch' } }]);
  const gate = await waitForResolvedGate(world.server, view);
  assert.equal(gate.answer, 'after lunch');
  assert.equal(gate.resolution?.source?.principal, 'answer-link', JSON.stringify(gate.resolution));
  world.assertNoProblems();
});

test('an answered gate says it was answered, not what; an open page whose gate was answered meanwhile says so', { timeout: TEST_TIMEOUT }, async (t) => {
  const world = await setup(t);

  // Answered before the link is opened: no form, the outcome instead.
  const first = await world.open({ question: 'Restart the workers?', choices: ['yes', 'no'] });
  assert.equal((await answerViaApi(world.server, first.view, 'no')).status, 202);
  const page = await world.page();
  await page.goto(first.link);
  await page.locator('main').getByText('This question was already answered.').waitFor();
  // The link answers; it does not show anyone what was answered.
  assert.doesNotMatch(await page.locator('main').textContent(), /\bno\b/);
  assert.equal(await page.locator('#answer').count(), 0, 'no form on a resolved gate');
  assert.equal(await page.getByRole('button').count(), 0, 'nothing to press');

  // Open on the page, answered elsewhere, then answered on the page: the late answer loses.
  const second = await world.open({ question: 'Rotate the API keys?', choices: ['now', 'tomorrow'], allow_other: true });
  const late = await world.page();
  const posts = watchAnswers(late, second.link);
  await late.goto(second.link);
  await late.getByRole('button', { name: 'now' }).waitFor();
  assert.equal((await answerViaApi(world.server, second.view, 'tomorrow')).status, 202);
  await late.getByRole('button', { name: 'now' }).click();
  await waitForText(late.locator('#result'), 'Someone already answered this question.');
  assert.equal(await late.locator('#answer').isHidden(), true);
  assert.equal(posts.length, 1);
  const gate = await readGate(world.server, second.view);
  assert.equal(gate.answer, 'tomorrow', 'the first answer stands');
  assert.notEqual(gate.resolution?.source?.principal, 'answer-link');

  // The free-text path loses the same way.
  const third = await world.open({ question: 'Anything to add?' });
  await late.goto(third.link);
  await late.locator('#answer input[name="text"]').fill('too late');
  assert.equal((await answerViaApi(world.server, third.view, 'first')).status, 202);
  await late.locator('#answer input[name="text"]').press('Enter');
  await waitForText(late.locator('#result'), 'Someone already answered this question.');
  assert.equal((await readGate(world.server, third.view)).answer, 'first');
  world.assertNoProblems();
});

test('<script> in the question and choices is shown literally and runs nothing', { timeout: TEST_TIMEOUT }, async (t) => {
  const world = await setup(t);
  const question = '<script>window.pwned = 1; alert("question")</script><img src=x onerror="alert(1)"> & <b>bold?</b> \'quoted\'';
  const choice = '<b onmouseover="alert(2)">yes</b> "x" \'y\'';
  const { view, link } = await world.open({ question, choices: [choice, 'no'], allow_other: true });
  const page = await world.page();
  await page.goto(link);

  assert.equal(await page.locator('.question').textContent(), question);
  const button = page.locator('#answer button[name="answer"]').first();
  assert.equal(await button.textContent(), choice);
  assert.equal(await button.getAttribute('value'), choice, 'the attribute holds the whole choice');
  assert.equal(await page.locator('main script, main img, main b').count(), 0, 'no markup from the gate became elements');
  await button.hover();
  await button.click();
  await waitForText(page.locator('#result'), `Answered: ${choice}`);
  assert.equal((await waitForResolvedGate(world.server, view)).answer, choice);
  assert.equal(await page.evaluate(() => window.pwned), undefined);
  world.assertNoProblems(); // includes: no dialog opened
});

test('the page is sent with Referrer-Policy: no-referrer and a Content-Security-Policy', { timeout: TEST_TIMEOUT }, async (t) => {
  const world = await setup(t);
  const { link } = await world.open({ question: 'Headers?', choices: ['fine'] });
  const page = await world.page();
  const response = await page.goto(link);
  assert.equal(response.status(), 200);
  const headers = response.headers();
  assert.equal(headers['referrer-policy'], 'no-referrer');
  assert.ok(headers['content-security-policy'], 'a Content-Security-Policy is sent');
  assert.match(headers['content-security-policy'], /script-src 'self'/);
  assert.doesNotMatch(headers['content-security-policy'], /'unsafe-inline'|'unsafe-eval'/);
  assert.match(headers['content-type'], /^text\/html/);
  // The script loads under that policy: the form answers.
  await page.getByRole('button', { name: 'fine' }).click();
  await waitForText(page.locator('#result'), 'Answered: fine');

  // A token that matches nothing is a 404, not a page.
  const bogus = link.replace(/[^/]{4}$/, (tail) => (tail === 'AAAA' ? 'BBBB' : 'AAAA'));
  assert.equal((await fetch(bogus)).status, 404);
  world.assertNoProblems();
});
