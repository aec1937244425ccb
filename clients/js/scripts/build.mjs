// Builds src/wharf.ts into one ES module and its declarations:
//   node scripts/build.mjs [OUT_DIR]     (default dist)
// writes OUT_DIR/wharf.js and OUT_DIR/wharf.d.ts with the TypeScript
// compiler of devDependencies (no bundler: the source is one file with no
// imports). The output depends only on the sources and that compiler, so
// `npm run check-dist` can rebuild and compare.
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const out = resolve(root, process.argv[2] ?? 'dist');
const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
const r = spawnSync(process.execPath, [tsc, '-p', join(root, 'tsconfig.json'), '--outDir', out], {
  cwd: root,
  stdio: 'inherit',
});
if (r.status !== 0) {
  console.error(`build: tsc failed (status ${r.status})`);
  process.exit(1);
}
console.error(`build: wrote ${join(out, 'wharf.js')} and wharf.d.ts`);
