/**
 * keepcount/metrics: keepcount's limiters as Prometheus metrics through prom-client (an optional
 * peer dependency: install it to use this entry).
 *
 * Everything is read when Prometheus scrapes (prom-client's `collect`), so the request path pays
 * nothing but the two integer increments each limiter keeps anyway. Label cardinality is bounded:
 * one `policy` per limiter you add, one `key` per upstream key you list, and at most `topTalkers`
 * clients per quota, replaced on every scrape.
 *
 * @example
 * ```ts
 * import { register } from 'prom-client';
 * import { rateLimit } from 'keepcount/http';
 * import { KeepcountMetrics } from 'keepcount/metrics';
 *
 * const limit = rateLimit({ limit: 100, windowMs: 60_000 });
 * new KeepcountMetrics({ registry: register }).addQuota('api', limit);
 * app.get('/metrics', async (_req, res) => res.type(register.contentType).send(await register.metrics()));
 * ```
 *
 * @module
 */
import { Counter, Gauge, register as defaultRegistry, type Registry } from 'prom-client';
import { invalidType, outOfRange, withCode } from './errors.js';
import type { LimiterTalkers, QuotaTalkers } from './http/talkers.js';
import { HeavyHitters } from './heavy.js';
import { Limiter } from './limiter.js';
import { SharedLimiter } from './shared-limiter.js';
import { SyncedLimiter } from './redis/limiter.js';
import { UpstreamLimit } from './http/upstream.js';
import { WindowQuota } from './http/window-quota.js';
import type { HeavyTalker } from './core.js';
import { SyncedWindowQuota } from './redis/window-quota.js';
import { SyncedInflight } from './redis/inflight.js';
import { integerOption, optionsObject } from './options.js';

/** Most top talkers per quota: keeps label cardinality small whatever the option says. */
const MAX_TOP_TALKERS = 100;

/** The metrics a {@link KeepcountMetrics} registers, after its prefix. */
const METRIC_NAMES = ['decisions_total', 'top_talker_requests', 'tracked_clients', 'overflow_requests', 'inflight'];

/** Options of {@link KeepcountMetrics}. */
export interface KeepcountMetricsOptions {
  /** The registry to register in. Defaults to prom-client's global `register`. */
  registry?: Registry;
  /** Prepended to every metric name. Defaults to `'keepcount_'`. */
  prefix?: string;
  /** Top talkers exported per quota: an integer in [0, 100]. Defaults to 10. */
  topTalkers?: number;
}

/** Anything with decision counters: a quota, an upstream limit or a token-bucket limiter. */
interface Decider {
  decisions(): { allowed: number; refused: number };
}

/** What the gauges read of a quota, local or synced. */
interface ExportedQuota extends Decider {
  /** Whether it was closed: a synced quota's reads still answer then, from its last state. */
  closed(): boolean;
  topTalkers(n: number): HeavyTalker[];
  /** Clients counted exactly and requests past the table, or `null` without heavy hitters. */
  heavy(): { tracked: number; overflowEvents: number } | null;
}

/** `quota` as the gauges read it. */
function exported(quota: WindowQuota | SyncedWindowQuota): ExportedQuota {
  return {
    decisions: () => quota.decisions(),
    closed: () => quota instanceof SyncedWindowQuota && quota.closed,
    topTalkers: (n) => quota.topTalkers(n),
    heavy: () => (quota instanceof WindowQuota ? quota.stats() : quota.heavyHitterStats()) ?? null,
  };
}

/**
 * Exports, for every quota, token-bucket limiter and upstream limit added:
 * - `keepcount_decisions_total{policy, outcome}`: requests allowed and refused (on this node, for
 *   a keepcount/redis `SyncedWindowQuota` or `SyncedLimiter`; in this process, for a shared
 *   `Limiter`);
 * - `keepcount_top_talker_requests{policy, client, bound}`: the current window's top talkers, the
 *   lower (exact since the client entered the table) and upper bounds of their counts;
 * - `keepcount_tracked_clients{policy}` and `keepcount_overflow_requests{policy}`: clients counted
 *   exactly in the current window, and requests of clients that found the table full (judged by the
 *   sketch alone, so possibly refused wrongly: alert on it); for a `tokenBucket` middleware given
 *   `talkers`, the same three of its talkers table;
 * - `keepcount_inflight{upstream, key}`: in-flight calls per listed upstream key.
 */
