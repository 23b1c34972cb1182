// Permission gates (`harness.permission`) in a real headless Chromium: the approval card on the
// inbox and on the answer-link page (tool, summary, risk, requirements, input), Approve, Approve
// always, Deny with a reason, the input editor (checked against the schema before anything is
// sent, then a diff to confirm), decisions made elsewhere showing up live ("approved by alice",
// "denied by policy after 1 s"), and the card at phone width. Every outcome is checked against
// the gate's view on the server. Run with `node --test` (see run.sh).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import {
  TEST_TIMEOUT,
  answerUrlFor,
  api,
  assertButtonsReachable,
  assertFitsItsViewport,
  createWorld,
  newToken,
  openGate,
  readGate,
  sharedBrowser,
  shot,
  startReceiver,
  stopReceiver,
  waitForDecided,
  waitForText as waitForTextWithin,
  watchPosts,
  withToken,
  writeTokensFile,
} from './harness.mjs';

const browser = sharedBrowser();

/** Waits until the locator's text is `expected` (bounded); every read may wait 250 ms, so a failure says what the text was. */
const waitForText = (locator, expected) => waitForTextWithin(locator, expected, { minReadTimeout: 250 });

const APPROVE_ALWAYS = 'Approve always for this workspace';
const PHONE_390 = { viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true };

/** The input's schema. `multipleOf` is one the page does not check: only the server refuses it. */
const SCHEMA = {
  type: 'object',
  properties: {
    command: { type: 'string', minLength: 1 },
    timeout: { type: 'integer', minimum: 1, maximum: 600, multipleOf: 5 },
  },
  required: ['command'],
  additionalProperties: false,
};

/** The body of a permission gate: an editable, high-risk `git push`, unless `overrides` say otherwise. */
function permission(overrides = {}) {
  return {
    kind: 'harness.permission',
    tool_name: 'Bash',
    summary: 'git push origin main',
    requirements: [
      'Push to the origin remote',
      {
        kind: 'shell',
        scope: 'workspace',
        match: 'git push *',
        description: 'Run git push',
        candidates: [{ kind: 'shell', match: 'git push *', description: 'Always allow git push here' }],
      },
    ],
    tool_input: { command: 'git push origin main', timeout: 30 },
    tool_input_schema: SCHEMA,
    risk: 'high',
    editable: true,
    ...overrides,
  };
}

const pretty = (value) => JSON.stringify(value, null, 2);

// ---- the worlds: an open server, one with named tokens, one that hands out answer links ---------

/** An open gatehouse (no tokens: decisions are "by a person") and inbox pages on it, live. */
async function openWorld(t) {
  const base = await createWorld(t, browser(), 'gatehouse-permission-');
  const server = await base.startServer('permission.db');
  return {
    server,
    async page(options = {}) {
      const page = await base.newPage(options);
      await page.goto(`${server.url}/`);
      await waitForConnection(page, 'live');
      return page;
    },
    assertNoProblems: base.assertNoProblems,
  };
}

/** A gatehouse with a tokens file: an agent opens the gates, alice and bob decide them. */
async function namedWorld(t) {
  const base = await createWorld(t, browser(), 'gatehouse-permission-named-');
  const tokens = {
    agent: newToken('agent', 'build-bot'),
    alice: newToken('responder', 'alice'),
    bob: newToken('responder', 'bob'),
  };
  const server = await base.startServer('named.db', { args: await writeTokensFile(path.join(base.dir, 'tokens'), Object.values(tokens)) });
  return {
    server,
    as: (name) => withToken(server, tokens[name]),
    /** An inbox page logged in with `name`'s token, live. */
    async pageAs(name, options = {}) {
      const page = await base.newPage(options);
      await page.goto(`${server.url}/`);
      await page.getByTestId('login').waitFor({ state: 'visible' });
      const field = page.getByLabel('Token');
      await field.fill(tokens[name].secret);
      await field.press('Enter');
      await page.getByTestId('login').waitFor({ state: 'hidden' });
      await waitForConnection(page, 'live');
      return page;
    },
    assertNoProblems: base.assertNoProblems,
  };
}

