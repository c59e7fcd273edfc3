/* global process */
// `npm run build:ts`: compiles lib/ and fallback/ as CommonJS into dist/cjs, from a clean dist/ so
// no output of a deleted source survives; then writes dist/esm, the ES module entries of
// package.json's "exports", each a wrapper of its CommonJS twin (below). No ES module build of the
// sources is made: nothing would load it.
//
// Each half of dist/ gets a package.json that says which module system its .js files are: the
// package's own package.json has no "type", so Node would read dist/esm/**/*.js as CommonJS and
// fail on `export`. lib/*.cts files compile to .cjs and are CommonJS whatever this says.
import { spawnSync } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { posix } from 'node:path';

const require = createRequire(import.meta.url);
const tsc = require.resolve('typescript/bin/tsc');

rmSync('dist', { recursive: true, force: true });
const { status } = spawnSync(process.execPath, [tsc, '-p', 'tsconfig.cjs.json'], { stdio: 'inherit' });
if (status !== 0) process.exit(status ?? 1);
for (const [dir, type] of [
  ['dist/cjs', 'commonjs'],
  ['dist/esm', 'module'],
]) {
  mkdirSync(dir, { recursive: true });
  writeFileSync(`${dir}/package.json`, `${JSON.stringify({ type })}\n`);
}

// The ES module entries run the CommonJS build: an application that loads keepcount both ways
// (itself as ESM, a dependency with require) then has one copy of it, not two. With two, each
// registered its own scratch array with the one native binding (the last won, so the other's window
// reset times froze), and a Rate made by one copy was refused by the other's WindowQuota ("must be
// a Rate. Received an instance of Rate").
//
// Each "import" entry has three files, all naming the CommonJS twin by a relative path:
// - `default`, for bundlers: named re-exports (`export { … } from '…'`). Node reads CommonJS export
//   names for them, and bundlers (esbuild, rollup's CommonJS plugin) follow them where a default
//   import broke.
// - `node-addons`, for Node (its own condition, on unless --no-addons; bundlers do not set it): the
//   twin loaded with createRequire, its names exported as constants. Node 20 raises a CommonJS
//   module's load error (keepcount/metrics without prom-client, KEEPCOUNT_BACKEND=native with no
//   binary) reached through a static import twice: it rejects the import() and it also throws it
//   as an uncaught exception (nodejs/node#51603), so a caught import() still killed the process. A
//   require() inside the module body fails it once. Not under `node`: bundlers set `node` for
//   server bundles (esbuild's --platform=node does) and esbuild does not follow createRequire, so
//   its bundle looked for '../../cjs/…' beside itself and failed at load.
// - `types`: `export *` of the twin's declarations. Declarations of their own would make every
//   class with #private members two types, one per condition, and TypeScript would refuse an
//   imported Rate where a required one is expected, although at run time they are one class.
// Both wrappers export exactly the twin's names and objects; `export *` would drop a default
// export, which the entries do not have (checked below).
const pkg = require('../package.json');
for (const entry of Object.values(pkg.exports)) {
  if (entry.import === undefined) continue;
  const { types, 'node-addons': node, default: bundler } = entry.import;
  const twin = bundler.replace('./dist/esm/', './dist/cjs/');
  const names = Object.keys(require(`.${twin}`)).filter((name) => name !== '__esModule');
  const clash = names.filter((name) => ['default', 'createRequire', 'cjs'].includes(name));
  if (clash.length > 0) throw new Error(`${twin} exports ${clash.join(', ')}: the wrappers below cannot`);
  // '../../cjs/…': never a bare specifier; POSIX, as package.json's paths and import specifiers are.
  const from = (file) => posix.relative(posix.dirname(file), twin);
  const header = `// keepcount's ES module entry: the CommonJS build's exports (scripts/build-ts.mjs says why).\n`;
  mkdirSync(posix.dirname(bundler), { recursive: true });
  writeFileSync(bundler, `${header}export { ${names.join(', ')} } from '${from(bundler)}';\n`);
  writeFileSync(
    node,
    `${header}import { createRequire } from 'node:module';\n` +
      `const cjs = createRequire(import.meta.url)('${from(node)}');\n` +
      `export const { ${names.join(', ')} } = cjs;\n`,
  );
  writeFileSync(
    types,
    `// The declarations of keepcount's ES module entry: the CommonJS build's (scripts/build-ts.mjs).\n` +
      `export * from '${from(types)}';\n`,
  );
}
