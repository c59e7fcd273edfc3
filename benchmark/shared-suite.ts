/**
 * Issue 14: the same calls on counters shared between processes (a segment in `/dev/shm`, native
 * only: the fallback cannot share) or between worker threads (a `SharedArrayBuffer`, both backends)
 * and on process-local ones. The segments are unlinked as soon as they are open: the mappings stay
 * valid and nothing is left behind.
 */
import type { LoadedBackend } from './backends.js';
import { assert, SEED, syncCase, type Case, type Suite, type Variant } from './case.js';
import { stream } from './data.js';

/** The suite: SharedArrayBuffer sketches on every backend, segments on the native one. */
export function shared(backends: LoadedBackend[], v: Variant, checkDraws: number): Suite {
  const s = stream(v.keys, v.draws).map(String);
  const native = backends.find((b) => b.name === 'native');
  const cases: Case[] = [];
  const name = (what: string): string => `bench-${what}-${process.pid}`;
  const open = <T>(what: string, make: (name: string) => T, unlink: (name: string) => void): T => {
    const opened = make(name(what));
    unlink(name(what));
    return opened;
  };
  for (const b of backends) {
    // Issue 14 item 3: counters in a SharedArrayBuffer (what worker threads share) against local ones.
    const { Estimator, Rate } = b.api;
    const local = new Estimator({ seed: SEED });
    const inBuffer = Estimator.fromSharedBuffer(Estimator.createSharedBuffer({ seed: SEED }));
    const localRate = new Rate({ intervalMs: 1000, seed: SEED });
    const rateInBuffer = Rate.fromSharedBuffer(Rate.createSharedBuffer({ intervalMs: 1000, seed: SEED }));
    cases.push(syncCase(`keepcount Estimator.incr (${b.name}, local)`, s, (k) => local.incr(k)));
    cases.push(syncCase(`keepcount Estimator.incr (${b.name}, SharedArrayBuffer)`, s, (k) => inBuffer.incr(k)));
    cases.push(syncCase(`keepcount Rate.observe (${b.name}, local)`, s, (k) => localRate.observe(k)));
    cases.push(syncCase(`keepcount Rate.observe (${b.name}, SharedArrayBuffer)`, s, (k) => rateInBuffer.observe(k)));
  }
  // What a SharedArrayBuffer sketch pays that a Float64Array one does not, with nothing else
  // around it: four atomic adds on i64s (each a locked instruction, its result a BigInt) against
  // four plain adds, on counters as scattered as a 4 × 8192 sketch's.
  const columns = Array.from(v.draws, (i) => (i * 2654435761) >>> 19);
  const atomics = new BigInt64Array(new SharedArrayBuffer(4 * 8192 * 8));
  const plain = new Float64Array(4 * 8192);
  cases.push(
    syncCase('four Atomics.add on a SharedArrayBuffer (the floor of its extra cost)', columns, (c) => {
      let min = Infinity;
      for (let row = 0; row < 4; row++) {
        const n = Number(Atomics.add(atomics, row * 8192 + c, 1n)) + 1;
        if (n < min) min = n;
      }
      return min;
    }),
  );
  cases.push(
    syncCase('four += on a Float64Array', columns, (c) => {
      let min = Infinity;
      for (let row = 0; row < 4; row++) {
        const n = (plain[row * 8192 + c]! += 1);
        if (n < min) min = n;
      }
      return min;
    }),
  );
  if (native !== undefined) {
    const { Estimator, Rate, Inflight } = native.api;
    const local = new Estimator({ seed: SEED });
    const sharedEst = open('est', (n) => Estimator.openShared(n, { seed: SEED }), Estimator.unlink);
    const sharedRate = open('rate', (n) => Rate.openShared(n, { intervalMs: 1000, seed: SEED }), Rate.unlink);
    const localInflight = new Inflight({ seed: SEED });
    const sharedInflight = open('inflight', (n) => Inflight.openShared(n, { seed: SEED }), Estimator.unlink);
    const localRate = new Rate({ intervalMs: 1000, seed: SEED });
    const [localLimiter, sharedLimiter] = limiters(native.api, v.keys.map(String));
    cases.push(syncCase('keepcount Estimator.incr (native, shared)', s, (k) => sharedEst.incr(k)));
    cases.push(syncCase('keepcount Estimator.get (native, local)', s, (k) => local.get(k)));
    cases.push(syncCase('keepcount Estimator.get (native, shared)', s, (k) => sharedEst.get(k)));
    cases.push(syncCase('keepcount Rate.observe (native, shared)', s, (k) => sharedRate.observe(k)));
    // What a rate-limit check costs: a count and the time left in the window.
    cases.push(syncCase('keepcount Rate.observeWindow (native, local)', s, (k) => localRate.observeWindow(k).count));
    cases.push(syncCase('keepcount Rate.observeWindow (native, shared)', s, (k) => sharedRate.observeWindow(k).count));
    cases.push(
      syncCase('keepcount Inflight.incr+release (native, local)', s, (k) => localInflight.incr(k)[0].release()),
    );
    cases.push(
      syncCase('keepcount Inflight.incr+release (native, shared)', s, (k) => sharedInflight.incr(k)[0].release()),
    );
    cases.push(syncCase('keepcount Limiter.check (native, local)', s, (k) => localLimiter.check(k).allowed));
    cases.push(syncCase('keepcount Limiter.check (native, shared)', s, (k) => sharedLimiter.check(k).allowed));
  }
  return {
    id: `shared-${v.id}`,
    title: `Shared between processes or worker threads vs process-local, ${v.title}`,
    reference: 'keepcount Estimator.incr (native, local)',
    cases,
    check() {
      // One buffer, counted in by every backend in turn: each gives the local sketch's estimates.
      const buffer = backends[0]!.api.Estimator.createSharedBuffer({ seed: SEED });
      const inBuffers = backends.map((b) => b.api.Estimator.fromSharedBuffer(buffer));
      const reference = new backends[0]!.api.Estimator({ seed: SEED });
      for (let i = 0; i < checkDraws; i++) {
        const k = s[i]!;
        const expected = reference.incr(k);
        const got = inBuffers[i % inBuffers.length]!.incr(k);
        assert(got === expected, `a SharedArrayBuffer sketch and a local one disagree on ${k}`);
      }
      const buffers = `${checkDraws} draws: SharedArrayBuffer sketches (${backends.map((b) => b.name).join(' and ')} alternating on one buffer) give the local one's estimates`;
      if (native === undefined) return `${buffers}; native backend unavailable: no segment to compare`;
      const { Estimator } = native.api;
      const local = new Estimator({ seed: SEED });
      const sharedEst = open('check', (n) => Estimator.openShared(n, { seed: SEED }), Estimator.unlink);
      const [localLimiter, sharedLimiter] = limiters(native.api, s.slice(0, checkDraws));
      for (let i = 0; i < checkDraws; i++) {
        const k = s[i]!;
        assert(local.incr(k) === sharedEst.incr(k), `shared and local sketches disagree on ${k}`);
        assert(localLimiter.check(k).allowed && sharedLimiter.check(k).allowed, `a limiter refused ${k}`);
      }
      sharedEst.close();
      sharedLimiter.close();
      return `${buffers}; the shared segment's sketch gives the local one's estimates; both limiters admit every check`;
    },
  };
}

/**
 * A process-local `Limiter` with every key of `keys` in its table, and a shared one with room for
 * them all (its segment unlinked at once: this process keeps it mapped), under one quota that
 * admits everything: a billion a second, the most whose full bucket fits the shared limiter's
 * 64-bit bucket words (`burst × 1e9 ns < 2^64`).
 */
function limiters(api: LoadedBackend['api'], keys: string[]) {
  const quota = { requests: { perSecond: 1e9, burst: 1e9 } };
  const distinct = [...new Set(keys)];
  const local = new api.Limiter({ bestEffort: quota, keys: distinct.map((k) => [k, quota] as const) });
  const name = `bench-limiter-${process.pid}-${distinct.length}`;
  const shared = api.Limiter.openShared(name, { quota, capacity: distinct.length, seed: SEED });
  api.Limiter.unlink(name);
  return [local, shared] as const;
}