export class KeepcountMetrics {
  readonly #quotas = new Map<string, ExportedQuota>();
  readonly #upstreams = new Map<string, { limit: UpstreamLimit; keys: readonly string[] }>();
  /** What the decision counters read at the last scrape, per policy. */
  readonly #seen = new Map<string, { allowed: number; refused: number }>();
  readonly #deciders = new Map<string, Decider>();
  readonly #topTalkers: number;

  constructor(options: KeepcountMetricsOptions = {}) {
    const o = optionsObject(options);
    const registry = o.registry ?? defaultRegistry;
    if (typeof (registry as Partial<Registry> | null)?.getSingleMetric !== 'function') {
      throw invalidType('The "registry" option', 'a prom-client Registry', registry);
    }
    const prefix = o.prefix ?? 'keepcount_';
    if (typeof prefix !== 'string') throw invalidType('The "prefix" option', 'of type string', prefix);
    if (!/^([a-zA-Z_:][a-zA-Z0-9_:]*)?$/.test(prefix)) {
      throw outOfRange('The "prefix" option', 'a Prometheus metric name prefix ([a-zA-Z_:][a-zA-Z0-9_:]*)', prefix);
    }
    // prom-client would throw its own uncoded Error at the first metric: say which, with a code.
    for (const name of METRIC_NAMES) {
      if (registry.getSingleMetric(`${prefix}${name}`) !== undefined) {
        throw withCode(
          new Error(
            `The registry already holds a metric named "${prefix}${name}": one KeepcountMetrics per registry and ` +
              'prefix (add every quota and upstream to it), or give the second another prefix',
          ),
          'ERR_KEEPCOUNT_DUPLICATE_KEY',
        );
      }
    }
    this.#topTalkers = integerOption('topTalkers', o.topTalkers, 0, MAX_TOP_TALKERS, 10);
    const registers = [registry];
    // The collectors run with `this` bound to their metric: they reach these through closures.
    const deciders = this.#deciders;
    const seen = this.#seen;
    const quotas = this.#quotas;
    const upstreams = this.#upstreams;
    const topTalkers = this.#topTalkers;
    new Counter({
      name: `${prefix}decisions_total`,
      help: 'Requests keepcount allowed and refused, by policy',
      labelNames: ['policy', 'outcome'],
      registers,
      collect() {
        for (const [policy, decider] of deciders) {
          const now = decider.decisions();
          const before = seen.get(policy) ?? { allowed: 0, refused: 0 };
          this.inc({ policy, outcome: 'allowed' }, now.allowed - before.allowed);
          this.inc({ policy, outcome: 'refused' }, now.refused - before.refused);
          seen.set(policy, now);
        }
      },
    });
    new Gauge({
      name: `${prefix}top_talker_requests`,
      help: "The current window's top talkers per quota: bounds on their request counts",
      labelNames: ['policy', 'client', 'bound'],
      registers,
      collect() {
        // Replaced whole on every scrape, so at most `topTalkers` clients per quota ever show.
        this.reset();
        for (const [policy, quota] of quotas) {
          for (const { key, lower, upper } of unlessClosed(() => quota.topTalkers(topTalkers), quota.closed()) ?? []) {
            const client = typeof key === 'string' ? key : String(key);
            this.set({ policy, client, bound: 'lower' }, lower);
            this.set({ policy, client, bound: 'upper' }, upper);
          }
        }
      },
    });
    new Gauge({
      name: `${prefix}tracked_clients`,
      help: 'Clients counted exactly in the current window, per quota',
      labelNames: ['policy'],
      registers,
      collect() {
        for (const [policy, quota] of quotas) {
          // null: no heavy hitters (0 is the truth); undefined: closed (nothing to tell).
          const stats = unlessClosed(() => quota.heavy(), quota.closed());
          if (stats === undefined) this.remove({ policy });
          else this.set({ policy }, stats?.tracked ?? 0);
        }
      },
    });
    new Gauge({
      name: `${prefix}overflow_requests`,
      help: "Requests in the current window from clients that found the quota's exact table full",
      labelNames: ['policy'],
      registers,
      collect() {
        for (const [policy, quota] of quotas) {
          // null: no heavy hitters (0 is the truth); undefined: closed (nothing to tell).
          const stats = unlessClosed(() => quota.heavy(), quota.closed());
          if (stats === undefined) this.remove({ policy });
          else this.set({ policy }, stats?.overflowEvents ?? 0);
        }
      },
    });
    new Gauge({
      name: `${prefix}inflight`,
      help: 'Calls in flight per upstream key',
      labelNames: ['upstream', 'key'],
      registers,
      collect() {
        for (const [upstream, { limit, keys }] of upstreams) {
          for (const key of keys) {
            const { inflight } = limit;
            const count = unlessClosed(() => inflight.get(key), inflight instanceof SyncedInflight && inflight.closed);
            if (count === undefined) this.remove({ upstream, key });
            else this.set({ upstream, key }, count);
          }
        }
      },
    });
  }

