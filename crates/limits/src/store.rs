//! Where a sketch's counters live.
//!
//! [`Estimator`](crate::estimator::Estimator) reads its counters through [`CounterStore`], so
//! they can live on the heap (the default, `Box<[AtomicI64]>`) or, later, in memory the caller
//! provides, such as a mapping shared between processes.

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

/// A heap store of `len` counters, all zero.
pub(crate) fn zeroed(len: usize) -> Box<[AtomicI64]> {
    (0..len).map(|_| AtomicI64::new(0)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

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
}
