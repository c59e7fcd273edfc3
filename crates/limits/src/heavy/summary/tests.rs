//! `Summary`'s unit tests: entry, bounds, order, key-byte totals, resets and forgetting, races.

use super::*;
use crate::shape::Shape;
use std::sync::Arc;

fn summary(threshold: u64, capacity: usize) -> Summary<u64> {
    Summary::new(Settings::new(Shape::new(4, 1024).unwrap(), 3, threshold, capacity).unwrap())
}

#[test]
fn tracked_keys_are_exact_from_entry() {
    let s = summary(5, 8);
    for i in 1..=4 {
        assert_eq!(s.incr(&7, 1).standing, Standing::BelowThreshold, "{i}");
    }
    let entered = s.incr(&7, 1);
    assert_eq!(entered.standing, Standing::Tracked);
    assert_eq!((entered.lower, entered.upper), (1, 5));
    for _ in 0..95 {
        s.incr(&7, 1);
    }
    let count = s.count(&7);
    assert_eq!((count.lower, count.upper), (96, 100));
    assert!(count.slack() < 5);
}

#[test]
fn one_large_increment_enters_with_what_came_before_as_slack() {
    let s = summary(10, 8);
    s.incr(&1, 3);
    let count = s.incr(&1, 50);
    assert_eq!(
        (count.lower, count.upper, count.standing),
        (50, 53, Standing::Tracked)
    );
}

#[test]
fn a_full_table_refuses_entry_and_says_so() {
    let s = summary(2, 1);
    s.incr(&1, 2);
    let refused = s.incr(&2, 5);
    assert_eq!(refused.standing, Standing::Overflow);
    assert_eq!((refused.lower, refused.upper), (0, 5));
    let stats = s.stats();
    assert_eq!(
        (stats.tracked, stats.overflow_events, stats.overflow_weight),
        (1, 1, 5)
    );
    assert_eq!(stats.total, 7);
    assert_eq!(s.count(&2).standing, Standing::Overflow);
}

/// One counter for every key, so each increment raises every key's estimate.
fn one_counter(threshold: u64, capacity: usize) -> Summary<u64> {
    Summary::new(Settings::new(Shape::new(1, 1).unwrap(), 3, threshold, capacity).unwrap())
}

#[test]
fn a_key_others_raised_reads_below_the_threshold_while_there_is_room() {
    let s = one_counter(5, 2);
    for key in 1..=4 {
        s.incr(&key, 1);
    }
    assert_eq!(s.incr(&5, 1).standing, Standing::Tracked);
    for _ in 0..20 {
        s.incr(&5, 1);
    }
    // Never counted, estimate 25: its count is below the threshold all the same.
    let unseen = s.count(&99);
    assert_eq!(
        (unseen.lower, unseen.upper, unseen.standing),
        (0, 4, Standing::BelowThreshold)
    );
    assert_eq!(s.decr(&1, 1).upper, 4);
    // Full: a key that crosses now may have, so only the estimate bounds it.
    assert_eq!(s.incr(&6, 1).standing, Standing::Tracked);
    let unseen = s.count(&99);
    assert_eq!((unseen.upper, unseen.standing), (26, Standing::Overflow));
    // Merged: counts came in that never met the entry rule here.
    let merged = one_counter(5, 8);
    merged.incr(&5, 6);
    let other = one_counter(5, 8);
    for key in 10..14 {
        other.incr(&key, 1);
    }
    merged.merge(&other).unwrap();
    assert_eq!(
        (merged.count(&10).upper, merged.count(&10).standing),
        (10, Standing::Overflow)
    );
}

#[test]
fn top_orders_by_upper_bound() {
    let s = summary(1, 8);
    for (key, times) in [(1u64, 3), (2, 9), (3, 5)] {
        for _ in 0..times {
            s.incr(&key, 1);
        }
    }
    let keys: Vec<u64> = s.top(2).into_iter().map(|t| t.key).collect();
    assert_eq!(keys, [2, 3]);
    assert_eq!(s.top(10).len(), 3);
}

