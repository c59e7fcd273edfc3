/** The framework-neutral request quota: a fixed window per key, counted in a keepcount {@link Rate}. */
import type { Clock } from '../clock.js';
import { outOfRange } from '../errors.js';
import { MAX_COUNTERS, MAX_HASHES } from '../limits.js';
import { integerOption, optionsObject } from '../options.js';
import { Rate } from '../rate.js';
import { policyName, type RateLimitDecision } from './headers.js';

/** The most wrong refusals per request {@link slotsFor} sizes for: 1 in 1,000. */
const WRONG_REFUSAL = 1e-3;

/** Rows of the sketch unless told: pingora-limits' `Rate` has 4. */
const DEFAULT_HASHES = 4;

/** Distinct keys per window the default sketch is sized for: a busy public endpoint. */
const DEFAULT_CLIENTS = 10_000;

/** Most `clients`: 10^6 needs 5.1 million slots, 327 MB with 4 hashes. */
const MAX_CLIENTS = 1_000_000;

/**
 * Counters per row so that, with `clients` keys counted in a window and `hashes` rows, a request
 * within its key's limit is refused wrongly with probability at most 1 in 1,000.
 *
 * A wrong refusal needs, in every row, at least one other key in the request's counter (whatever
 * their counts: with a limit >= 1 an empty counter never refuses). With independent rows of `w`
 * counters and `n` other keys that is `(1 − (1 − 1/w)^n)^hashes` (the Bloom filter's false-positive
 * rate), solved here for `w`. Four hashes need about 5.1 counters per client; the bound holds
 * against any counts, so a flood of requests from few keys cannot raise it, only more keys can:
 * 2× `clients` gives 1 in 90, 4× 1 in 12, 10× about 1 in 2.
 */
export function slotsFor(clients: number, hashes: number): number {
  const perRow = -Math.log1p(-(WRONG_REFUSAL ** (1 / hashes)));
  return Math.ceil(1 / -Math.expm1(-perRow / clients));
}

/** Slots for the `clients` option with `hashes` rows, checked against the sketch size limit. */
function clientSlots(value: unknown, hashes: number): number {
  const clients = integerOption('clients', value, 1, MAX_CLIENTS, DEFAULT_CLIENTS);
  const slots = slotsFor(clients, hashes);
  if (slots * hashes > MAX_COUNTERS) {
    throw outOfRange(
      'The "clients" option',
      `small enough that hashes × slots <= ${MAX_COUNTERS} (it needs ${slots} slots with ${hashes} hashes)`,
      clients,
    );
  }
  return slots;
}

/** Options of {@link WindowQuota}. */
export interface WindowQuotaOptions {
  /** Requests allowed per key per window: an integer >= 0. Required. */
  limit: number;
  /** The window in milliseconds: an integer in [1, 2^52]. Required. */
  windowMs: number;
  /** The policy name in the RateLimit headers. Defaults to `'default'`. */
  policy?: string;
  /**
   * How many distinct keys (clients) you expect in one window: an integer >= 1. Sizes the sketch
   * (`slots`) so that with this many keys a request within its key's limit is refused wrongly with
   * probability at most 1 in 1,000 (see {@link slotsFor}). More keys than this raise that
   * probability; fewer lower it. Ignored when `slots` is given. Defaults to 10,000 (51,072 slots:
   * 3.3 MB with the default 4 hashes).
   */
  clients?: number;
  /** Rows of the sketch (see `RateOptions.hashes`). Defaults to 4. */
  hashes?: number;
  /** Counters per row (see `RateOptions.slots`). Defaults to what `clients` needs. */
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
 *   `windowMs` after the previous start. A client's first window may therefore be shorter (1 ms
 *   to `windowMs`), so a new client can get 2 × `limit` requests within 1 ms of arriving, which
 *   per-key windows allow (less one) only a window after the first request; in any span of
 *   `windowMs` both admit at most 2 × `limit`.
 * - Counts are count-min sketch estimates: never low, but a key that collides with other keys in
 *   every row reads high and can be refused early. The sketch is sized from the `clients` you
 *   expect per window ({@link slotsFor}): with that many keys, a wrong refusal has probability at
 *   most 1 in 1,000 per request; with 10× as many keys (a flood from many addresses) it is about
 *   1 in 2. Memory is `16 × hashes × slots` bytes whatever the traffic; nothing is swept.
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
    const hashes = integerOption('hashes', o.hashes, 1, MAX_HASHES, DEFAULT_HASHES);
    this.#rate = new Rate({
      intervalMs: this.windowMs,
      hashes,
      slots: o.slots ?? clientSlots(o.clients, hashes),
      seed: o.seed,
      clock: o.clock,
    });
  }

  /** Counts one request (or `cost`) for `key` and decides on it. */
  consume(key: string, cost = 1): RateLimitDecision {
    const { count, resetMs } = this.#rate.observeWindow(key, cost);
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
      // A window that has ended is replaced on the next request: a full window from now. Whole
      // milliseconds elapsed, so the exact answer is an integer: rounding drops the float error.
      resetMs: Math.max(1, Math.round((1 - c.currentIntervalFraction) * c.intervalMs)),
    }));
  }
}
