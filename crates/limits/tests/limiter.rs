//! Behaviour of the per-key token-bucket limiter: exact sequences on a manual clock, live
//! updates, growth, and threads racing on shared buckets.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use keepcount_limits::clock::{Clock, ManualClock, MonotonicClock};
use keepcount_limits::limiter::{Decision, Limit, Limiter, LimiterError, Quota};

const MS: Duration = Duration::from_millis(1);

fn requests(rate: u64, burst: u64) -> Quota {
    Quota::new(Some(Limit::per_second(rate, burst)), None)
}

fn units(rate: u64, burst: u64) -> Quota {
    Quota::new(None, Some(Limit::per_second(rate, burst)))
}

fn refused(after: Duration) -> Decision {
    Decision::Refused { retry_after: after }
}

fn manual<K: std::hash::Hash + Eq>(
    best_effort: Quota,
) -> (Arc<ManualClock>, Limiter<K, Arc<ManualClock>>) {
    let clock = Arc::new(ManualClock::new());
    (clock.clone(), Limiter::with_clock(best_effort, clock))
}

/// Counts admitted checks of `key` until the first refusal.
fn drain(limiter: &Limiter<&'static str, Arc<ManualClock>>, key: &str) -> u64 {
    let mut allowed = 0;
    while limiter.check_one(key).is_allowed() {
        allowed += 1;
    }
    allowed
}

#[test]
fn bursts_then_refills_to_the_nanosecond() {
    let (clock, limiter) = manual(Quota::DENY_ALL);
    limiter.replace_keys([("k", requests(1, 3))]).unwrap();
    for _ in 0..3 {
        assert_eq!(limiter.check_one("k"), Decision::Allowed);
    }
    assert_eq!(limiter.check_one("k"), refused(Duration::from_secs(1)));
    clock.advance(500 * MS);
    assert_eq!(limiter.check_one("k"), refused(500 * MS));
    clock.advance(Duration::from_nanos(499_999_999));
    assert_eq!(limiter.check_one("k"), refused(Duration::from_nanos(1)));
    clock.advance(Duration::from_nanos(1));
    assert_eq!(limiter.check_one("k"), Decision::Allowed);
    assert_eq!(limiter.check_one("k"), refused(Duration::from_secs(1)));
    // A long idle refills to the burst, no further.
    clock.advance(Duration::from_secs(3600));
    assert_eq!(drain(&limiter, "k"), 3);
}

#[test]
fn limits_cost_units() {
    let (clock, limiter) = manual::<&str>(units(1000, 1500));
    assert_eq!(limiter.check("x", 1000), Decision::Allowed);
    // 500 held, 600 needed: 100 units at 1000/s.
    assert_eq!(limiter.check("x", 600), refused(100 * MS));
    assert_eq!(limiter.check("x", 500), Decision::Allowed);
    clock.advance(250 * MS);
    assert_eq!(limiter.check("x", 250), Decision::Allowed);
    assert_eq!(limiter.check("x", 1), refused(MS));
}

#[test]
fn the_longer_wait_of_two_dimensions_wins() {
    let both = Quota::new(
        Some(Limit::per_second(2, 2)),
        Some(Limit::per_second(100, 100)),
    );
    let (clock, limiter) = manual::<&str>(both);
    assert_eq!(limiter.check("x", 100), Decision::Allowed);
    assert_eq!(limiter.check("x", 50), refused(500 * MS));
    clock.advance(500 * MS);
    assert_eq!(limiter.check("x", 50), Decision::Allowed);
    assert_eq!(limiter.check("x", 0), Decision::Allowed);
    // Requests are now empty (0.5 s per request), units hold 0 (10 ms per unit).
    assert_eq!(limiter.check("x", 0), refused(500 * MS));
    assert_eq!(limiter.check("x", 60), refused(600 * MS));
}

