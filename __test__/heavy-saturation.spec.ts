// Heavy-hitter tables past 2^53: both backends must hold the same u64 counts (exact counts, slacks,
// overflow counters), so the same operations give the same bounds, the same ranking and the same
// serialized bytes. Every expected value here is what the native backend's u64 arithmetic gives
// (crates/limits/src/heavy/table.rs, summary/merge.rs), read back as `u64 as f64`.
import test from 'ava';
import { crc32 } from '../fallback/crc32.js';
import { fallbackBackend } from '../fallback/index.js';
import type { Backend } from '../lib/core.js';
import { HeavyHitters, ManualClock } from '../lib/index.js';
import { backend as nativeBackend } from '../lib/native.cjs';
import { throwsShape, title } from './helpers.js';

const M = BigInt(Number.MAX_SAFE_INTEGER);
const U64_MAX = 2n ** 64n - 1n;
/** The largest increment, and how many of them first pass 2^53: N × V = 9,007,212,137,545,725. */
const V = 2 ** 32 - 1;
const N = 2 ** 21 + 3;
const PAST = BigInt(N) * BigInt(V);
const OPTIONS = { intervalMs: 2 ** 52, threshold: 1, capacity: 8, hashes: 4, slots: 64, seed: 1n };
/** Offsets in a serialized summary (docs/format.md §6). */
const FLAGS_AT = 6;
const ENTRY_COUNT_AT = 28;
/** Overflow events, weight and merge-dropped. */
const OVERFLOW_AT = [32, 40, 48];
const SKETCH_LENGTH_AT = 56;
/** The header's length: the sketch follows, then the entries. */
const HEADER = 60;
const MERGED = 1;

/** Each entry of a serialized summary whose keys are strings: its byte offset, exact and slack (§6). */
function entriesOf(bytes: Uint8Array): Map<string, { at: number; exact: bigint; slack: bigint }> {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const entries = new Map<string, { at: number; exact: bigint; slack: bigint }>();
  let at = HEADER + view.getUint32(SKETCH_LENGTH_AT, true);
  for (let i = view.getUint32(ENTRY_COUNT_AT, true); i > 0; i--) {
    const length = view.getUint32(at, true);
    // A string key's stored form (§6.1): tag 0, then its UTF-8 bytes.
    const key = new TextDecoder().decode(bytes.subarray(at + 5, at + 4 + length));
    at += 4 + length;
    entries.set(key, { at, exact: view.getBigUint64(at, true), slack: view.getBigUint64(at + 8, true) });
    at += 16;
  }
  return entries;
}

/** The counts of a serialized summary: `[exact, slack]` by key, then the overflow counters. */
function countsOf(bytes: Uint8Array): { entries: Record<string, [bigint, bigint]>; overflow: bigint[] } {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const entries: Record<string, [bigint, bigint]> = {};
  for (const [key, e] of entriesOf(bytes)) entries[key] = [e.exact, e.slack];
  return { entries, overflow: OVERFLOW_AT.map((at) => view.getBigUint64(at, true)) };
}

/**
 * A merged summary of `options` tracking the keys of `entries` with those `[exact, slack]`, and
 * with the overflow counters `overflow`: made by counting each key once, then patched (§6).
 */
function summaryWith(
  entries: Record<string, [bigint, bigint]>,
  overflow = [0n, 0n, 0n],
  options: typeof OPTIONS = OPTIONS,
): Uint8Array {
  const source = new HeavyHitters(options);
  for (const key of Object.keys(entries)) source.incr(key);
  const bytes = source.serialize();
  const view = new DataView(bytes.buffer);
  view.setUint16(FLAGS_AT, MERGED, true);
  for (const [key, { at }] of entriesOf(bytes)) {
    view.setBigUint64(at, entries[key]![0], true);
    view.setBigUint64(at + 8, entries[key]![1], true);
  }
  OVERFLOW_AT.forEach((at, i) => view.setBigUint64(at, overflow[i]!, true));
  view.setUint32(bytes.length - 4, crc32(bytes, bytes.length - 4), true);
  return bytes;
}

test(title('a count incremented past 2^53 reads as the nearest number, serializes exactly and counts back'), (t) => {
  const heavy = new HeavyHitters(OPTIONS);
  let count = 0;
  for (let i = 0; i < N; i++) count = heavy.incr('k', V);
  t.is(PAST, 9_007_212_137_545_725n);
  t.is(count, 9_007_212_137_545_724);
  t.deepEqual(heavy.count('k'), { lower: 9_007_212_137_545_724, upper: 9_007_212_137_545_724, standing: 'tracked' });
  t.deepEqual(heavy.top(1), [{ key: 'k', lower: 9_007_212_137_545_724, upper: 9_007_212_137_545_724 }]);
  t.deepEqual(countsOf(heavy.serialize()).entries, { k: [PAST, 0n] });
  // Three refunds bring it back below 2^53 − 1, to the exact count.
  for (let i = 0; i < 3; i++) heavy.decr('k', V);
  t.is(heavy.count('k').lower, 9_007_199_252_643_840);
  t.deepEqual(countsOf(heavy.serialize()).entries, { k: [PAST - 3n * BigInt(V), 0n] });
});

