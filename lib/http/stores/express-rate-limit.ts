/**
 * A store for express-rate-limit (v8) counting in keepcount: `store: new KeepcountStore()`.
 *
 * Where it differs from express-rate-limit's exact `MemoryStore`:
 * - One window for all keys (keepcount's `Rate`): it starts on the first request at least
 *   `windowMs` after the previous start, so `resetTime` is the same for every key, and a client's
 *   first window may be shorter than `windowMs` (see `WindowQuota` for the worst case).
 * - `totalHits`, with heavy hitters (the default): a client's exact count since it entered the
 *   table, which it does once the sketch counts it at the threshold (`ceil(limit / 4)` for a
 *   numeric `limit`), so it reads up to `threshold − 1` below the true count and a client is
 *   refused after at most `limit + threshold − 1` requests (124 for `limit: 100`); never high
 *   because of other clients while the table has room. `heavyHitters: { threshold: 1 }` counts
 *   every client exactly from its first request (up to `capacity` per window). A client the table
 *   has no room for, and every client with `heavyHitters: false`, reads its count-min estimate:
 *   never low, sometimes high when it collides with busy keys in every row (see `slots`).
 * - `resetKey(key)` and `decrement(key)` lower the exact count of a client in the table (never
 *   below zero). The sketch is shared by all keys and never lowered with heavy hitters, so a client
 *   counted there keeps its estimate until the window turns. With `heavyHitters: false` (and over
 *   a given `rate`), `resetKey` refunds the key's estimate from its counters and `decrement` one
 *   while the estimate is above zero (`Rate.refund`): each counter stops at zero, so keys sharing
 *   one read low, never below zero, until the window turns, and resets racing in other threads or
 *   processes of a shared rate take the count once between them (a read and a subtraction took
 *   it twice: −50 after two resets of 50, and 50 requests of extra quota). `resetAll()` is exact
 *   (fresh counts).
 * - A key that is not a string counts under its string form (`prefix + key`: `5` and `'5'` are one
 *   key); one with none (a symbol) is `ERR_INVALID_ARG_TYPE`.
 * - `get(key)` never returns `undefined`: a key never seen reads `{ totalHits: 0, resetTime }`
 *   (`MemoryStore` returns `undefined` for a key it never saw or whose window has ended).
 *
 * Like `MemoryStore` it reads `Date.now()` (fake timers work; see `dateClock`) and takes any
 * `windowMs` >= 0, rounded up to whole milliseconds (0 as 1 ms).
 *
 * Memory is fixed (16 × hashes × slots bytes, sized from `clients`) however many clients there
 * are; nothing is swept.
 *
 * With `rate: Rate.openShared(...)` every process of a host counts in one window (node:cluster,
 * PM2): the store then counts in sketches alone, and `resetAll()` is refused, since one process
 * cannot start the others' counts afresh (`Rate.unlink` before the processes start does).
 *
 * @module
 */
import type { Clock } from '../../clock.js';
import type { HeavyTalker } from '../../core.js';
import { closedError } from '../../closed.js';
import { invalidType, withCode } from '../../errors.js';
import { MAX_VALUE, topArguments } from '../../heavy.js';
import type { Rate } from '../../rate.js';
import { WindowQuota, type HeavyHitterSettings } from '../window-quota.js';
import { checkedStoreOptions, DateReading, keyText, storeQuota, thresholdWithin, wholeWindowMs } from './window.js';

/** express-rate-limit's `ClientRateLimitInfo`. */
export interface ClientRateLimitInfo {
  totalHits: number;
  resetTime: Date | undefined;
}

/** Options of {@link KeepcountStore}. */
export interface KeepcountStoreOptions {
  /**
   * Prepended to every key counted. Each express-rate-limit instance needs a store of its own (it
   * refuses a store reused by a second); the prefix keeps apart the counts of stores that count in
   * one given `rate` (one `Rate.openShared` segment for several limiters). Defaults to `''`.
   */
  prefix?: string;
  /** Distinct keys expected per window; sizes the sketch (see `WindowQuotaOptions.clients`). Defaults to 10,000. */
  clients?: number;
  /** Rows of the sketch. Defaults to 4. */
  hashes?: number;
  /** Counters per row. Defaults to what `clients` needs. */
  slots?: number;
  /** The hash seed. Defaults to a random seed. */
  seed?: bigint | number;
  /**
   * Count clients near the limit exactly, so that none within express-rate-limit's `limit` is ever
   * refused because of other clients (see `WindowQuotaOptions.heavyHitters`). Defaults to `true`,
   * with the threshold `ceil(limit / 4)` when `limit` is a number (a client is then refused after
   * at most `limit + threshold − 1` requests) and 1 (every client counted exactly, up to the
   * table's capacity) when it is a function; `{ threshold: 1 }` makes a numeric limit exact too.
   * A threshold above a numeric `limit` is refused at `init()` (a client would be admitted again
   * after its limit: requests 1–10 and 50–59 with limit 10 and threshold 50). One you give with a
   * `limit` function is not checked, and no warning says so: express-rate-limit asks the function
   * after the store has counted, and never tells the store its answer (the Fastify store, which is
   * told, warns). Keep every answer at least the threshold: answering 3 under threshold 5 admits
   * a client's requests 1–3 and 5–7 each window.
   */
  heavyHitters?: boolean | HeavyHitterSettings;
  /**
   * Where window time comes from (e.g. a `ManualClock`); `resetTime` is `Date.now()` plus what is
   * left. Defaults to `Date.now()`, as `MemoryStore`.
   */
  clock?: Clock;
  /**
   * A `Rate` to count in, whose `intervalMs` is express-rate-limit's `windowMs`: chiefly
   * `Rate.openShared(name, …)`, so that one limit holds for every process of a host. Counts are
   * then sketch estimates (heavy hitters are per process, so `heavyHitters` must be absent or
   * `false`), and `clients`, `hashes`, `slots`, `seed` and `clock` are the rate's own.
   */
  rate?: Rate;
}

