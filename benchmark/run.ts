/**
 * `npm run bench [-- --quick]`: the Rust benches of both crates, the Node suites, the memory
 * runs, the end-to-end HTTP runs and the Redis runs (benchmark/redis.ts), then the report: RESULTS.md and results.svg in benchmark/ (full run) or in a fresh temp
 * directory (`--quick`: tiny sizes, one round; proves everything still runs, numbers meaningless).
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, release, tmpdir, type as osType } from 'node:os';
import { dirname, join } from 'node:path';
import { parseArgs } from 'node:util';
import { QUIET_MALLOC, STRUCTURES, type MemoryResult } from './memory.js';
import type { NodeResults, SuiteResult } from './node.js';
import { CLOCK_READ, HEAVY_CLOCK_READ, SUITE_IDS } from './suites.js';
import type { HttpResults } from './http.js';
import type { ClusterResults } from './cluster.js';
import type { RedisResults } from './redis.js';
import { median } from './side-by-side.js';
import { httpTargets } from './http-targets.js';
import { chart, markdown, type CargoRun, type Machine, type Target } from './report.js';

const root = join(__dirname, '..');
const { values } = parseArgs({ options: { quick: { type: 'boolean', default: false } } });
const quick = values.quick;
const outDir = quick ? mkdtempSync(join(tmpdir(), 'keepcount-bench-')) : __dirname;
const started = performance.now();
const loadBefore = loadavg();
const log = (line: string): void => console.log(`\n==> ${line}`);

function run(cmd: string, args: string[], env: Record<string, string> = {}): string {
  const r = spawnSync(cmd, args, {
    cwd: root,
    env: { ...process.env, ...env },
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
    maxBuffer: 64 << 20,
  });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')} exited with ${r.status}`);
  process.stdout.write(r.stdout);
  return r.stdout;
}

const version = (cmd: string, args: string[]): string => execFileSync(cmd, args, { encoding: 'utf8' }).trim();
const pkgVersion = (name: string): string =>
  (JSON.parse(readFileSync(join(root, 'node_modules', name, 'package.json'), 'utf8')) as { version: string }).version;

/**
 * Which cargo profile built the addon the Node suites load (a debug build is ~10-20× slower):
 * the one `binding.js` loads, or the copy `NAPI_RS_NATIVE_LIBRARY_PATH` points it at (useful to
 * time a release build while others rebuild the one in the working tree).
 */
function bindingProfile(): string {
  const override = process.env.NAPI_RS_NATIVE_LIBRARY_PATH;
  const addon = override ?? readdirSync(root).find((f) => f.endsWith('.node'));
  if (addon === undefined) return 'none: only the fallback is timed (run `npm run build`)';
  const bytes = readFileSync(override ?? join(root, addon));
  // `napi build --platform` builds for an explicit target triple, so look there as well.
  const dirs = (profile: string): string[] => [join(root, 'target', profile), join(root, 'target', triple, profile)];
  for (const profile of ['release', 'debug']) {
    for (const dir of dirs(profile)) {
      try {
        if (readFileSync(join(dir, 'libkeepcount.so')).equals(bytes)) return `${profile} (${addon})`;
      } catch {
        // That profile was never built there.
      }
    }
  }
  return `unknown build (${addon})`;
}
/** The Rust target this machine builds for (x86_64-linux-gnu only, for now). */
const triple = 'x86_64-unknown-linux-gnu';
const addon = bindingProfile();
if (!quick && !addon.startsWith('release')) {
  console.error(`WARNING: native addon is ${addon}; build it with \`npm run build\` for meaningful figures`);
}

// 1. Rust. The estimator bench has size knobs; the limiter and timeout benches have none yet, so
// the quick run only builds them.
const cargo: CargoRun[] = [];
const estimatorEnv: Record<string, string> = quick
  ? { KEEPCOUNT_BENCH_EVENTS: '200000', KEEPCOUNT_BENCH_ROUNDS: '1' }
  : {};
