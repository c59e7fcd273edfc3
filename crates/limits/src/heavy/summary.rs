//! One interval's heavy-hitter summary: [`Summary`], a count-min sketch in front of a bounded
//! exact table. The guarantees are stated in the [module doc](super).

use crate::estimator::{self, Estimator};
use crate::hash::KeyHash;
use std::borrow::Borrow;
use std::fmt;
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::count::{Count, Standing, Talker};
use super::heap_bytes::HeapBytes;
use super::settings::Settings;
use super::table::{Entry, OverflowCounts, Table, rank};

mod merge;

pub use merge::MergeError;

/// A count-min sketch that counts every increment, and an exact table for the keys whose
/// estimate reached the threshold.
///
/// ```
/// use keepcount_limits::heavy::{Settings, Standing, Summary};
/// use keepcount_limits::Shape;
///
/// let summary = Summary::new(Settings::new(Shape::new(4, 1024).unwrap(), 7, 3, 16).unwrap());
/// for _ in 0..10 {
///     summary.incr("flooder", 1);
/// }
/// summary.incr("visitor", 1);
/// let flooder = summary.count("flooder");
/// assert_eq!(flooder.standing, Standing::Tracked);
/// assert!(flooder.lower <= 10 && 10 <= flooder.upper && flooder.slack() < 3);
/// assert_eq!(summary.count("visitor").standing, Standing::BelowThreshold);
/// assert_eq!(summary.top(1)[0].key, "flooder");
/// ```
///
/// # Performance
/// An increment whose estimate stays below the threshold costs exactly an
/// [`Estimator::incr_hash`] plus a comparison. A tracked key's increment adds a shared lock and
/// one table lookup; a key entering takes the lock exclusively once.
///
/// # Thread safety
/// `Send + Sync` when `K` is. The sketch is lock-free; the table is behind one
/// `parking_lot::RwLock`, taken shared to count a tracked key and exclusively to enter a key,
/// merge or reset (see the [module doc](super) for the bounds under concurrent increments).
pub struct Summary<K> {
    sketch: Estimator,
    table: Table<K>,
    settings: Settings,
    /// Set by a merge (and kept until a reset): the sketch then holds increments that did not
    /// pass through [`incr_hash`](Summary::incr_hash), so an entering key's slack is its whole
    /// estimate rather than at most `threshold - 1` (guarantee 2 of the module doc). Also set by
    /// a rotation after idleness that increments raced ([`forget`](Summary::forget)).
    merged: AtomicBool,
    /// Merges made into this summary, never reset: how a rotation after idleness tells whether
    /// one raced with it.
    merges: AtomicU64,
}

/// What a summary held when a rotation after idleness was claimed: what
/// [`forget`](Summary::forget) takes out.
pub(crate) struct Baseline<K> {
    sketch: estimator::Baseline,
    entries: Vec<Entry<K>>,
    overflow: OverflowCounts,
    merges: u64,
}

/// A summary's counters of what it saw and what it could not track.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Keys in the table.
    pub tracked: usize,
    /// The most keys the table holds.
    pub capacity: usize,
    /// Sum of every increment (row 0 of the sketch), at most `u64::MAX`.
    pub total: u64,
    /// Increments of keys over the threshold that found the table full.
    pub overflow_events: u64,
    /// Their summed values.
    pub overflow_weight: u64,
    /// Entries a merge dropped to stay within the capacity.
    pub merge_dropped: u64,
}

impl<K: Hash + Eq + Clone + HeapBytes> Summary<K> {
    /// An empty summary.
    pub fn new(settings: Settings) -> Self {
        Self {
            sketch: Estimator::with_shape(settings.shape(), settings.seed()),
            table: Table::new(settings.capacity()),
            settings,
            merged: AtomicBool::new(false),
            merges: AtomicU64::new(0),
        }
    }

    /// A summary from decoded parts; the codec has checked them.
    pub(crate) fn from_parts(
        sketch: Estimator,
        settings: Settings,
        entries: Vec<Entry<K>>,
        overflow: OverflowCounts,
        merged: bool,
    ) -> Self {
        let summary = Self {
            sketch,
            table: Table::new(settings.capacity()),
            settings,
            merged: AtomicBool::new(merged),
            merges: AtomicU64::new(0),
        };
        summary.table.replace_with(|_| entries);
        summary.table.set_overflow(overflow);
        summary
    }

