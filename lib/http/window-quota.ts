/**
 * The framework-neutral request quota: a fixed window per key, counted in keepcount
 * {@link HeavyHitters} (exact for every client near its limit) or in a plain {@link Rate}.
 */
import { validateClock, type Clock } from '../clock.js';
import { closedError, dispose } from '../closed.js';
import type { HeavyStats, HeavyTalker } from '../core.js';
import { invalidType, outOfRange } from '../errors.js';
import { HeavyHitters, MAX_CAPACITY, MAX_VALUE, topArguments } from '../heavy.js';
import { MAX_COUNTERS, MAX_HASHES } from '../limits.js';
import { storedKey } from '../long-key.js';
import { integerOption, optionsObject, seedOption, shapeOptions } from '../options.js';
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

/** Slots for `clients` with `hashes` rows, checked against the sketch size limit. */
function clientSlots(clients: number, hashes: number): number {
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
  /** Where time comes from, e.g. a `ManualClock` in tests. Defaults to the process's monotonic clock. */
  clock?: Clock;
  /**
   * Count clients near their limit exactly, so that **a client that sent at most `limit` requests
   * in the window is never refused, whatever other clients send** (see {@link WindowQuota}).
   * `true` (the default) or settings; `false` counts in the sketch alone, which a flood of
   * distinct keys can turn against innocent clients.
   */
  heavyHitters?: boolean | HeavyHitterSettings;
  /**
   * A `Rate` to count in instead of a new one, with an `intervalMs` equal to `windowMs`: chiefly
   * `Rate.openShared(name, …)`, so that one limit holds for every process of a host (node:cluster,
   * PM2). Counts are then sketch estimates, as with `heavyHitters: false` (heavy hitters are
   * per process), and `clients`, `hashes`, `slots`, `seed` and `clock` are the rate's own.
   */
  rate?: Rate;
}

/** How {@link WindowQuota} tracks clients near their limit. */
export interface HeavyHitterSettings {
  /**
   * The sketch count at which a client is counted exactly: an integer in [1, `limit`]. A client
   * over the limit is refused once it sent at most `limit + threshold − 1` requests in the window.
   * Defaults to `ceil(limit / 4)` (at least 1): at most 25% over the limit, and clients sending
   * less than a quarter of it never take a table entry.
   */
  threshold?: number;
  /**
   * Clients counted exactly per window: an integer in [1, 2^24]. When more clients than this reach
   * the threshold in one window, the later ones are judged by the sketch alone, as with
   * `heavyHitters: false` (counted in {@link WindowQuota.stats}'s `overflowEvents`). Defaults to
   * 2 × `clients` (20,000: ~2.6 MB for the two windows' tables with address keys; an entry holds
   * its key, so a custom `key` of up to 256 code units can take up to ~1 KB an entry, ~40 MB for
   * the two, about 2.5 times that on the fallback).
   */
  capacity?: number;
}

/** Table entries per expected client: room for every client of a window plus as many flooders. */
export const CAPACITY_PER_CLIENT = 2;

