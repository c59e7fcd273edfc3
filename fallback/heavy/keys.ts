/**
 * Keys in their stored form (docs/format.md §6.1): a tag byte (0 string as UTF-8, 1 bytes,
 * 2 integer as i64 little endian) and the payload, hashed as a Rust `&[u8]` (u64 length, then the
 * bytes) with the sketch's rapidhash. The native binding does the same (`src/keys.rs`).
 */
import type { Key } from '../../lib/core.js';
import { canonical, type CanonicalKey } from '../canonical.js';
import { RapidHash } from '../rapidhash.js';

const TAG_STR = 0;
const TAG_BYTES = 1;
const TAG_INT = 2;
const TWO_32 = 4294967296;
const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);

const hash = new RapidHash();
const encoder = new TextEncoder();
// ignoreBOM: a string key may start with U+FEFF, which TextDecoder would otherwise strip.
const decoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** The stored form of the key of the current call: `scratch[0, length)`. Grows as needed. */
let scratch = new Uint8Array(256);
/** `scratch` past its tag byte, where a string's UTF-8 goes: kept, not made per call. */
let payload = scratch.subarray(1);
let length = 0;

function grow(bytes: number): void {
  scratch = new Uint8Array(bytes);
  payload = scratch.subarray(1);
}

/**
 * The key of the current call when it is an ASCII string, whose stored form {@link hashStoredKey} did
 * not write (its bytes are its char codes); `undefined` when `scratch` holds the stored form.
 */
let ascii: string | undefined;

/**
 * Hashes `key`'s stored form with the 64-bit seed `k1:k0`, as {@link hashBytes} would hash the
 * bytes; the result is in the returned hasher's `h1` (low) and `h2` (high), valid until the next
 * call, and {@link storedCopy} gives the stored form until then.
 *
 * An ASCII string (the usual key: an address, an id) is hashed straight from its char codes, four
 * to a word, without writing its UTF-8 anywhere: `TextEncoder.encodeInto` and the second pass over
 * the bytes were a fifth of `HeavyHitters.incr` on the fallback (Zipf IPv4 keys, `--cpu-prof`).
 * Its stored form is only written when the table keeps the key.
 */
export function hashStoredKey(key: Key, k0: number, k1: number): RapidHash {
  if (typeof key === 'string' && hashAscii(key, k0, k1)) {
    ascii = key;
    return hash;
  }
  ascii = undefined;
  encodeKey(key);
  return hashBytes(scratch, length, k0, k1);
}

/**
 * Hashes the stored form of `key` if it is ASCII: the u64 length, then the tag byte and the char
 * codes, as little-endian words: the tag and the first three codes, then four codes a word, then
 * the last few byte by byte. False, with the hasher to be begun afresh, at the first group of
 * code units holding one that is not ASCII.
 *
 * Four codes a word, as `fallback/hasher.ts` reads a string, rather than one shift and test per
 * code: a fallback `HeavyHitters.incr` of Zipf(1.1) IPv4 keys (a `ManualClock`) took 2,665
 * instructions a call with a shift and a test per code unit, 2,488 this way (callgrind,
 * `node --predictable`, 2026-11-29; `Estimator.incr` of the same shape 1,580).
 */
function hashAscii(key: string, k0: number, k1: number): boolean {
  const n = key.length;
  hash.begin(k0, k1);
  // 1 + n < 2^32: a string holds at most 2^29 - 24 code units.
  hash.word(1 + n);
  hash.word(0);
  let i = 0;
  if (n >= 3) {
    const a = key.charCodeAt(0);
    const b = key.charCodeAt(1);
    const c = key.charCodeAt(2);
    // Stop at once: a long non-ASCII key is then read once more, by the encoder, not twice.
    if ((a | b | c) >= 0x80) return false;
    hash.word(TAG_STR | (a << 8) | (b << 16) | (c << 24));
    for (i = 3; i + 4 <= n; i += 4) {
      const d = key.charCodeAt(i);
      const e = key.charCodeAt(i + 1);
      const f = key.charCodeAt(i + 2);
      const g = key.charCodeAt(i + 3);
      if ((d | e | f | g) >= 0x80) return false;
      hash.word(d | (e << 8) | (f << 16) | (g << 24));
    }
  } else hash.byte(TAG_STR);
  for (; i < n; i++) {
    const c = key.charCodeAt(i);
    if (c >= 0x80) return false;
    hash.byte(c);
  }
  hash.finish();
  return true;
}

