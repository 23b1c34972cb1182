// The README's TypeScript example, run as it is written (its import pointed at this checkout's
// client and the server's URL swapped in), while a person answers over HTTP.

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

test('the README TypeScript example runs', async (t) => {
  const readme = readFileSync(path.join(repo, 'README.md'), 'utf8');
  const block = /<!-- typescript-example -->\n```\w+\n([\s\S]*?)```/.exec(readme);
  assert.ok(block, 'README has a block after <!-- typescript-example -->');
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
  writeFileSync(example, block[1].replace("from 'gatehouse'", `from '${client}'`).replace('http://127.0.0.1:8080', url));
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
  const answered = await fetch(`${url}/v1/sessions/${gate.session_id}/gates/${gate.gate.id}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ action: 'answer', values: { answer: 'yes' } }),
  });
  assert.equal(answered.status, 202);
  assert.equal(await exited, 0);
  assert.equal(printed, 'the person said yes\n');
});
