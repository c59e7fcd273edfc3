import test from 'ava';
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

/** The counters a key must touch per docs/format.md §1–3, the rows computed from the spec in bigint. */
function specIndices(stream: Uint8Array, seed: bigint, hashes: number, slots: number): number[] {
  const x = sip13(seed, 0n, stream);
  const x0 = x & 0xffffffffn;
  const x1 = x >> 32n;
  const reduce = (word: bigint): bigint => (word * BigInt(slots)) >> 32n;
  const out = [reduce(x0), BigInt(slots) + reduce(x1)];
  for (let row = 2; row < hashes; row++) {
    const [a, c, b] = [0, 1, 2].map((j) => sip13(seed, 1n, i64le(BigInt(3 * row + j))));
    const word = ((a! * x0 + c! * x1 + b!) & MASK_64) >> 32n;
    out.push(BigInt(row * slots) + reduce(word));
  }
  return out.slice(0, hashes).map(Number);
}

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