const benches: { title: string; args: string[]; env?: Record<string, string>; buildOnlyWhenQuick?: boolean }[] = [
  {
    title: 'keepcount-limits: Estimator (pingora blog benchmark)',
    args: ['-p', 'keepcount-limits', '--bench', 'estimator'],
    env: estimatorEnv,
  },
  {
    title: 'keepcount-limits: Limiter',
    args: ['-p', 'keepcount-limits', '--bench', 'limiter'],
    buildOnlyWhenQuick: true,
  },
  { title: 'keepcount-timeout', args: ['-p', 'keepcount-timeout', '--bench', 'benchmark'], buildOnlyWhenQuick: true },
];
for (const b of benches) {
  const buildOnly = quick && b.buildOnlyWhenQuick === true;
  const args = ['bench', '--locked', ...b.args, ...(buildOnly ? ['--no-run'] : [])];
  const env = Object.entries(b.env ?? {})
    .map(([k, v]) => `${k}=${v} `)
    .join('');
  log(`${env}cargo ${args.join(' ')}`);
  const output = run('cargo', args, b.env);
  cargo.push({
    title: b.title,
    command: `${env}cargo ${args.join(' ')}`,
    output: buildOnly ? '(built only: this bench has no quick-size setting)' : output,
  });
}

// 2. Node suites.
// One fresh process per suite (see node.ts), merged into one results file.
const nodeJson = join(outDir, 'node-results.json');
const parts: NodeResults[] = [];
for (const id of SUITE_IDS) {
  const part = join(mkdtempSync(join(tmpdir(), 'keepcount-suite-')), 'part.json');
  log(`node benchmark/node.ts${quick ? ' --quick' : ''} --suite ${id}`);
  run(process.execPath, [
    // For the side-by-side rounds' collection after every slice (side-by-side.ts).
    '--expose-gc',
    '--import=tsx',
    join(__dirname, 'node.ts'),
    ...(quick ? ['--quick'] : []),
    '--suite',
    id,
    '--out',
    part,
  ]);
  parts.push(JSON.parse(readFileSync(part, 'utf8')) as NodeResults);
  rmSync(dirname(part), { recursive: true, force: true });
}
const node: NodeResults = { ...parts[0]!, suites: parts.flatMap((p) => p.suites) };
writeFileSync(nodeJson, JSON.stringify(node, null, 2) + '\n');

// 3. Memory, one fresh process per structure.
log('memory');
const memory: (MemoryResult | { name: string; skipped: string })[] = [];
for (const name of Object.keys(STRUCTURES)) {
  const line = run(
    process.execPath,
    ['--expose-gc', '--import=tsx', join(__dirname, 'memory.ts'), name, String(node.distinct)],
    QUIET_MALLOC,
  );
  memory.push(JSON.parse(line.trim().split('\n').pop()!) as MemoryResult);
}

// 4. End to end: hello-world servers under autocannon, each in its own process.
log(`node benchmark/http.ts${quick ? ' --quick' : ''}`);
const httpJson = join(outDir, 'http-results.json');
run(process.execPath, ['--import=tsx', join(__dirname, 'http.ts'), ...(quick ? ['--quick'] : []), '--out', httpJson]);
const http = JSON.parse(readFileSync(httpJson, 'utf8')) as HttpResults;

// 4b. One limit for two node:cluster workers: keepcount's shared memory vs rate-limiter-flexible's
// RateLimiterCluster (IPC to the primary).
log(`node benchmark/cluster.ts${quick ? ' --quick' : ''}`);
const clusterJson = join(outDir, 'cluster-results.json');
run(process.execPath, [
  '--import=tsx',
  join(__dirname, 'cluster.ts'),
  ...(quick ? ['--quick'] : []),
  '--out',
  clusterJson,
]);
const clusterRun = JSON.parse(readFileSync(clusterJson, 'utf8')) as ClusterResults;

