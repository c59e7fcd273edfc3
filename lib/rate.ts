/** Event rates per key over fixed intervals, with pingora-limits' `Rate` semantics. */
import { closedRate, dispose, isClosed } from './closed.js';
import { active } from './backend.js';
import type { Key, RateCore } from './core.js';
import { hostClock, Stopwatch, type Clock } from './clock.js';
import { invalidType, outOfRange } from './errors.js';
import { validateKey } from './keys.js';
import { countArgument, integerOption, optionsObject, seedOption, shapeOptions } from './options.js';
import { MAX_COUNTERS, MAX_HASHES } from './limits.js';
import { createBuffer, readBuffer } from './shared-buffer.js';
import {
  inSharedDir,
  sharedBackend,
  sharedDir,
  sharedMode,
  sharedName,
  sharedSeed,
  type SharedCreation,
  type SharedPlacement,
} from './shared.js';

/** Longest interval: 2^52 ms, so twice it is still exact. */
const MAX_INTERVAL_MS = 4503599627370496;
/**
 * Longest interval of a shared rate, in a segment or a `SharedArrayBuffer`, whose header and
 * interval word count nanoseconds in 64 bits: `floor((2^64 − 1) / 10^6)` ms, 584 years. Longer ones
 * would be stored as 2^64 − 1 ns, each the same interval as every other.
 */
const MAX_SHARED_INTERVAL_MS = 18446744073709;

/** Options of {@link Rate}. */
export interface RateOptions {
  /** Length of one counting interval in milliseconds: an integer in [1, 2^52]. Required. */
  intervalMs: number;
  /** Rows of each of the two sketches; see `EstimatorOptions.hashes`. Defaults to 4. */
  hashes?: number;
  /**
   * Counters per row of each of the two sketches. Defaults to 1024 (pingora-limits' `Rate`; fewer
   * keys are live within one interval than an `Inflight` tracks).
   */
  slots?: number;
  /** The hash seed; see `EstimatorOptions.seed`. Defaults to a random seed. */
  seed?: bigint | number;
  /**
   * Where time comes from: an object whose `now()` returns milliseconds, e.g. a {@link ManualClock}.
   * Defaults to the process's monotonic clock (`process.hrtime`).
   */
  clock?: Clock;
}

/** Options of {@link Rate.openShared}. */
export interface SharedRateOptions extends SharedCreation {
  /**
   * Length of one counting interval in milliseconds: an integer in [1, 18446744073709] (2^64 − 1
   * nanoseconds, 584 years, what the segment holds). Every process must pass the same. Required.
   */
  intervalMs: number;
  /** As {@link RateOptions.hashes}. Defaults to 4. */
  hashes?: number;
  /** As {@link RateOptions.slots}. Defaults to 1024. */
  slots?: number;
  /** As {@link RateOptions.seed}, but required: every process must pass the same seed. */
  seed: bigint | number;
}

/** Options of {@link Rate.createSharedBuffer}. */
export interface SharedBufferRateOptions {
  /**
   * Length of one counting interval in milliseconds: an integer in [1, 18446744073709] (the
   * buffer counts nanoseconds in 64 bits). Required.
   */
  intervalMs: number;
  /** As {@link RateOptions.hashes}. Defaults to 4. */
  hashes?: number;
  /** As {@link RateOptions.slots}. Defaults to 1024. */
  slots?: number;
  /** As {@link RateOptions.seed}: stored in the buffer. Defaults to a random seed. */
  seed?: bigint | number;
}

/**
 * Options of {@link Rate.fromSharedBuffer}: each of `intervalMs`, `hashes`, `slots` and `seed`
 * given must equal the buffer's (`ERR_KEEPCOUNT_MISMATCH`); one left out is taken from the buffer.
 */
export interface FromSharedBufferRateOptions extends Partial<SharedBufferRateOptions> {
  /**
   * Where time comes from: an object whose `now()` returns milliseconds **on a time base every
   * thread sharing the buffer agrees on** (the interval's start is stored in the buffer); a
   * {@link ManualClock} per thread, advanced alike, in tests. Defaults to the process's monotonic
   * clock (`process.hrtime`), which all worker threads share. Readings are kept as whole
   * nanoseconds computed in a double: past 2^53 ns (104 days; any `Date.now()` clock) they hold
   * time to within a quarter of a microsecond, so a whole-millisecond figure such as
   * `observeWindow`'s `resetMs` can read 1 ms high (alike on both backends, and never below 1).
   */
  clock?: Clock;
}

/** Default shape of each of a rate's two sketches: pingora-limits' `Rate`. */
const DEFAULT_SHAPE = { hashes: 4, slots: 1024 };

/**
 * A shared core for the constructor to adopt. Not exported, so only {@link Rate.openShared} can
 * make one.
 */
