//! [`SharedLimiter`]: token buckets, one per key, in a segment every process of the host maps.
//!
//! # What
//! One bucket per key under one [`Quota`] for every key, created on a key's first check, so a
//! client's bucket holds for all the processes that serve it; a key table whose capacity is fixed
//! when the segment is created; and one best-effort bucket, under a quota of its own, that a key
//! arriving once the table is full shares when no entry it could take over holds a full bucket
//! ("A full table" below). Sending a check there is counted ([`SharedLimiterStats::overflow`]); it
//! is never an error.
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
//!   full bucket, so a new key needs no initialisation. A limit whose full bucket does not fit 64
//!   bits of units as written (a day's period is 8.64 × 10^13 ns, so any burst above 213,503) is
//!   stored in lowest terms, `amount` and `period` divided by their gcd, which decides exactly
//!   alike ([`Limit`](crate::limiter::Limit)'s units scale by the gcd): a million a day, or 100
//!   MB a second in bursts of 100 GB, fits. One that does not fit even so (one request a day,
//!   bursts above 213,503) is refused ([`SharedError::WideQuota`]). Processes opening with
//!   quotas that decide alike share the segment, counting in the form it was created with.
//! - **A key** is stored as its 128-bit SipHash-1-3 keyed by the segment's seed (0 marks an empty
//!   entry; a key hashing to 0 is stored as 1). Two keys are one bucket only if their 128-bit
//!   hashes collide: about `n² / 2^129` for `n` keys by chance (below 10^-25 at a million keys), and
//!   an attacker who does not know the seed cannot aim for a collision, nor for a probe sequence,
//!   since the table position comes from the same keyed hash. Keep the seed secret.
//! - **The table** has the power-of-two number of entries that keeps it at most 3/4 full at
//!   capacity, and is probed linearly from the hash. A key is claimed with one compare-and-swap of
//!   its entry from 0 to its hash: claiming and writing the key are one step, so no process can
//!   die between them. A key lives within its **reach**: its probe path up to the later of 32
//!   entries (once the table has seen a takeover; until then no key lies past an empty entry) and
//!   the first empty one. A probe reads the whole reach before it calls a key absent,
//!   and a new key claims the first empty entry in it; no entry is ever emptied, so a key's reach
//!   only ever grows and a key once in it stays found. A header word counts the claimed entries; a
//!   check reserves one (load, then add) before claiming and gives it back if another process
//!   claimed the entry first. A process killed between reserving and claiming leaks one
//!   reservation: the table then takes one key fewer, and that is all a crash can cost it.
//!
//! # A full table
//! Once `capacity` keys hold an entry, a new key **takes over** the first entry in its reach whose
//! bucket is full at the check's reading, with one compare-and-swap of the identity from the old
//! key's to its own; only if every entry in its reach is empty or holds a bucket in use does it go
//! to the best-effort bucket. Once every bucket has refilled, fewer than 1 new key in 6,000 finds
//! none while the new keys number up to a tenth of the capacity, 1 in 700 up to a quarter, 1 in
//! 70 up to a half (simulated at the emptiest full table, 3/8 of the entries claimed; the default
//! capacity's table is half full at capacity, and fuller tables do better). Past that, new keys
//! hold most entries, their buckets in use, and more and more go to the best-effort bucket. A full bucket
//! is exactly what a new key starts with, so the takeover costs neither key anything: the new key
//! gets what it would have got from an empty entry, and the old key, if it comes back, is new
//! again and starts full, as its own bucket would have been. A bucket that is not full is never
//! taken over: a flood of new keys (a botnet's addresses, say) cannot reset a client's spent
//! tokens, nor keep the table from new clients for longer than its own buckets take to refill
//! (`burst / rate` after each flooding key's last check). Before takeovers, such a flood filled the
//! table for good: every later new key shared the best-effort bucket until the segment was
//! unlinked. [`SharedLimiterStats::takeovers`] counts them.
//!
//! A takeover changes only an identity word, so a process killed at any point leaves the entry to
//! one key or the other, both with the same full bucket. Two races remain, each only at the
//! instant of a takeover, and each worth at most one check per racing process (a key's bucket
//! must have been full, so its key idle for a whole refill, for either to happen again):
//! - A check of the old key that found its entry just before the takeover takes its cost from the
//!   bucket the new key now holds: the new key is short that cost (it is refused sooner), and the
//!   old key, new again on its next check, gets the cost back.
//! - Two processes giving one new key an entry at the same instant by different routes (one
//!   claiming the last empty entry while the table fills, the other taking over a full one, or
//!   each taking over another entry because a bucket filled between their readings) give it two
//!   entries: its checks use the first on its probe path, and what the racing check took from the
//!   other is admitted on top of its bucket, once.
//!
//! # When not to use it
//! - Keys whose buckets rarely fill between checks, more of them than `capacity`: once every entry
//!   holds a bucket in use, new keys share the best-effort bucket until some bucket refills. Size
//!   the capacity for the keys active within one refill time (`burst / rate`), and watch
//!   [`SharedLimiterStats::overflow`].
//! - Per-key quotas, live quota changes or an overall quota: those are the local
//!   [`Limiter`](crate::limiter::Limiter)'s. Here the quotas are fixed in the segment's header.
//! - Within one process: the local limiter needs no file.

