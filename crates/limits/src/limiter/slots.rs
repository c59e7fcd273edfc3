//! Where keyed buckets and interned quotas live: arenas of chunks that never move, so a check
//! holding a slot index from any published key table reaches its bucket with no pointer of its
//! own to follow and no reference count to touch.
//!
//! A [`Slot`] is a key, a one-byte lock and a packed bucket state (40 bytes for a `u64` key).
//! Keeping the key in the slot lets the table (`index.rs`) be 8-byte entries of a hash tag and a
//! slot index; the key comparison and the bucket update then share the slot's lines. Over a
//! million keys neither array stays cached, so a check misses twice, on its table entry and then
//! on its slot (see the limiter's performance notes); chunks of 2 MB or more are on huge pages
//! (`pages.rs`), so neither miss also walks the page tables.
//!
//! # Reuse rules (upheld by [`Limiter`](super::Limiter)'s writer, relied on here)
//! - A slot's key is written only while no published table refers to the slot (a new slot, or
//!   one freed after the last table naming it was retired), so readers read it without a lock.
//! - A slot's state is read and written only under its lock.
//! - A quota cell is written only while no slot refers to its id, and read only under the lock
//!   of a slot that refers to it, so the lock orders every write before every read.

use std::cell::UnsafeCell;
use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

use parking_lot::RawMutex;
use parking_lot::lock_api::RawMutex as _;

use super::bucket::State;
use super::pages::Pages;
use super::quota::Quota;

/// Chunk `c` holds `2^(c + FIRST_CHUNK_BITS)` entries: 32 first, so a limiter with a handful of
/// keys allocates 2 KB, and each later chunk doubles, so no chunk is ever more than half the
/// arena and the waste is below half.
const FIRST_CHUNK_BITS: u32 = 5;
/// Enough chunks for every `u32` index: `32 × (2^28 − 1) ≥ 2^32`.
const CHUNKS: usize = 28;

/// An arena of `T`s addressed by `u32`, growing by doubling chunks that never move.
///
/// # Thread safety
/// Chunks are allocated by one writer at a time (the limiter's writer lock) and published by a
/// release store of their pointer, which readers load with acquire; what is inside each `T` is
/// the `T`'s own business. A chunk's length follows from its number, so a read is one load, a
/// null test and an offset: no `OnceLock` state to test and no slice length to check, which on
/// a hot-key check (two lookups) were a tenth of the arena's cost.
pub(crate) struct Arena<T> {
    /// Chunk `c`: null, or `2^(c + FIRST_CHUNK_BITS)` entries given up by a [`Pages`] (huge-page
    /// backed from 2 MB on).
    chunks: [AtomicPtr<T>; CHUNKS],
    /// Owns `T`s (for `Send`, `Sync` and drop checking) as the boxed chunks would.
    _owns: PhantomData<Box<[T]>>,
}

// SAFETY: entries are reached through `&Arena` by any thread (hence `T: Sync`), and created by
// the thread that allocates a chunk but dropped by the one that drops the arena (hence
// `T: Send`), the bounds `OnceLock<Box<[T]>>` had.
unsafe impl<T: Send + Sync> Sync for Arena<T> {}

/// `(chunk, offset)` of entry `id`.
fn locate(id: u32) -> (usize, usize) {
    // id + 32 has its top bit at position `FIRST_CHUNK_BITS + chunk`; below it is the offset.
    let n = u64::from(id) + (1 << FIRST_CHUNK_BITS);
    let top = 63 - n.leading_zeros();
    ((top - FIRST_CHUNK_BITS) as usize, (n - (1 << top)) as usize)
}

/// How many entries chunk `chunk` holds.
fn chunk_len(chunk: usize) -> usize {
    1 << (chunk as u32 + FIRST_CHUNK_BITS)
}

impl<T> Arena<T> {
    pub(crate) fn new() -> Self {
        Self {
            chunks: std::array::from_fn(|_| AtomicPtr::new(ptr::null_mut())),
            _owns: PhantomData,
        }
    }

