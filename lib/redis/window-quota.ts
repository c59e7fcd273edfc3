/** A request quota per key per window that holds across every node syncing it through Redis. */
import type { Clock } from '../clock.js';
import type { HeavyTalker, Key } from '../core.js';
import type { RateLimitDecision } from '../http/headers.js';
import { policyName } from '../http/headers.js';
import type { RequestQuota } from '../http/quota.js';
import { CAPACITY_PER_CLIENT, heavyHitterSettings, quotaArgument, slotsFor } from '../http/window-quota.js';
import { MAX_CAPACITY, MAX_VALUE, topArguments } from '../heavy.js';
import { MAX_HASHES } from '../limits.js';
import { integerOption, optionsObject } from '../options.js';
import type { ExactCells, ExactCounts } from './exact.js';
import { madeFor, SyncedRate, type OwnedRateOptions } from './rate.js';
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
  /**
   * The window in milliseconds: an integer in [1, 86,400,000]. Required. Make it several times the
   * sync's `syncMs`: a window shorter than that ends before most of its requests reach the other
   * nodes, so each node admits up to the limit (see the class doc), and constructing such a quota
   * without a `clock` emits a `KeepcountWarning` (`KEEPCOUNT_SHORT_WINDOW`).
   */
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
  /**
   * Count the clients near the limit exactly across the fleet, so that none within the limit is
   * ever refused because other clients' keys share its counters (see the class doc): `true` for
   * the default settings, or {@link SyncedHeavyHitterSettings}. Defaults to `false`: it widens the
   * bound and adds an entry per window to sync, a cell per client counted exactly.
   */
  heavyHitters?: boolean | SyncedHeavyHitterSettings;
}

/** The `heavyHitters` settings of a {@link SyncedWindowQuota}. */
export interface SyncedHeavyHitterSettings {
  /**
   * The fleet-wide estimate at which a node begins counting a client exactly: an integer in [1,
   * `limit`]. The bound grows by up to `nodes × (threshold − 1)`, and so does what the `'local'`
   * fail policy admits (`threshold − 1` a node). Defaults to `ceil(limit / 16)` (at least 1): 25%
   * over the limit at most with 4 nodes, the sync's lag aside.
   */
  threshold?: number;
  /**
   * Clients a node counts exactly per window: an integer in [1, 2^24]. Past it, later ones are
   * judged by the sketch (counted in {@link SyncedWindowQuota.heavyHitterStats}), so this is what
   * holds a flood off: size it for the addresses a flood may bring to one node in a window (about
   * 100 bytes of heap each). Defaults to 2 × `clients`.
   */
  capacity?: number;
}

