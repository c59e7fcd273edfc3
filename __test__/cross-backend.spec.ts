// The two backends side by side, bypassing lib/: the same seed and operations must give the same
// answers and byte-identical serialize(), and each must read the other's bytes. Loading the native
// backend is required here in both runs: a missing binding fails this file instead of skipping it.
import test from 'ava';
import type { Backend, EstimatorCore, Key, RateCore } from '../lib/core.js';
import { backend as nativeBackend } from '../lib/native.cjs';
import { crc32 } from '../fallback/crc32.js';
import { createBuffer } from '../lib/shared-buffer.js';
import { fallbackBackend } from '../fallback/index.js';
import { prng, title } from './helpers.js';

const CHARS = ['a', 'Z', '0', '.', ' ', 'é', '€', 'ß', '中', '😀', '\ud800', '\udfff', '\u0000'];

function randomKey(random: () => number): Key {
  const int = (n: number) => Math.floor(random() * n);
  switch (int(6)) {
    case 0:
    case 1: {
      // Up to 300 characters: past the binding's 256-byte stack buffer.
      const length = int(8) === 0 ? int(300) : int(16);
      return Array.from({ length }, () => CHARS[int(CHARS.length)]).join('');
    }
    case 2: {
      const bytes = Uint8Array.from({ length: int(40) }, () => int(256));
      // Sometimes a view at an offset into a larger buffer.
      return int(2) === 0 ? bytes : Buffer.concat([Buffer.from([1, 2, 3]), bytes]).subarray(3);
    }
    case 3:
      return [0, -0, 1, -1, Number.MAX_SAFE_INTEGER, Number.MIN_SAFE_INTEGER][int(6)]!;
    case 4:
      return Math.floor((random() - 0.5) * 2 * Number.MAX_SAFE_INTEGER);
    default:
      return [0n, -1n, 2n ** 63n - 1n, -(2n ** 63n), BigInt.asIntN(64, BigInt(int(2 ** 32)) << BigInt(int(33)))][
        int(5)
      ]!;
  }
}

const randomSeed = (random: () => number): bigint =>
  (BigInt(Math.floor(random() * 2 ** 32)) << 32n) | BigInt(Math.floor(random() * 2 ** 32));

const pair = <T>(make: (b: Backend) => T): [T, T] => [make(nativeBackend), make(fallbackBackend)];

function decode(b: Backend, bytes: Uint8Array): EstimatorCore {
  const core = b.deserializeEstimator(bytes);
  if (typeof core === 'string') throw new Error(`${b.name} refused valid bytes: ${core}`);
  return core;
}

test(title('both backends agree on every estimate and serialize byte-identically'), (t) => {
  for (let run = 1; run <= 40; run++) {
    const random = prng(run);
    const hashes = 1 + Math.floor(random() * 8);
    const slots = 1 + Math.floor(random() * 2000);
    const seed = randomSeed(random);
    const [native, fallback] = pair((b) => new b.Estimator(hashes, slots, seed));
    const keys = Array.from({ length: 50 }, () => randomKey(random));
    for (let op = 0; op < 500; op++) {
      const key = keys[Math.floor(random() * keys.length)]!;
      if (random() < 0.7) {
        const value = Math.floor((random() - 0.3) * 2 ** (1 + Math.floor(random() * 32)));
        t.is(native.incr(key, value), fallback.incr(key, value), `run ${run} op ${op}: incr`);
      } else {
        t.is(native.get(key), fallback.get(key), `run ${run} op ${op}: get`);
      }
    }
    t.deepEqual(Buffer.from(native.serialize()), Buffer.from(fallback.serialize()), `run ${run}: bytes`);
    t.is(native.seed, fallback.seed);
    t.is(native.hashes, fallback.hashes);
    t.is(native.slots, fallback.slots);
  }
});

