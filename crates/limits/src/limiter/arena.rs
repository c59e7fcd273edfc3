//! Where interned quotas live: an arena of chunks that never move, so a check holding a quota
//! id from its bucket reaches the quota with one load and an offset, and no reference count.
//!
//! # Rules (upheld by [`Limiter`](super::Limiter)'s writer, relied on here)
//! A quota cell is written only while no bucket refers to its id, and read only under the lock
//! of a bucket that refers to it, so the lock orders every write before every read.

use std::cell::UnsafeCell;
use std::marker::PhantomData;
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

use super::bucket::Narrow;
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

/// An interned quota; whether it is wide: a full bucket of some dimension exceeds 64 bits of
/// units (`burst × period ≥ 2^64`, e.g. a burst above 18 billion with a one-second period); and,
/// when it is not, its dimensions as [`Narrow`] limits for the 64-bit path of a check.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Interned {
    pub(crate) quota: Quota,
    pub(crate) wide: bool,
    pub(crate) narrow: [Option<Narrow>; 2],
}

impl Interned {
    /// [`Quota::DENY_ALL`], interned: what a check falls back to if a quota id had no cell.
    pub(crate) const DENY_ALL: Self = Self::new(Quota::DENY_ALL);

    pub(crate) const fn new(quota: Quota) -> Self {
        let narrow = Narrow::dimensions(&quota);
        let [requests, units] = quota.dimensions();
        // Wide exactly when a limited dimension has no narrow form.
        let wide =
            (requests.is_some() && narrow[0].is_none()) || (units.is_some() && narrow[1].is_none());
        Self {
            quota,
            wide,
            narrow,
        }
    }
}

/// The cell of an interned quota.
pub(crate) struct QuotaCell(UnsafeCell<Interned>);

// SAFETY: written only while no bucket refers to the id and read only under the lock of a bucket
// that does (module rules): the bucket lock orders each write before every read.
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
    /// The caller holds the lock of a bucket referring to this cell's id, and drops the reference
    /// before releasing the lock.
    #[inline]
    pub(crate) unsafe fn get(&self) -> &Interned {
        // SAFETY: per the contract, no write is concurrent while the caller holds the lock (and
        // so the reference: it lives no longer than the caller's borrow of the guard's entry).
        unsafe { &*self.0.get() }
    }

    /// Stores `quota`.
    ///
    /// # Safety
    /// No bucket refers to this cell's id.
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
        let arena: Arena<Counted> = Arena::new();
        // Chunks 0 and 2 (32 and 128 entries); chunk 1 is never asked for.
        assert!(arena.get_or_alloc(200).is_some());
        assert!(arena.get_or_alloc(0).is_some());
        assert!(arena.get(100).is_some());
        assert!(arena.get(40).is_none() && arena.get(224).is_none());
        drop(arena);
        assert_eq!(DROPPED.load(Ordering::Relaxed), 32 + 128);
    }

    #[test]
    fn the_interned_deny_all_is_what_interning_gives() {
        let interned = Interned::new(Quota::DENY_ALL);
        assert_eq!(Interned::DENY_ALL.quota, interned.quota);
        assert_eq!(Interned::DENY_ALL.wide, interned.wide);
        assert_eq!(Interned::DENY_ALL.narrow, interned.narrow);
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
