use super::*;
use std::sync::Arc;

// pingora-limits' own behaviours, ported.

#[test]
fn incr_returns_the_new_estimate() {
    let est = Estimator::new(8, 8);
    assert_eq!(est.incr("a", 1), 1);
    assert_eq!(est.incr("b", 1), 1);
    assert_eq!(est.incr("a", 2), 3);
    assert_eq!(est.incr("b", 2), 3);
}

#[test]
fn decr_lowers_the_estimate() {
    let est = Estimator::new(8, 8);
    est.incr("a", 3);
    est.incr("b", 3);
    est.decr("a", 1);
    est.decr("b", 1);
    assert_eq!(est.get("a"), 2);
    assert_eq!(est.get("b"), 2);
}

#[test]
fn get_reads_without_changing() {
    let est = Estimator::new(8, 8);
    est.incr("a", 1);
    est.incr("a", 2);
    est.incr("b", 1);
    est.incr("b", 2);
    assert_eq!(est.get("a"), 3);
    assert_eq!(est.get("b"), 3);
    assert_eq!(est.get("a"), 3);
}

#[test]
fn reset_zeroes_everything() {
    let est = Estimator::new(8, 8);
    est.incr("a", 1);
    est.incr("b", 2);
    est.decr("b", 1);
    est.reset();
    assert_eq!(est.get("a"), 0);
    assert_eq!(est.get("b"), 0);
}

// keepcount's own behaviours.

#[test]
fn pingora_constructor_clamps_instead_of_panicking() {
    for (hashes, slots) in [(0, 0), (0, 8), (8, 0), (1000, 1), (4, usize::MAX)] {
        let est = Estimator::new(hashes, slots);
        assert!((1..=32).contains(&est.hashes()));
        assert!(est.slots() >= 1);
        if est.shape().counters() <= 1 << 20 {
            assert_eq!(est.incr("k", 1), 1);
        }
    }
}

#[test]
fn fallible_constructors_refuse_bad_shapes() {
    assert_eq!(Estimator::try_new(0, 8).unwrap_err(), ShapeError::Hashes(0));
    assert_eq!(
        Estimator::with_seed(8, 0, 1).unwrap_err(),
        ShapeError::ZeroSlots
    );
    assert!(Estimator::from_error_bounds(0.5, 0.0).is_err());
}

#[test]
fn same_seed_same_counters() {
    let a = Estimator::with_seed(4, 1000, 42).unwrap();
    let b = Estimator::with_seed(4, 1000, 42).unwrap();
    for key in 0u32..100 {
        assert_eq!(a.hash_key(key), b.hash_key(key));
    }
}

#[test]
fn prehashed_api_matches_keyed_api() {
    let est = Estimator::with_seed(4, 64, 5).unwrap();
    let key = est.hash_key("k");
    assert_eq!(est.incr_hash(key, 4), est.get("k"));
    est.decr("k", 1);
    assert_eq!(est.get_hash(key), 3);
}

#[test]
fn memory_is_counters_plus_the_struct() {
    let est = Estimator::with_seed(4, 8192, 0).unwrap();
    assert_eq!(est.memory_bytes(), 4 * 8192 * 8 + size_of::<Estimator>());
    #[cfg(target_pointer_width = "64")]
    assert_eq!(size_of::<Estimator>(), 888);
}

#[test]
fn broken_store_skips_rows_instead_of_panicking() {
    struct Shrinking;
    impl CounterStore for Shrinking {
        fn counters(&self) -> &[AtomicI64] {
            &[]
        }
    }
    let shape = Shape::new(2, 4).unwrap();
    assert!(Estimator::with_store(Shrinking, shape, 0).is_err());
    // Bypass the length check the way a store changing its length would.
    let est = Estimator {
        store: Shrinking,
        shape,
        state: SeededState::new(0),
        rows: Rows::new(shape, 0),
    };
    assert_eq!(est.incr("a", 1), isize::MAX);
    est.decr("a", 1);
    assert_eq!(est.get("a"), isize::MAX);
}

#[test]
fn debug_shows_shape_not_counters() {
    let est = Estimator::with_seed(2, 4, 3).unwrap();
    assert_eq!(format!("{est:?}"), "Estimator { hashes: 2, slots: 4, .. }");
}

#[test]
fn debug_hides_the_seed() {
    let seed = 0x5ec2_e75e_ed00_0001_u64;
    let est = Estimator::with_seed(2, 4, seed).unwrap();
    // `Rate`'s Debug embeds its sketch's.
    let rate = crate::rate::Rate::with_clock(
        std::time::Duration::from_secs(1),
        2,
        4,
        seed,
        crate::clock::ManualClock::new(),
    )
    .unwrap();
    let shown = format!("{est:?} {est:#?} {rate:?}");
    for form in [format!("{seed}"), format!("{seed:x}"), format!("{seed:X}")] {
        assert!(!shown.contains(&form), "{shown:?} shows the seed");
    }
    assert!(!shown.contains("seed"), "{shown:?}");
}

#[test]
fn concurrent_increments_of_one_key_are_exact() {
    const THREADS: usize = 4;
    const PER_THREAD: isize = 10_000;
    let est = Arc::new(Estimator::with_seed(4, 1024, 1).unwrap());
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let est = Arc::clone(&est);
            std::thread::spawn(move || {
                for _ in 0..PER_THREAD {
                    est.incr("hot", 1);
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
    assert_eq!(est.get("hot"), THREADS as isize * PER_THREAD);
}

// Refunds racing each other for the same counts: each thread adds 1, then takes back 2. A read
// followed by a `decr` of what it read took counts twice and left the counters below zero; the
// compare-and-swap refund takes each count once, so no estimate is ever negative and the total
// ends at exactly zero.
#[test]
fn concurrent_refunds_never_take_a_counter_below_zero() {
    const THREADS: usize = 4;
    const PER_THREAD: usize = 10_000;
    let est = Arc::new(Estimator::with_seed(4, 1024, 1).unwrap());
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let est = Arc::clone(&est);
            std::thread::spawn(move || {
                for _ in 0..PER_THREAD {
                    est.incr("hot", 1);
                    assert!(est.refund("hot", 2) >= 0);
                    assert!(est.get("hot") >= 0);
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
    assert_eq!(est.get("hot"), 0);
}
