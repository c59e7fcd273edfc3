/** Shape limits and the format version shared by every sketch (docs/format.md §4–5). */

/** Most rows a sketch may have. */
export const MAX_HASHES = 32;
/** Most counters (`hashes × slots`) a sketch may have: 2^27, 1 GiB of i64. */
export const MAX_COUNTERS = 134217728;

/**
 * The serialized format version both backends write and read. Version 1 (HalfSipHash and double
 * hashing, rows not independent) is refused with a message saying it is no longer read.
 */
export const FORMAT_VERSION = 2;
