//! Per-key token buckets with live updates: the rate limiter of ETH's LightningFilter, exact and
//! without its fixed size.
//!
//! # What
//! A [`Limiter`] holds a table of keys, each with its own [`Quota`] and its own bucket; a
//! best-effort quota whose single bucket is shared by every key not in the table; and optionally
//! an overall quota over all traffic. A quota limits two dimensions at once: requests (each
//! [`check`](Limiter::check) is one) and cost units (bytes, say: each check costs what it is
//! told). [`check`](Limiter::check) admits a cost or refuses it, consuming nothing on refusal in
//! any bucket, and says how long until it would be admitted (for `Retry-After`), or that it never
//! will be ([`Decision::Never`]) when the cost exceeds a burst.
//!
//! ```
//! use keepcount_limits::clock::ManualClock;
//! use keepcount_limits::limiter::{Decision, Limit, Limiter, Quota};
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! let clock = Arc::new(ManualClock::new());
//! let per_second = |rate, burst| Quota::new(Some(Limit::per_second(rate, burst)), None);
//! let limiter = Limiter::with_clock(per_second(1, 1), clock.clone());
//! limiter.replace_keys([("alice", per_second(1, 3))]).unwrap();
//!
//! for _ in 0..3 {
//!     assert_eq!(limiter.check_one("alice"), Decision::Allowed);
//! }
//! assert_eq!(limiter.check_one("alice").retry_after(), Some(Duration::from_secs(1)));
//! clock.advance(Duration::from_millis(500));
//! assert_eq!(limiter.check_one("alice").retry_after(), Some(Duration::from_millis(500)));
//! // Unknown keys share the best-effort bucket.
//! assert_eq!(limiter.check_one("bob"), Decision::Allowed);
//! assert!(!limiter.check_one("carol").is_allowed());
//! ```
//!
//! # Why this design
//! LightningFilter (ETH Zürich, `Ratelimiter.md`) keeps one global key table mapping a key to an
//! index, per-worker arrays of buckets at that index, and a per-worker best-effort bucket; rate
//! updates are relaxed stores followed by a wait for every worker to pass a quiescent state, and
//! key-list updates remove, wait, then add. It admits two flaws, both fixed here:
//! - **Fixed size.** Its table and bucket arrays are sized at startup and a larger key list fails
//!   to load. Here the table is built anew by each update and published with
//!   `arc-swap`: it grows to whatever the key list needs.
//! - **Inherited tokens.** A key added in place of a removed one reuses its slot and can start
//!   with the old key's tokens. Here every update that changes the key set builds a new table in
//!   which each entry holds its own key's bucket: an added key starts full, a key that stays has
//!   its own bucket moved over (`table.rs`), and no key ever sees another key's tokens.
//!
//! Per-worker buckets also make LightningFilter admit up to `workers ×` its quota; here every
//! thread shares one bucket per key, so the quota is exact (see the invariant below).
//!
//! ## Layout
//! Unlike LightningFilter, buckets are not kept apart from the table at a fixed index: each
//! entry of the key table (`table.rs`, a `hashbrown` table) holds the key, a one-byte
//! `parking_lot` lock, a quota id, the time of the last refill and the low 64 bits of both counts
//! (40 bytes for a `u64` key). A check on a cold key then misses the cache about once, on the
//! entry that holds both the key it compares and the bucket it updates: `hashbrown`'s one byte of
//! control per entry, which the probe reads first, is 2 MB at a million keys and stays mostly
//! cached. A full bucket needs more than 64 bits of units only when `burst × period ≥ 2^64`;
//! entries under such *wide* quotas keep the high halves in a side map of their table, so
//! exactness costs nothing where it is not needed. Quotas are interned (`arena.rs`): entries name
//! them by id, ids are reference-counted by the writer and reused once no entry names them; the
//! best-effort and overall buckets hold theirs inline. A table of 2 MB or more sits on
//! transparent huge pages (`pages.rs`), so its miss is not also a page-table walk.
//!
//! Readers never wait for writers: [`check`](Limiter::check) loads the current table with
//! `arc-swap` (lock-free: no lock, no retry loop), probes it and takes the key's own entry lock.
//! An update builds the next table on the side and then *moves* the buckets into it, one at a
//! time under its lock, marking each old entry moved; a check that finds its entry moved follows
//! the old table's link to the new one (`table.rs` gives the protocol and why no token is lost or
//! counted twice). Only then is the new table swapped in; the update then waits, like
//! LightningFilter's quiescent wait, for the checks still reading the old table to finish, so
//! that the old table is freed by the writer and never by a caller of `check`. Crates:
//! `arc-swap` (the table snapshot: wait-free loads, maintained and widely used), `hashbrown`
//! (the table: SIMD probing of control bytes, entries inline), `parking_lot` (a one-byte lock per
//! bucket, one CAS each way uncontended), `hashbrown`'s default hasher (`foldhash`, seeded per
//! limiter: several times faster than SipHash on short keys, and resistant enough for keys an
//! attacker chooses in a table the operator configured, since a flood of unknown keys only
//! probes it).
//!
//! # When not to use it
//! - Keys seen for the first time on the request path (client addresses, say) that should each
//!   get a bucket: this limiter only limits keys it was configured with, and adding one is a copy
//!   of the table. Use a keyed limiter that creates state on first sight (governor's
//!   `RateLimiter::keyed`) or an approximate count ([`Estimator`](crate::estimator::Estimator)) instead.
//! - Limits shared across processes or machines: the state is in this process's memory. For the
//!   processes of one host, [`SharedLimiter`](crate::shared::SharedLimiter) keeps a bucket per key
//!   in shared memory (one quota for all keys, a fixed capacity).
//! - Many threads on one key, or any overall quota, at very high rates: those checks serialize on
//!   one mutex (that is what makes them exact).
//!
//! # Arithmetic (bit for bit, for ports)
//! All integers; `now` is [`Clock::now_nanos`] (u64). For a [`Limit`] of `amount` tokens per
//! `period` nanoseconds with `burst`, one token is `period` *units*, so a full bucket is
//! `burst × period` units and the refill is exactly `amount` units per nanosecond (u128, no
//! rounding). Per bucket (requests and units dimensions, one `last` time):
//! 1. Refill: `elapsed = max(0, now − last)`; if `elapsed > 0`, `last = now` and for each limited
//!    dimension `tokens = min(burst × period, tokens + amount × elapsed)`.
//! 2. A check costs 1 in the requests dimension and `cost` in the units dimension. Per limited
//!    dimension: *never* if `cost > burst`; *0* if `cost × period ≤ tokens`; *never* if
//!    `amount = 0`; else `⌈(cost × period − tokens) / amount⌉` ns, capped at `u64::MAX`.
//! 3. The wait of a check is the maximum over the limited dimensions of the key's bucket (or the
//!    best-effort one) and, if set, the overall bucket, with *never* above every number. Wait 0:
//!    every limited dimension of those buckets loses `cost × period` units; else nothing changes
//!    except the refill.
//! 4. A new bucket is full with `last = now`. A quota change refills at the old quota, then per
//!    dimension: limited → limited keeps `min(new burst × new period,
//!    ⌊tokens × new period / old period⌋)`; unlimited → limited starts full; → unlimited holds 0.
//!
//! # Exactness invariant
//! Over any window of clock readings `[a, b]`, a bucket admits in each limited dimension at most
//! `burst + amount × (b − a) / period` tokens, under any number of concurrent callers. Proof: all
//! changes happen under the bucket's mutex; at `a` it holds at most `burst`; refills only add
//! `amount` units per nanosecond of advance of `last`, which moves only forward, to readings the
//! callers took, so at most `amount × (b − a)` units arrive within the window; tokens never go
//! below zero. Tested with threads racing on one key, and by property tests on random sequences.
//!
//! # Performance
//! `cargo bench -p keepcount-limits --bench limiter`: 2M checks per thread, every check admitted,
//! each figure the median of 3 interleaved timings; two-thread figures are wall time over both
//! threads' checks. Governor 0.10 is `RateLimiter::keyed` (dashmap, one quota for all keys, TSC
//! clock through `quanta`), pre-filled with every key; ratios are governor's time over
//! keepcount's (above 1: keepcount is faster).
//!
//! Run on 2026-11-25, the binaries before and after the table moved inline run alternately, on
//! a 2-core AMD EPYC VM as it quietened (load average 3.2 → 1.8, three pairs), medians of those
//! three runs:
//!
//! | scenario | threads | keepcount | governor | ratio (runs) | before: ratio (runs) |
//! |---|---|---|---|---|---|
//! | one hot key | 1 | 46 ns | 56 ns | 1.16× (1.07–1.70) | 0.93× (0.90–1.17) |
//! | one hot key | 2 | 58 ns | 66 ns | 1.14× (1.13–1.21) | 1.12× (1.08–1.19) |
//! | 1M keys, uniform | 1 | 360 ns | 461 ns | 1.22× (1.21–1.29) | 1.09× (0.96–1.24) |
//! | 1M keys, uniform | 2 | 175 ns | 187 ns | 1.21× (1.07–1.26) | 0.97× (0.96–1.32) |
//! | heap per key, 1M keys | | 86 B | 36 B | | 59 B |
//!
//! Earlier the same day, with other work loading the machine (load 6–13), five runs of the new
//! layout gave 1.16–1.27×, 0.97–1.25×, 1.10–1.38× and 1.06–1.42× in the same rows: ahead in 19
//! of 20 cells. One run does not tell 0.95 from 1.1 on this machine; these are the figures, not a
//! guarantee for yours.
//!
//! - **Over many keys: one cache miss a check, as governor.** Until 2026-11-25 buckets lived in an
//!   arena apart from an index of slot numbers, so that updates never had to move one; a check
//!   then missed the cache twice, on its index entry and then on its slot (`perf annotate`: 43%
//!   and 47% of its cycles), and on a quiet machine governor, whose state is inline in its
//!   `dashmap`, was 1.2–1.3× faster over a million keys however the two misses were helped (huge
//!   pages, prefetching the index entry). With the buckets inline in the table, moved into each
//!   new table under their locks (`table.rs`), a check misses about once, on the entry that holds
//!   key and bucket, behind `hashbrown`'s control bytes, which stay mostly cached.
//! - **On one key: level with governor in instructions.** A hot-key check makes 241 instructions
//!   over the check loop (callgrind, collection toggled on the loop, `u64` keys; governor 243;
//!   316 before the table moved inline): the key comparison and the bucket share an entry, and
//!   quotas whose full bucket fits 64 bits of units (all but bursts of billions of tokens a
//!   second) are admitted in 64-bit arithmetic (`bucket::admit_narrow`, property-tested against
//!   the `u128` path). Governor's SipHash is a third of its check; ours (`foldhash`) is a few
//!   instructions, but the `arc-swap` load and release cost about 60. What remains in time is
//!   four locked instructions against governor's three: the `arc-swap` load and release, the
//!   entry's lock and unlock.
//! - **Memory.** An entry is 40 bytes for a `u64` key, plus a control byte, and `hashbrown` keeps
//!   its table at most 7/8 full, doubling: at a million keys (its emptiest, 2^21 entries) that is
//!   86 bytes a key, about 48 at 1.8 million; the arena layout took 59, governor 36 (8 bytes of
//!   state a key). An update that changes the key set holds both tables until it returns.
//! - **Updates.** A key-set change builds a table and moves every bucket, `O(keys)` with a lock
//!   and unlock each; buckets a check holds are moved last, not waited for in turn, so a check
//!   preempted while holding one delays the update by a scheduler slice, never the other way
//!   round. [`insert`](Limiter::insert) and [`remove`](Limiter::remove) rebuild too (and clone
//!   every key): load many changes with one [`replace_keys`](Limiter::replace_keys).
//! - Tried and dropped, before this layout: a 4-byte index entry (no faster), 64-byte-aligned slots
//!   (~5% for 40% more memory), prefetching a slot's second line; `crossbeam-epoch` in place of
//!   `arc-swap` (a tight hot-key loop 32 → 28.5 ns, but invisible in the bench, the replacements of
//!   `tests/limiter_reuse.rs` taking 1–3 s against 0.6, and every update held back by any thread
//!   pinned anywhere in the process); a hand-written per-thread reader record (a few percent on one
//!   key, nothing over many; a well-kept crate is worth more than our own reclamation code).