/**
 * Counts requests per key in fixed windows and decides whether each is within `limit`.
 *
 * Semantics, and where they differ from an exact per-key counter:
 * - One window for all keys, as in keepcount's `Rate`: it starts on the first request at least
 *   `windowMs` after the previous start. A client's first window may therefore be shorter (1 ms
 *   to `windowMs`), so a new client can get two windows' worth within 1 ms of arriving, which
 *   per-key windows allow (2 × `limit` − 1) only a window after the first request. A window
 *   admits a client at most `limit + threshold − 1` requests with heavy hitters (below), `limit`
 *   without, so in any span of `windowMs` at most 2 × (`limit + threshold − 1`): 248 for limit 100
 *   at the default threshold of 25, 2 × `limit` with `threshold: 1` or `heavyHitters: false`,
 *   where per-key windows admit 2 × `limit`.
 * - With heavy hitters (the default), every request goes to a count-min sketch, and a client whose
 *   sketch count reaches `threshold` (≤ `limit`) is counted exactly from then on, in a table of
 *   `capacity` clients per window. A request is refused only when its client's exact count is over
 *   `limit`. So, as long as the table has room:
 *   - **no false positives**: a client that sent at most `limit` requests in the window is never
 *     refused, whatever other clients send (a sketch can only over-count, so it never refuses on
 *     its own);
 *   - a client over the limit is refused after at most `limit + threshold − 1` requests in the
 *     window (the requests before it entered the table are bounded by `threshold − 1`).
 *   When more than `capacity` clients reach the threshold in one window (a flood from that many
 *   addresses), the later ones are judged by their sketch estimate, which can refuse an innocent
 *   client as `heavyHitters: false` would; {@link stats} counts those requests (`overflowEvents`).
 *
 *   A decision's `remaining` (the headers' `r`) is `limit` less the client's upper bound: for a
 *   tracked client its exact count plus `threshold − 1` (the most it can have sent before it
 *   entered), else its sketch estimate. Not `limit` less the exact count, which leaves out the
 *   requests before entry: `r` then jumped back up to about `limit` the moment a client entered,
 *   mid-window (76 then 99 at the 24th and 25th of 100 requests), and a client pacing itself by
 *   the header saw its quota refill. The bound only grows within a window, so `r` only falls,
 *   never overstates what is left, and is 0 by the first refusal; a client over the limit may
 *   still be admitted with `r=0`, up to `limit + threshold − 1` requests as above.
 * - With `heavyHitters: false`, counts are count-min sketch estimates: never low, but a key that
 *   collides with other keys in every row reads high and can be refused early. The sketch is sized
 *   from the `clients` you expect per window ({@link slotsFor}): with that many keys, a wrong
 *   refusal has probability at most 1 in 1,000 per request; with 10× as many keys (a flood from
 *   many addresses) it is about 1 in 2.
 * - Memory is `16 × hashes × slots` bytes for the sketches plus, with heavy hitters, at most
 *   `capacity` entries (~80 bytes with an address for its key natively, ~360 in the fallback) per
 *   window; nothing is swept. A key longer than 256 UTF-16 code units is stored, counted and
 *   listed by {@link topTalkers} in a 257-unit form (its first 240 units, `'…'`, 16 hex digits of
 *   its SHA-256; see `lib/long-key.ts`), so clients choosing their keys (a `key` read from a
 *   header) cannot make entries large. Two long keys then share a count only if their 64-bit
 *   digests collide: probability at most `n² / 2^65` for `n` long keys in a window. The decision's `key`, and the sketch of `heavyHitters: false`
 *   or a given `rate` (which store no keys), keep the key as given.
 * - Refused requests count too (as express-rate-limit's do), so a flooding client stays refused
 *   until the window turns, not longer.
 *
 * @example
 * ```ts
 * const quota = new WindowQuota({ limit: 100, windowMs: 60_000 });
 * const decision = quota.consume(clientIp(req));
 * if (!decision.allowed) refuse(decision);
 * quota.topTalkers(10); // who is sending the most in this window, with exact counts
 * ```
 */
export class WindowQuota implements Disposable {
  /** Requests allowed per key per window. */
  readonly limit: number;
  /** The window in milliseconds. */
  readonly windowMs: number;
  /** The policy name in the headers. */
  readonly policy: string;
  /** Where requests are counted: heavy hitters, or a plain rate with `heavyHitters: false`. */
  #counts: HeavyHitters | Rate;
  /** Whether the quota made {@link #counts} (and frees it on close), rather than being given a `rate`. */
  readonly #owned: boolean;
  /** True once {@link close} ran. */
  #closed = false;
  /** Decisions made since construction, for metrics. */
  #allowed = 0;
  #refused = 0;

