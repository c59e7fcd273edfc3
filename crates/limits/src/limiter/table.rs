//! The key table: every configured key with its bucket inline, in a `hashbrown` table that is
//! immutable in shape once published; each update builds the next table and moves the buckets
//! into it one by one, under their locks.
//!
//! # Why inline
//! Over a million keys nothing stays cached but `hashbrown`'s control bytes (one byte a bucket,
//! 2 MB at a million keys), so a check misses the cache about once, on the entry that holds both
//! the key it compares and the bucket it updates. The layout this replaced kept buckets in an
//! arena apart from an index of slot numbers, so that updates never moved a bucket; a check then
//! missed twice, once in the index and once in the arena, and governor (buckets inline in a
//! `dashmap`) was ahead by 1.2–1.3× (see the limiter's performance notes).
//!
//! # Moving buckets without making checks wait
//! A table is never changed in shape after it is published; only the contents of its entries
//! change, each under the entry's own lock. An update builds the next table (keys, quotas, full
//! buckets for added keys), links it from the current one ([`Table::next`]), then visits every
//! entry of the current table: under its lock, copies its bucket to the same key's entry in the
//! next table (if the key stays) and marks it *moved*. Only then is the next table published.
//! A check that locks a moved entry drops the lock and looks the key up in the next table, where
//! its bucket now is: it never waits for the update, only, like any check, for the few dozen
//! instructions another thread holds the same bucket. So each key's bucket is in exactly one
//! entry at any time (the one not moved), and no token is lost or counted twice by a move.
//!
//! The rules that make this sound, upheld by the writer (`update.rs`):
//! - A table's keys and shape are written before anything can reach it (the writer builds it
//!   alone; [`Table::link`] and the `arc-swap` store publish it with release ordering), so
//!   probes and key comparisons need no lock.
//! - An entry's quota id, counts and moved mark are read and written only under its lock.
//! - [`Table::link`] happens before the first entry is marked moved, so a check that sees an
//!   entry moved (under its lock) also sees where to go.
//! - A table lives as long as any check holding it (an `arc-swap` guard), and holds the next
//!   one, so a chain of moved entries can always be followed.

use std::borrow::Borrow;
use std::cell::UnsafeCell;
use std::sync::{Arc, OnceLock};

use hashbrown::{HashMap, HashTable};
use parking_lot::lock_api::RawMutex as _;
use parking_lot::{Mutex, RawMutex};

use super::LimiterError;
use super::bucket::State;
use super::pages::HugePages;

/// The most keys a table holds: the limit the limiter documents (ids of quotas are `u32`, and
/// the limiter has always promised `u32::MAX − 1` keys).
const MAX_KEYS: usize = u32::MAX as usize - 1;

/// One configured key and its bucket.
///
/// 40 bytes for a `u64` key: the key, the one-byte lock, the moved mark, the quota id and the
/// bucket's 24 bytes of counts, so that on a check the key comparison and the bucket update share
/// one entry.
pub(crate) struct Entry<K> {
    lock: RawMutex,
    /// Under the lock: whether the bucket has moved to the next table (or the key was removed).
    moved: UnsafeCell<bool>,
    /// The id of the quota in force. Read under the lock, or by the writer; written only by the
    /// writer, under the lock (checks never write it, so the writer may read it without the lock).
    quota: UnsafeCell<u32>,
    /// Under the lock: the bucket's counts.
    counts: UnsafeCell<Counts>,
    key: K,
}

// SAFETY: the counts and the moved mark are touched only under `lock`, the quota id as its field
// says; the key is written before the entry's table is published and only read afterwards, hence
// `K: Sync`; a table may be dropped on another thread than the one that built it, hence
// `K: Send`.
unsafe impl<K: Send + Sync> Sync for Entry<K> {}

/// A bucket's [`State`] in 24 bytes. Token counts keep their low 64 bits here: a full bucket of
/// `burst × period` units fits them unless the quota is wide
/// ([`Interned::wide`](super::arena::Interned::wide)), whose entries keep the high halves in
/// their table's side map ([`Table::wide`]): wide quotas (bursts of billions of tokens a second)
/// are too rare to cost every entry 16 more bytes.
#[derive(Clone, Copy)]
struct Counts {
    tokens: [u64; 2],
    last: u64,
}