mod arena;
mod bucket;
mod decision;
mod error;
mod pages;
mod quota;
mod table;
mod update;
mod writer;

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arc_swap::ArcSwap;
use hashbrown::DefaultHashBuilder;
use parking_lot::Mutex;

use crate::clock::{Clock, MonotonicClock};
use arena::{Arena, Interned, QuotaCell};
use bucket::{Bucket, Governed, Owned, admit, admit_narrow};
pub(crate) use bucket::{dimension_wait, refilled};
pub use decision::Decision;
pub(crate) use decision::Wait;
pub use error::LimiterError;
pub use quota::{Limit, Quota};
use table::Table;
use writer::Writer;

/// A per-key token-bucket limiter with a shared best-effort bucket, an optional overall quota and
/// live updates. See the [module docs](self) for the design and the exact arithmetic.
///
/// Every method that reads the clock has an `_at` twin taking the reading (`now`, nanoseconds on
/// the clock's time base) from the caller instead, for callers that keep their own clock (the
/// Node binding passes JavaScript's). Readings should not go backwards; one that does counts as
/// no time passing.
///
/// # Performance
/// A check is one hash, one clock reading, one wait-free table load, one probe of the table, and
/// one uncontended lock of the key's entry (plus one with an overall quota). Updates that change
/// the key set rebuild the table, `O(keys)` each (and a clone of every key for
/// [`insert`](Self::insert) and [`remove`](Self::remove)), so load many changes at once with
/// [`replace_keys`](Self::replace_keys); quota changes are made in place.
///
/// # Thread safety
/// `Send + Sync` when `K` is. Checks run in parallel and never wait for an update; checks on one
/// key (or on unknown keys, or any check while an overall quota is set) serialize on that
/// bucket's lock for a few dozen instructions (an update moving the bucket takes it for as long).
/// Updates serialize among themselves, and each one that changes the key set waits for the
/// checks still reading the previous table.
pub struct Limiter<K, C = MonotonicClock> {
    /// The current key table, buckets inline (`table.rs`).
    table: ArcSwap<Table<K>>,
    /// Interned quotas of keyed buckets, by quota id.
    quotas: Arena<QuotaCell>,
    /// Seeded per limiter (foldhash): keys come from clients.
    hasher: DefaultHashBuilder,
    best_effort: Bucket,
    overall: Bucket,
    /// Whether the overall bucket limits anything: lets checks skip its lock when it does not.
    overall_limited: AtomicBool,
    /// Serializes updates and holds their bookkeeping.
    writer: Mutex<Writer>,
    clock: C,
}

