/** A count-min sketch whose counts are the sum over every node syncing it through Redis. */
import type { Key } from '../core.js';
import { invalidType } from '../errors.js';
import { countArgument, optionsObject, shapeOptions } from '../options.js';
import { Census, entryKeys, SyncedCells } from './cells.js';
import { KeyHasher } from './hasher.js';
import { RedisSync } from './sync.js';
import { LIVE_PERIODS } from './sync-call.js';
import { closedSyncedError, syncClosedError } from './sync-errors.js';
import { nameOption } from './sync-options.js';

/** Options of {@link SyncedEstimator}. */
export interface SyncedEstimatorOptions {
  /** The {@link RedisSync} that carries it. Required. */
  sync: RedisSync;
  /** The structure's name: nodes that give the same name share the counts. Required; no `{` or `}`. */
  name: string;
  /**
   * The hash seed, the same on every node (a shared secret: whoever knows it can craft
   * colliding keys). A bigint in [0, 2^64) or a safe integer >= 0. Required.
   */
  seed: bigint | number;
  /** Rows; see `EstimatorOptions.hashes`. Defaults to 4. */
  hashes?: number;
  /** Counters per row; see `EstimatorOptions.slots`. Defaults to 8192. */
  slots?: number;
}

/**
 * An `Estimator` shared by every node that syncs it: `incr` and `get` are local (a hash and
 * `hashes` array touches), and every `syncMs` the node pushes the counters it changed and pulls
 * those the others changed. An estimate counts this node's increments at once and the other
 * nodes' as of the last sync: it lags the fleet by at most two sync periods plus a round trip
 * (one for the other node to push, one for this one to pull), and is exact again once every
 * node has synced.
 *
 * The sketch lives in Redis under `<prefix>:{<name>}:e:<layout>:*` (one hash tag: one cluster
 * slot; the layout names the sketch format, shape and a seed digest, so misconfigured nodes never
 * mix their counts with the others' and are reported as `ERR_KEEPCOUNT_LAYOUT`), with
 * one hash per node holding its contribution, kept for ever: delete the keys to start over.
 *
 * When Redis loses the sketch (a restart without its data, an older snapshot, deleted keys), every
 * node pushes its whole counts again, each at its next syncs. Until they arrive, an estimate keeps
 * the others' counts as this node knew them: for 10 × `syncMs` after the sync that found the loss
 * (as long as the node registry keeps a node that stopped syncing), each counter reads at least
 * what the others had (cells.ts `apply`). A `decr` elsewhere meanwhile shows when that ends; a
 * node whose syncs fail for longer is missing until it pushes its counts again.
 */
export class SyncedEstimator {
  readonly #hasher: KeyHasher;
  readonly #cells: SyncedCells;
  readonly #sync: RedisSync;
  #closed = false;

  constructor(options: SyncedEstimatorOptions) {
    const o = optionsObject(options);
    this.#sync = syncOption(o.sync);
    const name = nameOption('name', o.name);
    if (o.seed === undefined) throw invalidType('The "seed" option', 'a bigint or a number', o.seed);
    const { hashes, slots } = shapeOptions(o.hashes, o.slots, { hashes: 4, slots: 8192 });
    // Hashes keys the way every node does; its own counters stay unused (the arrays below count).
    this.#hasher = new KeyHasher(hashes, slots, o.seed);
    const base = `${this.#sync.prefix}:{${name}}`;
    const census = new Census(this.#sync);
    const keys = entryKeys(base, 'e', this.#hasher.layout);
    const floorMs = LIVE_PERIODS * this.#sync.syncMs;
    this.#cells = new SyncedCells(hashes * slots, keys, census, () => 0, 0, floorMs);
    this.#sync.add(this, 'SyncedEstimator', name);
  }

  /** Adds `value` (a safe integer, may be negative; defaults to 1) to `key`; returns its new fleet-wide estimate. */
  incr(key: Key, value = 1): number {
    if (this.#closed) throw closedSyncedError('SyncedEstimator');
    if (this.#sync.closed) throw syncClosedError('SyncedEstimator');
    return this.#cells.add(this.#hasher.indexes(key), countArgument('value', value));
  }

  /** Subtracts `value` from `key`; returns its new estimate. */
  decr(key: Key, value = 1): number {
    if (this.#closed) throw closedSyncedError('SyncedEstimator');
    if (this.#sync.closed) throw syncClosedError('SyncedEstimator');
    return this.#cells.add(this.#hasher.indexes(key), -countArgument('value', value));
  }

  /** `key`'s fleet-wide estimate: this node's counts now, the others' as of the last sync. */
  get(key: Key): number {
    return this.#cells.estimate(this.#hasher.indexes(key));
  }

  /** `key`'s estimate from this node's increments alone. */
  local(key: Key): number {
    return this.#cells.local(this.#hasher.indexes(key));
  }

  /**
   * Live nodes syncing this sketch (this one included), as Redis counted them at its last sync;
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
   * Stops counting: `incr` and `decr` then throw `ERR_KEEPCOUNT_CLOSED`, reads answer from the
   * last state. What was counted before is pushed by the next successful syncs (`sync.flush()`,
   * the timer, or `sync.close()`), after which the sketch is no longer synced.
   */
  close(): void {
    this.#closed = true;
    this.#sync.retire(this);
  }

  /** Whether {@link close} ran: counting throws then, reads answer from the last state. */
  get closed(): boolean {
    return this.#closed;
  }
}

/** The `sync` option, checked. */
export function syncOption(value: unknown): RedisSync {
  if (!(value instanceof RedisSync)) throw invalidType('The "sync" option', 'an instance of RedisSync', value);
  return value;
}
