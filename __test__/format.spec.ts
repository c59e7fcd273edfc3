import test from 'ava';
import { crc32 as zlibCrc32 } from 'node:zlib';
import { Estimator } from '../lib/index.js';
import { column } from '../fallback/estimator.js';
import { crc32 } from '../fallback/crc32.js';
import { HalfSipHash } from '../fallback/halfsiphash.js';
import { title } from './helpers.js';

// Reference HalfSipHash-2-4, 64-bit output, key 00..07, message 00..n-1 (halfsiphash.c vectors).
const REFERENCE_2_4 = [
  '218d1f59b9b83cc8',
  'be552412f8387315',
  '064f39ef7c50eb57',
  'ce0f1a45f7060679',
  'd5e78a175be52ea1',
  'cb9d7c3f2f3db580',
  'ce3e91358aa2bc25',
];

function digestHex(h: HalfSipHash): string {
  const out = Buffer.alloc(8);
  out.writeUInt32LE(h.h1, 0);
  out.writeUInt32LE(h.h2, 4);
  return out.toString('hex');
}

test('[fallback] HalfSipHash-2-4 reproduces the reference vectors, fed whole or byte by byte', (t) => {
  const h = new HalfSipHash(2, 4);
  REFERENCE_2_4.forEach((expected, n) => {
    const message = Uint8Array.from({ length: n }, (_, i) => i);
    h.begin(0x03020100, 0x07060504);
    h.bytes(message, 0, n);
    h.finish();
    t.is(digestHex(h), expected, `n=${n} whole`);
    h.begin(0x03020100, 0x07060504);
    for (const b of message) h.byte(b);
    h.finish();
    t.is(digestHex(h), expected, `n=${n} bytewise`);
  });
});

test('[fallback] HalfSipHash absorbs mixed words, bytes and unaligned runs as one stream', (t) => {
  const stream = Uint8Array.from({ length: 300 }, (_, i) => (i * 37) & 0xff);
  const whole = new HalfSipHash(1, 3);
  whole.begin(123, 456);
  whole.bytes(stream, 0, stream.length);
  whole.finish();
  const mixed = new HalfSipHash(1, 3);
  mixed.begin(123, 456);
  mixed.byte(stream[0]!);
  mixed.word(stream[1]! | (stream[2]! << 8) | (stream[3]! << 16) | (stream[4]! << 24));
  mixed.bytes(stream, 5, 150);
  mixed.word(stream[150]! | (stream[151]! << 8) | (stream[152]! << 16) | (stream[153]! << 24));
  mixed.bytes(stream, 154, 300);
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

/** The counters a key must touch per docs/format.md §1–3, computed from the spec with bigint. */
function specIndices(stream: Uint8Array, seed: bigint, hashes: number, slots: number): number[] {
  const h = new HalfSipHash(1, 3);
  h.begin(Number(seed & 0xffffffffn), Number(seed >> 32n));
  h.bytes(stream, 0, stream.length);
  h.finish();
  const out: number[] = [];
  for (let i = 0; i < hashes; i++) {
    const g = (BigInt(h.h1) + BigInt(i) * BigInt(h.h2)) % 2n ** 32n;
    out.push(i * slots + Number((g * BigInt(slots)) >> 32n));
  }
  return out;
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
