/**
 * Serialized sketch, version 3 (docs/format.md §5): `KCCM`, version, flags, shape, seed, i64
 * counters, CRC-32. The decoder checks in the spec's order and allocates nothing before the length
 * check, so memory is bounded by the input.
 */
import type { CorruptReason } from '../lib/core.js';
import {
  CHECKSUM_BYTES,
  COUNTER_BYTES,
  FORMAT_VERSION,
  HEADER_AND_CHECKSUM_BYTES,
  HEADER_BYTES,
  MAX_COUNTERS,
  MAX_HASHES,
  serializedBytes,
} from '../lib/limits.js';
import { Counters } from './counters.js';
import { crc32 } from './crc32.js';

const MAGIC = 0x4d43434b; // "KCCM" read as a little-endian u32

/** Encodes a sketch. */
export function encode(hashes: number, slots: number, seed: bigint, counters: Counters): Uint8Array {
  const bytes = new Uint8Array(serializedBytes(hashes, slots));
  const view = new DataView(bytes.buffer);
  view.setUint32(0, MAGIC, true);
  view.setUint16(4, FORMAT_VERSION, true);
  view.setUint16(6, 0, true);
  view.setUint32(8, hashes, true);
  view.setUint32(12, slots, true);
  view.setBigUint64(16, seed, true);
  counters.writeTo(view, HEADER_BYTES);
  const end = bytes.length - CHECKSUM_BYTES;
  view.setUint32(end, crc32(bytes, end), true);
  return bytes;
}

/** Encodes a sketch whose counters are i64s, read one by one with `counter` (a shared buffer's). */
export function encodeWords(hashes: number, slots: number, seed: bigint, counter: (i: number) => bigint): Uint8Array {
  const bytes = new Uint8Array(serializedBytes(hashes, slots));
  const view = new DataView(bytes.buffer);
  view.setUint32(0, MAGIC, true);
  view.setUint16(4, FORMAT_VERSION, true);
  view.setUint16(6, 0, true);
  view.setUint32(8, hashes, true);
  view.setUint32(12, slots, true);
  view.setBigUint64(16, seed, true);
  const n = hashes * slots;
  for (let i = 0, at = HEADER_BYTES; i < n; i++, at += COUNTER_BYTES) view.setBigInt64(at, counter(i), true);
  const end = bytes.length - CHECKSUM_BYTES;
  view.setUint32(end, crc32(bytes, end), true);
  return bytes;
}

/** A decoded sketch, or the first check it fails. */
export type Decoded = { hashes: number; slots: number; seed: bigint; counters: Counters } | CorruptReason;

/** A sketch's shape and seed, read from its header. */
export interface Header {
  hashes: number;
  slots: number;
  seed: bigint;
}

/**
 * The shape and seed of a sketch after every check before the checksum (length, magic, version,
 * flags, shape, exact length), or the first it fails: crates/limits/src/codec.rs `header`.
 */
export function decodeHeader(bytes: Uint8Array): Header | CorruptReason {
  if (bytes.length < HEADER_AND_CHECKSUM_BYTES) return 'short';
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (view.getUint32(0, true) !== MAGIC) return 'magic';
  if (view.getUint16(4, true) !== FORMAT_VERSION) return 'version';
  if (view.getUint16(6, true) !== 0) return 'flags';
  const hashes = view.getUint32(8, true);
  const slots = view.getUint32(12, true);
  if (hashes < 1 || hashes > MAX_HASHES || slots < 1 || hashes * slots > MAX_COUNTERS) return 'shape';
  if (bytes.length !== serializedBytes(hashes, slots)) return 'length';
  return { hashes, slots, seed: view.getBigUint64(16, true) };
}

/** Decodes and validates a sketch in the spec's order. */
export function decode(bytes: Uint8Array): Decoded {
  const header = decodeHeader(bytes);
  if (typeof header === 'string') return header;
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const end = bytes.length - CHECKSUM_BYTES;
  if (view.getUint32(end, true) !== crc32(bytes, end)) return 'checksum';
  return { ...header, counters: Counters.readFrom(view, HEADER_BYTES, header.hashes * header.slots) };
}