test(title("each backend reads the other one's bytes and keeps counting identically"), (t) => {
  const random = prng(99);
  const seed = randomSeed(random);
  const [native, fallback] = pair((b) => new b.Estimator(4, 256, seed));
  const keys = Array.from({ length: 100 }, () => randomKey(random));
  for (const key of keys) {
    const value = 1 + Math.floor(random() * 1000);
    native.incr(key, value);
    fallback.incr(key, value);
  }
  const fromFallback = decode(nativeBackend, fallback.serialize());
  const fromNative = decode(fallbackBackend, native.serialize());
  for (const key of keys) {
    t.is(fromFallback.get(key), fallback.get(key));
    t.is(fromNative.get(key), native.get(key));
  }
  for (const key of keys) t.is(fromFallback.incr(key, 3), fromNative.incr(key, 3));
  t.deepEqual(Buffer.from(fromFallback.serialize()), Buffer.from(fromNative.serialize()));
});

test(title('merge gives the same sketch in both backends'), (t) => {
  const random = prng(7);
  const seed = randomSeed(random);
  const [a, b] = [pair((x) => new x.Estimator(3, 100, seed)), pair((x) => new x.Estimator(3, 100, seed))];
  for (let i = 0; i < 300; i++) {
    const key = randomKey(random);
    const value = Math.floor((random() - 0.5) * 1000);
    const [into] = i % 2 === 0 ? [a] : [b];
    into[0].incr(key, value);
    into[1].incr(key, value);
  }
  a[0].merge(b[0]);
  a[1].merge(b[1]);
  t.deepEqual(Buffer.from(a[0].serialize()), Buffer.from(a[1].serialize()));
});

test(title('both backends saturate at ±2^63 on overflow, in incr and merge, and serialize alike'), (t) => {
  const MAX = Number.MAX_SAFE_INTEGER;
  // One key per sketch, so no other key shares its counters.
  for (const sign of [1, -1]) {
    const bound = sign * 2 ** 63;
    const [a, b] = [pair((x) => new x.Estimator(2, 16, 3n)), pair((x) => new x.Estimator(2, 16, 3n))];
    // 1,025 × (2^53 − 1) passes 2^63: Rust's wrapping add once made this −9.2e18 on native.
    for (const sketch of [...a, ...b]) for (let i = 0; i < 1025; i++) sketch.incr('k', sign * MAX);
    t.deepEqual(Buffer.from(a[0].serialize()), Buffer.from(a[1].serialize()));
    for (const sketch of a) {
      t.is(sketch.get('k'), bound);
      // Beyond 2^53 both hold 2^63 − 1001 exactly and read it as the nearest double, 2^63 − 1024.
      t.is(sketch.incr('k', -sign * 1000), bound - sign * 1024);
    }
    t.deepEqual(Buffer.from(a[0].serialize()), Buffer.from(a[1].serialize()));
    a[0].merge(b[0]);
    a[1].merge(b[1]);
    for (const sketch of a) t.is(sketch.get('k'), bound);
    const bytes = Buffer.from(a[1].serialize());
    t.deepEqual(Buffer.from(a[0].serialize()), bytes);
    for (const decoded of [nativeBackend.deserializeEstimator(bytes), fallbackBackend.deserializeEstimator(bytes)]) {
      t.is((decoded as EstimatorCore).get('k'), bound);
    }
  }
});

/** A serialized sketch (docs/format.md §5) of this shape and seed holding `counters`. */
function sketchBytes(hashes: number, slots: number, seed: bigint, counters: bigint[]): Uint8Array {
  const bytes = new fallbackBackend.Estimator(hashes, slots, seed).serialize();
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  counters.forEach((c, i) => view.setBigInt64(24 + 8 * i, c, true));
  view.setUint32(bytes.length - 4, crc32(bytes, bytes.length - 4), true);
  return bytes;
}

