//! [`SharedLimiter`]: token buckets, one per key, in a segment every process of the host maps.
//!
//! # What
//! One bucket per key under one [`Quota`] for every key, created on a key's first check, so a
//! client's bucket holds for all the processes that serve it; a key table whose capacity is fixed
//! when the segment is created; and one best-effort bucket, under a quota of its own, that every
//! key arriving once the table is full shares. Sending a check there is counted
//! ([`SharedLimiterStats::overflow`]); it is never an error.
//!
//! # Decisions
//! The arithmetic is the process-local [`Limiter`](crate::limiter::Limiter)'s, through the same
//! functions (its module docs give it bit for bit): tokens in units of `period`, a refill of
//! exactly `amount` units per nanosecond capped at `burst × period`, the same wait and the same
//! [`Decision`]. Two differences, both of which only ever refuse more:
//! - Each dimension (requests, units) of a bucket keeps its own refill time, since each is one
//!   atomic word. A check that both dimensions admit takes from the first, then the second; if a
//!   concurrent check emptied the second in between, the first gets its tokens back. Between the
//!   two steps a concurrent check sees the first dimension short; a process killed there loses
//!   those tokens for the bucket (they refill as usual).
//! - A refused check writes nothing: the local limiter refills to the check's reading even when
//!   refusing, which changes no later decision unless a later reading is older than it.
//!   With readings in order, every decision is the local limiter's.
//!
//! So the local limiter's bound holds across processes: over any window `[a, b]` of clock
//! readings a bucket admits at most `burst + amount × (b − a) / period` tokens per limited
//! dimension, whatever number of threads and processes check it (every admission is one
//! compare-and-swap from a state that was refilled only to readings callers took).
//!
//! # Layout and lock-freedom
//! Every piece of state is a 16-byte word changed by a 128-bit compare-and-swap (`cmpxchg16b` on
//! x86-64, a load/store-exclusive pair on AArch64, through `portable-atomic`); there is no lock,
//! so a process killed at any instruction leaves every word valid and wedges nobody. Where the
//! CPU has no lock-free 128-bit atomics, opening fails with [`SharedError::NoWideAtomics`]:
//! `portable-atomic`'s fallback is a lock inside one process, which would protect nothing here.
//!
//! - **A bucket dimension** is `last` (the refill time, host monotonic nanoseconds) in the high 64
//!   bits and the tokens it *lacks* (`burst × period − tokens`) in the low 64. A zeroed word is a
//!   full bucket, so a new key needs no initialisation, and a quota whose full bucket does not fit
//!   64 bits of units is refused ([`SharedError::WideQuota`]).
//! - **A key** is stored as its 128-bit SipHash-1-3 keyed by the segment's seed (0 marks an empty
//!   entry; a key hashing to 0 is stored as 1). Two keys are one bucket only if their 128-bit
//!   hashes collide: about `n² / 2^129` for `n` keys by chance (below 10^-25 at a million keys), and
//!   an attacker who does not know the seed cannot aim for a collision, nor for a probe sequence,
//!   since the table position comes from the same keyed hash. Keep the seed secret.
//! - **The table** has the power-of-two number of entries that keeps it at most 3/4 full at
//!   capacity, and is probed linearly from the hash. A key is claimed with one compare-and-swap of
//!   its entry from 0 to its hash: claiming and writing the key are one step, so no process can
//!   die between them. Keys are never removed, so a probe that meets an empty entry knows the key
//!   is absent. A header word counts the claimed entries; a check reserves one (load, then
//!   add) before claiming and gives it back if another process claimed the entry first. A
//!   process killed between reserving and claiming leaks one reservation: the table then takes
//!   one key fewer, and that is all a crash can cost it.
//!
//! # When not to use it
//! - Keys that come and go over a long run (client addresses over weeks): an entry is never freed,
//!   so once `capacity` distinct keys have been seen every new one shares the best-effort bucket
//!   until the segment is unlinked and created anew. Size the capacity for the keys expected
//!   between restarts, and watch [`SharedLimiterStats::overflow`].
//! - Per-key quotas, live quota changes or an overall quota: those are the local
//!   [`Limiter`](crate::limiter::Limiter)'s. Here the quotas are fixed in the segment's header.
//! - Within one process: the local limiter needs no file.

use crate::clock::{Clock, HostClock};
use crate::limiter::{Decision, Quota};
use crate::shape::Shape;
use crate::shared::error::SharedError;
use crate::shared::layout::{
    BEST_EFFORT_OFFSET, KEYS_WORD_OFFSET, Kind, Layout, LimiterLayout, OVERFLOW_WORD_OFFSET,
    table_entries,
};
use crate::shared::segment::{Segment, SharedOptions};
use portable_atomic::AtomicU128;
use std::sync::atomic::Ordering;

