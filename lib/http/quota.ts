/**
 * What `rateLimit` and the Fastify hooks count requests in: `WindowQuota`, or any quota with its
 * `consume`, such as keepcount/redis' `SyncedWindowQuota`, which counts across machines. The
 * middleware only calls `consume` on the request's path, so a quota that syncs elsewhere keeps
 * that path free of network waits.
 */
import type { HeavyTalker } from '../core.js';
import type { RateLimitDecision } from './headers.js';

export interface RequestQuota {
  /** Counts one request (or `cost`) for `key` and decides on it. Must not throw for a valid key. */
  consume(key: string, cost?: number): RateLimitDecision;
  /**
   * The `n` keys with the most requests in `window`, most first (see `WindowQuota.topTalkers`).
   * Optional: the middleware lists nobody for a quota without it.
   */
  topTalkers?(n: number, window?: 'current' | 'previous' | 'both'): HeavyTalker[];
}
