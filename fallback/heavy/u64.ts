/**
 * The u64 counts of a heavy-hitter table (exact counts, slacks, overflow counters) as the fallback
 * keeps them: exact over the whole u64 range, as crates/limits/src/heavy/table.rs keeps them, so
 * both backends give the same bounds, rank keys alike and serialize the same bytes also once a
 * count passed 2^53 (docs/format.md §6).
 *
 * A {@link U64} is a number while it is a safe integer, as every count is unless increments or
 * merges pile it up past 2^53, and a bigint beyond 2^53 − 1, where BigInt arithmetic (which
 * allocates) takes over. Each helper adds in doubles when both sides are numbers and the sum is
 * still safe, so the usual add is one double add and one test. A number and a bigint compare
 * exactly with `<` and `>`; `Number(count)` is what the native backend's `u64 as f64` gives.
 * Entries hold their counts as U64s directly: a field holds only numbers until its count passes
 * 2^53, and the table's usual increment (`table.ts` `add`) tests `typeof` inline.
 */

/**
 * A u64: a safe integer as a number, a larger one as a bigint (never a bigint up to 2^53 − 1, so
 * `typeof count === 'number'` says the count is safe).
 */
export type U64 = number | bigint;

/** 2^53 − 1: the largest u64 a {@link U64} holds as a number. */
export const SAFE = Number.MAX_SAFE_INTEGER;
const SAFE_BIG = BigInt(SAFE);
/** `u64::MAX`, where saturating adds stop. */
export const U64_MAX = 2n ** 64n - 1n;

/** The u64 `value` as a {@link U64}. */
export const u64 = (value: bigint): U64 => (value <= SAFE_BIG ? Number(value) : value);

/**
 * `a + b` at most `u64::MAX` (Rust's `saturating_add`, what increments and merges do). A sum of two safe
 * integers that tests above 2^53 − 1 is above it exactly too (rounding keeps order), so the
 * BigInt path gives a bigint.
 */
export function addSaturating(a: U64, b: U64): U64 {
  if (typeof a === 'number' && typeof b === 'number' && a + b <= SAFE) return a + b;
  const sum = BigInt(a) + BigInt(b);
  return sum > U64_MAX ? U64_MAX : sum;
}

/** `a − b`, at least 0 (Rust's `saturating_sub`). */
export function subSaturating(a: U64, b: U64): U64 {
  if (typeof a === 'number' && typeof b === 'number') return Math.max(0, a - b);
  const difference = BigInt(a) - BigInt(b);
  return difference > 0n ? u64(difference) : 0;
}

/** The smaller of `a` and `b`. */
export const minU64 = (a: U64, b: U64): U64 => (a < b ? a : b);

/** Negative, zero or positive as `a` is below, equal to or above `b` (a sort comparator). */
export const compareU64 = (a: U64, b: U64): number => (a < b ? -1 : a > b ? 1 : 0);
