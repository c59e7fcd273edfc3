/**
 * Keys as Map keys: one string per key as the native backend tells keys apart (docs/format.md §1),
 * for the fallback's exact tables (`Limiter` buckets, heavy-hitter entries).
 */
import type { Key } from '../lib/core.js';

/** The canonical form of a key: keys that are the same key to the native backend map to one string. */
export function canonical(key: Key): string {
  switch (typeof key) {
    case 'string':
      // Native reads strings as UTF-8 with lone surrogates replaced by U+FFFD.
      return `s${(key as string & { toWellFormed(): string }).toWellFormed()}`;
    case 'number':
    case 'bigint':
      // 1 and 1n are the same key (i64).
      return `i${key}`;
    default: {
      let s = 'b';
      for (let i = 0; i < key.length; i++) s += String.fromCharCode(key[i]!);
      return s;
    }
  }
}
