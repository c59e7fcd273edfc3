/* global console, process */
// Builds the native addon before the demo when a Rust toolchain is present, so a fresh clone's
// `npm ci && npm run demo` shows the Rust core. cargo makes this a no-op when nothing changed.
// Without cargo the demo still runs, on the TypeScript fallback, and this says so.
import { spawnSync } from 'node:child_process';

const hasCargo = spawnSync('cargo', ['--version'], { stdio: 'ignore' }).status === 0;
if (!hasCargo) {
  console.log('keepcount: no Rust toolchain (cargo) on PATH; the demo runs on the TypeScript fallback.');
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
  console.log('keepcount: the native build failed (see above); the demo runs on the TypeScript fallback.');
}
