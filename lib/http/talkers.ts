/** What the HTTP limiters expose besides handling requests: who is sending the most. */
import type { HeavyTalker } from '../core.js';
import { invalidType } from '../errors.js';
import { HeavyHitters, topArguments } from '../heavy.js';
import { storedKey } from '../long-key.js';
import type { RequestLimiter, RequestQuota } from './quota.js';
import type { UpstreamLimit } from './upstream.js';

/** Which interval a top-talkers query reads. */
export type TalkersWindow = 'current' | 'previous' | 'both';

/** The top talkers of a limiter. */
export interface Talkers {
  /**
   * The `n` keys with the most requests in the current interval (`'previous'`: the last complete
   * one; `'both'`: the two added), most first, with bounds on their counts, exact to within the
   * heavy-hitter threshold in each interval (with `'both'`, up to twice that for a key tracked in
   * both; one tracked in one only gets the other's sketch count added to its upper bound).
   * Refuses an `n` or `window` as `HeavyHitters.top` does, also where it lists nobody.
   */
  topTalkers(n: number, window?: TalkersWindow): HeavyTalker[];
}

/**
 * A rate-limit middleware's extras: the quota it counts in and its top talkers. `Q` is that quota's
 * type: a `WindowQuota` when the middleware made it from options, the given quota's own type when
 * it was given one, any {@link RequestQuota} when not said (an annotation that takes every rate
 * limit).
 */
export interface QuotaTalkers<Q extends RequestQuota = RequestQuota> extends Talkers {
  /** The quota the limiter counts in (shared with every limiter given the same one). */
  readonly quota: Q;
}

/** `handler` with the {@link QuotaTalkers} of `quota` attached (nobody listed if it keeps no talkers). */
export function withQuota<F extends object, Q extends RequestQuota>(handler: F, quota: Q): F & QuotaTalkers<Q> {
  return Object.assign(handler, {
    quota,
    topTalkers: (n: number, window?: TalkersWindow) => {
      if (quota.topTalkers !== undefined) return quota.topTalkers(n, window);
      topArguments(n, window);
      return [];
    },
  });
}

/** An upstream-limit middleware's extras: the limit it counts in and its top talkers. */
export interface UpstreamTalkers extends Talkers {
  /** The limit the middleware counts in: the one it was given, or the one it made (close it when done). */
  readonly limit: UpstreamLimit;
}

/** `handler` with the {@link UpstreamTalkers} of `limit` and `talkers` attached. */
export function withLimit<F extends object>(
  handler: F,
  limit: UpstreamLimit,
  talkers: HeavyHitters | undefined,
): F & UpstreamTalkers {
  return Object.assign(withTalkers(handler, talkers), { limit });
}

/** A token-bucket middleware's extras: the limiter it checks with and its top talkers. */
export interface LimiterTalkers extends Talkers {
  /** The limiter the middleware checks requests with (shared with every middleware given it). */
  readonly limiter: RequestLimiter;
  /** The table every request is counted in for {@link topTalkers}, when the middleware was given one. */
  readonly talkers: HeavyHitters | undefined;
}

/**
 * `handler` with the {@link LimiterTalkers} of `limiter` and `talkers` attached, so that
 * keepcount/metrics can export a `tokenBucket` middleware as it does a `rateLimit` one.
 */
export function withLimiter<F extends object>(
  handler: F,
  limiter: RequestLimiter,
  talkers: HeavyHitters | undefined,
): F & LimiterTalkers {
  return Object.assign(withTalkers(handler, talkers), { limiter, talkers });
}

/**
 * `handler` with the top talkers of `talkers` attached: `tokenBucket` and `upstreamLimit` count
 * there only when given one (a token bucket keeps no counts to list); without, `topTalkers` lists
 * nobody.
 */
export function withTalkers<F extends object>(handler: F, talkers: HeavyHitters | undefined): F & Talkers {
  return Object.assign(handler, {
    topTalkers: (n: number, window?: TalkersWindow) => {
      if (talkers !== undefined) return talkers.top(n, window);
      topArguments(n, window);
      return [];
    },
  });
}

/**
 * Counts one request for `key` in a `talkers` table (none: nothing), under its bounded form
 * ({@link storedKey}): the key comes from the request, so its length is the client's choice, and
 * the table keeps it for a window.
 */
export function countTalker(talkers: HeavyHitters | undefined, key: string): void {
  talkers?.incr(storedKey(key));
}

/** The `talkers` option: a `HeavyHitters` or `undefined`. */
export function talkersOption(value: unknown): HeavyHitters | undefined {
  if (value !== undefined && !(value instanceof HeavyHitters)) {
    throw invalidType('The "talkers" option', 'a HeavyHitters', value);
  }
  return value;
}
