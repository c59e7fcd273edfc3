// The statistical promise behind docs/format.md §3, on each backend: every row is uniform, rows are
// independent, and the count-min (ε, δ) bound holds. Format version 1 failed the first two (53
// full-row collisions among 200,000 keys where 4·10⁻⁶ were expected; absent keys above εN 20× more
// often than δ). The seeds are fixed, so the specs are deterministic; each states the probability
// that it would fail for a random seed if the rows were exactly as the format promises.
// crates/limits/tests/independence.rs runs the same checks on the Rust crate.
import test from 'ava';
import { Estimator } from '../lib/index.js';
import { title } from './helpers.js';

const SEED = 0x5eed0001n;

/** 200,000 structured keys: every address of 10.0.0.0/16 and more, as strings. */
const addresses = (n: number): string[] =>
  Array.from({ length: n }, (_, i) => `10.${(i >>> 16) & 0xff}.${(i >>> 8) & 0xff}.${i & 0xff}`);

function fullRowCollisions(e: Estimator, keys: string[]): number {
  const groups = new Map<string, number>();
  for (const key of keys) {
    const id = e.counterIndexes(key).join(',');
    groups.set(id, (groups.get(id) ?? 0) + 1);
  }
  let pairs = 0;
  for (const g of groups.values()) pairs += (g * (g - 1)) / 2;
  return pairs;
}

test(title('counterIndexes names one counter per row, the ones incr touches'), (t) => {
  const e = new Estimator({ hashes: 5, slots: 1000, seed: SEED });
  const indexes = e.counterIndexes('1.2.3.4');
  t.is(indexes.length, 5);
  indexes.forEach((index, row) => t.true(index >= row * 1000 && index < (row + 1) * 1000));
  e.incr('1.2.3.4', 7);
  const view = new DataView(e.serialize().buffer);
  for (const index of indexes) t.is(view.getBigInt64(24 + 8 * index, true), 7n);
});

test(title('full-row collisions in 4 × 8192 are as rare as independent rows make them'), (t) => {
  // C(200,000, 2) / 8192^4 ≈ 4.4·10⁻⁶ colliding pairs expected, so one fails the spec:
  // false-failure probability ≤ 4.4·10⁻⁶ (Markov). Version 1 had 53.
  const e = new Estimator({ hashes: 4, slots: 8192, seed: SEED });
  t.is(fullRowCollisions(e, addresses(200_000)), 0);
});

test(title('full-row collisions in 3 × 1024 match independent rows'), (t) => {
  // C(200,000, 2) / 1024^3 ≈ 18.6 pairs expected, nearly Poisson: accepting 3..=45 leaves
  // P(X ≤ 2) ≈ 1.6·10⁻⁶ and P(X ≥ 46) ≈ 6.5·10⁻⁸. Rows that behave like two give ≈ 19,000.
  const e = new Estimator({ hashes: 3, slots: 1024, seed: SEED });
  const pairs = fullRowCollisions(e, addresses(200_000));
  t.true(pairs >= 3 && pairs <= 45, `${pairs} pairs`);
});

test(title('absent keys exceed εN no more often than independent rows allow'), (t) => {
  // ε = 0.1, δ = 10⁻⁴ → 10 rows × 28 slots. Five heavy keys of 1,000 (N = 5,000, εN = 500): an
  // absent key reads above εN only when every row puts it with a heavy key, p ≈ 1.6·10⁻⁸ with
  // independent rows. Over 10⁶ absent keys, accepting at most 2 leaves a false-failure probability
  // of P(Binomial(10⁶, p) ≥ 3) ≈ 6.9·10⁻⁷. The promise itself, at most δ·10⁶ = 100, is implied.
  const e = Estimator.fromErrorBounds({ epsilon: 0.1, delta: 1e-4, seed: SEED });
  t.deepEqual([e.hashes, e.slots], [10, 28]);
  for (let heavy = 1; heavy <= 5; heavy++) e.incr(-heavy, 1000);
  let over = 0;
  for (let key = 0; key < 1_000_000; key++) if (e.get(key) > 500) over++;
  t.true(over <= 2, `${over} absent keys above εN`);
});

test(title('every row spreads keys uniformly (chi-square)'), (t) => {
  // 200,000 keys into 4 × 8192 and 3 × 1000; per row, χ² against uniform with df = slots − 1 must
  // stay under Wilson–Hilferty's df·(1 − 2/(9df) + 5.2·√(2/(9df)))³, one-sided p ≈ 10⁻⁷ per row:
  // false-failure probability ≤ 7·10⁻⁷ over the 7 rows.
  const keys = addresses(200_000);
  for (const [hashes, slots] of [
    [4, 8192],
    [3, 1000],
  ] as const) {
    const e = new Estimator({ hashes, slots, seed: SEED });
    for (const key of keys) e.incr(key);
    const view = new DataView(e.serialize().buffer);
    const expected = keys.length / slots;
    const df = slots - 1;
    const threshold = df * (1 - 2 / (9 * df) + 5.2 * Math.sqrt(2 / (9 * df))) ** 3;
    for (let row = 0; row < hashes; row++) {
      let chi2 = 0;
      for (let c = 0; c < slots; c++) {
        const count = Number(view.getBigInt64(24 + 8 * (row * slots + c), true));
        chi2 += (count - expected) ** 2 / expected;
      }
      t.true(chi2 < threshold, `${hashes}×${slots} row ${row}: χ² = ${chi2.toFixed(0)} ≥ ${threshold.toFixed(0)}`);
    }
  }
});
