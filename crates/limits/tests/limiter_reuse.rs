//! The per-key token-bucket limiter while its key table is replaced and its slots reused under
//! threads that keep checking: no bucket is lost, shared or handed to another key.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;

use keepcount_limits::clock::ManualClock;
use keepcount_limits::limiter::{Limit, Limiter, Quota};

fn requests(rate: u64, burst: u64) -> Quota {
    Quota::new(Some(Limit::per_second(rate, burst)), None)
}

fn manual<K: std::hash::Hash + Eq>(
    best_effort: Quota,
) -> (Arc<ManualClock>, Limiter<K, Arc<ManualClock>>) {
    let clock = Arc::new(ManualClock::new());
    (clock.clone(), Limiter::with_clock(best_effort, clock))
}

/// Runs `check(thread, stop)` on `threads` threads and `update` on this one once they have all
/// started, then tells them to stop and returns what each returned, in thread order: the race
/// every test here sets up, a writer changing the table under checks that keep going until
/// `stop` reads true.
fn check_while<T: Send>(
    threads: usize,
    check: impl Fn(usize, &AtomicBool) -> T + Sync,
    update: impl FnOnce(),
) -> Vec<T> {
    let stop = AtomicBool::new(false);
    let started = Barrier::new(threads + 1);
    thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (check, stop, started) = (&check, &stop, &started);
                scope.spawn(move || {
                    started.wait();
                    check(t, stop)
                })
            })
            .collect();
        started.wait();
        update();
        stop.store(true, Ordering::Relaxed);
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    })
}

/// While one thread replaces the table over and over, others keep checking. The key that
/// stays in every table keeps its single bucket: with the clock frozen it admits exactly its
/// burst. The key that comes and goes gets a fresh full bucket each time it is added and
/// nothing more.
#[test]
fn table_replacement_under_load_keeps_state_and_gives_no_extra_tokens() {
    const THREADS: usize = 2;
    const REPLACEMENTS: u64 = 2_000;
    const BURST: u64 = 1_000;
    let (_, limiter) = manual(Quota::DENY_ALL);
    let table = |with_toggled: bool| {
        let mut keys = vec![("stay", requests(0, BURST)), ("other", requests(0, 1))];
        if with_toggled {
            keys.push(("toggled", requests(0, 3)));
        }
        keys
    };
    limiter.replace_keys(table(true)).unwrap();
    let counts = check_while(
        THREADS,
        |_, stop| {
            let (mut stay, mut toggled) = (0u64, 0u64);
            while !stop.load(Ordering::Relaxed) {
                stay += u64::from(limiter.check_one("stay").is_allowed());
                toggled += u64::from(limiter.check_one("toggled").is_allowed());
            }
            (stay, toggled)
        },
        || {
            for i in 0..REPLACEMENTS {
                limiter.replace_keys(table(i % 2 == 1)).unwrap();
            }
        },
    );
    let (stay, toggled) = counts
        .into_iter()
        .fold((0, 0), |(a, b), (c, d)| (a + c, b + d));
    // Threads may not have drained "stay" yet; drain the rest here.
    let rest = (0..BURST)
        .filter(|_| limiter.check_one("stay").is_allowed())
        .count() as u64;
    assert_eq!(stay + rest, BURST);
    // "toggled" was added REPLACEMENTS / 2 times after the first, each time with 3 tokens.
    assert!(toggled <= 3 * (1 + REPLACEMENTS / 2), "{toggled}");
    assert_eq!(limiter.len(), 3);
}

/// Keys with heap storage come and go while other threads look them up: every removal frees a
/// slot that the next insertion reuses for another key, dropping the old key's `String`. A
/// lookup that could still reach a slot after the update returned would see another key's
/// quota (each key's burst is its number), or compare against a freed string.
#[test]
fn lookups_racing_slot_reuse_never_see_another_keys_bucket() {
    const KEYS: u64 = 64;
    const THREADS: usize = 2;
    const ROUNDS: u64 = 3_000;
    let (_, limiter) = manual::<String>(Quota::DENY_ALL);
    let quota = |i: u64| requests(0, i + 1);
    limiter
        .replace_keys((0..KEYS).map(|i| (format!("key-{i}"), quota(i))))
        .unwrap();
    let seen = check_while(
        THREADS,
        |t, stop| {
            let mut seen = 0u64;
            let mut i = t as u64;
            while !stop.load(Ordering::Relaxed) {
                let key = format!("key-{}", i % KEYS);
                if let Some(found) = limiter.quota(key.as_str()) {
                    assert_eq!(found, quota(i % KEYS), "{key}");
                    seen += 1;
                }
                let _ = limiter.check_one(key.as_str());
                i = i.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            }
            seen
        },
        || {
            for round in 0..ROUNDS {
                let (a, b) = (round % KEYS, (round * 7 + 3) % KEYS);
                if a == b {
                    continue;
                }
                // Remove two keys and add them back in the other order, so each lands in the
                // slot the other just left.
                limiter.remove(format!("key-{a}").as_str()).unwrap();
                limiter.remove(format!("key-{b}").as_str()).unwrap();
                limiter.insert(format!("key-{a}"), quota(a)).unwrap();
                limiter.insert(format!("key-{b}"), quota(b)).unwrap();
            }
        },
    );
    for seen in seen {
        assert!(seen > 0);
    }
    assert_eq!(limiter.len(), KEYS as usize);
}

