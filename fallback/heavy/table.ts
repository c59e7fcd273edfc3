/**
 * The bounded exact table behind a summary (crates/limits/src/heavy/table.rs): keys that crossed
 * the threshold, each with its exact count since entry and the slack that bounds what came before.
 * Counts are numbers, exact up to 2^53; bounds saturate at 2^64 (`u64::MAX` as a number).
 */

import { canonical, type CanonicalKey } from '../canonical.js';
import { decodeStored } from './keys.js';

/** `u64::MAX` as a number (2^64 after rounding), where bounds saturate. */
export const U64_MAX = 2 ** 64;

/** `a + b` saturating at {@link U64_MAX}. */
export const addSat = (a: number, b: number): number => Math.min(a + b, U64_MAX);

/** A tracked key. */
export interface Entry {
  /** The key's hash (rapidhash): low and high 32 bits. */
  h1: number;
  h2: number;
  /** The stored form (docs/format.md §6.1). */
  key: Uint8Array;
  exact: number;
  slack: number;
}

/** Bounds as the table gives them: `[lower, upper]` of a tracked key. */
export const lowerOf = (e: Entry): number => e.exact;
export const upperOf = (e: Entry): number => addSat(e.exact, e.slack);

/**
 * `table::rank`: larger upper bound first, then larger lower bound, then smaller key hash (as an
 * unsigned 64-bit number), so both backends order ties the same.
 */
export function rank(a: Entry, b: Entry): number {
  return upperOf(b) - upperOf(a) || b.exact - a.exact || a.h2 - b.h2 || a.h1 - b.h1;
}

/** What happened to increments of keys that reached the threshold but found the table full. */
export interface Overflow {
  events: number;
  weight: number;
  mergeDropped: number;
}

/** The exact table: at most `capacity` keys, none evicted until {@link clear}. */
export class Table {
  /** Entries by their key's canonical form (`fallback/canonical.ts`). */
  readonly entries = new Map<CanonicalKey, Entry>();
  overflow: Overflow = { events: 0, weight: 0, mergeDropped: 0 };

  constructor(readonly capacity: number) {}

  /** `table.add`: counts `value` for a key whose estimate (this increment included) is `estimate`; returns its lower bound, or −1 if it overflowed. */
  add(
    id: CanonicalKey,
    h1: number,
    h2: number,
    key: () => Uint8Array,
    value: number,
    estimate: number,
    slackCap: number,
  ): number {
    const entry = this.entries.get(id);
    if (entry !== undefined) {
      entry.exact = addSat(entry.exact, value);
      return entry.exact;
    }
    if (this.entries.size >= this.capacity) {
      this.overflow.events = addSat(this.overflow.events, 1);
      this.overflow.weight = addSat(this.overflow.weight, value);
      return -1;
    }
    const slack = Math.min(Math.max(0, estimate - value), slackCap);
    this.entries.set(id, { h1, h2, key: key(), exact: value, slack });
    return value;
  }

  /** Replaces the content with `entries`, keeping the `capacity` that rank first (`keep_largest`). */
  replace(entries: Entry[]): void {
    if (entries.length > this.capacity) {
      entries.sort(rank);
      this.overflow.mergeDropped = addSat(this.overflow.mergeDropped, entries.length - this.capacity);
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
