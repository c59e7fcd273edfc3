/**
 * The fallback's sketches and rates over a `SharedArrayBuffer` (`lib/shared-buffer.ts` lays it
 * out): the counters are the buffer's i64s, reached only through `Atomics` on a `BigInt64Array`,
 * so worker threads count in the same memory as each other and as the native backend.
 *
 * {@link AtomicEstimator} mirrors `crates/limits/src/estimator.rs` on that memory: one atomic add
 * per row, saturating at the i64 bounds as `add_saturating` does (the add is undone and redone as
 * a compare-and-swap loop when it overflowed). {@link BufferRate} mirrors
 * `crates/limits/src/shared/rate.rs`: the interval word, claimed and finished by
 * compare-and-swap, so all threads end an interval once, and after idleness the carry of the
 * events counted during the rotation (`estimator/carry.rs`). BigInt arithmetic makes these slower than
 * the process-local sketch (`estimator.ts`), which takes it only for counters past 2^53.
 */
import type { EstimatorCore, Key, RateCore, RateSample } from '../lib/core.js';
import { FIRST_COUNTER, RATE_WORD } from '../lib/shared-buffer.js';
import { clampI64, I64_MAX, I64_MIN } from './counters.js';
import { hashKey } from './hasher.js';
import { Rows, rowColumn } from './rows.js';
import { encodeWords } from './wire.js';

const U64_MAX = 2n ** 64n - 1n;

/**
 * 2^53: a counter strictly within ±2^53 converts to a number exactly, and adding a safe integer
 * to it cannot overflow an i64, so the sum is done in numbers (no BigInt arithmetic, which
 * allocates). The sum of two exact integers rounds once, to the nearest number of the exact sum:
 * what `Number(counter + value)` gives.
 */
const EXACT = 2 ** 53;

/** The usual increment, converted once. */
const ONE = 1n;

/** Adds `value` to `words[i]`, saturating at the i64 bounds; returns the new value (estimator.rs `add_saturating`). */
function addSaturating(words: BigInt64Array, i: number, value: bigint): bigint {
  return settle(words, i, Atomics.add(words, i, value), value);
}

/**
 * The new value of `words[i]` after a wrapping `Atomics.add` of `value` that found `old` there:
 * `old + value`, or when that overflowed the i64, the add undone and redone saturating.
 */
function settle(words: BigInt64Array, i: number, old: bigint, value: bigint): bigint {
  const sum = old + value;
  if (sum <= I64_MAX && sum >= I64_MIN) return sum;
  // Overflowed: undo the wrapping add exactly, then saturate with compare-and-swap.
  Atomics.sub(words, i, value);
  for (;;) {
    const seen = Atomics.load(words, i);
    const next = clampI64(seen + value);
    if (Atomics.compareExchange(words, i, seen, next) === seen) return next;
  }
}

/**
 * Takes up to `value` out of `words[i]` toward zero, never past it, by compare-and-swap: a
 * positive `value` from a counter above zero, a negative one from a counter below zero, nothing
 * when their signs differ. Returns the value the counter held before; it now holds that less
 * {@link towardZero} of it (saturating.rs `take_toward_zero`).
 */
function takeTowardZero(words: BigInt64Array, i: number, value: bigint): bigint {
  for (;;) {
    const seen = Atomics.load(words, i);
    const taken = towardZero(seen, value);
    if (taken === 0n || Atomics.compareExchange(words, i, seen, seen - taken) === seen) return seen;
  }
}

/** What a counter holding `c` gives up of `value` toward zero: `value` clamped to [0, `c`]. */
function towardZero(c: bigint, value: bigint): bigint {
  if (c > 0n) return value <= 0n ? 0n : value < c ? value : c;
  if (c < 0n) return value >= 0n ? 0n : value > c ? value : c;
  return 0n;
}

/** The fallback {@link EstimatorCore} over a buffer's counters from `first` on. */
export class AtomicEstimator implements EstimatorCore {
  private readonly k0: number;
  private readonly k1: number;
  private readonly rows: Rows;

