// The hand-written declarations (src/index.d.ts) against an example of
// their documented use, compiled with the TypeScript compiler the
// repository's tools bring along (node_modules/.bin/tsc); skipped when
// there is none.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const tsc = join(here, '..', '..', '..', 'node_modules', '.bin', 'tsc');

function compile(files) {
  const r = spawnSync(tsc, ['--noEmit', '--strict', '--module', 'nodenext', '--moduleResolution', 'nodenext', '--target', 'es2022', '--skipLibCheck', ...files], { encoding: 'utf8' });
  return { status: r.status, out: `${r.stdout}${r.stderr}` };
}

test('the declarations type-check their documented use, and refuse a misuse', { skip: !existsSync(tsc) && 'no node_modules/.bin/tsc' }, () => {
  const ok = compile([join(here, 'types-example.ts')]);
  assert.equal(ok.status, 0, ok.out);
  const dir = mkdtempSync(join(tmpdir(), 'rl-types-'));
  const bad = join(dir, 'bad.ts');
  writeFileSync(bad, `import { Worker } from ${JSON.stringify(join(here, '..', 'src', 'index.js'))};\nnew Worker({ handler: (t) => t.setOutputt(1) });\n`);
  const refused = compile([bad]);
  assert.notEqual(refused.status, 0, 'a misspelt method compiles');
  assert.match(refused.out, /setOutputt/);
});