impl Counts {
    /// The low halves of `state`.
    fn low(state: State) -> Self {
        Self {
            tokens: state.tokens.map(|t| t as u64),
            last: state.last,
        }
    }
}

impl<K> Entry<K> {
    /// An entry for `key` holding `state` (the low halves of its counts) under quota `quota`.
    pub(crate) fn new(key: K, quota: u32, state: State) -> Self {
        Self {
            lock: RawMutex::INIT,
            moved: UnsafeCell::new(false),
            quota: UnsafeCell::new(quota),
            counts: UnsafeCell::new(Counts::low(state)),
            key,
        }
    }

    /// The entry's key.
    pub(crate) fn key(&self) -> &K {
        &self.key
    }

    /// The id of the quota in force, read without the lock.
    ///
    /// # Safety
    /// The caller holds the limiter's writer lock: only the writer changes quota ids.
    pub(crate) unsafe fn writer_quota_id(&self) -> u32 {
        // SAFETY: per the contract, no write is concurrent; concurrent reads are fine.
        unsafe { *self.quota.get() }
    }

    /// Takes the entry's lock: parks if another thread holds it (for a few dozen instructions).
    #[inline]
    pub(crate) fn lock(&self) -> Locked<'_, K> {
        self.lock.lock();
        Locked { entry: self }
    }

    /// Takes the entry's lock if no one holds it. (The guard is made only on success: a guard
    /// dropped unlocks.)
    pub(crate) fn try_lock(&self) -> Option<Locked<'_, K>> {
        self.lock.try_lock().then(|| Locked { entry: self })
    }

    /// The entry's address, which names it in its table's side map of wide counts: entries never
    /// move within a published table.
    fn address(&self) -> usize {
        std::ptr::from_ref(self) as usize
    }
}

/// Exclusive access to an entry's bucket; unlocks on drop.
pub(crate) struct Locked<'a, K> {
    entry: &'a Entry<K>,
}

impl<'a, K> Locked<'a, K> {
    /// Whether the bucket has moved on (see the module docs): the key must be looked up again in
    /// the next table.
    #[inline]
    pub(crate) fn moved(&self) -> bool {
        // SAFETY: we hold the lock.
        unsafe { *self.entry.moved.get() }
    }

    /// Marks the bucket moved. Writer only, after [`Table::link`].
    pub(crate) fn set_moved(&mut self) {
        // SAFETY: we hold the lock.
        unsafe { *self.entry.moved.get() = true };
    }

    /// The id of the quota in force.
    #[inline]
    pub(crate) fn quota_id(&self) -> u32 {
        // SAFETY: we hold the lock, so no one writes the id.
        unsafe { *self.entry.quota.get() }
    }

    /// The bucket's packed counts, for the 64-bit path of a check (`bucket::admit_narrow`):
    /// the low halves of the tokens, which are the whole counts unless the quota is wide.
    #[inline(always)]
    pub(crate) fn counts_mut(&mut self) -> (&mut [u64; 2], &mut u64) {
        // SAFETY: we hold the lock, and `&mut self` lends the counts out once.
        let counts = unsafe { &mut *self.entry.counts.get() };
        (&mut counts.tokens, &mut counts.last)
    }

    /// Puts quota id `quota` in force. Writer only.
    pub(crate) fn set_quota_id(&mut self, quota: u32) {
        // SAFETY: we hold the lock, and the writer is the only one to write the id.
        unsafe { *self.entry.quota.get() = quota };
    }
}

impl<K> Drop for Locked<'_, K> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: the guard exists only while this thread holds the lock.
        unsafe { self.entry.lock.unlock() };
    }
}

/// The keys of one version of the limiter's configuration, with their buckets.
pub(crate) struct Table<K> {
    entries: HashTable<Entry<K>, HugePages>,
    /// The table that replaced this one, once an update has begun moving buckets into it.
    next: OnceLock<Arc<Table<K>>>,
    /// High halves of the counts of entries under wide quotas, by entry address. Locked after
    /// the entry (never the other way round).
    wide: Mutex<HashMap<usize, [u64; 2]>>,
}