class Adopted {
  constructor(
    readonly core: RateCore,
    readonly intervalMs: number,
    /** Reads the time the core takes; `undefined` for shared segments, which read the host's clock. */
    readonly stopwatch?: Stopwatch,
  ) {}
}

/** What a {@link Rate.rateWith} function receives. */
export interface RateComponents {
  /** The key's count in the previous (completed) interval. */
  prevSamples: number;
  /** The key's count so far in the current interval. */
  currSamples: number;
  /** The interval length in milliseconds. */
  intervalMs: number;
  /** How much of the current interval has elapsed, in [0, 1). */
  currentIntervalFraction: number;
}

/**
 * pingora-limits' `PROPORTIONAL_RATE_ESTIMATE_CALC_FN`: events per second over the last interval,
 * interpolating linearly between the previous and the current interval by how far into the current
 * one we are (https://blog.cloudflare.com/counting-things-a-lot-of-different-things/).
 *
 * Takes what a `rateWith` passes: integer counts (negative too, as `observe` takes negative
 * events; the native backend's counts go past 2^53, so any integer), an `intervalMs` that is an
 * integer in [1, 2^52] as {@link RateOptions.intervalMs}, and a `currentIntervalFraction` in
 * [0, 1] (keepcount/redis' `SyncedRate` reports 1 at the very end of a window). Anything else
 * throws `TypeError` `ERR_INVALID_ARG_TYPE` (not a number) or `RangeError` `ERR_OUT_OF_RANGE`.
 */
export function proportionalRate(components: RateComponents): number {
  if (typeof components !== 'object' || components === null) {
    throw invalidType('The "components" argument', 'of type object', components);
  }
  const { prevSamples, currSamples, intervalMs, currentIntervalFraction } = components;
  // One test per field, as cheap as the arithmetic: `rateWith(key, proportionalRate)` may run per
  // request. What was wrong with a field is worked out only on the way to its error.
  if (!Number.isInteger(prevSamples)) throw componentError('prevSamples', 'an integer', prevSamples);
  if (!Number.isInteger(currSamples)) throw componentError('currSamples', 'an integer', currSamples);
  if (!(Number.isInteger(intervalMs) && intervalMs >= 1 && intervalMs <= MAX_INTERVAL_MS)) {
    throw componentError('intervalMs', `an integer in [1, ${MAX_INTERVAL_MS}]`, intervalMs);
  }
  if (!(typeof currentIntervalFraction === 'number' && currentIntervalFraction >= 0 && currentIntervalFraction <= 1)) {
    throw componentError('currentIntervalFraction', 'a number in [0, 1]', currentIntervalFraction);
  }
  return (prevSamples * (1 - currentIntervalFraction) + currSamples) / (intervalMs / 1000);
}

/** The error for a {@link RateComponents} field that is not `expected`: wrong type, else out of range. */
function componentError(name: keyof RateComponents, expected: string, value: unknown): TypeError | RangeError {
  const what = `The "components.${name}" argument`;
  return typeof value === 'number' ? outOfRange(what, expected, value) : invalidType(what, 'of type number', value);
}

/**
 * Counts events per key in intervals of `intervalMs` and reports the rate of the last completed
 * one, like pingora-limits' `Rate`: intervals start at the first call at least one interval after
 * the previous start, and data two or more intervals old reads as 0. Unlike pingora it never
 * panics: a clock that goes backwards counts as no time passing.
 *
 * @example
 * ```ts
 * const clock = new ManualClock();
 * const rate = new Rate({ intervalMs: 1000, clock });
 * rate.observe('a', 3);
 * rate.observe('a', 2); // 5
 * clock.advance(1000);
 * rate.rate('a'); // 5 (events per second)
 * ```
 */
export class Rate {
  /** The interval length in milliseconds. */
  readonly intervalMs: number;
  #core: RateCore;
  /**
   * Reads the user's clock for the core; `undefined` when the core keeps time itself: the host's
   * clock, read inside the core's call (no `clock` option), or a shared segment's.
   */
  readonly #stopwatch: Stopwatch | undefined;
  /** Where the core writes the elapsed part of the interval for {@link observeWindow}. */
  readonly #window = new Float64Array(1);

  constructor(options: RateOptions);
  /** @internal {@link Rate.openShared}'s way in. */
  constructor(adopted: Adopted);
  constructor(options: RateOptions | Adopted) {
    if (options instanceof Adopted) {
      this.intervalMs = options.intervalMs;
      this.#core = options.core;
      this.#stopwatch = options.stopwatch;
      return;
    }
    const o = optionsObject(options);
    this.intervalMs = integerOption('intervalMs', o.intervalMs, 1, MAX_INTERVAL_MS);
    const { hashes, slots } = shapeOptions(o.hashes, o.slots, DEFAULT_SHAPE);
    const seed = seedOption(o.seed);
    const stopwatch = o.clock === undefined ? undefined : new Stopwatch(o.clock);
    this.#stopwatch = stopwatch;
    this.#core = new active.Rate(this.intervalMs, hashes, slots, seed, o.clock === undefined, stopwatch?.wallOriginMs);
  }

