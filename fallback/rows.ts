/**
 * From a key's hash to one counter per row (docs/format.md §3), to the bit as the Rust crate's
 * `rows.rs`: row `i` reads the top half of `(a_i·x0 + c_i·x1 + b_i) mod 2^64`, a strongly universal
 * function of the whole 64-bit hash whose words are drawn from the seed; every word is reduced to a
 * column by Lemire's multiply-shift.
 *
 * The 64-bit products are assembled from 16-bit pieces so every intermediate is an exact double
 * (below 2^53) or an int32 from `Math.imul`: no `BigInt` on the hot path.
 */
import { SipHash } from './siphash.js';

/** The second half of the SipHash key the row words are drawn under. */
const ROW_DOMAIN = 1;

/**
 * A sketch's rows: which counter a key uses in each row. Built once per sketch (three SipHash calls
 * per row); `locate`, or {@link rowColumn} in a caller's own loop over the rows, then costs a few
 * multiplications per row.
 */
export class Rows {
  /** Three per row, the low halves of `a`, `c` and `b` as numbers (products of them are doubles). */
  readonly lows: Float64Array;
  /** Three per row, the high halves of `a`, `c` and `b` as int32 (for `Math.imul`). */
  readonly highs: Int32Array;
  /** Where `locate` writes; reused by every call, so valid until the next one. */
  private readonly indexes: Int32Array;
  /** `32 − log2(slots)` when `slots` is a power of two above 1, else −1. */
  readonly shift: number;

  constructor(
    readonly hashes: number,
    readonly slots: number,
    seedLow: number,
    seedHigh: number,
  ) {
    this.lows = new Float64Array(hashes * 3);
    this.highs = new Int32Array(hashes * 3);
    this.indexes = new Int32Array(hashes);
    // slots <= 2^27, so a power of two leaves a shift of 5 or more; 32 - log2(1) = 32 is not a
    // valid shift in JavaScript (it is taken mod 32), so width 1 takes the general path.
    this.shift = slots > 1 && (slots & (slots - 1)) === 0 ? 32 - Math.log2(slots) : -1;
    const sip = new SipHash(1, 3);
    for (let at = 0; at < hashes * 3; at++) {
      sip.begin(seedLow, seedHigh, ROW_DOMAIN, 0);
      sip.word(at);
      sip.word(0);
      sip.finish();
      this.lows[at] = sip.h1;
      this.highs[at] = sip.h2;
    }
  }

  /**
   * The row-major index of the key's counter in each row, row 0 first, for the key hash `h1` (low
   * half) and `h2` (high half). The array is reused: read it before the next call.
   */
  locate(h1: number, h2: number): Int32Array {
    const { indexes, lows, highs, hashes, slots, shift } = this;
    const x0 = h1 | 0;
    const x1 = h2 | 0;
    for (let row = 0, at = 0, base = 0; row < hashes; row++, at += 3, base += slots) {
      indexes[row] = base + rowColumn(lows, highs, at, x0, x1, slots, shift);
    }
    return indexes;
  }
}

/**
 * The column of the key hash `x0` (low half), `x1` (high half), as int32s, in the row whose words
 * start at `at` of `lows` and `highs`: bits 32..63 of `(a·x0 + c·x1 + b) mod 2^64`, reduced. The
 * low halves' products are split at bit 16 of `x` so each stays below 2^49; their sum's bits from
 * 32 up are the carry into the high half, which the high halves' products reach only through their
 * low 32 bits. Everything a row shares comes in as an argument: V8 does not hoist a field's load
 * out of a loop, so the loops that call this read the fields once, before they start.
 */
export function rowColumn(
  lows: Float64Array,
  highs: Int32Array,
  at: number,
  x0: number,
  x1: number,
  slots: number,
  shift: number,
): number {
  const al = lows[at]!;
  const cl = lows[at + 1]!;
  const low = al * (x0 & 0xffff) + cl * (x1 & 0xffff) + lows[at + 2]!;
  const mid = al * (x0 >>> 16) + cl * (x1 >>> 16);
  // `| 0` truncates the non-negative carry (floor) and takes it mod 2^32, all the sum needs of it.
  const carry = ((mid + Math.floor(low / 65536)) / 65536) | 0;
  const word = (Math.imul(highs[at]!, x0) + Math.imul(highs[at + 1]!, x1) + highs[at + 2]! + carry) >>> 0;
  // For a power-of-two width, Lemire's reduction is exactly the word's top bits.
  return shift >= 0 ? word >>> shift : column(word, slots);
}

/**
 * `floor(g * slots / 2^32)` exactly: `g * slots` can exceed 2^53, so `g` is split into 16-bit halves
 * and the nested floors are exact (floor(floor(x) / d) = floor(x / d) for integer d).
 */
export function column(g: number, slots: number): number {
  return Math.floor(((g >>> 16) * slots + Math.floor(((g & 0xffff) * slots) / 65536)) / 65536);
}