impl<K: Hash + Eq> Limiter<K> {
    /// A limiter on the real monotonic clock with no keys, `best_effort` for every key, and no
    /// overall quota.
    ///
    /// ```
    /// use keepcount_limits::limiter::{Limit, Limiter, Quota};
    ///
    /// let limiter: Limiter<String> = Limiter::new(Quota::new(Some(Limit::per_second(10, 10)), None));
    /// assert!(limiter.check_one("anyone").is_allowed());
    /// ```
    pub fn new(best_effort: Quota) -> Self {
        Self::with_clock(best_effort, MonotonicClock::new())
    }
}

impl<K: Hash + Eq, C: Clock> Limiter<K, C> {
    /// Like [`new`](Limiter::new), on `clock` (a [`ManualClock`](crate::clock::ManualClock) in
    /// tests; `Arc<ManualClock>` to keep a handle that advances it). The best-effort bucket
    /// starts full as of the clock's reading now.
    pub fn with_clock(best_effort: Quota, clock: C) -> Self {
        let now = clock.now_nanos();
        let empty = Table::with_capacity(0).unwrap_or_else(|_| unreachable!("no keys fit"));
        Self {
            table: ArcSwap::new(Arc::new(empty)),
            quotas: Arena::new(),
            hasher: DefaultHashBuilder::default(),
            best_effort: Bucket::full(best_effort, now),
            overall: Bucket::full(Quota::UNLIMITED, now),
            overall_limited: AtomicBool::new(false),
            writer: Mutex::new(Writer::default()),
            clock,
        }
    }