/** A gatehouse that notifies a webhook receiver, whose GateOpened notifications carry answer links. */
async function linkWorld(t) {
  const base = await createWorld(t, browser(), 'gatehouse-permission-link-');
  const secretFile = path.join(base.dir, 'webhook-secret');
  await writeFile(secretFile, 'whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD');
  const receiver = await startReceiver();
  base.onCleanup(() => stopReceiver(receiver));
  const server = await base.startServer('links.db', {
    args: ['--webhook-url', receiver.url, '--webhook-secret-file', secretFile, '--webhook-allow-cidr', '127.0.0.1/32'],
  });
  return {
    server,
    /** Opens a gate; resolves with its view and its answer link. */
    async open(content) {
      const view = await openGate(server, content);
      return { view, link: await answerUrlFor(receiver, view.gate.id) };
    },
    page: base.newPage,
    assertNoProblems: base.assertNoProblems,
  };
}

// ---- reading and driving pages -------------------------------------------------------------------

const openCard = (page, view) => page.locator(`[data-testid="open-gate"][data-gate-id="${view.gate.id}"]`);
const resolvedItem = (page, view) => page.locator(`[data-testid="resolved-gate"][data-gate-id="${view.gate.id}"]`);
const button = (scope, name) => scope.getByRole('button', { name, exact: true });

async function waitForConnection(page, state) {
  await page.locator(`[data-testid="connection"][data-state="${state}"]`).waitFor({ timeout: 15_000 });
}

/** Waits until the gate's entry in the resolved list says how it was decided. */
async function waitForDecisionLine(page, view, line) {
  const item = resolvedItem(page, view);
  await item.waitFor();
  await waitForText(item.getByTestId('decision'), line);
  return item;
}

const answerPath = (view) => `/v1/sessions/${view.session_id}/gates/${view.gate.id}`;

/** Decides a gate through the API, as another client would. */
function decideViaApi(server, view, body) {
  return api(server, 'POST', answerPath(view), body, { 'Idempotency-Key': randomUUID() });
}

/** Types `text` into the editor and asks for the review. */
async function review(scope, text) {
  await scope.getByTestId('editor-input').fill(text);
  await scope.getByTestId('editor-review').click();
}

/** The editor's problems, as the page lists them. */
async function problems(scope) {
  await scope.getByTestId('editor-problems').waitFor();
  return scope.getByTestId('editor-problem').allTextContents();
}

/** The diff's lines as [kind, text] pairs, without the context lines. */
async function changedLines(scope) {
  await scope.getByTestId('diff').waitFor();
  const lines = await scope.locator('[data-testid="diff"] .diff-line').evaluateAll((spans) => spans.map((span) => [span.dataset.kind, span.textContent]));
  return lines.filter(([kind]) => kind !== 'same');
}

/** The colour a custom property of the page's stylesheet resolves to, as computed styles give it. */
function cssColour(page, property) {
  return page.evaluate((name) => {
    const probe = document.createElement('div');
    probe.style.color = `var(${name})`;
    document.body.append(probe);
    const colour = getComputedStyle(probe).color;
    probe.remove();
    return colour;
  }, property);
}

// ---- the inbox ------------------------------------------------------------------------------------

