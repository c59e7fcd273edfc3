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
   * `max`), and a `max` function answering less is a process warning, once. The plugin's own
   * `max` (1000 unless given) is checked too; with `global: false` a `max` below the threshold
   * fails the requests of `fastify.rateLimit()` and `createRateLimit()` called without options
   * instead of the registration.
   */
  heavyHitters?: boolean | HeavyHitterSettings;
  /**
   * A `Rate` to count in, chiefly `Rate.openShared(name, …)` so that one limit holds for every
   * process of a host. Every `timeWindow` must then be the rate's `intervalMs` (a numeric one is
   * refused where its route is registered, a `timeWindow` function's answer through the plugin's
   * callback), the plugin's own too (60000 unless given: with `global: true`, the default, give
   * the plugin `timeWindow: rate.intervalMs` even if every route sets its own; with
   * `global: false` a mismatch fails only the requests counted under it), and routes share its
   * counts; heavy hitters are off (they are per process), and `clients`, `hashes`, `slots`,
   * `seed` and `clock` are the rate's own.
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

/**
 * @fastify/rate-limit's `timeWindow` and `max` when its options give none: it fills them in before
 * the store sees its options, so a value the store refuses may be one the user never wrote.
 */
const PLUGIN_DEFAULTS = { timeWindow: 60_000, max: 1000 } as const;

/**
 * Whose options a store is made with, for what refusing them says: a route's own (`child()`), or
 * the plugin's, limiting every route without a `config.rateLimit` of its own (`global`, the
 * plugin's default) or only `fastify.rateLimit()` and `createRateLimit()` called without options
 * (`global: false`: `unrouted`).
 */
type Scope = 'route' | 'global' | 'unrouted';

/** What `child()` passes the constructor: the options are a route's own, not the plugin's. */
const ROUTE = Symbol('route');

/** A value of the plugin's options, saying so when it is the one the plugin fills in. */
const pluginValue = (name: keyof typeof PLUGIN_DEFAULTS, value: number): string =>
  value === PLUGIN_DEFAULTS[name] ? `${value}, its default when none is given` : String(value);

/** What the plugin's `window` or `limit` applies to in `scope`. */
const pluginUse = (scope: Scope, what: 'window' | 'limit'): string =>
  scope === 'unrouted'
    ? `the ${what} of fastify.rateLimit() and createRateLimit() called without options, which fail with ` +
      'this error (global: false)'
    : `the ${what} of every route without a config.rateLimit of its own (global: true)`;

/** The other way out of a refused option of the plugin's, in `scope`. */
const pluginFix = (scope: Scope): string =>
  scope === 'unrouted' ? 'pass those calls options of their own' : 'global: false if every route has its own';

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
 * (a `max` of 0, refusing everyone, takes any). The plugin's own options are checked as the
 * plugin fills them in (`timeWindow` 60000 and `max` 1000 when not given), and the error says
 * so. With `global: false` they limit only `fastify.rateLimit()` and `createRateLimit()` called
 * without options, and may go unused: their registration goes through, and each request counted
 * under them fails with the error instead. What only a request can tell (a `timeWindow` or `max`
 * function's answer, a clock that stops answering numbers) fails or is found per request: errors
 * go through the callback of `incr` and `read`, and since the plugin's `skipOnError` drops them
 * without a word, the first of each `code` a store class meets is also a process warning
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
  /**
   * Refuses what the store cannot count in `params` (whose they are: `scope`), a `RangeError`
   * `ERR_OUT_OF_RANGE`: a numeric `timeWindow` other than the `rate`'s `intervalMs`, a numeric
   * `max` below the heavy-hitter threshold.
   */
  const checkParams = (params: object | undefined, scope: Scope): void => {
    const { timeWindow, max } = (params ?? {}) as FastifyStoreParams;
    if (rate !== undefined && typeof timeWindow === 'number') {
      const windowMs = wholeWindowMs('The "timeWindow" option', timeWindow);
      if (rate.intervalMs !== windowMs) {
        const whose =
          scope === 'route'
            ? `the route's timeWindow (${windowMs})`
            : `the plugin's timeWindow (${pluginValue('timeWindow', windowMs)}), ${pluginUse(scope, 'window')}: ` +
              `give the plugin timeWindow: ${rate.intervalMs}, or ${pluginFix(scope)}`;
        throw outOfRange('The "rate" option', `a Rate whose intervalMs is ${whose}`, rate.intervalMs);
      }
    }
    const whose =
      scope === 'route'
        ? "the route's max"
        : `the plugin's max${max === PLUGIN_DEFAULTS.max ? ` (${max} when none is given)` : ''}, ` +
          `${pluginUse(scope, 'limit')}: give the plugin a max of at least ${threshold}, or ${pluginFix(scope)}`;
    thresholdWithin(threshold, max, whose);
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

    /**
     * With `global: false`, what {@link checkParams} refused of the plugin's own options: every
     * `incr` and `read` of this store fails with it (see the constructor).
     */
    readonly #refused: Error | undefined;

    /**
     * The plugin makes its store with its own options (`child()` passes {@link ROUTE} with a
     * route's). With `global` (the plugin's default) they limit every route without a
     * `config.rateLimit` of its own, so what the store cannot count in them is refused here: the
     * plugin's registration fails. With `global: false` they limit only `fastify.rateLimit()` and
     * `createRateLimit()` called without options (the plugin then counts in this store under them)
     * and may go unused; refused here, a setup that never uses them would fail, so each request
     * counted under them fails instead, through the callback, with the error refusing them here
     * would throw. (A route's options are the plugin's with the route's own over them: `child()`
     * checks the window or limit a route takes from the plugin.)
     */
    constructor(params: object, route?: typeof ROUTE) {
      refuseExtensions(params);
      const global = (params as FastifyStoreParams | undefined)?.global !== false;
      if (route === ROUTE || global) {
        checkParams(params, route === ROUTE ? 'route' : 'global');
        return;
      }
      try {
        checkParams(params, 'unrouted');
      } catch (error) {
        this.#refused = error as Error;
      }
    }

    incr(key: string, callback: FastifyStoreCallback, timeWindow: number, max: number): void {
      if (this.#refused !== undefined) return fail(this.#refused, callback);
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
      if (this.#refused !== undefined) return fail(this.#refused, callback);
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
      // Checked whatever `global` says: the route's own options limit it.
      return new KeepcountFastifyStore(routeOptions, ROUTE);
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