mod bucket;
mod table;

/// The largest capacity: 2^22 keys, a table of 2^23 entries of 48 bytes (384 MiB).
pub const MAX_CAPACITY: u32 = 1 << 22;

/// Per-key token buckets shared by every process that opens the same name (module docs of
/// `shared/limiter.rs`: design, guarantees, limits).
///
/// ```
/// use keepcount_limits::limiter::{Limit, Quota};
/// use keepcount_limits::shared::{SharedLimiter, SharedOptions, unlink};
///
/// let options = SharedOptions::new().dir(std::env::temp_dir());
/// # unlink("doc-buckets", &options).unwrap();
/// let quota = Quota::new(Some(Limit::per_second(1, 2)), None);
/// let a = SharedLimiter::open("doc-buckets", quota, quota, 1000, 42, &options).unwrap();
/// let b = SharedLimiter::open("doc-buckets", quota, quota, 1000, 42, &options).unwrap(); // another process, say
/// assert!(a.check(b"alice", 1).is_allowed());
/// assert!(b.check(b"alice", 1).is_allowed());
/// assert!(!a.check(b"alice", 1).is_allowed()); // one bucket: its burst of 2 is spent
/// assert_eq!(b.stats().keys, 1);
/// unlink("doc-buckets", &options).unwrap();
/// ```
///
/// # Performance
/// A check hashes the key (SipHash-1-3, 128 bits), reads the clock, probes the table (one or two
/// 16-byte loads at 3/4 load), and does one 128-bit compare-and-swap per limited dimension when
/// admitting, none when refusing.
///
/// # Thread safety
/// `Send + Sync`; lock-free across threads and processes.
pub struct SharedLimiter<C: Clock = HostClock> {
    segment: Segment,
    block: LimiterLayout,
    /// Table entries − 1 (a power of two − 1).
    mask: usize,
    seed: u64,
    clock: C,
}

/// How full a [`SharedLimiter`]'s table is, and how much traffic it turned away from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedLimiterStats {
    /// Keys in the table (at most [`capacity`](Self::capacity); a process killed while adding a
    /// key can leave this one above the keys actually there).
    pub keys: u32,
    /// The most keys the table takes.
    pub capacity: u32,
    /// Checks of keys not in the table that went to the best-effort bucket because the table was
    /// full, by every process since the segment was created.
    pub overflow: u64,
}

impl SharedLimiter {
    /// Opens (or creates) the shared limiter `name`: a bucket under `quota` for each of up to
    /// `capacity` keys, `best_effort` for the keys beyond, keys identified by `seed`.
    ///
    /// # Errors
    /// [`SharedError::Capacity`] unless `1 ≤ capacity ≤ MAX_CAPACITY`; [`SharedError::WideQuota`]
    /// if a full bucket of either quota is `2^64` units or more (`burst × period` in
    /// nanoseconds); [`SharedError::NoWideAtomics`] without lock-free 128-bit atomics; and the
    /// errors of every shared segment, [`SharedError::Mismatch`] naming `kind`, `capacity`,
    /// `quota`, `bestEffort` or `seed`.
    pub fn open(
        name: &str,
        quota: Quota,
        best_effort: Quota,
        capacity: u32,
        seed: u64,
        options: &SharedOptions,
    ) -> Result<Self, SharedError> {
        Self::with_clock(name, quota, best_effort, capacity, seed, options, HostClock)
    }
}

impl<C: Clock> SharedLimiter<C> {
    /// [`open`](SharedLimiter::open) reading time from `clock`, which must count from the same
    /// origin in every process that opens `name` (tests share one
    /// [`ManualClock`](crate::clock::ManualClock) between several opens in one process).
    pub fn with_clock(
        name: &str,
        quota: Quota,
        best_effort: Quota,
        capacity: u32,
        seed: u64,
        options: &SharedOptions,
        clock: C,
    ) -> Result<Self, SharedError> {
        if capacity == 0 || capacity > MAX_CAPACITY {
            return Err(SharedError::Capacity(capacity));
        }
        let block = LimiterLayout {
            capacity,
            quota,
            best_effort,
        };
        if !block.fits() {
            return Err(SharedError::WideQuota);
        }
        if !AtomicU128::is_lock_free() {
            return Err(SharedError::NoWideAtomics);
        }
        let entries = table_entries(capacity);
        let layout = Layout {
            kind: Kind::Limiter,
            shape: Shape::new(1, entries)?,
            seed,
            interval_nanos: 0,
            processes: 0,
            limiter: Some(block),
        };
        // Zeroed words are full buckets and empty entries: nothing to initialise.
        let segment = Segment::open(name, layout, options, &|_| {})?;
        Ok(Self {
            segment,
            block,
            mask: entries - 1,
            seed,
            clock,
        })
    }

