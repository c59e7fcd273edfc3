//! How many operations per key are in progress: [`Inflight`], API-compatible with pingora-limits'
//! `Inflight`.
//!
//! [`Inflight::incr`] counts an operation in and returns a [`Guard`] that counts it out when
//! dropped, so early returns and panics cannot leak counts. Cloudflare uses this for connection
//! limits: refuse with 503 when a customer's in-flight count passes a threshold.
//!
//! One deliberate difference from pingora-limits: pingora's `Guard::incr` adds `value` again but
//! its drop subtracts `value` only once, leaking every extra increment. keepcount's guard
//! remembers everything it added and releases all of it on drop.
//!
//! # At the `i64` bounds
//! Counts of 2^63 in flight are no real workload, but a caller can pass `isize::MAX`. The guard
//! keeps its total exact: a [`Guard::incr`] that would take it past the `i64` bounds is refused
//! (adds nothing). The sketch's counters, though, saturate at the bounds (see [`Estimator`]),
//! and the guard records what it asked for, not what a saturated counter absorbed: once a key's
//! count has been held at a bound, dropping its guards no longer restores the count exactly
//! (`isize::MAX` and then 1 on one key read `-1` after both guards drop). pingora's counters
//! wrap instead, which its drop undoes exactly. Recording what each row absorbed would cost
//! every guard per-row state and a branch on drop, and would still not be exact while adds race
//! at a bound (see `Estimator`), so keepcount leaves the bounds out of the guarantee.

use crate::estimator::Estimator;
use crate::hash::{KeyHash, random_seed};
use crate::shape::{Shape, ShapeError};
use std::fmt;
use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

/// Rows of the sketch behind [`Inflight::new`], as in pingora-limits. A lookup touches `h`
/// counters (time O(h)); a key is over-counted only if all `h` of its counters collide with
/// other busy keys, roughly `(k / n)^h` for `k` busy keys in `n` slots. A small `h` keeps
/// lookups cheap; a large `n` keeps that probability low.
const HASHES: usize = 4;
/// Columns of the sketch behind [`Inflight::new`], as in pingora-limits: with 4 rows, 1000 busy
/// keys collide in every row with probability about (1000/8192)^4 ≈ 2·10^-4. Memory:
/// 4 × 8192 × 8 bytes = 256 KiB.
const SLOTS: usize = 8192;

/// Per-key counts of operations in progress, each released when its [`Guard`] drops.
///
/// ```
/// use keepcount_limits::inflight::Inflight;
///
/// let inflight = Inflight::new();
/// let (g1, count) = inflight.incr("origin-a", 1);
/// assert_eq!(count, 1);
/// let (g2, count) = inflight.incr("origin-a", 2);
/// assert_eq!(count, 3);
/// drop(g1);
/// assert_eq!(g2.get(), 2);
/// drop(g2);
/// assert_eq!(inflight.get("origin-a"), 0);
/// ```
///
/// # Thread safety
/// `Send + Sync`; guards are `Send + Sync` too and may be dropped on any thread.
pub struct Inflight {
    estimator: Arc<Estimator>,
}

impl Inflight {
    /// An in-flight counter over a 4 × 8192 sketch with a random seed, like pingora's.
    ///
    /// ```
    /// let inflight = keepcount_limits::inflight::Inflight::new();
    /// assert_eq!(inflight.get("k"), 0);
    /// ```
    pub fn new() -> Self {
        Self::with_seed(random_seed())
    }

    /// An in-flight counter over a 4 × 8192 sketch keyed by `seed`.
    ///
    /// ```
    /// use keepcount_limits::inflight::Inflight;
    /// let a = Inflight::with_seed(1);
    /// assert_eq!(a.hash_key("k"), Inflight::with_seed(1).hash_key("k"));
    /// ```
    pub fn with_seed(seed: u64) -> Self {
        Self::with_shape(Shape::clamped(HASHES, SLOTS), seed)
    }

    /// An in-flight counter over a `hashes × slots` sketch keyed by `seed`, or why the shape is
    /// refused.
    ///
    /// ```
    /// use keepcount_limits::inflight::Inflight;
    /// assert!(Inflight::with_estimator_config(4, 1024, 1).is_ok());
    /// assert!(Inflight::with_estimator_config(0, 1024, 1).is_err());
    /// ```
    pub fn with_estimator_config(
        hashes: usize,
        slots: usize,
        seed: u64,
    ) -> Result<Self, ShapeError> {
        Ok(Self::with_shape(Shape::new(hashes, slots)?, seed))
    }

    fn with_shape(shape: Shape, seed: u64) -> Self {
        Self {
            estimator: Arc::new(Estimator::with_shape(shape, seed)),
        }
    }

