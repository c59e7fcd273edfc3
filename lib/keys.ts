/**
 * Key validation (docs/format.md §1): both backends receive only keys that passed here.
 */
import type { Key } from './core.js';
import { invalidType, outOfRange } from './errors.js';
import { types } from 'node:util';

const I64_MIN = -(2n ** 63n);
const I64_MAX = 2n ** 63n - 1n;

/** Returns `key` if it is a valid {@link Key}; throws `TypeError`/`RangeError` otherwise. */
export function validateKey(key: unknown): Key {
  switch (typeof key) {
    case 'string':
      return key;
    case 'number':
      if (!Number.isSafeInteger(key)) {
        throw outOfRange('The "key" argument', 'a safe integer when it is a number', key);
      }
      return key;
    case 'bigint':
      if (key < I64_MIN || key > I64_MAX) {
        throw outOfRange('The "key" argument', 'in the i64 range when it is a bigint', key);
      }
      return key;
    default:
      if (isUint8Array(key)) return key;
      throw invalidType('The "key" argument', 'of type string, number, bigint or Uint8Array', key);
  }
}

/**
 * The longest byte key an exact table takes (`HeavyHitters` entries, `Limiter` key tables): the
 * fallback keys its `Map`s by a string of one character per byte behind a tag character, and V8's
 * strings hold at most 2^29 − 24 characters; a longer key would work on the native backend only.
 * (The native heavy-hitter format's 32-bit key lengths allow more.)
 */
export const MAX_TABLE_KEY_BYTES = 2 ** 29 - 25;

/** {@link validateKey}, refusing byte keys longer than {@link MAX_TABLE_KEY_BYTES}. */
export function tableKey(key: unknown): Key {
  const k = validateKey(key);
  if (typeof k === 'object' && k.length > MAX_TABLE_KEY_BYTES) {
    throw outOfRange(
      'The "key" argument',
      `at most ${MAX_TABLE_KEY_BYTES} bytes long when it is a Uint8Array`,
      k.length,
    );
  }
  return k;
}

/** A key that later mutation of the caller's bytes cannot change (for guards that outlive the call). */
export function ownKey(key: Key): Key {
  // Not key.slice(): Buffer#slice shares memory. A view on a detached buffer (length 0, which
  // `new Uint8Array(view)` refuses) is the empty key, as every backend reads it.
  if (typeof key !== 'object') return key;
  return key.length === 0 ? new Uint8Array(0) : new Uint8Array(key);
}

/**
 * True for a `Uint8Array` (or `Buffer`, or a subclass) from any realm, e.g. one a worker
 * transferred. By its internal slot, not `instanceof` or a `Symbol.toStringTag` read: a `Proxy` of
 * one passed `instanceof` and then failed in the typed array's own methods (an uncoded
 * `TypeError`), and an own `Symbol.toStringTag` getter ran the caller's code mid-validation.
 */
export function isUint8Array(value: unknown): value is Uint8Array {
  return types.isUint8Array(value);
}
