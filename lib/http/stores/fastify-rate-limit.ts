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
 *   with `ERR_KEEPCOUNT_UNSUPPORTED` instead, and the first failure of each `code` a store class
 *   meets is also a process warning: with `skipOnError` the plugin drops store errors without a
 *   word.
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
 *   callback with `ERR_INVALID_ARG_TYPE`.)
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
import { invalidType, outOfRange, withCode } from '../../errors.js';
import type { Rate } from '../../rate.js';
import { WindowQuota, type HeavyHitterSettings } from '../window-quota.js';
import { checkedStoreOptions, keyText, storeQuota, thresholdWithin, wholeWindowMs } from './window.js';

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
   * `max` share a window's quota) unless you set one at most your smallest `max`: a route whose
   * numeric `max` is below it is refused where it is registered (a client is admitted up to
   * `max + threshold − 1` requests a window, and one above would be admitted again after its
   * `max`), and a `max` function answering less is a process warning, once.
   */
  heavyHitters?: boolean | HeavyHitterSettings;
  /**
   * A `Rate` to count in, chiefly `Rate.openShared(name, …)` so that one limit holds for every
   * process of a host. Every `timeWindow` must then be the rate's `intervalMs` (a numeric one is
   * refused where its route is registered, a `timeWindow` function's answer through the plugin's
   * callback) and routes share its counts; heavy hitters are off (they are per process), and
   * `clients`, `hashes`, `slots`, `seed` and `clock` are the rate's own.
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
  /** `false`: the plugin's own options limit no route, each route's `child()` has its own. */
  global?: boolean;
  /** The route's window: whole milliseconds when a number, else a function known per request. */
  timeWindow?: unknown;
  /** The route's limit: a number, or a function known per request. */
  max?: unknown;
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
 * (see the module notes on why never an error), `ERR_INVALID_ARG_TYPE` if it has none.
 */
const countedKey = (key: unknown): string => (typeof key === 'string' ? key : keyText(key, String));

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
 * the `TypeError` or `RangeError` a `WindowQuota` would, naming it (a `clock` is read once, and
 * refused unless it answers a finite number). Names it does not know are ignored, as by
 * `KeepcountStore` and `WindowQuota`. What needs a route's options is checked as the plugin makes
 * the route's store (the constructor for its own options, `child()` for a route's
 * `config.rateLimit`), so registering the plugin or the route fails: a numeric `timeWindow`
 * other than a given `rate`'s `intervalMs`, and a numeric `max` below the heavy-hitter threshold
 * (a `max` of 0, refusing everyone, takes any). What only a request can tell (a `timeWindow` or
 * `max` function's answer, a clock that stops answering numbers) fails or is found per request:
 * errors go through the callback of `incr` and `read`, and since the plugin's `skipOnError` drops
 * them without a word, the first of each `code` a store class meets is also a process warning
 * (`KeepcountWarning`), as is a `max` below the threshold, once.
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
  const counts = checkedStoreOptions(options);
  /** The heavy-hitter threshold, which a route's `max` must not be below; `undefined` when off. */
  const threshold = counts.rate === undefined ? counts.heavy?.threshold : undefined;
  /** What a store of this class warned of: each once per class. */
  const warned = new Set<string>();
  const warnOnce = (what: string, message: string, code: string | undefined): void => {
    if (warned.has(what)) return;
    warned.add(what);
    process.emitWarning(message, { type: 'KeepcountWarning', code });
  };
  /** Passes `error` to the plugin's `callback`, warning of the first of its code (see above). */
  const fail = (error: Error & { code?: string }, callback: FastifyStoreCallback): void => {
    warnOnce(`error ${error.code ?? error.name}`, error.message, error.code);
    callback(error);
  };
  /** What the plugin tells of a route, checked where the route is registered (see above). */
  const checkRoute = (params: object | undefined): void => {
    const { timeWindow, max } = (params ?? {}) as FastifyStoreParams;
    if (rate !== undefined && typeof timeWindow === 'number') {
      const windowMs = wholeWindowMs('The "timeWindow" option', timeWindow);
      if (rate.intervalMs !== windowMs) {
        throw outOfRange(
          'The "rate" option',
          `a Rate whose intervalMs is the route's timeWindow (${windowMs})`,
          rate.intervalMs,
        );
      }
    }
    thresholdWithin(threshold, max, "the route's max");
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
      // With `global: false` the plugin's own options (its default 60 s window) limit no route.
      if ((params as FastifyStoreParams | undefined)?.global !== false) checkRoute(params);
    }

    incr(key: string, callback: FastifyStoreCallback, timeWindow: number, max: number): void {
      if (threshold !== undefined && typeof max === 'number' && max >= 1 && threshold > max) {
        warnOnce(
          'threshold',
          `The keepcount store's heavy-hitter threshold (${threshold}) is above the max (${max}) a request was ` +
            `limited by: a client reads its sketch count up to ${threshold - 1}, then its exact count from 1 on, ` +
            'so it is admitted again after its max. Set heavyHitters.threshold at most the smallest max',
          'ERR_OUT_OF_RANGE',
        );
      }
      let result;
      try {
        const { count, resetMs } = this.#quota(timeWindow).count(countedKey(key));
        result = { current: count, ttl: resetMs };
      } catch (error) {
        return fail(error as Error, callback);
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
        return fail(error as Error, callback);
      }
      callback(null, result);
    }

    child(routeOptions: object): FastifyStore {
      // Checked here whatever `global` says: the route's own options limit it.
      checkRoute(routeOptions);
      return new KeepcountFastifyStore(routeOptions);
    }

    #quota(timeWindow: number): WindowQuota {
      if (timeWindow === this.#lastWindow) return this.#lastQuota!;
      const windowMs = wholeWindowMs('The "timeWindow" option', timeWindow);
      let quota = this.#quotas.get(windowMs);
      if (quota === undefined) {
        if (this.#quotas.size >= MAX_TIME_WINDOWS) throw tooManyWindows(windowMs);
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
