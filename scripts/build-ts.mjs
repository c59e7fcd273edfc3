/* global process */
// `npm run build:ts`: compiles lib/ and fallback/ twice, as ES modules into dist/esm and as
// CommonJS into dist/cjs (package.json's "exports" points `import` at one and `require` at the
// other), from a clean dist/ so no output of a deleted source survives.
//
// Each build gets a package.json that says which module system its .js files are: the package's
// own package.json has no "type", so Node would read dist/esm/**/*.js as CommonJS and fail on
// `export`. lib/*.cts files compile to .cjs and are CommonJS in both builds whatever this says.
import { spawnSync } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';

const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
const builds = [
  { config: 'tsconfig.esm.json', dir: 'dist/esm', type: 'module' },
  { config: 'tsconfig.cjs.json', dir: 'dist/cjs', type: 'commonjs' },
];

rmSync('dist', { recursive: true, force: true });
for (const { config, dir, type } of builds) {
  const { status } = spawnSync(process.execPath, [tsc, '-p', config], { stdio: 'inherit' });
  if (status !== 0) process.exit(status ?? 1);
  mkdirSync(dir, { recursive: true });
  writeFileSync(`${dir}/package.json`, `${JSON.stringify({ type })}\n`);
}