  constructor(options: WindowQuotaOptions) {
    const o = optionsObject(options);
    this.limit = integerOption('limit', o.limit, 0, Number.MAX_SAFE_INTEGER);
    this.windowMs = integerOption('windowMs', o.windowMs, 1, 2 ** 52);
    this.policy = policyName(o.policy ?? 'default');
    const counts = quotaCounts(o, this.limit);
    this.#owned = counts.rate === undefined;
    if (counts.rate !== undefined) {
      this.#counts = rateOver(counts.rate, this.windowMs);
    } else {
      const sketch = { ...counts.sketch, intervalMs: this.windowMs };
      this.#counts = counts.heavy === undefined ? new Rate(sketch) : new HeavyHitters({ ...sketch, ...counts.heavy });
    }
  }

  /**
   * Counts one request (or `cost`) for `key` and decides on it. The decision's `count` is what is
   * compared with `limit` ({@link count}'s); its `remaining` (the headers' `r`) is `limit` less an
   * upper bound of the key's count in the window, at least 0. The two differ only for a client
   * counted exactly: see `remaining` in {@link WindowQuota}.
   */
  consume(key: string, cost = 1): RateLimitDecision {
    const { count, resetMs, upper } = this.#counted(key, cost);
    const allowed = count <= this.limit;
    if (allowed) this.#allowed++;
    else this.#refused++;
    return {
      allowed,
      policy: this.policy,
      limit: this.limit,
      count,
      remaining: Math.max(0, this.limit - upper),
      resetMs,
      windowMs: this.windowMs,
      key,
    };
  }

  /**
   * Counts one request (or `cost`) for `key` without deciding: its count in the current window
   * (the number {@link consume} compares with `limit`) and the milliseconds until the window ends.
   * For callers that decide themselves, as the express-rate-limit and Fastify stores' packages do.
   */
  count(key: string, cost = 1): { count: number; resetMs: number } {
    const { count, resetMs } = this.#counted(key, cost);
    return { count, resetMs };
  }

  /**
   * Adds `delta` to `key`'s count in the current window; a negative `delta` is a refund, which
   * never takes a count below zero. With heavy hitters it lowers a tracked client's exact count
   * (the sketch, shared by all keys, is not lowered); without, or over a given `rate`, it lowers
   * the key's sketch counters, each stopping at zero (`Rate.refund`), so refunds racing over a
   * shared rate take each count once, and a refund past the key's own count leaves keys sharing
   * its counters reading low, never below zero, until the window turns.
   */
  adjust(key: string, delta: number): void {
    quotaArgument('delta', delta, -MAX_VALUE);
    const counts = this.#counts;
    if (!(counts instanceof HeavyHitters)) {
      if (delta < 0) counts.refund(key, -delta);
      else counts.observe(key, delta);
    } else if (delta > 0) counts.incr(storedKey(key), delta);
    else if (delta < 0) counts.decr(storedKey(key), -delta);
    // Nothing to count, but the key is checked and a closed quota refuses, as over a plain rate.
    else counts.count(storedKey(key));
  }

