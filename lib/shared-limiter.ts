/**
 * `SharedLimiter`: token buckets in a segment every process of the host maps, what
 * `Limiter.openShared` returns (`crates/limits/src/shared/limiter.rs`).
 *
 * @module
 */
import { closedSharedLimiter, dispose, isClosed } from './closed.js';
import type { Key, QuotaSpec, SharedLimiterCore, SharedLimiterStats } from './core.js';
import { invalidType, outOfRange } from './errors.js';
import { validateKey } from './keys.js';
import { integerOption, optionsObject } from './options.js';
import {
  decide,
  quotaInfo,
  quotaSpec,
  type Decisions,
  type LimiterDecision,
  type Quota,
  type QuotaInfo,
} from './quotas.js';
import {
  inSharedDir,
  sharedBackend,
  sharedDir,
  sharedMode,
  sharedName,
  sharedSeed,
  type SharedCreation,
} from './shared.js';

export type { SharedLimiterStats } from './core.js';

/** The largest `capacity`: 2^22 keys (`crates/limits/src/shared/limiter.rs` `MAX_CAPACITY`). */
const MAX_CAPACITY = 2 ** 22;
/** Default `capacity`: 65,536 keys, a 6 MiB segment (48 bytes per table entry, at most 3/4 full). */
const DEFAULT_CAPACITY = 65_536;

/**
 * 2^64: a shared bucket keeps the units it lacks in a 64-bit word, below this
 * (`crates/limits/src/shared/limiter.rs`, "Layout and lock-freedom").
 */
const BUCKET_WORD = 2n ** 64n;

/**
 * `spec`, the option `option` (`quota` or `bestEffort`), after checking that each of its limits
 * fits a shared bucket: a full bucket is `burst × period` units of a nanosecond, kept in lowest
 * terms (amount and period divided by their gcd, which decides alike) and below
 * {@link BUCKET_WORD}. The crate refuses what does not fit too, but not naming the option, and the
 * fallback would answer `ERR_KEEPCOUNT_UNSUPPORTED` first: checked here, the error is the same on
 * both backends.
 */
function fitsBucketWords(option: string, spec: QuotaSpec): QuotaSpec {
  for (const name of ['requests', 'units'] as const) {
    const limit = spec[name];
    if (limit == null) continue;
    const period = BigInt(limit.periodNs);
    let [rest, gcd] = [BigInt(limit.amount), period];
    while (rest !== 0n) [rest, gcd] = [gcd % rest, rest];
    const most = (BUCKET_WORD - 1n) / (period / gcd);
    if (BigInt(limit.burst) > most) {
      throw outOfRange(
        `The "${option}.${name}.burst" option`,
        `at most ${most} for ${limit.amount} every ${limit.periodNs / 1e6} ms in a shared limiter, whose buckets hold ` +
          'burst × period / gcd(amount, period) nanosecond units below 2^64 (a local Limiter has no such limit)',
        limit.burst,
      );
    }
  }
  return spec;
}

/** Options of `Limiter.openShared`. Every process must pass the same `quota`, `bestEffort`, `capacity` and `seed`. */
export interface SharedLimiterOptions extends SharedCreation {
  /**
   * Every key's quota, as in a `Limiter`'s key table: `requests`, `units` or both. Required. A
   * bucket counts its tokens in nanoseconds of its period below 2^64, so each `burst` must be at
   * most `(2^64 − 1) / (period in ns / gcd(amount, period in ns))`: round numbers fit whole days
   * and months (a million a day, 10,000 every 30 days), one a day in bursts above 213,503 does not
   * (a `RangeError` naming the burst). Quotas that decide alike (`{ perSecond: 10 }` and
   * `{ amount: 20, periodMs: 2000 }`, with one burst) open one segment.
   */
  quota: Quota;
  /**
   * The quota of the one bucket that keys arriving once the table is full share, within the
   * bounds of `quota`'s. Defaults to `quota` (so all of them together get what one key gets).
   */
  bestEffort?: Quota;
  /**
   * The most keys the table takes: an integer in [1, 2^22], fixed when the segment is created.
   * Once it is full, a new key takes over the entry of a key whose bucket is full again (what a
   * new key starts with, so nobody loses a token) and only goes to the best-effort bucket when
   * none within its reach is: size it for the clients active within one refill time
   * (`burst / rate`). Defaults to 65,536.
   */
  capacity?: number;
  /**
   * Keys are stored as their 128-bit SipHash under this seed: keep it secret so that clients
   * cannot aim for collisions. Required: every process must pass the same one.
   */
  seed: bigint | number;
}