    /// Hashes `key` once for the pre-hashed API ([`incr_hash`](Self::incr_hash),
    /// [`count_hash`](Self::count_hash)): the sketch's [`Estimator::hash_key`].
    #[inline]
    pub fn hash_key<Q: Hash + ?Sized>(&self, key: &Q) -> KeyHash {
        self.sketch.hash_key(key)
    }

    /// Counts `value` for `key` and returns its bounds after this increment.
    ///
    /// ```
    /// use keepcount_limits::heavy::{Settings, Standing, Summary};
    /// use keepcount_limits::Shape;
    /// let summary = Summary::<String>::new(Settings::new(Shape::new(4, 64).unwrap(), 1, 2, 8).unwrap());
    /// assert_eq!(summary.incr("k", 1).standing, Standing::BelowThreshold);
    /// assert_eq!(summary.incr("k", 1).standing, Standing::Tracked);
    /// ```
    #[inline]
    pub fn incr<Q>(&self, key: &Q, value: u32) -> Count
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.incr_hash(self.hash_key(key), key, value)
    }

    /// [`incr`](Self::incr) for a key hashed with [`hash_key`](Self::hash_key). A `hash` that is
    /// not `key`'s gives wrong answers, never a panic. Advanced API.
    #[inline]
    pub fn incr_hash<Q>(&self, hash: KeyHash, key: &Q, value: u32) -> Count
    where
        K: Borrow<Q>,
        Q: Eq + ToOwned<Owned = K> + ?Sized,
    {
        // u32 fits in isize on every target this crate supports (at least 32-bit pointers, and
        // there only up to i32::MAX); saturate rather than assume.
        let estimate = as_count(
            self.sketch
                .incr_hash(hash, isize::try_from(value).unwrap_or(isize::MAX)),
        );
        if estimate < self.settings.threshold() {
            // Below the threshold now, so below it at every earlier moment of the interval
            // (counters only grow): the key cannot be in the table.
            return Count {
                lower: 0,
                upper: estimate,
                standing: Standing::BelowThreshold,
            };
        }
        // Its previous increment, if any, read an estimate below the threshold (else it would
        // have entered then: the table had room then, since it has now and never shrinks), so
        // its count before this increment is below the threshold too. Unless a merge added
        // counts that never passed through here, or a rotation dropped entries that raced it.
        let slack_cap = || {
            if self.merged() {
                u64::MAX
            } else {
                self.settings.threshold() - 1
            }
        };
        self.table
            .add(hash, key, u64::from(value), estimate, slack_cap)
    }

    /// Takes back `value` counted earlier for `key` (a refund: a request that should not have
    /// counted, e.g. express-rate-limit's `skipSuccessfulRequests`); returns its bounds after.
    ///
    /// A tracked key's exact count drops by `value`, saturating at 0. **The sketch is never
    /// decreased**: other tracked keys share its counters, and an estimate falling back below
    /// the threshold would stop a tracked key's increments from reaching the table, leaving its
    /// upper bound short. So every bound stays sound for the refunded stream: `lower` counts only
    /// increments since entry less refunds (never more than the true count), and `upper` and the
    /// sketch estimates still bound the counts from above; a key not tracked keeps its estimate.
    ///
    /// ```
    /// use keepcount_limits::heavy::{Settings, Summary};
    /// use keepcount_limits::Shape;
    /// let summary = Summary::<String>::new(Settings::new(Shape::new(4, 64).unwrap(), 1, 1, 8).unwrap());
    /// summary.incr("k", 5);
    /// assert_eq!(summary.decr("k", 2).lower, 3);
    /// ```
    pub fn decr<Q>(&self, key: &Q, value: u32) -> Count
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.decr_hash(self.hash_key(key), key, value)
    }

    /// [`decr`](Self::decr) for a key hashed with [`hash_key`](Self::hash_key). Advanced API.
    pub fn decr_hash<Q>(&self, hash: KeyHash, key: &Q, value: u32) -> Count
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        self.lookup(hash, |table| table.refund(hash, key, u64::from(value)))
    }

    /// The bounds of `key`'s count, without counting anything.
    #[inline]
    pub fn count<Q>(&self, key: &Q) -> Count
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.count_hash(self.hash_key(key), key)
    }

    /// [`count`](Self::count) for a key hashed with [`hash_key`](Self::hash_key). Advanced API.
    pub fn count_hash<Q>(&self, hash: KeyHash, key: &Q) -> Count
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        self.lookup(hash, |table| table.get(hash, key))
    }

    /// A key's bounds from its sketch estimate, consulting the table through `tracked` only when
    /// the estimate reached the threshold (below it the key cannot be in the table).
    fn lookup(&self, hash: KeyHash, tracked: impl FnOnce(&Table<K>) -> Option<Count>) -> Count {
        let estimate = as_count(self.sketch.get_hash(hash));
        if estimate < self.settings.threshold() {
            return Count {
                lower: 0,
                upper: estimate,
                standing: Standing::BelowThreshold,
            };
        }
        if let Some(count) = tracked(&self.table) {
            return count;
        }
        // Untracked at or over the threshold. With room in the table now, it had room at each of
        // the key's increments (it never shrinks within an interval), so each of them read an
        // estimate below the threshold, else the key would have entered: other keys raised the
        // estimate since. Its count is below the threshold then, unless a merge or a raced
        // rotation brought counts that never passed through `incr_hash` (as for the slack cap).
        // Without this, a flood of other keys made a key never seen read over a limit.
        if !self.merged() && self.table.len() < self.settings.capacity() {
            return Count {
                lower: 0,
                upper: estimate.min(self.settings.threshold() - 1),
                standing: Standing::BelowThreshold,
            };
        }
        Count {
            lower: 0,
            upper: estimate,
            standing: Standing::Overflow,
        }
    }

    /// The `n` tracked keys with the largest upper bounds (ties: larger lower bound, then
    /// smaller key hash), largest first.
    ///
    /// Every key whose true count reached the threshold is in the table unless it overflowed
    /// ([`Stats`]); so in a summary that has not merged another, when `overflow_events` is 0, a
    /// key missing from `top(capacity)` has a true count below the threshold.
    pub fn top(&self, n: usize) -> Vec<Talker<K>> {
        let mut entries = self.table.entries();
        entries.sort_unstable_by(rank);
        entries.truncate(n);
        entries
            .into_iter()
            .map(|entry| Talker {
                count: entry.count(),
                key: entry.key,
            })
            .collect()
    }

    /// Whether `f` holds for every tracked key and its bounds, stopping at the first for which
    /// it does not; the keys come in no particular order. Unlike [`top`](Self::top), it copies
    /// and sorts nothing: what checking a decoded summary's keys before a merge needs.
    ///
    /// ```
    /// use keepcount_limits::heavy::{Settings, Summary};
    /// use keepcount_limits::Shape;
    /// let summary = Summary::new(Settings::new(Shape::new(2, 64).unwrap(), 1, 2, 8).unwrap());
    /// summary.incr("a", 5);
    /// summary.incr("b", 3);
    /// assert!(summary.all_tracked(|_, count| count.lower >= 3));
    /// assert!(!summary.all_tracked(|key, _| *key != "b"));
    /// ```
    ///
    /// # Thread safety
    /// `f` runs under the table's shared lock: it must not enter keys into, merge or reset this
    /// summary, which take the lock exclusively and would deadlock.
    pub fn all_tracked(&self, f: impl FnMut(&K, Count) -> bool) -> bool {
        self.table.all(f)
    }

    /// Empties the sketch and the table, for a new interval. Not atomic as a whole: increments
    /// racing with a reset may survive it in some rows or in the table.
    pub fn reset(&self) {
        self.table.clear();
        // Relaxed: see merge.
        self.merged.store(false, Ordering::Relaxed);
        self.sketch.reset();
    }

    /// The sketch's counters, the entries and the overflow counters as they are now: read when a
    /// rotation after idleness is about to be claimed, while nobody counts into this summary.
    pub(crate) fn baseline(&self) -> Baseline<K> {
        Baseline {
            sketch: self.sketch.snapshot(),
            entries: self.table.entries(),
            overflow: self.table.overflow(),
            // Relaxed: compared with a later read under the table's lock, which merges hold.
            merges: self.merges.load(Ordering::Relaxed),
        }
    }

    /// Takes `baseline` out, keeping what increments racing with the rotation added: the sketch
    /// subtracts its copy counter by counter ([`Estimator::forget`]), so every increment since
    /// stays whole in it; the table empties, since an entry cannot tell its stale count from
    /// its new one. If increments raced into the table (an entry entered or counted, an overflow,
    /// a merge), their exact counts go with it while the sketch still holds them: a key that
    /// enters again may have counted more than `threshold - 1` before, so the slack cap is
    /// lifted as after a merge until the next reset. Without a race this is a
    /// [`reset`](Self::reset). Stops early once `go_on` returns `false` (another rotation began).
    pub(crate) fn forget(&self, baseline: Baseline<K>, go_on: impl Fn() -> bool) {
        self.sketch.forget(&baseline.sketch, &go_on);
        self.table
            .forget(&baseline.entries, baseline.overflow, &go_on, |changed| {
                // Relaxed, both: under the table's exclusive lock, which merges and entering
                // keys (reading the flag for their slack cap) take too.
                let merged = self.merges.load(Ordering::Relaxed) != baseline.merges;
                self.merged.store(changed || merged, Ordering::Relaxed);
            });
    }

    /// Counters of the table's use and of what it could not track.
    pub fn stats(&self) -> Stats {
        let overflow = self.table.overflow();
        let counters = self.sketch.counters();
        let row0 = counters
            .get(..self.settings.shape().slots())
            .unwrap_or(counters);
        // In i128, which 2^27 counters of at most 2^63 cannot overflow, then capped: an i64 sum
        // wrapped, and three counters saturated by merges read as 2^63 − 3 where they hold
        // 2.8 × 10^19. Relaxed: a sum of independent counters, not a snapshot.
        let total: i128 = row0
            .iter()
            .map(|counter| i128::from(counter.load(Ordering::Relaxed)))
            .sum();
        Stats {
            tracked: self.table.len(),
            capacity: self.table.capacity(),
            total: u64::try_from(total.max(0)).unwrap_or(u64::MAX),
            overflow_events: overflow.events,
            overflow_weight: overflow.weight,
            merge_dropped: overflow.merge_dropped,
        }
    }

    /// The configuration.
    pub fn settings(&self) -> Settings {
        self.settings
    }

    /// The sketch every increment goes to.
    pub fn sketch(&self) -> &Estimator {
        &self.sketch
    }

    /// Bytes in use: the sketch's, the table's current allocation, what the tracked keys own
    /// on the heap ([`key_bytes`](Self::key_bytes)) and the struct itself.
    pub fn memory_bytes(&self) -> usize {
        self.sketch.memory_bytes()
            + self.table.allocation_bytes()
            + self.key_bytes()
            + size_of::<Self>()
    }

    /// What the tracked keys own on the heap ([`HeapBytes`]): nothing for integer keys, their
    /// bytes for `Vec<u8>` or `String` ones. For callers that report native memory (the Node
    /// binding tells V8), which the table's own allocation would leave far short for long keys.
    ///
    /// ```
    /// use keepcount_limits::heavy::{Settings, Summary};
    /// use keepcount_limits::Shape;
    /// let summary = Summary::<Vec<u8>>::new(Settings::new(Shape::new(4, 64).unwrap(), 1, 1, 8).unwrap());
    /// summary.incr(&[7u8; 1000][..], 1);
    /// assert_eq!(summary.key_bytes(), 1000);
    /// summary.reset();
    /// assert_eq!(summary.key_bytes(), 0);
    /// ```
    ///
    /// # Performance
    /// One atomic load: a running total that every change to the set of tracked keys (a key
    /// entering, a merge, a reset, a rotation) keeps up to date under the table's exclusive lock.
    #[inline]
    pub fn key_bytes(&self) -> usize {
        self.table.key_bytes()
    }

    /// Tracked keys' states, for the window and the codec.
    pub(crate) fn entries(&self) -> Vec<Entry<K>> {
        self.table.entries()
    }

    pub(crate) fn overflow(&self) -> OverflowCounts {
        self.table.overflow()
    }

    /// Whether a merge added counts since the last reset.
    pub(crate) fn merged(&self) -> bool {
        // Relaxed: see merge.
        self.merged.load(Ordering::Relaxed)
    }
}

impl<K> fmt::Debug for Summary<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Summary")
            .field("settings", &self.settings)
            // The counters and keys are too many to print.
            .finish_non_exhaustive()
    }
}

/// A sketch estimate as a count: a negative estimate is a counter that wrapped past `i64::MAX`,
/// so the true count is at least that large and `u64::MAX` is a valid upper bound.
pub(crate) fn as_count(estimate: isize) -> u64 {
    u64::try_from(estimate).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests;
