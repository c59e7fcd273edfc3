/**
 * A custom store for @fastify/rate-limit (v11) counting in keepcount:
 * `store: KeepcountFastifyStore` (or `keepcountFastifyStore({ slots: 4096 })` for options).
 *
 * Where it differs from the plugin's exact `LocalStore`:
 * - One window for all keys (keepcount's `Rate`), starting on the first request at least
 *   `timeWindow` after the previous start; `ttl` is what is left of it, the same for every key.
 *   One sketch pair per distinct `timeWindow` value, at most 16 per store
 *   (per route with its own `config.rateLimit`): a `timeWindow` function returning ever-new values
 *   (the milliseconds left until midnight, say) would count every request in a quota of its own,
 *   so it would never limit and its memory would grow without bound; past the cap `incr` fails
 *   with `ERR_KEEPCOUNT_UNSUPPORTED` instead, and the first such failure of a store class is also
 *   a process warning: with `skipOnError` the plugin drops store errors without a word.
 * - `current` is a count-min estimate: never low, sometimes high on a collision in every row.
 * - `continueExceeding` and `exponentialBackoff` extend one key's window; a shared window cannot,
 *   so the constructor refuses them rather than silently ignoring them.
 * - Memory is fixed per sketch (16 × hashes × slots bytes, sized from `clients`); the plugin's
 *   `cache` (LRU size) option does not apply.
 * - A key is counted as a string: a number (which the plugin's `keyGenerator` type allows) or
 *   any other value under its `String()` form, as express-rate-limit's stores read theirs (`5`
 *   and `'5'` are one key). `undefined` from a missing header is `'undefined'`, so every request
 *   without the header shares one count, as under `LocalStore`, which keys its map by the value
 *   itself. It is never an error: with the plugin's `skipOnError`, a store error lets the request
 *   through uncounted, so a client could escape the limit by leaving out the header its key comes
 *   from. (A key `String()` throws on, such as an object with no `toString`, fails through the
 *   callback.)
 *
 * Like `LocalStore` it reads `Date.now()` by default, so tests that fake `Date` turn its windows,
 * and takes any `timeWindow` >= 0, rounded up to whole milliseconds (0 as 1 ms). (While `Date.now`
 * is the engine's own, the native core reads that clock itself, in the call it makes anyway;
 * `lib/clock.ts` `dateClock`.)
 *
 * `child(routeOptions)` gives each route with its own `config.rateLimit` separate counts, as
 * `LocalStore` does.
 *
 * @module
 */
import { dateClock, type Clock } from '../../clock.js';
import { invalidType, withCode } from '../../errors.js';
import type { Rate } from '../../rate.js';
import { quotaCounts, WindowQuota, type HeavyHitterSettings } from '../window-quota.js';
import { storeQuota, wholeWindowMs } from './window.js';

/** Options of {@link keepcountFastifyStore}. */
export interface KeepcountFastifyStoreOptions {
  /** Distinct keys expected per window; sizes the sketch (see `WindowQuotaOptions.clients`). Defaults to 10,000. */
  clients?: number;
  /** Rows of each sketch. Defaults to 4. */
  hashes?: number;
  /** Counters per row. Defaults to what `clients` needs. */
  slots?: number;
  /** The hash seed. Defaults to a random seed. */
  seed?: bigint | number;
  /** Where window time comes from, e.g. a `ManualClock`. Defaults to `Date.now()`, as `LocalStore`. */
  clock?: Clock;
  /**
   * Count clients near the limit exactly, so that none within the plugin's `max` is ever refused
   * because of other clients (see `WindowQuotaOptions.heavyHitters`). Defaults to `true`, with
   * threshold 1 (every client counted exactly up to the table's capacity: routes with different
   * `max` share a window's quota) unless you set one at most your smallest `max`.
   */
  heavyHitters?: boolean | HeavyHitterSettings;
  /**
   * A `Rate` to count in, chiefly `Rate.openShared(name, …)` so that one limit holds for every
   * process of a host. Every `timeWindow` must then be the rate's `intervalMs` (another is refused
   * through the plugin's callback) and routes share its counts; heavy hitters are off (they are
   * per process), and `clients`, `hashes`, `slots`, `seed` and `clock` are the rate's own.
   */
  rate?: Rate;
}

/**
 * The fields read from what the plugin passes to a store's constructor and `child()` (its
 * merged options; typed as any object so Fastify's `RouteOptions` fits).
 */
export interface FastifyStoreParams {
  continueExceeding?: boolean;
  exponentialBackoff?: boolean;
}

/** The callback of `incr`/`read`. */
export type FastifyStoreCallback = (error: Error | null, result?: { current: number; ttl: number }) => void;

/** @fastify/rate-limit's custom store interface (`FastifyRateLimitStore`), plus `read`. */
export interface FastifyStore {
  incr(key: string, callback: FastifyStoreCallback, timeWindow: number, max: number): void;
  read(key: string, callback: FastifyStoreCallback, timeWindow: number, max?: number): void;
  child(routeOptions: object): FastifyStore;
}

/** A store class as the plugin's `store` option takes it. */
export type FastifyStoreConstructor = new (params: object) => FastifyStore;

/**
 * Distinct `timeWindow` values one store counts in (each a sketch pair of `16 × hashes × slots`
 * bytes): enough for a `timeWindow` function choosing among plans or tiers.
 */
const MAX_TIME_WINDOWS = 16;

