// Counters past 2^53 and at the i64 bounds: both backends must hold the same i64 counters, so the
// same operations give the same serialized bytes, and the same answers once a count comes back
// into the safe range. Every expected value here is what the native backend's i64 arithmetic
// gives (crates/limits/src/estimator/saturating.rs).
import test from 'ava';
import { Estimator, HeavyHitters, ManualClock, Rate } from '../lib/index.js';
import { crc32 } from '../fallback/crc32.js';
import { title } from './helpers.js';

const M = Number.MAX_SAFE_INTEGER;
const I64_MAX = 2n ** 63n - 1n;
const I64_MIN = -(2n ** 63n);
/** Where a serialized sketch's counters start (docs/format.md §5). */
const COUNTERS_AT = 24;
/** Sketches of one counter, so every key uses it: no collision to reason about. */
const ONE = { hashes: 1, slots: 1, seed: 1n };

/** The i64 counters of a serialized sketch (docs/format.md §5). */
function countersOf(bytes: Uint8Array): bigint[] {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const n = (bytes.length - COUNTERS_AT - 4) / 8;
  return Array.from({ length: n }, (_, i) => view.getBigInt64(COUNTERS_AT + 8 * i, true));
}

/** `sketch` (serialized) with its counters replaced by `counters` and its CRC-32 made good. */
function withCounters(sketch: Uint8Array, counters: bigint[]): Uint8Array {
  const bytes = sketch.slice();
  const view = new DataView(bytes.buffer);
  counters.forEach((c, i) => view.setBigInt64(COUNTERS_AT + 8 * i, c, true));
  view.setUint32(bytes.length - 4, crc32(bytes, bytes.length - 4), true);
  return bytes;
}

const sketchWith = (counters: bigint[], shape = ONE): Estimator =>
  Estimator.deserialize(withCounters(new Estimator(shape).serialize(), counters));

test(title('a counter at i64::MAX merged into one at i64::MIN sums to −1'), (t) => {
  const min = sketchWith([I64_MIN]);
  min.merge(sketchWith([I64_MAX]));
  t.is(min.get('k'), -1);
  t.deepEqual(countersOf(min.serialize()), [-1n]);
  // The same sketches made by saturating increments and decrements.
  const up = new Estimator(ONE);
  const down = new Estimator(ONE);
  for (let i = 0; i < 1025; i++) {
    up.incr('k', M);
    down.decr('k', M);
  }
  t.deepEqual(countersOf(up.serialize()), [I64_MAX]);
  t.deepEqual(countersOf(down.serialize()), [I64_MIN]);
  down.merge(up);
  t.is(down.get('k'), -1);
  t.deepEqual(countersOf(down.serialize()), [-1n]);
});

test(title('a saturated counter counted back into the safe range reads exactly'), (t) => {
  // 1,025 × (2^53 − 1) saturates; 1,024 × (2^53 − 1) = 2^63 − 1,024 brings it back.
  const up = new Estimator(ONE);
  for (let i = 0; i < 1025; i++) up.incr('k', M);
  for (let i = 0; i < 1023; i++) up.decr('k', M);
  t.is(up.decr('k', M), 1023);
  t.is(up.get('k'), 1023);
  t.deepEqual(countersOf(up.serialize()), [1023n]);
  const down = new Estimator(ONE);
  for (let i = 0; i < 1025; i++) down.decr('k', M);
  for (let i = 0; i < 1023; i++) down.incr('k', M);
  t.is(down.incr('k', M), -1024);
  t.deepEqual(countersOf(down.serialize()), [-1024n]);
  // Past 2^53 without saturating: 3 × (2^53 − 1) is odd, which no double holds.
  const odd = new Estimator(ONE);
  for (let i = 0; i < 3; i++) odd.incr('k', M);
  t.deepEqual(countersOf(odd.serialize()), [3n * BigInt(M)]);
  odd.decr('k', M);
  t.is(odd.decr('k', M), M);
});

test(title('counters past 2^53 survive deserialize, merge and serialize exactly'), (t) => {
  const shape = { hashes: 2, slots: 3, seed: 9n };
  const counters = [2n ** 53n + 1n, -(2n ** 53n) - 1n, 2n ** 62n + 3n, I64_MAX - 1n, I64_MIN + 1n, 3n * BigInt(M)];
  const bytes = withCounters(new Estimator(shape).serialize(), counters);
  t.deepEqual(Estimator.deserialize(bytes).serialize(), bytes);
  const merged = new Estimator(shape);
  merged.merge(Estimator.deserialize(bytes));
  t.deepEqual(merged.serialize(), bytes);
  // What `get` returns past 2^53 is the nearest number; what is left after a decrement is exact.
  const one = sketchWith([2n ** 53n + 1n]);
  t.is(one.get('k'), 2 ** 53);
  t.is(one.decr('k', M), 2);
});

test(title('a shared-buffer sketch and a process-local one merge each other exactly'), (t) => {
  const shared = Estimator.fromSharedBuffer(Estimator.createSharedBuffer(ONE));
  shared.merge(sketchWith([2n ** 53n + 1n]));
  t.deepEqual(countersOf(shared.serialize()), [2n ** 53n + 1n]);
  shared.incr('k', M);
  const local = new Estimator(ONE);
  local.merge(shared);
  t.deepEqual(countersOf(local.serialize()), [2n ** 54n]);
  local.decr('k', M);
  t.is(local.decr('k', M), 2);
});

