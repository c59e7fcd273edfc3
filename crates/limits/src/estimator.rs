//! A lock-free count-min sketch: [`Estimator`], API-compatible with pingora-limits' `Estimator`.
//!
//! A sketch of `hashes` rows × `slots` columns of atomic counters estimates how often each key was
//! seen, in constant memory however many keys there are. `incr` adds to one counter per row and
//! returns the smallest of them: the estimate never under-counts (for non-negative increments),
//! and over-counts only when every row collides with heavier keys.
//!
//! # How keys reach counters
//! The key is hashed **once** with keepcount's keyed rapidhash ([`crate::hash`]); each row then
//! picks its column with its own strongly universal function of that hash, drawn from the seed
//! ([`Rows`], [format §2–§3]), so rows are independent as the error bound requires.
//! pingora-limits runs one full ahash per row with a random per-process state; keepcount's hash
//! is keyed (so it resists hash flooding) and stable for a given seed (so sketches can be merged,
//! saved, and shared with the Node binding and its TypeScript fallback).
//!
//! # When not to use it
//! When you need exact counts for a small, known set of keys, a `HashMap` is simpler. When
//! negative increments are common, the "never under-counts" guarantee no longer holds.
//!
//! [format §2–§3]: https://github.com/keepcount/keepcount/blob/main/docs/format.md

use crate::hash::{KeyHash, SeededState, random_seed};
use crate::rows::Rows;
use crate::shape::{Shape, ShapeError};
use crate::store::{CounterStore, zeroed};
use std::fmt;
use std::hash::Hash;
use std::sync::atomic::{AtomicI64, Ordering};

mod carry;
mod merge;
mod saturating;

pub(crate) use carry::Baseline;
pub use merge::MergeError;
pub(crate) use saturating::add_saturating;
use saturating::{refund_to_zero, sub_saturating};

/// A lock-free count-min sketch over `hashes × slots` atomic `i64` counters.
///
/// API-compatible with `pingora_limits::estimator::Estimator` (`new`, `incr`, `decr`, `get`,
/// `reset` with the same signatures), plus fallible and seeded constructors, [`merge`],
/// serialization ([`to_bytes`]/[`from_bytes`]), sizing from error bounds and a pre-hashed API.
///
/// Counters are `i64`; the API speaks `isize` like pingora's. On 64-bit targets the two are the
/// same width and conversions are exact; on 32-bit targets results are truncated to `isize`.
/// Counters saturate at `i64::MIN` and `i64::MAX` (no panic): an add that would pass a bound
/// leaves the counter at the bound instead of turning it negative, the rule the Node binding and
/// its TypeScript fallback share (the fallback's doubles clamp to ±2^63).
///
/// That rule is exact unless adds to one counter race **at a bound**. An add is one wrapping
/// atomic add; one that overflowed is then undone and redone as a compare-and-swap. In between,
/// the counter holds the wrapped value: other threads can read it (a count just past `i64::MAX`
/// reads as about `i64::MIN`), and an add from another thread that lands in that window is applied
/// to the wrapped value, which then stays wrapped (a scratch program of two threads adding 1 000 × 1
/// each to a counter at `i64::MAX` left it near `i64::MIN` in 1,347 of 2,000 runs, 2-vCPU VM,
/// 2026-11-29). Only counts within
/// one increment of ±2^63 are affected. Closing the window would take a compare-and-swap loop on
/// every add, and checking the value before adding only narrows it (another thread can still move
/// the counter between the check and the add), so keepcount keeps the single atomic add.
///
/// ```
/// use keepcount_limits::estimator::Estimator;
///
/// let est = Estimator::new(4, 1024);
/// assert_eq!(est.incr("a", 1), 1);
/// assert_eq!(est.incr("a", 2), 3);
/// est.decr("a", 1);
/// assert_eq!(est.get("a"), 2);
/// est.reset();
/// assert_eq!(est.get("a"), 0);
/// ```
///
/// # Performance
/// One rapidhash of the key (two multiplications for a key of up to 16 bytes), then per row two
/// multiplications and one relaxed atomic add (or load). Memory is
/// `hashes × slots × 8` bytes of counters plus the struct itself (see [`memory_bytes`]).
///
/// # Thread safety
/// `Send + Sync`; every operation takes `&self` and is lock-free. Counters use relaxed atomics:
/// each counter is exact (no lost updates), but a reader may see one row's update before
/// another's, which the minimum over rows absorbs.
///
/// [`merge`]: Estimator::merge
/// [`to_bytes`]: Estimator::to_bytes
/// [`from_bytes`]: Estimator::from_bytes
/// [`memory_bytes`]: Estimator::memory_bytes
pub struct Estimator<S: CounterStore = Box<[AtomicI64]>> {
    store: S,
    shape: Shape,
    /// The seed and the key-hash secrets derived from it once, at construction.
    state: SeededState,
    /// The per-row column functions, drawn from the seed at construction.
    rows: Rows,
}

