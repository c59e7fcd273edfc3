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
//! `cargo bench -p keepcount-limits --bench limiter`, 2026-11-21, 2-core AMD EPYC VM shared with
//! other work (1-minute load average 1.4–1.9 during the runs), release with LTO. Each run reports
//! the median of 3 interleaved timings of 2M checks per thread, every check admitted; each cell
//! below is the median of 3 such runs. Two-thread figures are wall time over both threads' checks
//! and were noisy (1M keys, keepcount: 165–307 ns across runs). Governor 0.10 is
//! `RateLimiter::keyed` (dashmap, one quota for all keys, TSC clock through `quanta`), pre-filled
//! with every key; "naive" is a `Mutex<std HashMap>` of token counts; ratios are the contender's
//! time over keepcount's. "Before" is the `Arc`-per-key layout this one replaced, run in the same
//! session.
//!
//! | scenario | threads | keepcount | before | governor | naive |
//! |---|---|---|---|---|---|
//! | one hot key | 1 | 47 ns | 43 ns | 27 ns (0.58×) | 47 ns (1.01×) |
//! | one hot key | 2 | 42 ns | 37 ns | 45 ns (1.07×) | 82 ns (1.97×) |
//! | 1M keys, uniform | 1 | 362 ns | 470 ns | 211 ns (0.58×) | 270 ns (0.75×) |
//! | 1M keys, uniform | 2 | 247 ns | 213–416 ns | 92 ns (0.37×) | 301 ns (1.22×) |
//! | heap per key, 1M keys | | 59 B | 164 B | 36 B | 52 B |
//!
//! Against the layout it replaced: 1.3× faster and 2.8× smaller over a million keys, and about 10%
//! slower on one hot key (the slot and quota arenas add two lookups). Governor is level or behind
//! on one key shared by two threads, and still wins everything else, time and memory; why:
//! - **Memory.** Governor keeps one 8-byte GCRA cell per key under one quota for all keys. A slot
//!   here is 40 bytes (the key, the lock, a quota id, the refill time and two exact counts, for
//!   per-key quotas in two dimensions) and the table 16.8 bytes a key at a million keys (2^21
//!   entries of 8 bytes; it grows by doubling, so this is its emptiest).
//! - **Time over many keys.** A check misses the cache twice, on the table entry and on the slot
//!   (`perf annotate`: ~43% and ~47% of its cycles), where governor's dashmap holds the state
//!   inline behind 2 MB of control bytes that stay cached, so it misses about once (callgrind
//!   with an 8 MB last-level cache: 1.85 read misses a check against 0.94). Two changes made
//!   those misses cheaper without removing either. The two arrays (16 MB and 40 MB) were far
//!   beyond the TLB's reach on 4 KB pages, so each miss came with a page walk; they are now on
//!   2 MB pages (`madvise(MADV_HUGEPAGE)`, `pages.rs`: in THP mode `madvise`, the default on many
//!   distributions, nothing is unless asked, and governor's maps are not). And a check starts
//!   loading its table entry's line before it loads the table through `arc-swap`, whose locked
//!   exchange held every later load back: a relaxed copy of where the current table is
//!   (`index::Hint`) gives the address, and a stale copy only prefetches a useless line. Crate
//!   bench, 2026-11-23, 2-core VM at load 1.4–6 from other work, binaries before and after each
//!   change run alternately; governor's time over ours on 1M keys, one thread / two threads, one
//!   bench run each:
//!
//!   - before both: 0.80/0.81, 0.69/0.57, 0.76/0.74, 0.76/0.92, 0.67/0.70, 0.74/0.68;
//!   - huge pages: 1.29/1.19, 1.10/1.39, 1.06/0.85, 0.88/0.78, 0.85/0.74, 0.96/0.70;
//!   - huge pages and prefetch: 1.09/1.06, 1.25/1.42, 1.23/1.07, 1.35/1.11, 0.94/0.94, 1.20/1.18,
//!     1.35/0.99, 1.12/1.04.
//!
//!   A check on its own (no contender between runs, 8M checks): 402–463 ns before, 329–387 with
//!   huge pages, 227–364 with the prefetch as well (6 alternating pairs, faster in every pair).
//!   So over a million keys keepcount is now ahead of governor in most runs on a busy machine
//!   (medians of the 8: 1.22× on one thread, 1.06× on two) but not in all: the misses themselves
//!   remain, and on a quiet one (load 0.1–0.5, three runs, 2026-11-23) governor is ahead in every
//!   run (0.75–0.84× and 0.82–0.86×): what competes for the caches decides. The hot
//!   key is unchanged (35–46 ns either way) and, at load 1.3–2.8, one thread on it is level with
//!   governor or slightly behind, before these changes and after (0.75–1.03× before, 0.76–1.51×
//!   after, medians 0.98× and 0.96×; 3 interleaved runs of 7 rounds each in a separate harness:
//!   0.97–1.00× both), two threads ahead (1.08–1.76× after). Tried and dropped: prefetching a
//!   slot's second cache line before its key comparison (40-byte slots straddle lines half the
//!   time), again with huge pages and with the table prefetch; 64-byte-aligned slots (83 bytes
//!   a key: ~5% faster alone, not worth 40% more memory); a table of 4-byte entries (11-bit
//!   tags; 8 MB, 50 bytes a key: no faster alone).
//!   Holding buckets inline would save a miss but means moving them when the table is rebuilt,
//!   which readers that never block would have to follow; dashmap's readers take a shard lock
//!   that its writers hold.
//! - **Time on one key.** Of the 47 ns, the clock took about 20 when `MonotonicClock` was
//!   `Instant` (a vDSO `clock_gettime`; governor reads the TSC): [`check_at`](Limiter::check_at)
//!   with the caller's reading costs ~27 ns. `MonotonicClock` now reads the TSC too (`quanta`),
//!   scaled from a raw origin; with the slot handed back by the key comparison, the quota read in
//!   place and arenas of plain published pointers, a hot-key check went from 367 instructions to
//!   about 310 (callgrind over the whole program; governor 286). Counted over the check loop
//!   alone (collection toggled on it), a check makes 316 with `admit` inlined by force, governor
//!   243: the `arc-swap` load and release are about 60 of ours, the clock, the two arena lookups
//!   and the two-dimension `u128` arithmetic most of the rest. In the run inside `npm run bench`
//!   on 2026-11-23 (load 1.2–2.4) governor took 1.44× keepcount's time on one hot key and 1.11×
//!   on two threads, and keepcount 1.2× governor's over a million keys (0.83× and 0.84× its
//!   speed), where the misses above dominate. What remains on one key is four atomic read-modify-writes: the `arc-swap`
//!   load and its release, the slot's lock and unlock. A spinlock released by a plain store was
//!   tried for the last one and measured no faster; a hand-written per-thread reader record in
//!   place of `arc-swap` saved one of them on a hot key but nothing over many keys, and a
//!   well-kept crate is worth more here than our own reclamation code. `crossbeam-epoch` in place
//!   of `arc-swap` (one compare-and-swap on a thread-local word to pin, a plain store to unpin)
//!   took a tight hot-key loop from 32 to 28.5 ns (governor 24.3 in the same process) but was not
//!   kept: the crate bench could not tell it apart from `arc-swap` on any of its four rows, a
//!   table replacement must then wait for the process-wide epoch to advance twice (the 8,000
//!   replacements of `tests/limiter_reuse.rs` took 1–3 s against 0.6 s), and any thread pinned
//!   for long anywhere in the process, by any crate, would hold every update back.

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
