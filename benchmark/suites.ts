/**
 * The suites of issue 7: each a list of contenders doing the same work on the same key stream, a
 * check that they give the same answers (run before anything is timed), and the keepcount row the
 * ratios are taken against (the harness is in `case.ts`, the shared-memory suite in
 * `shared-suite.ts`).
 */
import LocalStore from '@fastify/rate-limit/store/LocalStore.js';
import { CountMinSketch, TopK } from 'bloom-filters';
import { MemoryStore } from 'express-rate-limit';
import { TokenBucket } from 'limiter';
import pTimeout from 'p-timeout';
import { RateLimiterMemory } from 'rate-limiter-flexible';
import type { LoadedBackend } from './backends.js';
import { stream, type Keys } from './data.js';
import { asyncCase, assert, HUGE, label, ref, SEED, syncCase, type Case, type Suite, type Variant } from './case.js';
import { shared } from './shared-suite.js';
import { unnamed } from './unnamed.js';

/**
 * The rate suite's case for one reading of the host clock as the fallback's `Rate` takes it: part
 * of the fallback's honest `Rate.observe` target (benchmark/run.ts).
 */
export const CLOCK_READ = 'host clock read, one per fallback Rate.observe (process.hrtime)';
/** The same reading in the heavy-hitter suite, for the fallback's honest `HeavyHitters.incr` target. */
export const HEAVY_CLOCK_READ = 'host clock read, one per fallback HeavyHitters.incr (process.hrtime)';

/**
 * What the fallback's `Rate` and `HeavyHitters` read per call and a plain sketch does not: the
 * host's monotonic clock, through the same `Stopwatch` (fallback/rotation.ts); the native cores
 * read it inside their own call. No case without the fallback backend.
 */
function clockRead(backends: LoadedBackend[], name: string, s: unknown[]): Case[] {
  const fallback = backends.find((b) => b.name === 'fallback');
  if (fallback === undefined) return [];
  const watch = new fallback.clock.Stopwatch(undefined);
  return [syncCase(name, s, () => Math.floor(watch.elapsedMs()))];
}

function counting(backends: LoadedBackend[], v: Variant, checkDraws: number): Suite {
  const s = stream(v.keys, v.draws);
  const est = backends.map((b) => new b.api.Estimator({ seed: SEED }));
  const map = new Map<string | number, number>();
  const cms = new CountMinSketch(8192, 4);
  const cases: Case[] = [];
  backends.forEach((b, i) => cases.push(syncCase(`keepcount Estimator.incr ${label(b)}`, s, (k) => est[i]!.incr(k))));
  // The floor, as in the rate suite: fetch the key, hash it, read one counter. How much faster than
  // the Map any counting call can be is the Map's time over this.
  const floors = backends.map((b) => new b.api.Estimator({ hashes: 1, slots: 1, seed: SEED }));
  backends.forEach((b, i) =>
    cases.push(syncCase(`keepcount Estimator.get, 1 × 1 (the floor) ${label(b)}`, s, (k) => floors[i]!.get(k))),
  );
  cases.push(syncCase('Map<key, number> counter', s, (k) => map.set(k, (map.get(k) ?? 0) + 1)));
  cases.push(syncCase('bloom-filters CountMinSketch.update', s, (k) => cms.update(String(k))));
  backends.forEach((b, i) => cases.push(syncCase(`keepcount Estimator.get ${label(b)}`, s, (k) => est[i]!.get(k))));
  cases.push(syncCase('Map<key, number> get', s, (k) => map.get(k) ?? 0));
  cases.push(syncCase('bloom-filters CountMinSketch.count', s, (k) => cms.count(String(k))));
  return {
    id: `counting-${v.id}`,
    title: `Counting, ${v.title}`,
    reference: ref(backends, 'Estimator.incr'),
    cases,
    check() {
      const e = backends.map((b) => new b.api.Estimator({ seed: SEED }));
      const m = new Map<string | number, number>();
      const c = new CountMinSketch(8192, 4);
      for (let i = 0; i < checkDraws; i++) {
        const k = s[i]!;
        const counts = e.map((x) => x.incr(k));
        const exact = (m.get(k) ?? 0) + 1;
        m.set(k, exact);
        c.update(String(k));
        assert(
          counts.every((x) => x === counts[0]),
          `backends disagree on ${k}`,
        );
        assert(counts[0]! >= exact, `keepcount under-counts ${k}`);
      }
      let off = 0;
      for (const [k, exact] of m) {
        assert(e[0]!.get(k) >= exact && c.count(String(k)) >= exact, `an estimate under-counts ${k}`);
        if (e[0]!.get(k) !== exact) off++;
      }
      return `${checkDraws} draws: backends bit-identical, no estimate below the Map's exact count (keepcount over-counted ${off} of ${m.size} keys)`;
    },
  };
}

