//! The bounded exact table behind a [`Summary`](super::Summary): keys that crossed the threshold,
//! each with its exact count since entry and the slack that bounds what came before.
//!
//! One `parking_lot::RwLock` guards a `hashbrown::HashTable` keyed by the sketch's own
//! [`KeyHash`] (rapidhash keyed by the seed, so the table resists hash flooding as the sketch does,
//! and a key is hashed once for both). Counting a tracked key takes the lock **shared** and adds
//! to the entry's atomic counter, so tracked keys on many threads do not wait for each other;
//! only a key entering, a merge, a reset and the decoder take it exclusively.

use crate::hash::KeyHash;
use parking_lot::RwLock;
use std::borrow::Borrow;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use super::count::{Count, Standing};
use super::heap_bytes::HeapBytes;

/// A tracked key.
struct Slot<K> {
    hash: KeyHash,
    key: K,
    /// Every increment since entry (the entering one included), exactly, up to `u64::MAX`, where
    /// it stays (reachable only after merges piled counts up: [`add_saturating`]).
    exact: AtomicU64,
    /// An upper bound on the key's count before its first exactly-counted increment. Written
    /// only under the exclusive lock.
    slack: u64,
}

/// A tracked key's state, copied out of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry<K> {
    pub(crate) hash: KeyHash,
    pub(crate) key: K,
    pub(crate) exact: u64,
    pub(crate) slack: u64,
}

impl<K> Entry<K> {
    pub(crate) fn count(&self) -> Count {
        Count {
            lower: self.exact,
            upper: self.exact.saturating_add(self.slack),
            standing: Standing::Tracked,
        }
    }
}

/// What happened to increments of keys that reached the threshold but found the table full.
#[derive(Debug, Default)]
struct Overflow {
    events: AtomicU64,
    weight: AtomicU64,
    merge_dropped: AtomicU64,
}

/// The exact table: at most `capacity` keys, none ever evicted until [`clear`](Table::clear).
pub(crate) struct Table<K> {
    slots: RwLock<hashbrown::HashTable<Slot<K>>>,
    capacity: usize,
    overflow: Overflow,
    /// What the tracked keys own on the heap ([`HeapBytes`]), summed: written only under the
    /// exclusive lock, by every change to the set of keys, so reading it is one load.
    key_bytes: AtomicUsize,
}

/// The overflow counters, read together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct OverflowCounts {
    pub(crate) events: u64,
    pub(crate) weight: u64,
    pub(crate) merge_dropped: u64,
}