  /**
   * `key`'s count in the current window, as {@link consume} compares it with the limit (exact for a
   * tracked client, else its sketch estimate), and the milliseconds until the window ends.
   */
  current(key: string): { count: number; resetMs: number } {
    const counts = this.#counts;
    if (counts instanceof HeavyHitters) {
      return { count: this.#heavyCount(counts, key), resetMs: counts.intervalRemainingMs() };
    }
    return counts.rateWith(key, (c) => ({
      count: c.currSamples,
      // A window that has ended is replaced on the next request: a full window from now. Whole
      // milliseconds elapsed, so the exact answer is an integer: rounding drops the float error.
      resetMs: Math.max(1, Math.round((1 - c.currentIntervalFraction) * c.intervalMs)),
    }));
  }

  /**
   * The `n` clients with the most requests in `window` (defaults to `'current'`; `'previous'` is
   * the last complete window; `'both'`: the two added), most first, with bounds on their counts:
   * exact to within the threshold in each window (see `Talkers.topTalkers` for `'both'`). Empty
   * with `heavyHitters: false`, which keeps no keys. A key longer than 256 code units is listed in
   * its bounded form: first 240 units, `'…'`, 16 hex digits of its SHA-256.
   */
  topTalkers(n: number, window: 'current' | 'previous' | 'both' = 'current'): HeavyTalker[] {
    const counts = this.#counts;
    if (counts instanceof HeavyHitters) return counts.top(n, window);
    topArguments(n, window);
    this.#refuseClosed();
    return [];
  }

  /**
   * The current window's heavy-hitter counters (tracked clients, requests, overflow), or
   * `undefined` with `heavyHitters: false`.
   */
  stats(window: 'current' | 'previous' = 'current'): HeavyStats | undefined {
    const counts = this.#counts;
    if (counts instanceof HeavyHitters) return counts.stats(window);
    this.#refuseClosed();
    return undefined;
  }

  /**
   * Throws `ERR_KEEPCOUNT_CLOSED` once the quota is closed, for the calls that read no counts with
   * `heavyHitters: false` (a closed heavy-hitter table refuses them itself).
   */
  #refuseClosed(): void {
    if (this.#closed) throw closedError('Rate');
  }

  /** How many {@link consume} calls were allowed and refused since construction. */
  decisions(): { allowed: number; refused: number } {
    return { allowed: this.#allowed, refused: this.#refused };
  }

  /**
   * Frees the counts the quota made now, rather than when the garbage collector gets to it (its
   * sketches and table are native memory on the native backend). A `rate` it was given stays open:
   * it is the caller's, perhaps shared. Later counting calls and `topTalkers`/`stats` with heavy
   * hitters throw `ERR_KEEPCOUNT_CLOSED`; `decisions()` still answers. Idempotent; `using` calls it
   * too.
   */
  close(): void {
    this.#closed = true;
    if (this.#owned) {
      this.#counts.close();
      return;
    }
    // A closed stand-in of the smallest shape, so that later calls fail as for an owned rate.
    const closed = new Rate({ intervalMs: this.windowMs, hashes: 1, slots: 1, seed: 0n });
    closed.close();
    this.#counts = closed;
  }

  /** {@link close}, for `using`. */
  [dispose](): void {
    this.close();
  }

  #heavyCount(counts: HeavyHitters, key: string): number {
    const c = counts.count(storedKey(key));
    return c.standing === 'tracked' ? c.lower : c.upper;
  }

  /**
   * {@link count} for {@link consume}, with `upper`: a count `key` has certainly not exceeded in
   * the window, which `remaining` is reported from: for a tracked key its exact count plus
   * `threshold − 1` (what it can have sent before it entered), else `count` itself, an estimate.
   */
  #counted(key: string, cost: number): { count: number; resetMs: number; upper: number } {
    quotaArgument('cost', cost, 0);
    const counts = this.#counts;
    if (!(counts instanceof HeavyHitters)) {
      const { count, resetMs } = counts.observeWindow(key, cost);
      return { count, resetMs, upper: count };
    }
    const slack = counts.threshold - 1;
    if (cost === 0) {
      const c = counts.count(storedKey(key));
      const tracked = c.standing === 'tracked';
      const count = tracked ? c.lower : c.upper;
      return { count, resetMs: counts.intervalRemainingMs(), upper: tracked ? count + slack : count };
    }
    const { count, resetMs, tracked } = counts.incrWindow(storedKey(key), cost);
    return { count, resetMs, upper: tracked ? count + slack : count };
  }
}

/**
 * A `cost` (at least 0: a refund goes through `adjust`) or `delta` (at least `-MAX_VALUE`),
 * checked the same whichever structure counts: an integer of at most 2^32 − 1 in magnitude, what
 * a heavy-hitter table takes in one increment. Unchecked, a `NaN` or negative cost counted nothing
 * with heavy hitters and failed (or refunded) without.
 */
export function quotaArgument(name: string, value: unknown, min: number): void {
  if (typeof value !== 'number') throw invalidType(`The "${name}" argument`, 'of type number', value);
  if (!Number.isInteger(value) || value < min || value > MAX_VALUE) {
    throw outOfRange(`The "${name}" argument`, `an integer in [${min}, ${MAX_VALUE}]`, value);
  }
}

