/**
 * The `'local'` fail policy's bucket of one key on a stale {@link SyncedLimiter} node: the node's
 * share of the key's bucket, `burst / nodes` refilled at `rate / nodes`, for one spell of
 * staleness. What it holds at the spell's first check, and what the node owes for what it takes,
 * the limiter decides (see its `#stale`): this holds only the tokens.
 *
 * @module
 */

/** What it takes of the key's bucket: tokens per millisecond, and the most it holds. */
interface Size {
  readonly rate: number;
  readonly burst: number;
}

/** One key's `'local'` bucket on one node, made at its first check while stale. */
export class LocalBucket {
  /** Tokens, and `performance.now()` when they were counted. */
  #tokens = 0;
  #at = 0;
  /**
   * The spell of staleness it was started for (the limiter's `sync.freshAt` then, NaN before the
   * first).
   */
  #from = NaN;

  /**
   * Takes `cost` tokens at `now` if it holds them, in the spell named `spell`, with the node count
   * `nodes`. At the spell's first check it starts from `start` within [0, `burst / nodes`]; then it
   * refills at `rate / nodes` up to `burst / nodes` from its last check.
   */
  take(cost: number, now: number, spell: number, start: number, bucket: Size, nodes: number): boolean {
    const { rate, burst } = bucket;
    const share = burst / nodes;
    if (this.#from === spell) {
      const elapsed = Math.max(0, now - this.#at);
      this.#tokens = Math.min(share, this.#tokens + (elapsed * rate) / nodes);
    } else {
      this.#tokens = Math.min(share, Math.max(0, start));
      this.#from = spell;
    }
    this.#at = now;
    if (this.#tokens >= cost) {
      this.#tokens -= cost;
      return true;
    }
    return false;
  }

  /**
   * Milliseconds until it holds `cost` tokens, refilled at `rate / nodes` (`Infinity` for a bucket
   * that never refills): a refusal's `retryAfterMs`.
   */
  waitMs(cost: number, bucket: Size, nodes: number): number {
    if (bucket.rate === 0) return Infinity;
    return ((cost - this.#tokens) * nodes) / bucket.rate;
  }
}
