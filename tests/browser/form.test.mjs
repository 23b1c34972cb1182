// Form gates (`harness.form`) and open-URL gates (`harness.open_url`) in a real headless Chromium:
// every field kind as its native control, with its label, help, required mark and default; the
// page's own checks stop a bad value before anything is sent, and the server's field problems
// show next to the control at their path; a group, a list whose rows are added and removed, a
// form given as a JSON Schema; an open-URL gate's origin and link; answers made elsewhere showing
// up live; the answer-link page; and phone width. Every outcome is checked against the gate's view
// on the server. Run with `node --test` (see run.sh).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import {
  PHONE,
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

/** December in Berlin is UTC+1: a date-time shows an hour later than its Z form. */
const BERLIN = 'Europe/Berlin';

// ---- the gates ------------------------------------------------------------------------------------

const ROW_FIELDS = [
  { name: 'sku', label: 'SKU', kind: 'text', required: true, max_length: 12 },
  { name: 'qty', label: 'Quantity', kind: 'integer', required: true, minimum: 1, maximum: 99 },
];

/** Every field kind, a group and a list, with help, defaults and bounds. */
const DEPLOY_FIELDS = [
  { name: 'service', label: 'Service', kind: 'text', required: true, min_length: 3, max_length: 40, description: 'As named in the service catalogue' },
  { name: 'owner', label: 'Owner', kind: 'email', required: true },
  { name: 'runbook', label: 'Runbook', kind: 'url' },
  { name: 'day', label: 'Day', kind: 'date', default: '2026-12-03' },
  { name: 'start', label: 'Start', kind: 'date_time', default: '2026-12-03T10:00:00Z' },
  {
    name: 'environment',
    label: 'Environment',
    kind: 'select',
    required: true,
    default: 'staging',
    options: [
      { value: 'staging', label: 'Staging' },
      { value: 'prod', label: 'Production' },
    ],
  },
  {
    name: 'regions',
    label: 'Regions',
    kind: 'multi_select',
    min_items: 1,
    max_items: 2,
    default: ['eu'],
    options: [
      { value: 'eu', label: 'EMEA' },
      { value: 'us', label: 'Americas' },
      { value: 'ap', label: 'Asia Pacific' },
    ],
  },
  { name: 'notify', label: 'Tell the team', kind: 'confirm', default: true },
  { name: 'replicas', label: 'Replicas', kind: 'integer', required: true, minimum: 1, maximum: 10, default: 2 },
  { name: 'canary', label: 'Canary share', kind: 'number', minimum: 0, maximum: 1 },
  {
    name: 'limits',
    label: 'Limits',
    kind: 'group',
    fields: [
      { name: 'cpu', label: 'CPU cores', kind: 'number', required: true, minimum: 0.25, maximum: 8, default: 0.5 },
      { name: 'memory', label: 'Memory (MiB)', kind: 'integer', minimum: 64 },
    ],
  },
  { name: 'rows', label: 'Line items', kind: 'list', min_items: 1, max_items: 3, fields: ROW_FIELDS },
];

function deployForm(overrides = {}) {
  return { loop: null, kind: 'harness.form', title: 'Deploy details', body: 'The deploy server needs a target.', schema: { fields: DEPLOY_FIELDS }, ...overrides };
}

/** What the deploy form holds once filled in as the tests fill it. */
const DEPLOY_VALUES = {
  service: 'billing',
  owner: 'ops@example.com',
  runbook: 'https://runbooks.example.com/billing',
  day: '2026-12-04',
  start: '2026-12-04T08:30:00Z', // 09:30 in Berlin
  environment: 'prod',
  regions: ['eu', 'us'],
  notify: true,
  replicas: 3,
  canary: 0.25,
  limits: { cpu: 0.5, memory: 512 },
  rows: [
    { sku: 'A-1', qty: 2 },
    { sku: 'B-2', qty: 5 },
  ],
};

/** A small form for the tests that are about something else than its fields. */
function smallForm(overrides = {}) {
  return {
    loop: null,
    kind: 'harness.form',
    title: 'Release name',
    body: 'Name the release.',
    schema: { fields: [{ name: 'name', label: 'Name', kind: 'text', required: true }, { name: 'rows', label: 'Notes', kind: 'list', fields: [{ name: 'note', label: 'Note', kind: 'text' }] }] },
    ...overrides,
  };
}

