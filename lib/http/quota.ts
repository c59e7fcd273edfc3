/**
 * What the middleware decides with: `rateLimit` and the Fastify rate-limit hook count requests in a
 * {@link RequestQuota}, `tokenBucket` and its hook check them with a {@link RequestLimiter}. The
 * middleware calls only `consume` or `check` on the request's path, so one that syncs elsewhere
 * (keepcount/redis) keeps that path free of network waits.
 */
import type { HeavyTalker } from '../core.js';
import type { LimiterDecision } from '../limiter.js';
import type { RateLimitDecision } from './headers.js';

/**
 * A window quota: `WindowQuota`, or any quota with its `consume`, such as keepcount/redis'
 * `SyncedWindowQuota`, which counts across machines.
 */
export interface RequestQuota {
  /**
   * Counts one request (or `cost`) for `key` and decides on it. Must not throw for a valid key.
   * With headers on, the middleware and the hook send a decision only when `rateLimitHeaders`
   * would take it, and fail the request otherwise (a `remaining` of `-1`, a `resetMs` of `NaN`);
   * with headers off, a refusal whose `resetMs` is not such a number fails it too.
   */
  consume(key: string, cost?: number): RateLimitDecision;
  /**
   * The `n` keys with the most requests in `window`, most first (see `WindowQuota.topTalkers`).
   * Optional: the middleware lists nobody for a quota without it (once `n` and `window` passed the
   * checks `HeavyHitters.top` makes).
   */
  topTalkers?(n: number, window?: 'current' | 'previous' | 'both'): HeavyTalker[];
}

/**
 * What `tokenBucket` and `tokenBucketHook` check requests with: a `Limiter`, or any limiter with
 * its `check`, such as keepcount/redis' `SyncedLimiter`, whose buckets hold across machines. The
 * middleware calls `check` on the request's path: it must not wait on the network.
 */
export interface RequestLimiter {
  /** Checks one request costing `cost` for `key` and takes it if admitted. Must not throw for a valid key. */
  check(key: string, cost?: number): LimiterDecision;
}
