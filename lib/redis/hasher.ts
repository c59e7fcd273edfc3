/**
 * Where a key's counters are in a synced sketch: the positions `Estimator.counterIndexes` gives
 * (docs/format.md §1–3), computed in TypeScript on either backend.
 *
 * A synced structure keeps its counters in JavaScript arrays (they are what it pushes and pulls),
 * so the only thing a backend could do for it is hash. The native `counterIndexes` builds a
 * JavaScript array per call through N-API, which cost more than the whole TypeScript hash: over
 * 10,000 Zipf IPv4 keys, a synced quota check took 5.2 µs with it, 58 % of it in that call, and
 * 1.3 µs with this (2-core VM at load average 10, 23 Nov 2026; `node --cpu-prof`). The fallback's hasher is
 * bit-identical to the native one (the cross-backend specs check it), so nodes on different
 * backends still count every key in the same counters.
 */
import { createHash } from 'node:crypto';
import type { Key } from '../core.js';
import { validateKey } from '../keys.js';
import { FORMAT_VERSION } from '../limits.js';
import { seedOption } from '../options.js';
import { hashKey } from '../../fallback/hasher.js';
import { Rows } from '../../fallback/rows.js';

/**
 * What decides the cells a key lands in, part of a synced sketch's Redis keys (script.ts): the
 * sketch format, the shape and a digest of the seed, e.g. `f3-4x8192-2adb6c84` for seed 7. Nodes
 * that differ in any of them would count one key in different cells, so they must not add up
 * their counts.
 * The seed goes as 8 hex digits of a SHA-256, not as itself: whoever reads Redis can write counts
 * anyway, but need not learn the seed that keeps outsiders from choosing colliding keys; two
 * different seeds share a digest with probability 2^-32.
 */
export function sketchLayout(hashes: number, slots: number, seed: bigint): string {
  const digest = createHash('sha256').update(`keepcount seed ${seed}`).digest('hex').slice(0, 8);
  return `f${FORMAT_VERSION}-${hashes}x${slots}-${digest}`;
}

export class KeyHasher {
  /** See {@link sketchLayout}. */
  readonly layout: string;
  readonly #rows: Rows;
  readonly #k0: number;
  readonly #k1: number;
  /** The last key's 64-bit hash, low and high halves (see {@link lastId}). */
  #h1 = 0;
  #h2 = 0;

  /** `hashes` × `slots` checked by the caller; `seed` as `EstimatorOptions.seed`, required. */
  constructor(hashes: number, slots: number, seed: unknown) {
    const s = seedOption(seed);
    this.layout = sketchLayout(hashes, slots, s);
    this.#k0 = Number(BigInt.asUintN(32, s));
    this.#k1 = Number(BigInt.asUintN(32, s >> 32n));
    this.#rows = new Rows(hashes, slots, this.#k0, this.#k1);
  }

  /**
   * `key`'s counter in each row, as row-major positions. The array is reused: valid until the
   * next call on this hasher.
   */
  indexes(key: Key): Int32Array {
    const h = hashKey(validateKey(key), this.#k0, this.#k1);
    this.#h1 = h.h1;
    this.#h2 = h.h2;
    return this.#rows.locate(h.h1, h.h2);
  }

  /**
   * 52 bits of the hash of the key {@link indexes} last located, exact in a double: a key's id in
   * a quota's exact counts (`exact.ts`), at no second hash. Keyed by the seed as the rows are, so
   * outsiders cannot choose keys that share one.
   */
  get lastId(): number {
    return (this.#h2 & 0xfffff) * 2 ** 32 + (this.#h1 >>> 0);
  }
}