impl Estimator {
    /// A sketch of `hashes` rows × `slots` columns with a random seed, like pingora's
    /// `Estimator::new`, which cannot fail.
    ///
    /// Invalid sizes are clamped, never a panic: `hashes` to `1..=32`, then `slots` to
    /// `1..=2^27 / hashes` (see [`Shape::clamped`]). Use [`try_new`](Estimator::try_new) to have
    /// them refused instead. Note that a clamped absurd size still allocates up to 1 GiB.
    ///
    /// ```
    /// use keepcount_limits::estimator::Estimator;
    /// let est = Estimator::new(0, 0); // pingora would divide by zero on first use
    /// assert_eq!((est.hashes(), est.slots()), (1, 1));
    /// assert_eq!(est.incr(1u32, 5), 5);
    /// ```
    pub fn new(hashes: usize, slots: usize) -> Self {
        Self::with_shape(Shape::clamped(hashes, slots), random_seed())
    }

    /// A sketch of `hashes` × `slots` with a random seed, or why the shape is refused.
    ///
    /// ```
    /// use keepcount_limits::estimator::Estimator;
    /// assert!(Estimator::try_new(4, 1024).is_ok());
    /// assert!(Estimator::try_new(4, 0).is_err());
    /// ```
    pub fn try_new(hashes: usize, slots: usize) -> Result<Self, ShapeError> {
        Ok(Self::with_shape(Shape::new(hashes, slots)?, random_seed()))
    }

    /// A sketch of `hashes` × `slots` keyed by `seed`: the same seed gives the same counters for
    /// the same keys, in Rust and in Node, which [`merge`](Estimator::merge) requires.
    ///
    /// ```
    /// use keepcount_limits::estimator::Estimator;
    /// let a = Estimator::with_seed(4, 64, 42).unwrap();
    /// let b = Estimator::with_seed(4, 64, 42).unwrap();
    /// assert_eq!(a.hash_key("k"), b.hash_key("k"));
    /// ```
    pub fn with_seed(hashes: usize, slots: usize, seed: u64) -> Result<Self, ShapeError> {
        Ok(Self::with_shape(Shape::new(hashes, slots)?, seed))
    }

    /// A sketch of a validated `shape` keyed by `seed`, on the heap.
    ///
    /// ```
    /// use keepcount_limits::{Shape, estimator::Estimator};
    /// let est = Estimator::with_shape(Shape::new(2, 8).unwrap(), 7);
    /// assert_eq!(est.seed(), 7);
    /// ```
    pub fn with_shape(shape: Shape, seed: u64) -> Self {
        Self {
            store: zeroed(shape.counters()),
            shape,
            state: SeededState::new(seed),
            rows: Rows::new(shape, seed),
        }
    }

    /// A sketch sized so that an estimate exceeds the true count by more than `epsilon × N`
    /// (N = total of all increments) with probability at most `delta`, with a random seed.
    /// See [`Shape::from_error_bounds`].
    ///
    /// ```
    /// use keepcount_limits::estimator::Estimator;
    /// let est = Estimator::from_error_bounds(0.01, 0.05).unwrap();
    /// assert_eq!((est.hashes(), est.slots()), (3, 272));
    /// assert!(Estimator::from_error_bounds(1.5, 0.05).is_err());
    /// ```
    pub fn from_error_bounds(epsilon: f64, delta: f64) -> Result<Self, ShapeError> {
        Ok(Self::with_shape(
            Shape::from_error_bounds(epsilon, delta)?,
            random_seed(),
        ))
    }
}

