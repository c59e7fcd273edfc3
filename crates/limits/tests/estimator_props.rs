//! Properties of the estimator over arbitrary increment sequences.

use keepcount_limits::estimator::Estimator;
use proptest::prelude::*;
use std::collections::HashMap;

/// (key, value) increments over a small key space, so that counters collide often.
fn increments(max_value: isize) -> impl Strategy<Value = Vec<(u8, isize)>> {
    prop::collection::vec((any::<u8>(), 0..=max_value), 0..200)
}

fn sketch(seed: u64) -> Estimator {
    Estimator::with_seed(2, 8, seed).unwrap()
}

proptest! {
    #[test]
    fn never_under_counts_non_negative_increments(ops in increments(1000), seed in any::<u64>()) {
        let est = sketch(seed);
        let mut exact: HashMap<u8, isize> = HashMap::new();
        for &(key, value) in &ops {
            let estimate = est.incr(key, value);
            let count = exact.entry(key).or_default();
            *count += value;
            prop_assert!(estimate >= *count);
        }
        for (key, count) in exact {
            prop_assert!(est.get(key) >= count);
        }
    }

    /// Within the i64 range only: counters saturate, so once one overflows the order of the
    /// additions matters. 200 increments of at most 2^53 (the Node API's range) stay far below.
    #[test]
    fn merge_equals_concatenation(
        first in increments(1 << 53),
        second in increments(1 << 53),
        seed in any::<u64>(),
    ) {
        let (a, b, both) = (sketch(seed), sketch(seed), sketch(seed));
        for &(key, value) in &first {
            a.incr(key, value);
            both.incr(key, value);
        }
        for &(key, value) in &second {
            b.incr(key, -value);
            both.incr(key, -value);
        }
        a.merge(&b).unwrap();
        prop_assert_eq!(a.to_bytes(), both.to_bytes());
    }

    #[test]
    fn bytes_round_trip(ops in prop::collection::vec((any::<u8>(), any::<isize>()), 0..100), seed in any::<u64>()) {
        let est = sketch(seed);
        for &(key, value) in &ops {
            est.incr(key, value);
        }
        let bytes = est.to_bytes();
        let back = Estimator::from_bytes(&bytes).unwrap();
        prop_assert_eq!(back.seed(), seed);
        prop_assert_eq!(back.to_bytes(), bytes);
        for key in 0..=u8::MAX {
            prop_assert_eq!(back.get(key), est.get(key));
        }
    }

    #[test]
    fn decoding_arbitrary_bytes_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        let _ = Estimator::from_bytes(&bytes);
    }

    #[test]
    fn decoding_a_damaged_sketch_never_panics(at in 0usize..156, byte in any::<u8>()) {
        let est = sketch(42);
        est.incr("a", 3);
        let mut bytes = est.to_bytes();
        let original = bytes[at];
        bytes[at] = byte;
        let result = Estimator::from_bytes(&bytes);
        prop_assert_eq!(result.is_ok(), byte == original);
    }
}