  constructor(
    readonly hashes: number,
    readonly slots: number,
    readonly seed: bigint,
    private readonly words: BigInt64Array,
    private readonly first: number = FIRST_COUNTER,
  ) {
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

  /** Adds `value` to the key's counter in every row; the new estimate, as the nearest number to the i64. */
  incrHashed(h1: number, h2: number, value: number): number {
    const { words, first, hashes, slots } = this;
    const { lows, highs, shift } = this.rows;
    const x0 = h1 | 0;
    const x1 = h2 | 0;
    const add = value === 1 ? ONE : BigInt(value);
    // Minimum of the rounded counters = the rounded minimum: rounding to numbers keeps order.
    let min = Infinity;
    for (let row = 0, at = 0, base = first; row < hashes; row++, at += 3, base += slots) {
      const i = base + rowColumn(lows, highs, at, x0, x1, slots, shift);
      const old = Atomics.add(words, i, add);
      const exact = Number(old);
      const c = exact > -EXACT && exact < EXACT ? exact + value : Number(settle(words, i, old, add));
      if (c < min) min = c;
    }
    return min;
  }

  /**
   * Takes back up to `value` (>= 0) of the hashed key's count, each counter above zero dropping by
   * `value` or to zero by compare-and-swap, so that threads refunding one count at once take it
   * once between them; one at or below zero stays (estimator.rs `refund_hash` and
   * saturating.rs `refund_to_zero`). Returns the minimum of what each counter held after.
   */
  refundHashed(h1: number, h2: number, value: number): number {
    const { words, first } = this;
    const indexes = this.rows.locate(h1, h2);
    // A value that is not positive takes nothing; a positive one, only from a counter above zero.
    const take = value > 0 ? BigInt(value) : 0n;
    let min = Infinity;
    for (let row = 0; row < indexes.length; row++) {
      const before = takeTowardZero(words, first + indexes[row]!, take);
      const c = Number(before - towardZero(before, take));
      if (c < min) min = c;
    }
    return min;
  }

  getHashed(h1: number, h2: number): number {
    const { words, first, hashes, slots } = this;
    const { lows, highs, shift } = this.rows;
    const x0 = h1 | 0;
    const x1 = h2 | 0;
    let min = Infinity;
    for (let row = 0, at = 0, base = first; row < hashes; row++, at += 3, base += slots) {
      const c = Number(Atomics.load(words, base + rowColumn(lows, highs, at, x0, x1, slots, shift)));
      if (c < min) min = c;
    }
    return min;
  }

  reset(): void {
    const end = this.first + this.hashes * this.slots;
    for (let i = this.first; i < end; i++) Atomics.store(this.words, i, 0n);
  }

  /** Every counter's value, the baseline of a later {@link carryFrom} (carry.rs `snapshot`). */
  snapshot(): BigInt64Array {
    return this.words.slice(this.first, this.first + this.hashes * this.slots);
  }

  /**
   * Moves into this sketch what `from` gained over `baseline`, emptying `from`, while `goOn()`
   * (carry.rs `carry_from`, whose documentation says why each step is what it is).
   */
  carryFrom(from: AtomicEstimator, baseline: BigInt64Array, goOn: () => boolean): void {
    const n = this.hashes * this.slots;
    // The counters the baseline holds, each swapped so that its baseline is subtracted once...
    for (let i = 0; i < n; i++) {
      const base = baseline[i]!;
      if (base === 0n) continue;
      if (!goOn()) return;
      const gained = clampI64(Atomics.exchange(from.words, from.first + i, 0n) - base);
      if (gained !== 0n) addSaturating(this.words, this.first + i, gained);
    }
    // ...then whatever any counter holds now.
    for (let i = 0; i < n; i++) {
      if (Atomics.load(from.words, from.first + i) === 0n) continue;
      if (!goOn()) return;
      const taken = Atomics.exchange(from.words, from.first + i, 0n);
      if (taken !== 0n) addSaturating(this.words, this.first + i, taken);
    }
  }

  /**
   * Moves up to `events` of the hashed key's counts in `from` into this sketch, each counter giving
   * up to `events` toward zero by compare-and-swap: a late writer's own events, never the whole
   * counter with the stale count under them (carry.rs `carry_events_from`, whose module
   * documentation says why each event still moves once).
   */
  carryEventsFrom(from: AtomicEstimator, h1: number, h2: number, events: number): void {
    const indexes = this.rows.locate(h1, h2);
    const value = BigInt(events);
    for (let row = 0; row < indexes.length; row++) {
      const taken = towardZero(takeTowardZero(from.words, from.first + indexes[row]!, value), value);
      if (taken !== 0n) addSaturating(this.words, this.first + indexes[row]!, taken);
    }
  }

  /** Adds `other`'s counters (a process-local sketch's, or another buffer's), saturating. */
  merge(other: EstimatorCore): void {
    // Both kinds of sketch read their counters as i64s with `counter`.
    const theirs = other as unknown as { counter(i: number): bigint };
    const n = this.hashes * this.slots;
    for (let i = 0; i < n; i++) addSaturating(this.words, this.first + i, theirs.counter(i));
  }

  /** Counter `i` as an i64. */
  counter(i: number): bigint {
    return Atomics.load(this.words, this.first + i);
  }

  /** Nothing to free: the buffer lives as long as any thread holds it. */
  close(): void {}

  serialize(): Uint8Array {
    return encodeWords(this.hashes, this.slots, this.seed, (i) => this.counter(i));
  }
}

/** Bit 0 of the interval word: which sketch counts the current interval. */
const FLAG = 1n;
/** Bit 1: a rotation is under way. */
const ROTATING = 2n;
/** Bit 2: the previous interval's counts are stale. */
const STALE = 4n;
/** The bits that are not the start time. */
const LOW_BITS = 7n;
/** ROTATING | STALE as a number: a rotation after idleness, which `observe` handles the slow way. */
const ROTATING_STALE = 6;

/** The interval word as one call saw it (rate.rs `View`). */
interface View {
  current: 0 | 1;
  rotating: boolean;
  stale: boolean;
  /** Nanoseconds since the current interval started. */
  past: bigint;
  /** The interval word itself. */
  word: bigint;
}

/** The word that finishes the rotation `claimed` claimed (rate.rs `finished`). */
/** shared.rs `OTHER_CLOCK_NANOS`: how far ahead a start may be and still be this clock's. */
const OTHER_CLOCK_NS = 1_000_000_000n;

/**
 * rate.rs `view`'s time since the interval `start` at `now`: a start less than a second ahead is
 * a reading taken just before another thread began the interval (no time passed), one further
 * ahead is another clock's origin (long past).
 */
const pastSince = (start: bigint, now: bigint): bigint =>
  now >= start ? now - start : start - now <= OTHER_CLOCK_NS ? 0n : U64_MAX;

const finished = (claimed: bigint): bigint => (claimed & ~(ROTATING | FLAG)) | ((claimed & FLAG) ^ FLAG);

/** The fallback {@link RateCore} over a buffer: `nowMs` is on the clock all its threads share. */
export class BufferRate implements RateCore {
  private readonly word: BigUint64Array;
  private readonly sketches: [AtomicEstimator, AtomicEstimator];
  private readonly intervalNs: bigint;
  /** `intervalNs` as a number; `Infinity` from 2^53 on, above any time {@link current} reads in numbers. */
  private readonly intervalNsNumber: number;
  /** Nanoseconds into the interval at the last {@link running} that found it running. */
  private runningPast = 0;
  private readonly k0: number;
  private readonly k1: number;

