//! Where a sketch's counters live.
//!
//! [`Estimator`](crate::estimator::Estimator) reads its counters through [`CounterStore`], so
//! they can live on the heap (the default, `Box<[AtomicI64]>`) or, later, in memory the caller
//! provides, such as a mapping shared between processes.

use std::alloc::{self, Layout};
use std::ptr;
use std::sync::atomic::AtomicI64;

/// Storage for a sketch's `hashes × slots` counters, one contiguous row-major array
/// (row 0 slot 0, row 0 slot 1, …).
///
/// # Contract
/// [`counters`](CounterStore::counters) must return the same slice, of the same length, on every
/// call. A store that breaks this cannot make the sketch panic or touch memory out of bounds:
/// counters beyond the slice are skipped, so estimates become meaningless, nothing worse.
///
/// # Thread safety
/// A sketch is shared between threads, so the store is `Send + Sync`; the counters are atomics
/// and every access to them is an atomic operation.
///
/// ```
/// use keepcount_limits::estimator::Estimator;
/// use keepcount_limits::Shape;
/// use keepcount_limits::CounterStore;
/// use std::sync::atomic::AtomicI64;
///
/// struct VecStore(Vec<AtomicI64>);
/// impl CounterStore for VecStore {
///     fn counters(&self) -> &[AtomicI64] {
///         &self.0
///     }
/// }
///
/// let shape = Shape::new(2, 8).unwrap();
/// let store = VecStore((0..shape.counters()).map(|_| AtomicI64::new(0)).collect());
/// let est = Estimator::with_store(store, shape, 42).unwrap();
/// assert_eq!(est.incr("a", 3), 3);
/// ```
pub trait CounterStore: Send + Sync {
    /// All counters, row-major.
    fn counters(&self) -> &[AtomicI64];
}

impl CounterStore for Box<[AtomicI64]> {
    #[inline]
    fn counters(&self) -> &[AtomicI64] {
        self
    }
}

/// A heap store of `len` counters, all zero, from `alloc_zeroed`, so that a large sketch's pages
/// stay untouched until it counts in them (fresh pages from the system are zero already).
///
/// Collecting `AtomicI64::new(0)`s got the same call only when the optimizer turned the stores
/// into it. In a build where it did not (an unrelated branch added to this function, 2026-11-28),
/// 100,000 default `Estimator`s made and dropped peaked at ~400 MB of RSS instead of 122 and took
/// 20 s instead of 4 (`__test__/memory.spec.ts` failed on it).
pub(crate) fn zeroed(len: usize) -> Box<[AtomicI64]> {
    let layout = Layout::array::<AtomicI64>(len)
        .expect("a shape's counters, at most MAX_COUNTERS, fit a layout");
    if layout.size() == 0 {
        return Box::new([]);
    }
    // SAFETY: the layout's size is not zero.
    let block = unsafe { alloc::alloc_zeroed(layout) };
    if block.is_null() {
        alloc::handle_alloc_error(layout);
    }
    // SAFETY: `block` holds `len` counters allocated by the global allocator with the layout a
    // `Box<[AtomicI64]>` of that length is freed with, and all-zero bytes are an `AtomicI64` of 0.
    unsafe {
        Box::from_raw(ptr::slice_from_raw_parts_mut(
            block.cast::<AtomicI64>(),
            len,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn an_empty_heap_store_allocates_nothing() {
        assert!(zeroed(0).is_empty());
    }

    #[test]
    fn heap_store_is_all_zero_counters() {
        let store = zeroed(16);
        assert_eq!(store.counters().len(), 16);
        assert!(
            store
                .counters()
                .iter()
                .all(|c| c.load(Ordering::Relaxed) == 0)
        );
    }

    /// This process's resident memory in bytes (`/proc/self/statm`'s second field, in pages).
    #[cfg(target_os = "linux")]
    fn resident_bytes() -> usize {
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
        let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        pages * usize::try_from(page).unwrap()
    }

    /// A sketch takes memory as it counts, not when made: 256 MiB of counters must not become
    /// resident. The slack, 64 MiB, is for what tests on other threads touch meanwhile.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_large_store_takes_no_memory_until_counted_in() {
        const LEN: usize = 32 << 20;
        let before = resident_bytes();
        let store = zeroed(LEN);
        let after = resident_bytes();
        assert!(
            after < before + (64 << 20),
            "{} MiB resident after a zeroed store of {} MiB",
            (after.saturating_sub(before)) >> 20,
            (LEN * 8) >> 20
        );
        store[LEN - 1].fetch_add(1, Ordering::Relaxed);
        assert_eq!(store[LEN - 1].load(Ordering::Relaxed), 1);
    }
}