impl<K: Eq + HeapBytes> Table<K> {
    /// An empty table; nothing is allocated until the first key enters, and the allocation then
    /// grows with the keys, up to what `capacity` keys need.
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            slots: RwLock::new(hashbrown::HashTable::new()),
            capacity,
            overflow: Overflow::default(),
            key_bytes: AtomicUsize::new(0),
        }
    }

    /// Counts `value` for a key whose sketch estimate, this increment included, is `estimate`
    /// (at least the threshold): exactly if it is tracked; by entering it if there is room, with
    /// the slack `min(estimate - value, slack_cap())` (its estimate before this increment, capped
    /// by what the caller knows of its count before: see the module's guarantee 2); else as
    /// overflow. `slack_cap` is read under the exclusive lock, so it sees what the last merge or
    /// [`forget`](Self::forget) decided.
    pub(crate) fn add<Q>(
        &self,
        hash: KeyHash,
        key: &Q,
        value: u64,
        estimate: u64,
        slack_cap: impl FnOnce() -> u64,
    ) -> Count
    where
        K: Borrow<Q>,
        Q: Eq + ToOwned<Owned = K> + ?Sized,
    {
        {
            let slots = self.slots.read();
            if let Some(slot) = slots.find(hash.to_u64(), |s| s.key.borrow() == key) {
                return counted(slot, value);
            }
            if slots.len() >= self.capacity {
                return self.overflowed(value, estimate);
            }
        }
        let mut slots = self.slots.write();
        // Another thread may have entered the key, or filled the table, between the two locks.
        if let Some(slot) = slots.find(hash.to_u64(), |s| s.key.borrow() == key) {
            return counted(slot, value);
        }
        if slots.len() >= self.capacity {
            return self.overflowed(value, estimate);
        }
        let slack = estimate.saturating_sub(value).min(slack_cap());
        let key = key.to_owned();
        self.add_key_bytes(key.heap_bytes());
        slots.insert_unique(
            hash.to_u64(),
            Slot {
                hash,
                key,
                exact: AtomicU64::new(value),
                slack,
            },
            |s| s.hash.to_u64(),
        );
        Count {
            lower: value,
            upper: value.saturating_add(slack),
            standing: Standing::Tracked,
        }
    }

    fn overflowed(&self, value: u64, estimate: u64) -> Count {
        add_saturating(&self.overflow.events, 1);
        add_saturating(&self.overflow.weight, value);
        Count {
            lower: 0,
            upper: estimate,
            standing: Standing::Overflow,
        }
    }

    /// The key's bounds if it is tracked.
    pub(crate) fn get<Q>(&self, hash: KeyHash, key: &Q) -> Option<Count>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let slots = self.slots.read();
        slots
            .find(hash.to_u64(), |s| s.key.borrow() == key)
            .map(|slot| entry_of(slot, |k| k).count())
    }

    /// Takes back `value` from a tracked key's exact count, saturating at 0; returns its bounds,
    /// or `None` if it is not tracked.
    pub(crate) fn refund<Q>(&self, hash: KeyHash, key: &Q, value: u64) -> Option<Count>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let slots = self.slots.read();
        let slot = slots.find(hash.to_u64(), |s| s.key.borrow() == key)?;
        // Relaxed: as in `counted`. The closure always returns Some, so this cannot fail.
        let before = slot
            .exact
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |exact| {
                Some(exact.saturating_sub(value))
            })
            .unwrap_or_else(|exact| exact);
        let exact = before.saturating_sub(value);
        Some(Count {
            lower: exact,
            upper: exact.saturating_add(slot.slack),
            standing: Standing::Tracked,
        })
    }

    /// Every tracked key's state, in no particular order.
    pub(crate) fn entries(&self) -> Vec<Entry<K>>
    where
        K: Clone,
    {
        let slots = self.slots.read();
        slots.iter().map(|slot| entry_of(slot, K::clone)).collect()
    }

    /// Whether `f` holds for every tracked key and its bounds (in no particular order), stopping
    /// at the first for which it does not: reads the entries in place under the shared lock,
    /// copying none.
    pub(crate) fn all(&self, mut f: impl FnMut(&K, Count) -> bool) -> bool {
        let slots = self.slots.read();
        slots
            .iter()
            .all(|slot| f(&slot.key, entry_of(slot, |k| k).count()))
    }

    /// Keys tracked.
    pub(crate) fn len(&self) -> usize {
        self.slots.read().len()
    }

    /// The most keys the table holds.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes the table has allocated for its slots (not counting what keys own on the heap).
    pub(crate) fn allocation_bytes(&self) -> usize {
        self.slots.read().allocation_size()
    }

    /// What the tracked keys own on the heap ([`HeapBytes`]): a running total, one load.
    #[inline]
    pub(crate) fn key_bytes(&self) -> usize {
        // Relaxed: a figure for memory reports, which publishes nothing else; written under the
        // exclusive lock, so it is the sum of the keys of some moment the lock was released.
        self.key_bytes.load(Ordering::Relaxed)
    }

    /// Adds `bytes` to the running total; under the exclusive lock (the `&mut` guard's caller).
    fn add_key_bytes(&self, bytes: usize) {
        // Relaxed: see `key_bytes`; writers are serialized by the exclusive lock. Saturating:
        // the total of keys that are all in memory fits a usize.
        let total = self.key_bytes.load(Ordering::Relaxed).saturating_add(bytes);
        self.key_bytes.store(total, Ordering::Relaxed);
    }

    pub(crate) fn overflow(&self) -> OverflowCounts {
        // Relaxed: statistics; the three are not a snapshot of one instant.
        OverflowCounts {
            events: self.overflow.events.load(Ordering::Relaxed),
            weight: self.overflow.weight.load(Ordering::Relaxed),
            merge_dropped: self.overflow.merge_dropped.load(Ordering::Relaxed),
        }
    }

    /// Empties the table and zeroes the overflow counters.
    pub(crate) fn clear(&self) {
        let mut slots = self.slots.write();
        slots.clear();
        // Relaxed: see `key_bytes`.
        self.key_bytes.store(0, Ordering::Relaxed);
        self.set_overflow(OverflowCounts::default());
    }

    /// Empties the table for a rotation after idleness, unless `go_on` says another rotation
    /// began, and takes `overflow` (the counters at the claim) out of the overflow counters;
    /// `settle` then runs under the same exclusive lock with whether the table changed since it
    /// held `baseline` (an entry entered or counted, or an overflow), that is whether increments
    /// raced with the rotation: their exact counts go with the table, their sketch counts stay.
    pub(crate) fn forget(
        &self,
        baseline: &[Entry<K>],
        overflow: OverflowCounts,
        go_on: impl Fn() -> bool,
        settle: impl FnOnce(bool),
    ) {
        let mut slots = self.slots.write();
        if !go_on() {
            return;
        }
        // Entries leave only by a clear or a merge (which the caller tells apart), so the same
        // number of entries with the baseline's keys and counts is the baseline's table.
        let changed = slots.len() != baseline.len()
            || baseline.iter().any(|entry| {
                slots
                    .find(entry.hash.to_u64(), |s| s.key == entry.key)
                    // Relaxed: under the exclusive lock no increment is in flight.
                    .is_none_or(|slot| slot.exact.load(Ordering::Relaxed) != entry.exact)
            });
        let now = self.overflow();
        slots.clear();
        // Relaxed: see `key_bytes`.
        self.key_bytes.store(0, Ordering::Relaxed);
        self.set_overflow(OverflowCounts {
            events: now.events.saturating_sub(overflow.events),
            weight: now.weight.saturating_sub(overflow.weight),
            merge_dropped: now.merge_dropped.saturating_sub(overflow.merge_dropped),
        });
        settle(changed || now.events != overflow.events);
    }

    pub(crate) fn set_overflow(&self, counts: OverflowCounts) {
        // Relaxed: statistics.
        self.overflow.events.store(counts.events, Ordering::Relaxed);
        self.overflow.weight.store(counts.weight, Ordering::Relaxed);
        self.overflow
            .merge_dropped
            .store(counts.merge_dropped, Ordering::Relaxed);
    }

    /// Replaces the content with `entries` under one exclusive lock, after `prepare` has run
    /// with the current entries and under the same lock (so no key enters in between): `prepare`
    /// returns the new entries, which are truncated to the capacity by the merge policy
    /// ([`keep_largest`]); the number dropped is added to the overflow counters' `merge_dropped`.
    pub(crate) fn replace_with(&self, prepare: impl FnOnce(Vec<Entry<K>>) -> Vec<Entry<K>>)
    where
        K: Clone,
    {
        let mut slots = self.slots.write();
        let current = slots.iter().map(|slot| entry_of(slot, K::clone)).collect();
        let mut entries = prepare(current);
        let dropped = keep_largest(&mut entries, self.capacity);
        slots.clear();
        slots.reserve(entries.len(), |s| s.hash.to_u64());
        // Relaxed: see `key_bytes`.
        self.key_bytes.store(
            entries.iter().map(|entry| entry.key.heap_bytes()).sum(),
            Ordering::Relaxed,
        );
        for entry in entries {
            slots.insert_unique(
                entry.hash.to_u64(),
                Slot {
                    hash: entry.hash,
                    key: entry.key,
                    exact: AtomicU64::new(entry.exact),
                    slack: entry.slack,
                },
                |s| s.hash.to_u64(),
            );
        }
        add_saturating(&self.overflow.merge_dropped, dropped as u64);
    }
}

