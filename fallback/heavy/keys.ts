/**
 * Keys in their stored form (docs/format.md §6.1): a tag byte (0 string as UTF-8, 1 bytes,
 * 2 integer as i64 little endian) and the payload, hashed as a Rust `&[u8]` (u64 length, then the
 * bytes) with the sketch's SipHash-1-3. The native binding does the same (`src/keys.rs`).
 */
import type { Key } from '../../lib/core.js';
import { SipHash } from '../siphash.js';

const TAG_STR = 0;
const TAG_BYTES = 1;
const TAG_INT = 2;
const TWO_32 = 4294967296;
const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);

const sip = new SipHash(1, 3);
const decoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
/**
 * Starts the id of a byte-string key: a lone surrogate, which no string key's id holds (their lone
 * surrogates are replaced by U+FFFD), so a byte string and a string never share an id.
 */
const BYTES_ID = '\ud800';

/** A tracked key's id in the exact table's map: equal ids exactly for equal stored forms. */
export type Id = string | number | bigint;

/** The stored form of the key of the current call: `scratch[0, length)`. Grows as needed. */
let scratch = new Uint8Array(256);
let length = 0;
/** The key of the current call, and whether it is a string with a lone surrogate. */
let current: Key = '';
let lone = false;

/**
 * Writes `key`'s stored form into the scratch buffer; valid until the next call. Allocates nothing
 * unless the buffer must grow: strings are encoded here rather than by `TextEncoder.encodeInto`,
 * whose target would be a fresh `subarray` on every call.
 */
export function encodeKey(key: Key): void {
  current = key;
  if (typeof key === 'string') {
    encodeString(key);
  } else if (typeof key === 'number' || typeof key === 'bigint') {
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
    scratch[0] = TAG_INT;
    scratch[1] = lo & 0xff;
    scratch[2] = (lo >>> 8) & 0xff;
    scratch[3] = (lo >>> 16) & 0xff;
    scratch[4] = lo >>> 24;
    scratch[5] = hi & 0xff;
    scratch[6] = (hi >>> 8) & 0xff;
    scratch[7] = (hi >>> 16) & 0xff;
    scratch[8] = hi >>> 24;
    length = 9;
  } else {
    if (scratch.length < 1 + key.length) scratch = new Uint8Array(1 + key.length);
    scratch[0] = TAG_BYTES;
    scratch.set(key, 1);
    length = 1 + key.length;
  }
}

/** The tag and `s` as UTF-8, lone surrogates as U+FFFD (what `TextEncoder` writes). */
function encodeString(s: string): void {
  const n = s.length;
  // At most 3 bytes per UTF-16 unit (a surrogate pair: 4 bytes for 2 units).
  if (scratch.length < 1 + 3 * n) scratch = new Uint8Array(1 + 3 * n);
  const out = scratch;
  out[0] = TAG_STR;
  let at = 1;
  lone = false;
  for (let i = 0; i < n; i++) {
    let c = s.charCodeAt(i);
    if (c < 0x80) {
      out[at++] = c;
      continue;
    }
    if (c < 0x800) {
      out[at++] = 0xc0 | (c >>> 6);
      out[at++] = 0x80 | (c & 0x3f);
      continue;
    }
    if (c >= 0xd800 && c <= 0xdfff) {
      const d = i + 1 < n ? s.charCodeAt(i + 1) : 0;
      if (c <= 0xdbff && d >= 0xdc00 && d <= 0xdfff) {
        const cp = 0x10000 + ((c - 0xd800) << 10) + (d - 0xdc00);
        out[at++] = 0xf0 | (cp >>> 18);
        out[at++] = 0x80 | ((cp >>> 12) & 0x3f);
        out[at++] = 0x80 | ((cp >>> 6) & 0x3f);
        out[at++] = 0x80 | (cp & 0x3f);
        i++;
        continue;
      }
      c = 0xfffd;
      lone = true;
    }
    out[at++] = 0xe0 | (c >>> 12);
    out[at++] = 0x80 | ((c >>> 6) & 0x3f);
    out[at++] = 0x80 | (c & 0x3f);
  }
  length = at;
}

/** The stored form {@link encodeKey} wrote, as a fresh copy to keep. */
export function storedCopy(): Uint8Array {
  return scratch.slice(0, length);
}

/**
 * The id of the key {@link encodeKey} wrote, from the key itself where it can be: a string is its
 * own id (once its lone surrogates are replaced), an integer is its number (a bigint beyond the
 * safe range), so a tracked string or integer is found without building anything.
 */
export function storedId(): Id {
  const key = current;
  if (typeof key === 'string') return lone ? decoder.decode(scratch.subarray(1, length)) : key;
  if (typeof key === 'number') return key;
  if (typeof key === 'bigint') return integerId(key);
  return BYTES_ID + latin1(scratch.subarray(1, length));
}

/** The id of stored bytes, as {@link storedId} gives it for their key; the bytes are a stored form. */
export function idOf(stored: Uint8Array): Id {
  const key = decodeStored(stored);
  if (key === undefined || key instanceof Uint8Array) return BYTES_ID + latin1(stored.subarray(1));
  return key;
}

const integerId = (n: bigint): number | bigint => (n >= -MAX_SAFE && n <= MAX_SAFE ? Number(n) : n);

/** Each byte as one char code. */
function latin1(bytes: Uint8Array): string {
  let id = '';
  // In chunks: `apply` passes every element as an argument, and engines cap their number.
  for (let i = 0; i < bytes.length; i += 4096) {
    id += String.fromCharCode.apply(null, bytes.subarray(i, i + 4096) as unknown as number[]);
  }
  return id;
}

/**
 * Hashes the stored form {@link encodeKey} wrote with the 64-bit seed `k1:k0`; the result is in
 * the returned hasher's `h1` (low) and `h2` (high), valid until the next call.
 */
export function hashStored(k0: number, k1: number): SipHash {
  return hashBytes(scratch, length, k0, k1);
}

/** Hashes `bytes[0, len)` as a Rust `&[u8]` with the seed `k1:k0`. */
export function hashBytes(bytes: Uint8Array, len: number, k0: number, k1: number): SipHash {
  sip.begin(k0, k1, 0, 0);
  sip.word(len);
  sip.word(Math.floor(len / TWO_32));
  sip.bytes(bytes, 0, len);
  sip.finish();
  return sip;
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
      return payload.slice();
    case TAG_INT: {
      if (payload.length !== 8) return undefined;
      const view = new DataView(payload.buffer, payload.byteOffset, 8);
      return integerId(view.getBigInt64(0, true));
    }
    default:
      return undefined;
  }
}
