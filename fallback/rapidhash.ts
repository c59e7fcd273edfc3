/**
 * rapidhash V3 (Nicoll, after wyhash), to the bit as the Rust `rapidhash` crate 4.5.1's
 * `rapidhash::v3::rapidhash_v3_seeded(bytes, &RapidSecrets::seed(seed))`: avalanche on, not
 * protected, the unrolled (non-`COMPACT`) long-input loop. Every mixing step is a 64×64→128-bit
 * multiply whose halves are folded together; a key of up to 16 bytes costs two such multiplies,
 * where SipHash-1-3 costs five SipRounds.
 *
 * Each 64-bit value is held as two 32-bit halves in plain numbers: no `BigInt`, no allocation per
 * hash. A 128-bit product is assembled from four 32×32→64-bit products: `Math.imul` gives each one's
 * low 32 bits exactly, and the double product less those bits, scaled by 2^-32, lies within 2^-19
 * of the high 32 bits, so `Math.round` recovers them exactly (see `multiply`). A chain of such
 * products took 16 ns each against 23 ns for exact 48-bit partial products (x·y split at bit 16 of
 * y, two floors per high word): the hash is one dependent chain, and each int↔double conversion
 * and floor on it costs about as much as a multiply (Node 20.20, AMD EPYC VM, 2026-11-26).
 *
 * The stream is buffered as little-endian 32-bit words ({@link WordStream}) and hashed in one pass
 * by `finish`, because rapidhash reads the last 16 bytes before it knows they are the last.
 * JavaScript runs one hash at a time per thread, so callers keep one instance and reuse it.
 */

import { WordStream } from './word-stream.js';

/** The crate's `DEFAULT_SECRETS` as (low, high) u32 pairs: the constants seeds are premixed with. */
const DEFAULT_SECRETS = [
  0xaa6c78a5, 0x2d358dcc, 0x962eacc9, 0x8bb84b93, 0xd433d4a3, 0x4b33a62e, 0x1de1aa47, 0x4d5a2da5, 0x78bd642f,
  0xa0761d64, 0xa0b428db, 0xe7037ed1, 0x281c388c, 0x90ed1765,
];
/** 2^-32: scales a double from the high word's position down to units (exact, a power of two). */
const TWO_TO_MINUS_32 = 2 ** -32;
/** Bytes the long-input loop consumes per step: seven lanes of 16 bytes. */
const CHUNK_BYTES = 112;
/** Lanes of the long-input loop, each with its own secret and 64-bit state. */
const LANES = 7;
/** Longest input hashed by `finish`'s straight-line path, `rapidhash_core`'s `likely` branch. */
const SHORT_BYTES = 16;

/** The last 128-bit product of `multiply`, as four 32-bit words, least significant first. */
const product = new Int32Array(4);

/**
 * The crate's `rapid_mum`: the 128-bit product of the u64s `a` and `b`, each given as its low and
 * high 32 bits in any int32 or u32 form, into `product`. `finish` repeats this body inline.
 *
 * With `x`, `y` u32, the double `x * y` (below 2^64) is within 2^10 of the exact product; less its
 * exact low word (`Math.imul`) it is within 2^11 of `hi·2^32`; so `Math.round` of it times 2^-32 is
 * `hi` exactly. The two cross products share one rounding (error under 2^13, still far below
 * 2^31). The column sums are exact integers below 2^35: `| 0` or an Int32Array store keeps their
 * low 32 bits and `Math.floor` of a 2^-32 multiple gives the carry.
 */
function multiply(aLow: number, aHigh: number, bLow: number, bHigh: number): void {
  const al = aLow >>> 0;
  const ah = aHigh >>> 0;
  const bl = bLow >>> 0;
  const bh = bHigh >>> 0;
  const ll = Math.imul(al, bl) >>> 0;
  const lh = Math.imul(al, bh) >>> 0;
  const hl = Math.imul(ah, bl) >>> 0;
  const hh = Math.imul(ah, bh) >>> 0;
  const mid = Math.round((al * bl - ll) * TWO_TO_MINUS_32) + lh + hl;
  const top = Math.round((al * bh - lh + (ah * bl - hl)) * TWO_TO_MINUS_32) + hh + Math.floor(mid * TWO_TO_MINUS_32);
  product[0] = ll;
  product[1] = mid;
  product[2] = top;
  product[3] = Math.round((ah * bh - hh) * TWO_TO_MINUS_32) + Math.floor(top * TWO_TO_MINUS_32);
}

/**
 * The u32 at byte offset `at` of the little-endian stream in `words`. Branch-free: for an aligned
 * offset the next word's share is shifted out entirely (`<< 1 << 31`), so that word may lie past
 * the stream's end but never past the array's.
 */