// 4c. keepcount/redis against one local redis-server (redis-server must be installed).
log(`node benchmark/redis.ts${quick ? ' --quick' : ''}`);
const redisJson = join(outDir, 'redis-results.json');
run(process.execPath, ['--import=tsx', join(__dirname, 'redis.ts'), ...(quick ? ['--quick'] : []), '--out', redisJson]);
const redis = JSON.parse(readFileSync(redisJson, 'utf8')) as RedisResults;

// 5. Targets.
// The per-call targets read the side-by-side rounds (side-by-side.ts), not benny's medians: a
// case's figure is its median there, and a ratio of cases the median of their ratio round by round.
const suite = (id: string): SuiteResult => node.suites.find((s) => s.id === id)!;
const rounds = (s: SuiteResult, prefix: string): number[] | undefined =>
  s.cases.find((c) => c.name.startsWith(prefix))?.sideBySide;
const ns = (s: SuiteResult, prefix: string): number | undefined => {
  const r = rounds(s, prefix);
  return r === undefined ? undefined : median(r);
};
/** The median over side-by-side rounds of `f` of the named cases' times in that round. */
const paired = (s: SuiteResult, prefixes: string[], f: (...ns: number[]) => number): number => {
  const cases = prefixes.map((p) => rounds(s, p)!);
  return median(cases[0]!.map((_, r) => f(...cases.map((c) => c[r]!))));
};
const targets: Target[] = [];
const counting = suite('counting-ipv4-uniform');
const rate = suite('rate-ipv4-uniform');
const timeouts = suite('timeout');
const mem = (name: string): MemoryResult | undefined => {
  const m = memory.find((x) => x.name === name);
  return m !== undefined && !('skipped' in m) ? m : undefined;
};
const mapMem = mem('Map<key, number> counter');
for (const b of node.backends) {
  const incrName = `keepcount Estimator.incr (${b})`;
  const incr = ns(counting, incrName)!;
  const map = ns(counting, 'Map<key, number> counter')!;
  const faster = paired(counting, ['Map<key, number> counter', incrName], (m, i) => m / i);
  const countFloorName = `keepcount Estimator.get, 1 × 1 (the floor) (${b})`;
  const countFloor = ns(counting, countFloorName)!;
  const mapOverFloor = paired(counting, ['Map<key, number> counter', countFloorName], (m, f) => m / f);
  const incrOverFloor = paired(counting, [incrName, countFloorName], (i, f) => i / f);
  targets.push({
    what: `Estimator.incr (${b}) vs Map counter, uniform IPv4`,
    goal: '≥ 3× faster',
    measured:
      `${incr.toFixed(1)} vs ${map.toFixed(1)} ns: ${faster.toFixed(2)}×; one call that only fetches and hashes ` +
      `the key costs ${countFloor.toFixed(1)} ns (${mapOverFloor.toFixed(2)}×)`,
    met: faster >= 3,
  });
  // As for Rate.observe below: 3× needs the one-call floor 3× faster than the Map first (with a
  // million random key strings, fetching each costs both alike); the rows on top are ours.
  targets.push({
    what: `Estimator.incr (${b}), honest target: the work on top of the one-call floor`,
    goal: '≤ 1.5× the floor call',
    measured: `${incr.toFixed(1)} vs ${countFloor.toFixed(1)} ns: ${incrOverFloor.toFixed(2)}×`,
    met: incrOverFloor <= 1.5,
  });
  const em = mem(`keepcount Estimator (${b})`);
  if (em !== undefined && mapMem !== undefined) {
    // Retained memory is the heap reading. The native counters live in Rust and are allocated
    // once, at construction: 8 bytes × 4 × 8192 (Estimator#byteLength less its 28-byte header).
    // RSS growth is shown beside it; memory.ts says what it takes out of that reading.
    const counters = 8 * 4 * 8192;
    const total = em.heapConstruct + Math.max(0, em.heapRun) + (b === 'native' ? counters : 0);
    targets.push({
      what: `Estimator (${b}) memory growth vs Map counter, ${node.distinct.toLocaleString('en-US')} keys`,
      goal: '< 1/1000',
      measured:
        `run growth ${(em.heapRun / 1024).toFixed(0)} KiB (≈ 0; RSS ${(em.rssRun / 1048576).toFixed(1)} MiB) vs ` +
        `${(mapMem.heapRun / 1048576).toFixed(1)} MiB; whole footprint with construction ` +
        `${(total / 1024).toFixed(0)} KiB = 1/${(mapMem.heapRun / total).toFixed(0)}`,
      met: Math.max(0, em.heapRun) * 1000 < mapMem.heapRun,
    });
  }
  const observeName = `keepcount Rate.observe (${b})`;
  const floorName = `keepcount Estimator.get, 1 × 1 (the floor) (${b})`;
  const observe = ns(rate, observeName)!;
  const callFloor = ns(rate, floorName)!;
  const rlf = ns(rate, 'rate-limiter-flexible')!;
  const overRlf = paired(rate, ['rate-limiter-flexible', observeName], (r, o) => r / o);
  const floorOverRlf = paired(rate, ['rate-limiter-flexible', floorName], (r, f) => r / f);
  const overFloor = paired(rate, [observeName, floorName], (o, f) => o / f);
  targets.push({
    what: `Rate.observe (${b}) vs RateLimiterMemory.consume, uniform IPv4`,
    goal: '≥ 10× faster (issue 16)',
    measured:
      `${observe.toFixed(1)} vs ${rlf.toFixed(1)} ns: ${overRlf.toFixed(1)}×; one call that only fetches ` +
      `and hashes the key costs ${callFloor.toFixed(1)} ns (${floorOverRlf.toFixed(1)}×)`,
    met: overRlf >= 10,
  });
  // Issue 16 asks for an honest target where its own is out of reach: observe cannot cost less
  // than the one call under it, so 10× needs the floor ≥ 10× first; what observe adds on top
  // (clock read, rows, rotation check) is what keepcount controls.
  // The native core reads the monotonic clock inside its own call, from Rust; JavaScript's
  // cheapest monotonic reading is a call out of V8 that returns an array (`process.hrtime()`),
  // which the fallback cannot make cheaper and the floor does not make: allowed for beside the
  // floor, as the buffer targets below allow for the atomics' own extra. Stated in the closing
  // note of 2026-11-27 (session 27) before the run that first used it.
  if (b === 'native') {
    targets.push({
      what: `Rate.observe (${b}), honest target: the work on top of the one-call floor`,
      goal: '≤ 1.5× the floor call',
      measured: `${observe.toFixed(1)} vs ${callFloor.toFixed(1)} ns: ${overFloor.toFixed(2)}×`,
      met: overFloor <= 1.5,
    });
  } else {
    const clock = ns(rate, CLOCK_READ)!;
    const overAllowed = paired(rate, [observeName, floorName, CLOCK_READ], (o, f, c) => o / (f + c));
    targets.push({
      what: `Rate.observe (${b}), honest target: the work on top of the one-call floor and one clock read`,
      goal: '≤ 1.5× the floor call plus one host-clock read',
      measured:
        `${observe.toFixed(1)} vs ${callFloor.toFixed(1)} + ${clock.toFixed(1)} ns: ${overAllowed.toFixed(2)}× ` +
        `(${overFloor.toFixed(2)}× the floor call alone)`,
      met: overAllowed <= 1.5,
    });
  }
  const timeoutName = `keepcount timeout(p, 5000) (${b})`;
  const bare = ns(timeouts, 'bare await')!;
  const floor = ns(timeouts, 'new Promise + then')!;
  const tmo = ns(timeouts, timeoutName)!;
  // In awaits: each round's extra time over that round's bare await.
  const overAwait = paired(timeouts, [timeoutName, 'bare await'], (t, a) => (t - a) / a);
  const floorOverAwait = paired(timeouts, ['new Promise + then', 'bare await'], (f, a) => (f - a) / a);
  const overFloorAwaits = paired(timeouts, [timeoutName, 'new Promise + then', 'bare await'], (t, f, a) => (t - f) / a);
  targets.push({
    what: `timeout() (${b}) over awaiting the promise alone`,
    goal: `≤ one bare await (${bare.toFixed(1)} ns)`,
    measured:
      `${tmo.toFixed(1)} − ${bare.toFixed(1)} = ${(tmo - bare).toFixed(1)} ns (${overAwait.toFixed(2)} awaits); ` +
      `a bare new Promise + then already costs ${floorOverAwait.toFixed(2)} awaits over it`,
    met: overAwait <= 1,
  });
  // Honest target: a wrapper that returns its own promise pays `new Promise` + `then` (the floor
  // row); keepcount's bookkeeping on top (the waiter's slot, its settle handlers) is one await.
  targets.push({
    what: `timeout() (${b}), honest target: the bookkeeping over new Promise + then`,
    goal: `≤ one bare await (${bare.toFixed(1)} ns)`,
    measured: `${tmo.toFixed(1)} − ${floor.toFixed(1)} = ${(tmo - floor).toFixed(1)} ns (${overFloorAwaits.toFixed(2)} awaits)`,
    met: overFloorAwaits <= 1,
  });
  const pt = ns(timeouts, 'p-timeout')!;
  const as = ns(timeouts, 'AbortSignal.timeout')!;
  const overPt = paired(timeouts, ['p-timeout', timeoutName], (p, t) => p / t);
  const overAs = paired(timeouts, ['AbortSignal.timeout', timeoutName], (a, t) => a / t);
  targets.push({
    what: `timeout() (${b}) vs p-timeout / AbortSignal.timeout`,
    goal: '≥ 10× cheaper',
    measured: `${tmo.toFixed(0)} vs ${pt.toFixed(0)} / ${as.toFixed(0)} ns: ${overPt.toFixed(1)}× / ${overAs.toFixed(1)}×`,
    met: overPt >= 10 && overAs >= 10,
  });
}