/// Adds `value` to a tracked slot and returns its bounds.
fn counted<K>(slot: &Slot<K>, value: u64) -> Count {
    let exact = add_saturating(&slot.exact, value);
    Count {
        lower: exact,
        upper: exact.saturating_add(slot.slack),
        standing: Standing::Tracked,
    }
}

/// Half of `u64::MAX`: a count below it cannot pass `u64::MAX` by concurrent increments (each
/// at most `u32::MAX`; it would take 2^31 of them in flight at once).
const HEADROOM: u64 = u64::MAX / 2;

/// Adds `value` to `counter` and returns the sum, stopping at `u64::MAX`: a count never wraps to
/// a small one, whatever merges piled up before. A count below [`HEADROOM`] (every count not
/// raised there by merges) takes one atomic add, as before; one above it a compare-and-swap loop.
///
/// Relaxed, all: an atomic add needs no ordering to be exact, the counter's slot was published
/// by the table's lock, and the overflow counters are statistics read on their own.
fn add_saturating(counter: &AtomicU64, value: u64) -> u64 {
    if counter.load(Ordering::Relaxed) < HEADROOM {
        return counter
            .fetch_add(value, Ordering::Relaxed)
            .wrapping_add(value);
    }
    // The closure always returns Some, so this cannot fail.
    counter
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |count| {
            Some(count.saturating_add(value))
        })
        .unwrap_or_else(|count| count)
        .saturating_add(value)
}

fn entry_of<'a, K, T>(slot: &'a Slot<K>, key: impl FnOnce(&'a K) -> T) -> Entry<T> {
    Entry {
        hash: slot.hash,
        key: key(&slot.key),
        // Relaxed: the count's latest value; readers need nothing else from it.
        exact: slot.exact.load(Ordering::Relaxed),
        slack: slot.slack,
    }
}

