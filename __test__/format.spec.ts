import test from 'ava';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { crc32 as zlibCrc32 } from 'node:zlib';
import { Estimator } from '../lib/index.js';
import { crc32 } from '../fallback/crc32.js';
import { column } from '../fallback/rows.js';
import { SipHash } from '../fallback/siphash.js';
import { title } from './helpers.js';

// Reference SipHash-2-4, 64-bit output, key 00..0f, message 00..n-1 (the reference vectors.h).
const REFERENCE_2_4 = [
  '310e0edd47db6f72',
  'fd67dc93c539f874',
  '5a4fa9d909806c0d',
  '2d7efbd796666785',
  'b7877127e09427cf',
  '8da699cd64557618',
  'cee3fe586e46c9cb',
  '37d1018bf50002ab',
];

function digestHex(h: SipHash): string {
  const out = Buffer.alloc(8);
  out.writeUInt32LE(h.h1, 0);
  out.writeUInt32LE(h.h2, 4);
  return out.toString('hex');
}

test('[fallback] SipHash-2-4 reproduces the reference vectors, fed whole or byte by byte', (t) => {
  const h = new SipHash(2, 4);
  REFERENCE_2_4.forEach((expected, n) => {
    const message = Uint8Array.from({ length: n }, (_, i) => i);
    h.begin(0x03020100, 0x07060504, 0x0b0a0908, 0x0f0e0d0c);
    h.bytes(message, 0, n);
    h.finish();
    t.is(digestHex(h), expected, `n=${n} whole`);
    h.begin(0x03020100, 0x07060504, 0x0b0a0908, 0x0f0e0d0c);
    for (const b of message) h.byte(b);
    h.finish();
    t.is(digestHex(h), expected, `n=${n} bytewise`);
  });
});

test('[fallback] SipHash absorbs mixed words, bytes and unaligned runs as one stream', (t) => {
  const stream = Uint8Array.from({ length: 300 }, (_, i) => (i * 37) & 0xff);
  const whole = new SipHash(1, 3);
  whole.begin(123, 456, 0, 0);
  whole.bytes(stream, 0, stream.length);
  whole.finish();
  const word = (i: number): number =>
    stream[i]! | (stream[i + 1]! << 8) | (stream[i + 2]! << 16) | (stream[i + 3]! << 24);
  const mixed = new SipHash(1, 3);
  mixed.begin(123, 456, 0, 0);
  mixed.byte(stream[0]!);
  mixed.word(word(1));
  mixed.bytes(stream, 5, 150);
  mixed.word(word(150));
  mixed.word(word(154));
  mixed.bytes(stream, 158, 300);
  mixed.finish();
  t.is(digestHex(mixed), digestHex(whole));
});

test('[fallback] multiply-shift column equals floor(g * slots / 2^32) computed in bigint', (t) => {
  const gs = [0, 1, 0xffff, 0x10000, 0x7fffffff, 0x80000000, 0xffffffff, 0xdeadbeef, 0x12345678];
  const slotsList = [1, 2, 3, 1000, 8192, 65535, 65536, 65537, 4194303, 134217728];
  for (const g of gs) {
    for (const slots of slotsList) {
      t.is(column(g, slots), Number((BigInt(g) * BigInt(slots)) >> 32n), `g=${g} slots=${slots}`);
    }
  }
});

test('[fallback] CRC-32 agrees with zlib', (t) => {
  const bytes = Uint8Array.from({ length: 1000 }, (_, i) => (i * 131) & 0xff);
  t.is(crc32(bytes, 0), 0);
  t.is(crc32(bytes, bytes.length), zlibCrc32(bytes));
  t.is(crc32(new TextEncoder().encode('123456789'), 9), 0xcbf43926);
});

const MASK_64 = 2n ** 64n - 1n;

/** SipHash-1-3 of `message` under the key `k0`, `k1`, as one bigint (the fallback's SipHash). */
function sip13(k0: bigint, k1: bigint, message: Uint8Array): bigint {
  const h = new SipHash(1, 3);
  const half = (v: bigint, shift: bigint): number => Number((v >> shift) & 0xffffffffn);
  h.begin(half(k0, 0n), half(k0, 32n), half(k1, 0n), half(k1, 32n));
  h.bytes(message, 0, message.length);
  h.finish();
  return BigInt(h.h1) | (BigInt(h.h2) << 32n);
}

/** rapidhash's public constants (`DEFAULT_SECRETS` in the crate), for the seed derivation. */
const RAPID_CONSTANTS = [
  0x2d358dccaa6c78a5n,
  0x8bb84b93962eacc9n,
  0x4b33a62ed433d4a3n,
  0x4d5a2da51de1aa47n,
  0xa0761d6478bd642fn,
  0xe7037ed1a0b428dbn,
  0x90ed1765281c388cn,
];

/** rapidhash's folded multiplication: the 128-bit product's halves xored. */
const mix = (a: bigint, b: bigint): bigint => {
  const r = a * b;
  return (r & MASK_64) ^ (r >> 64n);
};

/** `premix_seed` of the crate's `RapidSecrets::seed`. */
function premix(seed: bigint, i: number): bigint {
  let s = seed ^ mix(seed ^ RAPID_CONSTANTS[2]!, RAPID_CONSTANTS[i]!);
  if ((s & (0xffffn << 48n)) === 0n) s |= 1n << 63n;
  if ((s & (0xffffn << 24n)) === 0n) s |= 1n << 31n;
  if ((s & 0xffffn) === 0n) s |= 1n;
  return s;
}

