/**
 * A {@link SyncedLimiter}'s options: {@link SyncedLimiterOptions} as the user gives them, and
 * checked and defaulted into what the limiter runs on, every key's bucket as the script takes it.
 *
 * @module
 */
import { invalidType } from '../errors.js';
import { storedKey } from '../long-key.js';
import { limitSpec, type RateLimit } from '../quotas.js';
import { integerOption, iterableArgument, optionsObject } from '../options.js';
import type { Bucket } from './account.js';
import { syncOption } from './estimator.js';
import { failPolicyOption, type FailPolicy } from './fail-policy.js';
import type { RedisSync } from './sync.js';
import { leaseMsOption, nameOption } from './sync-options.js';

/**
 * Tokens on loan plus tokens in a key's Redis bucket never pass `burst + LOAN_PERIODS × rate ×
 * syncMs`. With every node asking each sync for what its demand needs, the bucket holds about one
 * period's refill (`rate × syncMs`) just before each loan and about as much is out on loan: the
 * second period of room keeps the cap from ever throwing refill away under full load (which would
 * admit less than the rate) while sync periods stretch to twice `syncMs`.
 */
const LOAN_PERIODS = 2;

/** Options of {@link SyncedLimiter}. */
export interface SyncedLimiterOptions {
  /** The {@link RedisSync} that carries it. Required. */
  sync: RedisSync;
  /**
   * The limiter's name: nodes that give the same name share the buckets. Required; no `{` or
   * `}`.
   */
  name: string;
  /**
   * Every key's bucket, fleet-wide: `{ perSecond, burst }` or `{ amount, periodMs, burst }`, as a
   * `Limiter`'s `RateLimit`; a check takes its `cost` in tokens. Required.
   */
  limit: RateLimit;
  /**
   * Keys with a bucket of their own size: `[key, RateLimit]` pairs, e.g. a `Map`. A key longer
   * than 256 UTF-16 code units is matched under its bounded form, as checks are (see the class
   * doc). Defaults to none.
   */
  keys?: Iterable<readonly [string, RateLimit]>;
  /**
   * How long a loan of tokens lasts without a successful sync: an integer in (`syncMs`,
   * 7,200,000]. A node drops what it holds when its loan runs out; Redis writes the loan off then,
   * so a crashed node's tokens come back to nobody and hold nothing up. Defaults to the sync's
   * `staleAfterMs`, when the fail policy takes over, but never less than `syncMs + timeoutMs`, so
   * that syncs on time always renew it.
   */
  leaseMs?: number;
  /** What to do while Redis is unreachable; see {@link FailPolicy}. Defaults to `'local'`. */
  failPolicy?: FailPolicy;
  /**
   * How long after its first sync a node waits before it lends itself credit (see the class doc),
   * and again after a sync that may have followed a loss of the node registry (a Redis restart
   * without its data or from an older snapshot, or a node count that dropped): an integer in
   * [0, 3,600,000]. Defaults to the sync's `syncMs`, by when every node that started with it (or
   * lost its registration with it) has registered, so the nodes' credit together stays within one
   * `burst`. With 0, credit comes with the first sync, and nodes that start together may borrow up
   * to `burst × (1 + 1/2 + … + 1/N)` until their next sync: for a fleet whose nodes never start
   * within a sync period of each other.
   */
  creditAfterMs?: number;
}

/** {@link SyncedLimiterOptions} checked, with their defaults filled in. */
export interface LimiterConfig {
  readonly sync: RedisSync;
  readonly name: string;
  /** The prefix of the limiter's Redis keys, its name their hash tag. */
  readonly base: string;
  readonly leaseMs: number;
  readonly failPolicy: FailPolicy;
  readonly creditAfterMs: number;
  /** The bucket of every key not in {@link buckets}. */
  readonly bucket: Bucket;
  /** The buckets of the `keys` option, by bounded key (`storedKey`). */
  readonly buckets: ReadonlyMap<string, Bucket>;
}

/** `options` checked (throwing for the first invalid one, in their order here) and defaulted. */
export function limiterConfig(options: SyncedLimiterOptions): LimiterConfig {
  const o = optionsObject(options);
  const sync = syncOption(o.sync);
  const name = nameOption('name', o.name);
  const leaseMs = leaseMsOption(o.leaseMs, sync);
  const failPolicy = failPolicyOption(o.failPolicy);
  const creditAfterMs = integerOption('creditAfterMs', o.creditAfterMs, 0, 3_600_000, sync.syncMs);
  const bucket = bucketOption('The "limit" option', o.limit, sync.syncMs, leaseMs);
  const buckets = new Map<string, Bucket>();
  if (o.keys !== undefined) {
    const pairs = iterableArgument('The "keys" option', 'an iterable of [key, RateLimit] pairs', o.keys);
    let i = 0;
    for (const entry of pairs) {
      if (!Array.isArray(entry) || typeof entry[0] !== 'string') {
        throw invalidType(`The "keys[${i}]" option`, 'a [string, RateLimit] pair', entry);
      }
      const keyBucket = bucketOption(`The "keys[${i}][1]" option`, entry[1], sync.syncMs, leaseMs);
      buckets.set(storedKey(entry[0].toWellFormed()), keyBucket);
      i++;
    }
  }
  const base = `${sync.prefix}:{${name}}`;
  return { sync, name, base, leaseMs, failPolicy, creditAfterMs, bucket, buckets };
}

/** The bucket `limit` gives (`what` names it in errors), under `syncMs` and `leaseMs`. */
function bucketOption(what: string, limit: unknown, syncMs: number, leaseMs: number): Bucket {
  const spec = limitSpec(
    what,
    limit,
    "(a SyncedLimiter has one dimension: { perSecond, burst } or { amount, periodMs, burst }, not a Limiter's " +
      '{ requests: …, units: … })',
  );
  const rate = (spec.amount * 1e6) / spec.periodNs;
  const cap = spec.burst + LOAN_PERIODS * rate * syncMs;
  const ttlMs = rate === 0 ? 0 : Math.ceil(leaseMs + spec.burst / rate);
  return { rate, burst: spec.burst, cap, ttlMs };
}
