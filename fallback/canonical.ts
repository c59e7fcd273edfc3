/**
 * Keys as Map keys: one value per key as the native backend tells keys apart (docs/format.md §1),
 * for the fallback's exact tables (`Limiter` buckets, heavy-hitter entries).
 */
import type { Key } from '../lib/core.js';

/** A key's canonical form: equal (SameValueZero) exactly when the native backend sees one key. */
export type CanonicalKey = string | number | bigint;

const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);
/**
 * Prefix of a byte key's form: a lone surrogate, which no well-formed string holds, so a byte key
 * never meets a string key.
 */
const BYTES = '\ud800';

/**
 * The canonical form of a key. A string is itself, well-formed (native reads strings as UTF-8,
 * lone surrogates as U+FFFD); `toWellFormed` returns a well-formed string unchanged, so its cached
 * hash serves the Map lookup, where a concatenated form would be hashed afresh on every call (ten
 * times the cost). An integer is a number when safe, else a bigint (`1` and `1n` are one key); a
 * `Uint8Array` its bytes as char codes behind {@link BYTES}.
 */
export function canonical(key: Key): CanonicalKey {
  switch (typeof key) {
    case 'string':
      return (key as string & { toWellFormed(): string }).toWellFormed();
    case 'number':
      return key;
    case 'bigint':
      return key >= -MAX_SAFE && key <= MAX_SAFE ? Number(key) : key;
    default:
      return BYTES + byteString(key);
  }
}

/** Bytes per `String.fromCharCode` call: well under the engine's argument limit. */
const CHUNK = 8192;

/**
 * `bytes` as a string of one char code per byte, built in chunks: a `+=` per byte made a chain of
 * one-character strings, 32 bytes of heap per key byte (a 256 MiB key ran V8 out of heap).
 */
function byteString(bytes: Uint8Array): string {
  const length = bytes.length;
  if (length <= CHUNK) return String.fromCharCode.apply(null, bytes as unknown as number[]);
  const parts: string[] = [];
  for (let i = 0; i < length; i += CHUNK) {
    // A plain view, not `subarray`, which builds its result with the key's own constructor (a
    // subclass's may take other arguments, or throw).
    const chunk = new Uint8Array(bytes.buffer, bytes.byteOffset + i, Math.min(CHUNK, length - i));
    parts.push(String.fromCharCode.apply(null, chunk as unknown as number[]));
  }
  return parts.join('');
}