impl<S: CounterStore> Estimator<S> {
    /// A sketch over counters the caller provides (they are used as they are, not zeroed).
    /// The store must hold exactly `shape.counters()` counters.
    ///
    /// ```
    /// use keepcount_limits::{Shape, estimator::Estimator};
    /// use std::sync::atomic::AtomicI64;
    /// let zeroed = |len| (0..len).map(|_| AtomicI64::new(0)).collect::<Box<[_]>>();
    /// let shape = Shape::new(2, 8).unwrap();
    /// assert!(Estimator::with_store(zeroed(16), shape, 1).is_ok());
    /// assert!(Estimator::with_store(zeroed(15), shape, 1).is_err());
    /// ```
    pub fn with_store(store: S, shape: Shape, seed: u64) -> Result<Self, ShapeError> {
        let actual = store.counters().len();
        if actual != shape.counters() {
            return Err(ShapeError::StoreLength {
                expected: shape.counters(),
                actual,
            });
        }
        Ok(Self {
            store,
            shape,
            state: SeededState::new(seed),
            rows: Rows::new(shape, seed),
        })
    }

    /// Adds `value` to `key` and returns the new estimate (the minimum over rows), like
    /// pingora's. Counters saturate at the `i64` bounds (see the type's documentation).
    ///
    /// ```
    /// use keepcount_limits::estimator::Estimator;
    /// let est = Estimator::new(4, 1024);
    /// assert_eq!(est.incr("a", 1), 1);
    /// assert_eq!(est.incr(&"a", 2), 3); // `&T` hashes like `T`
    /// ```
    #[inline]
    pub fn incr<T: Hash>(&self, key: T, value: isize) -> isize {
        self.incr_hash(self.hash_key(key), value)
    }

    /// Subtracts `value` from `key`, like pingora's.
    ///
    /// ```
    /// use keepcount_limits::estimator::Estimator;
    /// let est = Estimator::new(4, 1024);
    /// est.incr("a", 3);
    /// est.decr("a", 1);
    /// assert_eq!(est.get("a"), 2);
    /// ```
    #[inline]
    pub fn decr<T: Hash>(&self, key: T, value: isize) {
        self.decr_hash(self.hash_key(key), value);
    }

    /// Takes back up to `value` of `key`'s count: each of its counters drops by `value` but stops
    /// at zero, and one already at or below zero (a negative increment took it there) is left as
    /// it is; a `value` that is not positive takes nothing. Returns the new estimate.
    ///
    /// Unlike [`decr`](Self::decr), a refund never takes a counter below zero, however many race
    /// for one count: each counter is lowered with a compare-and-swap from the value it replaces,
    /// so two threads (or processes, on a [shared](crate::shared) sketch) taking back one count
    /// take it once between them. A refund larger than the key's own count takes the rest from
    /// keys sharing its counters (at most down to zero): they read low until the counts are back.
    ///
    /// ```
    /// use keepcount_limits::estimator::Estimator;
    /// let est = Estimator::with_seed(4, 1024, 1).unwrap();
    /// est.incr("a", 5);
    /// assert_eq!(est.refund("a", 3), 2);
    /// assert_eq!(est.refund("a", 3), 0); // stops at zero
    /// ```
    ///
    /// # Performance
    /// A compare-and-swap loop per row instead of one atomic add: a few nanoseconds more per
    /// counter, retried only while other threads change that counter.
    #[inline]
    pub fn refund<T: Hash>(&self, key: T, value: isize) -> isize {
        self.refund_hash(self.hash_key(key), value)
    }

    /// The estimated count of `key`, like pingora's.
    ///
    /// ```
    /// use keepcount_limits::estimator::Estimator;
    /// let est = Estimator::new(4, 1024);
    /// assert_eq!(est.get("never seen"), 0);
    /// ```
    #[inline]
    pub fn get<T: Hash>(&self, key: T) -> isize {
        self.get_hash(self.hash_key(key))
    }