function rate(backends: LoadedBackend[], v: Variant, checkDraws: number): Suite {
  const s = stream(v.keys, v.draws).map(String);
  const rates = backends.map((b) => new b.api.Rate({ intervalMs: 1000, seed: SEED }));
  const rlf = new RateLimiterMemory({ points: HUGE, duration: 1 });
  const store = new MemoryStore();
  store.init({ windowMs: 1000 } as Parameters<MemoryStore['init']>[0]);
  const cases: Case[] = [];
  backends.forEach((b, i) =>
    cases.push(syncCase(`keepcount Rate.observe ${label(b)}`, s, (k) => rates[i]!.observe(k))),
  );
  // The floor under any one-call-per-key design: fetch the key string, hash it, one counter.
  const floors = backends.map((b) => new b.api.Estimator({ hashes: 1, slots: 1, seed: SEED }));
  backends.forEach((b, i) =>
    cases.push(syncCase(`keepcount Estimator.get, 1 × 1 (the floor) ${label(b)}`, s, (k) => floors[i]!.get(k))),
  );
  cases.push(...clockRead(backends, CLOCK_READ, s));
  cases.push(asyncCase('rate-limiter-flexible RateLimiterMemory.consume', s, (k) => rlf.consume(k, 1)));
  cases.push(asyncCase('express-rate-limit MemoryStore.increment', s, (k) => store.increment(k)));
  // The same store interface on keepcount (express-rate-limit awaits it as it awaits MemoryStore's).
  backends.forEach((b) => {
    const ours = new b.http.KeepcountStore({ seed: SEED });
    ours.init({ windowMs: 1000, limit: HUGE });
    cases.push(asyncCase(`keepcount KeepcountStore.increment ${label(b)}`, s, (k) => ours.increment(k)));
  });
  // @fastify/rate-limit's store interface: a callback per increment, as the plugin calls it.
  const local = new LocalStore(false, false);
  const done = (): void => {};
  cases.push(syncCase('@fastify/rate-limit LocalStore.incr', s, (k) => local.incr(k, done, 1000, HUGE)));
  backends.forEach((b) => {
    const ours = new (b.http.keepcountFastifyStore({ seed: SEED }))({});
    cases.push(syncCase(`keepcount Fastify store incr ${label(b)}`, s, (k) => ours.incr(k, done, 1000, HUGE)));
  });
  return {
    id: `rate-${v.id}`,
    title: `Rate limiting, ${v.title}`,
    reference: ref(backends, 'Rate.observe'),
    cases,
    async check() {
      // A long interval, so no contender's window rolls over while checking.
      const r = backends.map((b) => new b.api.Rate({ intervalMs: 3_600_000, seed: SEED }));
      const f = new RateLimiterMemory({ points: HUGE, duration: 3600 });
      const m = new MemoryStore();
      m.init({ windowMs: 3_600_000 } as Parameters<MemoryStore['init']>[0]);
      let off = 0;
      for (let i = 0; i < checkDraws; i++) {
        const k = s[i]!;
        const counts = r.map((x) => x.observe(k));
        const a = (await f.consume(k, 1)).consumedPoints;
        const b = (await m.increment(k)).totalHits;
        assert(a === b, `rate-limiter-flexible and express-rate-limit disagree on ${k}`);
        assert(counts.every((x) => x === counts[0]) && counts[0]! >= a, `keepcount disagrees on ${k}`);
        if (counts[0] !== a) off++;
      }
      m.shutdown();
      return `${checkDraws} draws: the exact peers agree, keepcount never below them (over by collisions on ${off} draws)`;
    },
  };
}

