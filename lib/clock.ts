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
   * Starts now on `clock` (an option value: `undefined` means `fallback`, by default
   * {@link hostClock}); `fromOrigin` measures from the clock's own origin instead, for clocks that
   * several threads share.
   */
  constructor(clock: unknown, fallback: Clock = hostClock, fromOrigin = false) {
    this.#clock = clock === undefined ? fallback : validateClock(clock);
    this.#origin = fromOrigin ? 0 : this.#read();
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