    /// Sets every counter to zero, like pingora's. Not atomic as a whole: increments racing with
    /// a reset may survive it in some rows.
    ///
    /// ```
    /// use keepcount_limits::estimator::Estimator;
    /// let est = Estimator::new(4, 1024);
    /// est.incr("a", 3);
    /// est.reset();
    /// assert_eq!(est.get("a"), 0);
    /// ```
    pub fn reset(&self) {
        for counter in self.store.counters() {
            // Relaxed: each counter is independent; a reset publishes nothing else.
            counter.store(0, Ordering::Relaxed);
        }
    }

    /// Hashes `key` once for the pre-hashed API ([`incr_hash`](Self::incr_hash),
    /// [`get_hash`](Self::get_hash), [`decr_hash`](Self::decr_hash)). Advanced API: the result is
    /// only meaningful for sketches with this sketch's seed.
    ///
    /// ```
    /// use keepcount_limits::estimator::Estimator;
    /// let est = Estimator::with_seed(4, 1024, 42).unwrap();
    /// let key = est.hash_key("1.2.3.4");
    /// est.incr_hash(key, 2);
    /// assert_eq!(est.get("1.2.3.4"), 2);
    /// ```
    #[inline]
    pub fn hash_key<T: Hash>(&self, key: T) -> KeyHash {
        self.state.hash_one_key(key)
    }

    /// [`incr`](Self::incr) for a key hashed with [`hash_key`](Self::hash_key). Advanced API.
    ///
    /// ```
    /// use keepcount_limits::estimator::Estimator;
    /// let est = Estimator::new(4, 1024);
    /// let key = est.hash_key(7u32);
    /// assert_eq!(est.incr_hash(key, 5), 5);
    /// ```
    #[inline]
    pub fn incr_hash(&self, key: KeyHash, value: isize) -> isize {
        // isize is at most 64 bits on every supported target: lossless.
        let value = value as i64;
        let mut min = i64::MAX;
        self.for_each_counter(key, |counter| {
            min = min.min(add_saturating(counter, value));
        });
        // Exact on 64-bit targets; truncates on 32-bit ones (documented on the type).
        min as isize
    }

    /// [`decr`](Self::decr) for a key hashed with [`hash_key`](Self::hash_key). Advanced API.
    ///
    /// ```
    /// use keepcount_limits::estimator::Estimator;
    /// let est = Estimator::new(4, 1024);
    /// let key = est.hash_key(7u32);
    /// est.incr_hash(key, 5);
    /// est.decr_hash(key, 2);
    /// assert_eq!(est.get_hash(key), 3);
    /// ```
    #[inline]
    pub fn decr_hash(&self, key: KeyHash, value: isize) {
        // isize is at most 64 bits on every supported target: lossless.
        let value = value as i64;
        self.for_each_counter(key, |counter| {
            sub_saturating(counter, value);
        });
    }

    /// [`refund`](Self::refund) for a key hashed with [`hash_key`](Self::hash_key). Advanced API.
    ///
    /// ```
    /// use keepcount_limits::estimator::Estimator;
    /// let est = Estimator::new(4, 1024);
    /// let key = est.hash_key(7u32);
    /// est.incr_hash(key, 2);
    /// assert_eq!(est.refund_hash(key, 5), 0);
    /// ```
    #[inline]
    pub fn refund_hash(&self, key: KeyHash, value: isize) -> isize {
        // isize is at most 64 bits on every supported target: lossless.
        let value = value as i64;
        let mut min = i64::MAX;
        self.for_each_counter(key, |counter| {
            min = min.min(refund_to_zero(counter, value));
        });
        // Exact on 64-bit targets; truncates on 32-bit ones (documented on the type).
        min as isize
    }

    /// [`get`](Self::get) for a key hashed with [`hash_key`](Self::hash_key). Advanced API.
    ///
    /// ```
    /// use keepcount_limits::estimator::Estimator;
    /// let est = Estimator::new(4, 1024);
    /// assert_eq!(est.get_hash(est.hash_key("x")), 0);
    /// ```
    #[inline]
    pub fn get_hash(&self, key: KeyHash) -> isize {
        let mut min = i64::MAX;
        self.for_each_counter(key, |counter| {
            // Relaxed: a single counter's latest value is all an estimate needs.
            min = min.min(counter.load(Ordering::Relaxed));
        });
        // Exact on 64-bit targets; truncates on 32-bit ones (documented on the type).
        min as isize
    }