test(title('a Rate counted past saturation and back reads exactly, now and as the previous interval'), (t) => {
  const clock = new ManualClock();
  const rate = new Rate({ intervalMs: 1000, ...ONE, clock });
  for (let i = 0; i < 1025; i++) rate.observe('k', M);
  for (let i = 0; i < 1023; i++) rate.observe('k', -M);
  t.is(rate.observe('k', -M), 1023);
  clock.advance(1000);
  t.is(rate.rate('k'), 1023);
  t.is(
    rate.rateWith('k', (c) => c.prevSamples),
    1023,
  );
});

test(title('HeavyHitters keeps its sketch exact and sums its first row exactly, capped at 2^64 − 1'), (t) => {
  const options = {
    intervalMs: 1000,
    threshold: 1,
    capacity: 8,
    hashes: 1,
    slots: 2,
    seed: 3n,
    clock: new ManualClock(),
  };
  /** An empty summary of `options` whose sketch holds `counters` (docs/format.md §6: at 60, its length at 56). */
  const summaryWith = (counters: bigint[]): Uint8Array => {
    const bytes = new HeavyHitters(options).serialize();
    const view = new DataView(bytes.buffer);
    const sketchLength = view.getUint32(56, true);
    bytes.set(withCounters(bytes.subarray(60, 60 + sketchLength), counters), 60);
    view.setUint32(bytes.length - 4, crc32(bytes, bytes.length - 4), true);
    return bytes;
  };
  const sketchOf = (bytes: Uint8Array): bigint[] =>
    countersOf(bytes.subarray(60, 60 + new DataView(bytes.buffer, bytes.byteOffset).getUint32(56, true)));
  // i64::MAX + 1 is 2^63, past an i64 (which wrapped to a negative total, read as 2^64 − 1): the
  // sum is exact up to 2^64 − 1 (heavy.spec.ts checks the cap).
  const wrapped = new HeavyHitters(options);
  wrapped.merge(summaryWith([I64_MAX, 1n]));
  t.is(wrapped.stats().total, 2 ** 63);
  t.deepEqual(sketchOf(wrapped.serialize()), [I64_MAX, 1n]);
  // Counters past 2^53 kept exact, their sum too (a negative counter, which no summary writes, is
  // refused: heavy.spec.ts).
  const odd = new HeavyHitters(options);
  odd.merge(summaryWith([2n ** 53n + 1n, I64_MAX - 2n ** 53n]));
  t.deepEqual(sketchOf(odd.serialize()), [2n ** 53n + 1n, I64_MAX - 2n ** 53n]);
  t.is(odd.stats().total, 2 ** 63);
});

test(title('a sketch of more than 2^24 counters, every one past 2^53, decodes and reads exactly'), (t) => {
  // 2 × (2^23 + 1) counters, 134 MB: past the 2^24 entries a V8 Map holds, where the fallback kept
  // its wide counters and threw an uncoded `RangeError` here after 18 s and 1.3 GB (no smaller
  // sketch has that many counters). Each is 2^53 plus or minus an odd number below 2^32, which no
  // double holds: one read or written as a number would change.
  const shape = { hashes: 2, slots: 2 ** 23 + 1, seed: 4n };
  const n = shape.hashes * shape.slots;
  const hiOf = (i: number): number => (i % 3 === 0 ? -(2 ** 21) - 1 : 2 ** 21);
  const loOf = (i: number): number => (Math.imul(i, 0x9e3779b1) | 1) >>> 0;
  const counter = (i: number): bigint => BigInt(hiOf(i)) * 2n ** 32n + BigInt(loOf(i));
  const bytes = new Uint8Array(COUNTERS_AT + 8 * n + 4);
  // The header of an empty sketch of this shape but one slot a row; slots are at byte 12 (§5).
  bytes.set(new Estimator({ ...shape, slots: 1 }).serialize().subarray(0, COUNTERS_AT));
  const view = new DataView(bytes.buffer);
  view.setUint32(12, shape.slots, true);
  for (let i = 0, at = COUNTERS_AT; i < n; i++, at += 8) {
    view.setUint32(at, loOf(i), true);
    view.setInt32(at + 4, hiOf(i), true);
  }
  view.setUint32(bytes.length - 4, crc32(bytes, bytes.length - 4), true);

  const sketch = Estimator.deserialize(bytes);
  // Buffer#equals, not deepEqual: a diff of 134 MB would take minutes to print.
  t.true(Buffer.from(sketch.serialize()).equals(bytes), 'serialized as decoded');
  for (let k = 0; k < 32; k++) {
    const key = `key ${k}`;
    const counters = sketch.counterIndexes(key).map(counter);
    const min = counters.reduce((a, b) => (b < a ? b : a));
    t.is(sketch.get(key), Number(min), key);
    // Each counter less 2^53 − 1, exactly: a positive one comes back to the safe range.
    const less = counters.map((c) => c - BigInt(M)).reduce((a, b) => (b < a ? b : a));
    t.is(sketch.decr(key, M), Number(less), `${key} less 2^53 − 1`);
  }
});