/** What {@link SyncedWindowQuota.heavyHitterStats} reports of the current window on this node. */
export interface SyncedHeavyHitterStats {
  /** Clients this node counts exactly. */
  tracked: number;
  /** The most it counts exactly per window. */
  capacity: number;
  /** Requests of clients past the threshold that found the table full, judged by the sketch. */
  overflowEvents: number;
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
 * So the quota is the fleet's only for windows well over `D`: in a window shorter than `syncMs`
 * each node sees mostly its own requests and admits up to `limit` (two nodes, 0.85 requests/ms
 * each, syncs every 100 ms: windows of 40 ms admitted 40 a window on a limit of 20, windows of
 * 1 s 1,091 on a limit of 1,000), which a `KeepcountWarning` (`KEEPCOUNT_SHORT_WINDOW`) says at
 * construction (but with a `clock`: see `SyncedRateOptions.clock`). Count-min collisions only
 * ever refuse more. Staleness (`sync.staleness`; with `cluster: true`,
 * that of the last successful call for this quota's name) is the age of the others' counts; past
 * `staleAfterMs` the {@link FailPolicy} applies. Under `'local'` a node whose sync never reached
 * Redis refuses then: it knows no node count to divide the limit by. Await
 * `sync.ready()` before serving. After Redis lost its data (or went back to an older snapshot),
 * a node decides on the others' counts as it knew them until they push theirs again, the larger
 * of the two (cells.ts `SyncedCells.apply`): the node back first, fresh, would otherwise admit a
 * key up to the limit again on its own counts.
 *
 * # Heavy hitters
 * Counted in a sketch alone, a flood of more distinct keys than `clients` fills the counters, and
 * clients within the limit are refused for the flood's requests. With `heavyHitters`, a node
 * counts a key exactly once its fleet-wide estimate reaches `threshold`, and the nodes sync those
 * exact counts beside the sketch (`exact.ts`). A request for such a key is decided on the sum of
 * the nodes' exact counts: what each node counted since it began, a lower bound of the key's
 * count. So no request within the limit is refused (but for two tracked keys sharing a 52-bit id,
 * probability at most `n² / 2^53` for `n` tracked keys, or a node's table full: past `capacity`
 * keys a window, later ones are judged by the sketch), and the bound above grows by what the
 * nodes counted before they began, less than `threshold` each:
 *
 *     limit + (nodes − 1) × r × 2 × (syncMs + RTT) + nodes × (threshold − 1)
 *
 * A node keeps the others' counts of keys it does not track (yet) up to 4 × `capacity` keys in all;
 * past that, one it begins tracking learns them at their next change: more admitted meanwhile,
 * never fewer. Every node must count exactly: while Redis counts more nodes syncing the sketch
 * than its exact counts (a rolling deploy turning `heavyHitters` on), the quota decides on the
 * sketch, as without `heavyHitters`.
 */
export class SyncedWindowQuota implements RequestQuota {
  /** The quota's exact counting with `heavyHitters`, else `undefined`. */
  readonly #exact: ExactCounts | undefined;
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
  #allowed = 0;
  #refused = 0;

  constructor(options: SyncedWindowQuotaOptions) {
    const o = optionsObject(options);
    this.limit = integerOption('limit', o.limit, 0, Number.MAX_SAFE_INTEGER);
    this.windowMs = integerOption('windowMs', o.windowMs, 1, 86_400_000);
    this.policy = policyName(o.policy ?? 'default');
    this.failPolicy = failPolicyOption(o.failPolicy);
    const hashes = integerOption('hashes', o.hashes, 1, MAX_HASHES, 4);
    const clients = integerOption('clients', o.clients, 1, 1_000_000, 10_000);
    // Checked before the rate claims its name on the sync, so a bad setting leaves no claim behind.
    const heavy =
      o.heavyHitters === undefined || o.heavyHitters === false ? undefined : heavyHitterSettings(o.heavyHitters);
    const exact = heavy && {
      threshold: integerOption(
        'threshold',
        heavy.threshold,
        1,
        Math.max(1, this.limit),
        Math.max(1, Math.ceil(this.limit / 16)),
      ),
      capacity: integerOption(
        'capacity',
        heavy.capacity,
        1,
        MAX_CAPACITY,
        Math.min(MAX_CAPACITY, CAPACITY_PER_CLIENT * clients),
      ),
    };
    const rateOptions: OwnedRateOptions = {
      sync: o.sync as RedisSync,
      name: o.name as string,
      seed: o.seed as bigint | number,
      intervalMs: this.windowMs,
      hashes,
      slots: o.slots ?? slotsFor(clients, hashes),
      clock: o.clock,
      [madeFor]: { kind: 'SyncedWindowQuota', option: 'windowMs' },
    };
    this.#rate = new SyncedRate(rateOptions);
    this.#sync = o.sync as RedisSync;
    if (exact !== undefined) this.#exact = this.#rate.countExactly(exact.threshold, exact.capacity);
  }

  /**
   * Counts one request (or `cost`) for `key` and decides on it, without waiting on Redis. Never
   * throws because of the sync: once it closed, the quota counts on this node alone and its
   * `failPolicy` decides, as while Redis is unreachable.
   */
  consume(key: string, cost = 1): RateLimitDecision {
    // As WindowQuota checks it: a negative cost would be a refund that admits.
    quotaArgument('cost', cost, 0);
    const estimate = this.#rate.observeLocally(key, cost, true);
    const count = this.#exactCount(key, cost, estimate);
    let allowed = count <= this.limit;
    let remaining = Math.max(0, this.limit - this.#upper(count, estimate));
    // A closed sync is stale for good: nothing reaches the fleet any more, and the request path
    // must not fail for it (a server still draining requests at shutdown). `'local'` on a sync that
    // never reached Redis refuses, as a `SyncedLimiter`'s does: it knows no node count but its own,
    // so every node started while Redis was away would take the whole limit per key for its share
    // (N nodes, N limits a window).
    if (allowed && (this.#sync.staleFor(this.#rate) || this.#sync.closed)) {
      if (this.failPolicy === 'closed') allowed = false;
      else if (this.failPolicy === 'local') {
        const share = this.share();
        const local = this.#local(key);
        allowed = this.#sync.synced && local <= share;
        // What the headers' `r` promises is what this node will still admit: its share's rest.
        remaining = Math.min(remaining, Math.max(0, share - local));
      }
    }
    // A refusal by the fail policy leaves nothing either, so that `r` is 0 by the first refusal.
    if (!allowed) remaining = 0;
    if (allowed) this.#allowed++;
    else this.#refused++;
    const resetMs = this.#resetMs();
    return {
      allowed,
      policy: this.policy,
      limit: this.limit,
      count,
      remaining,
      resetMs,
      windowMs: this.windowMs,
      key,
    };
  }

  /** How many {@link consume} calls this node allowed and refused since construction. */
  decisions(): { allowed: number; refused: number } {
    return { allowed: this.#allowed, refused: this.#refused };
  }

  /**
   * This node's share of the limit under the `'local'` policy: `limit / nodes`, at least 1 if
   * `limit` is, with `nodes` the most Redis counted lately, not only at the last sync: a count
   * holds for the registry's lifetime in this node's syncs (10) after it and after the last count
   * that may have followed a loss of registrations (see `Census.shareNodes`). After Redis
   * lost its node registry, the nodes register again one at a time and count 1, 2, …, N in turn,
   * and with Redis gone again before their next syncs each took its share of such a count for the
   * whole outage (4 nodes, a limit of 100: 100, 50, 33 and 25 admitted, 208 in all; now 25 each).
   * So a node that leaves the registry leaves the others' shares a lifetime of syncs later.
   */
  share(): number {
    return Math.max(Math.min(1, this.limit), Math.floor(this.limit / this.#rate.shareNodes));
  }

  /**
   * Live nodes syncing this quota (this one included), as Redis counted them at its last sync;
   * before its first, the most any structure on its sync has counted (`sync.nodes`). A share
   * ({@link share}) divides by the most it counted lately.
   */
  get nodes(): number {
    return this.#rate.nodes;
  }

  /**
   * Adds `delta` (possibly negative) to `key`'s count in the current window; with `heavyHitters`,
   * to its exact count too if this node counts it exactly (never below 0).
   */
  adjust(key: string, delta: number): void {
    quotaArgument('delta', delta, -MAX_VALUE);
    const estimate = this.#rate.observeLocally(key, delta, true);
    if (this.#exact === undefined) return;
    const id = this.#rate.lastKeyId();
    const cells = this.#rate.exactCells(true)!;
    if (cells.local(id) !== undefined) cells.add(id, delta, key, estimate);
  }

  /**
   * `key`'s fleet-wide count in the current window, as {@link consume} compares it with the limit
   * (with `heavyHitters`, its exact count if this node counts it exactly, else the sketch's
   * estimate), and the milliseconds until the window ends.
   */
  current(key: string): { count: number; resetMs: number } {
    const estimate = this.#rate.rateWith(key, (c) => c.currSamples);
    const exact = this.#exact;
    let count = estimate;
    if (exact !== undefined && estimate >= exact.threshold) {
      const cells = this.#rate.exactCells(true)!;
      if (this.#everyNodeExact(cells)) count = cells.peek(this.#rate.lastKeyId()) ?? estimate;
    }
    return { count, resetMs: this.#resetMs() };
  }

  /**
   * With `heavyHitters`, the `n` clients this node counts exactly with the most requests
   * fleet-wide in `window` (defaults to `'current'`; `'previous'` is the last complete window, as
   * this node last heard of it; `'both'` the two added), most first: `lower` the nodes' exact
   * counts added up, `upper` the sketch's fleet-wide estimate at the client's last request here
   * (at least `lower`). A client sending to every node is counted exactly on every node, so each
   * lists it; one that sends to other nodes only is listed by them. Empty without `heavyHitters`.
   * A key longer than 256 code units is listed in its bounded form, as `WindowQuota.topTalkers`.
   */
  topTalkers(n: number, window: 'current' | 'previous' | 'both' = 'current'): HeavyTalker[] {
    topArguments(n, window);
    const [previous, current] = this.#rate.exactWindows();
    const read = (cells: ExactCells | undefined): HeavyTalker[] => cells?.talkers() ?? [];
    let talkers: HeavyTalker[];
    if (window === 'current') talkers = read(current);
    else if (window === 'previous') talkers = read(previous);
    else {
      const both = new Map<Key, HeavyTalker>();
      for (const talker of [...read(previous), ...read(current)]) {
        const seen = both.get(talker.key);
        if (seen === undefined) both.set(talker.key, { ...talker });
        else {
          seen.lower += talker.lower;
          seen.upper += talker.upper;
        }
      }
      talkers = [...both.values()];
    }
    talkers.sort((a, b) => b.lower - a.lower || b.upper - a.upper);
    return talkers.slice(0, n);
  }

  /**
   * With `heavyHitters`, the current window's exact counting on this node (clients tracked, the
   * table's capacity, requests past it); `undefined` without.
   */
  heavyHitterStats(): SyncedHeavyHitterStats | undefined {
    const cells = this.#rate.exactCells();
    if (cells === undefined) return undefined;
    return { tracked: cells.tracked, capacity: cells.capacity, overflowEvents: cells.overflow };
  }

  /**
   * The count a request is decided on, given the sketch's `estimate` with it (the key is the one
   * the rate just counted): the estimate, or with `heavyHitters` and an estimate at the threshold,
   * the key's exact fleet-wide count (tracking it from this request if there is room). Below the
   * threshold the estimate is at most the limit, so it admits.
   */
  #exactCount(key: string, cost: number, estimate: number): number {
    const exact = this.#exact;
    if (exact === undefined || estimate < exact.threshold) return estimate;
    const cells = this.#rate.exactCells(true)!;
    const count = cells.add(this.#rate.lastKeyId(), cost, key, estimate);
    return count !== undefined && this.#everyNodeExact(cells) ? count : estimate;
  }

  /**
   * A count `key` has not exceeded in the window as far as this node knows, given its `count` and
   * sketch `estimate`: what a decision's `remaining` (the headers' `r`) is reported from, as in
   * `WindowQuota`. An exact count leaves out what each node counted before it began (less than
   * `threshold` each), so `r` from it jumped back up when the nodes began counting a client exactly
   * (93 then 99 at the 7th of 100 requests); the estimate bounds the count too, and is the
   * tighter of the two until the nodes' slack exceeds it. At least `count`, so `r` is 0 by the
   * first refusal.
   */
  #upper(count: number, estimate: number): number {
    const exact = this.#exact;
    if (exact === undefined) return count;
    return Math.max(count, Math.min(estimate, count + this.nodes * (exact.threshold - 1)));
  }

  /**
   * Whether every node syncing the quota counts exactly, as Redis last counted them: the sum of
   * exact counts leaves out the requests of a node that does not (one made without
   * `heavyHitters`, during a rolling deploy that turns it on), so until none is left the quota
   * decides on the sketch, as without `heavyHitters`, and counts exactly all the same.
   */
  #everyNodeExact(cells: ExactCells): boolean {
    return cells.census.nodes >= this.#rate.nodes;
  }

  /**
   * This node's own count of `key` for the `'local'` fail policy: exact if it counts it exactly,
   * which leaves out up to `threshold − 1` it saw before tracking it (the fail policy's bound says
   * so). Adding its sketch count at that moment instead would let a flood that fills the sketch
   * refuse the client while Redis is away. Called right after `key` was counted (its id is the
   * rate's last).
   */
  #local(key: string): number {
    const mine = this.#exact === undefined ? undefined : this.#rate.exactCells(true)!.local(this.#rate.lastKeyId());
    return mine ?? this.#rate.local(key);
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

  /** Whether {@link close} ran: counting throws then, reads answer from the last state. */
  get closed(): boolean {
    return this.#rate.closed;
  }
}