    /// Counts `value` in for `key`; returns the guard that counts it out on drop and the key's
    /// new estimated count. The key is hashed once, here; the guard keeps only the hash.
    ///
    /// ```
    /// use keepcount_limits::inflight::Inflight;
    /// let inflight = Inflight::new();
    /// let (guard, count) = inflight.incr("k", 1);
    /// assert_eq!(count, 1);
    /// drop(guard);
    /// assert_eq!(inflight.get("k"), 0);
    /// ```
    pub fn incr<T: Hash>(&self, key: T, value: isize) -> (Guard, isize) {
        self.incr_hash(self.hash_key(key), value)
    }

    /// [`incr`](Self::incr) for a key hashed with [`hash_key`](Self::hash_key). Advanced API.
    ///
    /// ```
    /// use keepcount_limits::inflight::Inflight;
    /// let inflight = Inflight::new();
    /// let (_guard, count) = inflight.incr_hash(inflight.hash_key("k"), 2);
    /// assert_eq!(count, 2);
    /// ```
    pub fn incr_hash(&self, key: KeyHash, value: isize) -> (Guard, isize) {
        let estimate = self.estimator.incr_hash(key, value);
        let guard = Guard {
            estimator: Arc::clone(&self.estimator),
            key,
            value,
            // isize is at most 64 bits on every supported target: lossless.
            added: AtomicI64::new(value as i64),
        };
        (guard, estimate)
    }

    /// The estimated count in flight for `key`.
    ///
    /// ```
    /// use keepcount_limits::inflight::Inflight;
    /// let inflight = Inflight::new();
    /// let _guard = inflight.incr("k", 3);
    /// assert_eq!(inflight.get("k"), 3);
    /// ```
    pub fn get<T: Hash>(&self, key: T) -> isize {
        self.estimator.get_hash(self.hash_key(key))
    }

    /// Hashes `key` once for [`incr_hash`](Self::incr_hash). Advanced API.
    ///
    /// ```
    /// use keepcount_limits::inflight::Inflight;
    /// let inflight = Inflight::with_seed(3);
    /// assert_eq!(inflight.hash_key(1u32), inflight.hash_key(&1u32));
    /// ```
    #[inline]
    pub fn hash_key<T: Hash>(&self, key: T) -> KeyHash {
        self.estimator.hash_key(key)
    }
}

impl Default for Inflight {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Inflight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Inflight")
            .field("estimator", &self.estimator)
            .finish()
    }
}

/// Holds a key's in-flight count up; dropping it releases **everything** this guard added
/// (the first `value` and every [`Guard::incr`]). pingora-limits' guard releases only the first
/// `value`; this difference is deliberate. The exception is a count that reached the `i64`
/// bounds, where counters saturate: see the [module documentation](self#at-the-i64-bounds).
///
/// ```
/// use keepcount_limits::inflight::Inflight;
/// let inflight = Inflight::new();
/// let (guard, _) = inflight.incr("k", 2);
/// assert_eq!(guard.incr(), 4);
/// drop(guard);
/// assert_eq!(inflight.get("k"), 0); // pingora's would leave 2
/// ```
///
/// # Thread safety
/// `Send + Sync`: share it, move it, drop it on any thread.
pub struct Guard {
    estimator: Arc<Estimator>,
    /// The key's hash, not the key: no allocation, no rehash per operation.
    key: KeyHash,
    value: isize,
    /// Everything this guard added, released on drop.
    added: AtomicI64,
}

impl Guard {
    /// Adds the guard's `value` to its key again and returns the new estimate, like pingora's.
    /// The extra amount is released on drop too.
    ///
    /// If the guard's total ([`held`](Guard::held)) would pass the `i64` bounds, nothing is
    /// added and the current estimate is returned: a wrapped total would release the wrong
    /// amount on drop (pingora's guard has no total).
    ///
    /// ```
    /// use keepcount_limits::inflight::Inflight;
    /// let inflight = Inflight::new();
    /// let (guard, _) = inflight.incr("k", 1);
    /// assert_eq!(guard.incr(), 2);
    /// ```
    pub fn incr(&self) -> isize {
        // isize is at most 64 bits on every supported target: lossless.
        let value = self.value as i64;
        // Reserve the amount in the total before adding it, so the total never exceeds what
        // the sketch was asked for. A compare-and-swap, not a fetch_add: a wrapped total must
        // never be stored, even briefly, since a concurrent `incr` would build on it. The loop
        // retries only when another thread's `incr` on this same guard got in between.
        // Relaxed both ways: only the drop reads `added`, through `&mut self`, which already
        // happens after every `incr` on this guard.
        let reserved = self
            .added
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |added| {
                added.checked_add(value)
            });
        match reserved {
            Ok(_) => self.estimator.incr_hash(self.key, self.value),
            Err(_) => self.get(),
        }
    }

    /// The estimated in-flight count of the guard's key.
    ///
    /// ```
    /// use keepcount_limits::inflight::Inflight;
    /// let inflight = Inflight::new();
    /// let (guard, _) = inflight.incr("k", 5);
    /// assert_eq!(guard.get(), 5);
    /// ```
    pub fn get(&self) -> isize {
        self.estimator.get_hash(self.key)
    }

    /// What this guard will release when dropped: its `value` times one plus the number of
    /// [`incr`](Guard::incr) calls that were not refused at the `i64` bounds.
    ///
    /// ```
    /// use keepcount_limits::inflight::Inflight;
    /// let inflight = Inflight::new();
    /// let (guard, _) = inflight.incr("k", 3);
    /// guard.incr();
    /// assert_eq!(guard.held(), 6);
    /// ```
    pub fn held(&self) -> isize {
        // Relaxed: a snapshot for the caller; see incr.
        // Exact on 64-bit targets; truncates on 32-bit ones.
        self.added.load(Ordering::Relaxed) as isize
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        // `&mut self`: every incr on this guard happened before; no atomic read needed.
        let added = *self.added.get_mut();
        // Exact on 64-bit targets; truncates on 32-bit ones.
        self.estimator.decr_hash(self.key, added as isize);
    }
}

