//! The key table: an open-addressing array of 8-byte entries, each a slot index and the top 32
//! bits of its key's hash, probed linearly.
//!
//! Why not `hashbrown::HashTable<u32>`: its control bytes and its values are two arrays, so a
//! lookup misses the cache on both before it misses on the slot (measured: 3 dependent misses a
//! check over a million keys, ~30% of the time each). Here the tag and the index share an entry,
//! and a probe sequence stays within a cache line or two: one miss in the table, then the slot.
//!
//! The top `bits` of the hash pick the home entry and the whole top 32 bits are the tag, so the
//! home of an entry is its tag's top `bits`: growing and deleting move entries by their tags
//! alone, without rehashing keys. A table is immutable once published; writers build a new one.

use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};

use super::LimiterError;
use super::pages::Pages;

/// An entry: tag in the high 32 bits, slot index + 1 in the low 32 bits; 0 is empty.
type Entry = u64;
const EMPTY: Entry = 0;
/// Fewest entries a table has.
const MIN_BITS: u32 = 3;
/// Most: tags are 32 bits, so homes can be at most 32 bits.
const MAX_BITS: u32 = 32;

/// Slot indexes by key hash.
#[derive(Clone)]
pub(crate) struct Index {
    /// Huge-page backed from 2 MB (256K entries) on: see `pages.rs`.
    entries: Pages<Entry>,
    /// log2 of `entries.len()`.
    bits: u32,
    len: usize,
}

/// The entries a table of `len` keys gets: at most 3/4 full, so that the probe for a key that is
/// not there (every check of a best-effort key) expects under 9 entries, about one cache line.
fn bits_for(len: usize) -> Result<u32, LimiterError> {
    let wanted = (len as u64).saturating_mul(4) / 3 + 1;
    let bits = wanted.next_power_of_two().trailing_zeros().max(MIN_BITS);
    if bits > MAX_BITS {
        return Err(LimiterError::TooManyKeys);
    }
    Ok(bits)
}

impl Index {
    /// An empty table.
    pub(crate) fn new() -> Self {
        Self {
            entries: Pages::from_fn(1 << MIN_BITS, |_| EMPTY),
            bits: MIN_BITS,
            len: 0,
        }
    }

    /// An empty table with room for `len` keys.
    pub(crate) fn with_capacity(len: usize) -> Result<Self, LimiterError> {
        let bits = bits_for(len)?;
        Ok(Self {
            entries: Pages::from_fn(1 << bits, |_| EMPTY),
            bits,
            len: 0,
        })
    }