#[test]
fn cost_beyond_a_burst_is_never() {
    let (_, limiter) = manual::<&str>(units(1000, 10));
    assert_eq!(limiter.check("x", 11), Decision::Never);
    assert_eq!(limiter.check("x", 10), Decision::Allowed);
    limiter.set_overall(Some(units(1000, 5)));
    assert_eq!(limiter.check("x", 6), Decision::Never);
}

#[test]
fn rate_zero_burst_zero_refuses_everything() {
    let (clock, limiter) = manual(requests(10, 10));
    limiter.replace_keys([("blocked", requests(0, 0))]).unwrap();
    for cost in [0, 1, 1000] {
        assert_eq!(limiter.check("blocked", cost), Decision::Never);
    }
    clock.advance(Duration::from_secs(1_000_000));
    assert_eq!(limiter.check_one("blocked"), Decision::Never);
    assert_eq!(
        Limiter::<u8>::new(Quota::DENY_ALL).check_one(&0),
        Decision::Never
    );
}

#[test]
fn rate_zero_allows_the_burst_once() {
    let (clock, limiter) = manual(Quota::DENY_ALL);
    limiter.replace_keys([("k", requests(0, 2))]).unwrap();
    assert_eq!(drain(&limiter, "k"), 2);
    clock.advance(Duration::from_secs(1_000_000));
    assert_eq!(limiter.check_one("k"), Decision::Never);
}

#[test]
fn unknown_keys_share_one_best_effort_bucket() {
    let (clock, limiter) = manual(requests(1, 2));
    limiter.replace_keys([("own", requests(1, 1))]).unwrap();
    assert!(limiter.check_one("a").is_allowed());
    assert!(limiter.check_one("b").is_allowed());
    assert_eq!(limiter.check_one("c"), refused(Duration::from_secs(1)));
    assert_eq!(limiter.check_one("a"), refused(Duration::from_secs(1)));
    assert!(limiter.check_one("own").is_allowed());
    clock.advance(Duration::from_secs(1));
    assert!(limiter.check_one("z").is_allowed());
    assert!(!limiter.check_one("a").is_allowed());
}

#[test]
fn overall_quota_spans_every_key_and_refusal_takes_nothing() {
    let (clock, limiter) = manual(requests(1, 5));
    limiter.replace_keys([("a", requests(1, 5))]).unwrap();
    limiter.set_overall(Some(requests(1, 3)));
    assert!(limiter.check_one("a").is_allowed());
    assert!(limiter.check_one("a").is_allowed());
    assert!(limiter.check_one("unknown").is_allowed());
    // The key's own bucket still has 3; the overall one is empty.
    assert_eq!(limiter.check_one("a"), refused(Duration::from_secs(1)));
    assert_eq!(
        limiter.check_one("unknown"),
        refused(Duration::from_secs(1))
    );
    // Refusals took nothing from "a": lifting the overall quota leaves it 3.
    limiter.set_overall(None);
    assert_eq!(limiter.overall(), None);
    assert_eq!(drain(&limiter, "a"), 3);
    // Setting it again starts full.
    limiter.set_overall(Some(requests(1, 3)));
    clock.advance(Duration::from_secs(10));
    assert_eq!(drain(&limiter, "unknown"), 3);
}

#[test]
fn a_smaller_burst_caps_held_tokens() {
    let (clock, limiter) = manual(Quota::DENY_ALL);
    limiter.replace_keys([("k", requests(1, 10))]).unwrap();
    assert_eq!(limiter.check("k", 1), Decision::Allowed);
    limiter.set_quota("k", requests(1, 3)).unwrap();
    assert_eq!(limiter.quota("k"), Some(requests(1, 3)));
    assert_eq!(drain(&limiter, "k"), 3);
    clock.advance(Duration::from_secs(100));
    assert_eq!(drain(&limiter, "k"), 3);
}

