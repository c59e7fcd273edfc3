/**
 * HalfSipHash with 64-bit output (Aumasson & Bernstein, reference `halfsiphash.c`), round counts as
 * parameters so the reference HalfSipHash-2-4 vectors can check the same code keepcount runs as
 * HalfSipHash-1-3 (docs/format.md §2).
 *
 * The state is four u32 words held in plain numbers and mixed with `|0` / `>>>0` arithmetic: no
 * `BigInt`, no allocation per hash. JavaScript runs one hash at a time per thread, so callers keep
 * one instance and reuse it.
 */

/** One streaming HalfSipHash computation: `begin`, any number of `word`/`byte` calls, `finish`. */
export class HalfSipHash {
  private v0 = 0;
  private v1 = 0;
  private v2 = 0;
  private v3 = 0;
  /** Bytes not yet compressed, little-endian in the low `tailLength * 8` bits. */
  private tail = 0;
  private tailLength = 0;
  /** Total bytes absorbed, modulo 256 (only its low byte reaches the hash). */
  private length = 0;
  /** Low 32 bits of the last output. */
  h1 = 0;
  /** High 32 bits of the last output. */
  h2 = 0;

  constructor(
    private readonly compressionRounds: number,
    private readonly finalizationRounds: number,
  ) {}

  /** Starts a hash keyed by the 64-bit key `k1:k0` (`k0` = its low 32 bits). */
  begin(k0: number, k1: number): void {
    this.v0 = k0 | 0;
    this.v1 = (k1 ^ 0xee) | 0;
    this.v2 = (0x6c796765 ^ k0) | 0;
    this.v3 = (0x74656462 ^ k1) | 0;
    this.tail = 0;
    this.tailLength = 0;
    this.length = 0;
  }

  /** Absorbs one byte. */
  byte(b: number): void {
    this.tail |= b << (this.tailLength << 3);
    this.length = (this.length + 1) & 0xff;
    if (++this.tailLength === 4) {
      this.compress(this.tail);
      this.tail = 0;
      this.tailLength = 0;
    }
  }

  /** Absorbs four bytes given as a little-endian u32. */
  word(w: number): void {
    if (this.tailLength === 0) {
      this.length = (this.length + 4) & 0xff;
      this.compress(w | 0);
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
    const words = end - ((end - i) & 3);
    for (; i < words; i += 4) {
      this.compress(bytes[i]! | (bytes[i + 1]! << 8) | (bytes[i + 2]! << 16) | (bytes[i + 3]! << 24));
    }
    this.length = (this.length + (words - aligned)) & 0xff;
    while (i < end) this.byte(bytes[i++]!);
  }

  /** Ends the hash; the 64-bit output is then in `h1` (low half) and `h2` (high half). */
  finish(): void {
    const b = (this.length << 24) | this.tail;
    this.compress(b);
    this.v2 ^= 0xee;
    this.rounds(this.finalizationRounds);
    this.h1 = (this.v1 ^ this.v3) >>> 0;
    this.v1 ^= 0xdd;
    this.rounds(this.finalizationRounds);
    this.h2 = (this.v1 ^ this.v3) >>> 0;
  }

  private compress(m: number): void {
    this.v3 ^= m;
    this.rounds(this.compressionRounds);
    this.v0 ^= m;
  }

  private rounds(n: number): void {
    let { v0, v1, v2, v3 } = this;
    for (let r = 0; r < n; r++) {
      v0 = (v0 + v1) | 0;
      v1 = (v1 << 5) | (v1 >>> 27);
      v1 ^= v0;
      v0 = (v0 << 16) | (v0 >>> 16);
      v2 = (v2 + v3) | 0;
      v3 = (v3 << 8) | (v3 >>> 24);
      v3 ^= v2;
      v0 = (v0 + v3) | 0;
      v3 = (v3 << 7) | (v3 >>> 25);
      v3 ^= v0;
      v2 = (v2 + v1) | 0;
      v1 = (v1 << 13) | (v1 >>> 19);
      v1 ^= v2;
      v2 = (v2 << 16) | (v2 >>> 16);
    }
    this.v0 = v0;
    this.v1 = v1;
    this.v2 = v2;
    this.v3 = v3;
  }
}