test('the approval card shows the call; high and critical risk stand out, low and medium stay plain', { timeout: TEST_TIMEOUT }, async (t) => {
  const world = await openWorld(t);
  const page = await world.page({ viewport: { width: 1100, height: 1400 } });
  const high = await openGate(world.server, permission());
  const critical = await openGate(world.server, permission({ tool_name: 'Terraform', summary: 'terraform destroy', risk: 'critical', editable: false }));
  const medium = await openGate(world.server, permission({ tool_name: 'Edit', summary: 'edit README.md', risk: 'medium', requirements: ['Write README.md'] }));
  const low = await openGate(world.server, permission({ tool_name: 'Read', summary: 'read src/main.rs', risk: 'low', requirements: ['Read src/main.rs'], editable: false }));
  const question = await openGate(world.server, { question: 'Still asking questions?', choices: ['yes', 'no'] });
  await openCard(page, question).waitFor();

  const card = openCard(page, high);
  assert.equal(await card.getAttribute('data-kind'), 'permission');
  assert.equal(await card.getByTestId('tool-name').textContent(), 'Bash');
  assert.equal(await card.getByTestId('summary').textContent(), 'git push origin main');
  assert.equal(await card.getByTestId('risk').textContent(), 'high risk');
  assert.deepEqual(await card.locator('[data-testid="requirements"] li').allTextContents(), ['Push to the origin remote', 'Run git push']);
  assert.equal(await card.getByTestId('saves').textContent(), 'Approve always saves: Always allow git push here');
  assert.equal(await card.getByTestId('tool-input').textContent(), pretty({ command: 'git push origin main', timeout: 30 }));
  assert.deepEqual(await card.getByRole('button').allTextContents(), ['Approve', APPROVE_ALWAYS, 'Edit input…', 'Deny']);
  assert.match(await card.getByTestId('deadline').textContent(), /^deadline in 5 min, then denied$/, 'the server default: deny after 5 min');

  // Only what the gate offers: no "Approve always" without candidates, no Edit unless editable.
  assert.deepEqual(await openCard(page, low).getByRole('button').allTextContents(), ['Approve', 'Deny']);
  assert.deepEqual(await openCard(page, critical).getByRole('button').allTextContents(), ['Approve', APPROVE_ALWAYS, 'Deny']);
  assert.deepEqual(await openCard(page, medium).getByRole('button').allTextContents(), ['Approve', 'Edit input…', 'Deny']);

  // High and critical: a class, a thick border in the warning and the danger colour, a filled badge.
  const look = (view) =>
    openCard(page, view).evaluate((element) => {
      const badge = element.querySelector('[data-testid="risk"]');
      const style = getComputedStyle(element);
      return {
        classes: [...element.classList].filter((name) => name.startsWith('risk-')),
        borderWidth: style.borderTopWidth,
        borderColour: style.borderTopColor,
        badgeBackground: getComputedStyle(badge).backgroundColor,
      };
    });
  const [warn, danger, border] = [await cssColour(page, '--warn'), await cssColour(page, '--danger'), await cssColour(page, '--border')];
  const transparent = 'rgba(0, 0, 0, 0)';
  const highLook = await look(high);
  assert.deepEqual(highLook.classes, ['risk-high']);
  assert.equal(highLook.borderWidth, '3px');
  assert.equal(highLook.borderColour, warn);
  assert.notEqual(highLook.badgeBackground, transparent);
  const criticalLook = await look(critical);
  assert.deepEqual(criticalLook.classes, ['risk-critical']);
  assert.equal(criticalLook.borderWidth, '3px');
  assert.equal(criticalLook.borderColour, danger);
  assert.equal(criticalLook.badgeBackground, danger);
  for (const plain of [medium, low]) {
    const plainLook = await look(plain);
    assert.deepEqual(plainLook.classes, [], 'no risk class');
    assert.equal(plainLook.borderWidth, '1px');
    assert.equal(plainLook.borderColour, border);
    assert.equal(plainLook.badgeBackground, transparent, 'a plain badge');
  }
  assert.equal(await openCard(page, low).getByTestId('risk').textContent(), 'low risk');

  // An AskUser gate is the card it always was.
  assert.deepEqual(await openCard(page, question).getByTestId('choice').allTextContents(), ['yes', 'no']);
  assert.equal(await openCard(page, question).getByTestId('tool-name').count(), 0);
  await shot(page, 'permission-cards.png');
  world.assertNoProblems();
});