const inflightSuite = suite('inflight-ipv4-uniform');
for (const b of node.backends) {
  const pairName = `keepcount Inflight.enter + leave (${b})`;
  const mapName = 'Map<key, number> incr + release';
  const twoName = `keepcount Estimator.get twice, 1 × 1 (the floor) (${b})`;
  const pair = ns(inflightSuite, pairName)!;
  const map = ns(inflightSuite, mapName)!;
  const twoCalls = ns(inflightSuite, twoName)!;
  const overMap = paired(inflightSuite, [pairName, mapName], (p, m) => p / m);
  const floorOverMap = paired(inflightSuite, [twoName, mapName], (t, m) => t / m);
  const overTwo = paired(inflightSuite, [pairName, twoName], (p, t) => p / t);
  targets.push({
    what: `Inflight enter + leave (${b}) vs a Map counter's incr + release, uniform IPv4`,
    goal: 'no slower (issue 16)',
    measured:
      `${pair.toFixed(1)} vs ${map.toFixed(1)} ns: ${overMap.toFixed(2)}×; two calls that only fetch and hash ` +
      `the key cost ${twoCalls.toFixed(1)} ns (${floorOverMap.toFixed(2)}×)`,
    met: overMap <= 1,
  });
  // Honest target: counts outside the JS heap (shareable, bounded memory) need a call in and a
  // call out, each fetching and hashing the key: the floor row.
  targets.push({
    what: `Inflight enter + leave (${b}), honest target: the work on top of the two-call floor`,
    goal: '≤ 1.25× the two calls',
    measured: `${pair.toFixed(1)} vs ${twoCalls.toFixed(1)} ns: ${overTwo.toFixed(2)}×`,
    met: overTwo <= 1.25,
  });
}