#[test]
fn a_rate_change_applies_from_now_on() {
    let (clock, limiter) = manual(Quota::DENY_ALL);
    limiter.replace_keys([("k", requests(1, 1))]).unwrap();
    assert!(limiter.check_one("k").is_allowed());
    clock.advance(500 * MS);
    // Half a token accrued at the old rate stays; the other half comes at 10/s: 50 ms.
    limiter.set_quota("k", requests(10, 1)).unwrap();
    assert_eq!(limiter.check_one("k"), refused(50 * MS));
    clock.advance(50 * MS);
    assert!(limiter.check_one("k").is_allowed());
}

#[test]
fn best_effort_quota_changes_in_place() {
    let (_, limiter) = manual::<&str>(requests(1, 5));
    assert!(limiter.check_one("x").is_allowed());
    limiter.set_best_effort(requests(1, 2));
    assert_eq!(limiter.best_effort(), requests(1, 2));
    assert_eq!(drain(&limiter, "y"), 2);
}

#[test]
fn replacing_the_table_keeps_stayers_fills_newcomers_and_drops_leavers() {
    let (_, limiter) = manual(requests(0, 1));
    let five = requests(0, 5);
    limiter
        .replace_keys([("stay", five), ("leave", five)])
        .unwrap();
    assert_eq!(limiter.check("stay", 1), Decision::Allowed);
    assert_eq!(drain(&limiter, "leave"), 5);
    limiter
        .replace_keys([("stay", five), ("new", five)])
        .unwrap();
    assert_eq!(limiter.len(), 2);
    // Stayer: 4 left. Newcomer: full, not the leaver's empty bucket. Leaver: best effort (1).
    assert_eq!(drain(&limiter, "stay"), 4);
    assert_eq!(drain(&limiter, "new"), 5);
    assert_eq!(drain(&limiter, "leave"), 1);
    // Re-added, the leaver starts full: its old bucket is gone.
    limiter.replace_keys([("leave", five)]).unwrap();
    assert_eq!(drain(&limiter, "leave"), 5);
}

#[test]
fn a_stayer_with_a_new_quota_is_capped() {
    let (_, limiter) = manual(Quota::DENY_ALL);
    limiter.replace_keys([("k", requests(0, 5))]).unwrap();
    assert!(limiter.check_one("k").is_allowed());
    limiter.replace_keys([("k", requests(0, 2))]).unwrap();
    assert_eq!(drain(&limiter, "k"), 2);
}

#[test]
fn a_duplicate_key_rejects_the_whole_table() {
    let (_, limiter) = manual(Quota::DENY_ALL);
    limiter.replace_keys([("k", requests(0, 5))]).unwrap();
    assert!(limiter.check_one("k").is_allowed());
    let err = limiter
        .replace_keys([
            ("k", requests(0, 1)),
            ("j", requests(0, 1)),
            ("j", requests(0, 2)),
        ])
        .unwrap_err();
    assert_eq!(err, LimiterError::DuplicateKey);
    assert_eq!(limiter.len(), 1);
    assert_eq!(limiter.quota("k"), Some(requests(0, 5)));
    assert_eq!(drain(&limiter, "k"), 4);
}

#[test]
fn updates_to_unknown_keys_are_errors() {
    let (_, limiter) = manual::<&str>(Quota::DENY_ALL);
    assert_eq!(
        limiter.set_quota("x", Quota::UNLIMITED),
        Err(LimiterError::UnknownKey)
    );
    assert_eq!(limiter.remove("x"), Err(LimiterError::UnknownKey));
    assert_eq!(limiter.quota("x"), None);
    assert_eq!(
        LimiterError::UnknownKey.to_string(),
        "the key is not in the limiter's table"
    );
}