/// The order of [`top`](super::Summary::top) and of the merge's truncation: larger upper bound
/// first, then larger lower bound, then smaller key hash (so the order is the same in every
/// process that shares the seed, whatever the key type).
pub(crate) fn rank<K>(a: &Entry<K>, b: &Entry<K>) -> std::cmp::Ordering {
    let (ca, cb) = (a.count(), b.count());
    cb.upper
        .cmp(&ca.upper)
        .then(cb.lower.cmp(&ca.lower))
        .then(a.hash.to_u64().cmp(&b.hash.to_u64()))
}

/// Keeps the `capacity` entries that rank first; returns how many were dropped.
pub(crate) fn keep_largest<K>(entries: &mut Vec<Entry<K>>, capacity: usize) -> usize {
    if entries.len() <= capacity {
        return 0;
    }
    entries.sort_unstable_by(rank);
    let dropped = entries.len() - capacity;
    entries.truncate(capacity);
    dropped
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(x: u64) -> KeyHash {
        KeyHash::from_u64(x)
    }

    #[test]
    fn enters_with_the_estimate_before_the_increment_as_slack() {
        let table = Table::<u32>::new(2);
        let count = table.add(hash(1), &1, 2, 7, || u64::MAX);
        assert_eq!((count.lower, count.upper), (2, 7));
        let count = table.add(hash(1), &1, 3, 99, || u64::MAX);
        assert_eq!((count.lower, count.upper), (5, 10));
        assert_eq!(table.get(hash(1), &1), Some(count));
    }

    #[test]
    fn refuses_entry_when_full_and_counts_it() {
        let table = Table::<u32>::new(1);
        table.add(hash(1), &1, 1, 5, || u64::MAX);
        let count = table.add(hash(2), &2, 4, 6, || u64::MAX);
        assert_eq!(count.standing, Standing::Overflow);
        assert_eq!((count.lower, count.upper), (0, 6));
        assert_eq!(table.get(hash(2), &2), None);
        let overflow = table.overflow();
        assert_eq!((overflow.events, overflow.weight), (1, 4));
        table.clear();
        assert_eq!(table.overflow(), OverflowCounts::default());
        assert_eq!(table.len(), 0);
    }

    #[test]
    fn keys_with_the_same_hash_stay_apart() {
        let table = Table::<u32>::new(4);
        table.add(hash(9), &1, 1, 5, || 2);
        table.add(hash(9), &2, 2, 5, || 2);
        assert_eq!(table.get(hash(9), &1).unwrap().lower, 1);
        assert_eq!(table.get(hash(9), &2).unwrap().lower, 2);
        // The cap bounds the slack: 5 - 1 = 4 capped to 2.
        assert_eq!(table.get(hash(9), &1).unwrap().upper, 3);
    }

    #[test]
    fn counts_stop_at_u64_max_instead_of_wrapping() {
        let table = Table::<u32>::new(1);
        table.replace_with(|_| {
            vec![Entry {
                hash: hash(1),
                key: 1,
                exact: u64::MAX - 2,
                slack: 0,
            }]
        });
        table.set_overflow(OverflowCounts {
            events: u64::MAX,
            weight: u64::MAX - 1,
            merge_dropped: u64::MAX,
        });
        // Merges piled the counts up: an increment past the maximum stays there, not at 2.
        assert_eq!(table.add(hash(1), &1, 5, 5, || 0).lower, u64::MAX);
        assert_eq!(table.add(hash(1), &1, 1, 5, || 0).lower, u64::MAX);
        assert_eq!(table.get(hash(1), &1).unwrap().lower, u64::MAX);
        assert_eq!(
            table.add(hash(2), &2, 7, 9, || 0).standing,
            Standing::Overflow
        );
        let overflow = table.overflow();
        assert_eq!((overflow.events, overflow.weight), (u64::MAX, u64::MAX));
        table.replace_with(|entries| {
            let mut entries = entries;
            entries.push(Entry {
                hash: hash(3),
                key: 3,
                exact: 1,
                slack: 0,
            });
            entries
        });
        assert_eq!(table.overflow().merge_dropped, u64::MAX);
    }

    #[test]
    fn truncation_keeps_the_largest_upper_bounds() {
        let entry = |h: u64, exact: u64, slack: u64| Entry {
            hash: hash(h),
            key: h,
            exact,
            slack,
        };
        let mut entries = vec![
            entry(1, 5, 0),
            entry(2, 1, 9),
            entry(3, 5, 1),
            entry(4, 6, 0),
        ];
        assert_eq!(keep_largest(&mut entries, 2), 2);
        let kept: Vec<u64> = entries.iter().map(|e| e.key).collect();
        assert_eq!(kept, [2, 4]); // 3 and 4 tie on upper 6; 4 has the larger lower bound
    }
}