test('gate text on the approval card is text: markup in the tool, summary, requirements and input runs nothing', { timeout: TEST_TIMEOUT }, async (t) => {
  const world = await openWorld(t);
  const page = await world.page();
  const evil = '<img src=x onerror="window.pwned=1;alert(1)">';
  const input = { command: `echo '</pre><script>window.pwned=2</script>'`, note: evil };
  const gate = await openGate(
    world.server,
    permission({ tool_name: `<b>Bash</b>${evil}`, summary: `<script>window.pwned=3</script>`, requirements: [`<i>${evil}</i>`], tool_input: input, tool_input_schema: undefined }),
  );
  const card = openCard(page, gate);
  await card.waitFor();
  assert.equal(await card.getByTestId('tool-name').textContent(), `<b>Bash</b>${evil}`);
  assert.equal(await card.getByTestId('summary').textContent(), '<script>window.pwned=3</script>');
  assert.equal(await card.locator('[data-testid="requirements"] li').textContent(), `<i>${evil}</i>`);
  assert.equal(await card.getByTestId('tool-input').textContent(), pretty(input));
  assert.equal(await card.locator('script, img, b, i').count(), 0, 'no markup from the gate became elements');
  assert.equal(await page.evaluate(() => window.pwned), undefined);
  world.assertNoProblems();
});

test('Approve and Approve always send their action; the card moves to the resolved list with the decision', { timeout: TEST_TIMEOUT }, async (t) => {
  const world = await openWorld(t);
  const page = await world.page();
  const plain = await openGate(world.server, permission());
  const always = await openGate(world.server, permission({ summary: 'git push origin release' }));
  const plainPosts = watchPosts(page, answerPath(plain));
  const alwaysPosts = watchPosts(page, answerPath(always));

  await button(openCard(page, plain), 'Approve').click();
  await openCard(page, plain).waitFor({ state: 'detached' });
  const item = await waitForDecisionLine(page, plain, 'approved by a person');
  assert.equal(await item.getByTestId('question').textContent(), 'Bash: git push origin main');
  await item.getByTestId('own-answer').waitFor();
  assert.deepEqual(plainPosts, [{ action: 'Approve' }]);
  const decided = await readGate(world.server, plain);
  assert.equal(decided.state, 'resolved');
  assert.equal(decided.decision.effect, 'approve');
  assert.equal(decided.decision.action, 'Approve');
  assert.equal(decided.decision.edited, false);
  assert.deepEqual(decided.decision.tool_input, { command: 'git push origin main', timeout: 30 }, 'the input as it was asked for');

  await button(openCard(page, always), APPROVE_ALWAYS).click();
  await waitForDecisionLine(page, always, 'approved by a person, always for this workspace');
  assert.deepEqual(alwaysPosts, [{ action: APPROVE_ALWAYS }]);
  assert.equal((await readGate(world.server, always)).decision.action, APPROVE_ALWAYS);
  assert.equal(await page.getByTestId('open-gate').count(), 0);
  world.assertNoProblems();
});

test('Deny: Enter in the reason denies with that reason, which reaches the server; no reason sends none', { timeout: TEST_TIMEOUT }, async (t) => {
  const world = await openWorld(t);
  const page = await world.page();
  const withReason = await openGate(world.server, permission());
  const without = await openGate(world.server, permission({ summary: 'git push origin dev' }));
  const posts = watchPosts(page, answerPath(withReason));

  const reason = openCard(page, withReason).getByLabel('Reason for denying (optional)');
  await reason.fill('not on main');
  await reason.press('Enter'); // never the card's Approve
  await waitForDecisionLine(page, withReason, 'denied by a person: not on main');
  assert.deepEqual(posts, [{ action: 'Deny', values: { reason: 'not on main' } }]);
  const denied = await readGate(world.server, withReason);
  assert.equal(denied.decision.effect, 'deny');
  assert.equal(denied.decision.reason, 'not on main');
  assert.equal(denied.decision.source, 'user');
  assert.equal(await resolvedItem(page, withReason).getByTestId('decision').getAttribute('data-effect'), 'deny');

  await button(openCard(page, without), 'Deny').click();
  await waitForDecisionLine(page, without, 'denied by a person');
  const plain = await readGate(world.server, without);
  assert.equal(plain.decision.effect, 'deny');
  assert.equal(plain.decision.reason, undefined);
  world.assertNoProblems();
});