    /// Entry `id`, if its chunk was allocated.
    #[inline]
    pub(crate) fn get(&self, id: u32) -> Option<&T> {
        let (chunk, offset) = locate(id);
        // Acquire: the chunk's entries were initialized before its pointer was published.
        let entries = self.chunks.get(chunk)?.load(Ordering::Acquire);
        if entries.is_null() {
            return None;
        }
        // SAFETY: a published chunk holds `chunk_len(chunk)` initialized entries, more than
        // `offset` (`locate`), and lives as long as the arena.
        Some(unsafe { &*entries.add(offset) })
    }

    /// Iterates over the allocated chunks' entries, in index order, for `Drop`.
    pub(crate) fn entries_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.chunks
            .iter_mut()
            .enumerate()
            .filter_map(|(chunk, entries)| {
                let entries = *entries.get_mut();
                // SAFETY: a non-null chunk holds `chunk_len(chunk)` initialized entries, and
                // `&mut self` makes them ours.
                (!entries.is_null())
                    .then(|| unsafe { std::slice::from_raw_parts_mut(entries, chunk_len(chunk)) })
            })
            .flatten()
    }
}

impl<T: Default> Arena<T> {
    /// Entry `id`, allocating its chunk (default entries) if needed. Writer only: two threads
    /// allocating the same chunk at once would leak one of them.
    pub(crate) fn get_or_alloc(&self, id: u32) -> Option<&T> {
        let (chunk, _) = locate(id);
        let cell = self.chunks.get(chunk)?;
        // Relaxed: only the writer stores chunk pointers, and it is this thread.
        if cell.load(Ordering::Relaxed).is_null() {
            let entries = Pages::from_fn(chunk_len(chunk), |_| T::default());
            // Release: readers that load the pointer see the entries initialized.
            cell.store(entries.into_raw(), Ordering::Release);
        }
        self.get(id)
    }
}

impl<T> Drop for Arena<T> {
    fn drop(&mut self) {
        for (chunk, entries) in self.chunks.iter_mut().enumerate() {
            let entries = *entries.get_mut();
            if !entries.is_null() {
                // SAFETY: given up by `Pages::into_raw` with this length in `get_or_alloc`, once.
                drop(unsafe { Pages::from_raw(entries, chunk_len(chunk)) });
            }
        }
    }
}

/// One keyed bucket: its key, its lock and its state.
pub(crate) struct Slot<K> {
    lock: RawMutex,
    state: UnsafeCell<Packed>,
    key: UnsafeCell<MaybeUninit<K>>,
}

// SAFETY: the state is only touched under `lock`; the key is written only while no other thread
// can reach the slot (module rules), and read through `&K` otherwise, hence `K: Sync`; it may be
// dropped on another thread, hence `K: Send`.
unsafe impl<K: Send + Sync> Sync for Slot<K> {}

impl<K> Default for Slot<K> {
    fn default() -> Self {
        Self {
            lock: RawMutex::INIT,
            state: UnsafeCell::new(Packed::default()),
            key: UnsafeCell::new(MaybeUninit::uninit()),
        }
    }
}

/// A bucket's [`State`] and quota id, packed to 28 bytes so that, with the lock byte and an
/// 8-byte key, a slot is 40 bytes. Token counts keep their low 64 bits here: a full bucket of
/// `burst × period` units fits them unless the quota is [wide](Interned::wide), whose slots keep
/// the high halves in a [`Wide`] cell of their own.
#[derive(Clone, Copy, Default)]
#[repr(C, packed(4))]
struct Packed {
    tokens: [u64; 2],
    last: u64,
    quota: u32,
}

impl<K> Slot<K> {
    /// The slot's key.
    ///
    /// # Safety
    /// The key must have been written ([`set_key`](Self::set_key)) and not be written
    /// concurrently: true of any slot a published table refers to.
    #[inline]
    pub(crate) unsafe fn key(&self) -> &K {
        // SAFETY: per the contract, initialized and not being written.
        unsafe { (*self.key.get()).assume_init_ref() }
    }

    /// Writes the key, dropping the previous one if `had_key`.
    ///
    /// # Safety
    /// No other thread may access the key meanwhile (no published table refers to the slot), and
    /// `had_key` must say truly whether a key was written before.
    pub(crate) unsafe fn set_key(&self, key: K, had_key: bool) {
        // SAFETY: exclusive per the contract.
        let cell = unsafe { &mut *self.key.get() };
        if had_key {
            // SAFETY: written before, per the contract.
            unsafe { cell.assume_init_drop() };
        }
        cell.write(key);
    }

