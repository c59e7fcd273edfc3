/** The framework-neutral request quota: a fixed window per key, counted in a keepcount {@link Rate}. */
import type { Clock } from '../clock.js';
import { integerOption, optionsObject } from '../options.js';
import { Rate } from '../rate.js';
import { policyName, type RateLimitDecision } from './headers.js';

/** Options of {@link WindowQuota}. */
export interface WindowQuotaOptions {
  /** Requests allowed per key per window: an integer >= 0. Required. */
  limit: number;
  /** The window in milliseconds: an integer in [1, 2^52]. Required. */
  windowMs: number;
  /** The policy name in the RateLimit headers. Defaults to `'default'`. */
  policy?: string;
  /** Rows of the sketch (see `RateOptions.hashes`). Defaults to 4. */
  hashes?: number;
  /** Counters per row (see `RateOptions.slots`). Defaults to 1024. */
  slots?: number;
  /** The hash seed. Defaults to a random seed. */
  seed?: bigint | number;
  /** Where time comes from, e.g. a `ManualClock` in tests. Defaults to `performance.now()`. */
  clock?: Clock;
}

/**
 * Counts requests per key in fixed windows and decides whether each is within `limit`.
 *
 * Semantics, and where they differ from an exact per-key counter:
 * - One window for all keys, as in keepcount's `Rate`: it starts on the first request at least
 *   `windowMs` after the previous start. A client's first window may therefore be shorter.
 * - Counts are count-min sketch estimates: never low, but a key that collides with busy keys in
 *   every row reads high and can be refused early. With the defaults (4 × 1024 counters) and a few
 *   hundred active keys per window that is rare; raise `slots` for more keys.
 * - Refused requests count too (as express-rate-limit's do), so a flooding client stays refused
 *   until the window turns, not longer.
 *
 * @example
 * ```ts
 * const quota = new WindowQuota({ limit: 100, windowMs: 60_000 });
 * const decision = quota.consume(clientIp(req));
 * if (!decision.allowed) refuse(decision);
 * ```
 */
export class WindowQuota {
  /** Requests allowed per key per window. */
  readonly limit: number;
  /** The window in milliseconds. */
  readonly windowMs: number;
  /** The policy name in the headers. */
  readonly policy: string;
  readonly #rate: Rate;

  constructor(options: WindowQuotaOptions) {
    const o = optionsObject(options);
    this.limit = integerOption('limit', o.limit, 0, Number.MAX_SAFE_INTEGER);
    this.windowMs = integerOption('windowMs', o.windowMs, 1, 2 ** 52);
    this.policy = policyName(o.policy ?? 'default');
    this.#rate = new Rate({
      intervalMs: this.windowMs,
      hashes: o.hashes,
      slots: o.slots,
      seed: o.seed,
      clock: o.clock,
    });
  }

  /** Counts one request (or `cost`) for `key` and decides on it. */
  consume(key: string, cost = 1): RateLimitDecision {
    const count = this.#rate.observe(key, cost);
    // After observe() rolled the window over, this reads the same window.
    const { resetMs } = this.current(key);
    return {
      allowed: count <= this.limit,
      policy: this.policy,
      limit: this.limit,
      count,
      remaining: Math.max(0, this.limit - count),
      resetMs,
      windowMs: this.windowMs,
      key,
    };
  }

  /** Adds `delta` (possibly negative) to `key`'s count in the current window. */
  adjust(key: string, delta: number): void {
    this.#rate.observe(key, delta);
  }

  /** `key`'s count in the current window and the milliseconds until the window ends. */
  current(key: string): { count: number; resetMs: number } {
    return this.#rate.rateWith(key, (c) => ({
      count: c.currSamples,
      // A window that has ended is replaced on the next request: a full window from now.
      resetMs: Math.max(1, Math.ceil((1 - c.currentIntervalFraction) * c.intervalMs)),
    }));
  }
}
