/**
 * The count-min sketch (docs/format.md §3): `hashes` rows of `slots` counters, one rapidhash per
 * key, and one column per row from {@link Rows}.
 *
 * Counters are a `Float64Array`: exact up to `Number.MAX_SAFE_INTEGER` in magnitude, which is the
 * documented range of the Node API; beyond it sums round (where Rust's i64 counters would not).
 * They saturate as Rust's do (docs/format.md §5): clamped to [−2^63, 2^63], the numbers that
 * `i64::MIN` and `i64::MAX` convert to, so both backends agree however far a count overflows.
 */
import type { EstimatorCore, Key } from '../lib/core.js';
import { hashKey } from './hasher.js';
import { Rows } from './rows.js';
import { encode } from './wire.js';

/** 2^63: `i64::MAX` as a number; counters are clamped to ±this. */
const I64_BOUND = 2 ** 63;

/** `c` clamped to [−2^63, 2^63]. */
const saturate = (c: number): number => (c > I64_BOUND ? I64_BOUND : c < -I64_BOUND ? -I64_BOUND : c);

/** The fallback {@link EstimatorCore}. Arguments arrive validated by `lib/`. */
export class FallbackEstimator implements EstimatorCore {
  readonly counters: Float64Array;
  /** Low 32 bits of the seed. */
  private readonly k0: number;
  /** High 32 bits of the seed. */
  private readonly k1: number;
  private readonly rows: Rows;

  constructor(
    readonly hashes: number,
    readonly slots: number,
    readonly seed: bigint,
    counters: Float64Array = new Float64Array(hashes * slots),
  ) {
    this.counters = counters;
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
    const { counters } = this;
    const indexes = this.rows.locate(h1, h2);
    let min = Infinity;
    for (let row = 0; row < indexes.length; row++) {
      const index = indexes[row]!;
      const c = saturate(counters[index]! + value);
      counters[index] = c;
      if (c < min) min = c;
    }
    return min;
  }

  /** The key's estimate: the minimum of its counters. */
  getHashed(h1: number, h2: number): number {
    const { counters } = this;
    const indexes = this.rows.locate(h1, h2);
    let min = Infinity;
    for (let row = 0; row < indexes.length; row++) {
      const c = counters[indexes[row]!]!;
      if (c < min) min = c;
    }
    return min;
  }

  reset(): void {
    this.counters.fill(0);
  }

  merge(other: EstimatorCore): void {
    const ours = this.counters;
    if (other instanceof FallbackEstimator) {
      const theirs = other.counters;
      for (let i = 0; i < ours.length; i++) ours[i] = saturate(ours[i]! + theirs[i]!);
      return;
    }
    // A shared buffer's sketch: its i64 counters, each converted to the nearest number.
    const theirs = other as unknown as { counter(i: number): bigint };
    for (let i = 0; i < ours.length; i++) ours[i] = saturate(ours[i]! + Number(theirs.counter(i)));
  }

  /** Nothing to do: the counters are a `Float64Array` the collector frees with this core, which
   * `lib/` drops on close. */
  close(): void {}

  serialize(): Uint8Array {
    return encode(this.hashes, this.slots, this.seed, this.counters);
  }
}
