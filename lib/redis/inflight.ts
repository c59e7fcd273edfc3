/** In-flight counts per key summed over every live node syncing them through Redis, with leases. */
import type { Key } from '../core.js';
import { Estimator } from '../estimator.js';
import { invalidType, withCode, type KeepcountError } from '../errors.js';
import { guardedIncr, type InflightCounter, type InflightCounts, type InflightGuard } from '../inflight.js';
import { validateKey } from '../keys.js';
import { MAX_STORED_KEY_LENGTH } from '../long-key.js';
import { countArgument, optionsObject, seedOption, shapeOptions } from '../options.js';
import { Census, entryKeys, SyncedCells } from './cells.js';
import { syncOption } from './estimator.js';
import { sketchLayout } from './hasher.js';
import type { RedisSync } from './sync.js';
import { leaseMsOption, nameOption } from './sync-options.js';

/**
 * A structure's keys live this many leases after the last sync of any node, then vanish together
 * (a fleet that stopped leaves nothing behind; a node back later starts a new incarnation).
 */
const KEEP_LEASES = 10;

/**
 * String keys whose counter indexes are remembered. Hashing a key (a native call on the native
 * backend, which returns a new array) cost most of an `enter` + `leave` pair: about 5 µs against
 * 0.6 µs for `Inflight`'s. In-flight limits usually count a few upstreams, so a small map serves
 * them; past this many keys it starts over. Only keys of at most `MAX_STORED_KEY_LENGTH` (256)
 * code units are remembered, so the map holds at most about 0.5 MB of keys whatever their length
 * (a key read from a request header is the client's choice: 16 kB keys would have made it 16–32 MB).
 */
const REMEMBERED_KEYS = 1024;

/** The `ERR_KEEPCOUNT_CLOSED` error of a {@link SyncedInflight} used after its `close()`. */
function closedInflightError(): KeepcountError {
  return withCode(
    new Error(
      "This SyncedInflight was closed: it counts no more, and its slots leave the fleet's count when its lease runs out",
    ),
    'ERR_KEEPCOUNT_CLOSED',
  );
}

/**
 * The counts of a closed {@link SyncedInflight}: counting throws `ERR_KEEPCOUNT_CLOSED`; reads
 * answer from the last state, as every closed synced structure's do.
 */
function closedCounts(open: InflightCounts['core']): InflightCounts['core'] {
  return {
    incr: () => {
      throw closedInflightError();
    },
    get: open.get,
  };
}

/** Options of {@link SyncedInflight}. */
export interface SyncedInflightOptions {
  /** The {@link RedisSync} that carries it. Required. */
  sync: RedisSync;
  /** The structure's name: nodes that give the same name share the counts. Required; no `{` or `}`. */
  name: string;
  /** The hash seed, the same on every node; see `SyncedEstimatorOptions.seed`. Required. */
  seed: bigint | number;
  /**
   * How long a node's slots count for the others after its last successful sync: an integer in
   * (`syncMs`, 7,200,000]. A crashed node's slots leave the global count within this (plus the
   * others' next sync); a live node whose syncs fail this long is dropped too and pushes its whole
   * count again once it reaches Redis. Defaults to the sync's `staleAfterMs` (`timeoutMs +
   * syncMs`, 1,100 ms by default): the others forget a node about when it calls itself stale; but
   * never less than `syncMs + timeoutMs`, so that syncs on time always renew it.
   */
  leaseMs?: number;
  /** Rows of the sketch. Defaults to 4. */
  hashes?: number;
  /** Counters per row. Defaults to 8192, as `Inflight`. */
  slots?: number;
}

/**
 * An `Inflight` shared by every node that syncs it: the same `incr` (with its guard), `enter`,
 * `leave` and `get`, all local, so `UpstreamLimit` (`upstreamLimit({ inflight })`) caps an
 * upstream's calls across every machine.
 *
 * Each node's count is its own contribution in Redis, held under a lease that each sync renews;
 * the global count is the sum of the live contributions. A node that dies (even by `SIGKILL`)
 * stops renewing, and the first sync of any other node after the lease runs out subtracts its
 * slots, so they leave every node's view within `leaseMs + 2 × (syncMs + RTT)`: no slot is held
 * for ever by a process that is gone.
 *
 * # The bound
 * A count is this node's own slots now plus the others' as of the last sync, which lag by at most
 * `D = 2 × (syncMs + RTT)` (as for `SyncedWindowQuota`). A cap `max` checked against it can be
 * passed by the slots the other nodes took in the last `D` ms: with `n` nodes each taking at most
 * `r` slots per ms, at most `max + (n − 1) × r × D` are in flight at once. Slots released on other
 * nodes are seen as late, so the count errs high for as long. While the sync is stale the others'
 * counts stay as last seen (a node gone meanwhile still counts: the cap errs on the safe side);
 * after Redis was stopped for longer than a lease, the first node to sync reaps the others, whose
 * slots are missing from the count until they push them again (about three sync periods).
 *
 * # Lost keys
 * A lease set or a node's contribution that Redis loses (eviction, `DEL`, `FLUSHALL`) would
 * strand a dead node's slots in the count: nothing would know who held them or how many. The next
 * sync after such a loss starts the entry over (see script.ts), so the count is the live nodes'
 * slots again after three syncs of each live node, `3 × (syncMs + RTT)`, a dead node's slots
 * leaving then whatever is left of its lease.
 */
