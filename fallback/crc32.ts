/** CRC-32 (IEEE 802.3 polynomial, reflected, as zlib's `crc32`) for the serialized sketch trailer. */

const TABLE = new Int32Array(256);
for (let n = 0; n < 256; n++) {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  TABLE[n] = c;
}

/** CRC-32 of `bytes[0..end)`, as an unsigned 32-bit number. */
export function crc32(bytes: Uint8Array, end: number): number {
  let crc = -1;
  for (let i = 0; i < end; i++) crc = TABLE[(crc ^ bytes[i]!) & 0xff]! ^ (crc >>> 8);
  return (crc ^ -1) >>> 0;
}
