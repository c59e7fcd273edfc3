/** The `ERR_KEEPCOUNT_CORRUPT` messages, one per check of docs/format.md §5, shared by both backends. */
import type { CorruptReason } from './core.js';
import { withCode, type KeepcountError } from './errors.js';
import {
  CHECKSUM_BYTES,
  FORMAT_VERSION,
  HEADER_AND_CHECKSUM_BYTES,
  MAX_COUNTERS,
  MAX_HASHES,
  serializedBytes,
} from './limits.js';

const hex = (n: number, digits: number): string => `0x${n.toString(16).padStart(digits, '0')}`;

/** An `ERR_KEEPCOUNT_CORRUPT` error saying what is wrong with the serialized sketch. */
const corrupt = (message: string): KeepcountError =>
  withCode(new Error(`Serialized sketch ${message}`), 'ERR_KEEPCOUNT_CORRUPT');

/** The error for `bytes` failing the check `reason` (the header fields it quotes were checked to exist). */
export function corruptError(reason: CorruptReason, bytes: Uint8Array): KeepcountError {
  const n = bytes.length;
  // Checked before the DataView: bytes on a detached buffer (length 0, 'short') make it throw.
  if (reason === 'short') {
    return corrupt(`is ${n} bytes, shorter than the ${HEADER_AND_CHECKSUM_BYTES} bytes of header and checksum`);
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let message: string;
  switch (reason) {
    case 'magic':
      message = `does not start with the magic "KCCM" (${hex(0x4b43434d, 8)}); found ${hex(view.getUint32(0), 8)}`;
      break;
    case 'version': {
      const version = view.getUint16(4, true);
      message =
        version < FORMAT_VERSION
          ? `has format version ${version}, which is no longer read: it put keys in other counters ` +
            `(docs/format.md, version history); this keepcount reads version ${FORMAT_VERSION}, so rebuild the sketch`
          : `has format version ${version}; this keepcount reads version ${FORMAT_VERSION}`;
      break;
    }
    case 'flags':
      message = `has flags ${hex(view.getUint16(6, true), 4)}; version ${FORMAT_VERSION} requires 0`;
      break;
    case 'shape':
      message =
        `has shape ${view.getUint32(8, true)} hashes × ${view.getUint32(12, true)} slots, outside the limits ` +
        `(1 to ${MAX_HASHES} hashes, 1 to ${MAX_COUNTERS} counters)`;
      break;
    case 'length': {
      const hashes = view.getUint32(8, true);
      const slots = view.getUint32(12, true);
      message = `is ${n} bytes; a ${hashes}×${slots} sketch is exactly ${serializedBytes(hashes, slots)} bytes`;
      break;
    }
    case 'checksum':
      message = `fails its CRC-32 check: the stored ${hex(view.getUint32(n - CHECKSUM_BYTES, true), 8)} does not match the contents`;
      break;
  }
  return corrupt(message);
}