test(title('both backends keep safe and wide counters side by side alike through incr, merge and reset'), (t) => {
  const MAX = Number.MAX_SAFE_INTEGER;
  const I64_MAX = 2n ** 63n - 1n;
  // Counters on both sides of ±(2^53 − 1), odd ones no double holds, and the i64 bounds.
  const COUNTERS = [0n, 5n, -7n, BigInt(MAX), -BigInt(MAX), 2n ** 53n, 2n ** 53n + 1n, -(2n ** 53n) - 3n];
  const EDGES = [...COUNTERS, 2n ** 62n + 3n, I64_MAX, -I64_MAX - 1n, I64_MAX - 1001n];
  // Steps that take a counter past ±(2^53 − 1), from near the i64 bounds to them, and back.
  const STEPS = [1, -3, 1000, MAX, -MAX, MAX, -MAX];
  for (let run = 1; run <= 40; run++) {
    const random = prng(run);
    const pick = <T>(xs: T[]): T => xs[Math.floor(random() * xs.length)]!;
    const hashes = 1 + Math.floor(random() * 3);
    const slots = 1 + Math.floor(random() * 6);
    const seed = randomSeed(random);
    const decoded = (): [EstimatorCore, EstimatorCore] => {
      const counters = Array.from({ length: hashes * slots }, () => pick(random() < 0.5 ? COUNTERS : EDGES));
      const bytes = sketchBytes(hashes, slots, seed, counters);
      return pair((b) => decode(b, bytes));
    };
    const [a, b] = [decoded(), decoded()];
    const keys = Array.from({ length: 8 }, (_, i) => `k${i}`);
    for (let op = 0; op < 300; op++) {
      const [native, fallback] = pick([a, b]);
      const key = pick(keys);
      const at = `run ${run} op ${op}`;
      const roll = random();
      if (roll < 0.7) {
        const value = pick(STEPS);
        t.is(fallback.incr(key, value), native.incr(key, value), `${at}: incr ${value}`);
      } else if (roll < 0.85) {
        t.is(fallback.get(key), native.get(key), `${at}: get`);
      } else if (roll < 0.95) {
        const [into, from] = random() < 0.5 ? [a, b] : [b, a];
        into[0].merge(from[0]);
        into[1].merge(from[1]);
      } else if (roll < 0.97) {
        native.reset();
        fallback.reset();
      } else {
        t.deepEqual(Buffer.from(fallback.serialize()), Buffer.from(native.serialize()), `${at}: bytes`);
      }
    }
    for (const [native, fallback] of [a, b]) {
      const bytes = Buffer.from(native.serialize());
      t.deepEqual(Buffer.from(fallback.serialize()), bytes, `run ${run}: bytes`);
      t.deepEqual(Buffer.from(decode(fallbackBackend, bytes).serialize()), bytes, `run ${run}: decoded again`);
    }
  }
});

test(title('both backends agree on Rate over random operations and times'), (t) => {
  for (let run = 1; run <= 20; run++) {
    const random = prng(1000 + run);
    const interval = 1 + Math.floor(random() * 1000);
    const hashes = 1 + Math.floor(random() * 4);
    const slots = 1 + Math.floor(random() * 64);
    const seed = randomSeed(random);
    const [native, fallback]: [RateCore, RateCore] = pair((b) => new b.Rate(interval, hashes, slots, seed, false));
    const keys = Array.from({ length: 10 }, () => randomKey(random));
    let now = 0;
    for (let op = 0; op < 400; op++) {
      // Mostly small steps; sometimes one, two or many intervals at once.
      const step = random();
      now += step < 0.6 ? Math.floor(random() * 10) : step < 0.9 ? interval : Math.floor(random() * 5 * interval);
      const key = keys[Math.floor(random() * keys.length)]!;
      const what = `run ${run} op ${op} at ${now} ms`;
      const kind = random();
      if (kind < 0.6) {
        const events = Math.floor((random() - 0.2) * 100);
        t.is(native.observe(key, events, now), fallback.observe(key, events, now), `${what}: observe`);
      } else if (kind < 0.8) {
        t.is(native.previousCount(key, now), fallback.previousCount(key, now), `${what}: previousCount`);
      } else {
        t.deepEqual({ ...native.sample(key, now) }, { ...fallback.sample(key, now) }, `${what}: sample`);
      }
    }
  }
});