/** The same kinds as a JSON Schema: the server translates it into fields, in property order. */
const SIGNUP_SCHEMA = {
  type: 'object',
  properties: {
    name: { type: 'string', title: 'Full name', minLength: 2 },
    email: { type: 'string', format: 'email', title: 'Email' },
    birthday: { type: 'string', format: 'date', title: 'Birthday' },
    plan: { type: 'string', title: 'Plan', oneOf: [{ const: 'free', title: 'Free' }, { const: 'team', title: 'Team' }], default: 'free' },
    seats: { type: 'integer', title: 'Seats', minimum: 1, maximum: 50, default: 5 },
    terms: { type: 'boolean', title: 'I accept the terms' },
    topics: { type: 'array', title: 'Topics', items: { type: 'string', enum: ['news', 'tips'] }, uniqueItems: true },
    address: {
      type: 'object',
      title: 'Address',
      properties: { city: { type: 'string', title: 'City' }, zip: { type: 'string', title: 'Postcode', maxLength: 10 } },
      required: ['city'],
    },
    contacts: {
      type: 'array',
      title: 'Contacts',
      maxItems: 2,
      items: { type: 'object', properties: { who: { type: 'string', title: 'Who' } }, required: ['who'] },
    },
  },
  required: ['name', 'email', 'terms'],
};

const GITHUB_URL = 'https://github.com/login/device?code=WDJB-MJHT&from=gatehouse';

function openUrlGate(overrides = {}) {
  return { loop: null, kind: 'harness.open_url', title: 'Authorize GitHub', body: 'Sign in, then confirm here.', url: GITHUB_URL, requires_completion: true, ...overrides };
}

// ---- the worlds: an open server, one with named tokens, one that hands out answer links ---------

