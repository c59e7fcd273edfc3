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
 * per row); `locate` then costs a few multiplications per row.
 */
export class Rows {
  /** Six u32 per row: `a` low, `a` high, `c` low, `c` high, `b` low, `b` high. */
  private readonly words: Uint32Array;
  /** Where `locate` writes; reused by every call, so valid until the next one. */
  private readonly indexes: Int32Array;
  /** `32 − log2(slots)` when `slots` is a power of two above 1, else −1. */
  private readonly shift: number;

  constructor(
    readonly hashes: number,
    readonly slots: number,
    seedLow: number,
    seedHigh: number,
  ) {
    this.words = new Uint32Array(hashes * 6);
    this.indexes = new Int32Array(hashes);
    // slots <= 2^27, so a power of two leaves a shift of 5 or more; 32 - log2(1) = 32 is not a
    // valid shift in JavaScript (it is taken mod 32), so width 1 takes the general path.
    this.shift = slots > 1 && (slots & (slots - 1)) === 0 ? 32 - Math.log2(slots) : -1;
    const sip = new SipHash(1, 3);
    for (let row = 0, at = 0; row < hashes; row++) {
      for (let j = 0; j < 3; j++, at += 2) {
        sip.begin(seedLow, seedHigh, ROW_DOMAIN, 0);
        sip.word(3 * row + j);
        sip.word(0);
        sip.finish();
        this.words[at] = sip.h1;
        this.words[at + 1] = sip.h2;
      }
    }
  }

  /**
   * The row-major index of the key's counter in each row, row 0 first, for the key hash `h1` (low
   * half) and `h2` (high half). The array is reused: read it before the next call.
   */
  locate(h1: number, h2: number): Int32Array {
    const { slots, hashes, indexes, words, shift } = this;
    const x0l = h1 & 0xffff;
    const x0h = h1 >>> 16;
    const x1l = h2 & 0xffff;
    const x1h = h2 >>> 16;
    for (let row = 0, at = 0; row < hashes; row++, at += 6) {
      const word = rowWord(words, at, h1, h2, x0l, x0h, x1l, x1h);
      // For a power-of-two width, Lemire's reduction is exactly the word's top bits.
      indexes[row] = row * slots + (shift >= 0 ? word >>> shift : column(word, slots));
    }
    return indexes;
  }
}

/**
 * Bits 32..63 of `(a·x0 + c·x1 + b) mod 2^64` for the row whose words start at `at`. The low halves'
 * products are split at bit 16 of `x` so each stays below 2^49; their sum's bits from 32 up are the
 * carry into the high half, which the high halves' products reach only through their low 32 bits.
 */
function rowWord(
  words: Uint32Array,
  at: number,
  x0: number,
  x1: number,
  x0l: number,
  x0h: number,
  x1l: number,
  x1h: number,
): number {
  const al = words[at]!;
  const cl = words[at + 2]!;
  const low = al * x0l + cl * x1l + words[at + 4]!;
  const mid = al * x0h + cl * x1h;
  const carry = Math.floor((mid + Math.floor(low / 65536)) / 65536);
  return (carry + Math.imul(words[at + 1]!, x0) + Math.imul(words[at + 3]!, x1) + words[at + 5]!) >>> 0;
}

/**
 * `floor(g * slots / 2^32)` exactly: `g * slots` can exceed 2^53, so `g` is split into 16-bit halves
 * and the nested floors are exact (floor(floor(x) / d) = floor(x / d) for integer d).
 */
export function column(g: number, slots: number): number {
  return Math.floor(((g >>> 16) * slots + Math.floor(((g & 0xffff) * slots) / 65536)) / 65536);
}