/**
 * Token buckets shared by the processes of a host: one per key, made on the key's first check,
 * up to a capacity fixed at creation. Open one with `Limiter.openShared`; `tokenBucket` and
 * `tokenBucketHook` take it as their `limiter`.
 */
export class SharedLimiter {
  /** Every key's quota. */
  readonly quota: QuotaInfo;
  /** The quota of the bucket keys beyond the capacity share. */
  readonly bestEffort: QuotaInfo;
  #core: SharedLimiterCore;
  /** This process's checks allowed and refused, for {@link decisions}. */
  readonly #decisions: Decisions = { allowed: 0, refused: 0 };

  private constructor(core: SharedLimiterCore, quota: QuotaSpec, bestEffort: QuotaSpec) {
    this.#core = core;
    this.quota = quotaInfo(quota);
    this.bestEffort = quotaInfo(bestEffort);
  }

  /** `Limiter.openShared`. */
  static open(name: string, options: SharedLimiterOptions): SharedLimiter {
    const n = sharedName(name);
    const o = optionsObject<SharedLimiterOptions>(options);
    const quota = fitsBucketWords('quota', quotaSpec('The "quota" option', o.quota));
    const bestEffort =
      o.bestEffort === undefined
        ? quota
        : fitsBucketWords('bestEffort', quotaSpec('The "bestEffort" option', o.bestEffort));
    const capacity = integerOption('capacity', o.capacity, 1, MAX_CAPACITY, DEFAULT_CAPACITY);
    const seed = sharedSeed(o.seed);
    const dir = sharedDir(o);
    const mode = sharedMode(o);
    const backend = sharedBackend('Limiter.openShared');
    const core = inSharedDir(dir, n, () => backend.openLimiter(n, quota, bestEffort, capacity, seed, dir, mode));
    return new SharedLimiter(core, quota, bestEffort);
  }

  /**
   * Checks one request costing `cost` units for `key` against its bucket (or the best-effort one
   * if the table is full) and takes it if every limited dimension has it; as `Limiter.check`.
   *
   * @param cost - Units this request costs: a safe integer >= 0. Defaults to 1.
   */
  check(key: Key, cost = 1): LimiterDecision {
    const k = validateKey(key);
    if (typeof cost !== 'number') throw invalidType('The "cost" argument', 'of type number', cost);
    if (!Number.isSafeInteger(cost) || cost < 0) throw outOfRange('The "cost" argument', 'a safe integer >= 0', cost);
    return decide(this.#decisions, this.#core.check(k, cost));
  }

  /**
   * How many {@link check} calls made through this object were allowed and refused since it opened
   * the segment (a check that threw counts as neither): this process's, not the host's, as
   * keepcount/metrics exports them in `decisions_total` from each worker.
   */
  decisions(): Decisions {
    return { ...this.#decisions };
  }

  /**
   * How full the key table is, how many checks overflowed it and how many entries new keys took
   * over, across every process.
   */
  stats(): SharedLimiterStats {
    return this.#core.stats();
  }

  /**
   * Unmaps the segment from this process now (the file and the other processes' buckets stay).
   * Any later call throws `ERR_KEEPCOUNT_CLOSED`. Idempotent; `using` calls it too.
   */
  close(): void {
    if (isClosed(this.#core)) return;
    this.#core.close();
    this.#core = closedSharedLimiter();
  }

  /** {@link close}, for `using`. */
  [dispose](): void {
    this.close();
  }
}