function read32(words: Int32Array, at: number): number {
  const i = at >>> 2;
  const shift = (at & 3) << 3;
  return (words[i]! >>> shift) | ((words[i + 1]! << 1) << (31 - shift));
}

/**
 * The crate's `RapidSecrets::seed(seed)` into `out` as (low, high) u32 pairs: the premixed seed,
 * then `secrets[0..7]`. Eight `rapid_mix`es, each then forced to have bits set in its top, middle
 * and bottom 16 bits.
 */
export function deriveSecrets(seedLow: number, seedHigh: number, out: Uint32Array): void {
  let sl = seedLow;
  let sh = seedHigh;
  for (let k = 0; k < 8; k++) {
    // premix_seed(seed, i): the seed itself with i = 0, then secrets[i] from secrets[i − 1].
    const i = k === 0 ? 0 : k - 1;
    multiply(sl ^ DEFAULT_SECRETS[4]!, sh ^ DEFAULT_SECRETS[5]!, DEFAULT_SECRETS[2 * i]!, DEFAULT_SECRETS[2 * i + 1]!);
    sl ^= product[0]! ^ product[2]!;
    sh ^= product[1]! ^ product[3]!;
    if ((sh & 0xffff0000) === 0) sh |= 0x80000000; // bits 48..63
    if ((sl & 0xff000000) === 0 && (sh & 0xff) === 0) sl |= 0x80000000; // bits 24..39
    if ((sl & 0xffff) === 0) sl |= 1; // bits 0..15
    out[2 * k] = sl;
    out[2 * k + 1] = sh;
  }
}

/** One streaming rapidhash V3 computation: `begin`, any number of `word`/`byte`/`bytes` calls, `finish`. */
export class RapidHash extends WordStream {
  /** The seed `secrets` was derived from; deriving costs eight 128-bit multiplies, so it is cached. */
  private seedLow = 0;
  private seedHigh = 0;
  /** `deriveSecrets(seedLow, seedHigh)`: premixed seed, then the seven secrets. */
  private readonly secrets = new Uint32Array(16);
  /** The long-input loop's lane states, lane 0 the seed itself; then the seed for `finish`. */
  private readonly lanes = new Int32Array(2 * LANES);
  /** Low 32 bits of the last output (unsigned). */
  h1 = 0;
  /** High 32 bits of the last output (unsigned). */
  h2 = 0;

  constructor() {
    super();
    deriveSecrets(0, 0, this.secrets);
  }

  /** Starts a hash under the 64-bit seed given as its low and high 32 bits. */
  begin(seedLow: number, seedHigh: number): void {
    if (((seedLow ^ this.seedLow) | (seedHigh ^ this.seedHigh)) !== 0) {
      deriveSecrets(seedLow, seedHigh, this.secrets);
      this.seedLow = seedLow;
      this.seedHigh = seedHigh;
    }
    this.length = 0;
  }

