/** Time sources for `Rate` and `Limiter`. */
import { invalidType, outOfRange } from './errors.js';
import { millisecondsArgument } from './options.js';

/**
 * A source of time in milliseconds. `now()` must never decrease; a value below an earlier one is
 * treated as no time passing.
 */
export interface Clock {
  /** Milliseconds since an origin of the clock's choosing (fractions allowed). */
  now(): number;
}

/**
 * A clock that only moves when told to: for tests, simulations and replaying recorded traffic.
 *
 * @example
 * ```ts
 * const clock = new ManualClock();
 * const rate = new Rate({ intervalMs: 1000, clock });
 * rate.observe('a', 5);
 * clock.advance(1000);
 * rate.rate('a'); // 5
 * ```
 */
export class ManualClock implements Clock {
  private ms: number;

  /** A clock standing at `startMs` (a finite number >= 0). Defaults to 0. */
  constructor(startMs = 0) {
    this.ms = millisecondsArgument('The "startMs" argument', startMs, Number.MAX_SAFE_INTEGER);
  }

  now(): number {
    return this.ms;
  }

  /** Moves the clock forward by `ms` (a finite number >= 0). */
  advance(ms: number): void {
    this.ms += millisecondsArgument('The "ms" argument', ms, Number.MAX_SAFE_INTEGER);
  }
}

/**
 * The default clock: the process's monotonic clock (`process.hrtime`, `CLOCK_MONOTONIC` on Linux).
 * Its origin every worker thread shares, unlike `performance.now()`'s, which starts with each
 * thread: rates over a `SharedArrayBuffer` need that. And it is the cheaper read on a request path:
 * inside a loaded Express server (`benchmark/request-path.ts`'s method) `performance.now()` took a
 * median 0.92 µs per request, `process.hrtime()` 0.24 µs (Node 20, 2 shared cores, November 2026),
 * and `rateLimit` and `tokenBucket` read the clock on every request. `Rate`, `HeavyHitters` and
 * `Limiter` given no `clock` go further: their cores read this same clock inside the call they
 * make anyway (`hostClock` of `lib/core.ts` `RateCoreConstructor`), with no read here at all on
 * the native backend.
 */
export const hostClock: Clock = {
  now: () => {
    const [seconds, nanoseconds] = process.hrtime();
    return seconds * 1e3 + nanoseconds / 1e6;
  },
};

/**
 * `Date.now()` as a clock: what express-rate-limit's `MemoryStore` and @fastify/rate-limit's
 * `LocalStore` read, so the keepcount stores read it too and tests that fake `Date` (node:test
 * mock timers, sinon, jest) turn their windows. Wall time, counted in its forward steps only
 * (see {@link ForwardTime}): a clock stepped back (a fake timer set to an earlier date, NTP, a VM
 * snapshot restored) counts as no time passing, and time counts again from the new reading at
 * once, as the exact stores' per-key windows recover; one stepped forward turns a window early.
 * (Measured from the first reading alone, a step back of an hour held the window open an hour,
 * adding up every client's requests.)
 *
 * A `Rate` or `HeavyHitters` given this very object reads it through {@link Stopwatch.reading}:
 * while `Date.now` is the engine's own, the core reads the same wall clock itself, in the call it
 * makes anyway; a `Date.now` replaced by a fake timer is read here and passed in. Either way the
 * core counts the forward steps, so one count of them spans both (a fake timer installed or
 * removed while the object counts).
 */
export const dateClock: Clock = { now: () => Date.now() };

/**
 * `Date.now` as the engine made it, or `undefined` when something had replaced it before this
 * module loaded (a fake timer installed first): the cores' own wall-clock reads stand for
 * `Date.now()` only while `Date.now` is still this function.
 */
const engineDateNow = Function.prototype.toString.call(Date.now).includes('[native code]') ? Date.now : undefined;

/**
 * The `nowMs` a core made with a wall origin (`wallOriginMs` of `lib/core.ts`
 * `RateCoreConstructor`) takes as "read the wall clock yourself", as {@link wallReadingMs} reads
 * it from `Date.now()`. Not a number: every reading is one, so it cannot be taken for one.
 */
export const READ_WALL_CLOCK = Number.NaN;