#[test]
fn key_bytes_are_the_tracked_keys_bytes_through_merges_decoding_and_resets() {
    let settings = Settings::new(Shape::new(4, 1024).unwrap(), 3, 2, 2).unwrap();
    let (a, b) = (Summary::<Vec<u8>>::new(settings), Summary::new(settings));
    a.incr(&[1u8; 30][..], 1); // below the threshold: not in the table
    assert_eq!(a.key_bytes(), 0);
    a.incr(&[1u8; 30][..], 1);
    a.incr(&[2u8; 20][..], 2);
    a.incr(&[3u8; 99][..], 2); // the table is full: overflow, not tracked
    assert_eq!(a.key_bytes(), 50);
    b.incr(&[4u8; 400][..], 9);
    // Capacity 2: the merge keeps key 4 (upper bound 9) and key 2 (upper bound 2, as key 1,
    // but lower bound 2), and drops key 1: the total is what stays.
    a.merge(&b).unwrap();
    let kept: usize = a.top(2).iter().map(|talker| talker.key.len()).sum();
    assert_eq!((a.stats().merge_dropped, kept), (1, 420));
    assert_eq!(a.key_bytes(), kept);
    let decoded = Summary::<Vec<u8>>::from_bytes(&a.to_bytes()).unwrap();
    assert_eq!(decoded.key_bytes(), kept);
    assert!(a.memory_bytes() >= a.table.allocation_bytes() + kept);
    a.forget(a.baseline(), || true);
    assert_eq!(a.key_bytes(), 0);
    decoded.reset();
    assert_eq!(decoded.key_bytes(), 0);
}

#[test]
fn reset_empties_everything() {
    let s = summary(1, 1);
    s.incr(&1, 3);
    s.incr(&2, 3);
    s.reset();
    assert_eq!(s.count(&1).upper, 0);
    assert_eq!(s.stats().tracked, 0);
    assert_eq!(s.stats().overflow_events, 0);
}

#[test]
fn forgetting_an_unraced_baseline_is_a_reset() {
    let (s, fresh) = (summary(2, 1), summary(2, 1));
    s.incr(&1, 3);
    s.incr(&2, 3); // overflows: the table holds one key
    s.merge(&summary(2, 1)).unwrap();
    s.forget(s.baseline(), || true);
    assert_eq!(s.stats(), fresh.stats());
    assert!(!s.merged());
    assert_eq!(
        s.sketch()
            .counters()
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .max(),
        Some(0)
    );
}

#[test]
fn forgetting_keeps_what_raced_and_lifts_the_slack_cap() {
    let s = summary(3, 8);
    s.incr(&1, 5); // tracked, stale
    let baseline = s.baseline();
    // Racing with the rotation: the stale estimate lets key 1 count exactly in the table.
    for _ in 0..4 {
        s.incr(&1, 1);
    }
    s.forget(baseline, || true);
    assert_eq!(s.stats().total, 4);
    assert_eq!(s.stats().tracked, 0);
    assert!(s.merged());
    // Key 1 counted 4 since the claim; entering again on its next increment, its slack must
    // cover the 4 the table dropped, more than threshold - 1.
    let count = s.incr(&1, 1);
    assert_eq!(count.standing, Standing::Tracked);
    assert!(count.lower <= 5 && 5 <= count.upper, "{count:?}");
}

#[test]
fn forgetting_stops_when_another_rotation_began() {
    let s = summary(1, 8);
    s.incr(&1, 2);
    s.forget(s.baseline(), || false);
    assert_eq!((s.stats().total, s.stats().tracked), (2, 1));
}

#[test]
fn wrapped_sketch_counters_read_as_the_largest_count() {
    assert_eq!(as_count(-1), u64::MAX);
    assert_eq!(as_count(7), 7);
}

#[test]
fn borrowed_keys_look_up_owned_ones() {
    let s: Summary<Vec<u8>> =
        Summary::new(Settings::new(Shape::new(2, 64).unwrap(), 1, 1, 4).unwrap());
    s.incr(&b"abc"[..], 2);
    assert_eq!(s.count(&b"abc"[..]).lower, 2);
    assert_eq!(s.top(1)[0].key, b"abc".to_vec());
}

#[test]
fn concurrent_increments_of_tracked_keys_are_exact() {
    const THREADS: u64 = 4;
    const PER_THREAD: u64 = 5_000;
    let s = Arc::new(summary(1, 16));
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let s = Arc::clone(&s);
            std::thread::spawn(move || {
                for _ in 0..PER_THREAD {
                    s.incr(&1, 1);
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
    // Threshold 1: the first increment enters, with no slack, so every one is exact.
    let count = s.count(&1);
    assert_eq!(count.lower, THREADS * PER_THREAD);
    assert!(count.upper >= THREADS * PER_THREAD);
}

#[test]
fn the_total_is_capped_where_counters_saturated_by_merges_sum_past_u64() {
    // One row of 3 counters, a threshold nothing reaches: self-merges double every counter until
    // each saturates at i64::MAX, 2.8 × 10^19 in all. An i64 sum wrapped to 2^63 − 3.
    let s = Summary::<u64>::new(Settings::new(Shape::new(1, 3).unwrap(), 5, u64::MAX, 4).unwrap());
    for key in 0..64 {
        s.incr(&key, u32::MAX);
    }
    for _ in 0..40 {
        s.merge(&s).unwrap();
    }
    assert_eq!(s.stats().total, u64::MAX);
}
