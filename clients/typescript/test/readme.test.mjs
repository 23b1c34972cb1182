// The READMEs' TypeScript examples, run as they are written (their import pointed at this
// checkout's client and the server's URL swapped in), while a person answers over HTTP: the main
// README's, and the client README's permission gate and form.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.join(here, '..', '..', '..');
const BINARY = process.env.GATEHOUSE_BIN ?? path.join(repo, 'target', 'debug', 'gatehouse');

/**
 * Runs the block after `<!-- marker -->` in `readme` against a fresh server; `respond(url, gate)`
 * answers the gate it opens (returning the HTTP status); resolves to what the example printed.
 */
async function runExample(t, readme, marker, respond) {
  const text = readFileSync(path.join(repo, readme), 'utf8');
  const block = new RegExp(`<!-- ${marker} -->\\n\`\`\`\\w+\\n([\\s\\S]*?)\`\`\``).exec(text);
  assert.ok(block, `${readme} has a block after <!-- ${marker} -->`);
  const dir = mkdtempSync(path.join(tmpdir(), 'gatehouse-readme-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));

  const server = spawn(BINARY, ['serve', '--bind', '127.0.0.1:0', '--db', path.join(dir, 'g.db')], { stdio: ['ignore', 'ignore', 'pipe'] });
  t.after(() => server.kill('SIGTERM'));
  const url = await new Promise((resolve, reject) => {
    let log = '';
    server.stderr.on('data', (chunk) => {
      log += chunk;
      const found = /listening on (http:\/\/[0-9.:]+)/.exec(log);
      if (found) resolve(found[1]);
    });
    server.on('exit', () => reject(new Error(log)));
  });

  const client = pathToFileURL(path.join(here, '..', 'index.js')).href;
  const example = path.join(dir, 'example.mjs');
  const code = block[1].replace(/from 'gatehouse'/, `from '${client}'`);
  writeFileSync(example, code.replace('http://127.0.0.1:8080', url));
  const run = spawn(process.execPath, [example], { stdio: ['ignore', 'pipe', 'inherit'] });
  let printed = '';
  run.stdout.on('data', (chunk) => (printed += chunk));
  const exited = new Promise((resolve) => run.on('exit', resolve));

  let gate;
  for (let i = 0; i < 300 && !gate; i++) {
    gate = (await (await fetch(`${url}/v1/gates?state=open`)).json()).gates[0];
    if (!gate) await new Promise((resolve) => setTimeout(resolve, 50));
  }
  assert.ok(gate, "the example's gate opened");
  assert.equal(await respond(url, gate), 202);
  assert.equal(await exited, 0);
  return printed;
}

const post = async (url, gate, body) =>
  (
    await fetch(`${url}/v1/sessions/${gate.session_id}/gates/${gate.gate.id}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    })
  ).status;

test('the README TypeScript example runs', async (t) => {
  const printed = await runExample(t, 'README.md', 'typescript-example', (url, gate) =>
    post(url, gate, { action: 'answer', values: { answer: 'yes' } }),
  );
  assert.equal(printed, 'the person said yes\n');
});

test("the client README's permission example runs", async (t) => {
  const printed = await runExample(t, path.join('clients', 'typescript', 'README.md'), 'typescript-permission-example', (url, gate) => {
    assert.equal(gate.gate.kind, 'harness.permission');
    assert.equal(gate.gate.tool_call.editable, true);
    return post(url, gate, { action: 'Approve', values: { tool_input: { command: 'git push --dry-run origin main' } } });
  });
  assert.equal(printed, 'running git push --dry-run origin main\n');
});

test("the client README's form example runs", async (t) => {
  const printed = await runExample(t, path.join('clients', 'typescript', 'README.md'), 'typescript-form-example', (url, gate) => {
    assert.equal(gate.gate.kind, 'harness.form');
    assert.equal(gate.gate.prompt.title, 'Deploy');
    return post(url, gate, { action: 'accept', values: { target: 'prod' } });
  });
  assert.equal(printed, 'deploying to prod\n');
});