/** An open gatehouse (no tokens: answers are "by a person") and inbox pages on it, live. */
async function openWorld(t) {
  const base = await createWorld(t, browser(), 'gatehouse-form-');
  const server = await base.startServer('form.db');
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

/** A gatehouse with a tokens file: an agent opens the gates, alice answers them, bob watches. */
async function namedWorld(t) {
  const base = await createWorld(t, browser(), 'gatehouse-form-named-');
  const tokens = { agent: newToken('agent', 'build-bot'), alice: newToken('responder', 'alice'), bob: newToken('responder', 'bob') };
  const server = await base.startServer('named.db', { args: await writeTokensFile(path.join(base.dir, 'tokens'), Object.values(tokens)) });
  return {
    server,
    as: (name) => withToken(server, tokens[name]),
    /** An inbox page logged in with `name`'s token, live. */
    async pageAs(name, options = {}) {
      const page = await base.newPage(options);
      await page.goto(`${server.url}/`);
      await page.getByTestId('login').waitFor({ state: 'visible' });
      await page.getByLabel('Token').fill(tokens[name].secret);
      await page.getByLabel('Token').press('Enter');
      await page.getByTestId('login').waitFor({ state: 'hidden' });
      await waitForConnection(page, 'live');
      return page;
    },
    assertNoProblems: base.assertNoProblems,
  };
}

/** A gatehouse that notifies a webhook receiver, whose GateOpened notifications carry answer links. */
async function linkWorld(t) {
  const base = await createWorld(t, browser(), 'gatehouse-form-link-');
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
const answerPath = (view) => `/v1/sessions/${view.session_id}/gates/${view.gate.id}`;

/** The field named `name` directly in `scope` (a card, a group, a list row), and its parts. */
const field = (scope, name) => scope.locator(`[data-field="${name}"]`).first();
const control = (scope, name) => field(scope, name).locator('[data-testid="field-input"]').first();
const problem = (scope, name) => field(scope, name).locator(':scope > [data-testid="field-error"]');
const rows = (scope, name) => field(scope, name).getByTestId('list-row');

async function waitForConnection(page, state) {
  await page.locator(`[data-testid="connection"][data-state="${state}"]`).waitFor({ timeout: 15_000 });
}

/** Waits until the gate's entry in the resolved list says how it was answered. */
async function waitForAnswerLine(page, view, line) {
  const item = resolvedItem(page, view);
  await item.waitFor();
  await waitForText(item.getByTestId('decision'), line);
  return item;
}

/** Answers a gate through the API, as another client would. */
function answerViaApi(server, view, body) {
  return api(server, 'POST', answerPath(view), body, { 'Idempotency-Key': randomUUID() });
}

/** Presses the gate's control for `action` (in `scope`: a card, or the answer-link page). */
const press = (scope, action) => scope.locator(`[data-testid="control"][data-action="${action}"], button[data-action="${action}"]`).first().click();

/** Asserts what the form's own checks say, and that nothing reached the server. */
async function assertRefusedHere(server, view, posts, expected) {
  for (const [at, message] of expected) await waitForText(at, message);
  assert.deepEqual(posts, [], 'nothing was sent');
  assert.equal((await readGate(server, view)).state, 'open');
}

/** Fills the deploy form as DEPLOY_VALUES has it (the list's second row is added here). */
async function fillDeploy(card) {
  await control(card, 'service').fill('billing');
  await control(card, 'owner').fill('ops@example.com');
  await control(card, 'runbook').fill('https://runbooks.example.com/billing');
  await control(card, 'day').fill('2026-12-04');
  await control(card, 'start').fill('2026-12-04T09:30');
  await control(card, 'environment').selectOption('prod');
  await card.getByLabel('Americas').check();
  await control(card, 'replicas').fill('3');
  await control(card, 'canary').fill('0.25');
  await control(field(card, 'limits'), 'memory').fill('512');
  const list = rows(card, 'rows');
  await control(list.nth(0), 'sku').fill('A-1');
  await control(list.nth(0), 'qty').fill('2');
  if ((await list.count()) < 2) await field(card, 'rows').getByTestId('add-row').click();
  await control(list.nth(1), 'sku').fill('B-2');
  await control(list.nth(1), 'qty').fill('5');
}

// ---- the inbox: the fields ------------------------------------------------------------------------

test('a form gate shows every field kind as its native control, labelled, with help, required marks and defaults', { timeout: TEST_TIMEOUT }, async (t) => {
  const world = await openWorld(t);
  const page = await world.page({ viewport: { width: 1100, height: 1600 }, timezoneId: BERLIN });
  const view = await openGate(world.server, deployForm());
  assert.equal(view.gate.resolver, 'session', 'host-owned');
  const card = openCard(page, view);
  await card.waitFor();
  assert.equal(await card.getAttribute('data-kind'), 'form');
  assert.equal(await card.getByTestId('question').textContent(), 'Deploy details');
  assert.equal(await card.getByTestId('body').textContent(), 'The deploy server needs a target.');
  assert.equal(await card.getByTestId('loop-id').count(), 0, 'a host-owned gate has no loop');

  // Each label names its control, and each control is the native one for its kind.
  const types = [
    ['Service', 'text'],
    ['Owner', 'email'],
    ['Runbook', 'url'],
    ['Day', 'date'],
    ['Start', 'datetime-local'],
    ['Replicas', 'number'],
    ['Canary share', 'number'],
    ['CPU cores', 'number'],
    ['Memory (MiB)', 'number'],
    ['Tell the team', 'checkbox'],
    ['EMEA', 'checkbox'],
  ];
  for (const [label, type] of types) assert.equal(await card.getByLabel(label).getAttribute('type'), type, label);
  assert.equal(await card.getByLabel('Environment').evaluate((element) => element.localName), 'select');
  assert.match(await field(card, 'start').locator('label').textContent(), /your time, Europe\/Berlin/);

  // Bounds as the control's own attributes: a phone offers the right keys and steppers.
  assert.deepEqual(await control(card, 'replicas').evaluate((input) => [input.min, input.max, input.step]), ['1', '10', '1']);
  assert.deepEqual(await control(card, 'canary').evaluate((input) => [input.min, input.max, input.step]), ['0', '1', 'any']);

  // Required marks on required fields only; help text linked to its control.
  for (const name of ['service', 'owner', 'environment', 'replicas']) assert.equal(await field(card, name).locator('.required').count(), 1, name);
  for (const name of ['runbook', 'day', 'canary']) assert.equal(await field(card, name).locator('.required').count(), 0, name);
  assert.equal(await control(card, 'service').getAttribute('required'), '');
  const help = field(card, 'service').getByTestId('field-help');
  assert.equal(await help.textContent(), 'As named in the service catalogue');
  assert.ok((await control(card, 'service').getAttribute('aria-describedby')).split(' ').includes(await help.getAttribute('id')));

  // Defaults, filled in: the date-time in the person's own clock.
  assert.equal(await control(card, 'service').inputValue(), '');
  assert.equal(await control(card, 'day').inputValue(), '2026-12-03');
  assert.equal(await control(card, 'start').inputValue(), '2026-12-03T11:00');
  assert.equal(await control(card, 'environment').inputValue(), 'staging');
  assert.deepEqual(await control(card, 'environment').locator('option').allTextContents(), ['Staging', 'Production']);
  assert.equal(await card.getByLabel('EMEA').isChecked(), true);
  assert.equal(await card.getByLabel('Americas').isChecked(), false);
  assert.equal(await card.getByLabel('Tell the team').isChecked(), true);
  assert.equal(await control(card, 'replicas').inputValue(), '2');
  assert.equal(await control(card, 'canary').inputValue(), '');
  assert.equal(await control(field(card, 'limits'), 'cpu').inputValue(), '0.5');

  // The group is a fieldset named by its label; the list starts with its one required row.
  assert.equal(await field(card, 'limits').evaluate((element) => element.localName), 'fieldset');
  assert.equal(await field(card, 'limits').locator(':scope > legend').textContent(), 'Limits');
  assert.equal(await rows(card, 'rows').count(), 1);
  assert.equal(await rows(card, 'rows').nth(0).getByTestId('remove-row').isDisabled(), true, 'min_items 1: the last row stays');
  assert.deepEqual(await card.getByTestId('control').allTextContents(), ['Submit', 'Decline', 'Cancel']);
  await shot(page, 'form-card.png');
  world.assertNoProblems();
});

test('a form is checked before it is sent, shows the server’s problem at its path, and sends typed values', { timeout: TEST_TIMEOUT }, async (t) => {
  const world = await openWorld(t);
  const page = await world.page({ viewport: { width: 1100, height: 1800 }, timezoneId: BERLIN });
  const view = await openGate(world.server, deployForm());
  const posts = watchPosts(page, answerPath(view));
  const card = openCard(page, view);
  await card.waitFor();
  const list = rows(card, 'rows');

  // Nothing filled in: every required field says so, and the first one has the focus.
  await press(card, 'accept');
  await assertRefusedHere(world.server, view, posts, [
    [problem(card, 'service'), 'This field is required.'],
    [problem(card, 'owner'), 'This field is required.'],
    [problem(list.nth(0), 'sku'), 'This field is required.'],
    [problem(list.nth(0), 'qty'), 'This field is required.'],
  ]);
  assert.equal(await page.evaluate(() => document.activeElement?.getAttribute('name')), 'service');
  assert.equal(await control(card, 'service').getAttribute('aria-invalid'), 'true');
  assert.match(await card.getByTestId('form-problems').textContent(), /^This form cannot be sent yet: 4 problems/);
  assert.equal(await problem(card, 'runbook').isVisible(), false, 'an optional empty field is fine');

  // Values of the wrong shape, each refused in its own words.
  await fillDeploy(card);
  await control(card, 'service').fill('ab');
  await control(card, 'owner').fill('ops.example.com');
  await control(card, 'runbook').fill('runbooks/billing');
  await card.getByLabel('Asia Pacific').check();
  await control(card, 'replicas').fill('12');
  await control(card, 'canary').fill('1.5');
  await control(list.nth(1), 'qty').fill('0');
  await press(card, 'accept');
  await assertRefusedHere(world.server, view, posts, [
    [problem(card, 'service'), 'Enter at least 3 characters.'],
    [problem(card, 'owner'), 'Enter an email address, like name@example.com.'],
    [problem(card, 'runbook'), 'Enter a full address, like https://example.com.'],
    [problem(card, 'regions'), 'Choose at most 2.'],
    [problem(card, 'replicas'), 'Enter 10 or less.'],
    [problem(card, 'canary'), 'Enter 1 or less.'],
    [problem(list.nth(1), 'qty'), 'Enter 1 or more.'],
  ]);
  assert.equal(await problem(list.nth(0), 'qty').isVisible(), false, 'the first row is fine');
  await shot(page, 'form-problems.png');

  // Rows within min_items and max_items: a third can be added, then no more; it can go again.
  await fillDeploy(card);
  await card.getByLabel('Asia Pacific').uncheck();
  const addRow = field(card, 'rows').getByTestId('add-row');
  await addRow.click();
  assert.equal(await list.count(), 3);
  assert.equal(await addRow.isDisabled(), true, 'max_items 3');
  assert.equal(await page.evaluate(() => document.activeElement?.getAttribute('name')), 'sku', 'a new row takes the focus');
  await list.nth(2).getByTestId('remove-row').click();
  assert.equal(await list.count(), 2);
  assert.equal(await addRow.isDisabled(), false);
  assert.equal(await list.nth(1).locator(':scope > legend').textContent(), 'Row 2');

  // What only the server refuses, here a quantity changed on the way: its path is /values/rows/1/qty,
  // and the problem shows at that row's quantity.
  const tamper = (url) => url.pathname === answerPath(view);
  await page.route(tamper, async (route) => {
    if (route.request().method() !== 'POST') return route.fallback();
    const body = JSON.parse(route.request().postData());
    body.values.rows[1].qty = 500;
    return route.continue({ postData: JSON.stringify(body) });
  });
  await press(card, 'accept');
  const serverProblem = problem(list.nth(1), 'qty');
  await serverProblem.waitFor();
  assert.ok((await serverProblem.textContent()).length > 0, 'the server’s message');
  assert.equal(await control(list.nth(1), 'qty').getAttribute('aria-invalid'), 'true');
  assert.equal(await problem(list.nth(0), 'qty').isVisible(), false, 'the other row is not blamed');
  assert.match(await card.getByTestId('form-problems').textContent(), /^The server did not accept this form: 1 problem/);
  assert.equal(posts.length, 1);
  assert.equal((await readGate(world.server, view)).state, 'open', 'the server refused it');
  await page.unroute(tamper);

  await press(card, 'accept');
  await card.waitFor({ state: 'detached' });
  const item = await waitForAnswerLine(page, view, 'submitted by a person');
  assert.deepEqual(posts.at(-1), { action: 'accept', values: DEPLOY_VALUES });
  const decided = await readGate(world.server, view);
  assert.equal(decided.state, 'resolved');
  assert.equal(decided.decision.action, 'accept');
  assert.deepEqual(decided.decision.values, DEPLOY_VALUES);

  // The resolved entry shows the values as the form asked for them.
  const value = (at) => item.locator(`[data-testid="values"] dd[data-path="${at}"]`);
  await waitForText(value('/environment'), 'Production');
  assert.equal(await value('/regions').textContent(), 'EMEA, Americas');
  assert.equal(await value('/notify').textContent(), 'Yes');
  assert.equal(await value('/start').textContent(), '2026-12-04T08:30:00Z');
  assert.equal(await value('/limits/memory').textContent(), '512');
  assert.equal(await value('/rows/1/sku').textContent(), 'B-2');
  assert.equal(await value('/rows/1/qty').textContent(), '5');
  await item.getByTestId('own-answer').waitFor();
  await shot(page, 'form-submitted.png');
  world.assertNoProblems();
});

test('a form given as a JSON Schema renders as its fields and answers; Decline sends no values', { timeout: TEST_TIMEOUT }, async (t) => {
  const world = await openWorld(t);
  const page = await world.page({ viewport: { width: 1100, height: 1600 } });
  // Loop-owned (openGate's loop and tool execution), as an MCP elicitation would be.
  const view = await openGate(world.server, { kind: 'harness.form', title: 'Sign-up', body: 'Who gets the account?', json_schema: SIGNUP_SCHEMA });
  assert.equal(view.gate.resolver, 'loop');
  assert.deepEqual(
    view.gate.prompt.schema.fields.map((f) => f.name),
    Object.keys(SIGNUP_SCHEMA.properties),
    'the properties in order',
  );
  const posts = watchPosts(page, answerPath(view));
  const card = openCard(page, view);
  await card.waitFor();
  assert.equal(await card.getByTestId('loop-id').textContent(), view.loop_id.slice(0, 8));

  assert.equal(await card.getByLabel('Full name').getAttribute('type'), 'text');
  assert.equal(await card.getByLabel('Email').getAttribute('type'), 'email');
  assert.equal(await card.getByLabel('Birthday').getAttribute('type'), 'date');
  assert.equal(await card.getByLabel('Seats').inputValue(), '5');
  assert.equal(await card.getByLabel('I accept the terms').isChecked(), false);
  assert.equal(await control(card, 'plan').inputValue(), 'free');
  assert.deepEqual(await control(card, 'plan').locator('option').allTextContents(), ['Free', 'Team']);
  assert.equal(await field(card, 'topics').locator('input[type="checkbox"]').count(), 2);
  assert.equal(await field(card, 'address').locator(':scope > legend').textContent(), 'Address');
  assert.equal(await rows(card, 'contacts').count(), 0, 'an optional list starts empty');

  await card.getByLabel('Full name').fill('A');
  await card.getByLabel('Email').fill('ada@example.com');
  // A postcode without a city: the address is given, so its city is required.
  await control(field(card, 'address'), 'zip').fill('W1');
  await press(card, 'accept');
  await assertRefusedHere(world.server, view, posts, [
    [problem(card, 'name'), 'Enter at least 2 characters.'],
    [problem(field(card, 'address'), 'city'), 'This field is required.'],
  ]);

  await card.getByLabel('Full name').fill('Ada Lovelace');
  await control(card, 'plan').selectOption('team');
  await card.getByLabel('Seats').fill('3');
  await card.getByLabel('I accept the terms').check();
  await field(card, 'topics').locator('input[value="tips"]').check();
  await control(field(card, 'address'), 'city').fill('London');
  await field(card, 'contacts').getByTestId('add-row').click();
  await control(rows(card, 'contacts').nth(0), 'who').fill('Charles');
  await press(card, 'accept');
  await waitForAnswerLine(page, view, 'submitted by a person');
  const values = { name: 'Ada Lovelace', email: 'ada@example.com', plan: 'team', seats: 3, terms: true, topics: ['tips'], address: { city: 'London', zip: 'W1' }, contacts: [{ who: 'Charles' }] };
  assert.deepEqual(posts.at(-1), { action: 'accept', values }, 'no birthday: an empty optional field is left out');
  assert.deepEqual((await readGate(world.server, view)).decision.values, values);

  // Decline needs no valid fields and sends none.
  const other = await openGate(world.server, { kind: 'harness.form', title: 'Sign-up again', body: 'Another account?', json_schema: SIGNUP_SCHEMA });
  const otherPosts = watchPosts(page, answerPath(other));
  await openCard(page, other).waitFor();
  await press(openCard(page, other), 'decline');
  const item = await waitForAnswerLine(page, other, 'declined by a person');
  assert.deepEqual(otherPosts, [{ action: 'decline' }]);
  const declined = await readGate(world.server, other);
  assert.equal(declined.decision.action, 'decline');
  assert.equal(declined.decision.values, undefined);
  assert.equal(await item.getByTestId('values').count(), 0);
  world.assertNoProblems();
});

// ---- the inbox: open-URL gates, and answers from elsewhere ----------------------------------------

test('an open-URL gate shows where it goes and its link, read from the server, and is marked done', { timeout: TEST_TIMEOUT }, async (t) => {
  const world = await openWorld(t);
  const page = await world.page({ viewport: { width: 1100, height: 900 } });
  const urlReads = [];
  page.on('request', (request) => request.url().endsWith('/url') && urlReads.push(new URL(request.url()).pathname));
  const view = await openGate(world.server, openUrlGate());
  assert.equal(JSON.stringify(view).includes('WDJB'), false, 'the URL is in no view');
  assert.equal(view.gate.prompt.origin, 'https://github.com');

  const card = openCard(page, view);
  await card.waitFor();
  assert.equal(await card.getAttribute('data-kind'), 'open_url');
  assert.equal(await card.getByTestId('question').textContent(), 'Authorize GitHub');
  assert.equal(await card.getByTestId('origin').textContent(), 'This opens https://github.com');
  const link = card.getByTestId('url-link');
  await waitForText(link, GITHUB_URL);
  assert.equal(await link.getAttribute('href'), GITHUB_URL);
  assert.equal(await link.getAttribute('target'), '_blank');
  assert.equal(await link.getAttribute('rel'), 'noopener noreferrer');
  assert.deepEqual(urlReads, [`${answerPath(view)}/url`], 'read once, from its own route');
  assert.deepEqual(await card.getByTestId('control').evaluateAll((buttons) => buttons.map((b) => b.dataset.action)), ['accept', 'decline', 'cancel']);
  assert.equal(await card.locator('[data-action="accept"]').textContent(), 'I have completed it');
  await shot(page, 'open-url-card.png');

  const posts = watchPosts(page, answerPath(view));
  await press(card, 'accept');
  await card.waitFor({ state: 'detached' });
  await waitForAnswerLine(page, view, 'marked done by a person');
  assert.deepEqual(posts, [{ action: 'accept' }]);
  assert.equal((await readGate(world.server, view)).decision.action, 'accept');
  world.assertNoProblems();
});

test('an open page follows answers made elsewhere: submitted and declined by alice, cancelled by policy', { timeout: TEST_TIMEOUT }, async (t) => {
  const world = await namedWorld(t);
  const bob = await world.pageAs('bob', { viewport: { width: 1100, height: 1200 } });
  const agent = world.as('agent');
  const form = await openGate(agent, smallForm({ response_policy: { timeout: 3600e9, on_timeout: 'respond', response: { action: 'decline' } } }));
  const url = await openGate(agent, openUrlGate());
  await openCard(bob, form).waitFor();
  assert.equal(await openCard(bob, form).getByTestId('deadline').textContent(), 'deadline in 1 h, then declined');
  // Bob's login may read the URL: his page shows it.
  await waitForText(openCard(bob, url).getByTestId('url-link'), GITHUB_URL);
  // Something typed on bob's page, which alice's answer overtakes.
  await control(openCard(bob, form), 'name').fill('typed by bob');

  const values = { name: 'v2.0 “Aurora”', rows: [{ note: 'first' }, { note: '<b>second</b>' }] };
  assert.equal((await answerViaApi(world.as('alice'), form, { action: 'accept', values })).status, 202);
  assert.equal((await answerViaApi(world.as('alice'), url, { action: 'decline' })).status, 202);
  await openCard(bob, form).waitFor({ state: 'detached' });
  await openCard(bob, url).waitFor({ state: 'detached' });
  const item = await waitForAnswerLine(bob, form, 'submitted by alice');
  await waitForText(item.locator('dd[data-path="/name"]'), 'v2.0 “Aurora”');
  assert.equal(await item.locator('dd[data-path="/rows/1/note"]').textContent(), '<b>second</b>');
  assert.equal(await item.locator('dd b').count(), 0, 'values are text');
  await waitForAnswerLine(bob, url, 'declined by alice');
  const decided = await readGate(world.as('bob'), form);
  assert.equal(decided.decision.principal, 'alice');
  assert.deepEqual(decided.decision.values, values);

  // A form the policy cancels after a second, while bob's page shows it.
  const timed = await openGate(agent, smallForm({ title: 'Soon cancelled', response_policy: { timeout: 1e9, on_timeout: 'respond', response: { action: 'cancel' } } }));
  const timedItem = await waitForAnswerLine(bob, timed, 'cancelled by policy after 1 s');
  assert.equal(await timedItem.getByTestId('how').textContent(), 'Answered on timeout');
  const cancelled = await readGate(world.as('bob'), timed);
  assert.equal(cancelled.decision.action, 'cancel');
  assert.equal(cancelled.decision.source, 'policy');
  await shot(bob, 'form-answered-elsewhere.png');
  world.assertNoProblems();
});

// ---- the answer-link page -------------------------------------------------------------------------

test('the answer link of a form renders its fields from the embedded prompt, checks them, and submits', { timeout: TEST_TIMEOUT }, async (t) => {
  const world = await linkWorld(t);
  const page = await world.page({ viewport: { width: 900, height: 1200 }, timezoneId: BERLIN });
  // Markup in the gate's text must stay text, and must not end the prompt's data block early.
  const evil = '</script><script>window.pwned=1</script><img src=x onerror="window.pwned=2">';
  const fields = [
    { name: 'target', label: `Target ${evil}`, kind: 'text', required: true, description: `Help ${evil}` },
    { name: 'when', label: 'When', kind: 'date_time' },
    { name: 'options', label: 'Options', kind: 'group', fields: [{ name: 'force', label: 'Force', kind: 'confirm' }] },
    { name: 'hosts', label: 'Hosts', kind: 'list', min_items: 1, max_items: 3, fields: [{ name: 'host', label: 'Host', kind: 'text', required: true }] },
  ];
  const { view, link } = await world.open({ loop: null, kind: 'harness.form', title: `Deploy ${evil}`, body: 'Where to?', schema: { fields } });
  const posts = watchPosts(page, new URL(link).pathname);
  await page.goto(link);
  assert.equal(await page.locator('h1').textContent(), `Deploy ${evil}`);
  const form = page.getByTestId('form');
  await form.waitFor();
  assert.equal(await field(form, 'target').locator('label').textContent(), `Target ${evil} *`);
  assert.equal(await field(form, 'target').getByTestId('field-help').textContent(), `Help ${evil}`);
  assert.equal(await page.locator('main script:not([type="application/json"]), main img').count(), 0);
  assert.equal(await page.evaluate(() => window.pwned), undefined);
  assert.deepEqual(await form.getByTestId('control').allTextContents(), ['Submit', 'Decline', 'Cancel']);

  await press(page, 'accept');
  await assertRefusedHere(world.server, view, posts, [
    [problem(form, 'target'), 'This field is required.'],
    [problem(rows(form, 'hosts').nth(0), 'host'), 'This field is required.'],
  ]);
  await control(form, 'target').fill('production');
  await control(form, 'when').fill('2026-12-04T09:30');
  await field(form, 'options').getByLabel('Force').check();
  await control(rows(form, 'hosts').nth(0), 'host').fill('web-1');
  await field(form, 'hosts').getByTestId('add-row').click();
  await control(rows(form, 'hosts').nth(1), 'host').fill('web-2');
  await shot(page, 'form-link.png');
  await press(page, 'accept');
  await waitForText(page.locator('#result'), 'Submitted.');
  const values = { target: 'production', when: '2026-12-04T08:30:00Z', options: { force: true }, hosts: [{ host: 'web-1' }, { host: 'web-2' }] };
  assert.deepEqual(posts, [{ action: 'accept', values }]);
  const decided = await waitForDecided(world.server, view);
  assert.deepEqual(decided.decision.values, values);
  assert.equal(decided.decision.principal, 'answer-link');

  // Once answered the page says so, and offers nothing.
  await page.reload();
  await page.locator('main').getByText('This form was already answered.').waitFor();
  assert.equal(await page.locator('main').getByRole('button').count(), 0);
  assert.equal(await page.locator('#form-prompt').count(), 0);
  world.assertNoProblems();
});

test('the answer link of an open-URL gate shows its origin and link, and is marked done', { timeout: TEST_TIMEOUT }, async (t) => {
  const world = await linkWorld(t);
  const page = await world.page({ viewport: { width: 900, height: 900 } });
  const { view, link } = await world.open(openUrlGate({ url: 'https://example.com/approve?ticket=7&next="<b>x</b>"' }));
  const posts = watchPosts(page, new URL(link).pathname);
  await page.goto(link);
  assert.equal(await page.locator('.origin').textContent(), 'This opens https://example.com');
  // The page shows what the URL route gives a person allowed to answer.
  const { body } = await api(world.server, 'GET', `${answerPath(view)}/url`);
  const anchor = page.locator('#open-url a');
  assert.equal(await anchor.getAttribute('href'), body.url);
  assert.equal(await anchor.textContent(), body.url);
  assert.equal(await anchor.getAttribute('target'), '_blank');
  assert.equal(await anchor.getAttribute('rel'), 'noopener noreferrer');
  assert.equal(await page.locator('main b').count(), 0, 'the URL is text');
  assert.deepEqual(await page.locator('#open-url button').allTextContents(), ['I have completed it', 'Decline', 'Cancel']);
  await shot(page, 'open-url-link.png');
  await press(page, 'accept');
  await waitForText(page.locator('#result'), 'Marked done.');
  assert.deepEqual(posts, [{ action: 'accept' }]);
  const decided = await waitForDecided(world.server, view);
  assert.equal(decided.decision.action, 'accept');
  assert.equal(decided.decision.principal, 'answer-link');
  await page.reload();
  await page.locator('main').getByText('This request was already answered.').waitFor();
  assert.equal(await page.locator('main a').count(), 0, 'no link once answered');
  world.assertNoProblems();
});

// ---- phone width ----------------------------------------------------------------------------------

test('at phone width (375 px) forms, their problems, their values and open-URL gates fit, and every button can be reached', { timeout: TEST_TIMEOUT }, async (t) => {
  const world = await openWorld(t);
  const long = 'a-label-without-any-spaces-'.repeat(6);
  const fields = [
    ...DEPLOY_FIELDS,
    {
      name: 'wide',
      label: long,
      kind: 'select',
      description: long,
      options: [{ value: 'x', label: long }],
    },
    { name: 'picks', label: long, kind: 'multi_select', options: [{ value: 'y', label: long }] },
  ];
  const form = await openGate(world.server, deployForm({ title: long, body: long, schema: { fields } }));
  const url = await openGate(world.server, openUrlGate({ url: `https://github.com/login/device?code=${'A'.repeat(300)}` }));
  const page = await world.page({ ...PHONE, timezoneId: BERLIN });
  const card = openCard(page, form);
  await card.waitFor();
  await waitForText(openCard(page, url).getByTestId('url-link'), `https://github.com/login/device?code=${'A'.repeat(300)}`);
  await field(card, 'rows').getByTestId('add-row').tap();
  await assertFitsItsViewport(page);
  await assertButtonsReachable(page, card);
  await assertButtonsReachable(page, openCard(page, url));

  await card.locator('[data-action="accept"]').tap();
  await problem(card, 'service').waitFor();
  await assertFitsItsViewport(page);
  await shot(page, 'form-phone.png');

  await fillDeploy(card);
  await card.locator('[data-action="accept"]').tap();
  const item = await waitForAnswerLine(page, form, 'submitted by a person');
  await item.locator('dd[data-path="/rows/1/qty"]').waitFor();
  await assertFitsItsViewport(page);
  await shot(page, 'form-phone-submitted.png');
  world.assertNoProblems();
});

test('at phone width (375 px) the answer-link page of a form fits and submits', { timeout: TEST_TIMEOUT }, async (t) => {
  const world = await linkWorld(t);
  const long = 'a-label-without-any-spaces-'.repeat(6);
  const { view, link } = await world.open(deployForm({ title: long, body: long }));
  const page = await world.page({ ...PHONE, timezoneId: BERLIN });
  await page.goto(link);
  const form = page.getByTestId('form');
  await form.waitFor();
  await assertFitsItsViewport(page);
  await assertButtonsReachable(page, page.locator('main'));
  await fillDeploy(form);
  await assertFitsItsViewport(page);
  await form.locator('[data-action="accept"]').tap();
  await waitForText(page.locator('#result'), 'Submitted.');
  assert.deepEqual((await waitForDecided(world.server, view)).decision.values, DEPLOY_VALUES);
  world.assertNoProblems();
});