    /// Calls `f` with the key's counter in each row ([format §3]).
    #[inline(always)]
    fn for_each_counter(&self, key: KeyHash, mut f: impl FnMut(&AtomicI64)) {
        let counters = self.store.counters();
        self.rows
            .for_each_index(key, |index| match counters.get(index) {
                Some(counter) => f(counter),
                // A store shorter than the shape (a broken CounterStore) skips rows, never panics.
                None => broken_store(),
            });
    }

    /// Rows: counters touched per operation.
    ///
    /// ```
    /// assert_eq!(keepcount_limits::estimator::Estimator::new(4, 8).hashes(), 4);
    /// ```
    #[inline]
    pub fn hashes(&self) -> usize {
        self.shape.hashes()
    }

    /// Columns per row.
    ///
    /// ```
    /// assert_eq!(keepcount_limits::estimator::Estimator::new(4, 8).slots(), 8);
    /// ```
    #[inline]
    pub fn slots(&self) -> usize {
        self.shape.slots()
    }

    /// The validated shape.
    ///
    /// ```
    /// let est = keepcount_limits::estimator::Estimator::new(4, 8);
    /// assert_eq!(est.shape().counters(), 32);
    /// ```
    #[inline]
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// The per-row column functions drawn from the seed: which counter a key uses in each row
    /// ([format §3]). For diagnosing over-counts and for tests of the rows' independence.
    ///
    /// ```
    /// use keepcount_limits::estimator::Estimator;
    /// let est = Estimator::with_seed(3, 100, 7).unwrap();
    /// let mut indexes = Vec::new();
    /// est.rows().for_each_index(est.hash_key("k"), |i| indexes.push(i));
    /// est.incr("k", 1);
    /// assert!(indexes.iter().all(|&i| est.to_bytes()[24 + 8 * i] == 1));
    /// ```
    ///
    /// [format §3]: https://github.com/keepcount/keepcount/blob/main/docs/format.md
    pub fn rows(&self) -> &Rows {
        &self.rows
    }

    /// The hash seed. Sketches merge only with sketches of the same seed.
    ///
    /// ```
    /// use keepcount_limits::estimator::Estimator;
    /// assert_eq!(Estimator::with_seed(1, 1, 99).unwrap().seed(), 99);
    /// ```
    #[inline]
    pub fn seed(&self) -> u64 {
        self.state.seed()
    }

    /// Bytes this sketch occupies: `hashes × slots × 8` for the counters plus
    /// `size_of::<Estimator<S>>()` for the struct itself (store handle, shape, seed, the hash
    /// secrets derived from it and the per-row column functions: 888 bytes for the default heap
    /// store on 64-bit targets).
    ///
    /// ```
    /// use keepcount_limits::estimator::Estimator;
    /// let est = Estimator::new(4, 8192);
    /// assert_eq!(est.memory_bytes(), 4 * 8192 * 8 + std::mem::size_of::<Estimator>());
    /// ```
    pub fn memory_bytes(&self) -> usize {
        self.shape.counters() * size_of::<AtomicI64>() + size_of::<Self>()
    }

    /// The counters, row-major, for the serializer.
    pub(crate) fn counters(&self) -> &[AtomicI64] {
        self.store.counters()
    }
}

impl<S: CounterStore> fmt::Debug for Estimator<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Estimator")
            .field("hashes", &self.shape.hashes())
            .field("slots", &self.shape.slots())
            // The seed is the secret that keeps keys' counters apart (see `crate::hash`), and
            // Debug output ends up in logs; the counters are too many to print.
            .finish_non_exhaustive()
    }
}

/// Where an index past a broken [`CounterStore`]'s counters lands: nothing to do, but marked cold
/// so the compiler lays out the in-bounds path as the straight one (measured: the bounds check
/// otherwise jumped out of line for every in-bounds counter).
#[cold]
fn broken_store() {}

#[cfg(test)]
mod tests;