test(title('an overflow weight counted past 2^53 reads as the nearest number and serializes exactly'), (t) => {
  const heavy = new HeavyHitters({ ...OPTIONS, capacity: 1 });
  heavy.incr('k');
  for (let i = 0; i < N; i++) heavy.incr('o', V);
  const { overflowEvents, overflowWeight } = heavy.stats();
  t.deepEqual([overflowEvents, overflowWeight], [N, 9_007_212_137_545_724]);
  t.deepEqual(countsOf(heavy.serialize()).overflow, [BigInt(N), PAST, 0n]);
});

/** A capacity-1 `HeavyHitters` tracking `k` from 2 increments, then merged `merges` times with counts of 2^53 − 1. */
function mergedUp(merges: number): HeavyHitters {
  const options = { ...OPTIONS, capacity: 1 };
  const heavy = new HeavyHitters(options);
  heavy.incr('k', 2);
  const source = summaryWith({ k: [M, M] }, [M, M, M], options);
  for (let i = 0; i < merges; i++) heavy.merge(source);
  return heavy;
}

test(title('merges add exact counts past 2^53 and saturate at u64::MAX'), (t) => {
  // 2 + (2^53 − 1) = 2^53 + 1, which reads as 2^53; three merges give odd sums, which no double holds.
  const once = mergedUp(1);
  t.deepEqual(once.count('k'), { lower: 2 ** 53, upper: 2 ** 54, standing: 'tracked' });
  t.deepEqual(countsOf(once.serialize()), { entries: { k: [M + 2n, M] }, overflow: [M, M, M] });
  const thrice = mergedUp(3);
  t.deepEqual(countsOf(thrice.serialize()), {
    entries: { k: [3n * M + 2n, 3n * M] },
    overflow: [3n * M, 3n * M, 3n * M],
  });
  t.like(thrice.stats(), { overflowEvents: Number(3n * M), mergeDropped: Number(3n * M) });
  // 2,048 merges stay below u64::MAX (by 2,045 and 2,047); the 2,049th saturates every count.
  const below = mergedUp(2048);
  t.deepEqual(countsOf(below.serialize()), {
    entries: { k: [U64_MAX - 2045n, U64_MAX - 2047n] },
    overflow: [U64_MAX - 2047n, U64_MAX - 2047n, U64_MAX - 2047n],
  });
  const saturated = mergedUp(2049);
  t.deepEqual(countsOf(saturated.serialize()), {
    entries: { k: [U64_MAX, U64_MAX] },
    overflow: [U64_MAX, U64_MAX, U64_MAX],
  });
  t.deepEqual(saturated.count('k'), { lower: 2 ** 64, upper: 2 ** 64, standing: 'tracked' });
  t.like(saturated.stats(), { overflowEvents: 2 ** 64, overflowWeight: 2 ** 64, mergeDropped: 2 ** 64 });
});

test(title('an increment of a count merges saturated stays at u64::MAX instead of wrapping to a small count'), (t) => {
  const heavy = mergedUp(2049);
  t.is(heavy.incr('k', 5), 2 ** 64);
  t.deepEqual(heavy.count('k'), { lower: 2 ** 64, upper: 2 ** 64, standing: 'tracked' });
  heavy.incr('o', 5);
  t.like(heavy.stats(), { overflowEvents: 2 ** 64, overflowWeight: 2 ** 64, mergeDropped: 2 ** 64 });
  t.deepEqual(countsOf(heavy.serialize()), {
    entries: { k: [U64_MAX, U64_MAX] },
    overflow: [U64_MAX, U64_MAX, U64_MAX],
  });
});

test(title('a summary with counts of 2^53 − 1 merges and re-serializes byte-identically; 2^53 + 1 is refused'), (t) => {
  const bytes = summaryWith({ j: [1n, M], k: [M, M] }, [M, M, M]);
  const heavy = new HeavyHitters(OPTIONS);
  heavy.merge(bytes);
  t.deepEqual(heavy.serialize(), bytes);
  t.deepEqual(heavy.count('k'), { lower: Number(M), upper: Number(2n * M), standing: 'tracked' });
  // The native binding reads no count above 2^53 − 1 (src/heavy.rs `absorb`), so neither backend does.
  throwsShape(t, () => new HeavyHitters(OPTIONS).merge(summaryWith({ k: [M + 2n, 0n] })), {
    instanceOf: Error,
    code: 'ERR_KEEPCOUNT_CORRUPT',
    message:
      'Serialized heavy-hitter summary has a count above 2^53 − 1, which keepcount for Node does not read (JavaScript numbers would round it)',
  });
});