/**
 * The key a request is counted under: a string as it is, anything else as its `String()` form
 * (see the module notes on why never an error).
 */
const countedKey = (key: unknown): string => (typeof key === 'string' ? key : String(key));

/** The error of a store asked for one `timeWindow` value more than {@link MAX_TIME_WINDOWS}. */
function tooManyWindows(windowMs: number): Error {
  return withCode(
    new Error(
      `The keepcount store counts in at most ${MAX_TIME_WINDOWS} distinct timeWindow values, one window each; ` +
        `received a new one (${windowMs} ms) after ${MAX_TIME_WINDOWS}. A timeWindow function must choose ` +
        'among a few fixed values: one returning ever-new values would give every request a window of its own',
    ),
    'ERR_KEEPCOUNT_UNSUPPORTED',
  );
}

/** Unsupported per-key window extensions, refused by name. */
function refuseExtensions(options: object | undefined): void {
  const params = options as FastifyStoreParams | undefined;
  for (const name of ['continueExceeding', 'exponentialBackoff'] as const) {
    if (params?.[name] === true) {
      throw withCode(
        new Error(`The keepcount store shares one window between keys and cannot support ${name}`),
        'ERR_KEEPCOUNT_UNSUPPORTED',
      );
    }
  }
}

/**
 * A store class for @fastify/rate-limit with these sketch options, checked here: a bad one throws
 * the `TypeError` or `RangeError` a `WindowQuota` would, naming it. Names it does not know are
 * ignored, as by `KeepcountStore` and `WindowQuota`. Only what needs the plugin's `timeWindow` (a
 * `rate` over another interval) fails later, through the callback of `incr` and `read`.
 *
 * @example
 * ```ts
 * await app.register(import('@fastify/rate-limit'), {
 *   max: 100, timeWindow: 60_000, store: keepcountFastifyStore({ slots: 4096 }),
 * });
 * ```
 */
export function keepcountFastifyStore(options: KeepcountFastifyStoreOptions = {}): FastifyStoreConstructor {
  if (typeof options !== 'object' || options === null)
    throw invalidType('The "options" argument', 'of type object', options);
  const { heavyHitters, rate, ...sketch } = options;
  // `max` is the plugin's business: the store only counts.
  const counting = storeQuota(heavyHitters, undefined, rate);
  // Quotas are made per `timeWindow`, at the first request in each: a bad option found then failed
  // every request, and the plugin's `skipOnError` let each one through uncounted, without a word.
  // So every option is checked now, as each quota's constructor will, without making a sketch.
  quotaCounts({ ...sketch, ...counting }, counting.limit);
  /** Whether a store of this class warned of too many `timeWindow` values (once per class). */
  let warned = false;
  const refuseWindow = (windowMs: number): Error => {
    const error = tooManyWindows(windowMs);
    if (!warned) {
      warned = true;
      process.emitWarning(error.message, { type: 'KeepcountWarning', code: 'ERR_KEEPCOUNT_UNSUPPORTED' });
    }
    return error;
  };

  return class KeepcountFastifyStore implements FastifyStore {
    readonly #quotas = new Map<number, WindowQuota>();
    /**
     * The `timeWindow` of the last call and its quota: the plugin passes a route's same value on
     * every request, so the check and the map lookup are done once per value, not per request.
     * `NaN` never matches.
     */
    #lastWindow = NaN;
    #lastQuota: WindowQuota | undefined;

    constructor(params: object) {
      refuseExtensions(params);
    }

    incr(key: string, callback: FastifyStoreCallback, timeWindow: number): void {
      let result;
      try {
        const { count, resetMs } = this.#quota(timeWindow).count(countedKey(key));
        result = { current: count, ttl: resetMs };
      } catch (error) {
        return callback(error as Error);
      }
      callback(null, result);
    }

    /** The plugin's non-mutating peek (`createRateLimit(...)(req, { increment: false })`). */
    read(key: string, callback: FastifyStoreCallback, timeWindow: number): void {
      let result;
      try {
        const { count, resetMs } = this.#quota(timeWindow).current(countedKey(key));
        result = { current: count, ttl: count > 0 ? resetMs : 0 };
      } catch (error) {
        return callback(error as Error);
      }
      callback(null, result);
    }

    child(routeOptions: object): FastifyStore {
      return new KeepcountFastifyStore(routeOptions);
    }

    #quota(timeWindow: number): WindowQuota {
      if (timeWindow === this.#lastWindow) return this.#lastQuota!;
      const windowMs = wholeWindowMs('The "timeWindow" option', timeWindow);
      let quota = this.#quotas.get(windowMs);
      if (quota === undefined) {
        if (this.#quotas.size >= MAX_TIME_WINDOWS) throw refuseWindow(windowMs);
        quota = new WindowQuota({ ...sketch, ...counting, windowMs, clock: sketch.clock ?? dateClock });
        this.#quotas.set(windowMs, quota);
      }
      this.#lastWindow = timeWindow;
      this.#lastQuota = quota;
      return quota;
    }
  };
}

/**
 * The store class with default sketch options: `store: KeepcountFastifyStore`.
 *
 * @example
 * ```ts
 * await app.register(import('@fastify/rate-limit'), { max: 100, timeWindow: '1 minute', store: KeepcountFastifyStore });
 * ```
 */
export const KeepcountFastifyStore: FastifyStoreConstructor = keepcountFastifyStore();
