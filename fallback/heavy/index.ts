/**
 * The fallback {@link HeavyCore} (crates/limits/src/heavy/window.rs `HeavyHitters`): two summaries
 * taking turns as `Rate`'s sketches do (`fallback/rate.ts`), keyed by stored keys (`keys.ts`).
 * Arguments arrive validated by `lib/`.
 */
import type {
  HeavyCore,
  HeavyCorruptReason,
  HeavyCount,
  HeavyStats,
  HeavyTalker,
  HeavyWindow,
  Key,
} from '../../lib/core.js';
import { canonical, type CanonicalKey } from '../canonical.js';
import { FallbackEstimator } from '../estimator.js';
import { decodeSummary, encodeSummary } from './codec.js';
import { decodeStored, hashStoredKey } from './keys.js';
import { Summary } from './summary.js';
import { Rotation } from '../rotation.js';
import { rank, upperOf, type Bounds, type Entry } from './table.js';
import { addSaturating, subSaturating } from './u64.js';

export class FallbackHeavy implements HeavyCore {
  /** The current and previous interval's slots. */
  private readonly intervals: Rotation<Summary>;

  constructor(
    private readonly intervalMs: number,
    hashes: number,
    slots: number,
    seed: bigint,
    threshold: number,
    capacity: number,
    hostClock: boolean,
    wallOriginMs?: number,
  ) {
    this.intervals = new Rotation(
      intervalMs,
      new Summary(new FallbackEstimator(hashes, slots, seed), threshold, capacity),
      new Summary(new FallbackEstimator(hashes, slots, seed), threshold, capacity),
      hostClock,
      wallOriginMs,
    );
  }

  incr(key: Key, value: number, nowMs: number): number {
    this.intervals.maybeReset(nowMs);
    const h = this.hash(key);
    return this.intervals.current.incr(key, h.h1, h.h2, value);
  }

  incrInWindow(key: Key, value: number, nowMs: number, window: Float64Array): number {
    window[0] = this.intervalElapsed(nowMs);
    const h = this.hash(key);
    return this.intervals.current.incr(key, h.h1, h.h2, value);
  }

  intervalElapsed(nowMs: number): number {
    const past = this.intervals.maybeReset(nowMs);
    // A call that ended the interval started the next one.
    return past < this.intervalMs ? past : 0;
  }

  decr(key: Key, value: number, nowMs: number): void {
    this.intervals.maybeReset(nowMs);
    const h = this.hash(key);
    this.intervals.current.decr(key, h.h1, h.h2, value);
  }

  count(key: Key, window: HeavyWindow, nowMs: number): HeavyCount {
    this.intervals.maybeReset(nowMs);
    const { h1, h2 } = this.hash(key);
    const id = canonical(key);
    const { previous, current } = this.intervals;
    const bounds =
      window === 0
        ? current.count(id, h1, h2)
        : window === 1
          ? previous.count(id, h1, h2)
          : plus(previous.count(id, h1, h2), current.count(id, h1, h2));
    return { lower: Number(bounds.lower), upper: Number(bounds.upper), standing: bounds.standing };
  }

  top(n: number, window: HeavyWindow, nowMs: number): HeavyTalker[] {
    this.intervals.maybeReset(nowMs);
    const ranked =
      window === 2 ? this.rankedBoth() : (window === 0 ? this.intervals.current : this.intervals.previous).ranked();
    return ranked.slice(0, n).map((e) => ({
      key: decodeStored(e.key)!,
      lower: Number(e.exact),
      upper: Number(upperOf(e)),
    }));
  }

  stats(window: 0 | 1, nowMs: number): HeavyStats {
    this.intervals.maybeReset(nowMs);
    return (window === 0 ? this.intervals.current : this.intervals.previous).stats();
  }

  serialize(window: 0 | 1, nowMs: number): Uint8Array {
    this.intervals.maybeReset(nowMs);
    return encodeSummary(window === 0 ? this.intervals.current : this.intervals.previous);
  }

  absorb(bytes: Uint8Array, window: 0 | 1, nowMs: number): HeavyCorruptReason | 'mismatch' | null {
    this.intervals.maybeReset(nowMs);
    const ours = window === 0 ? this.intervals.current : this.intervals.previous;
    const other = decodeSummary(bytes, ours);
    if (typeof other === 'string') return other;
    ours.merge(other);
    return null;
  }

  /** Nothing to free: the summaries go with this core, which `lib/` drops on close. */
  close(): void {}

  /** Hashes `key`'s stored form (both summaries share the seed). */
  private hash(key: Key): { h1: number; h2: number } {
    return hashStoredKey(key, this.intervals.current.k0, this.intervals.current.k1);
  }

  /** `top_of_both`: every key tracked in either interval, with the sum of its bounds in both. */
  private rankedBoth(): Entry[] {
    const keys = new Map<CanonicalKey, Entry>();
    for (const summary of [this.intervals.previous, this.intervals.current]) {
      for (const [id, e] of summary.table.entries) if (!keys.has(id)) keys.set(id, e);
    }
    const entries: Entry[] = [];
    for (const [id, e] of keys) {
      const c = plus(this.intervals.previous.count(id, e.h1, e.h2), this.intervals.current.count(id, e.h1, e.h2));
      entries.push({ h1: e.h1, h2: e.h2, key: e.key, exact: c.lower, slack: subSaturating(c.upper, c.lower) });
    }
    return entries.sort(rank);
  }
}

/** `Count::plus`: bounds of two disjoint parts add; tracked wins, then overflow. */
function plus(a: Bounds, b: Bounds): Bounds {
  const standing = a.standing === 0 || b.standing === 0 ? 0 : a.standing === 2 || b.standing === 2 ? 2 : 1;
  return { lower: addSaturating(a.lower, b.lower), upper: addSaturating(a.upper, b.upper), standing };
}
