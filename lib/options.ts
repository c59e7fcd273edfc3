/** Validation of the options and numeric arguments every class shares. */
import { invalidType, outOfRange } from './errors.js';
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

/** A sketch shape within docs/format.md §4. */
export function shapeOptions(
  hashes: unknown,
  slots: unknown,
  defaults: { hashes: number; slots: number },
): { hashes: number; slots: number } {
  const h = integerOption('hashes', hashes, 1, MAX_HASHES, defaults.hashes);
  const s = integerOption('slots', slots, 1, MAX_COUNTERS, defaults.slots);
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