function inflight(backends: LoadedBackend[], v: Variant, checkDraws: number): Suite {
  const s = stream(v.keys, v.draws);
  const infl = backends.map((b) => new b.api.Inflight({ seed: SEED }));
  const map = new Map<string | number, number>();
  const mapIncr = (k: string | number): number => {
    const c = (map.get(k) ?? 0) + 1;
    map.set(k, c);
    return c;
  };
  const mapRelease = (k: string | number): void => {
    const c = map.get(k)! - 1;
    if (c === 0) map.delete(k);
    else map.set(k, c);
  };
  const cases: Case[] = [];
  backends.forEach((b, i) =>
    cases.push(
      syncCase(`keepcount Inflight.incr + release ${label(b)}`, s, (k) => {
        const [guard] = infl[i]!.incr(k);
        guard.release();
      }),
    ),
  );
  backends.forEach((b, i) =>
    cases.push(
      syncCase(`keepcount Inflight.enter + leave ${label(b)}`, s, (k) => {
        infl[i]!.enter(k);
        infl[i]!.leave(k);
      }),
    ),
  );
  // The floor under any design whose counts live outside JS: two calls (in, out) that each only
  // fetch and hash the key.
  const floors = backends.map((b) => new b.api.Estimator({ hashes: 1, slots: 1, seed: SEED }));
  backends.forEach((b, i) =>
    cases.push(
      syncCase(`keepcount Estimator.get twice, 1 × 1 (the floor) ${label(b)}`, s, (k) => {
        floors[i]!.get(k);
        floors[i]!.get(k);
      }),
    ),
  );
  cases.push(
    syncCase('Map<key, number> incr + release', s, (k) => {
      mapIncr(k);
      mapRelease(k);
    }),
  );
  return {
    id: `inflight-${v.id}`,
    title: `In-flight, ${v.title}`,
    reference: ref(backends, 'Inflight.incr + release'),
    cases,
    check() {
      const x = backends.map((b) => new b.api.Inflight({ seed: SEED }));
      const held = [];
      for (let i = 0; i < checkDraws; i++) {
        const k = s[i]!;
        const got = x.map((f) => f.incr(k));
        const exact = mapIncr(k);
        assert(got.every(([, c]) => c === got[0]![1]) && got[0]![1] >= exact, `in-flight count of ${k}`);
        held.push(k, got);
      }
      for (let i = 0; i < held.length; i += 2) {
        mapRelease(held[i] as string | number);
        for (const [g] of held[i + 1] as [{ release(): void }, number][]) g.release();
      }
      assert(map.size === 0 && x.every((f) => f.get(s[0]!) === 0), 'released counts return to 0');
      return `${checkDraws} guards held at once: backends equal, never below the Map; all back to 0 after release`;
    },
  };
}

/**
 * `lib/limiter.ts`'s Limiter once it exists, every key in its table with a quota nothing exceeds
 * (keys outside the table share one best-effort bucket, so per-key buckets need the table).
 */
export function keepcountLimiter(b: LoadedBackend, keys: string[]): ((key: string) => boolean) | undefined {
  type Decision = { allowed: boolean };
  const Limiter = b.limiter?.Limiter as (new (options: unknown) => { check(key: string): Decision }) | undefined;
  if (Limiter === undefined) return undefined;
  const quota = { requests: { perSecond: HUGE, burst: HUGE } };
  const limiter = new Limiter({ bestEffort: quota, keys: keys.map((k) => [k, quota] as const) });
  return (key) => limiter.check(key).allowed;
}

