/** A request quota per key per window that holds across every node syncing it through Redis. */
import type { Clock } from '../clock.js';
import type { RateLimitDecision } from '../http/headers.js';
import { policyName } from '../http/headers.js';
import type { RequestQuota } from '../http/quota.js';
import { quotaArgument, slotsFor } from '../http/window-quota.js';
import { MAX_VALUE } from '../heavy.js';
import { MAX_HASHES } from '../limits.js';
import { integerOption, optionsObject } from '../options.js';
import { SyncedRate } from './rate.js';
import { failPolicyOption, type FailPolicy } from './fail-policy.js';
import type { RedisSync } from './sync.js';

/** Options of {@link SyncedWindowQuota}. */
export interface SyncedWindowQuotaOptions {
  /** The {@link RedisSync} that carries it. Required. */
  sync: RedisSync;
  /** The quota's name: nodes that give the same name share it. Required; no `{` or `}`. */
  name: string;
  /** The hash seed, the same on every node (a shared secret). Required. */
  seed: bigint | number;
  /** Requests allowed per key per window, fleet-wide: an integer >= 0. Required. */
  limit: number;
  /** The window in milliseconds: an integer in [1, 86,400,000]. Required. */
  windowMs: number;
  /** The policy name in the RateLimit headers. Defaults to `'default'`. */
  policy?: string;
  /** What to do while Redis is unreachable; see {@link FailPolicy}. Defaults to `'local'`. */
  failPolicy?: FailPolicy;
  /** Distinct keys expected per window, fleet-wide; sizes the sketch as `WindowQuota`'s. Defaults to 10,000. */
  clients?: number;
  /** Rows of the sketch. Defaults to 4. */
  hashes?: number;
  /** Counters per row. Defaults to what `clients` needs. */
  slots?: number;
  /** Wall-clock milliseconds since the epoch; see `SyncedRateOptions.clock`. Defaults to Redis's clock (`sync.now()`). */
  clock?: Clock;
}

/**
 * `WindowQuota` for a fleet: the same decisions (`count <= limit`, refused requests counted too),
 * on a {@link SyncedRate} whose windows are fixed on the wall clock. Pass it to `rateLimit` (or
 * the Fastify hook) as `quota`.
 *
 * # The bound
 * A check reads this node's own count now and the others' as of this node's last sync. A request
 * admitted on node A reaches Redis by the end of A's next sync and node B by the end of B's next
 * one: it is invisible to B for at most `D = 2 × (syncMs + RTT)` (a sync every `syncMs`, each
 * taking a round trip `RTT`; event-loop delays add to both). So if each node admits at most `r`
 * requests per ms, a key gets at most
 *
 *     limit + (nodes − 1) × r × 2 × (syncMs + RTT)
 *
 * admissions per window: the last node to admit saw every admission but the others' last `D` ms.
 * Count-min collisions only ever refuse more. Staleness (`sync.staleness`) is the age of the
 * others' counts; past `staleAfterMs` the {@link FailPolicy} applies.
 */
export class SyncedWindowQuota implements RequestQuota {
  /** Requests allowed per key per window. */
  readonly limit: number;
  /** The window in milliseconds. */
  readonly windowMs: number;
  /** The policy name in the headers. */
  readonly policy: string;
  /** What a stale node does. */
  readonly failPolicy: FailPolicy;
  readonly #rate: SyncedRate;
  readonly #sync: RedisSync;

  constructor(options: SyncedWindowQuotaOptions) {
    const o = optionsObject(options);
    this.limit = integerOption('limit', o.limit, 0, Number.MAX_SAFE_INTEGER);
    this.windowMs = integerOption('windowMs', o.windowMs, 1, 86_400_000);
    this.policy = policyName(o.policy ?? 'default');
    this.failPolicy = failPolicyOption(o.failPolicy);
    const hashes = integerOption('hashes', o.hashes, 1, MAX_HASHES, 4);
    const clients = integerOption('clients', o.clients, 1, 1_000_000, 10_000);
    this.#rate = new SyncedRate({
      sync: o.sync as RedisSync,
      name: o.name as string,
      seed: o.seed as bigint | number,
      intervalMs: this.windowMs,
      hashes,
      slots: o.slots ?? slotsFor(clients, hashes),
      clock: o.clock,
    });
    this.#sync = o.sync as RedisSync;
  }

  /**
   * Counts one request (or `cost`) for `key` and decides on it, without waiting on Redis. Never
   * throws because of the sync: once it closed, the quota counts on this node alone and its
   * `failPolicy` decides, as while Redis is unreachable.
   */
  consume(key: string, cost = 1): RateLimitDecision {
    // As WindowQuota checks it: a negative cost would be a refund that admits.
    quotaArgument('cost', cost, 0);
    const count = this.#rate.observeLocally(key, cost, true);
    let allowed = count <= this.limit;
    // A closed sync is stale for good: nothing reaches the fleet any more, and the request path
    // must not fail for it (a server still draining requests at shutdown).
    if (allowed && (this.#sync.stale || this.#sync.closed)) {
      if (this.failPolicy === 'closed') allowed = false;
      else if (this.failPolicy === 'local') allowed = this.#rate.local(key) <= this.share();
    }
    const resetMs = this.#resetMs();
    return {
      allowed,
      policy: this.policy,
      limit: this.limit,
      count,
      remaining: Math.max(0, this.limit - count),
      resetMs,
      windowMs: this.windowMs,
      key,
    };
  }

  /** This node's share of the limit under the `'local'` policy: `limit / nodes`, at least 1 if `limit` is. */
  share(): number {
    return Math.max(Math.min(1, this.limit), Math.floor(this.limit / this.nodes));
  }

  /**
   * Live nodes syncing this quota (this one included), as Redis counted them at its last sync;
   * before its first, the most any structure on its sync has counted (`sync.nodes`).
   */
  get nodes(): number {
    return this.#rate.nodes;
  }

  /** Adds `delta` (possibly negative) to `key`'s count in the current window. */
  adjust(key: string, delta: number): void {
    quotaArgument('delta', delta, -MAX_VALUE);
    this.#rate.observeLocally(key, delta, true);
  }

  /** `key`'s fleet-wide count in the current window and the milliseconds until the window ends. */
  current(key: string): { count: number; resetMs: number } {
    return { count: this.#rate.rateWith(key, (c) => c.currSamples), resetMs: this.#resetMs() };
  }

  /** Milliseconds until the current window ends, at least 1. */
  #resetMs(): number {
    return Math.max(1, Math.ceil((1 - this.#rate.elapsedFraction()) * this.windowMs));
  }

  /**
   * Stops counting: `consume` and `adjust` then throw `ERR_KEEPCOUNT_CLOSED`. What was counted
   * before is pushed by the next successful syncs, after which the quota is no longer synced.
   */
  close(): void {
    this.#rate.close();
  }
}
