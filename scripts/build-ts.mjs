/* global process */
// `npm run build:ts`: compiles lib/ and fallback/ twice, as ES modules into dist/esm and as
// CommonJS into dist/cjs (package.json's "exports" points `import` at one and `require` at the
// other), from a clean dist/ so no output of a deleted source survives; then turns the ES module
// entries into wrappers of the CommonJS build (below), keeping the ES build's declarations.
//
// Each build gets a package.json that says which module system its .js files are: the package's
// own package.json has no "type", so Node would read dist/esm/**/*.js as CommonJS and fail on
// `export`. lib/*.cts files compile to .cjs and are CommonJS in both builds whatever this says.
import { spawnSync } from 'node:child_process';
import { mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, relative } from 'node:path';

const require = createRequire(import.meta.url);
const tsc = require.resolve('typescript/bin/tsc');
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

// The ES module entries run the CommonJS build: each is a wrapper that imports its CommonJS twin
// and re-exports its names. An application that loads keepcount both ways (itself as ESM, a
// dependency with require) then has one copy of it, not two: with two, each registered its own
// scratch array with the one native binding (the last won, so the other's window reset times
// froze), and a Rate made by one copy was refused by the other's WindowQuota ("must be a Rate.
// Received an instance of Rate"). The declarations stay the ESM build's; its other .js files go.
const pkg = require('../package.json');
const entries = Object.values(pkg.exports)
  .map((entry) => entry.import?.default)
  .filter((path) => path !== undefined);
for (const file of readdirSync('dist/esm', { recursive: true })) {
  if (file.endsWith('.js')) rmSync(join('dist/esm', file));
}
for (const entry of entries) {
  const twin = entry.replace('./dist/esm/', './dist/cjs/');
  const names = Object.keys(require(`.${twin}`)).filter((name) => name !== '__esModule');
  const from = relative(dirname(entry), twin); // '../../cjs/…': never a bare specifier
  // Named re-exports, not a default import: Node reads CommonJS export names for them, and
  // bundlers (esbuild, rollup's CommonJS plugin) handle them where a default import broke.
  writeFileSync(
    entry,
    `// keepcount's ES module entry: the CommonJS build's exports (scripts/build-ts.mjs says why).\n` +
      `export { ${names.join(', ')} } from '${from}';\n`,
  );
}