/**
 * express-rate-limit's `Store` interface on a keepcount sketch.
 *
 * @example
 * ```ts
 * import { rateLimit } from 'express-rate-limit';
 * import { KeepcountStore } from 'keepcount/http';
 * app.use(rateLimit({ windowMs: 60_000, limit: 100, store: new KeepcountStore() }));
 * ```
 */
export class KeepcountStore {
  /** Prepended to keys. */
  readonly prefix: string;
  /**
   * Whether counts of one instance never affect another's: `true` unless a `rate` is given, which
   * other stores may count in too. express-rate-limit's check that a request is counted once per
   * key tells stores apart by instance when `true`, else by class name and `prefix`: two limiters
   * counting one request in one given rate under one prefix are reported (`ERR_ERL_DOUBLE_COUNT`).
   */
  readonly localKeys: boolean;
  readonly #options: KeepcountStoreOptions;
  #quota: WindowQuota | undefined;
  /** express-rate-limit's `limit`, kept for {@link resetAll}. */
  #limit: unknown;
  /** The quota's clock when it is `Date.now()` (the default), whose last reading dates resets. */
  #date: DateReading | undefined;
  /**
   * The heavy-hitter threshold as given (1 when not given), which {@link init} checks against
   * express-rate-limit's `limit`; `undefined` with heavy hitters off.
   */
  readonly #threshold: number | undefined;
  /** What the last {@link init} threw: every later call throws it (express-rate-limit logs it). */
  #failure: unknown;
  /** Set by {@link shutdown}, cleared by {@link init}. */
  #shutDown = false;

