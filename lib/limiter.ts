/**
 * Per-key token buckets with live updates: the limiter of `crates/limits/src/limiter.rs`.
 *
 * @module
 */
import { active } from './backend.js';
import type { Key, LimiterCore, LimitSpec, QuotaSpec } from './core.js';
import { Stopwatch, type Clock } from './clock.js';
import { describe, invalidType, outOfRange, withCode } from './errors.js';
import { isUint8Array, validateKey } from './keys.js';

/** Largest period: 2^53 − 1 ns (about 104 days), so every period is a safe integer of nanoseconds. */
const MAX_PERIOD_NS = Number.MAX_SAFE_INTEGER;

/**
 * How fast one dimension refills and how much it holds: either `perSecond` tokens a second, or
 * `amount` tokens every `periodMs` milliseconds (for rates below one a second, or exact fractions).
 * Refill is continuous: one token every `periodMs / amount`.
 *
 * @example
 * ```ts
 * const apiCalls: RateLimit = { perSecond: 10, burst: 20 };
 * const slow: RateLimit = { amount: 1, periodMs: 60_000, burst: 5 }; // one a minute
 * ```
 */
export type RateLimit =
  | {
      /** Tokens added per second: a safe integer >= 0 (0 never refills). */
      perSecond: number;
      /** The most tokens held, and the largest cost ever admitted: a safe integer >= 0. */
      burst: number;
    }
  | {
      /** Tokens added every `periodMs`: a safe integer >= 0 (0 never refills). */
      amount: number;
      /** The period in milliseconds: a number > 0, rounded to the nanosecond, at most 2^53 − 1 ns (~104 days). */
      periodMs: number;
      /** The most tokens held, and the largest cost ever admitted: a safe integer >= 0. */
      burst: number;
    };

/**
 * What one bucket admits, in two dimensions at once. Each check is one request and costs its
 * `cost` in units (bytes, say); it is admitted only if every limited dimension has it.
 */
export interface Quota {
  /** The limit on requests. Defaults to none (unlimited). */
  requests?: RateLimit;
  /** The limit on cost units. Defaults to none (unlimited). */
  units?: RateLimit;
}

/** A {@link RateLimit} as the limiter holds it. */
export interface LimitInfo {
  /** Tokens added per period. */
  amount: number;
  /** The period in milliseconds (`perSecond` limits report 1000). */
  periodMs: number;
  /** The most tokens held. */
  burst: number;
}

/** A {@link Quota} as the limiter holds it: absent dimensions are unlimited. */
export interface QuotaInfo {
  requests?: LimitInfo;
  units?: LimitInfo;
}

/** Options of {@link Limiter}. */
export interface LimiterOptions {
  /**
   * The quota of the one bucket that every key not in the table shares. Required. Use
   * `{ requests: { perSecond: 0, burst: 0 } }` to refuse unknown keys.
   */
  bestEffort: Quota;
  /** A quota over all checks together, on top of each key's. Defaults to none. */
  overall?: Quota;
  /**
   * The key table: `[key, quota]` pairs (a `Map` works), each key starting with a full bucket.
   * Keys follow docs/format.md §1: `1` and `1n` are one key; a string and a `Uint8Array` never
   * are. Defaults to no keys.
   */
  keys?: Iterable<readonly [Key, Quota]>;
  /**
   * Where time comes from: an object whose `now()` returns milliseconds, e.g. a
   * {@link ManualClock}. Defaults to `performance.now()`.
   */
  clock?: Clock;
}

/**
 * The answer to {@link Limiter.check}. When refused, nothing was taken from any bucket, and
 * `retryAfterMs` says how long until the same check would be admitted had nothing else run
 * (to the nanosecond, so it may be fractional: round up for a `Retry-After` header), or is
 * `Infinity` when waiting never helps: the cost exceeds a burst, or a bucket short of tokens
 * never refills.
 */
export type LimiterDecision = { readonly allowed: true } | { readonly allowed: false; readonly retryAfterMs: number };

const ALLOWED: LimiterDecision = Object.freeze({ allowed: true });

/**
 * Per-key token buckets, with one best-effort bucket shared by every key not in the table and an
 * optional overall quota, updated live: like ETH's LightningFilter rate limiter, without its
 * fixed size and without a new key ever inheriting a removed key's tokens.
 *
 * Arithmetic is exact integers (nanoseconds, tokens scaled by their period), identical in the
 * native and the TypeScript backends: over any window of `t` ms a bucket admits at most
 * `burst + amount × t / periodMs` per dimension.
 *
 * @example
 * ```ts
 * const clock = new ManualClock();
 * const limiter = new Limiter({
 *   bestEffort: { requests: { perSecond: 1, burst: 1 } },
 *   keys: [['alice', { requests: { perSecond: 1, burst: 3 } }]],
 *   clock,
 * });
 * limiter.check('alice'); // { allowed: true }, three times
 * limiter.check('alice'); // { allowed: false, retryAfterMs: 1000 } on the fourth
 * ```
 */