  constructor(counters: BigInt64Array, intervalMs: number, hashes: number, slots: number, seed: bigint) {
    this.word = new BigUint64Array(counters.buffer);
    const n = hashes * slots;
    this.sketches = [
      new AtomicEstimator(hashes, slots, seed, counters, FIRST_COUNTER),
      new AtomicEstimator(hashes, slots, seed, counters, FIRST_COUNTER + n),
    ];
    // Within 64 bits: `lib/rate.ts` limits a buffer rate's interval to 2^64 − 1 ns.
    this.intervalNs = BigInt(intervalMs) * 1_000_000n;
    this.intervalNsNumber = intervalMs * 1e6 < EXACT ? intervalMs * 1e6 : Infinity;
    this.k0 = Number(BigInt.asUintN(32, seed));
    this.k1 = Number(BigInt.asUintN(32, seed >> 32n));
  }

  observe(key: Key, events: number, nowMs: number): number {
    const running = this.running(nowMs);
    if (running !== -1) return this.sketches[running].incr(key, events);
    const h = hashKey(key, this.k0, this.k1);
    return this.count(h.h1, h.h2, events, this.view(nowMs));
  }

  /** Counts `events` for the hashed key in the sketch `view` names as current (rate.rs `count`). */
  private count(h1: number, h2: number, events: number, view: View): number {
    const count = this.sketches[view.current].incrHashed(h1, h2, events);
    // Counting nothing (a read) leaves nothing of ours to move.
    if (view.rotating && view.stale && events !== 0) this.carryLate(h1, h2, events, view);
    return count;
  }

