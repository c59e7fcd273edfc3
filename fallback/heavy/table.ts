/**
 * The bounded exact table behind a summary (crates/limits/src/heavy/table.rs): keys that crossed
 * the threshold, each with its exact count since entry and the slack that bounds what came before.
 * Counts are u64s, exact over the whole range ({@link U64}: numbers while safe, BigInt beyond),
 * and add as the native table's do: increments and merges saturate at `u64::MAX`, a refund stops
 * at 0.
 */

import type { HeavyStanding } from '../../lib/core.js';
import { canonical, type CanonicalKey } from '../canonical.js';
import { decodeStored } from './keys.js';
import { addSaturating, compareU64, minU64, subSaturating, type U64 } from './u64.js';

/**
 * 2^53 − 1, for the test in {@link Table.add}: a constant of this module, not `u64.ts`'s `SAFE`,
 * since V8 loads an imported binding again at every call (see `fallback/estimator.ts`).
 */
const SAFE = Number.MAX_SAFE_INTEGER;

/** A tracked key. */
export interface Entry {
  /** The key's hash (rapidhash): low and high 32 bits. */
  h1: number;
  h2: number;
  /** The stored form (docs/format.md §6.1). */
  key: Uint8Array;
  exact: U64;
  slack: U64;
}

/**
 * A key's bounds and standing (crates/limits/src/heavy/count.rs `Count`), exactly: the API's
 * `HeavyCount` is them as the nearest numbers.
 */
export interface Bounds {
  lower: U64;
  upper: U64;
  standing: HeavyStanding;
}

/** A tracked key's upper bound: `exact + slack`, saturating. */
export const upperOf = (e: Entry): U64 => addSaturating(e.exact, e.slack);

/**
 * `table::rank`: larger upper bound first, then larger lower bound, then smaller key hash (as an
 * unsigned 64-bit number), so both backends order ties the same, also of counts past 2^53.
 */
export function rank(a: Entry, b: Entry): number {
  return compareU64(upperOf(b), upperOf(a)) || compareU64(b.exact, a.exact) || a.h2 - b.h2 || a.h1 - b.h1;
}

/** What happened to increments of keys that reached the threshold but found the table full. */
export interface Overflow {
  events: U64;
  weight: U64;
  mergeDropped: U64;
}

/** The exact table: at most `capacity` keys, none evicted until {@link clear}. */
export class Table {
  /** Entries by their key's canonical form (`fallback/canonical.ts`). */
  readonly entries = new Map<CanonicalKey, Entry>();
  overflow: Overflow = { events: 0, weight: 0, mergeDropped: 0 };

  constructor(readonly capacity: number) {}

  /**
   * `table.add`: counts `value` for a key whose estimate (this increment included) is `estimate`;
   * returns its lower bound as the nearest number, or −1 if it overflowed. A key entering gets the
   * slack `min(estimate − value, slackCap)`.
   *
   * A tracked key's count costs what it did when counts were plain numbers: a fallback
   * `HeavyHitters#incr` of 64 tracked keys took 3,179–3,186 instructions a call, against
   * 3,197–3,198 before (callgrind, Node 20.20, AMD EPYC, 2026-11-27).
   */
  add(
    id: CanonicalKey,
    h1: number,
    h2: number,
    key: () => Uint8Array,
    value: number,
    estimate: U64,
    slackCap: U64,
  ): number {
    const entry = this.entries.get(id);
    if (entry !== undefined) {
      const exact = entry.exact;
      // The usual add: a safe count that stays safe. Any other goes exact in `addSaturating`.
      if (typeof exact === 'number') {
        const sum = exact + value;
        if (sum <= SAFE) return (entry.exact = sum);
      }
      return Number((entry.exact = addSaturating(exact, value)));
    }
    if (this.entries.size >= this.capacity) {
      const o = this.overflow;
      o.events = addSaturating(o.events, 1);
      o.weight = addSaturating(o.weight, value);
      return -1;
    }
    const slack = minU64(subSaturating(estimate, value), slackCap);
    this.entries.set(id, { h1, h2, key: key(), exact: value, slack });
    return value;
  }

  /** Replaces the content with `entries`, keeping the `capacity` that rank first (`keep_largest`). */
  replace(entries: Entry[]): void {
    if (entries.length > this.capacity) {
      entries.sort(rank);
      this.overflow.mergeDropped = addSaturating(this.overflow.mergeDropped, entries.length - this.capacity);
      entries.length = this.capacity;
    }
    this.entries.clear();
    for (const entry of entries) this.entries.set(idOf(entry.key), entry);
  }

  clear(): void {
    this.entries.clear();
    this.overflow = { events: 0, weight: 0, mergeDropped: 0 };
  }
}

/** The map key of a stored form: the canonical form of the key it stores (never called on bytes
 * that are no stored form: the decoder refuses them first). */
export function idOf(stored: Uint8Array): CanonicalKey {
  return canonical(decodeStored(stored)!);
}
