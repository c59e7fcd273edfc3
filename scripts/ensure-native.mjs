/* global console, process */
// Builds the native addon before the demo when a Rust toolchain is present, so a fresh clone's
// `npm ci && npm run demo` shows the Rust core. cargo makes this a no-op when nothing changed.
// Without cargo the demo still runs, on the TypeScript fallback, and this says so.
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';

/**
 * What the demo runs on without a new build: an earlier build's addon when one is here and loads
 * (lib/ loads it as it would any build), else the fallback. The demo's first line says it too.
 */
function withoutBuild() {
  try {
    createRequire(import.meta.url)('../binding.js');
    return 'the demo runs on the native addon of an earlier build, which may be out of date';
  } catch {
    return 'the demo runs on the TypeScript fallback';
  }
}

const hasCargo = spawnSync('cargo', ['--version'], { stdio: 'ignore' }).status === 0;
if (!hasCargo) {
  console.log(`keepcount: no Rust toolchain (cargo) on PATH; ${withoutBuild()}.`);
  process.exit(0);
}
console.log('keepcount: building the native addon (release; the first build takes a few minutes)...');
const build = spawnSync(
  'npx',
  ['napi', 'build', '--platform', '--release', '--js', 'binding.js', '--dts', 'binding.d.ts'],
  {
    stdio: ['ignore', 'ignore', 'inherit'],
  },
);
if (build.status !== 0) {
  console.log(`keepcount: the native build failed (see above); ${withoutBuild()}.`);
}