export class Limiter {
  readonly #core: LimiterCore;
  readonly #stopwatch: Stopwatch;
  #bestEffort: QuotaInfo;
  #overall: QuotaInfo | undefined;

  constructor(options: LimiterOptions) {
    if (typeof options !== 'object' || options === null) {
      throw invalidType('The "options" argument', 'of type object', options);
    }
    const bestEffort = quotaSpec('The "bestEffort" option', options.bestEffort);
    const overall = options.overall === undefined ? null : quotaSpec('The "overall" option', options.overall);
    const keys = options.keys === undefined ? undefined : entries('keys', 'option', options.keys);
    this.#stopwatch = new Stopwatch(options.clock);
    this.#core = new active.Limiter(bestEffort);
    this.#bestEffort = quotaInfo(bestEffort);
    if (overall !== null) {
      this.#core.setOverall(overall, 0);
      this.#overall = quotaInfo(overall);
    }
    if (keys !== undefined && !this.#core.replaceKeys(keys[0], keys[1], 0)) throw duplicateKey();
  }

  /**
   * Checks one request costing `cost` units for `key` (the key's own bucket, or the best-effort
   * bucket if it is not in the table, and the overall bucket if set) and takes it if every
   * limited dimension of every bucket has it.
   *
   * @param cost - Units this request costs: a safe integer >= 0. Defaults to 1.
   */
  check(key: Key, cost = 1): LimiterDecision {
    const k = validateKey(key);
    if (typeof cost !== 'number') throw invalidType('The "cost" argument', 'of type number', cost);
    if (!Number.isSafeInteger(cost) || cost < 0) throw outOfRange('The "cost" argument', 'a safe integer >= 0', cost);
    const wait = this.#core.check(k, cost, this.#elapsed());
    return wait === 0 ? ALLOWED : { allowed: false, retryAfterMs: wait };
  }

  /**
   * Changes `key`'s quota, keeping its tokens: refilled at the old rate up to now, then capped at
   * the new burst (a dimension that was unlimited starts full).
   *
   * @throws `Error` `ERR_KEEPCOUNT_UNKNOWN_KEY` if `key` is not in the table.
   */
  setQuota(key: Key, quota: Quota): void {
    const k = validateKey(key);
    const spec = quotaSpec('The "quota" argument', quota);
    if (!this.#core.setQuota(k, spec, this.#elapsed())) {
      throw withCode(
        new Error(`The key is not in the limiter's table. Received ${describe(key)}`),
        'ERR_KEEPCOUNT_UNKNOWN_KEY',
      );
    }
  }

  /**
   * Replaces the whole key table at once: keys that stay keep their bucket and tokens (capped to
   * a changed quota), added keys start full, removed keys fall to the best-effort bucket. No key
   * ever gets another key's tokens.
   *
   * @param table - `[key, quota]` pairs, e.g. a `Map`.
   * @throws `Error` `ERR_KEEPCOUNT_DUPLICATE_KEY` if two entries are the same key; nothing changes.
   */
  replaceKeys(table: Iterable<readonly [Key, Quota]>): void {
    const [keys, quotas] = entries('table', 'argument', table);
    if (!this.#core.replaceKeys(keys, quotas, this.#elapsed())) throw duplicateKey();
  }

  /** Changes the best-effort quota, keeping its tokens (capped to the new burst). */
  setBestEffort(quota: Quota): void {
    const spec = quotaSpec('The "quota" argument', quota);
    this.#core.setBestEffort(spec, this.#elapsed());
    this.#bestEffort = quotaInfo(spec);
  }

  /**
   * Sets the overall quota (`undefined` removes it). Changing one keeps its tokens (capped);
   * setting one where there was none starts full.
   */
  setOverall(quota: Quota | undefined): void {
    const spec = quota === undefined ? null : quotaSpec('The "quota" argument', quota);
    this.#core.setOverall(spec, this.#elapsed());
    this.#overall = spec === null ? undefined : quotaInfo(spec);
  }

  /** `key`'s quota, or `undefined` if it is not in the table. */
  quota(key: Key): QuotaInfo | undefined {
    const spec = this.#core.quota(validateKey(key));
    return spec === null ? undefined : quotaInfo(spec);
  }

  /** The best-effort quota. */
  get bestEffort(): QuotaInfo {
    return this.#bestEffort;
  }

  /** The overall quota, if set. */
  get overall(): QuotaInfo | undefined {
    return this.#overall;
  }

  /** How many keys the table holds. */
  get size(): number {
    return this.#core.size;
  }

  /** Milliseconds since construction, never negative. */
  #elapsed(): number {
    return this.#stopwatch.elapsedMs();
  }
}

function duplicateKey(): Error {
  return withCode(
    new Error('The key table names the same key more than once (1 and 1n are the same key)'),
    'ERR_KEEPCOUNT_DUPLICATE_KEY',
  );
}

/** Validated `[key, quota]` pairs as two arrays; `name` and `kind` name them in errors. */
function entries(name: string, kind: string, table: unknown): [Key[], QuotaSpec[]] {
  if (
    typeof table !== 'object' ||
    table === null ||
    isUint8Array(table) ||
    typeof (table as Iterable<unknown>)[Symbol.iterator] !== 'function'
  ) {
    throw invalidType(`The "${name}" ${kind}`, 'an iterable of [key, quota] pairs', table);
  }
  const keys: Key[] = [];
  const quotas: QuotaSpec[] = [];
  let i = 0;
  for (const entry of table as Iterable<unknown>) {
    if (!Array.isArray(entry)) throw invalidType(`The "${name}[${i}]" ${kind}`, 'a [key, quota] pair', entry);
    keys.push(validateKey(entry[0]));
    quotas.push(quotaSpec(`The "${name}[${i}][1]" ${kind}`, entry[1]));
    i++;
  }
  return [keys, quotas];
}

/** `The "bestEffort" option` + `requests` → `The "bestEffort.requests" option`. */
function field(what: string, name: string): string {
  return what.replace(/^(The "[^"]*)"/, `$1.${name}"`);
}

function quotaSpec(what: string, quota: unknown): QuotaSpec {
  if (typeof quota !== 'object' || quota === null) throw invalidType(what, 'of type object', quota);
  const q = quota as Quota;
  const spec: QuotaSpec = {};
  if (q.requests !== undefined) spec.requests = limitSpec(field(what, 'requests'), q.requests);
  if (q.units !== undefined) spec.units = limitSpec(field(what, 'units'), q.units);
  return spec;
}

/** A {@link RateLimit} option, checked: `what` names it in errors (keepcount/redis' `SyncedLimiter` too). */
export function limitSpec(what: string, limit: unknown): LimitSpec {
  if (typeof limit !== 'object' || limit === null) throw invalidType(what, 'of type object', limit);
  const l = limit as { perSecond?: unknown; amount?: unknown; periodMs?: unknown; burst?: unknown };
  const perSecond = l.perSecond !== undefined;
  if (perSecond === (l.amount !== undefined || l.periodMs !== undefined)) {
    throw invalidType(what, 'an object with either perSecond, or amount and periodMs', limit);
  }
  const burst = count(field(what, 'burst'), l.burst);
  if (perSecond) return { amount: count(field(what, 'perSecond'), l.perSecond), periodNs: 1e9, burst };
  const amount = count(field(what, 'amount'), l.amount);
  const periodWhat = field(what, 'periodMs');
  if (typeof l.periodMs !== 'number') throw invalidType(periodWhat, 'of type number', l.periodMs);
  const periodNs = Math.round(l.periodMs * 1e6);
  if (!(periodNs >= 1 && periodNs <= MAX_PERIOD_NS)) {
    throw outOfRange(periodWhat, 'a number of milliseconds of at least 1 ns and at most 2^53 - 1 ns', l.periodMs);
  }
  return { amount, periodNs, burst };
}

function count(what: string, value: unknown): number {
  if (typeof value !== 'number') throw invalidType(what, 'of type number', value);
  if (!Number.isSafeInteger(value) || value < 0) throw outOfRange(what, 'a safe integer >= 0', value);
  return value;
}

function limitInfo(limit: LimitSpec): LimitInfo {
  return { amount: limit.amount, periodMs: limit.periodNs / 1e6, burst: limit.burst };
}

function quotaInfo(spec: QuotaSpec): QuotaInfo {
  const info: QuotaInfo = {};
  if (spec.requests != null) info.requests = limitInfo(spec.requests);
  if (spec.units != null) info.units = limitInfo(spec.units);
  return info;
}
