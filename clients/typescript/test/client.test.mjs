// The TypeScript client against the real binary (GATEHOUSE_BIN, by default the debug build of
// this checkout): ask and answer from two sides, timeouts, withdrawals, typed errors, listings,
// the journal iterator across a restart of the server, and the SSE parser on split bytes.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { Client, GateConflict, InvalidRequest, SseParser, TimedOut, Unauthorized, Unreachable, Withdrawn } from '../index.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const BINARY = process.env.GATEHOUSE_BIN ?? path.join(here, '..', '..', '..', 'target', 'debug', 'gatehouse');

/** `gatehouse serve` on a loopback port and a temporary database, stopped by its PID. */
async function startServer(t, { extra = [], dir, bind = '127.0.0.1:0' } = {}) {
  dir ??= mkdtempSync(path.join(tmpdir(), 'gatehouse-ts-'));
  const child = spawn(BINARY, ['serve', '--bind', bind, '--db', path.join(dir, 'gatehouse.db'), ...extra], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  const url = await new Promise((resolve, reject) => {
    let log = '';
    const timer = setTimeout(() => reject(new Error(`gatehouse did not start:\n${log}`)), 30_000);
    child.stderr.on('data', (chunk) => {
      log += chunk;
      const found = /listening on (http:\/\/[0-9.:]+)/.exec(log);
      if (found) {
        clearTimeout(timer);
        resolve(found[1]);
      }
    });
    child.on('exit', (code) => reject(new Error(`gatehouse exited (${code}):\n${log}`)));
  });
  const server = {
    url,
    dir,
    async stop() {
      if (child.exitCode !== null) return;
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      await exited;
    },
    /** SIGTERM, then the same database on the same port. */
    async restart() {
      await server.stop();
      return startServer(t, { extra, dir, bind: url.slice('http://'.length) });
    },
  };
  t.after(async () => {
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
  });
  return server;
}

async function eventually(what, check, within = 15_000) {
  const deadline = Date.now() + within;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`not within ${within} ms: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

const openGate = (client, session) => eventually('the gate opens', async () => (await client.gates({ session }))[0]);

test('ask resolves once a person answers; a late answer is told who won', async (t) => {
  const server = await startServer(t);
  const client = new Client(server.url);
  const session = crypto.randomUUID();
  const asking = client.ask('Deploy to prod?', { choices: ['yes', 'no'], session });
  const gate = await openGate(client, session);
  await assert.rejects(client.answer(gate.gate.id, 'maybe'), (e) => e instanceof InvalidRequest && e.fields.length > 0);
  assert.ok((await client.answer(gate.gate.id, 'yes')) > 0);
  assert.equal(await asking, 'yes');
  const inbox = await (await fetch(`${server.url}/v1/sessions/${session}/loops/${gate.loop_id}/commands?include_acked=true`)).json();
  assert.ok(inbox.commands[0].acked_at, 'ask acknowledged its command');
  await assert.rejects(client.answer(gate.gate.id, 'no'), (e) => e instanceof GateConflict && e.resolution.reason === 'answered');
});

test('a timeout answers the default or withdraws the gate; a withdrawn gate rejects', async (t) => {
  const server = await startServer(t);
  const client = new Client(server.url);
  assert.equal(await client.ask('Proceed?', { choices: ['yes', 'no'], timeout: 1, default: 'no' }), 'no');
  const session = crypto.randomUUID();
  await assert.rejects(client.ask('Anyone there?', { timeout: 1, session }), TimedOut);
  const [closed] = await client.gates({ state: 'closed', session });
  assert.equal(closed.resolution.reason, 'abandoned');

  const other = crypto.randomUUID();
  const asking = client.ask('Which region?', { session: other });
  asking.catch(() => {}); // it rejects before assert.rejects below looks: not unhandled
  const gate = await openGate(client, other);
  const closing = await fetch(`${server.url}/v1/sessions/${other}/gates/${gate.gate.id}/close`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ reason: 'owner_closed' }),
  });
  assert.equal(closing.status, 200);
  await assert.rejects(asking, (e) => e instanceof Withdrawn && e.view.resolution.reason === 'owner_closed');
});

test('ask rides out a restart; events resume after it without a gap or a repeat', async (t) => {
  let server = await startServer(t);
  const client = new Client(server.url);
  const session = crypto.randomUUID();
  const asking = client.ask('Still there after a restart?', { session });
  const gate = await openGate(client, session);
  const controller = new AbortController();
  const events = client.events({ session, signal: controller.signal });
  const seen = [];
  for await (const event of events) {
    seen.push(event.seq);
    if (event.type === 'UserInputRequested') break;
  }
  server = await server.restart();
  await client.answer(gate.gate.id, 'yes, still here');
  assert.equal(await asking, 'yes, still here');
  for await (const event of client.events({ after: seen.at(-1), session, signal: controller.signal })) {
    seen.push(event.seq);
    if (event.type === 'GateResolved') break;
  }
  controller.abort();
  const journal = await (await fetch(`${server.url}/v1/sessions/${session}/journal`)).json();
  assert.deepEqual(seen, journal.events.map((e) => e.journal_seq));
});

test('credentials and unreachable servers give typed errors', async (t) => {
  const dir = mkdtempSync(path.join(tmpdir(), 'gatehouse-ts-'));
  writeFileSync(path.join(dir, 'tokens'), 'admin root admin-secret-0123456789\n');
  const server = await startServer(t, { dir, extra: ['--tokens-file', path.join(dir, 'tokens')] });
  await assert.rejects(new Client(server.url).gates(), (e) => e instanceof Unauthorized && /token/.test(e.message));
  assert.deepEqual(await new Client(server.url, { token: 'admin-secret-0123456789' }).gates(), []);
  await assert.rejects(new Client('http://127.0.0.1:9').gates(), Unreachable);
});

test('the SSE parser reads the same frames however the bytes are split', () => {
  const text = ': comment\r\nevent: enduring\r\nid: 7\r\ndata: {"v":1,\r\ndata: "event":{}}\r\n\r\nretry: 3000\nevent: x\rdata: y\r\r';
  const bytes = new TextEncoder().encode(text);
  const whole = new SseParser().feed(bytes);
  assert.deepEqual(whole, [
    { event: 'enduring', data: '{"v":1,\n"event":{}}', id: '7' },
    { event: 'x', data: 'y', id: '7' },
  ]);
  for (let split = 0; split <= bytes.length; split++) {
    const parser = new SseParser();
    assert.deepEqual([...parser.feed(bytes.slice(0, split)), ...parser.feed(bytes.slice(split))], whole, `split at ${split}`);
  }
});