  /**
   * Exports a quota (a `WindowQuota`, a keepcount/redis `SyncedWindowQuota`, or a `rateLimit`
   * middleware or hook on either) as policy `policy`. A synced quota exports this node's decisions
   * and, with `heavyHitters`, the clients it counts exactly, by their fleet-wide counts.
   */
  addQuota(policy: string, quota: WindowQuota | SyncedWindowQuota | QuotaTalkers): this {
    const q =
      quota instanceof WindowQuota || quota instanceof SyncedWindowQuota
        ? quota
        : (quota as Partial<QuotaTalkers> | undefined)?.quota;
    if (!(q instanceof WindowQuota || q instanceof SyncedWindowQuota)) {
      throw invalidType('The "quota" argument', 'a WindowQuota, a SyncedWindowQuota or a rateLimit middleware', quota);
    }
    this.#add(policy, q);
    this.#quotas.set(policy, exported(q));
    return this;
  }

  /**
   * Exports a token-bucket limiter (a `Limiter`, a shared one from `Limiter.openShared`, or a
   * keepcount/redis `SyncedLimiter`), or a `tokenBucket` middleware or hook on one, as policy
   * `policy`: its decisions, and, for a middleware given `talkers`, the top talkers, tracked clients
   * and overflow of that table (a limiter keeps no counts to list).
   */
  addLimiter(policy: string, limiter: Limiter | SharedLimiter | SyncedLimiter | LimiterTalkers): this {
    const given =
      limiter instanceof Limiter || limiter instanceof SharedLimiter || limiter instanceof SyncedLimiter
        ? { limiter, talkers: undefined }
        : (limiter as Partial<LimiterTalkers> | undefined);
    const l = given?.limiter;
    if (!(l instanceof Limiter || l instanceof SharedLimiter || l instanceof SyncedLimiter)) {
      throw invalidType(
        'The "limiter" argument',
        'a Limiter, a shared Limiter, a SyncedLimiter or a tokenBucket middleware on one',
        limiter,
      );
    }
    this.#add(policy, l);
    const talkers = given?.talkers;
    if (talkers instanceof HeavyHitters) {
      this.#quotas.set(policy, {
        decisions: () => l.decisions(),
        closed: () => false,
        topTalkers: (n) => talkers.top(n),
        heavy: () => talkers.stats(),
      });
    }
    return this;
  }

  /** Exports an upstream limit as policy `policy`, with the in-flight count of each of `keys`. */
  addUpstream(policy: string, limit: UpstreamLimit, keys: readonly string[] = []): this {
    if (!(limit instanceof UpstreamLimit)) throw invalidType('The "limit" argument', 'an UpstreamLimit', limit);
    if (!Array.isArray(keys) || !keys.every((k) => typeof k === 'string')) {
      throw invalidType('The "keys" argument', 'an array of strings', keys);
    }
    this.#add(policy, limit);
    this.#upstreams.set(policy, { limit, keys: [...keys] });
    return this;
  }

  #add(policy: string, decider: Decider): void {
    if (typeof policy !== 'string') throw invalidType('The "policy" argument', 'of type string', policy);
    if (this.#deciders.has(policy)) throw outOfRange('The "policy" argument', 'a name not added yet', policy);
    this.#deciders.set(policy, decider);
    this.#seen.set(policy, { allowed: 0, refused: 0 });
  }
}

/**
 * `read()`, or `undefined` when what it reads was closed (`ERR_KEEPCOUNT_CLOSED`, or `closed`): a
 * quota or upstream counter closed while still exported has its gauges removed from the scrape
 * rather than failing the whole scrape (its decisions, counted in JavaScript, are still reported).
 * A keepcount/redis structure's reads answer from its last state once closed, so it says so by
 * `closed`: read, a closed `SyncedInflight` showed the slots it held at its close for good.
 */
function unlessClosed<T>(read: () => T, closed = false): T | undefined {
  if (closed) return undefined;
  try {
    return read();
  } catch (error) {
    if ((error as { code?: unknown } | null)?.code === 'ERR_KEEPCOUNT_CLOSED') return undefined;
    throw error;
  }
}