    /// How many keys the table holds.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn mask(&self) -> usize {
        self.entries.len() - 1
    }

    /// The home entry of tag `tag`.
    fn home(&self, tag: u32) -> usize {
        (tag >> (32 - self.bits)) as usize
    }

    /// The slot index of the key with `hash` for which `eq` holds, if any.
    #[inline]
    pub(crate) fn find(&self, hash: u64, mut eq: impl FnMut(u32) -> bool) -> Option<u32> {
        let tag = (hash >> 32) as u32;
        let mask = self.mask();
        let mut at = self.home(tag);
        // At most one pass: the table is never full, so an empty entry ends every probe sooner.
        for _ in 0..self.entries.len() {
            let entry = *self.entries.get(at)?;
            if entry == EMPTY {
                return None;
            }
            if (entry >> 32) as u32 == tag {
                let id = (entry as u32).wrapping_sub(1);
                if eq(id) {
                    return Some(id);
                }
            }
            at = (at + 1) & mask;
        }
        None
    }

    /// Adds slot `id` (below `u32::MAX`) for a key with `hash` that is not in the table, growing
    /// it if needed.
    pub(crate) fn insert(&mut self, hash: u64, id: u32) -> Result<(), LimiterError> {
        if bits_for(self.len + 1)? > self.bits {
            self.grow()?;
        }
        // `id + 1` cannot wrap: slot indexes stop below u32::MAX.
        self.place(((hash >> 32) << 32) | u64::from(id.wrapping_add(1)));
        self.len += 1;
        Ok(())
    }

    /// Puts `entry` in the first empty entry from its home. There is always one.
    fn place(&mut self, entry: Entry) {
        let mask = self.mask();
        let mut at = self.home((entry >> 32) as u32);
        for _ in 0..self.entries.len() {
            if let Some(free @ &mut EMPTY) = self.entries.get_mut(at) {
                *free = entry;
                return;
            }
            at = (at + 1) & mask;
        }
    }

    /// Doubles the entries (or more), re-placing each by its tag.
    fn grow(&mut self) -> Result<(), LimiterError> {
        let bits = bits_for(self.len + 1)?.max(self.bits + 1);
        if bits > MAX_BITS {
            return Err(LimiterError::TooManyKeys);
        }
        let old = std::mem::replace(&mut self.entries, Pages::from_fn(1 << bits, |_| EMPTY));
        self.bits = bits;
        for &entry in old.iter().filter(|&&e| e != EMPTY) {
            self.place(entry);
        }
        Ok(())
    }

    /// Removes slot `id`, whose key has `hash`; returns whether it was there.
    pub(crate) fn remove(&mut self, hash: u64, id: u32) -> bool {
        let Some(mut hole) = self.position(hash, id) else {
            return false;
        };
        // Backward-shift deletion: pull later entries of the cluster into the hole when their
        // home is not between the hole and them, so no probe ever stops early.
        let mask = self.mask();
        let mut at = (hole + 1) & mask;
        for _ in 0..self.entries.len() {
            let entry = self.entries[at];
            if entry == EMPTY {
                break;
            }
            let home = self.home((entry >> 32) as u32);
            if (at.wrapping_sub(home) & mask) >= (at.wrapping_sub(hole) & mask) {
                self.entries[hole] = entry;
                hole = at;
            }
            at = (at + 1) & mask;
        }
        self.entries[hole] = EMPTY;
        self.len -= 1;
        true
    }

    /// Where slot `id` sits.
    fn position(&self, hash: u64, id: u32) -> Option<usize> {
        let wanted = ((hash >> 32) << 32) | u64::from(id.wrapping_add(1));
        let mask = self.mask();
        let mut at = self.home((hash >> 32) as u32);
        for _ in 0..self.entries.len() {
            match self.entries[at] {
                EMPTY => return None,
                entry if entry == wanted => return Some(at),
                _ => at = (at + 1) & mask,
            }
        }
        None
    }

    /// Every slot index in the table.
    pub(crate) fn ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.entries
            .iter()
            .filter(|&&e| e != EMPTY)
            .map(|&e| (e as u32).wrapping_sub(1))
    }
}

/// Where the current table's entries start and how far to shift a hash for its home: a copy,
/// for prefetching only. The two may be from different tables while one is being published;
/// then a prefetch lands elsewhere, which costs a cache line and nothing else.
#[derive(Default)]
pub(crate) struct Hint {
    entries: AtomicPtr<Entry>,
    shift: AtomicU32,
}

impl Hint {
    /// Points the hint at `table`. Writer only.
    pub(crate) fn publish(&self, table: &Index) {
        // Relaxed: a hint orders nothing; a stale one only prefetches a useless line.
        self.entries
            .store(table.entries.as_ptr().cast_mut(), Ordering::Relaxed);
        self.shift.store(64 - table.bits, Ordering::Relaxed);
    }

    /// Starts loading the line where the probe for `hash` begins, so that its cache miss overlaps
    /// the table load through `arc-swap` (whose locked exchange holds back every later load).
    #[inline]
    pub(crate) fn prefetch(&self, hash: u64) {
        // Relaxed: see `publish`.
        let entries = self.entries.load(Ordering::Relaxed);
        let home = (hash >> self.shift.load(Ordering::Relaxed)) as usize;
        let at = entries.wrapping_add(home).cast::<i8>();
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch is a hint: it never faults and reads nothing into the program, so
        // any address is allowed, including one past a table or in a freed one. SSE, which the
        // intrinsic needs, is part of x86-64.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(at)
        };
        #[cfg(not(target_arch = "x86_64"))]
        let _ = at;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hash whose tag is `tag`.
    fn hash(tag: u32) -> u64 {
        u64::from(tag) << 32 | 0xdead
    }

