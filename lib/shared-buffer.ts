/**
 * Sketches and rates in a `SharedArrayBuffer`, which worker threads pass to each other to count in
 * the same memory without copying: the buffer's layout, made and checked here once for both
 * backends, so a buffer written by one reads the same in the other and every error is the same.
 *
 * The layout is a shared segment file's (`crates/limits/src/shared/layout.rs`), in memory instead
 * of a file:
 *
 * ```text
 * 0..64    magic "KCSHARED", format version 5, kind (1 estimator, 2 rate), hashes, slots, seed,
 *          interval (ns; 0 for an estimator), creation time (Unix ns), length, 0, CRC-32 of 0..60
 * 64..72   a rate's interval word (start in ns | stale | rotating | flag), 0 in a new buffer
 * 128..    i64 counters, row-major: one sketch (estimator) or two (rate)
 * ```
 *
 * Every thread reaches the counters and the interval word only through atomic operations (the
 * native backend's Rust atomics, the fallback's `Atomics` on a `BigInt64Array`), so the two
 * backends can even share one buffer. The header is written once, before the buffer is handed to
 * anyone, and never changes.
 *
 * @module
 */
import { crc32 } from '../fallback/crc32.js';
import { invalidType, withCode, type KeepcountError } from './errors.js';
import { MAX_COUNTERS, MAX_HASHES } from './limits.js';

/** "KCSHARED", the first eight bytes of a segment file and of a shared buffer. */
const MAGIC = [0x4b, 0x43, 0x53, 0x48, 0x41, 0x52, 0x45, 0x44];
/** The segment layout version (`FORMAT_VERSION` in layout.rs). */
const LAYOUT_VERSION = 5;
/** Bytes before the counters: the immutable header's cache line, then the mutable words'. */
const HEADER_BYTES = 128;
/** Offset of the header's CRC-32, which covers every byte before it. */
const CHECKSUM_OFFSET = 60;
/** Offset of the first counter as an index into a `BigInt64Array` over the buffer. */
export const FIRST_COUNTER = HEADER_BYTES / 8;
/** Index of a rate's interval word (byte 64) in a 64-bit array over the buffer. */
export const RATE_WORD = 8;
/** Bytes of an in-flight segment's process slot, one cache line (`SLOT_BYTES` in layout.rs). */
const SLOT_BYTES = 64;
/** Most process slots an in-flight segment has (`MAX_PROCESSES` in inflight.rs). */
const MAX_PROCESSES = 1024;
/** Nanoseconds per millisecond: the header keeps a rate's interval in nanoseconds. */
const NANOS_PER_MS = 1_000_000n;

/** What a buffer holds: the kind codes of layout.rs. */
export type BufferKind = 'estimator' | 'rate';
const KIND_CODES = { estimator: 1, rate: 2 } as const;
/** layout.rs' names for the kind codes, in-flight included (a segment file copied into a buffer). */
const KIND_NAMES: Record<number, string> = { 1: 'estimator', 2: 'rate', 3: 'in-flight' };

/** What a buffer is for; the fields a caller did not give are not checked. */
export interface BufferLayout {
  kind: BufferKind;
  hashes: number;
  slots: number;
  seed: bigint;
  /** A rate's interval in milliseconds; 0 for an estimator. */
  intervalMs: number;
}

/** A rate's interval in nanoseconds; `lib/rate.ts` keeps it within 64 bits. */
const intervalNanos = (intervalMs: number): bigint => BigInt(intervalMs) * NANOS_PER_MS;

/** Bytes of a buffer holding `kind` with sketches of `hashes × slots`. */
export function bufferBytes(kind: BufferKind, hashes: number, slots: number): number {
  return HEADER_BYTES + (kind === 'rate' ? 2 : 1) * hashes * slots * 8;
}

/**
 * Bytes of a segment of kind `code` (`Layout::total_bytes` in layout.rs): the counters of its
 * sketches after the header, and for an in-flight segment (a file copied into a buffer, refused
 * as another kind once its length is known good) one 64-byte slot per process from the next
 * cache line after them.
 */
