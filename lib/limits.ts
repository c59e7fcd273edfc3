/** Shape limits shared by every sketch (docs/format.md §4). */

/** Most rows a sketch may have. */
export const MAX_HASHES = 32;
/** Most counters (`hashes × slots`) a sketch may have: 2^27, 1 GiB of i64. */
export const MAX_COUNTERS = 134217728;