#[test]
fn insert_and_remove_one_key() {
    let (_, limiter) = manual(Quota::DENY_ALL);
    limiter.insert("k", requests(0, 3)).unwrap();
    assert_eq!(limiter.check_one("k"), Decision::Allowed);
    // Inserting a present key changes its quota in place.
    limiter.insert("k", requests(0, 1)).unwrap();
    assert_eq!(drain(&limiter, "k"), 1);
    limiter.remove("k").unwrap();
    assert!(limiter.is_empty());
    assert_eq!(limiter.check_one("k"), Decision::Never);
}

#[test]
fn grows_to_a_hundred_thousand_keys() {
    const KEYS: u64 = 100_000;
    let clock = Arc::new(ManualClock::new());
    let limiter = Limiter::with_clock(Quota::DENY_ALL, clock);
    limiter
        .replace_keys((0..KEYS).map(|k| (k, requests(0, 1))))
        .unwrap();
    assert_eq!(limiter.len(), KEYS as usize);
    for key in 0..KEYS {
        assert_eq!(limiter.check_one(&key), Decision::Allowed);
    }
    assert!(!limiter.check_one(&0).is_allowed());
    // Growing again: the first half stays (empty), the second half is new (full).
    limiter
        .replace_keys((KEYS / 2..KEYS * 3 / 2).map(|k| (k, requests(0, 1))))
        .unwrap();
    assert_eq!(limiter.check_one(&(KEYS / 2)), Decision::Never);
    assert_eq!(limiter.check_one(&KEYS), Decision::Allowed);
    // One at a time too (each insert copies the table, so only a few).
    for key in KEYS * 3 / 2..KEYS * 3 / 2 + 20 {
        limiter.insert(key, requests(0, 1)).unwrap();
    }
    assert_eq!(limiter.len(), (KEYS + 20) as usize);
    assert_eq!(limiter.check_one(&(KEYS * 3 / 2)), Decision::Allowed);
}

/// Threads race on one key; between rounds the clock advances. Each thread checks until it is
/// refused, so every round drains the bucket and the total admitted must be exactly
/// `burst + rate × elapsed`: never more (exactness), never less (no lost refill).
#[test]
fn threads_racing_on_one_key_get_exactly_the_quota() {
    const THREADS: usize = 4;
    const ROUNDS: u64 = 200;
    const BURST: u64 = 50;
    const RATE: u64 = 1000;
    let (clock, limiter) = manual(Quota::DENY_ALL);
    limiter
        .replace_keys([("hot", requests(RATE, BURST))])
        .unwrap();
    let limiter = Arc::new(limiter);
    let start = Arc::new(Barrier::new(THREADS + 1));
    let done = Arc::new(Barrier::new(THREADS + 1));
    let allowed = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..THREADS)
        .map(|_| {
            let (limiter, start, done, allowed) = (
                limiter.clone(),
                start.clone(),
                done.clone(),
                allowed.clone(),
            );
            thread::spawn(move || {
                for _ in 0..=ROUNDS {
                    start.wait();
                    let mut mine = 0;
                    while limiter.check_one("hot").is_allowed() {
                        mine += 1;
                    }
                    allowed.fetch_add(mine, Ordering::Relaxed);
                    done.wait();
                }
            })
        })
        .collect();
    for round in 0..=ROUNDS {
        if round > 0 {
            clock.advance(7 * MS);
        }
        start.wait();
        done.wait();
    }
    for worker in workers {
        worker.join().unwrap();
    }
    // 7 ms at 1000/s is 7 requests per round.
    assert_eq!(allowed.load(Ordering::Relaxed), BURST + ROUNDS * 7);
}

