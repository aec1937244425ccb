// Fails when dist/ is not what `npm run build` makes from src/: the broker
// embeds dist/wharf.js (GET /client.js), so it must be checked in up to
// date. Rebuilds into a temporary directory and compares byte for byte.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const tmp = mkdtempSync(join(tmpdir(), 'wharf-js-dist-'));
try {
  const r = spawnSync(process.execPath, [join(root, 'scripts/build.mjs'), tmp], { stdio: 'inherit' });
  if (r.status !== 0) process.exit(1);
  const built = readdirSync(tmp).sort();
  const checked = readdirSync(join(root, 'dist')).sort();
  const stale = [];
  for (const name of new Set([...built, ...checked])) {
    let a = null;
    let b = null;
    try { a = readFileSync(join(tmp, name)); } catch {}
    try { b = readFileSync(join(root, 'dist', name)); } catch {}
    if (!a || !b || !a.equals(b)) stale.push(name);
  }
  if (stale.length) {
    console.error(`check-dist: dist/ differs from a fresh build in: ${stale.join(', ')}; run \`npm run build\` and commit dist/`);
    process.exit(1);
  }
  console.error(`check-dist: dist/ is up to date (${built.join(', ')})`);
} finally {
  rmSync(tmp, { recursive: true, force: true });
}