  /**
   * After counting `events` into the stale sketch during a rotation after idleness: if that
   * rotation has finished meanwhile, its carry may have passed our counters, so we move our events,
   * and only ours (rate.rs `carry_late`; `Atomics` are sequentially consistent, the fences there).
   * Moved whole, a counter brought the stale count along for the carry to subtract later, and a
   * refund in between left it below zero.
   */
  private carryLate(h1: number, h2: number, events: number, view: View): void {
    if (Atomics.load(this.word, RATE_WORD) === finished(view.word)) {
      this.sketches[1 - view.current]!.carryEventsFrom(this.sketches[view.current], h1, h2, events);
    }
  }

  /**
   * {@link observe}, writing into `window` the whole milliseconds elapsed in the interval it
   * counted in, from the same read of the interval word (rate.rs `observe_hash_in_interval` and
   * the binding's floor division): at most `intervalMs − 1`, so the window's end stays at least
   * 1 ms away. (Rounding a fraction of the interval instead gave the end as 0 ms away, and another
   * figure than the native backend's, once clock readings passed 2^53 ns.)
   */
  observeInWindow(key: Key, events: number, nowMs: number, window: Float64Array): number {
    const running = this.running(nowMs);
    if (running !== -1) {
      const past = this.runningPast;
      // Exact: `past` is an integer below 2^53, so is its remainder, and the difference is a
      // multiple of 10^6 (a plain floor of past / 10^6 can round up near 2^53).
      window[0] = (past - (past % 1e6)) / 1e6;
      return this.sketches[running].incr(key, events);
    }
    const view = this.view(nowMs);
    const h = hashKey(key, this.k0, this.k1);
    window[0] = Number((view.past % this.intervalNs) / 1_000_000n);
    return this.count(h.h1, h.h2, events, view);
  }

  /**
   * rate.rs `refund_hash`: takes nothing while a rotation runs (readers report 0 for the new
   * interval then, and after idleness the carry would take what a refund left below its copy).
   * Once it has finished, the new sketch holds no stale count and the carry only adds to it, so a
   * counter refunded to zero stays at or above it.
   */
  refund(key: Key, events: number, nowMs: number): number {
    const view = this.view(nowMs);
    if (view.rotating) return 0;
    const h = hashKey(key, this.k0, this.k1);
    return this.sketches[view.current].refundHashed(h.h1, h.h2, events);
  }

  previousCount(key: Key, nowMs: number): number {
    return this.sample(key, nowMs).prevSamples;
  }

