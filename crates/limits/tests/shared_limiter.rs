//! `SharedLimiter` under threads that each open the segment, as processes would: the bound of
//! the local limiter holds on the real clock, a full table overflows without an error, and a
//! damaged quota block is refused. (Separate processes are tested from Node, in
//! `__test__/shared-limiter.spec.ts`.)

use keepcount_limits::clock::{Clock, HostClock};
use keepcount_limits::limiter::{Limit, Quota};
use keepcount_limits::shared::{
    CorruptReason, SharedError, SharedLimiter, SharedLimiterStats, SharedOptions, unlink,
};
use std::fs;
use std::path::PathBuf;
use std::sync::Barrier;
use std::time::{Duration, Instant};

const SEED: u64 = 42;

/// A fresh directory for one test's segments, removed when dropped.
struct Dir(PathBuf);

impl Dir {
    fn new(test: &str) -> Self {
        let path = std::env::temp_dir().join(format!(
            "keepcount-shared-limiter-{}-{test}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).unwrap();
        Self(path)
    }

    fn options(&self) -> SharedOptions {
        SharedOptions::new().dir(&self.0)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn requests(rate: u64, burst: u64) -> Quota {
    Quota::new(Some(Limit::per_second(rate, burst)), None)
}

#[test]
fn four_openers_hammering_three_keys_admit_at_most_burst_plus_rate_times_t() {
    const RATE: u64 = 200;
    const BURST: u64 = 20;
    const KEYS: [&[u8]; 3] = [b"a", b"b", b"c"];
    let dir = Dir::new("bound");
    let quota = requests(RATE, BURST);
    let open = || SharedLimiter::open("bound", quota, quota, 64, SEED, &dir.options()).unwrap();
    let limiters: Vec<_> = (0..4).map(|_| open()).collect();
    let barrier = Barrier::new(4);
    // Every reading a check takes is between these two.
    let start = HostClock.now_nanos();
    let admitted: Vec<[u64; 3]> = std::thread::scope(|scope| {
        let handles: Vec<_> = limiters
            .iter()
            .map(|limiter| {
                let barrier = &barrier;
                scope.spawn(move || {
                    barrier.wait();
                    let mut admitted = [0u64; 3];
                    let until = Instant::now() + Duration::from_millis(400);
                    let mut i = 0;
                    while Instant::now() < until {
                        if limiter.check(KEYS[i % 3], 1).is_allowed() {
                            admitted[i % 3] += 1;
                        }
                        i += 1;
                    }
                    admitted
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let elapsed = HostClock.now_nanos() - start;
    let most = BURST + RATE * elapsed / 1_000_000_000;
    for key in 0..3 {
        let total: u64 = admitted.iter().map(|a| a[key]).sum();
        // The bound is exact (no slack): every reading lies in [start, start + elapsed].
        assert!(total <= most, "key {key}: {total} > {most}");
        // Threads that check without pause take every token within microseconds of its
        // arrival; half of 400 ms of refill is a margin only a thread starved for 200 ms of the
        // 400 could miss (false-failure probability: that starvation, not seen in practice).
        assert!(total >= BURST + RATE * 200 / 1000, "key {key}: {total}");
    }
}

#[test]
fn a_full_table_overflows_to_the_best_effort_bucket_under_threads() {
    let dir = Dir::new("full");
    let open = || {
        SharedLimiter::open(
            "full",
            // No refill: a bucket checked once is never full again, so no new key takes over
            // an entry whose key's check has landed, however long the threads take.
            requests(0, 1000),
            requests(0, 10),
            16,
            SEED,
            &dir.options(),
        )
        .unwrap()
    };
    let limiters: Vec<_> = (0..4).map(|_| open()).collect();
    let admitted: u64 = std::thread::scope(|scope| {
        let handles: Vec<_> = limiters
            .iter()
            .enumerate()
            .map(|(t, limiter)| {
                scope.spawn(move || {
                    (0..1000u32)
                        .filter(|k| {
                            let key = (k * 4 + t as u32).to_le_bytes();
                            limiter.check(&key, 1).is_allowed()
                        })
                        .count() as u64
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    // 4000 distinct keys, each checked once: 16 claim a bucket of their own, the rest share a
    // best-effort burst of 10 that never refills, except for the race the module documents first
    // ("Two races remain"): a key that claimed an entry an instant ago has not taken its token yet,
    // so its bucket is still full, and a new key in another thread may take the entry over. Both
    // checks are then admitted from that bucket of 1,000. So every takeover is one key admitted
    // from a bucket of its own instead of overflowing, exactly (it failed 5 runs in 200 when this
    // test asked for no takeover, 2026-11-28). Each takeover needs a check in flight in another
    // thread, so an entry sees at most 3 before its first token is taken.
    let stats = limiters[0].stats();
    let takeovers = stats.takeovers;
    assert!(takeovers <= 3 * 16, "{takeovers} takeovers");
    assert_eq!(admitted, 16 + takeovers + 10);
    assert_eq!(
        stats,
        SharedLimiterStats {
            keys: 16,
            capacity: 16,
            overflow: 4000 - 16 - takeovers,
            takeovers
        }
    );
}

#[test]
fn a_damaged_quota_block_is_refused() {
    let dir = Dir::new("damaged");
    let options = dir.options();
    let q = requests(1, 1);
    drop(SharedLimiter::open("d", q, q, 10, SEED, &options).unwrap());
    let path = options.path("d").unwrap();
    let mut bytes = fs::read(&path).unwrap();
    bytes[150] ^= 1; // a bit of the per-key quota
    fs::write(&path, &bytes).unwrap();
    let err = SharedLimiter::open("d", q, q, 10, SEED, &options).unwrap_err();
    assert!(
        matches!(
            err,
            SharedError::Corrupt {
                reason: CorruptReason::Checksum,
                ..
            }
        ),
        "{err}"
    );
    unlink("d", &options).unwrap();
    assert!(SharedLimiter::open("d", q, q, 10, SEED, &options).is_ok());
}
