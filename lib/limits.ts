/**
 * Shape limits, the format version and the serialized sizes shared by every sketch, by both
 * backends' encoder and decoder and by the error messages (docs/format.md §4–5).
 */

/** Most rows a sketch may have. */
export const MAX_HASHES = 32;
/** Most counters (`hashes × slots`) a sketch may have: 2^27, 1 GiB of i64. */
export const MAX_COUNTERS = 134217728;

/**
 * The serialized format version both backends write and read. Versions 1 (HalfSipHash, double
 * hashing, rows not independent) and 2 (SipHash-1-3, rows 0 and 1 reading its halves) put keys in
 * other counters and are refused with a message saying they are no longer read.
 */
export const FORMAT_VERSION = 3;

/** Bytes before the counters: magic, version, flags, hashes, slots, seed (docs/format.md §5). */
export const HEADER_BYTES = 24;
/** Bytes of one counter: an i64. */
export const COUNTER_BYTES = 8;
/** Bytes of the CRC-32 after the counters. */
export const CHECKSUM_BYTES = 4;
/** The shortest a serialized sketch can be: the header and the checksum around no counters. */
export const HEADER_AND_CHECKSUM_BYTES = HEADER_BYTES + CHECKSUM_BYTES;

/** The exact length of a serialized `hashes × slots` sketch; at most 28 + 8 × 2^27, a safe integer. */
export function serializedBytes(hashes: number, slots: number): number {
  return HEADER_AND_CHECKSUM_BYTES + COUNTER_BYTES * hashes * slots;
}