test(title('keys whose counts differ only past 2^53 rank by their exact counts'), (t) => {
  // Each way round, so that a tie broken by key hash would put the smaller count first once.
  for (const [big, small] of [
    ['x', 'y'],
    ['y', 'x'],
  ] as const) {
    // Upper bounds 2^53 + 1 and 2^53, both 2^53 as numbers.
    const uppers = new HeavyHitters(OPTIONS);
    uppers.merge(summaryWith({ [big]: [M, 0n], [small]: [M, 0n] }));
    uppers.incr(big, 2);
    uppers.incr(small, 1);
    const tied = { lower: 2 ** 53, upper: 2 ** 53 };
    for (const window of ['current', 'both'] as const) {
      t.deepEqual(uppers.top(2, window), [
        { key: big, ...tied },
        { key: small, ...tied },
      ]);
    }
    // Equal upper bounds (2^53 + 2); lower bounds 2^53 + 1 and 2^53, both 2^53 as numbers.
    const lowers = new HeavyHitters(OPTIONS);
    lowers.merge(summaryWith({ [big]: [M, 1n], [small]: [M, 2n] }));
    lowers.incr(big, 2);
    lowers.incr(small, 1);
    const even = { lower: 2 ** 53, upper: 2 ** 53 + 2 };
    for (const window of ['current', 'both'] as const) {
      t.deepEqual(lowers.top(2, window), [
        { key: big, ...even },
        { key: small, ...even },
      ]);
    }
  }
});

test(title('both backends hold the same counts past 2^53 and u64::MAX: same answers, same bytes'), (t) => {
  const make = (b: Backend) => new b.Heavy(OPTIONS.intervalMs, 4, 64, 1n, 1, 1, false);
  const [native, fallback] = [make(nativeBackend), make(fallbackBackend)];
  const same = (what: string) => {
    t.deepEqual(fallback.serialize(0, 0), native.serialize(0, 0), what);
    for (const window of [0, 1, 2] as const) {
      t.deepEqual(fallback.count('k', window, 0), native.count('k', window, 0), `${what}: count`);
      t.deepEqual(fallback.top(1, window, 0), native.top(1, window, 0), `${what}: top`);
    }
    t.deepEqual(fallback.stats(0, 0), native.stats(0, 0), `${what}: stats`);
  };
  let differ = 0;
  for (const key of ['k', 'o']) {
    for (let i = 0; i < N; i++) if (fallback.incr(key, V, 0) !== native.incr(key, V, 0)) differ++;
  }
  t.is(differ, 0, 'incr returned the same counts');
  same('incremented past 2^53');
  for (let i = 0; i < 3; i++) {
    fallback.decr('k', V, 0);
    native.decr('k', V, 0);
  }
  same('refunded');
  const source = summaryWith({ k: [M, M] }, [M, M, M], { ...OPTIONS, capacity: 1 });
  for (let merges = 1; merges <= 2049; merges++) {
    t.is(fallback.absorb(source, 0, 0), native.absorb(source, 0, 0));
    if (merges % 512 === 1) same(`${merges} merges`);
  }
  same('saturated');
  t.is(fallback.incr('k', V, 0), native.incr('k', V, 0));
  t.is(fallback.incr('o', V, 0), native.incr('o', V, 0));
  same('incremented at u64::MAX');
});

test(
  title('a HeavyHitters whose merges piled counts past 2^53 − 1 is refused as a source, before either interval merges'),
  (t) => {
    const clock = new ManualClock();
    const options = { intervalMs: 1000, threshold: 1, capacity: 4, hashes: 1, slots: 4, seed: 1n, clock };
    const source = new HeavyHitters(options);
    source.incr('big', V);
    // Merging into itself doubles every count: 22 doublings pass 2^53.
    for (let i = 0; i < 22; i++) source.merge(source);
    t.true(source.count('big').lower > Number.MAX_SAFE_INTEGER);
    // The big count moves to the previous interval; the current one holds a small, valid count.
    clock.advance(1000);
    source.incr('small');
    const target = new HeavyHitters(options);
    const before = [target.serialize('current'), target.serialize('previous')];
    throwsShape(t, () => target.merge(source), {
      instanceOf: RangeError,
      code: 'ERR_OUT_OF_RANGE',
      message: /^The "source" argument must be a HeavyHitters whose counts are at most 2\^53 − 1/,
    });
    // Nothing merged: before, the current interval ('small') was merged and then the previous refused.
    t.deepEqual([target.serialize('current'), target.serialize('previous')], before);
    t.deepEqual(target.count('small'), { lower: 0, upper: 0, standing: 'below-threshold' });
    // Its bytes are still refused as corrupt input, as any summary with such counts.
    throwsShape(t, () => target.merge(source.serialize('previous'), 'previous'), {
      instanceOf: Error,
      code: 'ERR_KEEPCOUNT_CORRUPT',
      message: /has a count above 2\^53 − 1/,
    });
    // The current interval alone merges.
    target.merge(source.serialize('current'));
    t.is(target.count('small').lower, 1);
  },
);
