/** Validation of the options and numeric arguments every class shares. */
import { invalidType, outOfRange } from './errors.js';
import { isUint8Array } from './keys.js';
import { MAX_COUNTERS, MAX_HASHES } from './limits.js';

const TWO_64 = 2n ** 64n;

/** Returns `options` as a record, or `{}` for `undefined`. */
export function optionsObject<T extends object>(options: T | undefined, name = 'options'): Partial<T> {
  if (options === undefined) return {};
  if (typeof options !== 'object' || options === null) {
    throw invalidType(`The "${name}" argument`, 'of type object', options);
  }
  return options;
}

/** An integer option in `[min, max]`, or `fallback` when it is `undefined`. */
export function integerOption(name: string, value: unknown, min: number, max: number, fallback?: number): number {
  if (value === undefined && fallback !== undefined) return fallback;
  if (typeof value !== 'number') throw invalidType(`The "${name}" option`, 'of type number', value);
  if (!Number.isInteger(value) || value < min || value > max) {
    throw outOfRange(`The "${name}" option`, `an integer in [${min}, ${max}]`, value);
  }
  return value;
}

/**
 * A sketch shape within docs/format.md §4: `defaults` stand in for options left out; without them
 * both are required.
 */
export function shapeOptions(
  hashes: unknown,
  slots: unknown,
  defaults?: { hashes: number; slots: number },
): { hashes: number; slots: number } {
  const h = integerOption('hashes', hashes, 1, MAX_HASHES, defaults?.hashes);
  const s = integerOption('slots', slots, 1, MAX_COUNTERS, defaults?.slots);
  if (h * s > MAX_COUNTERS) {
    throw outOfRange(
      'The "slots" option',
      `at most ${Math.floor(MAX_COUNTERS / h)} with ${h} hashes (hashes × slots <= ${MAX_COUNTERS})`,
      s,
    );
  }
  return { hashes: h, slots: s };
}

/** A seed in [0, 2^64) as a bigint; a random one (from `crypto.getRandomValues`) when `undefined`. */
export function seedOption(seed: unknown): bigint {
  if (seed === undefined) {
    const words = crypto.getRandomValues(new Uint32Array(2));
    return (BigInt(words[1]!) << 32n) | BigInt(words[0]!);
  }
  if (typeof seed === 'number') {
    if (!Number.isSafeInteger(seed) || seed < 0) {
      throw outOfRange('The "seed" option', 'a safe integer >= 0 when it is a number', seed);
    }
    return BigInt(seed);
  }
  if (typeof seed === 'bigint') {
    if (seed < 0n || seed >= TWO_64) throw outOfRange('The "seed" option', 'in [0, 2^64) when it is a bigint', seed);
    return seed;
  }
  throw invalidType('The "seed" option', 'of type bigint or number', seed);
}

/** A count argument: a safe integer (negative allowed). */
export function countArgument(name: string, value: unknown): number {
  if (typeof value !== 'number') throw invalidType(`The "${name}" argument`, 'of type number', value);
  if (!Number.isSafeInteger(value)) throw outOfRange(`The "${name}" argument`, 'a safe integer', value);
  return value;
}

/** A duration argument or option in milliseconds: a finite number in `[0, max]`. */
export function millisecondsArgument(what: string, value: unknown, max: number): number {
  if (typeof value !== 'number') throw invalidType(what, 'of type number', value);
  if (!(value >= 0 && value <= max)) throw outOfRange(what, `a number of milliseconds in [0, ${max}]`, value);
  return value;
}

/**
 * `value` as an iterable (of `[key, quota]` pairs, say), or a `TypeError` `ERR_INVALID_ARG_TYPE`
 * naming `what`. A byte array iterates numbers, never pairs, so it is refused here. A built-in's
 * iterator method called on another object (a `Proxy` of a `Map` or of a typed array passes the
 * method check) throws an uncoded `TypeError`: that is a value of the wrong type too, and so is
 * any uncoded `TypeError` from the iterator method (nothing tells a built-in's from a user's). Any
 * other error it throws goes through as it is.
 */
export function iterableArgument(what: string, expected: string, value: unknown): Iterable<unknown> {
  if (
    typeof value !== 'object' ||
    value === null ||
    isUint8Array(value) ||
    typeof (value as Partial<Iterable<unknown>>)[Symbol.iterator] !== 'function'
  ) {
    throw invalidType(what, expected, value);
  }
  let iterator: unknown;
  try {
    iterator = (value as Iterable<unknown>)[Symbol.iterator]();
  } catch (error) {
    if (error instanceof TypeError && (error as { code?: unknown }).code === undefined) {
      throw invalidType(what, expected, value);
    }
    throw error;
  }
  if (typeof iterator !== 'object' || iterator === null || typeof (iterator as Iterator<unknown>).next !== 'function') {
    throw invalidType(what, expected, value);
  }
  // `for…of` over this still calls the iterator's `return()` when the caller stops early.
  return { [Symbol.iterator]: () => iterator as Iterator<unknown> };
}