const u64le = (b: Uint8Array, at: number): bigint =>
  Buffer.from(b.buffer, b.byteOffset, b.byteLength).readBigUInt64LE(at);
const u32le = (b: Uint8Array, at: number): bigint =>
  BigInt(Buffer.from(b.buffer, b.byteOffset, b.byteLength).readUInt32LE(at));

/**
 * rapidhash V3 of `data` under `RapidSecrets::seed(seed)`, written from the specification in bigint
 * (independently of the fallback's port, which the vectors check) for streams of up to 112 bytes,
 * all this test needs.
 */
function rapidhashSpec(data: Uint8Array, seed: bigint): bigint {
  let s = premix(seed, 0);
  const secrets: bigint[] = [];
  for (let i = 0, x = s; i < 7; i++) secrets.push((x = premix(x, i)));
  const n = data.length;
  let a = 0n;
  let b = 0n;
  const remainder = BigInt(n);
  if (n <= 16) {
    if (n >= 8) [a, b, s] = [u64le(data, 0), u64le(data, n - 8), s ^ BigInt(n)];
    else if (n >= 4) [a, b, s] = [u32le(data, 0), u32le(data, n - 4), s ^ BigInt(n)];
    else if (n > 0) [a, b] = [(BigInt(data[0]!) << 45n) | BigInt(data[n - 1]!), BigInt(data[n >> 1]!)];
  } else {
    if (n > 112) throw new RangeError('the spec helper covers streams of up to 112 bytes');
    const order = [2, 2, 1, 1, 2, 1];
    for (let k = 0; k < 6 && n > 16 * (k + 1); k++) {
      s = mix(u64le(data, 16 * k) ^ secrets[order[k]!]!, u64le(data, 16 * k + 8) ^ s);
    }
    [a, b] = [u64le(data, n - 16) ^ BigInt(n), u64le(data, n - 8)];
  }
  const product = (a ^ secrets[1]!) * (b ^ s);
  return mix((product & MASK_64) ^ 0xaaaaaaaaaaaaaaaan, (product >> 64n) ^ secrets[1]! ^ remainder);
}

/** The counters a key must touch per docs/format.md §1–3, the rows computed from the spec in bigint. */
function specIndices(stream: Uint8Array, seed: bigint, hashes: number, slots: number): number[] {
  const x = rapidhashSpec(stream, seed);
  const x0 = x & 0xffffffffn;
  const x1 = x >> 32n;
  const reduce = (word: bigint): bigint => (word * BigInt(slots)) >> 32n;
  const out: bigint[] = [];
  for (let row = 0; row < hashes; row++) {
    const [a, c, b] = [0, 1, 2].map((j) => sip13(seed, 1n, i64le(BigInt(3 * row + j))));
    const word = ((a! * x0 + c! * x1 + b!) & MASK_64) >> 32n;
    out.push(BigInt(row * slots) + reduce(word));
  }
  return out.map(Number);
}

test('[fallback] the spec rapidhash above agrees with the Rust-generated table', (t) => {
  const table = JSON.parse(readFileSync(join(__dirname, 'rapidhash-vectors.json'), 'utf8')) as {
    seeds: { seed: string; hashes: string[] }[];
  };
  for (const { seed, hashes } of table.seeds) {
    for (let n = 0; n <= 112; n++) {
      const message = Uint8Array.from({ length: n }, (_, i) => (i * 31 + n * 7 + 11) & 0xff);
      t.is(rapidhashSpec(message, BigInt(seed)), BigInt(hashes[n]!), `seed ${seed}, length ${n}`);
    }
  }
});

const i64le = (v: bigint): Uint8Array => {
  const b = Buffer.alloc(8);
  b.writeBigInt64LE(v);
  return b;
};

test(title('keys touch exactly the counters docs/format.md prescribes'), (t) => {
  const seed = 0x0123456789abcdefn;
  const hashes = 5;
  const slots = 1000;
  const bytesKey = Uint8Array.from([1, 2, 3, 255, 0]);
  const cases: [string | number | bigint | Uint8Array, Uint8Array][] = [
    ['', Uint8Array.of(0xff)],
    ['1.2.3.4', Buffer.concat([Buffer.from('1.2.3.4'), Uint8Array.of(0xff)])],
    ['héllo wörld ✓ 𝄞', Buffer.concat([Buffer.from('héllo wörld ✓ 𝄞'), Uint8Array.of(0xff)])],
    [1, i64le(1n)],
    [-1, i64le(-1n)],
    [Number.MAX_SAFE_INTEGER, i64le(BigInt(Number.MAX_SAFE_INTEGER))],
    [-(2n ** 63n), i64le(-(2n ** 63n))],
    [2n ** 63n - 1n, i64le(2n ** 63n - 1n)],
    [bytesKey, Buffer.concat([Buffer.from([5, 0, 0, 0, 0, 0, 0, 0]), bytesKey])],
  ];
  for (const [key, stream] of cases) {
    const e = new Estimator({ hashes, slots, seed });
    e.incr(key, 3);
    const view = new DataView(e.serialize().buffer);
    const touched: number[] = [];
    for (let i = 0; i < hashes * slots; i++) if (view.getBigInt64(24 + 8 * i, true) !== 0n) touched.push(i);
    const expected = [...new Set(specIndices(stream, seed, hashes, slots))].sort((a, b) => a - b);
    t.deepEqual(touched, expected, `key ${String(key)}`);
  }
});
