//! Statistical tests of the promise behind docs/format.md §3: each row is uniform, rows are
//! independent, and so the count-min (ε, δ) bound holds. Format version 1 failed the first two
//! (53 full-row collisions where 4·10⁻⁶ were expected; 20 absent keys above εN at δ = 10⁻⁶).
//!
//! Every test runs on fixed seeds, so it is deterministic; each states the probability that it
//! would fail for a random seed if the rows were exactly as the format promises.

use keepcount_limits::Shape;
use keepcount_limits::estimator::Estimator;
use keepcount_limits::hash::KeyHash;
use std::collections::HashMap;

const SEEDS: [u64; 2] = [0x5eed_0001, 0xdead_beef_cafe_f00d];

/// Counter indexes of `key` in every row of `est`.
fn indexes(est: &Estimator, key: KeyHash) -> Vec<usize> {
    let mut out = Vec::with_capacity(est.hashes());
    est.rows().for_each_index(key, |i| out.push(i));
    out
}

/// Keys 0..n as i64, the way Node hands integer keys over: consecutive integers are the most
/// structured input a caller is likely to produce.
fn keys(n: i64) -> impl Iterator<Item = i64> {
    0..n
}

/// Pairs of keys that share every counter.
fn full_row_collisions(est: &Estimator, n: i64) -> u64 {
    let mut groups: HashMap<Vec<usize>, u64> = HashMap::new();
    for key in keys(n) {
        *groups.entry(indexes(est, est.hash_key(key))).or_default() += 1;
    }
    groups.values().map(|&g| g * (g - 1) / 2).sum()
}

#[test]
fn full_row_collisions_in_4_x_8192_are_as_rare_as_independent_rows_make_them() {
    // 200,000 keys: C(n,2) / 8192^4 ≈ 4.4·10⁻⁶ colliding pairs expected, so any collision fails
    // the test. False-failure probability per seed ≤ 4.4·10⁻⁶ (Markov). Version 1 had 53.
    for seed in SEEDS {
        let est = Estimator::with_seed(4, 8192, seed).unwrap();
        assert_eq!(full_row_collisions(&est, 200_000), 0, "seed {seed:#x}");
    }
}

#[test]
fn full_row_collisions_in_3_x_1024_match_independent_rows() {
    // 200,000 keys: C(n,2) / 1024^3 ≈ 18.6 colliding pairs expected (nearly Poisson). Accepting
    // 3..=45 leaves P(X ≤ 2) ≈ 1.6·10⁻⁶ and P(X ≥ 46) ≈ 6.5·10⁻⁸ per seed. Rows that behave like
    // two (version 1) give about C(n,2) / 1024² ≈ 19,000.
    for seed in SEEDS {
        let est = Estimator::with_seed(3, 1024, seed).unwrap();
        let pairs = full_row_collisions(&est, 200_000);
        assert!((3..=45).contains(&pairs), "seed {seed:#x}: {pairs} pairs");
    }
}

#[test]
fn absent_keys_exceed_epsilon_n_no_more_often_than_independent_rows_allow() {
    // ε = 0.1, δ = 10⁻⁴ → 10 rows × 28 slots. Five heavy keys of 1,000 each (N = 5,000, εN = 500):
    // an absent key reads above εN exactly when every row puts it with a heavy key, probability
    // p = (1 − (27/28)^5)^10 ≈ 1.6·10⁻⁸ with independent rows (far below δ). Over 10⁶ absent keys
    // about 0.016 are expected; accepting at most 2 leaves a false-failure probability of
    // P(Binomial(10⁶, p) ≥ 3) ≈ 6.9·10⁻⁷ per seed. The promise itself (≤ δ·10⁶ = 100) is checked too.
    let shape = Shape::from_error_bounds(0.1, 1e-4).unwrap();
    assert_eq!((shape.hashes(), shape.slots()), (10, 28));
    for seed in SEEDS {
        let est = Estimator::with_shape(shape, seed);
        for heavy in 0..5i64 {
            est.incr(-1 - heavy, 1000);
        }
        let over = keys(1_000_000).filter(|&k| est.get(k) > 500).count();
        assert!(over <= 2, "seed {seed:#x}: {over} absent keys above εN");
        assert!(over <= 100, "the (ε, δ) promise");
    }
}

#[test]
fn every_row_spreads_keys_uniformly() {
    // Chi-square of each row's column counts against uniform, 200,000 keys. With df = slots − 1,
    // Wilson–Hilferty puts the threshold df·(1 − 2/(9df) + 5.2·√(2/(9df)))³ at a one-sided
    // p ≈ 10⁻⁷ per row, so a false failure has probability ≤ 7·10⁻⁷ per seed over the 7 rows.
    const N: i64 = 200_000;
    for seed in SEEDS {
        for (hashes, slots) in [(4usize, 8192usize), (3, 1000)] {
            let est = Estimator::with_seed(hashes, slots, seed).unwrap();
            let mut counts = vec![0u64; hashes * slots];
            for key in keys(N) {
                for i in indexes(&est, est.hash_key(key)) {
                    counts[i] += 1;
                }
            }
            let expected = N as f64 / slots as f64;
            let df = (slots - 1) as f64;
            let threshold = df * (1.0 - 2.0 / (9.0 * df) + 5.2 * (2.0 / (9.0 * df)).sqrt()).powi(3);
            for (row, cells) in counts.chunks(slots).enumerate() {
                let chi2: f64 = cells
                    .iter()
                    .map(|&c| (c as f64 - expected).powi(2) / expected)
                    .sum();
                assert!(
                    chi2 < threshold,
                    "seed {seed:#x}, {hashes}×{slots} row {row}: χ² = {chi2:.0} ≥ {threshold:.0}"
                );
            }
        }
    }
}