function tokenBuckets(backends: LoadedBackend[], v: Variant, checkDraws: number): Suite {
  const s = stream(v.keys, v.draws).map(String);
  const distinct = v.keys.map(String);
  const cases: Case[] = [];
  const ours = backends.map((b) => {
    try {
      return keepcountLimiter(b, distinct);
    } catch (error) {
      console.error(`keepcount Limiter (${b.name}) skipped: ${(error as Error).message}`);
      return undefined;
    }
  });
  backends.forEach((b, i) => {
    const l = ours[i];
    if (l !== undefined) cases.push(syncCase(`keepcount Limiter.check ${label(b)}`, s, l));
  });
  const buckets = new Map<string, TokenBucket>();
  const bucket = (k: string): TokenBucket => {
    let t = buckets.get(k);
    if (t === undefined) {
      t = new TokenBucket({ bucketSize: HUGE, tokensPerInterval: HUGE, interval: 'second' });
      t.content = HUGE;
      buckets.set(k, t);
    }
    return t;
  };
  cases.push(syncCase('limiter TokenBucket per key (Map)', s, (k) => bucket(k).tryRemoveTokens(1)));
  const rlf = new RateLimiterMemory({ points: HUGE, duration: 1 });
  cases.push(asyncCase('rate-limiter-flexible RateLimiterMemory.consume', s, (k) => rlf.consume(k, 1)));
  const reference = ours[0] !== undefined ? ref(backends, 'Limiter.check') : cases[0]!.name;
  return {
    id: `token-${v.id}`,
    title: `Token buckets, ${v.title}`,
    reference,
    cases,
    async check() {
      const f = new RateLimiterMemory({ points: HUGE, duration: 3600 });
      for (let i = 0; i < checkDraws; i++) {
        const k = s[i]!;
        assert(bucket(k).tryRemoveTokens(1), `limiter refused ${k}`);
        await f.consume(k, 1);
        ours.forEach((l) => assert(l === undefined || l(k), `keepcount Limiter refused ${k}`));
      }
      buckets.clear();
      const missing = ours.some((l) => l === undefined) ? ' (keepcount Limiter not in lib/ yet: not timed)' : '';
      return `${checkDraws} draws: every contender admits every request under the generous quota${missing}`;
    },
  };
}

function timeouts(backends: LoadedBackend[]): Suite {
  const resolved = Promise.resolve(1);
  const one = [resolved];
  const raceTimeout = <T>(p: Promise<T>, ms: number): Promise<T> => {
    let timer: NodeJS.Timeout | undefined;
    const t = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error('timeout')), ms);
    });
    return Promise.race([p, t]).finally(() => clearTimeout(timer));
  };
  const signalTimeout = <T>(p: Promise<T>, ms: number): Promise<T> => {
    const signal = AbortSignal.timeout(ms);
    return new Promise<T>((resolve, reject) => {
      // Made per call: not wrapped by tsx's keepNames (unnamed.ts).
      const onAbort = unnamed((): void => reject(signal.reason));
      signal.addEventListener('abort', onAbort, { once: true });
      p.then(
        (value) => {
          signal.removeEventListener('abort', onAbort);
          resolve(value);
        },
        (error: unknown) => {
          signal.removeEventListener('abort', onAbort);
          reject(error);
        },
      );
    });
  };
  // The least any wrapper that can settle on its own (so can time out) costs: a promise of its
  // own and one reaction on the awaited one, with nothing to cancel. Issue 16 measures timeout()
  // against a bare await; this is the floor such a wrapper cannot go below.
  const wrapped = <T>(p: Promise<T>): Promise<T> => new Promise<T>((resolve, reject) => p.then(resolve, reject));
  const cases: Case[] = [
    asyncCase('bare await (the floor)', one, (p) => p),
    asyncCase('new Promise + then, nothing else (the floor of any wrapper)', one, wrapped),
  ];
  for (const b of backends) {
    const timeout = b.api.timeout;
    cases.push(asyncCase(`keepcount timeout(p, 5000) ${label(b)}`, one, (p) => timeout(p, 5000)));
  }
  cases.push(asyncCase('Promise.race + setTimeout/clearTimeout', one, (p) => raceTimeout(p, 5000)));
  cases.push(asyncCase('p-timeout', one, (p) => pTimeout(p, { milliseconds: 5000 })));
  cases.push(asyncCase('AbortSignal.timeout + abort listener', one, (p) => signalTimeout(p, 5000)));
  return {
    id: 'timeout',
    title: 'Timeouts: awaiting an already-resolved promise with a 5 s timeout',
    reference: ref(backends, 'timeout(p, 5000)'),
    cases,
    async check() {
      const got = [
        await resolved,
        await wrapped(resolved),
        ...(await Promise.all(backends.map((b) => b.api.timeout(resolved, 5000)))),
        await raceTimeout(resolved, 5000),
        await pTimeout(resolved, { milliseconds: 5000 }),
        await signalTimeout(resolved, 5000),
      ];
      assert(
        got.every((x) => x === 1),
        `results ${got.join(', ')}`,
      );
      return 'every contender resolves to the promise’s value';
    },
  };
}