impl fmt::Debug for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guard")
            .field("key", &self.key)
            .field("value", &self.value)
            .field("held", &self.held())
            // The shared estimator is not worth dumping.
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // pingora-limits' inflight_count.
    #[test]
    fn guards_count_in_and_out() {
        let inflight = Inflight::new();
        let (g1, v) = inflight.incr("a", 1);
        assert_eq!(v, 1);
        let (g2, v) = inflight.incr("a", 2);
        assert_eq!(v, 3);
        drop(g1);
        assert_eq!(g2.get(), 2);
        drop(g2);
        let (_, v) = inflight.incr("a", 1);
        assert_eq!(v, 1);
    }

    #[test]
    fn dropping_a_guard_releases_its_extra_increments() {
        let inflight = Inflight::with_seed(1);
        let (guard, _) = inflight.incr("a", 2);
        assert_eq!(guard.incr(), 4);
        assert_eq!(guard.incr(), 6);
        assert_eq!(guard.held(), 6);
        drop(guard);
        assert_eq!(inflight.get("a"), 0);
    }

    #[test]
    fn incr_refuses_to_take_the_guard_total_past_the_bound() {
        let inflight = Inflight::with_seed(1);
        let (guard, count) = inflight.incr("a", isize::MAX);
        assert_eq!(count, isize::MAX);
        assert_eq!(guard.incr(), isize::MAX);
        assert_eq!(guard.held(), isize::MAX);
        drop(guard);
        assert_eq!(inflight.get("a"), 0);

        let (guard, _) = inflight.incr("b", isize::MIN);
        assert_eq!(guard.incr(), isize::MIN);
        assert_eq!(guard.held(), isize::MIN);
        drop(guard);
        assert_eq!(inflight.get("b"), 0);
    }

    #[test]
    fn incr_up_to_the_bound_is_still_released() {
        let inflight = Inflight::with_seed(1);
        let (guard, _) = inflight.incr("a", isize::MAX / 2);
        assert_eq!(guard.incr(), isize::MAX / 2 * 2);
        // The third would pass i64::MAX: refused, and the total stays exact.
        assert_eq!(guard.incr(), isize::MAX / 2 * 2);
        assert_eq!(guard.held(), isize::MAX / 2 * 2);
        drop(guard);
        assert_eq!(inflight.get("a"), 0);
    }

    #[test]
    fn guards_are_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Guard>();
        assert_send_sync::<Inflight>();
    }

    #[test]
    fn default_shape_is_pingoras() {
        let inflight = Inflight::default();
        assert_eq!(inflight.estimator.hashes(), 4);
        assert_eq!(inflight.estimator.slots(), 8192);
        assert!(Inflight::with_estimator_config(4, 0, 0).is_err());
    }

    #[test]
    fn debug_shows_the_guard_state() {
        let inflight = Inflight::with_seed(0);
        let (guard, _) = inflight.incr_hash(KeyHash::from_u64(0x0000_0002_0000_0001), 3);
        assert_eq!(
            format!("{guard:?}"),
            "Guard { key: KeyHash(8589934593), value: 3, held: 3, .. }"
        );
    }

    #[test]
    fn guards_from_many_threads_release_everything() {
        const THREADS: usize = 4;
        const PER_THREAD: usize = 5_000;
        let inflight = Arc::new(Inflight::with_seed(9));
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                let inflight = Arc::clone(&inflight);
                std::thread::spawn(move || {
                    let mut held = Vec::new();
                    for i in 0..PER_THREAD {
                        let (guard, count) = inflight.incr("hot", 1);
                        assert!(count >= 1);
                        if i % 3 == 0 {
                            guard.incr();
                        }
                        held.push(guard);
                        if held.len() > 16 {
                            held.remove(0);
                        }
                    }
                    held
                })
            })
            .collect();
        // Drop the surviving guards on this thread, not the ones that made them.
        let survivors: Vec<Guard> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        assert!(inflight.get("hot") > 0);
        drop(survivors);
        assert_eq!(inflight.get("hot"), 0);
    }
}
