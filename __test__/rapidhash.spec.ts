// rapidhash V3 in fallback/rapidhash.ts against __test__/rapidhash-vectors.json, generated with the
// Rust `rapidhash` crate 4.5.1 (`rapidhash_v3_seeded(bytes, &RapidSecrets::seed(seed))`): six seeds,
// their secrets, and the hash of one message of every length 0..300, so the ≤16-byte path, the
// 17..112-byte steps and the seven-lane loop (one, two and three 112-byte chunks) all run.
import test from 'ava';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { RapidHash, deriveSecrets } from '../fallback/rapidhash.js';

interface Vectors {
  seeds: { seed: string; premixed: string; secrets: string[]; hashes: string[] }[];
}

const vectors = JSON.parse(readFileSync(join(__dirname, 'rapidhash-vectors.json'), 'utf8')) as Vectors;

const halves = (v: bigint): [number, number] => [Number(v & 0xffffffffn), Number(v >> 32n)];
const u64 = (h: RapidHash): bigint => (BigInt(h.h2) << 32n) | BigInt(h.h1);

/** The vectors' message of length `n`: byte i is (i·31 + n·7 + 11) & 0xff. */
function message(n: number): Uint8Array {
  const m = new Uint8Array(n);
  for (let i = 0; i < n; i++) m[i] = (i * 31 + n * 7 + 11) & 0xff;
  return m;
}

const LONGEST = 300;
const messages = Array.from({ length: LONGEST + 1 }, (_, n) => message(n));

/** Hashes `m` under `seed` on `h`, absorbing it with `feed`. */
function hash(h: RapidHash, seed: bigint, m: Uint8Array, feed: (h: RapidHash, m: Uint8Array) => void): bigint {
  h.begin(...halves(seed));
  feed(h, m);
  h.finish();
  return u64(h);
}

const allAtOnce = (h: RapidHash, m: Uint8Array): void => h.bytes(m, 0, m.length);

const byteByByte = (h: RapidHash, m: Uint8Array): void => {
  for (const b of m) h.byte(b);
};

/**
 * Mixed chunks from a deterministic generator (`state` picks the chunking): `word`s at whatever
 * alignment the stream is at, single `byte`s, and `bytes` runs of 0..9 read from a copy of the
 * message placed at an odd offset in a larger array.
 */
const mixed =
  (state: number) =>
  (h: RapidHash, m: Uint8Array): void => {
    const offset = 3;
    const padded = new Uint8Array(m.length + 2 * offset).fill(0xa5);
    padded.set(m, offset);
    let i = 0;
    let s = state;
    while (i < m.length) {
      s = (Math.imul(s, 1103515245) + 12345) >>> 0;
      const pick = s >>> 29;
      if (pick < 3 && i + 4 <= m.length) {
        h.word(m[i]! | (m[i + 1]! << 8) | (m[i + 2]! << 16) | (m[i + 3]! << 24));
        i += 4;
      } else if (pick < 5) {
        h.byte(m[i++]!);
      } else {
        const end = Math.min(m.length, i + ((s >>> 16) % 10));
        h.bytes(padded, offset + i, offset + end);
        i = end;
      }
    }
  };

test('[fallback] deriveSecrets gives the premixed seed and the seven secrets of RapidSecrets::seed', (t) => {
  const out = new Uint32Array(16);
  for (const v of vectors.seeds) {
    deriveSecrets(...halves(BigInt(v.seed)), out);
    const got = Array.from({ length: 8 }, (_, k) =>
      ((BigInt(out[2 * k + 1]!) << 32n) | BigInt(out[2 * k]!)).toString(),
    );
    t.deepEqual(got, [v.premixed, ...v.secrets], `seed ${v.seed}`);
  }
});

const feeds: [string, (h: RapidHash, m: Uint8Array) => void][] = [
  ['all at once through bytes', allAtOnce],
  ['byte by byte', byteByByte],
  ['in mixed word, byte and bytes chunks at odd alignments', (h, m) => mixed(m.length + 1)(h, m)],
  ['in other mixed chunks', (h, m) => mixed(0x9e3779b9 ^ m.length)(h, m)],
];

for (const [how, feed] of feeds) {
  test(`[fallback] rapidhash V3 reproduces every vector with the message fed ${how}`, (t) => {
    t.is(vectors.seeds.length, 6);
    const h = new RapidHash();
    for (const v of vectors.seeds) {
      t.is(v.hashes.length, LONGEST + 1);
      for (let n = 0; n <= LONGEST; n++)
        t.is(hash(h, BigInt(v.seed), messages[n]!, feed).toString(), v.hashes[n]!, `seed ${v.seed} length ${n}`);
    }
  });
}

test('[fallback] each seed gives its own hashes, whichever seed the instance derived secrets for before', (t) => {
  const bySeed = new Map(vectors.seeds.map((v) => [v.seed, v]));
  const h = new RapidHash();
  // Back and forth, and between seeds that differ only in their high half (0, 2^32) or only in
  // their low half (0, 1), so a cache keyed on one half would give the other seed's hashes.
  const order = ['0', '4294967296', '0', '1', '0', '42', '16045690984503098046', '42', '18446744073709551615', '1'];
  for (const seed of order) {
    const v = bySeed.get(seed)!;
    for (let n = 0; n <= LONGEST; n++)
      t.is(hash(h, BigInt(seed), messages[n]!, allAtOnce).toString(), v.hashes[n]!, `seed ${seed} length ${n}`);
  }
});

test('[fallback] nothing of a longer message hashed before on the same instance reaches a shorter one', (t) => {
  const h = new RapidHash();
  const junk = new Uint8Array(LONGEST + 17).fill(0xff);
  for (const v of vectors.seeds) {
    const seed = BigInt(v.seed);
    for (let n = LONGEST; n >= 0; n--) {
      // Every byte of the buffer beyond n is 0xff, and a bytes() run ends on it mid-word first.
      hash(h, seed, junk, allAtOnce);
      hash(h, seed, junk.subarray(0, n + 3), mixed(n));
      t.is(hash(h, seed, messages[n]!, byteByByte).toString(), v.hashes[n]!, `seed ${v.seed} length ${n} after junk`);
      t.is(hash(h, seed, messages[n]!, mixed(n + 7)).toString(), v.hashes[n]!, `seed ${v.seed} length ${n} in chunks`);
    }
  }
});