    #[test]
    fn finds_what_it_holds_and_nothing_else() {
        let mut index = Index::with_capacity(0).unwrap();
        for id in 0..1000u32 {
            index
                .insert(hash(id.wrapping_mul(0x9e37_79b9)), id)
                .unwrap();
        }
        assert_eq!(index.len(), 1000);
        for id in 0..1000u32 {
            let h = hash(id.wrapping_mul(0x9e37_79b9));
            assert_eq!(index.find(h, |found| found == id), Some(id));
        }
        assert_eq!(index.find(hash(5), |_| true), None);
        let mut ids: Vec<u32> = index.ids().collect();
        ids.sort_unstable();
        assert_eq!(ids, (0..1000).collect::<Vec<_>>());
    }

    #[test]
    fn colliding_tags_are_told_apart_by_the_caller() {
        let mut index = Index::with_capacity(4).unwrap();
        for id in 0..5 {
            index.insert(hash(7), id).unwrap();
        }
        for id in 0..5 {
            assert_eq!(index.find(hash(7), |found| found == id), Some(id));
        }
    }

    #[test]
    fn removal_keeps_every_other_key_reachable() {
        // One long cluster wrapping around the end of the table, removed from in every order.
        for removed in 0..12u32 {
            let mut index = Index::with_capacity(12).unwrap();
            let tag = |id: u32| u32::MAX - (id % 3) * 0x0100_0000;
            for id in 0..12 {
                index.insert(hash(tag(id)), id).unwrap();
            }
            assert!(index.remove(hash(tag(removed)), removed));
            assert!(!index.remove(hash(tag(removed)), removed));
            for id in (0..12).filter(|&id| id != removed) {
                assert_eq!(
                    index.find(hash(tag(id)), |f| f == id),
                    Some(id),
                    "{removed}"
                );
            }
            assert_eq!(index.find(hash(tag(removed)), |f| f == removed), None);
            assert_eq!(index.len(), 11);
        }
    }

    /// Random inserts and removals against a `HashSet` model, with few distinct tags so that
    /// clusters are long and wrap around, through growth.
    #[test]
    fn agrees_with_a_map_under_random_inserts_and_removals() {
        let mut state = 0x5eed_u64;
        let mut next = || {
            // splitmix64
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        let mut index = Index::new();
        let mut model = std::collections::HashSet::new();
        for step in 0..20_000u32 {
            let id = (next() % 500) as u32;
            // 40 tags, clustered at the top and bottom of the table.
            let tag = |id: u32| [0u32, u32::MAX][(id % 2) as usize] ^ (id % 40);
            if next() % 3 == 0 {
                assert_eq!(index.remove(hash(tag(id)), id), model.remove(&id));
            } else if model.insert(id) {
                index.insert(hash(tag(id)), id).unwrap();
            }
            assert_eq!(index.len(), model.len(), "step {step}");
            let probe = (next() % 500) as u32;
            let found = index.find(hash(tag(probe)), |f| f == probe);
            assert_eq!(found.is_some(), model.contains(&probe), "step {step}");
        }
        let mut ids: Vec<u32> = index.ids().collect();
        ids.sort_unstable();
        let mut expected: Vec<u32> = model.into_iter().collect();
        expected.sort_unstable();
        assert_eq!(ids, expected);
    }

    #[test]
    fn stays_at_most_three_quarters_full() {
        assert_eq!(bits_for(0).unwrap(), MIN_BITS);
        assert_eq!(bits_for(1_000_000).unwrap(), 21);
        assert_eq!(bits_for(700_000).unwrap(), 20);
        assert_eq!(bits_for(usize::MAX), Err(LimiterError::TooManyKeys));
    }
}