test(
  title('both backends refund alike, stopping each counter at zero, on the heap and in a buffer, to the byte'),
  (t) => {
    for (let run = 1; run <= 20; run++) {
      const random = prng(3000 + run);
      const interval = 1 + Math.floor(random() * 1000);
      const hashes = 1 + Math.floor(random() * 4);
      // Few slots: keys share counters, so a refund meets counters other keys raised or lowered.
      const slots = 1 + Math.floor(random() * 16);
      const seed = randomSeed(random);
      const layout = { kind: 'rate', hashes, slots, seed, intervalMs: interval } as const;
      // One buffer and a copy: each header holds its creation time, which two calls may not share.
      const created = createBuffer(layout);
      const copy = new SharedArrayBuffer(created.byteLength);
      new Uint8Array(copy).set(new Uint8Array(created));
      const buffers: [SharedArrayBuffer, SharedArrayBuffer] = [created, copy];
      const [nativeBuffer, fallbackBuffer] = buffers.map((buffer) => new BigInt64Array(buffer));
      const cores: [RateCore, RateCore][] = [
        pair((b) => new b.Rate(interval, hashes, slots, seed, false)),
        [
          nativeBackend.buffers.rate(nativeBuffer!, interval, hashes, slots, seed),
          fallbackBackend.buffers.rate(fallbackBuffer!, interval, hashes, slots, seed),
        ],
      ];
      const keys = Array.from({ length: 10 }, () => randomKey(random));
      let now = 0;
      for (let op = 0; op < 300; op++) {
        const step = random();
        now += step < 0.8 ? Math.floor(random() * 10) : step < 0.95 ? interval : Math.floor(random() * 5 * interval);
        const key = keys[Math.floor(random() * keys.length)]!;
        const kind = random();
        // Counts past 2^53 now and then, and some below zero, which a refund leaves as they are.
        const events =
          random() < 0.05 ? Number.MAX_SAFE_INTEGER : Math.floor((random() - (kind < 0.5 ? 0.1 : 0)) * 100);
        for (const [native, fallback] of cores) {
          const what = `run ${run} op ${op} at ${now} ms`;
          if (kind < 0.5)
            t.is(native.observe(key, events, now), fallback.observe(key, events, now), `${what}: observe`);
          else if (kind < 0.9)
            t.is(native.refund(key, events, now), fallback.refund(key, events, now), `${what}: refund`);
          else t.deepEqual({ ...native.sample(key, now) }, { ...fallback.sample(key, now) }, `${what}: sample`);
        }
      }
      t.deepEqual(new Uint8Array(buffers[0]), new Uint8Array(buffers[1]), `run ${run}: the buffers' bytes`);
    }
  },
);

test(title('a Rate interval of 2^52 ms works natively as in the fallback'), (t) => {
  const [native, fallback] = pair((b) => new b.Rate(2 ** 52, 4, 16, 5n, false));
  for (const now of [0, 1, 2 ** 52 - 1, 2 ** 52, 2 ** 53 - 1]) {
    t.is(native.observe('k', 1, now), fallback.observe('k', 1, now));
    t.deepEqual({ ...native.sample('k', now) }, { ...fallback.sample('k', now) });
  }
});

test(title('both backends agree on every heavy-hitter answer and serialize summaries byte-identically'), (t) => {
  for (let run = 1; run <= 30; run++) {
    const random = prng(1000 + run);
    const int = (n: number) => Math.floor(random() * n);
    const hashes = 1 + int(6);
    const slots = 1 + int(300);
    const seed = randomSeed(random);
    const threshold = 1 + int(20);
    const capacity = 1 + int(24);
    const intervalMs = 1 + int(100);
    const [native, fallback] = pair((b) => new b.Heavy(intervalMs, hashes, slots, seed, threshold, capacity, false));
    const keys = Array.from({ length: 40 }, () => randomKey(random));
    let now = 0;
    for (let op = 0; op < 600; op++) {
      const key = keys[Math.min(int(keys.length), int(keys.length))]!;
      const at = `run ${run} op ${op}`;
      if (random() < 0.02) now += int(2 * intervalMs);
      const choice = random();
      if (choice < 0.65) {
        const value = 1 + int(random() < 0.9 ? 3 : 2 ** 32 - 1);
        t.is(native.incr(key, value, now), fallback.incr(key, value, now), `${at}: incr`);
      } else if (choice < 0.75) {
        const value = 1 + int(3);
        const windows = [new Float64Array(1), new Float64Array(1)];
        t.deepEqual(
          [native.incrInWindow(key, value, now, windows[0]!), windows[0]![0]],
          [fallback.incrInWindow(key, value, now, windows[1]!), windows[1]![0]],
          `${at}: incrInWindow`,
        );
        t.is(native.intervalElapsed(now), fallback.intervalElapsed(now), `${at}: intervalElapsed`);
      } else if (choice < 0.8) {
        const value = 1 + int(5);
        native.decr(key, value, now);
        fallback.decr(key, value, now);
      } else if (choice < 0.9) {
        const window = int(3) as 0 | 1 | 2;
        t.deepEqual(native.count(key, window, now), fallback.count(key, window, now), `${at}: count`);
      } else if (choice < 0.95) {
        const window = int(3) as 0 | 1 | 2;
        const n = int(capacity + 2);
        t.deepEqual(native.top(n, window, now), fallback.top(n, window, now), `${at}: top`);
      } else {
        const window = int(2) as 0 | 1;
        t.deepEqual(native.stats(window, now), fallback.stats(window, now), `${at}: stats`);
        const bytes = native.serialize(window, now);
        t.deepEqual(bytes, fallback.serialize(window, now), `${at}: serialize`);
        // Each absorbs the other's bytes into the other window: same merge, same result.
        const into = (1 - window) as 0 | 1;
        t.is(native.absorb(bytes, into, now), null);
        t.is(fallback.absorb(bytes, into, now), null);
        t.deepEqual(native.serialize(into, now), fallback.serialize(into, now), `${at}: merged`);
      }
    }
  }
});

