//! The counter-storage seam: an estimator over caller-provided counters behaves exactly like one
//! on the heap.

use keepcount_limits::CounterStore;
use keepcount_limits::estimator::Estimator;
use keepcount_limits::{Shape, ShapeError};
use std::sync::atomic::{AtomicI64, Ordering};

/// Counters in a `Vec` the caller owns, standing in for a shared mapping.
struct VecStore(Vec<AtomicI64>);

impl CounterStore for VecStore {
    fn counters(&self) -> &[AtomicI64] {
        &self.0
    }
}

fn vec_store(len: usize) -> VecStore {
    VecStore((0..len).map(|_| AtomicI64::new(0)).collect())
}

#[test]
fn custom_store_behaves_like_the_heap_store() {
    let shape = Shape::new(3, 16).unwrap();
    let custom = Estimator::with_store(vec_store(shape.counters()), shape, 7).unwrap();
    let heap = Estimator::with_shape(shape, 7);
    for key in 0u32..40 {
        assert_eq!(custom.incr(key, 2), heap.incr(key, 2));
    }
    custom.decr(3u32, 1);
    heap.decr(3u32, 1);
    assert_eq!(custom.get(3u32), heap.get(3u32));
    assert_eq!(custom.to_bytes(), heap.to_bytes());
}

#[test]
fn custom_and_heap_stores_merge_both_ways() {
    let shape = Shape::new(2, 8).unwrap();
    let custom = Estimator::with_store(vec_store(shape.counters()), shape, 1).unwrap();
    let heap = Estimator::with_shape(shape, 1);
    custom.incr("a", 2);
    heap.incr("a", 3);
    custom.merge(&heap).unwrap();
    assert_eq!(custom.get("a"), 5);
    heap.merge(&custom).unwrap();
    assert_eq!(heap.get("a"), 8);
}

#[test]
fn custom_store_counters_are_used_in_place() {
    let shape = Shape::new(1, 4).unwrap();
    let store = vec_store(4);
    for counter in &store.0 {
        counter.store(10, Ordering::Relaxed);
    }
    let est = Estimator::with_store(store, shape, 0).unwrap();
    assert_eq!(est.get("anything"), 10);
}

#[test]
fn custom_store_of_the_wrong_length_is_refused() {
    let shape = Shape::new(2, 8).unwrap();
    let err = Estimator::with_store(vec_store(15), shape, 0).unwrap_err();
    assert_eq!(
        err,
        ShapeError::StoreLength {
            expected: 16,
            actual: 15
        }
    );
}
