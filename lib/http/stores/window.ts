/**
 * The window and the clock the stores count on, as the exact stores they replace have them:
 * express-rate-limit's `MemoryStore` and @fastify/rate-limit's `LocalStore` both read `Date.now()`
 * and take any window length. And what both stores check of their options and keys, where they
 * are given rather than at a request the package may let through uncounted on a store error.
 */
import { ForwardTime, type Clock } from '../../clock.js';
import { invalidType, outOfRange } from '../../errors.js';
import type { Rate } from '../../rate.js';
import { quotaCounts, type HeavyHitterSettings, type QuotaCounts, type WindowQuotaOptions } from '../window-quota.js';

/**
 * `Date.now()` counted in its forward steps, as `lib/clock.ts`'s `dateClock` is (a step back counts
 * as no time passing), remembering its last reading. express-rate-limit wants a `resetTime` date:
 * `Date.now()` plus what is left of the window. The window was judged at a reading of this very
 * clock a moment before, so the store adds to that reading instead of calling `Date.now()` again:
 * one clock read per request instead of two, and a reset time consistent with the count. After a
 * step back the window's rest counts from the new reading, so the date is as consistent then.
 */
export class DateReading implements Clock {
  /** The last `Date.now()` reading: {@link now}'s, or before the first, the constructor's. */
  last = Date.now();
  /** The forward steps from the constructor's reading. */
  readonly #time = new ForwardTime(this.last);

  now(): number {
    const reading = (this.last = Date.now());
    // A fake's NaN or infinity goes on as it is, for the quota's stopwatch to refuse by name.
    return Number.isFinite(reading) ? this.#time.advance(reading) : reading;
  }
}

/** Longest window: `WindowQuota`'s 2^52 ms. */
const MAX_WINDOW_MS = 2 ** 52;

/**
 * The window a store counts in for the window its package gives it: rounded up to whole
 * milliseconds (a sketch window is an integer), a zero window as 1 ms. `MemoryStore` takes both: a
 * fractional window works as it is, a zero one starts a new window on every request, which a 1 ms
 * window matches but for requests in the same millisecond. A negative, non-finite or non-number
 * window is refused, naming `what`.
 */
export function wholeWindowMs(what: string, value: unknown): number {
  if (typeof value !== 'number') throw invalidType(what, 'of type number', value);
  if (!(value >= 0 && value <= MAX_WINDOW_MS)) {
    throw outOfRange(what, `a number of milliseconds in [0, ${MAX_WINDOW_MS}]`, value);
  }
  return Math.max(1, Math.ceil(value));
}

/**
 * The quota options of a store: the package compares counts with its own limit, so the quota's
 * limit is the largest (it never refuses) and the heavy-hitter threshold comes from `limit` when
 * the package tells it (`ceil(limit / 4)`, as `WindowQuota`'s default) or is 1 otherwise: every
 * client counted exactly up to the table's capacity, so no limit the package applies can refuse a
 * client below it. `heavyHitters` and `rate` are the store's options of those names: with a `rate`
 * (one shared by processes) the counts are the rate's and heavy hitters are off unless asked for,
 * which `WindowQuota` refuses by name.
 */
export function storeQuota(
  heavyHitters: boolean | HeavyHitterSettings | undefined,
  limit: unknown,
  rate?: Rate,
): Pick<WindowQuotaOptions, 'limit' | 'heavyHitters' | 'rate'> {
  if (rate !== undefined) return { limit: Number.MAX_SAFE_INTEGER, heavyHitters, rate };
  const known = typeof limit === 'number' && Number.isSafeInteger(limit) && limit >= 1;
  const threshold = known ? Math.ceil(limit / 4) : 1;
  if (heavyHitters === false) return { limit: Number.MAX_SAFE_INTEGER, heavyHitters: false };
  if (heavyHitters === undefined || heavyHitters === true) {
    return { limit: Number.MAX_SAFE_INTEGER, heavyHitters: { threshold } };
  }
  if (typeof heavyHitters !== 'object' || heavyHitters === null) {
    return { limit: Number.MAX_SAFE_INTEGER, heavyHitters }; // not settings: `WindowQuota` refuses it by name
  }
  // Read, not spread under: settings holding `threshold: undefined` (spread from optional config)
  // would replace the store's threshold with nothing, and `WindowQuota`'s default for the
  // never-refusing limit above is 2^51: no client would ever be counted exactly.
  const given = heavyHitters.threshold;
  return {
    limit: Number.MAX_SAFE_INTEGER,
    heavyHitters: { ...heavyHitters, threshold: given === undefined ? threshold : given },
  };
}

/** The sketch options both stores take, as `WindowQuotaOptions` has them. */
export type StoreSketchOptions = Pick<
  WindowQuotaOptions,
  'clients' | 'hashes' | 'slots' | 'seed' | 'clock' | 'heavyHitters' | 'rate'
>;

/**
 * Checks a store's options where they are given, making nothing: each throws the `TypeError` or
 * `RangeError` a `WindowQuota` would, naming it. The stores make their quotas later (at
 * express-rate-limit's `init()`, at a `timeWindow`'s first request), where a bad option failed
 * every request: express-rate-limit only logs what `init()` throws, and both packages can let
 * every request through uncounted on a store error (`passOnStoreError`, `skipOnError`). A `clock`
 * is read once too: one answering `NaN` passed the type check and failed in the first count.
 * Returns what the quotas will count in, the heavy-hitter threshold resolved as when the
 * package's limit is not known (a given one, else 1).
 */
export function checkedStoreOptions(options: StoreSketchOptions): QuotaCounts {
  const { heavyHitters, rate, ...sketch } = options;
  const counts = quotaCounts({ ...sketch, ...storeQuota(heavyHitters, undefined, rate) }, Number.MAX_SAFE_INTEGER);
  const clock = counts.rate === undefined ? counts.sketch.clock : undefined;
  if (clock !== undefined) {
    const now = clock.now();
    if (typeof now !== 'number' || !Number.isFinite(now)) {
      throw outOfRange("The clock's now()", 'a finite number of milliseconds', now);
    }
  }
  return counts;
}

/**
 * Refuses a heavy-hitter `threshold` above a numeric `limit` the package gives (`whose`:
 * express-rate-limit's `limit`, a route's `max`), as `WindowQuota` refuses one above its own: a
 * client is read at its sketch count up to `threshold − 1` and at its exact count from 1 once it
 * reaches the threshold, so above the limit it was admitted again after being refused (requests
 * 1–10 and 50–59 with limit 10 and threshold 50). A limit below 1 refuses every request whatever
 * the threshold, so it takes any; a limit that is not a number (a function) is known only per
 * request.
 */
export function thresholdWithin(threshold: number | undefined, limit: unknown, whose: string): void {
  if (threshold === undefined || typeof limit !== 'number' || !(limit >= 1)) return;
  const most = Math.floor(limit);
  if (threshold > most) throw outOfRange('The "threshold" option', `an integer in [1, ${most}] (${whose})`, threshold);
}

/**
 * `key` as a string by `convert`, or for a key that has no string form (a symbol, an object
 * without `toString`) the `TypeError` `ERR_INVALID_ARG_TYPE` of any other argument of the wrong
 * type, instead of the engine's uncoded one.
 */
export function keyText(key: unknown, convert: (key: unknown) => string): string {
  try {
    return convert(key);
  } catch {
    throw invalidType('The "key" argument', 'a string or have a string form', key);
  }
}
