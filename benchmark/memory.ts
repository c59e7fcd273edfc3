/**
 * Memory per structure: `node --expose-gc --import=tsx benchmark/memory.ts <structure> <keys>`
 * prints one JSON line. Each structure runs in a fresh process so nothing else's garbage or
 * allocator state is counted: the keys are generated first, then memory is read (after full
 * collections) before construction, after construction and a warm-up on 2,000 other keys, after
 * one operation on every one of the distinct keys, and after one on as many keys again.
 *
 * Three things moved RSS by up to 30 MiB between runs of the same structure, none of them the
 * structure's, so the harness takes them out:
 * - Keys are flat strings, as a server gets them (node:http's `socket.remoteAddress` is one). The
 *   suites' keys are built by concatenation, which gives V8 cons strings; the first native read of
 *   one flattens it into new old-space pages the harness's key array holds: 20–30 MiB over a
 *   million keys for any structure that reads its key, none for one that only asks its length.
 * - `benchmark/run.ts` starts this process with {@link QUIET_MALLOC}: glibc otherwise keeps what
 *   V8's collector threads free in per-thread arenas, 0–15 MiB of RSS growth with no structure.
 * - Each reading awaits a turn first, so the suspended frame drops what it no longer uses (the key
 *   generator's temporaries): V8 keeps a synchronous frame's dead registers alive.
 */
import { CountMinSketch, TopK } from 'bloom-filters';
import { MemoryStore } from 'express-rate-limit';
import { TokenBucket } from 'limiter';
import { RateLimiterMemory } from 'rate-limiter-flexible';
import { loadBackends, type LoadedBackend } from './backends.js';
import { makeKeys } from './data.js';
import { keepcountLimiter } from './suites.js';

type Feed = (key: string) => unknown;

function heavyFeed(b: LoadedBackend): Feed {
  const h = new b.api.HeavyHitters({ intervalMs: 60_000, threshold: 128, capacity: 1024, hashes: 4, slots: 4096 });
  return (k) => h.incr(k);
}
/** Builds a structure; returns what one operation on a key does. */
type Structure = (backends: LoadedBackend[], keys: string[]) => Feed | undefined;

const HUGE = 1e12;
/** Keys fed before the "built" reading, not counted in the run's growth. */
const WARMUP = 2000;
const backendNamed = (bs: LoadedBackend[], name: string): LoadedBackend | undefined => bs.find((b) => b.name === name);

const forBackend = (name: 'native' | 'fallback', make: (b: LoadedBackend, keys: string[]) => Feed): Structure => {
  return (bs, keys) => {
    const b = backendNamed(bs, name);
    return b === undefined ? undefined : make(b, keys);
  };
};

/**
 * glibc's allocator with one arena and its free memory returned at once (`GLIBC_TUNABLES`), so RSS
 * shows what is held, not what the allocator keeps for reuse.
 */
export const QUIET_MALLOC = { GLIBC_TUNABLES: 'glibc.malloc.arena_max=1:glibc.malloc.trim_threshold=0' };

/** Structure names as they appear in the report. */
export const STRUCTURES: Record<string, Structure> = {
  // The harness's own reading: what the loop, the readings and the keys move with nothing counted.
  'no structure (the harness alone)': () => (k) => k.length,
  'keepcount Estimator (native)': forBackend('native', (b) => {
    const e = new b.api.Estimator();
    return (k) => e.incr(k);
  }),
  'keepcount Estimator (fallback)': forBackend('fallback', (b) => {
    const e = new b.api.Estimator();
    return (k) => e.incr(k);
  }),
  'Map<key, number> counter': () => {
    const m = new Map<string, number>();
    return (k) => m.set(k, (m.get(k) ?? 0) + 1);
  },
  'bloom-filters CountMinSketch (4 × 8192)': () => {
    const c = new CountMinSketch(8192, 4);
    return (k) => c.update(k);
  },
  'keepcount Rate (native)': forBackend('native', (b) => {
    const r = new b.api.Rate({ intervalMs: 60_000 });
    return (k) => r.observe(k);
  }),
  'keepcount Rate (fallback)': forBackend('fallback', (b) => {
    const r = new b.api.Rate({ intervalMs: 60_000 });
    return (k) => r.observe(k);
  }),
  'rate-limiter-flexible RateLimiterMemory': () => {
    const r = new RateLimiterMemory({ points: HUGE, duration: 60 });
    return (k) => r.consume(k, 1);
  },
  'express-rate-limit MemoryStore': () => {
    const s = new MemoryStore();
    s.init({ windowMs: 60_000 } as Parameters<MemoryStore['init']>[0]);
    return (k) => s.increment(k);
  },
  // express-rate-limit's store interface, as a server behind `rateLimit({ store })` drives it.
  'keepcount KeepcountStore (native)': forBackend('native', storeFeed),
  'keepcount KeepcountStore (fallback)': forBackend('fallback', storeFeed),
  'limiter TokenBucket per key (Map)': () => {
    const m = new Map<string, TokenBucket>();
    return (k) => {
      let t = m.get(k);
      if (t === undefined) {
        t = new TokenBucket({ bucketSize: HUGE, tokensPerInterval: HUGE, interval: 'second' });
        m.set(k, t);
      }
      return t.tryRemoveTokens(1);
    };
  },
  // The heavy-hitter suite's configuration (benchmark/suites.ts): 1,024 exact entries at most.
  'keepcount HeavyHitters (native)': forBackend('native', heavyFeed),
  'keepcount HeavyHitters (fallback)': forBackend('fallback', heavyFeed),
  'bloom-filters TopK (100)': () => {
    const t = new TopK(100, 0.001, 0.99);
    return (k) => t.add(k);
  },
  'keepcount Limiter (native)': forBackend('native', limiterFeed),
  'keepcount Limiter (fallback)': forBackend('fallback', limiterFeed),
};