/**
 * What a {@link WindowQuota} counts in: a given `rate`, or a sketch of this shape, seed and clock
 * to make, with a heavy-hitter table of these settings unless `heavy` is `undefined`.
 */
export type QuotaCounts =
  | { rate: Rate }
  | {
      rate?: undefined;
      sketch: { hashes: number; slots: number; seed: bigint; clock: Clock | undefined };
      heavy: { threshold: number; capacity: number } | undefined;
    };

/**
 * Checks a quota's options other than `limit` (already checked: it bounds the threshold),
 * `windowMs` and `policy`, and resolves what the quota counts in, making nothing: the shape, seed
 * and clock too, which `Rate` and `HeavyHitters` would check only once made. The constructor's
 * checks, and so the Fastify store's at `keepcountFastifyStore()`: its quotas are made at the first
 * request of each `timeWindow`, and a bad option must fail where it was given, not in every request
 * (which the plugin's `skipOnError` lets through uncounted). Only a `rate`'s interval needs the
 * window ({@link rateOver}). A `rate` stands for `slots`, `seed` and `clock`, which are then
 * ignored unchecked, as documented; `hashes` and `clients` are checked either way.
 */
export function quotaCounts(o: Partial<WindowQuotaOptions>, limit: number): QuotaCounts {
  const hashes = integerOption('hashes', o.hashes, 1, MAX_HASHES, DEFAULT_HASHES);
  const clients = integerOption('clients', o.clients, 1, MAX_CLIENTS, DEFAULT_CLIENTS);
  const slots = o.slots ?? clientSlots(clients, hashes);
  const heavy = heavyHitterSettings(o.heavyHitters);
  if (o.rate !== undefined) return { rate: givenRate(o.rate, o.heavyHitters) };
  const sketch = {
    ...shapeOptions(hashes, slots),
    seed: seedOption(o.seed),
    clock: o.clock === undefined ? undefined : validateClock(o.clock),
  };
  if (heavy === undefined) return { sketch, heavy };
  const threshold = integerOption('threshold', heavy.threshold, 1, Math.max(1, limit), defaultThreshold(limit));
  const capacity = integerOption(
    'capacity',
    heavy.capacity,
    1,
    MAX_CAPACITY,
    Math.min(MAX_CAPACITY, CAPACITY_PER_CLIENT * clients),
  );
  return { sketch, heavy: { threshold, capacity } };
}

/**
 * The `rate` option, checked but for its interval ({@link rateOver}): a `Rate` (a keepcount/redis
 * `SyncedRate` is not one), and no heavy hitters asked for beside it.
 */
function givenRate(rate: unknown, heavyHitters: unknown): Rate {
  if (!(rate instanceof Rate)) throw invalidType('The "rate" option', 'a Rate', rate);
  if (heavyHitters !== undefined && heavyHitters !== false) {
    throw invalidType(
      'The "heavyHitters" option',
      'false or absent with "rate" (a Rate keeps no heavy hitters)',
      heavyHitters,
    );
  }
  return rate;
}

/** A given `rate` for a quota over `windowMs`: its `intervalMs` must be that window. */
function rateOver(rate: Rate, windowMs: number): Rate {
  if (rate.intervalMs !== windowMs) {
    throw outOfRange('The "rate" option', `a Rate whose intervalMs is the windowMs (${windowMs})`, rate.intervalMs);
  }
  return rate;
}

/** `ceil(limit / 4)`, at least 1: see {@link HeavyHitterSettings.threshold}. */
function defaultThreshold(limit: number): number {
  return Math.max(1, Math.ceil(limit / 4));
}

/** The `heavyHitters` option as settings, or `undefined` when it is `false`. */
export function heavyHitterSettings(value: unknown): HeavyHitterSettings | undefined {
  if (value === undefined || value === true) return {};
  if (value === false) return undefined;
  if (typeof value === 'object' && value !== null) return value;
  throw invalidType('The "heavyHitters" option', 'a boolean or an object', value);
}
