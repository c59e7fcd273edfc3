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
    /// Sum of every increment (row 0 of the sketch).
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
        let total = row0.iter().fold(0i64, |sum, counter| {
            // Relaxed: a sum of independent counters, not a snapshot.
            sum.wrapping_add(counter.load(Ordering::Relaxed))
        });
        Stats {
            tracked: self.table.len(),
            capacity: self.table.capacity(),
            total: as_count(total as isize),
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
mod tests {
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
}