    /// Drops the key in place.
    ///
    /// # Safety
    /// As [`set_key`](Self::set_key) with `had_key` true; the key must not be read afterwards.
    pub(crate) unsafe fn drop_key(&mut self) {
        // SAFETY: initialized per the contract, and `&mut self` is exclusive.
        unsafe { self.key.get_mut().assume_init_drop() };
    }

    /// Takes the slot's lock: parks if another thread holds it (for a few dozen instructions).
    #[inline]
    pub(crate) fn lock(&self) -> SlotGuard<'_, K> {
        self.lock.lock();
        SlotGuard { slot: self }
    }
}

/// Exclusive access to a slot's state; unlocks on drop.
pub(crate) struct SlotGuard<'a, K> {
    slot: &'a Slot<K>,
}

impl<K> SlotGuard<'_, K> {
    /// The id of the quota in force.
    #[inline]
    pub(crate) fn quota_id(&self) -> u32 {
        // SAFETY: we hold the lock, so no one else reads or writes the state.
        unsafe { (*self.slot.state.get()).quota }
    }

    /// The state, with the high halves of its counts from `high` (the slot's [`Wide`] cell) when
    /// the quota in force is wide, and zero otherwise.
    #[inline]
    pub(crate) fn read(&self, high: Option<&Wide>) -> State {
        // SAFETY: we hold the lock, so no one else reads or writes the state.
        let packed = unsafe { *self.slot.state.get() };
        // SAFETY: a slot's wide cell is touched only under the slot's lock, which we hold.
        let high = high.map_or([0; 2], |cell| unsafe { *cell.0.get() });
        State {
            tokens: [0, 1].map(|i| (u128::from(high[i]) << 64) | u128::from(packed.tokens[i])),
            last: packed.last,
        }
    }

    /// Replaces the state and its quota id, splitting counts between the slot and `high` (given
    /// exactly when the quota is wide; otherwise every count fits 64 bits).
    #[inline]
    pub(crate) fn write(&mut self, state: State, quota: u32, high: Option<&Wide>) {
        let low = state.tokens.map(|t| t as u64);
        match high {
            // SAFETY: under the slot's lock, as in `read`.
            Some(cell) => unsafe { *cell.0.get() = state.tokens.map(|t| (t >> 64) as u64) },
            None => debug_assert!(state.tokens.iter().all(|&t| t <= u128::from(u64::MAX))),
        }
        // SAFETY: we hold the lock.
        unsafe {
            *self.slot.state.get() = Packed {
                tokens: low,
                last: state.last,
                quota,
            };
        }
    }
}

impl<K> Drop for SlotGuard<'_, K> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: the guard exists only while this thread holds the lock.
        unsafe { self.slot.lock.unlock() };
    }
}

/// The high 64 bits of a slot's two counts, for slots under a wide quota; same index as the slot.
#[derive(Default)]
pub(crate) struct Wide(UnsafeCell<[u64; 2]>);

// SAFETY: read and written only under the lock of the slot with the same index.
unsafe impl Sync for Wide {}

/// An interned quota, and whether it is wide: a full bucket of some dimension exceeds 64 bits
/// of units (`burst × period ≥ 2^64`, e.g. a burst above 18 billion with a one-second period).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Interned {
    pub(crate) quota: Quota,
    pub(crate) wide: bool,
}

impl Interned {
    /// [`Quota::DENY_ALL`], interned: what a check falls back to if a quota id had no cell.
    pub(crate) const DENY_ALL: Self = Self {
        quota: Quota::DENY_ALL,
        wide: false,
    };

    pub(crate) fn new(quota: Quota) -> Self {
        let wide = quota
            .dimensions()
            .iter()
            .flatten()
            .any(|limit| limit.capacity() > u128::from(u64::MAX));
        Self { quota, wide }
    }
}

/// The cell of an interned quota.
pub(crate) struct QuotaCell(UnsafeCell<Interned>);

// SAFETY: written only while no slot refers to the id and read only under the lock of a slot
// that does (module rules): the slot lock orders each write before every read.
unsafe impl Sync for QuotaCell {}

