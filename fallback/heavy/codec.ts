/**
 * The serialized heavy-hitter summary (docs/format.md §6), as crates/limits/src/heavy/codec.rs
 * writes and reads it: header, the §5 sketch, entries in ascending byte order of their keys, CRC-32.
 * The decoder checks in the spec's order and returns the first failure.
 */
import type { HeavyCorruptReason } from '../../lib/core.js';
import { crc32 } from '../crc32.js';
import { FallbackEstimator } from '../estimator.js';
import { decode as decodeSketch, decodeHeader as decodeSketchHeader, encode as encodeSketch } from '../wire.js';
import { decodeStored } from './keys.js';
import { Summary } from './summary.js';
import type { Entry, Overflow } from './table.js';
import { SAFE, u64, type U64 } from './u64.js';

const MAGIC = 0x4848434b; // "KCHH" read as a little-endian u32
const VERSION = 1;
const FLAG_MERGED = 1;
const HEADER_LEN = 60;
const CHECKSUM_LEN = 4;
const MIN_LEN = HEADER_LEN + CHECKSUM_LEN;
/** Key length (4) + exact (8) + slack (8). */
const ENTRY_MIN_LEN = 20;
const MAX_CAPACITY = 2 ** 24;

/** Byte order of stored keys (`Vec<u8>`'s `Ord`). */
function compareBytes(a: Uint8Array, b: Uint8Array): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return a[i]! - b[i]!;
  return a.length - b.length;
}

/** `Summary::to_bytes`: canonical, entries sorted by key. */
export function encodeSummary(summary: Summary): Uint8Array {
  const entries = [...summary.table.entries.values()].sort((a, b) => compareBytes(a.key, b.key));
  const { sketch } = summary;
  const sketchBytes = encodeSketch(sketch.hashes, sketch.slots, sketch.seed, sketch.counters);
  let len = MIN_LEN + sketchBytes.length;
  for (const e of entries) len += ENTRY_MIN_LEN + e.key.length;
  const bytes = new Uint8Array(len);
  const view = new DataView(bytes.buffer);
  const o = summary.table.overflow;
  view.setUint32(0, MAGIC, true);
  view.setUint16(4, VERSION, true);
  view.setUint16(6, summary.merged ? FLAG_MERGED : 0, true);
  view.setBigUint64(8, BigInt(len), true);
  view.setBigUint64(16, BigInt(summary.threshold), true);
  view.setUint32(24, summary.table.capacity, true);
  view.setUint32(28, entries.length, true);
  view.setBigUint64(32, BigInt(o.events), true);
  view.setBigUint64(40, BigInt(o.weight), true);
  view.setBigUint64(48, BigInt(o.mergeDropped), true);
  view.setUint32(56, sketchBytes.length, true);
  bytes.set(sketchBytes, HEADER_LEN);
  let at = HEADER_LEN + sketchBytes.length;
  for (const e of entries) {
    view.setUint32(at, e.key.length, true);
    bytes.set(e.key, at + 4);
    at += 4 + e.key.length;
    view.setBigUint64(at, BigInt(e.exact), true);
    view.setBigUint64(at + 8, BigInt(e.slack), true);
    at += 16;
  }
  view.setUint32(at, crc32(bytes, at), true);
  return bytes;
}

/**
 * `Summary::from_bytes_for` for a merge into `into`, then the §6.1 checks (every key a stored
 * form, every count safe); or the first failure. After the checksum, a summary whose threshold or
 * sketch shape or seed differ from `into`'s is `'mismatch'`, before anything else is decoded.
 */