function segmentBytes(code: number, hashes: number, slots: number, processes: number): number {
  const sketches = code === 3 ? 1 + processes : code === 2 ? 2 : 1;
  const countersEnd = HEADER_BYTES + sketches * hashes * slots * 8;
  if (code !== 3) return countersEnd;
  return Math.ceil(countersEnd / SLOT_BYTES) * SLOT_BYTES + processes * SLOT_BYTES;
}

/** A new buffer for `layout` (validated by the caller): header written, every counter 0. */
export function createBuffer(layout: BufferLayout): SharedArrayBuffer {
  const { kind, hashes, slots } = layout;
  const bytes = bufferBytes(kind, hashes, slots);
  const buffer = new SharedArrayBuffer(bytes);
  const view = new DataView(buffer);
  MAGIC.forEach((byte, i) => view.setUint8(i, byte));
  view.setUint32(8, LAYOUT_VERSION, true);
  view.setUint32(12, KIND_CODES[kind], true);
  view.setUint32(16, hashes, true);
  view.setUint32(20, slots, true);
  view.setBigUint64(24, layout.seed, true);
  view.setBigUint64(32, kind === 'rate' ? intervalNanos(layout.intervalMs) : 0n, true);
  view.setBigUint64(40, BigInt(Date.now()) * NANOS_PER_MS, true);
  view.setBigUint64(48, BigInt(bytes), true);
  view.setUint32(CHECKSUM_OFFSET, crc32(new Uint8Array(buffer), CHECKSUM_OFFSET), true);
  return buffer;
}

/** The `ERR_KEEPCOUNT_CORRUPT` error for a buffer failing the header check `check`. */
function corrupt(check: string, detail: string): KeepcountError {
  return withCode(
    new Error(`The shared buffer is not a keepcount buffer (${check} check failed): ${detail}`),
    'ERR_KEEPCOUNT_CORRUPT',
  );
}

/** What to do about an option that differs from the buffer's. */
const SAME_OPTIONS = "every thread must pass the options it was created with, or leave them out to take the buffer's";

/**
 * The `ERR_KEEPCOUNT_MISMATCH` error naming the first field that differs: the kind, or an option
 * of `fromSharedBuffer` (then with what to do).
 */
function mismatch(field: string, existing: string, requested: string): KeepcountError {
  const fix = field === 'kind' ? '' : `: ${SAME_OPTIONS}`;
  return withCode(
    new Error(`The shared buffer was created with ${field} ${existing}, not ${requested} as requested${fix}`),
    'ERR_KEEPCOUNT_MISMATCH',
  );
}

/**
 * `buffer`'s layout after checking it is a `SharedArrayBuffer` (else `TypeError`) a whole number
 * of counters long and holding at least a header (else `RangeError`), with a valid header
 * (`ERR_KEEPCOUNT_CORRUPT`, in layout.rs' order: magic, checksum, layout, length) of this
 * build's layout version (else `ERR_KEEPCOUNT_MISMATCH`, checked after the magic) for a `kind`
 * whose other fields equal those of `expected` that are given (`ERR_KEEPCOUNT_MISMATCH`).
 */
