import test from 'ava';
import { spawn, spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { backend } from '../lib/index.js';
import { title } from './helpers.js';

/**
 * The demos run one at a time: each is a load generator and its servers timing themselves on the
 * machine's cores, and two at once starve each other into results that say nothing.
 */

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
  ms: number;
}

/**
 * Runs `npm run demo -- --short [args]` the way the script does (tsx), killed after `limitMs`;
 * `interrupt` sends it SIGINT (Ctrl-C) once it resolves.
 */
function runDemo(limitMs: number, args: string[] = [], interrupt?: Promise<unknown>): Promise<Run> {
  const started = performance.now();
  const demo = join(__dirname, '..', 'demo', 'index.ts');
  const child = spawn(process.execPath, ['--import', 'tsx', demo, '--short', ...args], {
    env: { ...process.env, KEEPCOUNT_SILENCE_FALLBACK: '1' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  void interrupt?.then(() => child.kill('SIGINT'));
  const killer = setTimeout(() => child.kill('SIGKILL'), limitMs);
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  return new Promise((resolve, reject) => {
    child.on('error', reject);
    child.on('exit', (code) => {
      clearTimeout(killer);
      resolve({ code, stdout, stderr, ms: performance.now() - started });
    });
  });
}

/** The table's row for `client`: its numbers by column name. */
function row(stdout: string, client: string): Record<string, number> {
  const lines = stdout.split('\n');
  const head = lines
    .find((l) => l.startsWith('client '))
    ?.trim()
    .split(/\s+/);
  const cells = lines
    .find((l) => l.startsWith(`${client} `))
    ?.trim()
    .split(/\s+/);
  if (head === undefined || cells === undefined) throw new Error(`no table row for ${client} in:\n${stdout}`);
  return Object.fromEntries(head.slice(1).map((name, i) => [name, Number(cells[i + 1])]));
}

test.serial(
  title('npm run demo -- --short prints the outcome table, floods get 429s, the polite client mostly 200s'),
  async (t) => {
    t.timeout(40_000);
    const run = await runDemo(30_000);
    t.is(run.code, 0, run.stderr);
    t.true(run.ms < 30_000, `finished in ${run.ms} ms`);
    t.regex(run.stdout, new RegExp(`^keepcount demo: backend ${backend}`));
    t.regex(run.stdout, /client\s+requests\s+200\s+429\s+503\s+504\s+other\s+p50\/ms\s+p99\/ms/);

    const polite = row(run.stdout, 'polite');
    const flood = row(run.stdout, 'flood');
    t.log(`polite ${JSON.stringify(polite)}\nflood ${JSON.stringify(flood)}`);
    t.true(polite.requests! > 0 && polite['200']! > polite.requests! / 2, 'polite: mostly 200');
    t.is(polite['429'], 0, 'polite stays within its quota');
    t.true(flood['429']! > flood['200']!, 'flood: mostly 429');
    t.true(flood['429']! > 0);
    for (const r of [polite, flood]) t.true(Number.isFinite(r['p50/ms']) && Number.isFinite(r['p99/ms']));
    t.regex(run.stdout, /in flight after the run: 0;/, 'no in-flight slot leaked');
    // The flooder heads the top talkers, with more requests than the polite client sends at all.
    const top = /top talkers[^\n]*\n\s+(\S+)\s+(\d+)/.exec(run.stdout);
    t.is(top?.[1], 'flood', run.stdout);
    t.true(Number(top?.[2]) > 40, `flood's lower bound ${top?.[2]}`);
  },
);

test.serial(title('npm run demo -- --cluster 2 holds the flood to one limit for both workers together'), async (t) => {
  t.timeout(40_000);
  const run = await runDemo(30_000, ['--cluster', '2']);
  if (backend === 'fallback') {
    // Sharing needs the native backend: the demo says so with the coded error and fails.
    t.is(run.code, 1);
    t.regex(run.stderr, /ERR_KEEPCOUNT_UNSUPPORTED/);
    return;
  }
  t.is(run.code, 0, run.stderr);
  t.regex(run.stdout, /2 node:cluster workers on that port/);
  const flood = row(run.stdout, 'flood');
  // Past the rate limit means 200, 503 or 504. The shared limit admits 20 per 1000 ms window; the
  // 4 s run spans at most 5 windows (a window starts at its first request). Per-process limits
  // would have let up to twice that through.
  const admitted = flood['200']! + flood['503']! + flood['504']!;
  t.log(`flood admitted past the rate limit: ${admitted}`);
  t.true(admitted > 0 && admitted <= 100, `flood admitted ${admitted}`);
  t.regex(run.stdout, /in flight after the run: 0;/);
});

test.serial(
  title('npm run demo -- --redis holds the flood to one global limit across 3 proxy processes'),
  async (t) => {
    t.timeout(40_000);
    // Fails (never skips) where redis-server is missing, as every Redis spec: the demo says so.
    const run = await runDemo(30_000, ['--redis']);
    t.is(run.code, 0, run.stderr);
    t.regex(run.stdout, /3 proxy processes, one per port/);
    const ports = /^proxy 127\.0\.0\.1:(\d+), (\d+), (\d+):/m.exec(run.stdout);
    t.is(new Set(ports?.slice(1)).size, 3, 'three ports');
    const flood = row(run.stdout, 'flood');
    const windows = Number(/\((\d+) in this run\); per-process/.exec(run.stdout)?.[1]) / 20;
    // Past the rate limit means 200, 503 or 504. The global limit admits 20 per 1000 ms wall-clock
    // window, plus the overshoot of bursts that reach several proxies within one sync period (the
    // flood's parts are a third of a second apart, so they rarely do). Per-process limits would
    // let 3 × 20 per window through; this allows at most 2 × 20.
    const admitted = flood['200']! + flood['503']! + flood['504']!;
    t.log(`flood admitted past the rate limit: ${admitted} in ${windows} windows`);
    t.true(windows >= 5 && windows <= 6, `${windows} windows`);
    t.true(admitted >= 20 && admitted <= 2 * 20 * windows, `flood admitted ${admitted}`);
    t.regex(run.stdout, new RegExp(`flood admitted past the rate limit \\(200 \\+ 503 \\+ 504\\): ${admitted}\n`));
    t.regex(run.stdout, /in flight after the run: 0;/);
  },
);

test.serial(title('npm run demo refuses bad flags with its usage line and exit code 2'), async (t) => {
  for (const args of [
    ['--cluster', 'abc'],
    ['--cluster=-2'],
    ['--cluster', '1.5'],
    ['--redis', '--cluster', '2'],
    ['--bogus'],
  ]) {
    const run = await runDemo(30_000, args);
    t.is(run.code, 2, args.join(' '));
    t.regex(run.stderr, /usage: npm run demo/, args.join(' '));
  }
});

test.serial(title('npm run demo -- --cluster 2 interrupted by Ctrl-C leaves no shared segment behind'), async (t) => {
  if (backend !== 'native') {
    t.pass('the cluster demo needs the native backend');
    return;
  }
  const before = new Set(readdirSync('/dev/shm'));
  const segments = (): string[] =>
    readdirSync('/dev/shm').filter((f) => f.startsWith('keepcount.keepcount-demo-') && !before.has(f));
  // SIGINT once the run's segments exist: the proxy is up and counting.
  const up = (async () => {
    while (segments().length === 0) await sleep(50);
  })();
  const run = await runDemo(60_000, ['--cluster', '2'], up);
  t.not(run.code, 0, 'interrupted');
  t.deepEqual(segments(), [], 'segments left in /dev/shm');
});

test(title('the demo’s build step, unable to build, names what the demo runs on'), (t) => {
  // A copy of the step beside a binding.js of the test's making, on a PATH with node and no cargo.
  const dir = mkdtempSync(join(tmpdir(), 'keepcount-ensure-'));
  try {
    mkdirSync(join(dir, 'scripts'));
    mkdirSync(join(dir, 'bin'));
    copyFileSync(join(__dirname, '..', 'scripts', 'ensure-native.mjs'), join(dir, 'scripts', 'ensure-native.mjs'));
    symlinkSync(process.execPath, join(dir, 'bin', 'node'));
    const run = () =>
      spawnSync(process.execPath, [join(dir, 'scripts', 'ensure-native.mjs')], {
        env: { PATH: join(dir, 'bin') },
        encoding: 'utf8',
      }).stdout;
    t.regex(run(), /no Rust toolchain \(cargo\) on PATH; the demo runs on the TypeScript fallback\./);
    // Before, it said the fallback here too, and the demo then ran on the earlier build's addon.
    writeFileSync(join(dir, 'binding.js'), 'module.exports = {};\n');
    t.regex(run(), /the demo runs on the native addon of an earlier build, which may be out of date\./);
    writeFileSync(join(dir, 'binding.js'), "throw new Error('no addon for this platform');\n");
    t.regex(run(), /the demo runs on the TypeScript fallback\./);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