test('Edit: broken JSON and inputs the schema refuses are stopped in the browser; a valid edit is sent only after its diff is confirmed', { timeout: TEST_TIMEOUT }, async (t) => {
  const world = await openWorld(t);
  const page = await world.page({ viewport: { width: 1100, height: 1200 } });
  const original = { command: 'git push origin main', timeout: 30 };
  const gate = await openGate(world.server, permission());
  const posts = watchPosts(page, answerPath(gate));
  const card = openCard(page, gate);
  await button(card, 'Edit input…').click();
  const editor = card.getByTestId('editor');
  assert.equal(await editor.getByTestId('editor-input').inputValue(), pretty(original), 'the editor starts from the input');

  // Refused before anything is sent.
  await review(editor, '{"command": "git push origin dev",');
  assert.match((await problems(editor))[0], /^not valid JSON/);
  await review(editor, '["git", "push"]');
  assert.deepEqual(await problems(editor), ['the input must be a JSON object']);
  await review(editor, JSON.stringify({ command: 5 }));
  assert.deepEqual(await problems(editor), ['/command: must be a string']);
  await review(editor, JSON.stringify({ command: 'git push', force: true }));
  assert.deepEqual(await problems(editor), ['/force: “force” is not allowed here']);
  await review(editor, JSON.stringify({ command: '', timeout: 0 }));
  assert.deepEqual(await problems(editor), ['/command: must be at least 1 characters long', '/timeout: must be at least 1']);
  await review(editor, JSON.stringify({ timeout: 3.5 }));
  assert.deepEqual(await problems(editor), ['/command: is required', '/timeout: must be an integer']);
  await review(editor, pretty(original));
  assert.deepEqual(await problems(editor), ['nothing changed: use Approve to run the call as it is']);
  assert.equal(await editor.getByTestId('editor-input').getAttribute('aria-invalid'), 'true');
  assert.equal(await editor.getByTestId('editor-confirm').isVisible(), false, 'nothing to confirm');
  assert.deepEqual(posts, [], 'nothing was sent');
  assert.equal((await readGate(world.server, gate)).state, 'open');

  // What only the server checks (multipleOf) comes back as its field problem, next to the editor.
  await review(editor, JSON.stringify({ command: 'git push origin dev', timeout: 31 }));
  await editor.getByTestId('editor-confirm').click();
  const [serverProblem] = await problems(editor);
  assert.match(serverProblem, /^\/timeout: .*multiple of 5/);
  assert.equal(posts.length, 1);
  assert.equal((await readGate(world.server, gate)).state, 'open', 'the server refused it');
  assert.equal(await card.getByTestId('gate-error').isVisible(), false, 'the problem is shown by the editor, not as a card error');

  // A valid edit: its diff, and typing again withdraws the review until it is asked for again.
  const edited = { command: 'git push origin dev', timeout: 60 };
  await review(editor, pretty(edited));
  assert.deepEqual(await changedLines(editor), [
    ['del', '-   "command": "git push origin main",\n'],
    ['del', '-   "timeout": 30\n'],
    ['add', '+   "command": "git push origin dev",\n'],
    ['add', '+   "timeout": 60\n'],
  ]);
  await shot(page, 'permission-diff.png');
  await editor.getByTestId('editor-input').press('End');
  await editor.getByTestId('editor-input').press('Space');
  assert.equal(await editor.getByTestId('editor-confirm').isVisible(), false, 'an edit after the review withdraws it');
  await editor.getByTestId('editor-review').click();
  await editor.getByTestId('editor-confirm').click();

  await waitForDecisionLine(page, gate, 'approved by a person, edited');
  assert.deepEqual(posts.at(-1), { action: 'Approve', values: { tool_input: edited } });
  assert.equal(posts.length, 2);
  const decided = await readGate(world.server, gate);
  assert.equal(decided.decision.effect, 'approve');
  assert.equal(decided.decision.edited, true);
  assert.deepEqual(decided.decision.tool_input, edited);
  world.assertNoProblems();
});

