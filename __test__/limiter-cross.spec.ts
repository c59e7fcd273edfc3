// The limiter's two backends side by side, bypassing lib/: one fixed pseudo-random sequence of
// checks, clock moves (forward, backward, beyond 2^53 ns and 2^64 ns) and live updates must give
// the same decision log, to the last bit of every retry time. Needs the native binding in both runs.
import test from 'ava';
import { packQuotas, type Key, type LimiterCore, type LimitSpec, type QuotaSpec } from '../lib/core.js';
import { backend as nativeBackend } from '../lib/native.cjs';
import { fallbackBackend } from '../fallback/index.js';
import { prng, title } from './helpers.js';

/** Keys that collide on purpose: 3 and 3n, two strings differing only in lone surrogates. */
const KEYS: Key[] = ['a', 'b', 'é', '\ud800x', '\udfffx', 3, 3n, -1, new Uint8Array([0x61]), new Uint8Array([]), ''];
const PERIODS = [1, 3, 1_000_000, 1_000_000_000, 7_000_000_000, Number.MAX_SAFE_INTEGER];

function randomLimit(random: () => number): LimitSpec | undefined {
  const int = (n: number) => Math.floor(random() * n);
  if (int(4) === 0) return undefined;
  const amount = [0, 1, 2, 3, 7, 1000, 1e9, Number.MAX_SAFE_INTEGER][int(8)]!;
  const burst = int(10) === 0 ? Number.MAX_SAFE_INTEGER : int(12);
  return { amount, periodNs: PERIODS[int(PERIODS.length)]!, burst };
}

function randomQuota(random: () => number): QuotaSpec {
  const spec: QuotaSpec = {};
  const requests = randomLimit(random);
  const units = randomLimit(random);
  if (requests !== undefined) spec.requests = requests;
  if (units !== undefined) spec.units = units;
  return spec;
}

const showLimit = (l: LimitSpec | null | undefined) => (l == null ? '-' : `${l.amount}/${l.periodNs}/${l.burst}`);
const showQuota = (q: QuotaSpec | null) => (q === null ? 'none' : `${showLimit(q.requests)} ${showLimit(q.units)}`);

/** Runs `steps` pseudo-random operations from `seed` on `core`; returns the log of every answer. */
function run(core: LimiterCore, seed: number, steps: number): string[] {
  const random = prng(seed);
  const int = (n: number) => Math.floor(random() * n);
  const log: string[] = [];
  let now = 0;
  for (let step = 0; step < steps; step++) {
    const op = int(100);
    const key = KEYS[int(KEYS.length)]!;
    if (op < 60) {
      const cost = int(8) === 0 ? int(20) : int(3);
      log.push(`check ${String(key)} ${cost} @${now}: ${core.check(key, cost, now)}`);
    } else if (op < 75) {
      // Mostly forward, in fractions of a millisecond or a few seconds; sometimes backward.
      const r = int(20);
      now = r === 0 ? Math.max(0, now - random() * 1000) : now + (r < 10 ? random() : random() * 3000);
    } else if (op < 80) {
      // Far ahead: past 2^53 ns (~104 days), and once in a while past 2^64 ns (saturating).
      now += int(3) === 0 ? 1e13 : 1e8 * random();
    } else if (op < 85) {
      const n = int(6);
      const keys = Array.from({ length: n }, () => KEYS[int(KEYS.length)]!);
      const quotas = keys.map(() => randomQuota(random));
      log.push(
        `replace ${keys.map(String).join(',')} @${now}: ${core.replaceKeys(keys, packQuotas(quotas), now)} size ${core.size}`,
      );
    } else if (op < 90) {
      log.push(`setQuota ${String(key)} @${now}: ${core.setQuota(key, randomQuota(random), now)}`);
    } else if (op < 93) {
      core.setBestEffort(randomQuota(random), now);
    } else if (op < 96) {
      core.setOverall(int(2) === 0 ? null : randomQuota(random), now);
    } else {
      log.push(`quota ${String(key)}: ${showQuota(core.quota(key))}`);
    }
  }
  return log;
}

test(title('native and fallback limiters log identical decisions for a recorded sequence'), (t) => {
  let checks = 0;
  let allowed = 0;
  let infinite = 0;
  for (const seed of [1, 2, 3, 4, 5, 6, 7, 8]) {
    const bestEffort: QuotaSpec = { requests: { amount: 5, periodNs: 1e9, burst: 3 } };
    const native = run(new nativeBackend.Limiter(bestEffort, false), seed, 3000);
    const fallback = run(new fallbackBackend.Limiter(bestEffort, false), seed, 3000);
    t.deepEqual(native, fallback, `seed ${seed}`);
    for (const line of native) {
      if (!line.startsWith('check')) continue;
      checks++;
      if (line.endsWith(': 0')) allowed++;
      if (line.endsWith('Infinity')) infinite++;
    }
  }
  // The sequence exercised admissions, finite waits and never-admissible costs.
  t.true(allowed > 1000 && infinite > 100 && checks - allowed - infinite > 1000, `${checks} ${allowed} ${infinite}`);
});

test(title('both limiters turn clock readings into the same nanoseconds at the edges'), (t) => {
  // One token a nanosecond, one held: after an empty bucket, the wait shows how many ns each
  // reading was worth.
  for (const nowMs of [0, 1e-6, 0.9e-6, 1.5e-6, 2 ** 53 / 1e6, 2 ** 64 / 1e6, 1e300, -5, NaN]) {
    const answers = [nativeBackend, fallbackBackend].map((backend) => {
      const core = new backend.Limiter({ requests: { amount: 1, periodNs: 1e6, burst: 1 } }, false);
      return [core.check('k', 1, nowMs), core.check('k', 1, nowMs), core.check('k', 1, nowMs + 1e-3)];
    });
    t.deepEqual(answers[0], answers[1], `nowMs ${nowMs}`);
  }
});

test(title('the native limiter throws, never aborts, on input lib/ would not pass it'), (t) => {
  const limit = (amount: number, periodNs: number, burst: number) => ({ requests: { amount, periodNs, burst } });
  const range = { instanceOf: RangeError, code: 'ERR_OUT_OF_RANGE' };
  for (const bad of [limit(-1, 1, 1), limit(1, 0, 1), limit(1, 1, 0.5), limit(NaN, 1, 1), limit(1, 2 ** 53, 1)]) {
    t.throws(() => new nativeBackend.Limiter(bad, false), range);
  }
  const core = new nativeBackend.Limiter(limit(1, 1e9, 1), false);
  for (const cost of [-1, 0.5, NaN, Infinity, 2 ** 53]) t.throws(() => core.check('k', cost, 0), range);
  t.throws(() => core.check({} as never, 1, 0), { instanceOf: TypeError, code: 'ERR_INVALID_ARG_TYPE' });
  t.throws(() => core.replaceKeys(['a', 'b'], packQuotas([limit(1, 1, 1)]), 0), range);
  const negativePeriod = packQuotas([limit(1, 1, 1)]);
  negativePeriod[1] = -5;
  t.throws(() => core.replaceKeys(['a'], negativePeriod, 0), range);
  t.throws(() => core.replaceKeys(['a'], [limit(1, 1, 1)] as never, 0));
  t.throws(() => core.setQuota('a', limit(1, -5, 1), 0), range);
  t.is(core.size, 0);
  t.is(core.check('k', 1, 0), 0);
});
