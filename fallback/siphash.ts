/**
 * SipHash with 64-bit output (Aumasson & Bernstein), round counts as parameters so the reference
 * SipHash-2-4 vectors check the same code keepcount runs as SipHash-1-3 (docs/format.md §2).
 *
 * Each 64-bit state word is held as two int32 halves in plain numbers and mixed with `|0` / `>>>0`
 * arithmetic: no `BigInt`, no allocation per hash. A SipHash round costs about twice a HalfSipHash
 * round here, but SipHash needs half the rounds for the same input, so keys hash as fast as in
 * format version 1. JavaScript runs one hash at a time per thread, so callers keep one instance and
 * reuse it.
 */

const TWO_32 = 4294967296;

/** One streaming SipHash computation: `begin`, any number of `word`/`byte`/`bytes` calls, `finish`. */
export class SipHash {
  private v0h = 0;
  private v0l = 0;
  private v1h = 0;
  private v1l = 0;
  private v2h = 0;
  private v2l = 0;
  private v3h = 0;
  private v3l = 0;
  /** Bytes 0–3 of the pending block, little-endian. */
  private tailLow = 0;
  /** Bytes 4–7 of the pending block, little-endian. */
  private tailHigh = 0;
  /** How many bytes the pending block holds: 0..7. */
  private tailLength = 0;
  /** Total bytes absorbed, modulo 256 (only its low byte reaches the hash). */
  private length = 0;
  /** Low 32 bits of the last output (unsigned). */
  h1 = 0;
  /** High 32 bits of the last output (unsigned). */
  h2 = 0;

  constructor(
    private readonly compressionRounds: number,
    private readonly finalizationRounds: number,
  ) {}

  /** Starts a hash keyed by the 128-bit key `k0`, `k1`, each given as low and high 32 bits. */
  begin(k0Low: number, k0High: number, k1Low: number, k1High: number): void {
    this.v0l = k0Low ^ 0x70736575;
    this.v0h = k0High ^ 0x736f6d65;
    this.v1l = k1Low ^ 0x6e646f6d;
    this.v1h = k1High ^ 0x646f7261;
    this.v2l = k0Low ^ 0x6e657261;
    this.v2h = k0High ^ 0x6c796765;
    this.v3l = k1Low ^ 0x79746573;
    this.v3h = k1High ^ 0x74656462;
    this.tailLow = 0;
    this.tailHigh = 0;
    this.tailLength = 0;
    this.length = 0;
  }

  /** Absorbs one byte. */
  byte(b: number): void {
    const n = this.tailLength;
    if (n < 4) this.tailLow |= b << (n << 3);
    else this.tailHigh |= b << ((n - 4) << 3);
    this.length = (this.length + 1) & 0xff;
    if (n === 7) {
      this.compress(this.tailHigh, this.tailLow);
      this.tailLow = 0;
      this.tailHigh = 0;
      this.tailLength = 0;
    } else {
      this.tailLength = n + 1;
    }
  }

  /** Absorbs four bytes given as a little-endian u32. */
  word(w: number): void {
    const n = this.tailLength;
    if (n === 0) {
      this.tailLow = w | 0;
      this.tailLength = 4;
      this.length = (this.length + 4) & 0xff;
    } else if (n === 4) {
      this.length = (this.length + 4) & 0xff;
      this.compress(w | 0, this.tailLow);
      this.tailLow = 0;
      this.tailLength = 0;
    } else {
      this.byte(w & 0xff);
      this.byte((w >>> 8) & 0xff);
      this.byte((w >>> 16) & 0xff);
      this.byte(w >>> 24);
    }
  }

  /** Absorbs `bytes[start..end)`. */
  bytes(bytes: Uint8Array, start: number, end: number): void {
    let i = start;
    while (this.tailLength !== 0 && i < end) this.byte(bytes[i++]!);
    const aligned = i;
    const blocks = end - ((end - i) & 7);
    for (; i < blocks; i += 8) {
      this.compress(
        bytes[i + 4]! | (bytes[i + 5]! << 8) | (bytes[i + 6]! << 16) | (bytes[i + 7]! << 24),
        bytes[i]! | (bytes[i + 1]! << 8) | (bytes[i + 2]! << 16) | (bytes[i + 3]! << 24),
      );
    }
    this.length = (this.length + (blocks - aligned)) & 0xff;
    while (i < end) this.byte(bytes[i++]!);
  }

  /** Ends the hash; the 64-bit output is then in `h1` (low half) and `h2` (high half). */
  finish(): void {
    this.compress(this.tailHigh | (this.length << 24), this.tailLow);
    this.v2l ^= 0xff;
    this.rounds(this.finalizationRounds);
    this.h1 = (this.v0l ^ this.v1l ^ this.v2l ^ this.v3l) >>> 0;
    this.h2 = (this.v0h ^ this.v1h ^ this.v2h ^ this.v3h) >>> 0;
  }

  /** Absorbs one 8-byte block given as its high and low 32 bits. */
  private compress(mh: number, ml: number): void {
    this.v3h ^= mh;
    this.v3l ^= ml;
    this.rounds(this.compressionRounds);
    this.v0h ^= mh;
    this.v0l ^= ml;
  }

  private rounds(n: number): void {
    let { v0h, v0l, v1h, v1l, v2h, v2l, v3h, v3l } = this;
    for (let r = 0; r < n; r++) {
      let lo: number;
      let t: number;
      // v0 += v1
      lo = (v0l >>> 0) + (v1l >>> 0);
      v0h = (v0h + v1h + (lo >= TWO_32 ? 1 : 0)) | 0;
      v0l = lo | 0;
      // v1 = rotl(v1, 13) ^ v0
      t = (v1h << 13) | (v1l >>> 19);
      v1l = ((v1l << 13) | (v1h >>> 19)) ^ v0l;
      v1h = t ^ v0h;
      // v0 = rotl(v0, 32)
      t = v0h;
      v0h = v0l;
      v0l = t;
      // v2 += v3
      lo = (v2l >>> 0) + (v3l >>> 0);
      v2h = (v2h + v3h + (lo >= TWO_32 ? 1 : 0)) | 0;
      v2l = lo | 0;
      // v3 = rotl(v3, 16) ^ v2
      t = (v3h << 16) | (v3l >>> 16);
      v3l = ((v3l << 16) | (v3h >>> 16)) ^ v2l;
      v3h = t ^ v2h;
      // v0 += v3
      lo = (v0l >>> 0) + (v3l >>> 0);
      v0h = (v0h + v3h + (lo >= TWO_32 ? 1 : 0)) | 0;
      v0l = lo | 0;
      // v3 = rotl(v3, 21) ^ v0
      t = (v3h << 21) | (v3l >>> 11);
      v3l = ((v3l << 21) | (v3h >>> 11)) ^ v0l;
      v3h = t ^ v0h;
      // v2 += v1
      lo = (v2l >>> 0) + (v1l >>> 0);
      v2h = (v2h + v1h + (lo >= TWO_32 ? 1 : 0)) | 0;
      v2l = lo | 0;
      // v1 = rotl(v1, 17) ^ v2
      t = (v1h << 17) | (v1l >>> 15);
      v1l = ((v1l << 17) | (v1h >>> 15)) ^ v2l;
      v1h = t ^ v2h;
      // v2 = rotl(v2, 32)
      t = v2h;
      v2h = v2l;
      v2l = t;
    }
    this.v0h = v0h;
    this.v0l = v0l;
    this.v1h = v1h;
    this.v1l = v1l;
    this.v2h = v2h;
    this.v2l = v2l;
    this.v3h = v3h;
    this.v3l = v3l;
  }
}
