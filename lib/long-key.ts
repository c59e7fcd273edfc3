/**
 * The form in which keepcount stores a client key it must keep, bounded in length: the HTTP
 * layer's heavy-hitter tables (a rate limit's exact counts, a `talkers` option) and keepcount/redis'
 * `SyncedLimiter` (its per-key accounts on each node and the bucket each key names in Redis).
 *
 * Why: such an entry keeps its whole key for as long as it lives, and with a custom `key` read
 * from a request header the client chooses that key. Random 16 kB keys sent up to the threshold
 * would make every entry 16 kB: at the default 20,000 entries per window and two windows, about
 * 640 MB for one rate limit; at `SyncedLimiter`'s 65,536 accounts, about 1 GB per node, each key
 * also sent to Redis on every sync. Stored in this form, an entry keeps at most
 * {@link LONG_KEY_FORM_LENGTH} code units.
 *
 * The form: a key of at most {@link MAX_STORED_KEY_LENGTH} UTF-16 code units is itself. A longer
 * key is its first {@link PREFIX_LENGTH} code units, `'…'`, and 16 lowercase hex digits: the first
 * 64 bits of the SHA-256 of the whole key's UTF-8 bytes (lone surrogates as U+FFFD, as keepcount
 * hashes string keys, docs/format.md §1), so `topTalkers` shows a recognisable key that an
 * operator can match (`createHash('sha256').update(key).digest('hex').slice(0, 16)`), and both
 * backends, and every node of a fleet, store the same string (node:crypto computes it on either,
 * from the key alone): nodes sharing a `SyncedLimiter` count a long key in the same bucket.
 *
 * Distinct keys keep distinct forms except when two long keys with the same prefix have the same
 * 64-bit digest: for `n` distinct long keys that happens with probability at most `n² / 2^65`
 * (birthday bound; 3 × 10^−8 for a million keys in one window). Against a client searching on
 * purpose: colliding keys of its own (about 2^32 hashes) only merge its own counts, and sharing the
 * count of a key it does not send takes a second preimage of that key's digest (about 2^64
 * hashes). A long key's form is 257 code units and a short key's at most 256, so a client cannot
 * send a short key equal to another key's form.
 *
 * @module
 */
import { Buffer } from 'node:buffer';
import { createHash } from 'node:crypto';

/** Keys up to this many UTF-16 code units are stored as they are. */
export const MAX_STORED_KEY_LENGTH = 256;

/** Digest hex digits in a long key's form: 64 bits (see the module doc for collisions). */
const DIGEST_DIGITS = 16;

/** Code units of a long key kept at the start of its form: the form is then one unit longer than a short key can be. */
const PREFIX_LENGTH = MAX_STORED_KEY_LENGTH - DIGEST_DIGITS;

/** Length of a long key's form: prefix, `'…'`, digest: 257. */
export const LONG_KEY_FORM_LENGTH = PREFIX_LENGTH + 1 + DIGEST_DIGITS;

/**
 * `key` as keepcount stores it (see the module doc). Keys that are not strings (a custom `key`
 * returning something else) pass through for the counter to check.
 */
export function storedKey<K>(key: K): K | string {
  if (typeof key !== 'string' || key.length <= MAX_STORED_KEY_LENGTH) return key;
  const digest = createHash('sha256').update(key, 'utf8').digest('hex').slice(0, DIGEST_DIGITS);
  let prefix = key.slice(0, PREFIX_LENGTH);
  // A cut between the halves of a surrogate pair leaves a lone high surrogate, which both backends
  // would store as U+FFFD anyway: say so here, and keep the form at its fixed length.
  if (/[\uD800-\uDBFF]$/.test(prefix)) prefix = prefix.slice(0, -1) + '\uFFFD';
  // In V8 a slice of a long string is a view that keeps the whole string alive, and so is a string
  // concatenated from one: stored as it is, each form would hold its 16 kB key (measured: 4,000
  // forms kept 65 MB). A round trip through bytes copies it out (2.3 MB), code units and all.
  return Buffer.from(`${prefix}…${digest}`, 'utf16le').toString('utf16le');
}