/// On the real clock, threads hammer one key for a while: the admitted count never exceeds
/// `burst + rate × elapsed`.
#[test]
fn threads_on_the_real_clock_never_exceed_the_quota() {
    const THREADS: usize = 4;
    const BURST: u64 = 20;
    const RATE: u64 = 10_000;
    let clock = Arc::new(MonotonicClock::new());
    let begin = clock.now_nanos();
    let limiter = Arc::new(Limiter::with_clock(Quota::DENY_ALL, clock.clone()));
    limiter
        .replace_keys([(1u32, requests(RATE, BURST))])
        .unwrap();
    let allowed = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..THREADS)
        .map(|_| {
            let (limiter, allowed) = (limiter.clone(), allowed.clone());
            thread::spawn(move || {
                for _ in 0..50_000 {
                    if limiter.check_one(&1).is_allowed() {
                        allowed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    let elapsed = u128::from(clock.now_nanos() - begin);
    let bound = u128::from(BURST) + u128::from(RATE) * elapsed / 1_000_000_000;
    let allowed = u128::from(allowed.load(Ordering::Relaxed));
    assert!(allowed <= bound, "{allowed} admitted, bound {bound}");
    assert!(allowed >= u128::from(BURST));
}

/// Threads on distinct keys share an overall quota: together they get exactly its burst.
#[test]
fn threads_on_many_keys_share_the_overall_quota_exactly() {
    const THREADS: u64 = 4;
    let (_, limiter) = manual(requests(0, 1_000));
    limiter
        .replace_keys((0..THREADS).map(|k| (k, requests(0, 1_000))))
        .unwrap();
    limiter.set_overall(Some(requests(0, 2_500)));
    let limiter = Arc::new(limiter);
    let workers: Vec<_> = (0..THREADS)
        .map(|key| {
            let limiter = limiter.clone();
            // Half the threads use unknown keys, which share the best-effort bucket.
            let key = if key % 2 == 0 { key } else { key + 100 };
            thread::spawn(move || {
                (0..2_000)
                    .filter(|_| limiter.check_one(&key).is_allowed())
                    .count()
            })
        })
        .collect();
    let total: usize = workers.into_iter().map(|w| w.join().unwrap()).sum();
    assert_eq!(total, 2_500);
}

#[test]
fn a_reused_slot_starts_full_and_keeps_nothing_of_its_last_key() {
    let (_, limiter) = manual(Quota::DENY_ALL);
    limiter.insert("old", requests(0, 2)).unwrap();
    assert_eq!(drain(&limiter, "old"), 2);
    limiter.remove("old").unwrap();
    // "new" takes the slot "old" left, with a burst of 5, full.
    limiter.insert("new", requests(0, 5)).unwrap();
    assert_eq!(drain(&limiter, "new"), 5);
    assert_eq!(drain(&limiter, "old"), 0);
    assert_eq!(limiter.quota("old"), None);
    // And through a whole-table replacement.
    limiter.replace_keys([("third", requests(0, 4))]).unwrap();
    assert_eq!(drain(&limiter, "third"), 4);
    assert_eq!(drain(&limiter, "new"), 0);
    assert_eq!(limiter.len(), 1);
}

#[test]
fn a_failed_replacement_leaves_keys_and_slots_as_they_were() {
    let (_, limiter) = manual(Quota::DENY_ALL);
    limiter.replace_keys([("a", requests(0, 3))]).unwrap();
    assert_eq!(limiter.check_one("a"), Decision::Allowed);
    let err = limiter.replace_keys([
        ("b", requests(0, 1)),
        ("c", requests(0, 1)),
        ("b", requests(0, 1)),
    ]);
    assert_eq!(err, Err(LimiterError::DuplicateKey));
    assert_eq!(drain(&limiter, "a"), 2);
    assert_eq!(drain(&limiter, "b"), 0);
    // The slots tried for "b" and "c" are reused cleanly.
    limiter
        .replace_keys([("c", requests(0, 2)), ("b", requests(0, 1))])
        .unwrap();
    assert_eq!(drain(&limiter, "c"), 2);
    assert_eq!(drain(&limiter, "b"), 1);
}

#[test]
fn at_methods_take_the_reading_from_the_caller() {
    // The clock stays at 0 throughout: every reading below comes from the arguments.
    let (_, limiter) = manual::<u32>(requests(1, 1));
    let sec = 1_000_000_000;
    limiter.replace_keys_at([(1, requests(1, 1))], 0).unwrap();
    assert_eq!(limiter.check_at(&1, 1, 0), Decision::Allowed);
    assert_eq!(limiter.check_at(&1, 1, sec / 4), refused(750 * MS));
    assert_eq!(limiter.check_at(&1, 1, sec), Decision::Allowed);
    // Refilled to `sec` at the old rate, then converted: empty, now at 2 a second.
    limiter.set_quota_at(&1, requests(2, 1), sec).unwrap();
    assert_eq!(limiter.check_at(&1, 1, sec), refused(500 * MS));
    limiter.insert_at(2, requests(0, 1), sec).unwrap();
    assert_eq!(limiter.check_at(&2, 1, 0), Decision::Allowed);
    limiter.set_overall_at(Some(requests(1, 1)), 2 * sec);
    assert_eq!(limiter.check_at(&7, 1, 2 * sec), Decision::Allowed);
    assert_eq!(
        limiter.check_at(&1, 1, 2 * sec),
        refused(Duration::from_secs(1))
    );
    limiter.set_best_effort_at(requests(1, 3), 3 * sec);
    assert_eq!(limiter.best_effort(), requests(1, 3));
}

#[test]
fn quotas_shared_by_many_keys_are_reported_per_key() {
    let (_, limiter) = manual::<u32>(Quota::DENY_ALL);
    limiter
        .replace_keys((0..1000).map(|k| (k, requests(u64::from(k % 3), 7))))
        .unwrap();
    limiter.set_quota(&5, requests(9, 9)).unwrap();
    assert_eq!(limiter.quota(&4), Some(requests(1, 7)));
    assert_eq!(limiter.quota(&5), Some(requests(9, 9)));
    assert_eq!(limiter.quota(&6), Some(requests(0, 7)));
    limiter.replace_keys([(5, requests(1, 7))]).unwrap();
    assert_eq!(limiter.quota(&5), Some(requests(1, 7)));
    assert_eq!(limiter.quota(&4), None);
}

#[test]
fn quotas_beyond_64_bits_of_units_stay_exact() {
    // u64::MAX bytes a second with a burst of u64::MAX: a full bucket is ~2^94 units.
    let huge = units(u64::MAX, u64::MAX);
    let (clock, limiter) = manual::<u8>(Quota::DENY_ALL);
    limiter.replace_keys([(1, huge), (2, units(1, 1))]).unwrap();
    assert_eq!(limiter.check(&1, u64::MAX), Decision::Allowed);
    // One token is 1e9 units, refilled at u64::MAX units a nanosecond.
    assert_eq!(limiter.check(&1, 1), refused(Duration::from_nanos(1)));
    clock.advance(Duration::from_nanos(1));
    assert_eq!(limiter.check(&1, 1), Decision::Allowed);
    assert_eq!(limiter.check(&1, u64::MAX), refused(Duration::from_secs(1)));
    clock.advance(Duration::from_secs(1));
    assert_eq!(limiter.check(&1, u64::MAX), Decision::Allowed);
    // Narrow → wide keeps the converted tokens (none here), then refills at the wide rate.
    assert_eq!(limiter.check(&2, 1), Decision::Allowed);
    limiter.set_quota(&2, huge).unwrap();
    assert_eq!(limiter.check(&2, 1), refused(Duration::from_nanos(1)));
    clock.advance(Duration::from_secs(1));
    assert_eq!(limiter.check(&2, u64::MAX), Decision::Allowed);
    // Wide → narrow caps the (full) bucket at the new burst.
    limiter.set_quota(&1, units(1, 3)).unwrap();
    assert_eq!(limiter.check(&1, 3), Decision::Allowed);
    assert_eq!(limiter.check(&1, 1), refused(Duration::from_secs(1)));
    assert_eq!(limiter.quota(&1), Some(units(1, 3)));
}