  /**
   * The rate `name`, shared by every process of this host that opens it: one pair of sketches and
   * one interval for all of them, ended once for everyone by whichever process first sees it over
   * (a compare-and-swap in the segment, on the host's monotonic clock, so no `clock` option). The
   * segment, its errors and its lifetime are as for `Estimator.openShared`; `Rate.unlink` removes it.
   *
   * @example
   * ```ts
   * const perSecond = Rate.openShared('api-rate', { intervalMs: 1000, seed: BigInt(process.env.KEEPCOUNT_SEED!) });
   * perSecond.observe(clientIp);
   * perSecond.rate(clientIp); // events per second over the whole host's last interval
   * ```
   */
  static openShared(name: string, options: SharedRateOptions): Rate {
    const n = sharedName(name);
    const o = optionsObject<SharedRateOptions>(options);
    noClock(o);
    const intervalMs = integerOption('intervalMs', o.intervalMs, 1, MAX_SHARED_INTERVAL_MS);
    const { hashes, slots } = shapeOptions(o.hashes, o.slots, DEFAULT_SHAPE);
    const seed = sharedSeed(o.seed);
    const dir = sharedDir(o);
    const mode = sharedMode(o);
    const shared = sharedBackend('Rate.openShared');
    const core = inSharedDir(dir, n, () => shared.openRate(n, intervalMs, hashes, slots, seed, dir, mode));
    return new Rate(new Adopted(core, intervalMs));
  }

  /**
   * A `SharedArrayBuffer` holding an empty rate (two sketches and the interval's state),
   * `128 + 16 × hashes × slots` bytes, for worker threads to share with
   * {@link Rate.fromSharedBuffer}. Throws as the constructor for bad options.
   */
  static createSharedBuffer(options: SharedBufferRateOptions): SharedArrayBuffer {
    const o = optionsObject(options);
    noClock(o);
    const intervalMs = integerOption('intervalMs', o.intervalMs, 1, MAX_SHARED_INTERVAL_MS);
    const { hashes, slots } = shapeOptions(o.hashes, o.slots, DEFAULT_SHAPE);
    return createBuffer({ kind: 'rate', hashes, slots, seed: seedOption(o.seed), intervalMs });
  }

  /**
   * A rate over `buffer`, made by {@link Rate.createSharedBuffer}: every worker thread that makes
   * one over the same buffer counts in the same two sketches, and an interval ends once for all of
   * them (whichever thread first sees it over claims the rotation with a compare-and-swap on a
   * word in the buffer, as `Rate.openShared` does across processes). Errors as
   * `Estimator.fromSharedBuffer`.
   *
   * @example
   * ```ts
   * const buffer = Rate.createSharedBuffer({ intervalMs: 1000 });
   * new Worker('./count.js', { workerData: buffer });
   * // In count.js: const perSecond = Rate.fromSharedBuffer(workerData); perSecond.observe(ip);
   * Rate.fromSharedBuffer(buffer).rate(ip); // every thread's events of the last interval
   * ```
   */
  static fromSharedBuffer(buffer: SharedArrayBuffer, options?: FromSharedBufferRateOptions): Rate {
    const o = optionsObject(options);
    const layout = readBuffer(buffer, {
      kind: 'rate',
      intervalMs:
        o.intervalMs === undefined ? undefined : integerOption('intervalMs', o.intervalMs, 1, MAX_INTERVAL_MS),
      hashes: o.hashes === undefined ? undefined : integerOption('hashes', o.hashes, 1, MAX_HASHES),
      slots: o.slots === undefined ? undefined : integerOption('slots', o.slots, 1, MAX_COUNTERS),
      seed: o.seed === undefined ? undefined : seedOption(o.seed),
    });
    const stopwatch = new Stopwatch(o.clock, hostClock, true);
    const core = active.buffers.rate(
      new BigInt64Array(buffer),
      layout.intervalMs,
      layout.hashes,
      layout.slots,
      layout.seed,
    );
    return new Rate(new Adopted(core, layout.intervalMs, stopwatch));
  }

  /** Removes the shared segment `name`; see `Estimator.unlink`. */
  static unlink(name: string, options?: SharedPlacement): void {
    const n = sharedName(name);
    const dir = sharedDir(optionsObject(options));
    const shared = sharedBackend('Rate.unlink');
    inSharedDir(dir, n, () => shared.unlink(n, dir));
  }