function signals(backends: LoadedBackend[]): Suite {
  const unit = [5000];
  const cases: Case[] = backends.map((b) => {
    const timeoutSignal = b.api.timeoutSignal;
    return syncCase(`keepcount timeoutSignal(5000) ${label(b)}`, unit, (ms) => timeoutSignal(ms));
  });
  cases.push(syncCase('AbortSignal.timeout(5000)', unit, (ms) => AbortSignal.timeout(ms)));
  return {
    id: 'signal',
    title: 'Timeout signals',
    reference: ref(backends, 'timeoutSignal(5000)'),
    cases,
    check() {
      const got = [...backends.map((b) => b.api.timeoutSignal(5000)), AbortSignal.timeout(5000)];
      assert(
        got.every((x) => x instanceof AbortSignal && !x.aborted),
        'every contender returns a live AbortSignal',
      );
      return 'every contender returns an AbortSignal, not yet aborted';
    },
  };
}

/**
 * What crossing into Rust costs. The cheapest native call there is: the raw core's `hashes`
 * getter (an N-API callback that unwraps the object and returns a u32), against the same read on
 * the fallback's core (a field) and a plain JS call; then a raw core `get` of an integer key (the
 * N-API call plus a hash and 4 counter reads) and the public `Estimator.get`, which adds `lib/`'s
 * argument validation.
 */
function callCost(backends: LoadedBackend[]): Suite {
  const unit = [7];
  const sink = { value: 0 };
  const jsFn = (x: number): number => x + 1;
  const cases: Case[] = [syncCase('plain JS function call', unit, (x) => (sink.value = jsFn(x)))];
  const cores = backends.map((b) => new b.backend.active.Estimator(4, 8192, SEED));
  backends.forEach((b, i) => {
    const core = cores[i]!;
    cases.push(syncCase(`keepcount core.hashes getter ${label(b)}`, unit, () => (sink.value = core.hashes)));
  });
  backends.forEach((b, i) => {
    const core = cores[i]!;
    cases.push(syncCase(`keepcount core.get(integer) ${label(b)}`, unit, (k) => (sink.value = core.get(k))));
  });
  for (const b of backends) {
    const e = new b.api.Estimator({ seed: SEED });
    cases.push(syncCase(`keepcount Estimator.get(integer) ${label(b)}`, unit, (k) => (sink.value = e.get(k))));
  }
  return {
    id: 'call',
    title: 'Call cost: crossing into each backend',
    reference: `keepcount core.hashes getter ${label(backends[0]!)}`,
    cases,
    check() {
      assert(
        cores.every((c) => c.hashes === 4 && c.get(7) === 0),
        'every core reports 4 hashes and an empty count',
      );
      return 'every core reports its 4 hashes and a zero count';
    },
  };
}

/**
 * Heavy hitters (issue 17): `HeavyHitters.incr` against a plain `Estimator.incr` of the same shape
 * (the cost of the exact table), an exact `Map` counter, and bloom-filters' `TopK`; the check
 * measures each one's precision and recall of the top 100 against the exact counts.
 */