use crate::clock::{Clock, HostClock};
use crate::limiter::{Decision, Quota};
use crate::shape::Shape;
use crate::shared::error::SharedError;
use crate::shared::layout::{
    BEST_EFFORT_OFFSET, KEYS_WORD_OFFSET, Kind, Layout, LimiterLayout, OVERFLOW_WORD_OFFSET,
    TAKEOVERS_WORD_OFFSET, table_entries,
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
/// 16-byte loads at 3/4 load for a key in it; a key not in it reads its whole reach, 32 entries
/// once the table has seen a takeover), and does one 128-bit compare-and-swap per limited
/// dimension when admitting, none when refusing. A new key meeting a full table also reads the
/// buckets of its reach for one to take over: from Node, a loop of new keys against a full table
/// of 65,536 buckets all in use took ~500 ns a check, against ~260 ns before takeovers existed
/// (three alternating runs each, 28 Nov 2026): the price, paid only while a table is full, of
/// never locking new clients out.
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
    /// full and no entry on the key's probe path held a full bucket, by every process since the
    /// segment was created.
    pub overflow: u64,
    /// Entries a new key took over from a key whose bucket was full, once the table was full, by
    /// every process since the segment was created.
    pub takeovers: u64,
}

impl SharedLimiter {
    /// Opens (or creates) the shared limiter `name`: a bucket under `quota` for each of up to
    /// `capacity` keys, `best_effort` for the keys beyond, keys identified by `seed`.
    ///
    /// # Errors
    /// [`SharedError::Capacity`] unless `1 ≤ capacity ≤ MAX_CAPACITY`; [`SharedError::WideQuota`]
    /// if a full bucket of either quota is `2^64` units or more in lowest terms
    /// (`burst × period / gcd(amount, period)`, the period in nanoseconds);
    /// [`SharedError::NoWideAtomics`] without lock-free 128-bit atomics; and the errors of every
    /// shared segment, [`SharedError::Mismatch`] naming `kind`, `capacity`, `quota` (one that
    /// decides otherwise than the segment's), `bestEffort` or `seed`.
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
        let block = LimiterLayout::new(capacity, quota, best_effort);
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
        // The segment's own quotas, which every process counts its buckets in: the ones asked for,
        // or quotas that decide alike in another form (LimiterLayout::difference). A limiter
        // segment always has its block.
        let block = segment.layout().limiter.unwrap_or(block);
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
        let now = self.clock.now_nanos();
        let bucket = match self.entry(id, now) {
            Some(entry) => (entry + 16, &self.block.quota),
            None => (BEST_EFFORT_OFFSET, &self.block.best_effort),
        };
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
            takeovers: self
                .segment
                .word(TAKEOVERS_WORD_OFFSET)
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
mod tests;
