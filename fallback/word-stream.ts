/**
 * A byte stream buffered as little-endian 32-bit words, what both of the fallback's hashes absorb
 * before they mix: SipHash compresses the words in one pass in `finish` (a method call and field
 * traffic per block cost more than its rounds), and rapidhash must, since it reads the last 16
 * bytes before it knows they are the last.
 *
 * One word beyond the last written is always allocated, so a hash may read a whole word at any
 * byte offset below `length` without a bounds check.
 */
export class WordStream {
  /** The stream so far, little-endian; bytes past `length` in the last word are stale. */
  protected words = new Int32Array(16);
  /** Bytes absorbed. */
  protected length = 0;

  /** Absorbs one byte. */
  byte(b: number): void {
    const n = this.length;
    const at = n >>> 2;
    if (at + 1 === this.words.length) this.grow();
    const shift = (n & 3) << 3;
    // The first byte of a word overwrites it, so nothing of an earlier hash survives above `length`.
    this.words[at] = shift === 0 ? b : this.words[at]! | (b << shift);
    this.length = n + 1;
  }

  /** Absorbs four bytes given as a little-endian u32. */
  word(w: number): void {
    const n = this.length;
    if ((n & 3) === 0) {
      const at = n >>> 2;
      if (at + 1 === this.words.length) this.grow();
      this.words[at] = w;
      this.length = n + 4;
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
    while ((this.length & 3) !== 0 && i < end) this.byte(bytes[i++]!);
    for (; i + 4 <= end; i += 4) {
      this.word(bytes[i]! | (bytes[i + 1]! << 8) | (bytes[i + 2]! << 16) | (bytes[i + 3]! << 24));
    }
    while (i < end) this.byte(bytes[i++]!);
  }

  private grow(): void {
    const bigger = new Int32Array(this.words.length * 2);
    bigger.set(this.words);
    this.words = bigger;
  }
}