test(
  title('a heavy-hitter key of any length, ASCII or with a non-ASCII unit anywhere, counts alike on both backends'),
  (t) => {
    // The fallback hashes an ASCII key's stored form from its char codes, the tag byte and the first
    // three in one word, then four a word, then the rest byte by byte (fallback/heavy/keys.ts), and
    // stops at a group holding a non-ASCII unit for the UTF-8 path: every length around those word
    // boundaries, with such a unit at every position, must hash and store as the native one does.
    const [native, fallback] = pair((b) => new b.Heavy(2 ** 52, 4, 64, 0x1234n, 1, 100_000, false));
    const units = ['a', '.', '~', '\x7f', '\x80', 'é', '\u0100', '😀', '\ud800', '\udc00', '\ufffd', '\0'];
    let keys = 0;
    for (let n = 0; n <= 40; n++) {
      const variants = ['k'.repeat(n)];
      for (let at = 0; at < n; at++) for (const u of units) variants.push('x'.repeat(at) + u + 'y'.repeat(n - at - 1));
      for (const key of variants) {
        keys++;
        t.is(native.incr(key, 1, 0), fallback.incr(key, 1, 0), `incr ${JSON.stringify(key)}`);
      }
    }
    t.true(keys > 9000);
    t.deepEqual(native.top(100_000, 0, 0), fallback.top(100_000, 0, 0));
    t.deepEqual(native.serialize(0, 0), fallback.serialize(0, 0));
  },
);

test(title('both backends refuse the same corrupt heavy-hitter summaries for the same reason'), (t) => {
  const random = prng(77);
  const [native, fallback] = pair((b) => new b.Heavy(1000, 3, 64, 5n, 2, 16, false));
  for (let i = 0; i < 200; i++) {
    const key = randomKey(random);
    native.incr(key, 1 + Math.floor(random() * 4), 0);
    fallback.incr(key, 1 + Math.floor(random() * 4), 0);
  }
  const bytes = native.serialize(0, 0);
  const cases: Uint8Array[] = [bytes.subarray(0, 63), bytes.subarray(0, bytes.length - 1)];
  for (let i = 0; i < 400; i++) {
    const copy = bytes.slice();
    const at = Math.floor(random() * (copy.length - 4));
    copy[at] = copy[at]! ^ (1 << Math.floor(random() * 8));
    cases.push(copy);
    // The same damage with a valid checksum, so the checks after the CRC are reached too.
    const resealed = copy.slice();
    new DataView(resealed.buffer).setUint32(resealed.length - 4, crc32(resealed, resealed.length - 4), true);
    cases.push(resealed);
  }
  const reasons = new Set<string | null>();
  for (const [i, input] of cases.entries()) {
    const reason = native.absorb(input, 1, 0);
    reasons.add(reason);
    t.is(fallback.absorb(input, 1, 0), reason, `case ${i}`);
    t.deepEqual(native.serialize(1, 0), fallback.serialize(1, 0), `case ${i}: same state after`);
  }
  t.log(`reasons seen: ${[...reasons].join(', ')}`);
  t.true(reasons.size >= 5);
});
