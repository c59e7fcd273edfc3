/** What the rate-limit middleware and hooks expose besides handling requests: who is sending the most. */
import type { HeavyTalker } from '../core.js';
import type { WindowQuota } from './window-quota.js';

/** The quota a limiter counts in, and its top talkers. */
export interface Talkers {
  /** The quota the limiter counts in (shared with every limiter given the same one). */
  readonly quota: WindowQuota;
  /**
   * The `n` clients with the most requests in the current window (`'previous'`: the last complete
   * one; `'both'`: the two added), most first, with bounds on their counts; see
   * {@link WindowQuota.topTalkers}.
   */
  topTalkers(n: number, window?: 'current' | 'previous' | 'both'): HeavyTalker[];
}

/** `handler` with {@link Talkers} of `quota` attached. */
export function withTalkers<F extends object>(handler: F, quota: WindowQuota): F & Talkers {
  return Object.assign(handler, {
    quota,
    topTalkers: (n: number, window?: 'current' | 'previous' | 'both') => quota.topTalkers(n, window),
  });
}