function heavy(backends: LoadedBackend[], v: Variant): Suite {
  const s = stream(v.keys, v.draws);
  const shape = { hashes: 4, slots: 4096, seed: SEED };
  const options = { ...shape, intervalMs: 2 ** 52, threshold: 128, capacity: 1024 };
  const heavies = backends.map((b) => new b.api.HeavyHitters(options));
  const plain = backends.map((b) => new b.api.Estimator(shape));
  const map = new Map<string | number, number>();
  const topk = new TopK(100, 0.001, 0.99);
  const cases: Case[] = [];
  backends.forEach((b, i) =>
    cases.push(syncCase(`keepcount HeavyHitters.incr ${label(b)}`, s, (k) => heavies[i]!.incr(k))),
  );
  backends.forEach((b, i) =>
    cases.push(syncCase(`keepcount Estimator.incr, same shape ${label(b)}`, s, (k) => plain[i]!.incr(k))),
  );
  cases.push(...clockRead(backends, HEAVY_CLOCK_READ, s));
  cases.push(syncCase('Map<key, number> counter', s, (k) => map.set(k, (map.get(k) ?? 0) + 1)));
  cases.push(syncCase('bloom-filters TopK.add', s, (k) => topk.add(String(k)), 64));
  return {
    id: `heavy-${v.id}`,
    title: `Heavy hitters, ${v.title}`,
    reference: ref(backends, 'HeavyHitters.incr'),
    cases,
    check() {
      // The whole stream, not `checkDraws`: the top 100 of a few thousand draws are mostly ties.
      const draws = s.length;
      const h = backends.map((b) => new b.api.HeavyHitters(options));
      const t = new TopK(100, 0.001, 0.99);
      const exact = new Map<string | number, number>();
      for (let i = 0; i < draws; i++) {
        const k = s[i]!;
        const counts = h.map((x) => x.incr(k));
        assert(
          counts.every((c) => c === counts[0]),
          `backends disagree on ${k}`,
        );
        t.add(String(k));
        exact.set(k, (exact.get(k) ?? 0) + 1);
      }
      const hundredth = [...exact.values()].sort((a, b) => b - a)[99] ?? 0;
      const score = (keys: (string | number)[]): string => {
        const hits = keys.filter((k) => (exact.get(k) ?? exact.get(Number(k)) ?? 0) >= hundredth).length;
        return `precision ${(hits / Math.max(1, keys.length)).toFixed(3)}, recall ${(hits / 100).toFixed(3)}`;
      };
      const ours = h[0]!.top(100).map((row) => row.key as string | number);
      const theirs = t
        .values()
        .slice(0, 100)
        .map((row) => row.value as string);
      return (
        `${draws} draws, top 100 against exact counts: keepcount ${score(ours)} ` +
        `(${h[0]!.stats().overflowEvents} overflow events); bloom-filters TopK ${score(theirs)}`
      );
    },
  };
}

/** Every suite's id, in report order; `makeSuite` builds one. */
export const SUITE_IDS = [
  'counting-ipv4-uniform',
  'counting-ipv4-zipf',
  'counting-int-uniform',
  'rate-ipv4-uniform',
  'rate-ipv4-zipf',
  'heavy-ipv4-zipf',
  'inflight-ipv4-uniform',
  'token-ipv4-uniform',
  'shared-ipv4-uniform',
  'timeout',
  'signal',
  'call',
] as const;

export type SuiteId = (typeof SUITE_IDS)[number];

/** Builds one suite (only that one: the token-bucket suite alone configures 1M-key tables). */
export function makeSuite(id: SuiteId, backends: LoadedBackend[], keys: Keys, checkDraws: number): Suite {
  const ipU: Variant = { id: 'ipv4-uniform', title: 'uniform IPv4 strings', keys: keys.ips, draws: keys.uniform };
  const ipZ: Variant = { id: 'ipv4-zipf', title: 'Zipf(1.1) IPv4 strings', keys: keys.ips, draws: keys.zipf };
  const intU: Variant = { id: 'int-uniform', title: 'uniform integer keys', keys: keys.ints, draws: keys.uniform };
  switch (id) {
    case 'counting-ipv4-uniform':
      return counting(backends, ipU, checkDraws);
    case 'counting-ipv4-zipf':
      return counting(backends, ipZ, checkDraws);
    case 'counting-int-uniform':
      return counting(backends, intU, checkDraws);
    case 'rate-ipv4-uniform':
      return rate(backends, ipU, checkDraws);
    case 'rate-ipv4-zipf':
      return rate(backends, ipZ, checkDraws);
    case 'heavy-ipv4-zipf':
      return heavy(backends, ipZ);
    case 'inflight-ipv4-uniform':
      return inflight(backends, ipU, checkDraws);
    case 'token-ipv4-uniform':
      return tokenBuckets(backends, ipU, checkDraws);
    case 'shared-ipv4-uniform':
      return shared(backends, ipU, checkDraws);
    case 'timeout':
      return timeouts(backends);
    case 'signal':
      return signals(backends);
    case 'call':
      return callCost(backends);
  }
}