  /**
   * Checks every option, as `keepcountFastifyStore()` does (a `TypeError` or `RangeError` naming
   * it): express-rate-limit only logs what {@link init} throws. What needs express-rate-limit's
   * `windowMs` and `limit` is checked in {@link init}.
   */
  constructor(options: KeepcountStoreOptions = {}) {
    if (typeof options !== 'object' || options === null)
      throw invalidType('The "options" argument', 'of type object', options);
    this.#options = { ...options };
    const { prefix = '' } = options;
    if (typeof prefix !== 'string') throw invalidType('The "prefix" option', 'of type string', prefix);
    const counts = checkedStoreOptions(this.#options);
    this.#threshold = counts.rate === undefined ? counts.heavy?.threshold : undefined;
    this.prefix = prefix;
    this.localKeys = options.rate === undefined;
  }

  /**
   * Called by express-rate-limit with its options; takes `windowMs` and a numeric `limit` from
   * them. A `windowMs` out of range, a heavy-hitter threshold above a numeric `limit` or a `rate`
   * over another interval throws here, and every later call throws the same error:
   * express-rate-limit catches what `init()` throws and logs it, so its requests then fail by that
   * error's code (`passOnStoreError: true` lets them through uncounted, logging it each time).
   */
  init(options: { windowMs: number; limit?: unknown }): void {
    const { clients, hashes, slots, seed, clock, heavyHitters, rate } = this.#options;
    try {
      const windowMs = wholeWindowMs('The "windowMs" option', options.windowMs);
      thresholdWithin(this.#threshold, options.limit, "express-rate-limit's limit");
      // Deciding is express-rate-limit's business: the store only counts.
      const quota = storeQuota(heavyHitters, options.limit, rate);
      // A given rate keeps its own (monotonic) clock, and the `clock` option is ignored then.
      const date = clock === undefined && rate === undefined ? new DateReading() : undefined;
      this.#quota = new WindowQuota({ ...quota, windowMs, clients, hashes, slots, seed, clock: clock ?? date });
      this.#date = date;
      this.#limit = options.limit;
      this.#failure = undefined;
    } catch (error) {
      this.#failure = error;
      this.#quota = undefined;
      throw error;
    }
    this.#shutDown = false;
  }

  /** Counts a hit for `key`. */
  increment(key: string): ClientRateLimitInfo {
    const quota = this.#ready();
    const { count, resetMs } = quota.count(this.#key(key));
    return { totalHits: count, resetTime: this.#resetTime(resetMs) };
  }

  /** Takes back one hit, never below zero (see the module notes on colliding keys). */
  decrement(key: string): void {
    const quota = this.#ready();
    const k = this.#key(key);
    // A refund stops each counter at zero, so two racing over a shared rate cannot pass it either.
    if (quota.current(k).count > 0) quota.adjust(k, -1);
  }

  /** Takes back `key`'s current count, never below zero (see the module notes on sharing). */
  resetKey(key: string): void {
    const quota = this.#ready();
    const k = this.#key(key);
    const { count } = quota.current(k);
    // In steps a heavy-hitter table takes (2^32 − 1 at most), for a key counted past that.
    for (let left = count; left > 0; left -= MAX_VALUE) quota.adjust(k, -Math.min(left, MAX_VALUE));
  }

  /** `key`'s hits and reset time; `{ totalHits: 0, … }` for a key not counted in this window. */
  get(key: string): ClientRateLimitInfo {
    const quota = this.#ready();
    const { count, resetMs } = quota.current(this.#key(key));
    return { totalHits: count, resetTime: this.#resetTime(resetMs) };
  }

  /**
   * The `n` clients with the most hits in the current window (`'previous'`: the last complete
   * one), with bounds on their counts; empty before `init()` or with `heavyHitters: false`.
   */
  topTalkers(n: number, window: 'current' | 'previous' | 'both' = 'current'): HeavyTalker[] {
    const quota = this.#quota;
    if (quota !== undefined) return quota.topTalkers(n, window);
    topArguments(n, window);
    return [];
  }

  /**
   * Forgets every count (fresh sketches). Refused with `ERR_KEEPCOUNT_UNSUPPORTED` on a store
   * counting in a given `rate`: other processes count there too.
   */
  resetAll(): void {
    const quota = this.#ready();
    // As every other call after shutdown(): counting afresh would bring back what it freed.
    if (this.#shutDown) throw closedError('KeepcountStore');
    if (this.#options.rate !== undefined) {
      throw withCode(
        new Error('KeepcountStore cannot reset a Rate it was given: unlink a shared Rate before its processes start'),
        'ERR_KEEPCOUNT_UNSUPPORTED',
      );
    }
    this.init({ windowMs: quota.windowMs, limit: this.#limit });
    // The old counts go now, not when the collector gets to them (native memory on that backend).
    quota.close();
  }

  /**
   * express-rate-limit's clean-up hook (its `MemoryStore` stops a timer there): frees the counts
   * now rather than when the garbage collector gets to them. A given `rate` stays open (it is the
   * caller's). Later counting calls throw `ERR_KEEPCOUNT_CLOSED`; `init()` starts afresh.
   */
  shutdown(): void {
    this.#quota?.close();
    this.#shutDown = this.#quota !== undefined;
  }

  /**
   * When the window ends, as express-rate-limit wants it: the `Date.now()` reading the quota just
   * counted at plus `resetMs`. On another clock (a `rate`, a `clock`) the quota measured `resetMs`
   * on its own milliseconds, out of step with `Date.now()`'s by up to 1 ms either way, so the date
   * is taken 1 ms earlier: express-rate-limit drops a refund (`skipFailedRequests`,
   * `skipSuccessfulRequests`) once `Date.now()` reaches it, and a date 1 ms late let a refund of the
   * last window take back a request of the new one (1–2 windows in 81 of 20 ms).
   */
  #resetTime(resetMs: number): Date {
    const date = this.#date;
    return new Date(date === undefined ? Date.now() + resetMs - 1 : date.last + resetMs);
  }

  /**
   * The quota, or what {@link init} threw, or `ERR_KEEPCOUNT_UNINITIALIZED` before any `init()`.
   */
  #ready(): WindowQuota {
    const quota = this.#quota;
    if (quota !== undefined) return quota;
    if (this.#failure !== undefined) throw this.#failure;
    throw withCode(
      new Error('KeepcountStore used before init(): pass it to express-rate-limit'),
      'ERR_KEEPCOUNT_UNINITIALIZED',
    );
  }

  /**
   * `key` under the prefix: a key that is not a string in its string form, as `prefix + key`
   * gives it (`5` and `'5'` are one key); one with none (a symbol) is `ERR_INVALID_ARG_TYPE`.
   */
  #key(key: string): string {
    return typeof key === 'string' ? this.prefix + key : keyText(key, (k) => this.prefix + (k as string));
  }
}
