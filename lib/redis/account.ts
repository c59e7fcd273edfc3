/**
 * The types at the seam between a {@link SyncedLimiter}, its options and its {@link Ledger}: a
 * key's bucket as the script takes it, and what a node knows of one key, which a check spends
 * from, the ledger lends to and the `'local'` fail policy owes to.
 *
 * @module
 */
import type { LocalBucket } from './local-bucket.js';

/** A bucket's parameters as the script takes them. */
export interface Bucket {
  /** Tokens per millisecond. */
  readonly rate: number;
  readonly burst: number;
  readonly cap: number;
  /** How long the Redis key lives after a sync: a lease, then the time to refill (0: for ever). */
  readonly ttlMs: number;
}

/** What this node knows of one key. */
export interface Account {
  readonly key: string;
  readonly bucket: Bucket;
  /**
   * Tokens this node holds: lent by Redis, less what it admitted (negative: borrowed on
   * credit).
   */
  held: number;
  /** Cost checked (admitted or not) since the last loan request: the demand the share follows. */
  demand: number;
  /** Loan requests in a row with no demand: at the ledger's `IDLE_SYNCS` the key leaves. */
  idle: number;
  /** Refused for want of tokens since the last loan request. */
  short: boolean;
  /** Checks of the key on this node, counted up to 2: a key checked once makes room first. */
  checks: number;
  /** `performance.now()` after which the loan is void (0: no loan). */
  expiresAt: number;
  /** See {@link LoanRequest.got}. */
  got: number;
  /**
   * Tokens the key's bucket had left after the last loan, and `performance.now()` when the node
   * heard.
   */
  spare: number;
  spareAt: number;
  /**
   * The `'local'` fail policy's own bucket, made at the key's first check while the limiter is
   * stale (see {@link SyncedLimiter}'s `#stale`); `undefined` until then.
   */
  local: LocalBucket | undefined;
}