    /// Checks one request costing `cost` units for `key` and takes it from the key's bucket (or
    /// the best-effort bucket) if every limited dimension has it; see
    /// [`Limiter::check`](crate::limiter::Limiter::check) for the decision.
    pub fn check(&self, key: &[u8], cost: u64) -> Decision {
        let id = self.identity(key);
        let bucket = match self.entry(id) {
            Some(entry) => (entry + 16, &self.block.quota),
            None => (BEST_EFFORT_OFFSET, &self.block.best_effort),
        };
        let now = self.clock.now_nanos();
        self.admit(bucket.0, bucket.1, now, [1, cost]).decision()
    }

    /// The quota of every key's bucket.
    pub fn quota(&self) -> Quota {
        self.block.quota
    }

    /// The best-effort bucket's quota.
    pub fn best_effort(&self) -> Quota {
        self.block.best_effort
    }

    /// How full the table is and how many checks overflowed it.
    pub fn stats(&self) -> SharedLimiterStats {
        // Relaxed: statistics, read on their own.
        let keys = self
            .segment
            .word(KEYS_WORD_OFFSET)
            .load(Ordering::Relaxed)
            .min(u64::from(self.block.capacity));
        SharedLimiterStats {
            // Capped at the capacity, a u32.
            keys: keys as u32,
            capacity: self.block.capacity,
            overflow: self
                .segment
                .word(OVERFLOW_WORD_OFFSET)
                .load(Ordering::Relaxed),
        }
    }

    /// The segment file.
    pub fn path(&self) -> &std::path::Path {
        self.segment.path()
    }

    /// Bytes of the mapping, the key table included.
    pub fn memory_bytes(&self) -> usize {
        self.segment.layout().total_bytes()
    }
}

