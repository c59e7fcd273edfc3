/**
 * Keys to hashes (docs/format.md §1–2): the byte stream Rust's `Hash` writes for each key type,
 * streamed into rapidhash V3 keyed by the seed, as the Rust crate's `KeyHasher` does.
 */
import type { Key } from '../lib/core.js';
import { RapidHash } from './rapidhash.js';

const TWO_32 = 4294967296;
const hash = new RapidHash();
const encoder = new TextEncoder();
/** Reused UTF-8 buffer for the non-ASCII tail of a string; grows to the longest such tail seen. */
let scratch = new Uint8Array(64);

/**
 * Hashes `key` with the 64-bit seed `k1:k0` (`k0` its low 32 bits). The result is in the returned
 * hasher's `h1` and `h2`, valid until the next call (the hasher is shared).
 */
export function hashKey(key: Key, k0: number, k1: number): RapidHash {
  hash.begin(k0, k1);
  if (typeof key === 'string') hashString(key);
  else hashOther(key);
  hash.finish();
  return hash;
}

/**
 * The keys that are not strings, kept out of {@link hashKey} so that V8 inlines it (and the
 * sketch's row arithmetic after it) within its budget into a caller.
 */
function hashOther(key: Exclude<Key, string>): void {
  if (typeof key === 'number') {
    // i64 LE, two's complement; exact for safe integers.
    const hi = Math.floor(key / TWO_32);
    hash.word(key - hi * TWO_32);
    hash.word(hi);
  } else if (typeof key === 'bigint') {
    hash.word(Number(BigInt.asUintN(32, key)));
    hash.word(Number(BigInt.asUintN(32, key >> 32n)));
  } else {
    // u64 LE length prefix, then the bytes.
    hash.word(key.length);
    hash.word(Math.floor(key.length / TWO_32));
    hash.bytes(key, 0, key.length);
  }
}

/** UTF-8 bytes then 0xff. ASCII is absorbed straight from the char codes, four at a time. */
function hashString(s: string): void {
  const n = s.length;
  let i = 0;
  for (; i + 4 <= n; i += 4) {
    const a = s.charCodeAt(i);
    const b = s.charCodeAt(i + 1);
    const c = s.charCodeAt(i + 2);
    const d = s.charCodeAt(i + 3);
    if ((a | b | c | d) >= 0x80) break;
    hash.word(a | (b << 8) | (c << 16) | (d << 24));
  }
  for (; i < n; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0x80) break;
    hash.byte(c);
  }
  if (i < n) {
    // i is the first non-ASCII code unit, so slicing here never splits a surrogate pair.
    const rest = s.slice(i);
    if (scratch.length < rest.length * 3) scratch = new Uint8Array(rest.length * 3);
    const { written } = encoder.encodeInto(rest, scratch);
    hash.bytes(scratch, 0, written);
  }
  hash.byte(0xff);
}