export function readBuffer(buffer: unknown, expected: Partial<BufferLayout> & { kind: BufferKind }): BufferLayout {
  if (!(buffer instanceof SharedArrayBuffer)) {
    throw invalidType('The "buffer" argument', 'an instance of SharedArrayBuffer', buffer);
  }
  const length = buffer.byteLength;
  if (length < HEADER_BYTES || length % 8 !== 0) {
    throw withCode(
      new RangeError(
        `The "buffer" argument must be a multiple of 8 bytes long, at least the ${HEADER_BYTES} of the header ` +
          `(made by createSharedBuffer). Received a SharedArrayBuffer of ${length} bytes`,
      ),
      'ERR_OUT_OF_RANGE',
    );
  }
  // A copy: the header never changes, but a buffer that is not ours might, while we read it.
  const header = new Uint8Array(HEADER_BYTES / 2);
  header.set(new Uint8Array(buffer, 0, header.length));
  const view = new DataView(header.buffer);
  if (MAGIC.some((byte, i) => header[i] !== byte)) corruptMagic(header);
  const version = view.getUint32(8, true);
  if (version !== LAYOUT_VERSION) {
    // Not damage: a copy of keepcount of another layout (two in one process's dependencies) made it.
    throw withCode(
      new Error(
        `The shared buffer was made by another version of keepcount, with layout ${version} where this one reads layout ${LAYOUT_VERSION}`,
      ),
      'ERR_KEEPCOUNT_MISMATCH',
    );
  }
  const stored = view.getUint32(CHECKSUM_OFFSET, true);
  if (stored !== crc32(header, CHECKSUM_OFFSET)) {
    throw corrupt('checksum', `the stored CRC-32 0x${stored.toString(16).padStart(8, '0')} does not match the header`);
  }
  const code = view.getUint32(12, true);
  const hashes = view.getUint32(16, true);
  const slots = view.getUint32(20, true);
  const intervalNs = view.getBigUint64(32, true);
  const processes = view.getUint32(56, true);
  const kindName = KIND_NAMES[code];
  if (
    kindName === undefined ||
    hashes < 1 ||
    hashes > MAX_HASHES ||
    slots < 1 ||
    hashes * slots > MAX_COUNTERS ||
    (code === 2) !== (intervalNs !== 0n) ||
    (code === 3) !== (processes !== 0) ||
    processes > MAX_PROCESSES
  ) {
    throw corrupt('layout', `kind ${code}, ${hashes} hashes × ${slots} slots, interval ${intervalNs} ns`);
  }
  const total = segmentBytes(code, hashes, slots, processes);
  const declared = view.getBigUint64(48, true);
  if (declared !== BigInt(total) || length !== total) {
    // Name all three: which of the buffer, the length field and the shape disagrees is the fault.
    throw corrupt(
      'length',
      `the buffer is ${length} bytes; its length field says ${declared}, and its shape takes ${total}`,
    );
  }
  const seed = view.getBigUint64(24, true);
  const found: BufferLayout = {
    kind: kindName as BufferKind,
    hashes,
    slots,
    seed,
    intervalMs: Number(intervalNs / NANOS_PER_MS),
  };
  if (kindName !== expected.kind) throw mismatch('kind', kindName, expected.kind);
  if (expected.hashes !== undefined && expected.hashes !== hashes) {
    throw mismatch('hashes', `${hashes}`, `${expected.hashes}`);
  }
  if (expected.slots !== undefined && expected.slots !== slots)
    throw mismatch('slots', `${slots}`, `${expected.slots}`);
  if (expected.seed !== undefined && expected.seed !== seed) {
    // Not the seeds themselves: messages end up in logs, and the seed is what keeps keys apart.
    throw withCode(
      new Error(
        'The shared buffer was created with another seed than the one requested (seeds are secret: neither is ' +
          `shown): ${SAME_OPTIONS}`,
      ),
      'ERR_KEEPCOUNT_MISMATCH',
    );
  }
  if (code === 2) {
    if (intervalNs % NANOS_PER_MS !== 0n) {
      throw corrupt('layout', `interval ${intervalNs} ns is not a whole number of milliseconds`);
    }
    if (expected.intervalMs !== undefined && intervalNanos(expected.intervalMs) !== intervalNs) {
      throw mismatch('intervalMs', `${found.intervalMs}`, `${expected.intervalMs}`);
    }
  }
  return found;
}

function corruptMagic(header: Uint8Array): never {
  const found = Array.from(header.subarray(0, 8), (b) => b.toString(16).padStart(2, '0')).join('');
  throw corrupt('magic', `it does not start with "KCSHARED"; found 0x${found}`);
}