    /// Checks a cost of one request and `cost` units for `key`, taking it if every bucket that
    /// applies has it: the key's own (or the best-effort bucket for a key not in the table) and
    /// the overall one, if set. A refusal takes nothing from any bucket.
    ///
    /// ```
    /// use keepcount_limits::clock::ManualClock;
    /// use keepcount_limits::limiter::{Decision, Limit, Limiter, Quota};
    /// use std::time::Duration;
    ///
    /// // 1000 bytes a second, bursts of 1500.
    /// let bytes = Quota::new(None, Some(Limit::per_second(1000, 1500)));
    /// let limiter: Limiter<u32, _> = Limiter::with_clock(bytes, ManualClock::new());
    /// assert_eq!(limiter.check(&7, 1000), Decision::Allowed);
    /// assert_eq!(limiter.check(&7, 600).retry_after(), Some(Duration::from_millis(100)));
    /// assert_eq!(limiter.check(&7, 2000), Decision::Never);
    /// ```
    ///
    /// # Performance
    /// Never blocks on an update; see [`Limiter`].
    #[inline]
    pub fn check<Q>(&self, key: &Q, cost: u64) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        // Read the clock before touching any shared state: a slow clock then delays no one.
        self.check_hashed(key, hash, cost, self.clock.now_nanos())
    }

    /// [`check`](Self::check) at clock reading `now`.
    ///
    /// ```
    /// use keepcount_limits::clock::ManualClock;
    /// use keepcount_limits::limiter::{Decision, Limit, Limiter, Quota};
    /// use std::time::Duration;
    ///
    /// // Two a second, bursts of one; the clock only stamps the start (0).
    /// let quota = Quota::new(Some(Limit::per_second(2, 1)), None);
    /// let limiter: Limiter<u8, _> = Limiter::with_clock(quota, ManualClock::new());
    /// assert_eq!(limiter.check_at(&1, 1, 1_000), Decision::Allowed);
    /// assert_eq!(
    ///     limiter.check_at(&1, 1, 1_000).retry_after(),
    ///     Some(Duration::from_millis(500))
    /// );
    /// assert_eq!(limiter.check_at(&1, 1, 500_001_000), Decision::Allowed);
    /// ```
    pub fn check_at<Q>(&self, key: &Q, cost: u64, now: u64) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        self.check_hashed(key, hash, cost, now)
    }

    /// [`check_at`](Self::check_at) for a key whose hash is `hash`.
    #[inline]
    fn check_hashed<Q>(&self, key: &Q, hash: u64, cost: u64, now: u64) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        // Held to the end: the table, and the tables it moved buckets to, live while it does.
        let current = self.table.load();
        let costs = [1, cost];
        let wait = match current.live(hash, key) {
            Some((table, mut locked)) => {
                let quota_id = locked.quota_id();
                // SAFETY: we hold the lock of a bucket referring to `quota_id`. Ids are interned
                // before any bucket refers to them, so the cell always exists; DENY_ALL only
                // keeps this panic-free.
                let Interned {
                    quota,
                    wide,
                    narrow,
                } = self
                    .quotas
                    .get(quota_id)
                    .map_or(&Interned::DENY_ALL, |cell| unsafe { cell.get() });
                // Relaxed: see `set_overall_at`.
                if !*wide && !self.overall_limited.load(Ordering::Relaxed) {
                    let (tokens, last) = locked.counts_mut();
                    admit_narrow(tokens, last, narrow, now, costs)
                } else {
                    let mut state = table.read(&locked, *wide);
                    let wait = self.admit_with_overall((&mut state, quota), now, costs);
                    table.write(&mut locked, state, *wide);
                    wait
                }
            }
            None => {
                let mut best_effort = self.best_effort.lock();
                let Owned { quota, state } = &mut *best_effort;
                self.admit_with_overall((state, quota), now, costs)
            }
        };
        wait.decision()
    }

    /// [`check`](Self::check) with a cost of one unit.
    ///
    /// ```
    /// use keepcount_limits::limiter::{Limiter, Quota};
    ///
    /// let limiter: Limiter<&str> = Limiter::new(Quota::DENY_ALL);
    /// assert!(!limiter.check_one("anyone").is_allowed());
    /// ```
    pub fn check_one<Q>(&self, key: &Q) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.check(key, 1)
    }

    /// The quota of `key`, if it is in the table.
    pub fn quota<Q>(&self, key: &Q) -> Option<Quota>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let current = self.table.load();
        let (_, locked) = current.live(self.hasher.hash_one(key), key)?;
        // SAFETY: we hold the lock of a bucket referring to the id.
        let interned = unsafe { self.quotas.get(locked.quota_id())?.get() };
        let quota = interned.quota;
        drop(locked);
        Some(quota)
    }

    /// The best-effort quota.
    pub fn best_effort(&self) -> Quota {
        self.best_effort.lock().quota
    }

    /// The overall quota, if any.
    pub fn overall(&self) -> Option<Quota> {
        Some(self.overall.lock().quota).filter(Quota::is_limited)
    }

    /// How many keys the table holds.
    pub fn len(&self) -> usize {
        self.table.load().len()
    }

    /// Bytes the key table holds: its entries (each key inline, 40 bytes with a `u64` key) and
    /// `hashbrown`'s control bytes, not what keys own elsewhere on the heap. For callers that
    /// report native memory (the Node binding tells V8).
    ///
    /// ```
    /// use keepcount_limits::limiter::{Limiter, Quota};
    ///
    /// let limiter: Limiter<u64> = Limiter::new(Quota::UNLIMITED);
    /// let empty = limiter.table_bytes();
    /// limiter.replace_keys((0..1000).map(|k| (k, Quota::UNLIMITED))).unwrap();
    /// assert!(limiter.table_bytes() >= empty + 1000 * 40);
    /// ```
    pub fn table_bytes(&self) -> usize {
        self.table.load().allocation_size()
    }

    /// Whether the table holds no key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Admits `costs` against `own` and the overall bucket if it limits anything.
    ///
    /// Inlined by force, with [`admit`]: left to itself the compiler called both out of line and
    /// passed the bucket state through the stack: 18 of a hot-key check's 334 instructions
    /// (callgrind over the check loop alone; 316 inlined).
    #[inline(always)]
    fn admit_with_overall(&self, own: Governed<'_>, now: u64, costs: [u64; 2]) -> Wait {
        // Relaxed: see `set_overall_at`.
        if self.overall_limited.load(Ordering::Relaxed) {
            // Lock order is always own bucket, then overall: no deadlock.
            let mut overall = self.overall.lock();
            let Owned { quota, state } = &mut *overall;
            admit(own, Some((state, quota)), now, costs)
        } else {
            admit(own, None, now, costs)
        }
    }
}
