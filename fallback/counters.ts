/**
 * A sketch's i64 counters as the fallback keeps them: exact over the whole i64 range and saturating
 * at its bounds as `add_saturating` does (crates/limits/src/estimator/saturating.rs), so that the
 * fallback holds, and serializes, the counters the native backend holds after the same operations,
 * also once a count passed 2^53 or saturated and came back (docs/format.md §5).
 *
 * A counter that is a safe integer, as every count the Node API's safe-integer increments reach
 * unless they pile up past 2^53, is a number in {@link Counters.numbers}, so the usual add is one
 * double add and one test that the sum is safe. A counter beyond ±(2^53 − 1) is ±Infinity there,
 * by its sign, and its value is an i64 in a second array of every counter's width, where BigInt
 * arithmetic (which allocates) adds to it: any safe integer added to ±Infinity stays beyond the
 * safe range, so the one test that finds a sum no longer safe also finds every wide counter, and
 * the usual add needs no other.
 *
 * That second array is made the first time a counter goes wide, and dropped by `reset`: 8 bytes a
 * counter, as `numbers` takes. Any i64 counter is valid (docs/format.md §5), so a decoded sketch
 * may have every counter wide, and what a wide counter costs must stay bounded by the input. It
 * was a `Map<number, bigint>`, an entry and a heap BigInt a counter: decoding 4 × 2^20 counters,
 * all wide, took 6.0 s and +336 MB of RSS (native: 25 ms, +34 MB), and 2 × (2^23 + 1) threw V8's
 * uncoded `RangeError: Map maximum size exceeded` (2^24 entries) after 18 s and +1.3 GB; now 0.19 s
 * and +67 MB, and 0.72 s and +269 MB, mostly the CRC-32 pass (`Estimator.deserialize`, Node 20.20,
 * shared 2-core AMD EPYC, 2026-11-29). It is a `DataView` of §5's layout, i64 little-endian, rather
 * than a `BigInt64Array`, whose byte order is the host's: `readFrom` copies the whole counter block
 * into it at the first wide counter and `writeTo` copies a wide counter out as two words, neither
 * making a BigInt, on any host (and the fallback is what big-endian hosts, which no prebuilt
 * binding serves, run).
 */
import { COUNTER_BYTES } from '../lib/limits.js';

/** The largest safe integer, 2^53 − 1: counters within ±this are exact in `numbers`. */
const SAFE = Number.MAX_SAFE_INTEGER;
const TWO_32 = 4294967296;
export const I64_MAX = 2n ** 63n - 1n;
export const I64_MIN = -(2n ** 63n);
const U64_MAX = 2n ** 64n - 1n;

/** `value` clamped to the i64 range. */
export const clampI64 = (value: bigint): bigint => (value > I64_MAX ? I64_MAX : value < I64_MIN ? I64_MIN : value);

/**
 * Whether `n` is within ±(2^53 − 1). For the sum of two safe integers that is exactly whether it
 * is safe and so exact: a sum that rounded past ±(2^53 − 1) was past it exactly too (rounding
 * keeps order).
 */
const isSafe = (n: number): boolean => Math.abs(n) <= SAFE;

/** `length` i64 counters. */
export class Counters {
  /**
   * Every counter that is a safe integer; ±Infinity, by its sign, for one beyond, which is in
   * `wide`. The sketch's `incr` and `get` (`estimator.ts`) work here directly, per the module
   * documentation, and call {@link addExactly} and {@link minOf} for the rest.
   */
  readonly numbers: Float64Array;
  /**
   * Counter `i` at byte `8i` as an i64 LE (docs/format.md §5's layout), meaningful where
   * `numbers[i]` is ±Infinity only; undefined until a count leaves the safe range.
   */
  private wide: DataView | undefined;

  constructor(readonly length: number) {
    this.numbers = new Float64Array(length);
  }

  /** Counter `i` as an i64. */
  exact(i: number): bigint {
    const n = this.numbers[i]!;
    return isSafe(n) ? BigInt(n) : this.wide!.getBigInt64(COUNTER_BYTES * i, true);
  }

  /**
   * Sets counter `i` to the i64 `value`; returns it as the nearest number (what the native
   * backend's `i64 as f64` gives).
   */
  private set(i: number, value: bigint): number {
    const n = Number(value);
    if (isSafe(n)) {
      this.numbers[i] = n;
    } else {
      this.numbers[i] = n > 0 ? Infinity : -Infinity;
      this.wide ??= new DataView(new ArrayBuffer(COUNTER_BYTES * this.length));
      this.wide.setBigInt64(COUNTER_BYTES * i, value, true);
    }
    return n;
  }

