/**
 * The count-min sketch (docs/format.md §3): `hashes` rows of `slots` counters, one rapidhash per
 * key, and one column per row from {@link Rows}.
 *
 * The counters are i64s that saturate at `i64::MIN` and `i64::MAX` as Rust's do (docs/format.md
 * §5), held as numbers while they are safe integers and exactly beyond ({@link Counters}), so both
 * backends hold and serialize the same counters however far a count overflows; `get` and `incr`
 * return the number nearest the estimate, as the native backend's `i64 as f64` does.
 */
import type { EstimatorCore, Key } from '../lib/core.js';
import { Counters } from './counters.js';
import { hashKey } from './hasher.js';
import { Rows, rowColumn } from './rows.js';
import { encode } from './wire.js';

/**
 * 2^53 − 1: a counter within ±this is a safe integer ({@link Counters.numbers}). `incr` tests its
 * sums with `Math.abs` here rather than calling a test imported from `counters.ts`, which V8 loads
 * again at every call: a steady-state `incr` of a 4-row sketch took 1,951 instructions this way
 * and 2,007 that way (callgrind, Node 20.20, AMD EPYC, 2026-11-27).
 */
const SAFE = Number.MAX_SAFE_INTEGER;

/** The fallback {@link EstimatorCore}. Arguments arrive validated by `lib/`. */
export class FallbackEstimator implements EstimatorCore {
  readonly counters: Counters;
  /** `counters.numbers`, held here too: `incr` and `get` then reach it with one load less. */
  private readonly numbers: Float64Array;
  /** Low 32 bits of the seed. */
  private readonly k0: number;
  /** High 32 bits of the seed. */
  private readonly k1: number;
  private readonly rows: Rows;

  constructor(
    readonly hashes: number,
    readonly slots: number,
    readonly seed: bigint,
    counters: Counters = new Counters(hashes * slots),
  ) {
    this.counters = counters;
    this.numbers = counters.numbers;
    this.k0 = Number(BigInt.asUintN(32, seed));
    this.k1 = Number(BigInt.asUintN(32, seed >> 32n));
    this.rows = new Rows(hashes, slots, this.k0, this.k1);
  }

  incr(key: Key, value: number): number {
    const h = hashKey(key, this.k0, this.k1);
    return this.incrHashed(h.h1, h.h2, value);
  }

  get(key: Key): number {
    const h = hashKey(key, this.k0, this.k1);
    return this.getHashed(h.h1, h.h2);
  }

  counterIndexes(key: Key): number[] {
    const h = hashKey(key, this.k0, this.k1);
    return Array.from(this.rows.locate(h.h1, h.h2));
  }

  /** Adds `value` to the key's counter in every row; returns the new estimate (their minimum). */
  incrHashed(h1: number, h2: number, value: number): number {
    const { numbers, hashes, slots } = this;
    const { lows, highs, shift } = this.rows;
    const x0 = h1 | 0;
    const x1 = h2 | 0;
    let min = Infinity;
    for (let row = 0, at = 0, base = 0; row < hashes; row++, at += 3, base += slots) {
      const i = base + rowColumn(lows, highs, at, x0, x1, slots, shift);
      // As `Counters` adds: a safe sum is exact; any other, a wide counter's included, is redone exactly.
      const sum = numbers[i]! + value;
      const c = Math.abs(sum) <= SAFE ? (numbers[i] = sum) : this.counters.addExactly(i, BigInt(value));
      if (c < min) min = c;
    }
    return min;
  }

  /**
   * Takes back up to `value` (>= 0) of the key's count: each counter above zero drops by `value`
   * or to zero, one at or below zero stays (estimator.rs `refund_hash`); returns the new estimate.
   */
  refundHashed(h1: number, h2: number, value: number): number {
    if (value > 0) {
      const { numbers } = this;
      const indexes = this.rows.locate(h1, h2);
      for (let row = 0; row < indexes.length; row++) {
        const i = indexes[row]!;
        const c = numbers[i]!;
        // A wide positive counter is past 2^53 > value: it stays above zero, exactly subtracted.
        if (c === Infinity) this.counters.addExactly(i, BigInt(-value));
        else if (c > 0) numbers[i] = c > value ? c - value : 0;
      }
    }
    return this.getHashed(h1, h2);
  }

  /** The key's estimate: the minimum of its counters. */
  getHashed(h1: number, h2: number): number {
    const { numbers, hashes, slots } = this;
    const { lows, highs, shift } = this.rows;
    const x0 = h1 | 0;
    const x1 = h2 | 0;
    let min = Infinity;
    for (let row = 0, at = 0, base = 0; row < hashes; row++, at += 3, base += slots) {
      const c = numbers[base + rowColumn(lows, highs, at, x0, x1, slots, shift)]!;
      if (c < min) min = c;
    }
    // Wide counters read ±Infinity: a finite minimum is a safe counter, and no wide one is below it.
    return Number.isFinite(min) ? min : Number(this.counters.minOf(this.rows.locate(h1, h2)));
  }

  /** The key's estimate as the i64 it is (what a summary's decoder compares with its u64 threshold). */
  exactHashed(h1: number, h2: number): bigint {
    return this.counters.minOf(this.rows.locate(h1, h2));
  }

  reset(): void {
    this.counters.reset();
  }

  /** Adds `other`'s counters (this backend's sketch or a shared buffer's), saturating. */
  merge(other: EstimatorCore): void {
    const ours = this.counters;
    if (other instanceof FallbackEstimator) {
      ours.addAll(other.counters);
      return;
    }
    const theirs = other as unknown as { counter(i: number): bigint };
    for (let i = 0; i < ours.length; i++) ours.addI64(i, theirs.counter(i));
  }

  /** Counter `i` as an i64 (what a shared buffer's sketch merges). */
  counter(i: number): bigint {
    return this.counters.exact(i);
  }

  /** Nothing to do: the counters are arrays the collector frees with this core, which `lib/`
   * drops on close. */
  close(): void {}

  serialize(): Uint8Array {
    return encode(this.hashes, this.slots, this.seed, this.counters);
  }
}
