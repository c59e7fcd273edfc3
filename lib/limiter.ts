/**
 * Per-key token buckets with live updates: the limiter of `crates/limits/src/limiter.rs`.
 *
 * @module
 */
import { active } from './backend.js';
import { closedLimiter, dispose, isClosed } from './closed.js';
import { packQuotas, type Key, type LimiterCore, type QuotaSpec } from './core.js';
import { Stopwatch, type Clock } from './clock.js';
import { describe, invalidType, outOfRange, withCode } from './errors.js';
import { tableKey } from './keys.js';
import {
  decide,
  quotaInfo,
  quotaSpec,
  type Decisions,
  type LimiterDecision,
  type Quota,
  type QuotaInfo,
} from './quotas.js';
import { SharedLimiter, type SharedLimiterOptions } from './shared-limiter.js';
import { inSharedDir, sharedBackend, sharedDir, sharedName, type SharedPlacement } from './shared.js';
import { iterableArgument, optionsObject } from './options.js';

export type { LimitInfo, LimiterDecision, Quota, QuotaInfo, RateLimit } from './quotas.js';

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
   * {@link ManualClock}. Defaults to the process's monotonic clock (`process.hrtime`).
   */
  clock?: Clock;
}

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
export class Limiter implements Disposable {
  #core: LimiterCore;
  /**
   * Reads the user's clock for the core; `undefined` without a `clock` option, when the core
   * reads the host's clock itself, inside the call it makes anyway.
   */
  readonly #stopwatch: Stopwatch | undefined;
  #bestEffort: QuotaInfo;
  #overall: QuotaInfo | undefined;
  /** Checks allowed and refused, for {@link decisions}. */
  readonly #decisions: Decisions = { allowed: 0, refused: 0 };

