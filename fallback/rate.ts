/**
 * pingora-limits' `Rate` semantics, single-threaded: two sketches take turns collecting the current
 * interval and reporting the previous one. Intervals are measured from the last reset, a reset
 * happens on the first call at least one interval after it, and data two or more intervals old is
 * dropped. Where pingora panics (clock before the last reset) this clamps to zero elapsed time.
 */
import type { Key, RateCore, RateSample } from '../lib/core.js';
import { FallbackEstimator } from './estimator.js';
import { hashKey } from './hasher.js';
import { Rotation } from './rotation.js';

/** The fallback {@link RateCore}. Arguments arrive validated by `lib/`. */
export class FallbackRate implements RateCore {
  /** The current and previous interval's slots. */
  private readonly intervals: Rotation<FallbackEstimator>;
  private readonly k0: number;
  private readonly k1: number;

  constructor(
    private readonly intervalMs: number,
    hashes: number,
    slots: number,
    seed: bigint,
    hostClock: boolean,
    wallOriginMs?: number,
  ) {
    this.intervals = new Rotation(
      intervalMs,
      new FallbackEstimator(hashes, slots, seed),
      new FallbackEstimator(hashes, slots, seed),
      hostClock,
      wallOriginMs,
    );
    this.k0 = Number(BigInt.asUintN(32, seed));
    this.k1 = Number(BigInt.asUintN(32, seed >> 32n));
  }

  observe(key: Key, events: number, nowMs: number): number {
    this.intervals.maybeReset(nowMs);
    return this.intervals.current.incr(key, events);
  }

  observeInWindow(key: Key, events: number, nowMs: number, window: Float64Array): number {
    const past = this.intervals.maybeReset(nowMs);
    // A call that ended the interval started the next one.
    window[0] = past < this.intervalMs ? past : 0;
    return this.intervals.current.incr(key, events);
  }

  refund(key: Key, events: number, nowMs: number): number {
    this.intervals.maybeReset(nowMs);
    const h = hashKey(key, this.k0, this.k1);
    return this.intervals.current.refundHashed(h.h1, h.h2, events);
  }

  previousCount(key: Key, nowMs: number): number {
    if (this.intervals.maybeReset(nowMs) >= this.intervalMs * 2) return 0;
    return this.intervals.previous.get(key);
  }

  /** Nothing to do: the sketches' counters go with this core, which `lib/` drops on close. */
  close(): void {}

  sample(key: Key, nowMs: number): RateSample {
    const past = this.intervals.maybeReset(nowMs);
    const interval = this.intervalMs;
    let prevSamples = 0;
    let currSamples = 0;
    if (past < interval * 2) {
      // Both sketches share the seed, so one hash serves both lookups.
      const h = hashKey(key, this.k0, this.k1);
      prevSamples = this.intervals.previous.getHashed(h.h1, h.h2);
      if (past < interval) currSamples = this.intervals.current.getHashed(h.h1, h.h2);
    }
    return { prevSamples, currSamples, currentIntervalFraction: (past % interval) / interval };
  }
}