impl Default for QuotaCell {
    fn default() -> Self {
        Self(UnsafeCell::new(Interned::new(Quota::UNLIMITED)))
    }
}

impl QuotaCell {
    /// The quota, by reference: a check copies none of its 56 bytes.
    ///
    /// # Safety
    /// The caller holds the lock of a slot referring to this cell's id, and drops the reference
    /// before releasing the lock.
    #[inline]
    pub(crate) unsafe fn get(&self) -> &Interned {
        // SAFETY: per the contract, no write is concurrent while the caller holds the lock (and
        // so the reference: it lives no longer than the caller's borrow of the guard's slot).
        unsafe { &*self.0.get() }
    }

    /// Stores `quota`.
    ///
    /// # Safety
    /// No slot refers to this cell's id.
    pub(crate) unsafe fn set(&self, quota: Interned) {
        // SAFETY: per the contract, no read is concurrent.
        unsafe { *self.0.get() = quota };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_double_from_thirty_two() {
        assert_eq!(locate(0), (0, 0));
        assert_eq!(locate(31), (0, 31));
        assert_eq!(locate(32), (1, 0));
        assert_eq!(locate(95), (1, 63));
        assert_eq!(locate(96), (2, 0));
        assert_eq!(locate(u32::MAX).0, CHUNKS - 1);
    }

    #[test]
    fn entries_stay_put_while_the_arena_grows() {
        let arena: Arena<u64> = Arena::new();
        let first: *const u64 = arena.get_or_alloc(0).unwrap();
        for id in 0..10_000 {
            assert!(arena.get_or_alloc(id).is_some());
        }
        assert!(std::ptr::eq(first, arena.get(0).unwrap()));
        assert!(arena.get(1 << 20).is_none());
    }

    #[test]
    fn an_arena_drops_every_entry_of_every_chunk_once() {
        use std::sync::atomic::AtomicUsize;
        static DROPPED: AtomicUsize = AtomicUsize::new(0);
        #[derive(Default)]
        struct Counted;
        impl Drop for Counted {
            fn drop(&mut self) {
                DROPPED.fetch_add(1, Ordering::Relaxed);
            }
        }
        let mut arena: Arena<Counted> = Arena::new();
        // Chunks 0 and 2 (32 and 128 entries); chunk 1 is never asked for.
        assert!(arena.get_or_alloc(200).is_some());
        assert!(arena.get_or_alloc(0).is_some());
        assert!(arena.get(100).is_some());
        assert!(arena.get(40).is_none() && arena.get(224).is_none());
        assert_eq!(arena.entries_mut().count(), 32 + 128);
        drop(arena);
        assert_eq!(DROPPED.load(Ordering::Relaxed), 32 + 128);
    }

    #[test]
    fn a_slot_for_a_u64_key_is_40_bytes() {
        assert_eq!(size_of::<Slot<u64>>(), 40);
    }

    #[test]
    fn wide_counts_keep_their_high_halves_in_the_wide_cell() {
        let slot: Slot<u64> = Slot::default();
        let wide = Wide::default();
        let state = State {
            tokens: [u128::MAX - 5, 7],
            last: 9,
        };
        slot.lock().write(state, 3, Some(&wide));
        let guard = slot.lock();
        assert_eq!(guard.read(Some(&wide)), state);
        assert_eq!(guard.quota_id(), 3);
        assert_eq!(guard.read(None).tokens, [u128::from(u64::MAX - 5), 7]);
    }

    #[test]
    fn the_interned_deny_all_is_what_interning_gives() {
        let interned = Interned::new(Quota::DENY_ALL);
        assert_eq!(Interned::DENY_ALL.quota, interned.quota);
        assert_eq!(Interned::DENY_ALL.wide, interned.wide);
    }

    #[test]
    fn only_quotas_beyond_64_bits_of_units_are_wide() {
        use super::super::quota::Limit;
        let narrow = Quota::new(Some(Limit::per_second(1, 18_000_000_000)), None);
        let wide = Quota::new(None, Some(Limit::per_second(1, 19_000_000_000)));
        assert!(!Interned::new(narrow).wide);
        assert!(Interned::new(wide).wide);
    }
}