impl<C: Clock> std::fmt::Debug for SharedLimiter<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedLimiter")
            .field("path", &self.segment.path())
            .field("quota", &self.block.quota)
            .field("best_effort", &self.block.best_effort)
            .field("capacity", &self.block.capacity)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::bucket::{give_back, refill, take};
    use super::*;
    use crate::clock::ManualClock;
    use crate::limiter::{Limit, Limiter};
    use std::sync::Arc;
    use std::time::Duration;

    const SEC: u64 = 1_000_000_000;

    /// A scratch directory removed when dropped.
    struct Scratch(std::path::PathBuf);

    impl Scratch {
        fn new(test: &str) -> Self {
            let dir = std::env::temp_dir()
                .join(format!("keepcount-slimiter-{test}-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            Self(dir)
        }

        fn options(&self) -> SharedOptions {
            SharedOptions::new().dir(&self.0)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn requests(rate: u64, burst: u64) -> Quota {
        Quota::new(Some(Limit::per_second(rate, burst)), None)
    }

    fn open(
        scratch: &Scratch,
        quota: Quota,
        capacity: u32,
        clock: &Arc<ManualClock>,
    ) -> SharedLimiter<Arc<ManualClock>> {
        SharedLimiter::with_clock(
            "buckets",
            quota,
            quota,
            capacity,
            7,
            &scratch.options(),
            Arc::clone(clock),
        )
        .unwrap()
    }

    #[test]
    fn decides_as_the_local_limiter_does() {
        let scratch = Scratch::new("same");
        let clock = Arc::new(ManualClock::new());
        let quota = Quota::new(
            Some(Limit::per_second(3, 5)),
            Some(Limit::new(7, Duration::from_millis(300), 40).unwrap()),
        );
        let shared = open(&scratch, quota, 8, &clock);
        let local: Limiter<Vec<u8>, _> = Limiter::with_clock(quota, Arc::clone(&clock));
        local
            .replace_keys([(b"a".to_vec(), quota), (b"b".to_vec(), quota)])
            .unwrap();
        // A fixed pseudo-random walk of keys, costs and clock steps.
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        for step in 0..5000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let key: &[u8] = if state & 1 == 0 { b"a" } else { b"b" };
            let cost = (state >> 8) % 12;
            clock.advance(Duration::from_nanos((state >> 20) % (SEC / 4)));
            assert_eq!(
                shared.check(key, cost),
                local.check(key, cost),
                "step {step}"
            );
        }
    }

    #[test]
    fn a_new_key_starts_full_and_keys_are_apart() {
        let scratch = Scratch::new("apart");
        let clock = Arc::new(ManualClock::new());
        let limiter = open(&scratch, requests(1, 2), 8, &clock);
        for key in [&b"x"[..], b"y"] {
            assert!(limiter.check(key, 1).is_allowed());
            assert!(limiter.check(key, 1).is_allowed());
            assert_eq!(
                limiter.check(key, 1).retry_after(),
                Some(Duration::from_secs(1))
            );
        }
        assert_eq!(limiter.stats().keys, 2);
    }

    #[test]
    fn a_full_table_sends_new_keys_to_the_best_effort_bucket() {
        let scratch = Scratch::new("full");
        let clock = Arc::new(ManualClock::new());
        let limiter = SharedLimiter::with_clock(
            "buckets",
            requests(1, 100),
            requests(0, 3),
            2,
            7,
            &scratch.options(),
            Arc::clone(&clock),
        )
        .unwrap();
        let admitted = (0..10u8)
            .filter(|k| limiter.check(&[*k], 1).is_allowed())
            .count();
        // Two keys get buckets of their own; the other eight share a best-effort burst of 3.
        assert_eq!(admitted, 2 + 3);
        assert_eq!(
            limiter.stats(),
            SharedLimiterStats {
                keys: 2,
                capacity: 2,
                overflow: 8
            }
        );
        // Keys in the table keep their buckets.
        assert!(limiter.check(&[0], 1).is_allowed());
    }

    #[test]
    fn two_opens_share_buckets() {
        let scratch = Scratch::new("share");
        let clock = Arc::new(ManualClock::new());
        let a = open(&scratch, requests(1, 3), 8, &clock);
        let b = open(&scratch, requests(1, 3), 8, &clock);
        // Each check is one request, whatever its cost in units.
        assert!(a.check(b"k", 1).is_allowed());
        assert!(b.check(b"k", 1).is_allowed());
        assert!(a.check(b"k", 9).is_allowed());
        assert!(!b.check(b"k", 1).is_allowed());
        clock.advance(Duration::from_secs(1));
        assert!(b.check(b"k", 1).is_allowed());
    }

    #[test]
    fn refusal_in_the_second_dimension_gives_the_first_back() {
        let quota = Quota::new(Some(Limit::per_second(1, 5)), Some(Limit::per_second(1, 2)));
        let scratch = Scratch::new("both");
        let clock = Arc::new(ManualClock::new());
        let limiter = open(&scratch, quota, 8, &clock);
        assert!(limiter.check(b"k", 2).is_allowed());
        assert_eq!(
            limiter.check(b"k", 1).retry_after(),
            Some(Duration::from_secs(1))
        );
        // The refused check took no request token: four of the five remain.
        let offset = limiter.entry(limiter.identity(b"k")).unwrap() + 16;
        let word = limiter.segment.wide_word(offset).load(Ordering::Relaxed);
        let (_, tokens) = refill(word, quota.requests().unwrap(), 0);
        assert_eq!(tokens, 4 * u128::from(SEC));
        // And a take whose second dimension is short undoes the first.
        let units = quota.units().unwrap();
        let requests = quota.requests().unwrap();
        let words = [
            limiter.segment.wide_word(offset),
            limiter.segment.wide_word(offset + 16),
        ];
        take(words[0], requests, 0, 1).unwrap();
        assert!(take(words[1], units, 0, 1).is_err());
        give_back(words[0], requests, 1);
        let (_, tokens) = refill(words[0].load(Ordering::Relaxed), requests, 0);
        assert_eq!(tokens, 4 * u128::from(SEC));
    }

    #[test]
    fn bad_configurations_are_refused() {
        let scratch = Scratch::new("bad");
        let options = scratch.options();
        let q = requests(1, 1);
        for capacity in [0, MAX_CAPACITY + 1] {
            assert!(matches!(
                SharedLimiter::open("x", q, q, capacity, 1, &options),
                Err(SharedError::Capacity(c)) if c == capacity
            ));
        }
        let wide = requests(1, u64::MAX / SEC + 1);
        assert!(matches!(
            SharedLimiter::open("x", wide, q, 1, 1, &options),
            Err(SharedError::WideQuota)
        ));
    }

    #[test]
    fn reopening_with_another_quota_names_the_field() {
        let scratch = Scratch::new("mismatch");
        let options = scratch.options();
        let q = requests(1, 1);
        let _a = SharedLimiter::open("m", q, q, 10, 1, &options).unwrap();
        let err = SharedLimiter::open("m", requests(2, 1), q, 10, 1, &options).unwrap_err();
        assert!(
            matches!(&err, SharedError::Mismatch { field: "quota", .. }),
            "{err}"
        );
        let err = SharedLimiter::open("m", q, requests(2, 1), 10, 1, &options).unwrap_err();
        assert!(matches!(
            err,
            SharedError::Mismatch {
                field: "bestEffort",
                ..
            }
        ));
        let err = SharedLimiter::open("m", q, q, 11, 1, &options).unwrap_err();
        assert!(matches!(
            err,
            SharedError::Mismatch {
                field: "capacity",
                ..
            }
        ));
        let err = SharedLimiter::open("m", q, q, 10, 2, &options).unwrap_err();
        assert!(matches!(err, SharedError::Mismatch { field: "seed", .. }));
    }
}