  constructor(options: LimiterOptions) {
    if (typeof options !== 'object' || options === null) {
      throw invalidType('The "options" argument', 'of type object', options);
    }
    const bestEffort = quotaSpec('The "bestEffort" option', options.bestEffort);
    const overall = options.overall === undefined ? null : quotaSpec('The "overall" option', options.overall);
    const keys = options.keys === undefined ? undefined : entries('keys', 'option', options.keys);
    this.#stopwatch = options.clock === undefined ? undefined : new Stopwatch(options.clock);
    this.#core = new active.Limiter(bestEffort, options.clock === undefined);
    this.#bestEffort = quotaInfo(bestEffort);
    if (overall !== null) {
      this.#core.setOverall(overall, 0);
      this.#overall = quotaInfo(overall);
    }
    if (keys !== undefined && !this.#core.replaceKeys(keys[0], keys[1], 0)) throw duplicateKey();
  }

  /**
   * Token buckets shared by every process of this host that opens `name`: one bucket per key under
   * `quota`, created on the key's first check, for up to `capacity` keys; keys beyond share one
   * best-effort bucket (counted in `stats().overflow`, never an error). Same decisions as a
   * `Limiter`'s, on the host's monotonic clock: across all processes a key's bucket admits at
   * most `burst + rate × t` over any `t`. No lock: a process killed mid-check blocks nobody.
   * The segment, its errors (`ERR_KEEPCOUNT_MISMATCH` naming `quota`, `bestEffort`, `capacity`
   * or `seed`; `ERR_KEEPCOUNT_CORRUPT`; `ERR_KEEPCOUNT_IO`) and its lifetime are as for
   * `Estimator.openShared`; `Limiter.unlink` removes it. Needs the native backend
   * (`ERR_KEEPCOUNT_UNSUPPORTED` on the fallback).
   *
   * @example
   * ```ts
   * // In every worker of a node:cluster app:
   * const perClient = Limiter.openShared('api-clients', {
   *   quota: { requests: { perSecond: 10, burst: 20 } },
   *   capacity: 100_000,
   *   seed: BigInt(process.env.KEEPCOUNT_SEED!),
   * });
   * app.use(tokenBucket({ limiter: perClient })); // 10/s per client IP for the whole host
   * ```
   */
  static openShared(name: string, options: SharedLimiterOptions): SharedLimiter {
    return SharedLimiter.open(name, options);
  }

  /** Removes the shared segment `name`; see `Estimator.unlink`. */
  static unlink(name: string, options?: SharedPlacement): void {
    const n = sharedName(name);
    const dir = sharedDir(optionsObject(options));
    const shared = sharedBackend('Limiter.unlink');
    inSharedDir(dir, n, () => shared.unlink(n, dir));
  }

  /**
   * Checks one request costing `cost` units for `key` (the key's own bucket, or the best-effort
   * bucket if it is not in the table, and the overall bucket if set) and takes it if every
   * limited dimension of every bucket has it.
   *
   * @param cost - Units this request costs: a safe integer >= 0. Defaults to 1.
   */
  check(key: Key, cost = 1): LimiterDecision {
    const k = tableKey(key);
    if (typeof cost !== 'number') throw invalidType('The "cost" argument', 'of type number', cost);
    if (!Number.isSafeInteger(cost) || cost < 0) throw outOfRange('The "cost" argument', 'a safe integer >= 0', cost);
    // The clock first, then the core: a clock that closes this limiter swaps the core out, and the
    // call must go to the closed one (ERR_KEEPCOUNT_CLOSED), not to the freed one.
    const now = this.#elapsed();
    return decide(this.#decisions, this.#core.check(k, cost, now));
  }

  /**
   * How many {@link check} calls this object allowed and refused since it was made (a check that
   * threw counts as neither): what keepcount/metrics exports as `decisions_total`.
   */
  decisions(): Decisions {
    return { ...this.#decisions };
  }

  /**
   * Changes `key`'s quota, keeping its tokens: refilled at the old rate up to now, then capped at
   * the new burst (a dimension that was unlimited starts full).
   *
   * @throws `Error` `ERR_KEEPCOUNT_UNKNOWN_KEY` if `key` is not in the table.
   */
  setQuota(key: Key, quota: Quota): void {
    const k = tableKey(key);
    const spec = quotaSpec('The "quota" argument', quota);
    const now = this.#elapsed();
    if (!this.#core.setQuota(k, spec, now)) {
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
    const now = this.#elapsed();
    if (!this.#core.replaceKeys(keys, quotas, now)) throw duplicateKey();
  }

  /** Changes the best-effort quota, keeping its tokens (capped to the new burst). */
  setBestEffort(quota: Quota): void {
    const spec = quotaSpec('The "quota" argument', quota);
    const now = this.#elapsed();
    this.#core.setBestEffort(spec, now);
    this.#bestEffort = quotaInfo(spec);
  }

  /**
   * Sets the overall quota (`undefined` removes it). Changing one keeps its tokens (capped);
   * setting one where there was none starts full.
   */
  setOverall(quota: Quota | undefined): void {
    const spec = quota === undefined ? null : quotaSpec('The "quota" argument', quota);
    const now = this.#elapsed();
    this.#core.setOverall(spec, now);
    this.#overall = spec === null ? undefined : quotaInfo(spec);
  }

  /** `key`'s quota, or `undefined` if it is not in the table. */
  quota(key: Key): QuotaInfo | undefined {
    const k = tableKey(key);
    const spec = this.#core.quota(k);
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

  /**
   * Frees the key table and the buckets now, rather than when the garbage collector gets to this
   * object (a table of a million keys holds some 100 MB of native memory). Every later call but
   * the `bestEffort` and `overall` getters throws `ERR_KEEPCOUNT_CLOSED`. Idempotent; `using`
   * calls it too.
   */
  close(): void {
    if (isClosed(this.#core)) return;
    const core = this.#core;
    this.#core = closedLimiter();
    core.close();
  }

  /** {@link close}, for `using`. */
  [dispose](): void {
    this.close();
  }

  /** Milliseconds since construction, never negative; 0 for a core that reads the host's clock itself (and ignores it). */
  #elapsed(): number {
    return this.#stopwatch === undefined ? 0 : this.#stopwatch.elapsedMs();
  }
}

function duplicateKey(): Error {
  return withCode(
    new Error('The key table names the same key more than once (1 and 1n are the same key)'),
    'ERR_KEEPCOUNT_DUPLICATE_KEY',
  );
}

/** Validated `[key, quota]` pairs as two arrays; `name` and `kind` name them in errors. */
function entries(name: string, kind: string, table: unknown): [Key[], Float64Array] {
  const pairs = iterableArgument(`The "${name}" ${kind}`, 'an iterable of [key, quota] pairs', table);
  const keys: Key[] = [];
  const quotas: QuotaSpec[] = [];
  let i = 0;
  for (const entry of pairs) {
    if (!Array.isArray(entry)) throw invalidType(`The "${name}[${i}]" ${kind}`, 'a [key, quota] pair', entry);
    keys.push(tableKey(entry[0]));
    quotas.push(quotaSpec(`The "${name}[${i}][1]" ${kind}`, entry[1]));
    i++;
  }
  return [keys, packQuotas(quotas)];
}
