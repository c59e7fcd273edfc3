/**
 * The window and the clock the stores count on, as the exact stores they replace have them:
 * express-rate-limit's `MemoryStore` and @fastify/rate-limit's `LocalStore` both read `Date.now()`
 * and take any window length.
 */
import { ForwardTime, type Clock } from '../../clock.js';
import { invalidType, outOfRange } from '../../errors.js';
import type { Rate } from '../../rate.js';
import type { HeavyHitterSettings, WindowQuotaOptions } from '../window-quota.js';

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
