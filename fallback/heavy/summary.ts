/**
 * One interval's heavy hitters (crates/limits/src/heavy/summary.rs `Summary`): a count-min sketch
 * in front of a bounded exact table. Keys arrive hashed by `keys.ts` `hashStoredKey` just before each
 * call, which then gives their stored form (`storedCopy`).
 */
import type { HeavyStats, Key } from '../../lib/core.js';
import type { CanonicalKey } from '../canonical.js';
import { FallbackEstimator } from '../estimator.js';
import { hashBytes, hashedId, storedCopy } from './keys.js';
import { rank, Table, upperOf, type Bounds, type Entry } from './table.js';
import { addSaturating, subSaturating, u64, U64_MAX, type U64 } from './u64.js';

/** 2^53 − 1, here rather than imported from `u64.ts` for `incr`'s sake (see `table.ts`). */
const SAFE = Number.MAX_SAFE_INTEGER;

/**
 * `as_count` of an estimate as the sketch returns it (the nearest number): a bound, `u64::MAX`
 * (2^64 as a number) for a negative one, which only merged or decoded counters give.
 */
const asCount = (estimate: number): number => (estimate < 0 ? 2 ** 64 : estimate);

export class Summary {
  readonly table: Table;
  /** Low and high 32 bits of the seed. */
  readonly k0: number;
  readonly k1: number;
  /** Set by a merge until the next reset: entering keys' slack is then not capped at `threshold − 1`. */
  merged = false;

  constructor(
    readonly sketch: FallbackEstimator,
    readonly threshold: number,
    capacity: number,
  ) {
    this.table = new Table(capacity);
    this.k0 = Number(BigInt.asUintN(32, sketch.seed));
    this.k1 = Number(BigInt.asUintN(32, sketch.seed >> 32n));
  }

  /**
   * `incr_hash` for `key`, which `keys.ts` `hashStoredKey` just hashed as
   * `h1`/`h2`: returns its exact count if it is tracked after this increment, else
   * `−1 − estimate`.
   */
  incr(key: Key, h1: number, h2: number, value: number): number {
    const estimate = asCount(this.sketch.incrHashed(h1, h2, value));
    if (estimate < this.threshold) return -1 - estimate;
    const slackCap = this.merged ? U64_MAX : this.threshold - 1;
    // An entering key's slack is the estimate less this increment: read it exactly past 2^53.
    const bound = estimate <= SAFE ? estimate : this.estimate(h1, h2);
    const lower = this.table.add(hashedId(key), h1, h2, storedCopy, value, bound, slackCap);
    return lower >= 0 ? lower : -1 - estimate;
  }

  /** `decr_hash`: a tracked key's exact count drops by `value`, never below 0; the sketch never drops. */
  decr(key: Key, h1: number, h2: number, value: number): void {
    if (asCount(this.sketch.getHashed(h1, h2)) < this.threshold) return;
    const entry = this.table.entries.get(hashedId(key));
    if (entry !== undefined) entry.exact = subSaturating(entry.exact, value);
  }

  /** `count_hash` for a key of canonical form `id` hashed as `h1`/`h2`. */
  count(id: CanonicalKey, h1: number, h2: number): Bounds {
    const estimate = this.estimate(h1, h2);
    if (estimate < this.threshold) return { lower: 0, upper: estimate, standing: 1 };
    const entry = this.table.entries.get(id);
    if (entry !== undefined) return { lower: entry.exact, upper: upperOf(entry), standing: 0 };
    // Room now, so room at each of its increments: other keys raised it (summary.rs `lookup`).
    if (!this.merged && this.table.entries.size < this.table.capacity) {
      return { lower: 0, upper: this.threshold - 1, standing: 1 };
    }
    return { lower: 0, upper: estimate, standing: 2 };
  }

  /** `as_count(get_hash)`: the key's sketch estimate as a bound, exactly (see {@link asCount}). */
  estimate(h1: number, h2: number): U64 {
    const estimate = this.sketch.getHashed(h1, h2);
    if (estimate >= 0 && estimate <= SAFE) return estimate;
    const exact = this.sketch.exactHashed(h1, h2);
    return exact < 0n ? U64_MAX : u64(exact);
  }

  /** The entries, ranked (`top` before truncation). */
  ranked(): Entry[] {
    return [...this.table.entries.values()].sort(rank);
  }

  /** `Summary::merge`; `decodeSummary` checked that shape, seed and threshold are this one's. */
  merge(other: Summary): void {
    const theirs = new Map<CanonicalKey, Entry>(other.table.entries);
    const merged: Entry[] = [];
    for (const [id, ours] of this.table.entries) {
      const their = theirs.get(id);
      const entry = { ...ours };
      if (their !== undefined) {
        theirs.delete(id);
        entry.exact = addSaturating(entry.exact, their.exact);
        entry.slack = addSaturating(entry.slack, their.slack);
      } else {
        // Untracked there: its sketch estimate bounds what that stream held.
        entry.slack = addSaturating(entry.slack, other.estimate(entry.h1, entry.h2));
      }
      merged.push(entry);
    }
    for (const their of theirs.values()) {
      merged.push({ ...their, slack: addSaturating(their.slack, this.estimate(their.h1, their.h2)) });
    }
    const overflow = { ...this.table.overflow };
    this.table.replace(merged);
    this.sketch.merge(other.sketch);
    this.merged = true;
    const o = other.table.overflow;
    this.table.overflow = {
      events: addSaturating(overflow.events, o.events),
      weight: addSaturating(overflow.weight, o.weight),
      mergeDropped: addSaturating(this.table.overflow.mergeDropped, o.mergeDropped),
    };
  }

  reset(): void {
    this.table.clear();
    this.merged = false;
    this.sketch.reset();
  }

  stats(): HeavyStats {
    // Each increment adds to one counter per row: the first row sums them all (summary.rs `stats`).
    const total = this.sketch.counters.cappedSum(0, this.sketch.slots);
    const o = this.table.overflow;
    return {
      tracked: this.table.entries.size,
      capacity: this.table.capacity,
      total,
      overflowEvents: Number(o.events),
      overflowWeight: Number(o.weight),
      mergeDropped: Number(o.mergeDropped),
    };
  }

  /** The hash of stored bytes under this summary's seed. */
  hashOf(stored: Uint8Array): { h1: number; h2: number } {
    const h = hashBytes(stored, stored.length, this.k0, this.k1);
    return { h1: h.h1, h2: h.h2 };
  }
}