  sample(key: Key, nowMs: number): RateSample {
    const view = this.view(nowMs);
    const h = hashKey(key, this.k0, this.k1);
    const [current, other] = [this.sketches[view.current], this.sketches[1 - view.current]!];
    let prevSamples: number;
    let currSamples: number;
    if (view.rotating) {
      // The interval that just ended is still in the current sketch; the new one has seen nothing.
      prevSamples = view.stale ? 0 : current.getHashed(h.h1, h.h2);
      currSamples = 0;
    } else {
      prevSamples = view.stale ? 0 : other.getHashed(h.h1, h.h2);
      currSamples = current.getHashed(h.h1, h.h2);
    }
    const currentIntervalFraction = Number(view.past % this.intervalNs) / Number(this.intervalNs);
    return { prevSamples, currSamples, currentIntervalFraction };
  }

  /** Nothing to free: the buffer lives as long as any thread holds it. */
  close(): void {}

  /**
   * Which sketch counts now when the interval is running and not rotating after idleness
   * ({@link view}'s `current`), else −1 ({@link view} then ends the interval or says how to
   * count). Read in numbers while the interval word, the time and the interval are all below
   * 2^53 ns (104 days), where numbers are exact and the comparison is the same; BigInt arithmetic
   * allocates, and this runs on every `observe`.
   */
  private running(nowMs: number): 0 | 1 | -1 {
    const now = Math.trunc(nowMs * 1e6);
    const seen = Number(Atomics.load(this.word, RATE_WORD));
    if (seen < EXACT && now < EXACT) {
      const low = seen % 8;
      const start = seen - low;
      if (now >= start && now - start < this.intervalNsNumber && (low & ROTATING_STALE) !== ROTATING_STALE) {
        this.runningPast = now - start;
        return (low & 1) as 0 | 1;
      }
    }
    return -1;
  }

  /** rate.rs `view`: ends the interval if it is over (taking over a stalled rotation); never waits. */
  private view(nowMs: number): View {
    // trunc(nowMs × 10^6) saturating at 2^64 − 1, as the binding's `f64 as u64`.
    const scaled = nowMs * 1e6;
    const now = scaled >= 2 ** 64 ? U64_MAX : BigInt(Math.trunc(scaled));
    for (;;) {
      const seen = Atomics.load(this.word, RATE_WORD);
      const start = seen & ~LOW_BITS;
      const view: View = {
        current: Number(seen & FLAG) as 0 | 1,
        rotating: (seen & ROTATING) !== 0n,
        stale: (seen & STALE) !== 0n,
        past: pastSince(start, now),
        word: seen,
      };
      if (view.past < this.intervalNs) return view;
      let claimed: bigint;
      if (view.rotating) {
        // Stalled for a whole interval: take the rotation over, same sketches, same staleness.
        claimed = (now & ~LOW_BITS) | (seen & LOW_BITS);
      } else {
        const twice = this.intervalNs * 2n;
        const stale = view.past >= (twice > U64_MAX ? U64_MAX : twice) ? STALE : 0n;
        claimed = (now & ~LOW_BITS) | (seen & FLAG) | ROTATING | stale;
      }
      // The stale sketch before the claim, while nobody counts into it (rate.rs `view`).
      const baseline = (claimed & STALE) !== 0n ? this.sketches[view.current].snapshot() : undefined;
      // Of all threads that read `seen`, exactly one claims the rotation.
      if (Atomics.compareExchange(this.word, RATE_WORD, seen, claimed) === seen) this.rotate(claimed, baseline);
    }
  }

  /**
   * Clears the sketch that becomes current, then publishes the new interval (unless taken over);
   * after idleness, then carries the events counted meanwhile out of the stale sketch.
   */
  private rotate(claimed: bigint, baseline: BigInt64Array | undefined): void {
    const current = Number(claimed & FLAG);
    this.sketches[1 - current]!.reset();
    const done = finished(claimed);
    if (Atomics.compareExchange(this.word, RATE_WORD, claimed, done) !== claimed || baseline === undefined) return;
    this.sketches[1 - current]!.carryFrom(
      this.sketches[current]!,
      baseline,
      () => Atomics.load(this.word, RATE_WORD) === done,
    );
  }
}
