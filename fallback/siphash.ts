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

import { WordStream } from './word-stream.js';

/** One streaming SipHash computation: `begin`, any number of `word`/`byte`/`bytes` calls, `finish`. */
export class SipHash extends WordStream {
  private k0l = 0;
  private k0h = 0;
  private k1l = 0;
  private k1h = 0;
  /** Low 32 bits of the last output (unsigned). */
  h1 = 0;
  /** High 32 bits of the last output (unsigned). */
  h2 = 0;

  constructor(
    private readonly compressionRounds: number,
    private readonly finalizationRounds: number,
  ) {
    super();
  }

  /** Starts a hash keyed by the 128-bit key `k0`, `k1`, each given as low and high 32 bits. */
  begin(k0Low: number, k0High: number, k1Low: number, k1High: number): void {
    this.k0l = k0Low;
    this.k0h = k0High;
    this.k1l = k1Low;
    this.k1h = k1High;
    this.length = 0;
  }

  /** Ends the hash; the 64-bit output is then in `h1` (low half) and `h2` (high half). */
  finish(): void {
    const { words, length, compressionRounds, finalizationRounds } = this;
    let v0l = this.k0l ^ 0x70736575;
    let v0h = this.k0h ^ 0x736f6d65;
    let v1l = this.k1l ^ 0x6e646f6d;
    let v1h = this.k1h ^ 0x646f7261;
    let v2l = this.k0l ^ 0x6e657261;
    let v2h = this.k0h ^ 0x6c796765;
    let v3l = this.k1l ^ 0x79746573;
    let v3h = this.k1h ^ 0x74656462;
    const full = length >>> 3;
    const rest = length & 7;
    // Blocks 0..full-1 are whole; block `full` holds the last `rest` bytes and the length's low
    // byte in its top byte; one more pass runs the finalization rounds.
    for (let block = 0; block <= full + 1; block++) {
      let ml = 0;
      let mh = 0;
      let n: number;
      if (block < full) {
        ml = words[2 * block]!;
        mh = words[2 * block + 1]!;
        n = compressionRounds;
      } else if (block === full) {
        if (rest > 0) ml = words[2 * block]!;
        if (rest > 4) mh = words[2 * block + 1]!;
        mh |= length << 24;
        n = compressionRounds;
      } else {
        v2l ^= 0xff;
        n = finalizationRounds;
      }
      v3l ^= ml;
      v3h ^= mh;
      // A 64-bit add is two 32-bit adds; the carry out of the low halves is the top bit of
      // (a & b) | ((a | b) & ~sum), computed without a branch (a data-dependent branch here
      // mispredicted half the time and made a round several times slower).
      for (let r = 0; r < n; r++) {
        let lo: number;
        let t: number;
        // v0 += v1
        lo = (v0l + v1l) | 0;
        v0h = (v0h + v1h + (((v0l & v1l) | ((v0l | v1l) & ~lo)) >>> 31)) | 0;
        v0l = lo;
        // v1 = rotl(v1, 13) ^ v0
        t = (v1h << 13) | (v1l >>> 19);
        v1l = ((v1l << 13) | (v1h >>> 19)) ^ v0l;
        v1h = t ^ v0h;
        // v0 = rotl(v0, 32)
        t = v0h;
        v0h = v0l;
        v0l = t;
        // v2 += v3
        lo = (v2l + v3l) | 0;
        v2h = (v2h + v3h + (((v2l & v3l) | ((v2l | v3l) & ~lo)) >>> 31)) | 0;
        v2l = lo;
        // v3 = rotl(v3, 16) ^ v2
        t = (v3h << 16) | (v3l >>> 16);
        v3l = ((v3l << 16) | (v3h >>> 16)) ^ v2l;
        v3h = t ^ v2h;
        // v0 += v3
        lo = (v0l + v3l) | 0;
        v0h = (v0h + v3h + (((v0l & v3l) | ((v0l | v3l) & ~lo)) >>> 31)) | 0;
        v0l = lo;
        // v3 = rotl(v3, 21) ^ v0
        t = (v3h << 21) | (v3l >>> 11);
        v3l = ((v3l << 21) | (v3h >>> 11)) ^ v0l;
        v3h = t ^ v0h;
        // v2 += v1
        lo = (v2l + v1l) | 0;
        v2h = (v2h + v1h + (((v2l & v1l) | ((v2l | v1l) & ~lo)) >>> 31)) | 0;
        v2l = lo;
        // v1 = rotl(v1, 17) ^ v2
        t = (v1h << 17) | (v1l >>> 15);
        v1l = ((v1l << 17) | (v1h >>> 15)) ^ v2l;
        v1h = t ^ v2h;
        // v2 = rotl(v2, 32)
        t = v2h;
        v2h = v2l;
        v2l = t;
      }
      v0l ^= ml;
      v0h ^= mh;
    }
    this.h1 = (v0l ^ v1l ^ v2l ^ v3l) >>> 0;
    this.h2 = (v0h ^ v1h ^ v2h ^ v3h) >>> 0;
  }
}