impl<K> Table<K> {
    /// An empty table with room for `len` keys without growing.
    ///
    /// # Errors
    /// [`LimiterError::TooManyKeys`] beyond `u32::MAX − 1` keys or if the memory cannot be had.
    pub(crate) fn with_capacity(len: usize) -> Result<Self, LimiterError> {
        if len > MAX_KEYS {
            return Err(LimiterError::TooManyKeys);
        }
        let mut entries = HashTable::new_in(HugePages);
        entries
            .try_reserve(len, |_: &Entry<K>| 0)
            .map_err(|_| LimiterError::TooManyKeys)?;
        Ok(Self {
            entries,
            next: OnceLock::new(),
            wide: Mutex::new(HashMap::new()),
        })
    }

    /// How many keys the table holds.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Bytes of the table's one allocation (entries and control bytes).
    pub(crate) fn allocation_size(&self) -> usize {
        self.entries.allocation_size()
    }

    /// The entry of `key`, whose hash is `hash`.
    #[inline]
    pub(crate) fn find<Q>(&self, hash: u64, key: &Q) -> Option<&Entry<K>>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        self.entries.find(hash, |entry| entry.key.borrow() == key)
    }

    /// The entry holding `key`'s bucket, locked, and the table it is in: `key`'s entry here, or
    /// if an update has moved its bucket on, in the table it moved to (module docs). `None` if
    /// `key` is not configured.
    #[inline]
    pub(crate) fn live<Q>(&self, hash: u64, key: &Q) -> Option<(&Self, Locked<'_, K>)>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let mut table = self;
        loop {
            let locked = table.find(hash, key)?.lock();
            if !locked.moved() {
                return Some((table, locked));
            }
            drop(locked);
            // A moved entry's table is always linked to the next one (`link` comes first).
            table = table.next()?;
        }
    }

    /// Every entry, for the writer.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Entry<K>> {
        self.entries.iter()
    }

    /// Adds `entry`, whose key hashes to `hash` (`rehash` gives any entry's hash, for growing).
    /// Writer only, before the table is published; the caller has checked the key is new.
    ///
    /// # Errors
    /// [`LimiterError::TooManyKeys`] beyond `u32::MAX − 1` keys or if the memory cannot be had.
    pub(crate) fn insert(
        &mut self,
        hash: u64,
        entry: Entry<K>,
        rehash: impl Fn(&Entry<K>) -> u64,
    ) -> Result<(), LimiterError> {
        if self.entries.len() >= MAX_KEYS {
            return Err(LimiterError::TooManyKeys);
        }
        self.entries
            .try_reserve(1, &rehash)
            .map_err(|_| LimiterError::TooManyKeys)?;
        self.entries.insert_unique(hash, entry, rehash);
        Ok(())
    }

    /// The table buckets moved to from this one, if an update has begun.
    #[inline]
    pub(crate) fn next(&self) -> Option<&Table<K>> {
        self.next.get().map(|next| &**next)
    }

    /// Links `next` as the table this one's buckets move to. Writer only, before it marks any
    /// entry moved; a table is replaced once, so a second link is refused (and changes nothing).
    pub(crate) fn link(&self, next: Arc<Table<K>>) -> bool {
        self.next.set(next).is_ok()
    }

    /// The bucket of `locked` (an entry of this table): its counts, with their high halves from
    /// the side map when the quota in force is `wide`.
    #[inline(always)]
    pub(crate) fn read(&self, locked: &Locked<'_, K>, wide: bool) -> State {
        // SAFETY: `locked` holds the entry's lock, so no one else reads or writes the counts.
        let counts = unsafe { *locked.entry.counts.get() };
        let high = if wide {
            self.wide
                .lock()
                .get(&locked.entry.address())
                .copied()
                .unwrap_or_default()
        } else {
            [0; 2]
        };
        State {
            tokens: [0, 1].map(|i| (u128::from(high[i]) << 64) | u128::from(counts.tokens[i])),
            last: counts.last,
        }
    }

    /// Replaces the counts of `locked` (an entry of this table), keeping their high halves in
    /// the side map when its quota is `wide` (otherwise every count fits 64 bits). A writer that
    /// makes a wide quota narrow also calls [`forget_wide`](Self::forget_wide); checks keep the
    /// quota they read, so never need to.
    #[inline(always)]
    pub(crate) fn write(&self, locked: &mut Locked<'_, K>, state: State, wide: bool) {
        if wide {
            self.wide.lock().insert(
                locked.entry.address(),
                state.tokens.map(|t| (t >> 64) as u64),
            );
        } else {
            debug_assert!(state.tokens.iter().all(|&t| t <= u128::from(u64::MAX)));
        }
        // SAFETY: `locked` holds the entry's lock.
        unsafe { *locked.entry.counts.get() = Counts::low(state) };
    }

    /// Drops the side cell of `locked` (an entry of this table), whose quota is no longer wide.
    pub(crate) fn forget_wide(&self, locked: &Locked<'_, K>) {
        self.wide.lock().remove(&locked.entry.address());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fixed, well-spread hash, so that tables built apart agree.
    fn hash(key: u64) -> u64 {
        key.wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }

    const EMPTY: State = State {
        tokens: [0; 2],
        last: 0,
    };

    fn table_of(keys: &[u64]) -> Table<u64> {
        let mut table = Table::with_capacity(keys.len()).unwrap();
        for &key in keys {
            let entry = Entry::new(key, 0, EMPTY);
            table.insert(hash(key), entry, |e| hash(e.key)).unwrap();
        }
        table
    }

    #[test]
    fn an_entry_for_a_u64_key_is_40_bytes() {
        assert_eq!(size_of::<Entry<u64>>(), 40);
    }

    /// The Node binding's keys are 32 bytes, 24 of them inline (its `StoredKey`): its entries
    /// must stay one cache line.
    #[test]
    fn an_entry_for_a_32_byte_key_is_one_cache_line() {
        assert_eq!(size_of::<Entry<[u64; 4]>>(), 64);
    }

    #[test]
    fn wide_counts_keep_their_high_halves_in_the_side_map() {
        let table = table_of(&[7]);
        let entry = table.iter().next().unwrap();
        let state = State {
            tokens: [u128::MAX - 5, 7],
            last: 9,
        };
        let mut locked = entry.lock();
        table.write(&mut locked, state, true);
        locked.set_quota_id(3);
        assert_eq!(table.read(&locked, true), state);
        assert_eq!(locked.quota_id(), 3);
        assert_eq!(
            table.read(&locked, false).tokens,
            [u128::from(u64::MAX - 5), 7]
        );
        // Back to a narrow quota: the writer drops the side cell.
        table.write(&mut locked, EMPTY, false);
        table.forget_wide(&locked);
        assert!(table.wide.lock().is_empty());
    }

    #[test]
    fn a_table_is_linked_to_its_successor_once() {
        let table = table_of(&[1, 2]);
        assert!(table.next().is_none());
        assert!(table.link(Arc::new(table_of(&[3]))));
        assert!(!table.link(Arc::new(table_of(&[4]))));
        assert_eq!(table.next().map(Table::len), Some(1));
    }

    #[test]
    fn a_moved_bucket_is_found_in_the_table_it_moved_to() {
        let first = table_of(&[1, 2]);
        let second = Arc::new(table_of(&[1]));
        second.find(hash(1), &1).unwrap().lock().set_quota_id(9);
        // Not moved yet: each key's own entry.
        assert_eq!(first.live(hash(1), &1).unwrap().1.quota_id(), 0);
        assert!(first.link(second.clone()));
        for key in [1, 2] {
            first.find(hash(key), &key).unwrap().lock().set_moved();
        }
        let (table, locked) = first.live(hash(1), &1).unwrap();
        assert!(std::ptr::eq(table, &*second));
        assert_eq!(locked.quota_id(), 9);
        drop(locked);
        // Key 2 was removed: its moved entry leads nowhere.
        assert!(first.live(hash(2), &2).is_none());
        assert!(first.live(hash(3), &3).is_none());
    }

    #[test]
    fn growing_keeps_every_key_findable() {
        let mut table: Table<u64> = Table::with_capacity(0).unwrap();
        for key in 0..10_000 {
            let entry = Entry::new(key, 0, EMPTY);
            table.insert(hash(key), entry, |e| hash(e.key)).unwrap();
        }
        assert_eq!(table.len(), 10_000);
        assert!((0..10_000).all(|k| table.find(hash(k), &k).is_some()));
        assert!(table.find(hash(10_000), &10_000).is_none());
    }
}