test('an open page follows decisions made elsewhere: approved by alice, edited; denied by bob; denied by policy', { timeout: TEST_TIMEOUT }, async (t) => {
  const world = await namedWorld(t);
  const alice = await world.pageAs('alice');
  const bob = await world.pageAs('bob');
  const agent = world.as('agent');
  const approved = await openGate(agent, permission());
  const edited = await openGate(agent, permission({ summary: 'git push origin dev' }));
  const denied = await openGate(agent, permission({ summary: 'git push --force origin main' }));
  for (const page of [alice, bob]) for (const view of [approved, edited, denied]) await openCard(page, view).waitFor();

  // Alice approves on her page; bob's page shows it.
  await button(openCard(alice, approved), 'Approve').click();
  for (const page of [alice, bob]) {
    await openCard(page, approved).waitFor({ state: 'detached' });
    await waitForDecisionLine(page, approved, 'approved by alice');
  }
  assert.equal((await readGate(world.as('bob'), approved)).decision.principal, 'alice');

  // Alice approves an edit through the API; bob denies with a reason through the API.
  const input = { command: 'git push origin dev:main' };
  assert.equal((await decideViaApi(world.as('alice'), edited, { action: 'Approve', values: { tool_input: input } })).status, 202);
  assert.equal((await decideViaApi(world.as('bob'), denied, { action: 'Deny', values: { reason: 'not on main' } })).status, 202);
  for (const page of [alice, bob]) {
    await waitForDecisionLine(page, edited, 'approved by alice, edited');
    await waitForDecisionLine(page, denied, 'denied by bob: not on main');
    assert.equal(await openCard(page, edited).count(), 0);
    assert.equal(await openCard(page, denied).count(), 0);
  }

  // A gate the policy denies after a second, while both pages show it.
  const timed = await openGate(agent, permission({ summary: 'git push origin later', response_policy: { timeout: 1e9, on_timeout: 'respond', response: { action: 'Deny' } } }));
  for (const page of [alice, bob]) await waitForDecisionLine(page, timed, 'denied by policy after 1 s');
  const decided = await readGate(world.as('alice'), timed);
  assert.equal(decided.decision.effect, 'deny');
  assert.equal(decided.decision.source, 'policy');
  assert.equal(await resolvedItem(bob, timed).getByTestId('how').textContent(), 'Decided on timeout');
  await shot(bob, 'permission-decided-elsewhere.png');
  world.assertNoProblems();
});

// ---- the answer-link page -------------------------------------------------------------------------