const heavySuite = suite('heavy-ipv4-zipf');
for (const b of node.backends) {
  const heavyName = `keepcount HeavyHitters.incr (${b})`;
  const plainName = `keepcount Estimator.incr, same shape (${b})`;
  const incr = ns(heavySuite, heavyName)!;
  const plain = ns(heavySuite, plainName)!;
  const topk = ns(heavySuite, 'bloom-filters TopK.add')!;
  const overPlain = paired(heavySuite, [heavyName, plainName], (h, p) => h / p);
  const overTopk = paired(heavySuite, ['bloom-filters TopK.add', heavyName], (t, h) => t / h);
  targets.push({
    what: `HeavyHitters.incr (${b}) vs Estimator.incr of the same shape, Zipf(1.1) IPv4`,
    goal: '≤ 1.5× the cost',
    measured: `${incr.toFixed(1)} vs ${plain.toFixed(1)} ns: ${overPlain.toFixed(2)}×`,
    met: overPlain <= 1.5,
  });
  // The fallback reads the host clock from JavaScript on every count, which a plain sketch never
  // does and the native core does inside its own call: allowed for as in the fallback's honest
  // Rate.observe target above; stated when it was added (session 39), before a full run used it.
  if (b === 'fallback') {
    const clock = ns(heavySuite, HEAVY_CLOCK_READ)!;
    const overAllowed = paired(heavySuite, [heavyName, plainName, HEAVY_CLOCK_READ], (h, p, c) => h / (p + c));
    targets.push({
      what: `HeavyHitters.incr (${b}), honest target: over a plain sketch and one clock read`,
      goal: '≤ 1.5× the plain sketch plus one host-clock read',
      measured:
        `${incr.toFixed(1)} vs ${plain.toFixed(1)} + ${clock.toFixed(1)} ns: ${overAllowed.toFixed(2)}× ` +
        `(${overPlain.toFixed(2)}× the plain sketch alone)`,
      met: overAllowed <= 1.5,
    });
  }
  targets.push({
    what: `HeavyHitters.incr (${b}) vs bloom-filters TopK.add, Zipf(1.1) IPv4`,
    goal: '≥ 5× faster',
    measured: `${incr.toFixed(1)} vs ${topk.toFixed(1)} ns: ${overTopk.toFixed(1)}×`,
    met: overTopk >= 5,
  });
}