/** A `KeepcountStore` as express-rate-limit sets it up for `{ windowMs: 60_000, limit: 100 }`. */
function storeFeed(b: LoadedBackend): Feed {
  const s = new b.http.KeepcountStore();
  s.init({ windowMs: 60_000, limit: 100 });
  return (k) => s.increment(k);
}

function limiterFeed(b: LoadedBackend, keys: string[]): Feed {
  const check = keepcountLimiter(b, keys);
  if (check === undefined) throw new Error('lib/limiter.ts has no Limiter');
  return check;
}

export interface MemoryResult {
  name: string;
  keys: number;
  /** Bytes: JS heap used + external (ArrayBuffers, addon-reported memory). */
  heapConstruct: number;
  heapRun: number;
  /** Bytes of resident set size (includes Rust's allocations, which the JS heap does not see). */
  rssConstruct: number;
  rssRun: number;
  /** The same over as many keys again, none of them seen before. */
  heapNext: number;
  rssNext: number;
}

/** Keeps the structure reachable until the last reading: a dead local may be collected early. */
let keep: Feed | undefined;

async function settle(): Promise<{ heap: number; rss: number }> {
  // Suspending here drops the frame's dead temporaries (see the module notes).
  await new Promise((resolve) => setImmediate(resolve));
  const gc = (globalThis as { gc?: () => void }).gc;
  if (gc === undefined) throw new Error('run with --expose-gc');
  gc();
  gc();
  const m = process.memoryUsage();
  return { heap: m.heapUsed + m.external, rss: m.rss };
}

/**
 * The measured keys (the suites' first `n`) and `n` more, as flat strings: a JSON round trip
 * builds each anew in one piece.
 */
function flatKeys(n: number): [string[], string[]] {
  const flat = JSON.parse(JSON.stringify(makeKeys(2 * n, 0).ips)) as string[];
  return [flat.slice(0, n), flat.slice(n)];
}

async function feedAll(feed: Feed, keys: string[]): Promise<void> {
  for (const k of keys) {
    const r = feed(k);
    if (r instanceof Promise) await r;
  }
}

async function main(): Promise<void> {
  const [name, count] = process.argv.slice(2);
  const make = STRUCTURES[name!];
  if (make === undefined) throw new Error(`unknown structure ${name}`);
  process.env.KEEPCOUNT_SILENCE_FALLBACK = '1';
  const backends = loadBackends();
  const [ips, next] = flatKeys(Number(count));
  const before = await settle();
  const feed = make(backends, ips);
  if (feed === undefined) {
    console.log(JSON.stringify({ name, skipped: 'backend unavailable' }));
    process.exit(0);
  }
  keep = feed;
  // Warm the code path (compilation, inline caches) on keys outside the measured set, so the
  // run's growth is what the keys cost, not what the JIT allocates.
  for (let i = 0; i < WARMUP; i++) {
    const r = feed(`warm-${i}`);
    if (r instanceof Promise) await r;
  }
  const built = await settle();
  await feedAll(feed, ips);
  const after = await settle();
  await feedAll(feed, next);
  const again = await settle();
  // The keys too stay reachable to the end: freed keys would read as the structure shrinking.
  if (keep !== feed || ips.length !== next.length) throw new Error('unreachable');
  const result: MemoryResult = {
    name: name!,
    keys: ips.length,
    heapConstruct: built.heap - before.heap,
    heapRun: after.heap - built.heap,
    rssConstruct: built.rss - before.rss,
    rssRun: after.rss - built.rss,
    heapNext: again.heap - after.heap,
    rssNext: again.rss - after.rss,
  };
  console.log(JSON.stringify(result));
  process.exit(0);
}

if (require.main === module) {
  // A mistyped command line is an error, not a structure skipped for want of a backend.
  const [name, count] = process.argv.slice(2);
  if (STRUCTURES[name!] === undefined || !(Number.isInteger(Number(count)) && Number(count) >= 1)) {
    console.error(
      `usage: node --expose-gc --import=tsx benchmark/memory.ts <structure> <keys >= 1>\n` +
        `structures: ${Object.keys(STRUCTURES).join(', ')}`,
    );
    process.exit(2);
  }
  main().catch((error: unknown) => {
    console.log(JSON.stringify({ name: process.argv[2], skipped: (error as Error).message }));
    process.exit(0);
  });
}