export class SyncedInflight implements InflightCounter {
  /** Milliseconds a node's slots count after its last sync. */
  readonly leaseMs: number;
  readonly #hasher: Estimator;
  readonly #cells: SyncedCells;
  readonly #sync: RedisSync;
  readonly #counts: InflightCounts;
  readonly #indexes = new Map<string, number[]>();

  constructor(options: SyncedInflightOptions) {
    const o = optionsObject(options);
    this.#sync = syncOption(o.sync);
    const name = nameOption('name', o.name);
    if (o.seed === undefined) throw invalidType('The "seed" option', 'a bigint or a number', o.seed);
    this.leaseMs = leaseMsOption(o.leaseMs, this.#sync);
    const { hashes, slots } = shapeOptions(o.hashes, o.slots, { hashes: 4, slots: 8192 });
    const seed = seedOption(o.seed);
    this.#hasher = new Estimator({ hashes, slots, seed });
    const base = `${this.#sync.prefix}:{${name}}`;
    const ttlMs = this.leaseMs * KEEP_LEASES;
    const layout = sketchLayout(hashes, slots, seed);
    const census = new Census(this.#sync);
    this.#cells = new SyncedCells(hashes * slots, entryKeys(base, 'i', layout), census, () => ttlMs, this.leaseMs);
    this.#counts = {
      core: {
        incr: (key, value) => this.#cells.add(this.#counters(key), value),
        get: (key) => this.#cells.estimate(this.#counters(key)),
      },
      open: true,
    };
    this.#sync.add(this, 'SyncedInflight', name);
  }

  /**
   * Adds `value` (a safe integer; defaults to 1) to `key`. Returns `[guard, count]`: the guard that
   * gives it back and the key's new fleet-wide count, as `Inflight.incr`.
   */
  incr(key: Key, value = 1): [guard: InflightGuard, count: number] {
    return guardedIncr(this.#counts, key, value);
  }

  /** Adds `value` to `key` without a guard (pair it with {@link leave}); returns the new fleet-wide count. */
  enter(key: Key, value = 1): number {
    return this.#counts.core.incr(validateKey(key), countArgument('value', value));
  }

  /**
   * Takes back what {@link enter} added. After {@link close} it does nothing, as a guard's release:
   * a `finally` (or `UpstreamLimit`'s slot, released when a request ends) that outlives the close
   * must not throw.
   */
  leave(key: Key, value = 1): void {
    const k = validateKey(key);
    const v = countArgument('value', value);
    const counts = this.#counts;
    if (counts.open) counts.core.incr(k, -v);
  }

  /** `key`'s fleet-wide count: this node's slots now, the others' as of the last sync. */
  get(key: Key): number {
    return this.#counts.core.get(validateKey(key));
  }

  /** `key`'s count from this node's slots alone. */
  local(key: Key): number {
    return this.#cells.local(this.#counters(validateKey(key)));
  }

  /**
   * The counters of a validated `key`, remembered for string keys up to 256 code units. A longer
   * key is hashed whole on every call rather than stored in its bounded form: the sketch keeps no
   * keys, so nothing else needs bounding, and every node and backend count it in the counters of
   * the key as given, as `Inflight` does, with no digest collisions on top of the sketch's.
   */
  #counters(key: Key): number[] {
    if (typeof key !== 'string' || key.length > MAX_STORED_KEY_LENGTH) return this.#hasher.counterIndexes(key);
    let indexes = this.#indexes.get(key);
    if (indexes === undefined) {
      if (this.#indexes.size >= REMEMBERED_KEYS) this.#indexes.clear();
      indexes = this.#hasher.counterIndexes(key);
      this.#indexes.set(key, indexes);
    }
    return indexes;
  }

  /**
   * Live nodes syncing this count (this one included), as Redis counted them at its last sync;
   * before its first, the most any structure on its sync has counted (`sync.nodes`).
   */
  get nodes(): number {
    return this.#cells.census.nodes;
  }

  /** @internal What the sync pushes and pulls. */
  entries(): SyncedCells[] {
    return [this.#cells];
  }

  /**
   * Stops syncing (push what is pending first with `sync.flush()`); this node's slots leave the
   * others' count when its lease runs out. From then on `incr` and `enter` throw
   * `ERR_KEEPCOUNT_CLOSED`: a count no sync pushes would cap this node alone, silently. `leave`
   * and guards released later do nothing and never throw (a guard collected later is released
   * from a finalizer, where a throw would end the process); `get` and `local` answer from the
   * last state, as every closed synced structure's reads do.
   * Idempotent. Closing the sync instead (`sync.close()`) keeps this counter counting on this
   * node's slots, as a quota keeps deciding, so a server draining requests at shutdown answers them.
   */
  close(): void {
    const counts = this.#counts;
    if (!counts.open) return;
    counts.open = false;
    counts.core = closedCounts(counts.core);
    this.#sync.remove(this);
  }

  /** Whether {@link close} ran: counting throws then, reads answer from the last state. */
  get closed(): boolean {
    return !this.#counts.open;
  }
}