// Issue 16: what a million clients leave behind in express-rate-limit's store, retained (heap and
// addon-reported memory after full collections) and as RSS (which also shows Rust's allocations
// and the sketch's pages as they are first written). Judged over the first million after
// construction, as the issue asks; the next million shows whether anything still grows.
const memoryStore = mem('express-rate-limit MemoryStore');
const harness = mem('no structure (the harness alone)');
const mib = (bytes: number): string => `${(bytes / 1048576).toFixed(1)} MiB`;
/** `of` over `part` as "1/N", or "≈ 0" when `part` is under a page. */
const share = (part: number, of: number): string => (part < 4096 ? '≈ 0' : `1/${(of / part).toFixed(0)}`);
for (const b of node.backends) {
  const store = mem(`keepcount KeepcountStore (${b})`);
  if (store === undefined || memoryStore === undefined) continue;
  const retained = Math.max(store.heapRun, 1024);
  targets.push({
    what: `KeepcountStore (${b}) vs MemoryStore, memory after ${store.keys.toLocaleString('en-US')} distinct clients`,
    goal: '≤ 1/50 of the growth',
    measured:
      `retained ${(store.heapRun / 1024).toFixed(0)} KiB vs ${mib(memoryStore.heapRun)} ` +
      `(${share(retained, memoryStore.heapRun)}); RSS ${mib(store.rssRun)} vs ${mib(memoryStore.rssRun)} ` +
      `(${share(store.rssRun, memoryStore.rssRun)})` +
      (harness === undefined ? '' : `, the harness alone ${mib(harness.rssRun)}`) +
      `; over ${store.keys.toLocaleString('en-US')} more: RSS ${mib(store.rssNext)} vs ${mib(memoryStore.rssNext)} ` +
      `(${share(store.rssNext, memoryStore.rssNext)})`,
    met: retained * 50 <= memoryStore.heapRun && Math.max(store.rssRun, 0) * 50 <= memoryStore.rssRun,
  });
}