  /** Adds `value`, a safe integer, to counter `i`, saturating; returns the new counter as the nearest number. */
  private add(i: number, value: number): number {
    const sum = this.numbers[i]! + value;
    return isSafe(sum) ? (this.numbers[i] = sum) : this.addExactly(i, BigInt(value));
  }

  /** Adds the i64 `value` to counter `i`, saturating; returns the new counter as the nearest number. */
  addI64(i: number, value: bigint): number {
    const n = Number(value);
    return isSafe(n) ? this.add(i, n) : this.addExactly(i, value);
  }

  /**
   * {@link addI64} in BigInt, for a sum beyond the safe range. Kept apart from the usual add so
   * that the callers V8 inlines stay small.
   */
  addExactly(i: number, value: bigint): number {
    return this.set(i, clampI64(this.exact(i) + value));
  }

  /** Adds `other`'s counters (same length) element-wise, saturating (merge.rs `merge`). */
  addAll(other: Counters): void {
    const theirs = other.numbers;
    for (let i = 0; i < this.length; i++) {
      const value = theirs[i]!;
      // A safe counter of theirs is its number: no BigInt to make.
      if (isSafe(value)) this.add(i, value);
      else this.addExactly(i, other.exact(i));
    }
  }

  /** The smallest of the counters `indexes` names, exactly. */
  minOf(indexes: Int32Array): bigint {
    let min = I64_MAX;
    for (let k = 0; k < indexes.length; k++) {
      const c = this.exact(indexes[k]!);
      if (c < min) min = c;
    }
    return min;
  }

  /**
   * The sum of counters `from` to `to` (exclusive) within [0, 2^64 − 1], as heavy/summary.rs
   * `stats` sums its first row, as the nearest number. In doubles while every partial sum is safe
   * (then each add was exact and no addend was wide), the rest in BigInt.
   */
  cappedSum(from: number, to: number): number {
    const { numbers } = this;
    let sum = 0;
    let i = from;
    for (; i < to; i++) {
      const next = sum + numbers[i]!;
      if (!isSafe(next)) break;
      sum = next;
    }
    if (i === to) return Math.max(0, sum);
    let exact = BigInt(sum);
    for (; i < to; i++) exact += this.exact(i);
    return Number(exact < 0n ? 0n : exact > U64_MAX ? U64_MAX : exact);
  }

  /** Writes the counters as i64 LE from byte `at` of `view` on (docs/format.md §5). */
  writeTo(view: DataView, at: number): void {
    const { numbers, wide } = this;
    for (let i = 0; i < this.length; i++, at += COUNTER_BYTES) {
      const c = numbers[i]!;
      if (isSafe(c)) {
        // Two halves, each an exact integer: no BigInt to make.
        const hi = Math.floor(c / TWO_32);
        view.setUint32(at, c - hi * TWO_32, true);
        view.setUint32(at + 4, ((hi % TWO_32) + TWO_32) % TWO_32, true);
      } else {
        // Already the bytes to write: copied as two words, no BigInt to make either.
        const from = COUNTER_BYTES * i;
        view.setUint32(at, wide!.getUint32(from, true), true);
        view.setUint32(at + 4, wide!.getUint32(from + 4, true), true);
      }
    }
  }

  /** `length` counters read as i64 LE from byte `at` of `view` on (docs/format.md §5). */
  static readFrom(view: DataView, at: number, length: number): Counters {
    const counters = new Counters(length);
    const { numbers } = counters;
    for (let i = 0, byte = at; i < length; i++, byte += COUNTER_BYTES) {
      // Exact when safe; else rounded once, to a number beyond the safe range too, of its sign.
      const c = view.getInt32(byte + 4, true) * TWO_32 + view.getUint32(byte, true);
      if (isSafe(c)) {
        numbers[i] = c;
      } else {
        numbers[i] = c > 0 ? Infinity : -Infinity;
        // `wide` has the input's layout: the first wide counter copies them all, no BigInt made.
        counters.wide ??= copyOf(view, at, COUNTER_BYTES * length);
      }
    }
    return counters;
  }

  /** Zeroes every counter, and lets the wide ones' storage go. */
  reset(): void {
    this.numbers.fill(0);
    this.wide = undefined;
  }
}

/** A view of a copy of `length` bytes of `view` from byte `at` on. */
function copyOf(view: DataView, at: number, length: number): DataView {
  const bytes = new Uint8Array(length);
  bytes.set(new Uint8Array(view.buffer, view.byteOffset + at, length));
  return new DataView(bytes.buffer);
}