export function decodeSummary(bytes: Uint8Array, into: Summary): Summary | HeavyCorruptReason | 'mismatch' {
  if (bytes.length < MIN_LEN) return 'short';
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (view.getUint32(0, true) !== MAGIC) return 'magic';
  if (view.getUint16(4, true) !== VERSION) return 'version';
  const flags = view.getUint16(6, true);
  if ((flags & ~FLAG_MERGED) !== 0) return 'flags';
  if (view.getBigUint64(8, true) !== BigInt(bytes.length)) return 'length';
  const body = bytes.length - CHECKSUM_LEN;
  if (view.getUint32(body, true) !== crc32(bytes, body)) return 'checksum';
  if (mismatched(bytes, view, into)) return 'mismatch';
  const threshold = view.getBigUint64(16, true);
  const capacity = view.getUint32(24, true);
  const count = view.getUint32(28, true);
  const sketchLen = view.getUint32(56, true);
  if (sketchLen > body - HEADER_LEN) return 'sketch-length';
  const decoded = decodeSketch(bytes.subarray(HEADER_LEN, HEADER_LEN + sketchLen));
  if (typeof decoded === 'string') return 'sketch';
  // A counter beyond the safe range is ±Infinity in `numbers`, by its sign: negative ones too.
  if (decoded.counters.numbers.some((c) => c < 0)) return 'negative-counter';
  if (threshold === 0n || capacity < 1 || capacity > MAX_CAPACITY) return 'config';
  if (count > capacity) return 'entries';
  let at = HEADER_LEN + sketchLen;
  if (count > Math.floor((body - at) / ENTRY_MIN_LEN)) return 'entry';
  const sketch = new FallbackEstimator(decoded.hashes, decoded.slots, decoded.seed, decoded.counters);
  // Thresholds above 2^53 read as the nearest number; no summary keepcount writes has one.
  const summary = new Summary(sketch, Number(threshold), capacity);
  const entries: Entry[] = [];
  let previous: Uint8Array | undefined;
  for (let index = 0; index < count; index++) {
    if (body - at < 4) return 'entry';
    const keyLen = view.getUint32(at, true);
    if (body - at - 4 < keyLen + 16) return 'entry';
    // A copy the table owns, and a plain Uint8Array: `slice` on a Node Buffer (what files and
    // sockets hand out) is a view, which would tie the table's keys to the caller's memory.
    const key = new Uint8Array(bytes.subarray(at + 4, at + 4 + keyLen));
    at += 4 + keyLen;
    const exact = u64(view.getBigUint64(at, true));
    const slack = u64(view.getBigUint64(at + 8, true));
    at += 16;
    if (previous !== undefined && compareBytes(previous, key) >= 0) return 'order';
    previous = key;
    const { h1, h2 } = summary.hashOf(key);
    if (sketch.exactHashed(h1, h2) < threshold) return 'below-threshold';
    entries.push({ h1, h2, key, exact, slack });
  }
  if (at !== body) return 'trailing';
  if (entries.some((e) => decodeStored(e.key) === undefined)) return 'key';
  const counter = (offset: number): U64 => u64(view.getBigUint64(offset, true));
  const overflow = { events: counter(32), weight: counter(40), mergeDropped: counter(48) };
  if (!safeCounts(entries, overflow)) return 'counts';
  summary.table.replace(entries);
  summary.table.overflow = overflow;
  summary.merged = (flags & FLAG_MERGED) !== 0;
  return summary;
}

/**
 * Whether the settings of `bytes`, which passed the checksum, differ from `into`'s: codec.rs
 * `mismatch`. Only valid ones are compared (threshold ≥ 1, the sketch inside the input with a
 * header that passes §5's checks before its checksum); the decoder refuses the others.
 */
function mismatched(bytes: Uint8Array, view: DataView, into: Summary): boolean {
  const threshold = view.getBigUint64(16, true);
  const sketchLen = view.getUint32(56, true);
  if (sketchLen > bytes.length - CHECKSUM_LEN - HEADER_LEN) return false;
  const header = decodeSketchHeader(bytes.subarray(HEADER_LEN, HEADER_LEN + sketchLen));
  if (typeof header === 'string' || threshold === 0n) return false;
  const { sketch } = into;
  return (
    threshold !== BigInt(into.threshold) ||
    header.hashes !== sketch.hashes ||
    header.slots !== sketch.slots ||
    header.seed !== sketch.seed
  );
}

/**
 * Whether every count is at most 2^53 − 1: the check the native binding makes after §6's
 * (src/heavy.rs `absorb`, docs/format.md §6.1), so that both backends refuse the same summaries.
 * The fallback would keep larger counts exactly; the check stays while the binding makes it.
 */
function safeCounts(entries: Entry[], o: Overflow): boolean {
  return (
    entries.every((e) => e.exact <= SAFE && e.slack <= SAFE) &&
    o.events <= SAFE &&
    o.weight <= SAFE &&
    o.mergeDropped <= SAFE
  );
}