/**
 * The canonical form (`fallback/canonical.ts`) of `key`, the key {@link hashStoredKey} hashed last:
 * an ASCII string is its own, which the hash already found, so it needs no second look
 * (`toWellFormed`): 2,488 → 2,420 instructions a `HeavyHitters.incr` as counted above.
 */
export function hashedId(key: Key): CanonicalKey {
  return ascii !== undefined ? ascii : canonical(key);
}

/** Writes `key`'s stored form into the scratch buffer; valid until the next call. */
function encodeKey(key: Key): void {
  if (typeof key === 'string') {
    // UTF-8 takes at most 3 bytes per UTF-16 unit; lone surrogates become U+FFFD, as in Rust.
    if (scratch.length < 1 + key.length * 3) grow(1 + key.length * 3);
    scratch[0] = TAG_STR;
    length = 1 + encoder.encodeInto(key, payload).written;
  } else if (typeof key === 'number' || typeof key === 'bigint') {
    scratch[0] = TAG_INT;
    let lo: number;
    let hi: number;
    if (typeof key === 'number') {
      // i64 LE, two's complement; exact for safe integers.
      const h = Math.floor(key / TWO_32);
      lo = key - h * TWO_32;
      hi = h >>> 0;
    } else {
      lo = Number(BigInt.asUintN(32, key));
      hi = Number(BigInt.asUintN(32, key >> 32n));
    }
    for (let i = 0; i < 4; i++) {
      scratch[1 + i] = (lo >>> (8 * i)) & 0xff;
      scratch[5 + i] = (hi >>> (8 * i)) & 0xff;
    }
    length = 9;
  } else {
    if (scratch.length < 1 + key.length) grow(1 + key.length);
    scratch[0] = TAG_BYTES;
    // A view on a detached buffer has length 0 (the empty key, as native reads it), but `set`
    // throws on it.
    if (key.length > 0) scratch.set(key, 1);
    length = 1 + key.length;
  }
}

/** The stored form of the key {@link hashStoredKey} hashed last, as a fresh copy to keep. */
export function storedCopy(): Uint8Array {
  if (ascii === undefined) return scratch.slice(0, length);
  const stored = new Uint8Array(1 + ascii.length);
  stored[0] = TAG_STR;
  for (let i = 0; i < ascii.length; i++) stored[1 + i] = ascii.charCodeAt(i);
  return stored;
}

/** Hashes `bytes[0, len)` as a Rust `&[u8]` with the seed `k1:k0`. */
export function hashBytes(bytes: Uint8Array, len: number, k0: number, k1: number): RapidHash {
  hash.begin(k0, k1);
  hash.word(len);
  hash.word(Math.floor(len / TWO_32));
  hash.bytes(bytes, 0, len);
  hash.finish();
  return hash;
}

/** A stored key as the JavaScript value it came from (integers as numbers when safe); `undefined` for bytes no key encodes to. */
export function decodeStored(stored: Uint8Array): Key | undefined {
  if (stored.length === 0) return undefined;
  const payload = stored.subarray(1);
  switch (stored[0]) {
    case TAG_STR:
      try {
        return decoder.decode(payload);
      } catch {
        return undefined;
      }
    case TAG_BYTES:
      // A plain copy, whatever the stored key's class: the caller may write into what it gets.
      return new Uint8Array(payload);
    case TAG_INT: {
      if (payload.length !== 8) return undefined;
      const view = new DataView(payload.buffer, payload.byteOffset, 8);
      const value = view.getBigInt64(0, true);
      return value >= -MAX_SAFE && value <= MAX_SAFE ? Number(value) : value;
    }
    default:
      return undefined;
  }
}