test('the answer link of a permission gate shows the card, approves, denies with a reason, and never shows another decision', { timeout: TEST_TIMEOUT }, async (t) => {
  const world = await linkWorld(t);
  const page = await world.page({ viewport: { width: 900, height: 1000 } });

  const first = await world.open(permission({ risk: 'critical' }));
  await page.goto(first.link);
  const card = page.locator('article.approval');
  assert.equal(await card.locator('.tool-name').textContent(), 'Bash');
  assert.equal(await card.locator('.summary').textContent(), 'git push origin main');
  assert.equal(await card.locator('.risk').textContent(), 'critical risk');
  assert.match(await card.getAttribute('class'), /\brisk-critical\b/);
  assert.equal(await card.evaluate((element) => getComputedStyle(element).borderTopWidth), '3px');
  assert.deepEqual(await card.locator('.requirements li').allTextContents(), ['Push to the origin remote', 'Run git push']);
  assert.equal(await card.locator('.tool-input').textContent(), pretty({ command: 'git push origin main', timeout: 30 }));
  assert.deepEqual(await page.locator('main').getByRole('button').allTextContents(), ['Approve', APPROVE_ALWAYS, 'Edit input…', 'Deny']);
  const posts = watchPosts(page, new URL(first.link).pathname);
  await shot(page, 'permission-link.png');
  await button(page, 'Approve').click();
  await waitForText(page.locator('#result'), 'Approved.');
  assert.deepEqual(posts, [{ action: 'Approve' }]);
  const approved = await waitForDecided(world.server, first.view);
  assert.equal(approved.decision.effect, 'approve');
  assert.equal(approved.decision.edited, false);
  assert.equal(approved.decision.principal, 'answer-link');

  // Deny with a reason, sent with Enter from the reason field.
  const second = await world.open(permission({ summary: 'git push origin dev' }));
  await page.goto(second.link);
  await page.getByLabel('Reason for denying (optional)').fill('not on main');
  await page.getByLabel('Reason for denying (optional)').press('Enter');
  await waitForText(page.locator('#result'), 'Denied: not on main');
  const denied = await waitForDecided(world.server, second.view);
  assert.equal(denied.decision.effect, 'deny');
  assert.equal(denied.decision.reason, 'not on main');

  // Decided elsewhere while the page is open: the page only learns that it was answered.
  const third = await world.open(permission({ summary: 'git push origin staging' }));
  await page.goto(third.link);
  assert.equal((await decideViaApi(world.server, third.view, { action: 'Deny', values: { reason: 'a private reason' } })).status, 202);
  await button(page, 'Approve').click();
  await waitForText(page.locator('#result'), 'This tool call was already answered.');
  assert.equal((await readGate(world.server, third.view)).decision.effect, 'deny', 'the first decision stands');
  await page.reload();
  await page.locator('main').getByText('This tool call was already answered.').waitFor();
  assert.equal(await page.locator('main').getByRole('button').count(), 0, 'nothing to press');
  assert.doesNotMatch(await page.locator('main').textContent(), /private reason|denied/i, 'how it was decided stays private');
  world.assertNoProblems();
});

test('the answer link edits: the schema check refuses before sending, the diff is confirmed, the server gets the exact input', { timeout: TEST_TIMEOUT }, async (t) => {
  const world = await linkWorld(t);
  const page = await world.page({ viewport: { width: 900, height: 1200 } });
  // Markup in the input and the schema must survive the trip through the data attributes intact.
  const original = { command: `echo '</pre><script>window.pwned=1</script>' "&amp;"`, timeout: 30 };
  const schema = { ...SCHEMA, properties: { ...SCHEMA.properties, command: { type: 'string', minLength: 1, description: '<img src=x onerror=alert(1)>' } } };
  const { view, link } = await world.open(permission({ tool_input: original, tool_input_schema: schema }));
  const posts = watchPosts(page, new URL(link).pathname);
  await page.goto(link);
  assert.equal(await page.locator('.tool-input').textContent(), pretty(original));
  assert.equal(await page.locator('main script, main img').count(), 0);

  await button(page, 'Edit input…').click();
  const editor = page.getByTestId('editor');
  assert.equal(await editor.getByTestId('editor-input').inputValue(), pretty(original), 'the original input, parsed from the page');
  await review(editor, JSON.stringify({ command: 5 }));
  assert.deepEqual(await problems(editor), ['/command: must be a string']);
  await review(editor, '{ not json');
  assert.match((await problems(editor))[0], /^not valid JSON/);
  assert.deepEqual(posts, []);
  assert.equal((await readGate(world.server, view)).state, 'open', 'nothing was sent');

  // The server's own check, shown next to the editor.
  await review(editor, JSON.stringify({ command: 'ls', timeout: 7 }));
  await editor.getByTestId('editor-confirm').click();
  assert.match((await problems(editor))[0], /^\/timeout: .*multiple of 5/);
  assert.equal((await readGate(world.server, view)).state, 'open');

  const edited = { command: 'echo "<b>safe</b>"', timeout: 30 };
  await review(editor, pretty(edited));
  assert.deepEqual(await changedLines(editor), [
    ['del', `-   "command": ${JSON.stringify(original.command)},\n`],
    ['add', `+   "command": ${JSON.stringify(edited.command)},\n`],
  ]);
  await editor.getByTestId('editor-confirm').click();
  await waitForText(page.locator('#result'), 'Approved, with your edit.');
  assert.deepEqual(posts.at(-1), { action: 'Approve', values: { tool_input: edited } });
  const decided = await waitForDecided(world.server, view);
  assert.equal(decided.decision.edited, true);
  assert.deepEqual(decided.decision.tool_input, edited);
  assert.equal(decided.decision.principal, 'answer-link');
  assert.equal(await page.evaluate(() => window.pwned), undefined);
  world.assertNoProblems();
});