// Issue 14: each shared case against its process-local twin, and the cluster check per check.
const sharedSuite = suite('shared-ipv4-uniform');
for (const c of sharedSuite.cases.filter((x) => /, (shared|SharedArrayBuffer)\)$/.test(x.name))) {
  const [, what, backendName, where] = /^keepcount (.*) \((\w+), (\w+)\)$/.exec(c.name)!;
  const localName = `keepcount ${what} (${backendName}, local)`;
  const localNs = ns(sharedSuite, localName);
  if (localNs === undefined) continue;
  const across = where === 'shared' ? 'between processes' : 'in a SharedArrayBuffer';
  const overLocal = paired(sharedSuite, [c.name, localName], (x, l) => x / l);
  targets.push({
    what: `${what} (${backendName}): shared ${across} vs process-local`,
    goal: '≤ 1.2× the cost',
    measured: `${ns(sharedSuite, c.name)!.toFixed(1)} vs ${localNs.toFixed(1)} ns: ${overLocal.toFixed(2)}×`,
    met: overLocal <= 1.2,
  });
}
// The fallback's buffer sketches add atomics and nothing else (fallback/buffer.ts): their floor.
const atomicAdds = ns(sharedSuite, 'four Atomics.add')!;
const plainAdds = ns(sharedSuite, 'four += on a Float64Array')!;
for (const what of ['Estimator.incr', 'Rate.observe']) {
  const bufferName = `keepcount ${what} (fallback, SharedArrayBuffer)`;
  const localName = `keepcount ${what} (fallback, local)`;
  const inBuffer = ns(sharedSuite, bufferName);
  const localNs = ns(sharedSuite, localName);
  if (inBuffer === undefined || localNs === undefined) continue;
  // Within each round: the buffer's time over what the goal allows it (at most 1 is met).
  const overAllowed = paired(
    sharedSuite,
    [bufferName, localName, 'four Atomics.add', 'four += on a Float64Array'],
    (x, l, atomic, plain) => x / (1.2 * l + (atomic - plain)),
  );
  targets.push({
    what: `${what} (fallback) in a SharedArrayBuffer, honest target: what it adds over the four atomic adds' own extra`,
    goal: '≤ 1.2× the local cost plus that floor',
    measured:
      `${inBuffer.toFixed(1)} vs ${localNs.toFixed(1)} ns; four Atomics.add cost ${atomicAdds.toFixed(1)} ns, ` +
      `four plain adds ${plainAdds.toFixed(1)} ns (+${(atomicAdds - plainAdds).toFixed(1)}); ` +
      `${overAllowed.toFixed(2)}× what the goal allows`,
    met: overAllowed <= 1,
  });
}
if (clusterRun.skipped === undefined) {
  const { keepcountNs, keepcountRounds, rlfAwaitedNs, rlfPipelinedNs, workers } =
    clusterRun as Required<ClusterResults>;
  targets.push({
    what: `rateLimit check on a shared Rate vs RateLimiterCluster.consume, ${workers} node:cluster workers`,
    goal: '≥ 100× cheaper',
    measured:
      `${keepcountNs.toFixed(0)} (median of ${keepcountRounds.map((x) => x.toFixed(0)).join(' / ')}) vs ${rlfAwaitedNs.toFixed(0)} ns awaited (${(rlfAwaitedNs / keepcountNs).toFixed(0)}×), ` +
      `${rlfPipelinedNs.toFixed(0)} ns with 64 in flight (${(rlfPipelinedNs / keepcountNs).toFixed(0)}×)`,
    met: rlfAwaitedNs >= 100 * keepcountNs,
  });
}

const storeName = `keepcount KeepcountStore.increment (${node.backends[0]})`;
const fastifyName = `keepcount Fastify store incr (${node.backends[0]})`;
targets.push(
  ...httpTargets(http, {
    keepcountStore: ns(rate, storeName)!,
    memoryStore: ns(rate, 'express-rate-limit MemoryStore.increment')!,
    keepcountStoreCheaper: paired(rate, ['express-rate-limit MemoryStore.increment', storeName], (m, k) => m / k),
    fastifyStore: ns(rate, fastifyName)!,
    localStore: ns(rate, '@fastify/rate-limit LocalStore.incr')!,
    fastifyStoreCheaper: paired(rate, ['@fastify/rate-limit LocalStore.incr', fastifyName], (l, k) => l / k),
  }),
);