/**
 * A wall reading as a core made with a wall origin takes it: whole milliseconds from `originMs` to
 * `nowMs` (a `Date.now()` reading), rounded down, negative when the clock stands behind the origin,
 * within ±(2^53 − 1). Both finite: {@link Stopwatch.reading} passes these for a `Date.now` a fake
 * timer replaced, and the fallback cores given {@link READ_WALL_CLOCK} read the engine's.
 */
export function wallReadingMs(originMs: number, nowMs: number): number {
  return Math.min(Math.max(Math.floor(nowMs - originMs), -Number.MAX_SAFE_INTEGER), Number.MAX_SAFE_INTEGER);
}

/**
 * Time on a clock that can step back (`Date.now()`), counted in its forward steps only: the sum of
 * the rises from each reading to the next, at most 2^53 − 1. A reading below the one before counts
 * as no time passing, and time counts again from it at once. The fallback cores count wall readings
 * with it (the native `CallerClock::with_wall_origin` does the same arithmetic on the same doubles,
 * so the two agree to the bit), and the express-rate-limit store counts its `Date.now()` with it.
 */
export class ForwardTime {
  /** The last reading. */
  #last: number;
  /** The forward steps so far. */
  #elapsed = 0;

  /** Starts at the reading `startMs`, with no time counted. */
  constructor(startMs: number) {
    this.#last = startMs;
  }

  /** Takes the reading `nowMs`; returns the forward steps from the start to it. */
  advance(nowMs: number): number {
    if (nowMs > this.#last) this.#elapsed = Math.min(this.#elapsed + (nowMs - this.#last), Number.MAX_SAFE_INTEGER);
    this.#last = nowMs;
    return this.#elapsed;
  }
}

/** Returns `clock` if it has a `now()` method. */
export function validateClock(clock: unknown): Clock {
  if (typeof clock !== 'object' || clock === null || typeof (clock as Clock).now !== 'function') {
    throw invalidType('The "clock" option', 'an object with a now() method', clock);
  }
  return clock as Clock;
}

/**
 * Time elapsed since construction on the user's clock (the `clock` option, validated here, or
 * {@link hostClock}): what `Rate` and `Limiter` hand their cores. A reading below the origin
 * counts as no time passed; a non-finite reading is a `RangeError`.
 */
export class Stopwatch {
  readonly #clock: Clock;
  readonly #origin: number;
  /**
   * For {@link dateClock}: the origin, which a core given it counts wall readings from (see
   * {@link reading}); `undefined` for any other clock.
   */
  readonly wallOriginMs: number | undefined;

  /**
   * Starts now on `clock` (an option value: `undefined` means `fallback`, by default
   * {@link hostClock}); `fromOrigin` measures from the clock's own origin instead, for clocks that
   * several threads share.
   */
  constructor(clock: unknown, fallback: Clock = hostClock, fromOrigin = false) {
    this.#clock = clock === undefined ? fallback : validateClock(clock);
    this.#origin = fromOrigin ? 0 : this.#read();
    // Not from the clock's origin: that is for buffers, whose cores take no wall readings.
    this.wallOriginMs = this.#clock === dateClock && !fromOrigin ? this.#origin : undefined;
  }

  /**
   * What a core takes as `nowMs`: whole milliseconds since construction (at most 2^53 − 1). For
   * {@link dateClock}, a wall reading for a core made with {@link wallOriginMs} to count in forward
   * steps: {@link READ_WALL_CLOCK} while `Date.now` is the engine's own, for the core to read the
   * same clock itself, else {@link wallReadingMs} of the `Date.now` a fake timer put there.
   * `Date.now()` from JavaScript cost about 70 ns of a Fastify store increment's ~560 (Node 20,
   * November 2026); the native core's `clock_gettime` about a third of that.
   */
  reading(): number {
    const origin = this.wallOriginMs;
    if (origin !== undefined) return Date.now === engineDateNow ? READ_WALL_CLOCK : wallReadingMs(origin, this.#read());
    return Math.min(Math.floor(this.elapsedMs()), Number.MAX_SAFE_INTEGER);
  }

  /** Milliseconds since construction, never negative (fractions kept). */
  elapsedMs(): number {
    return Math.max(0, this.#read() - this.#origin);
  }

  #read(): number {
    const now = this.#clock.now();
    if (typeof now !== 'number' || !Number.isFinite(now)) {
      throw outOfRange("The clock's now()", 'a finite number of milliseconds', now);
    }
    return now;
  }
}