  /** Ends the hash; the 64-bit output is then in `h1` (low half) and `h2` (high half). */
  finish(): void {
    const { words, length, secrets } = this;
    let al = 0;
    let ah = 0;
    let bl = 0;
    let bh = 0;
    let sl = secrets[0]!;
    let sh = secrets[1]!;
    let remainder = length;
    if (length <= SHORT_BYTES) {
      if (length >= 8) {
        sl ^= length;
        al = words[0]!;
        ah = words[1]!;
        bl = read32(words, length - 8);
        bh = read32(words, length - 4);
      } else if (length >= 4) {
        sl ^= length;
        al = words[0]!;
        bl = read32(words, length - 4);
      } else if (length > 0) {
        const w = words[0]!;
        // a = data[0] << 45 | data[len − 1], b = data[len / 2].
        ah = (w & 0xff) << 13;
        al = (w >>> ((length - 1) << 3)) & 0xff;
        bl = (w >>> ((length >>> 1) << 3)) & 0xff;
      }
    } else {
      // A method of its own, so that TurboFan's inlining budget goes to the straight-line tail.
      remainder = this.absorbLong();
      sl = this.lanes[0]!;
      sh = this.lanes[1]!;
      al = read32(words, length - 16) ^ remainder;
      ah = read32(words, length - 12);
      bl = read32(words, length - 8);
      bh = read32(words, length - 4);
    }
    // (a, b) = rapid_mum(a ^ secrets[1], b ^ seed): `multiply`, written out so that no call boxes
    // its arguments and the products stay in registers.
    let x0 = (al ^ secrets[4]!) >>> 0;
    let x1 = (ah ^ secrets[5]!) >>> 0;
    let y0 = (bl ^ sl) >>> 0;
    let y1 = (bh ^ sh) >>> 0;
    let ll = Math.imul(x0, y0) >>> 0;
    let lh = Math.imul(x0, y1) >>> 0;
    let hl = Math.imul(x1, y0) >>> 0;
    let hh = Math.imul(x1, y1) >>> 0;
    let mid = Math.round((x0 * y0 - ll) * TWO_TO_MINUS_32) + lh + hl;
    let top = Math.round((x0 * y1 - lh + (x1 * y0 - hl)) * TWO_TO_MINUS_32) + hh + Math.floor(mid * TWO_TO_MINUS_32);
    let high = Math.round((x1 * y1 - hh) * TWO_TO_MINUS_32) + Math.floor(top * TWO_TO_MINUS_32);
    // rapidhash_finish: rapid_mix(a ^ 0xaaaaaaaaaaaaaaaa, b ^ secrets[1] ^ remainder), the same
    // product folded to 64 bits.
    x0 = (ll ^ 0xaaaaaaaa) >>> 0;
    x1 = (mid ^ 0xaaaaaaaa) >>> 0;
    y0 = (top ^ secrets[4]! ^ remainder) >>> 0;
    y1 = (high ^ secrets[5]!) >>> 0;
    ll = Math.imul(x0, y0) >>> 0;
    lh = Math.imul(x0, y1) >>> 0;
    hl = Math.imul(x1, y0) >>> 0;
    hh = Math.imul(x1, y1) >>> 0;
    mid = Math.round((x0 * y0 - ll) * TWO_TO_MINUS_32) + lh + hl;
    top = Math.round((x0 * y1 - lh + (x1 * y0 - hl)) * TWO_TO_MINUS_32) + hh + Math.floor(mid * TWO_TO_MINUS_32);
    high = Math.round((x1 * y1 - hh) * TWO_TO_MINUS_32) + Math.floor(top * TWO_TO_MINUS_32);
    this.h1 = (ll ^ top) >>> 0;
    this.h2 = (mid ^ high) >>> 0;
  }

  /**
   * `rapidhash_core_cold` up to its last reads, for more than 16 bytes: leaves the new seed in
   * `lanes[0..2)` and returns how many bytes the 112-byte loop left (1 to 112), the crate's
   * `slice.len()`. The crate unrolls that loop to 224 bytes, but its trailing `if` makes the pair
   * of steps exactly two 112-byte steps, so this plain loop consumes the same chunks.
   */
  private absorbLong(): number {
    const { words, length, secrets, lanes } = this;
    lanes[0] = secrets[0]!;
    lanes[1] = secrets[1]!;
    let at = 0;
    if (length > CHUNK_BYTES) {
      for (let j = 1; j < LANES; j++) {
        lanes[2 * j] = lanes[0]!;
        lanes[2 * j + 1] = lanes[1]!;
      }
      for (; length - at > CHUNK_BYTES; at += CHUNK_BYTES) {
        // Lane j mixes bytes 16j..16j+15 of the chunk with secrets[j].
        for (let j = 0, i = at >>> 2; j < LANES; j++, i += 4) {
          multiply(
            words[i]! ^ secrets[2 * j + 2]!,
            words[i + 1]! ^ secrets[2 * j + 3]!,
            words[i + 2]! ^ lanes[2 * j]!,
            words[i + 3]! ^ lanes[2 * j + 1]!,
          );
          lanes[2 * j] = product[0]! ^ product[2]!;
          lanes[2 * j + 1] = product[1]! ^ product[3]!;
        }
      }
      // The crate folds the lanes as seed ^= see1; see2 ^= see3; see4 ^= see5; seed ^= see6;
      // see2 ^= see4; seed ^= see2: every lane XORed into the seed once.
      for (let j = 1; j < LANES; j++) {
        lanes[0] ^= lanes[2 * j]!;
        lanes[1] ^= lanes[2 * j + 1]!;
      }
    }
    // Up to six 16-byte steps over what is left, with the crate's secrets 2, 2, 1, 1, 2, 1.
    const remainder = length - at;
    for (let step = 0, i = at >>> 2; 16 * step + 16 < remainder; step++, i += 4) {
      const s = step === 2 || step === 3 || step === 5 ? 4 : 6;
      multiply(
        words[i]! ^ secrets[s]!,
        words[i + 1]! ^ secrets[s + 1]!,
        words[i + 2]! ^ lanes[0]!,
        words[i + 3]! ^ lanes[1]!,
      );
      lanes[0] = product[0]! ^ product[2]!;
      lanes[1] = product[1]! ^ product[3]!;
    }
    return remainder;
  }
}