for (const ours of redis.sequential.filter((c) => c.name.startsWith('keepcount'))) {
  for (const peer of [...redis.sequential, ...redis.concurrent].filter((c) => !c.name.startsWith('keepcount'))) {
    targets.push({
      what: `${ours.name} vs ${peer.name}, Zipf(1.1) over 10,000 keys, local Redis`,
      goal: '≥ 100× cheaper per check',
      measured: `${ours.us.toFixed(2)} vs ${peer.us.toFixed(1)} µs: ${(peer.us / ours.us).toFixed(0)}×`,
      met: peer.us / ours.us >= 100,
    });
  }
}
targets.push({
  what: `Redis commands per node per second, ${redis.commands.nodes} nodes at ${redis.commands.checksPerNodePerS.toFixed(0)} checks/s each`,
  goal: `≤ 1000 / syncMs = ${1000 / redis.commands.syncMs}`,
  measured: redis.commands.commandsPerNodePerS.toFixed(2),
  met: redis.commands.commandsPerNodePerS <= 1000 / redis.commands.syncMs,
});
const tr = redis.trace;
targets.push({
  what: `Overshoot on a Zipf trace over ${tr.nodes} synced nodes (limit ${tr.limit}/${tr.windowMs} ms, syncMs ${tr.syncMs})`,
  goal: 'within limit + (n − 1) × r × 2 × (syncMs + RTT) for every (window, key)',
  measured:
    `max ${tr.maxOvershoot} over the limit (bound's slack there ${tr.boundAtMax.toFixed(0)}); ` +
    `${tr.overBound} of ${tr.overLimit} over-limit (window, key) pairs past the bound`,
  met: tr.overBound === 0,
});
targets.push({
  what: 'Wrong decisions on that trace vs an exact global count',
  goal: "reported beside Cloudflare's 0.003%",
  measured: `${(((tr.wronglyAdmitted + tr.wronglyRefused) / tr.requests) * 100).toFixed(3)}% (${tr.wronglyAdmitted} admitted, ${tr.wronglyRefused} refused wrongly of ${tr.requests.toLocaleString('en-US')})`,
  met: undefined,
});

// 6. Report.
const machine: Machine = {
  cpu: cpus()[0]?.model ?? 'unknown',
  cores: cpus().length,
  loadBefore,
  loadAfter: loadavg(),
  os: `${osType()} ${release()}`,
  versions: [
    ['node', process.version],
    ['rustc', version('rustc', ['--version'])],
    ['keepcount', pkgVersionOf(root)],
    ['native addon', addon],
    ['redis-server', redis.redisVersion],
    ...[
      'benny',
      'bloom-filters',
      'rate-limiter-flexible',
      'express-rate-limit',
      'rate-limit-redis',
      'ioredis',
      'p-timeout',
      'limiter',
    ].map((p): [string, string] => [p, pkgVersion(p)]),
  ],
  date: new Date().toISOString(),
  commit: version('git', ['rev-parse', '--short', 'HEAD']),
  durationS: (performance.now() - started) / 1000,
  command: `npm run bench${quick ? ' -- --quick' : ''}`,
};

function pkgVersionOf(dir: string): string {
  return (JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { version: string }).version;
}

writeFileSync(join(outDir, 'results.svg'), chart(node, http));
writeFileSync(join(outDir, 'RESULTS.md'), markdown(machine, targets, node, memory, cargo, http, redis, 'results.svg'));
log(`wrote ${join(outDir, 'RESULTS.md')} and results.svg in ${machine.durationS.toFixed(0)} s`);
for (const t of targets) console.log(`${t.met ? 'met ' : 'MISS'}  ${t.what}: ${t.measured} (goal ${t.goal})`);