  /** Records `events` (a safe integer; defaults to 1) for `key`; returns its count in the current interval. */
  observe(key: Key, events = 1): number {
    const k = validateKey(key);
    const n = countArgument('events', events);
    // The clock first, then the core: a clock that closes this rate swaps the core out, and the
    // call must go to the closed one (ERR_KEEPCOUNT_CLOSED), not to the freed one.
    const now = this.#elapsed();
    return this.#core.observe(k, n, now);
  }

  /**
   * {@link observe}, also telling how long the current interval still runs: the key's `count` in
   * it and `resetMs`, the milliseconds until it ends, in [1, intervalMs] (an interval ends on the
   * first call at least `intervalMs` after it started, so a quiet one can overrun). What a
   * fixed-window quota reports, from one core call instead of `observe` and then `rateWith`.
   */
  observeWindow(key: Key, events = 1): { count: number; resetMs: number } {
    const k = validateKey(key);
    const n = countArgument('events', events);
    const now = this.#elapsed();
    const count = this.#core.observeInWindow(k, n, now, this.#window);
    return { count, resetMs: this.intervalMs - this.#window[0]! };
  }

  /**
   * Takes back up to `events` (a safe integer >= 0; defaults to 1) of `key`'s count in the current
   * interval, and returns its count there: a refund, for a request that should not count after
   * all. Each of the key's counters drops by `events` but **stops at zero**: a refund past the
   * key's count takes the rest from keys sharing its counters, down to zero at most (they read low
   * until the interval turns), and a counter a negative `observe` took below zero is left as it
   * is. Unlike `observe(key, -events)`, refunds racing each other (worker threads on a
   * `fromSharedBuffer` rate, processes on an `openShared` one) take each count once between them:
   * each counter is lowered with a compare-and-swap from the value it replaces. While a shared
   * rate's interval is rotating (microseconds, at its end) a refund takes nothing and returns 0,
   * the count readers report then. After an idle spell, what other threads counted during that
   * rotation reaches the new interval microseconds later, only ever added to it: a refund meanwhile
   * misses those events (they count after it), and no counter it stopped at zero goes below later
   * (short of a thread or process stalled for a whole interval mid-call). The previous interval is
   * left as it is.
   */
  refund(key: Key, events = 1): number {
    const k = validateKey(key);
    if (typeof events !== 'number') throw invalidType('The "events" argument', 'of type number', events);
    if (!(Number.isSafeInteger(events) && events >= 0)) {
      throw outOfRange('The "events" argument', 'a safe integer >= 0', events);
    }
    const now = this.#elapsed();
    return this.#core.refund(k, events, now);
  }

  /** `key`'s events per second in the last completed interval (0 if none completed recently). */
  rate(key: Key): number {
    const k = validateKey(key);
    const now = this.#elapsed();
    return (this.#core.previousCount(k, now) * 1000) / this.intervalMs;
  }

  /** `fn` applied to `key`'s {@link RateComponents}, e.g. {@link proportionalRate}. */
  rateWith<T>(key: Key, fn: (components: RateComponents) => T): T {
    const k = validateKey(key);
    if (typeof fn !== 'function') throw invalidType('The "fn" argument', 'of type function', fn);
    const now = this.#elapsed();
    const s = this.#core.sample(k, now);
    return fn({
      prevSamples: s.prevSamples,
      currSamples: s.currSamples,
      intervalMs: this.intervalMs,
      currentIntervalFraction: s.currentIntervalFraction,
    });
  }

  /**
   * Frees both sketches now, rather than when the garbage collector gets to this object (see
   * {@link Estimator.close}). Any later call throws `ERR_KEEPCOUNT_CLOSED`. Idempotent; `using`
   * calls it too.
   */
  close(): void {
    if (isClosed(this.#core)) return;
    this.#core.close();
    this.#core = closedRate();
  }

  /** {@link close}, for `using`. */
  [dispose](): void {
    this.close();
  }

  /**
   * Whole milliseconds since construction, never negative, saturating at 2^53 − 1 (285,616 years):
   * a custom clock may run further, and both cores take only safe integers (`Stopwatch.reading`,
   * which leaves a `Date.now()` reading to the core when it can make it). 0 for a core that keeps
   * time itself, which ignores it.
   */
  #elapsed(): number {
    const stopwatch = this.#stopwatch;
    return stopwatch === undefined ? 0 : stopwatch.reading();
  }
}

/**
 * Refuses a `clock` option where time is shared (a segment, a buffer): every process or thread
 * must read the same clock, the host's monotonic one, so a `ManualClock` there would be ignored
 * and a test driving it would run on real time without knowing.
 */
function noClock(options: object): void {
  const { clock } = options as { clock?: unknown };
  if (clock !== undefined) {
    throw invalidType(
      'The "clock" option',
      "absent: a shared rate keeps time on the host's monotonic clock, which every process and thread reads",
      clock,
    );
  }
}