/// Keys rotate through the table while threads check them, so slots freed by one key are reused
/// by another while checks on older tables may still be running. With no refill, each time a key
/// is added it brings exactly one token: a key can never be admitted more often than it was
/// added, which a slot reused too early (a check on an old table taking a newcomer's token) would
/// break.
#[test]
fn slots_are_reused_only_after_checks_on_old_tables_finish() {
    const THREADS: usize = 2;
    const KEYS: u32 = 64;
    const ROUNDS: u32 = 3_000;
    let (_, limiter) = manual::<u32>(Quota::DENY_ALL);
    let added: Vec<AtomicU64> = (0..KEYS).map(|_| AtomicU64::new(0)).collect();
    let window = |round: u32| (0..KEYS / 2).map(move |i| ((round + i) % KEYS, requests(0, 1)));
    for (key, _) in window(0) {
        added[key as usize].fetch_add(1, Ordering::Relaxed);
    }
    limiter.replace_keys(window(0)).unwrap();
    let admitted = check_while(
        THREADS,
        |t, stop| {
            let mut mine = vec![0u64; KEYS as usize];
            let mut key = t as u32;
            while !stop.load(Ordering::Relaxed) {
                key = (key * 29 + 7) % KEYS;
                mine[key as usize] += u64::from(limiter.check_one(&key).is_allowed());
            }
            mine
        },
        || {
            for round in 1..ROUNDS {
                let previous: Vec<u32> = window(round - 1).map(|(k, _)| k).collect();
                for (key, _) in window(round) {
                    if !previous.contains(&key) {
                        added[key as usize].fetch_add(1, Ordering::Relaxed);
                    }
                }
                limiter.replace_keys(window(round)).unwrap();
            }
        },
    );
    for key in 0..KEYS as usize {
        let total: u64 = admitted.iter().map(|mine| mine[key]).sum();
        let added = added[key].load(Ordering::Relaxed);
        assert!(
            total <= added,
            "key {key}: admitted {total}, added {added} times"
        );
    }
}

/// Checks prefetch their probe through a hint of where the current table is, read without
/// synchronization, before they load the table itself. Here the table alternates between 8
/// entries and 2^18 (2 MB, on huge pages) while threads check: hints go stale across growth and
/// shrinkage and point into freed tables, and every check must still find its key's one bucket.
#[test]
fn checks_find_their_bucket_while_the_table_grows_and_shrinks_under_them() {
    const THREADS: usize = 2;
    const REPLACEMENTS: u64 = 12;
    const BURST: u64 = 1_000_000;
    // 2^18 entries: more than 98,304 keys keep a table under 3/4 full no smaller.
    const MANY: u64 = 100_000;
    let (_, limiter) = manual::<u64>(Quota::DENY_ALL);
    let table = |many: bool| {
        let extra = if many { MANY } else { 2 };
        (0..=extra).map(|key| (key, requests(0, if key == 0 { BURST } else { 1 })))
    };
    limiter.replace_keys(table(true)).unwrap();
    let admitted: u64 = check_while(
        THREADS,
        |_, stop| {
            let mut admitted = 0u64;
            while !stop.load(Ordering::Relaxed) {
                admitted += u64::from(limiter.check_one(&0).is_allowed());
                // Unknown: the best-effort bucket, which denies all.
                assert!(!limiter.check_one(&u64::MAX).is_allowed());
            }
            admitted
        },
        || {
            for i in 0..REPLACEMENTS {
                limiter.replace_keys(table(i % 2 == 1)).unwrap();
            }
        },
    )
    .into_iter()
    .sum();
    // Key 0 kept its one bucket through every table: with the clock frozen it admits its burst
    // once, whatever the threads took and the rest here.
    let rest = (0..BURST)
        .filter(|_| limiter.check_one(&0).is_allowed())
        .count() as u64;
    assert_eq!(admitted + rest, BURST);
    assert!(admitted > 0, "no check ran during the replacements");
    assert_eq!(limiter.len() as u64, MANY + 1);
}