// ---- phone width ----------------------------------------------------------------------------------

test('at phone width (390 px) the card, the editor and its diff fit, and every button can be reached and pressed', { timeout: TEST_TIMEOUT }, async (t) => {
  const world = await openWorld(t);
  const long = `git push origin ${'feature/'.repeat(12)}a-very-long-branch-name-without-any-spaces-at-all`;
  const input = { command: long, timeout: 30 };
  const gate = await openGate(world.server, permission({ summary: long, risk: 'critical', tool_input: input }));
  const page = await world.page(PHONE_390);
  const card = openCard(page, gate);
  await card.waitFor();
  await assertFitsItsViewport(page);
  await assertButtonsReachable(page, card);
  await shot(page, 'permission-phone.png');

  await button(card, 'Edit input…').tap();
  const edited = { command: `${long}-2`, timeout: 45 };
  await review(card, pretty(edited));
  await card.getByTestId('diff').waitFor();
  await assertFitsItsViewport(page);
  await assertButtonsReachable(page, card);
  await shot(page, 'permission-phone-diff.png');
  await card.getByTestId('editor-confirm').tap();
  await waitForDecisionLine(page, gate, 'approved by a person, edited');
  assert.deepEqual((await readGate(world.server, gate)).decision.tool_input, edited);
  await assertFitsItsViewport(page);
  world.assertNoProblems();
});

test('at phone width (390 px) the answer-link page fits and approves', { timeout: TEST_TIMEOUT }, async (t) => {
  const world = await linkWorld(t);
  const long = `kubectl delete deployment ${'very-long-name-'.repeat(10)}end --namespace production`;
  const { view, link } = await world.open(permission({ tool_name: 'Kubectl', summary: long, risk: 'high', tool_input: { command: long } }));
  const page = await world.page(PHONE_390);
  await page.goto(link);
  await assertFitsItsViewport(page);
  await assertButtonsReachable(page, page.locator('main'));
  await button(page, 'Edit input…').tap();
  await review(page.getByTestId('editor'), pretty({ command: `${long} --dry-run` }));
  await page.getByTestId('diff').waitFor();
  await assertFitsItsViewport(page);
  await assertButtonsReachable(page, page.locator('main'));
  await shot(page, 'permission-link-phone.png');
  await button(page, 'Approve').tap();
  await waitForText(page.locator('#result'), 'Approved.');
  const decided = await waitForDecided(world.server, view);
  assert.equal(decided.decision.effect, 'approve');
  assert.equal(decided.decision.edited, false, 'Approve sends the input as it was, whatever the editor holds');
  world.assertNoProblems();
});
