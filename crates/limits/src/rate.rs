//! Events per second per key: [`Rate`], API-compatible with pingora-limits' `Rate`.
//!
//! Two sketches take turns: one counts the current interval, the other holds the last completed
//! one. [`Rate::rate`] reports the completed interval's count per second; [`Rate::rate_with`]
//! hands both counts and the elapsed fraction to a function of your choice, such as
//! [`PROPORTIONAL_RATE_ESTIMATE_CALC_FN`] (Cloudflare's sliding-window interpolation).
//!
//! Differences from pingora-limits, all deliberate: time is read from a [`Clock`] (tests drive a
//! [`ManualClock`](crate::clock::ManualClock) instead of sleeping) in nanoseconds, so intervals
//! below a millisecond work (pingora takes `% 0` on them) and a zero interval is refused or
//! clamped to 1 ns; a thread losing the reset race does not assert (pingora's
//! `assert!(new >= now - 1000)` underflows in the first second); and after two idle intervals the
//! stale counts are subtracted from both sketches rather than the sketches cleared, so what other
//! threads count while the rotation runs is kept (`rotation.rs`); it costs a copy of each
//! sketch's nonzero counters and an atomic subtraction for each, once per idle spell (4 × 8,192,
//! median of 200: ~57 µs after 200 keys, ~230 µs after 20,000; the two clears took 16–24 µs).
//! While it runs, what other threads read or get back from `observe` still includes the stale
//! counts the subtraction has not reached yet.

use crate::clock::{Clock, MonotonicClock};
use crate::estimator::{Baseline, Estimator};
use crate::hash::{KeyHash, random_seed};
use crate::rotation::{self, Rotation, Slots};
use crate::shape::Shape;
use std::fmt;
use std::hash::Hash;
use std::time::Duration;

mod components;
mod error;

pub use components::{PROPORTIONAL_RATE_ESTIMATE_CALC_FN, RateComponents};
pub use error::RateError;

/// Rows of each of the two sketches behind [`Rate::new`], as in pingora-limits: see
/// [`crate::inflight`] for why 4.
const HASHES: usize = 4;
/// Columns of each sketch behind [`Rate::new`], as in pingora-limits: a rate interval usually
/// sees fewer distinct keys than an in-flight table, so 1024 rather than 8192.
const SLOTS: usize = 1024;
/// Nanoseconds per second, to report rates per second.
const NANOS_PER_SEC: f64 = 1e9;

/// Per-key event rate over fixed intervals, like pingora-limits' `Rate`, reading time from `C`.
///
/// It counts events for periods of `interval` and reports the rate of the latest completed
/// period while counting the current one. An interval starts when the first operation after the
/// previous one's end notices it ended (as in pingora), not on a fixed grid. After two intervals
/// without any operation, both counts are stale and the rate is 0.
///
/// ```
/// use keepcount_limits::rate::Rate;
/// use std::time::Duration;
///
/// let rate = Rate::new(Duration::from_secs(1));
/// assert_eq!(rate.observe(&"k", 3), 3);
/// assert_eq!(rate.rate(&"k"), 0.0); // no completed interval yet
/// ```
///
/// # Performance
/// One key hash per call, plus a clock read and two sketch lookups at most; at interval ends one
/// thread zeroes a sketch (`hashes × slots` stores).
///
/// # Thread safety
/// `Send + Sync` when `C` is. Operations racing with an interval change may count an event in
/// either interval, as in pingora.
pub struct Rate<C: Clock = MonotonicClock> {
    red: Estimator,
    blue: Estimator,
    /// Which of `red` and `blue` counts the current interval.
    rotation: Rotation<C>,
}

impl Rate {
    /// A rate over `interval` with pingora's default sketches (4 × 1024) and a random seed.
    ///
    /// Never panics: a zero interval is treated as 1 ns, one longer than `u64::MAX` ns
    /// (584 years) as that. Use [`Rate::with_clock`] to have a zero interval refused.
    ///
    /// ```
    /// use keepcount_limits::rate::Rate;
    /// use std::time::Duration;
    /// let rate = Rate::new(Duration::ZERO); // pingora would take `% 0`
    /// assert_eq!(rate.interval(), Duration::from_nanos(1));
    /// rate.observe(&1, 1);
    /// ```
    pub fn new(interval: Duration) -> Self {
        Self::new_with_estimator_config(interval, HASHES, SLOTS)
    }

    /// A rate over `interval` whose two sketches have `hashes × slots` counters, random seed.
    ///
    /// Never panics: the interval as in [`Rate::new`], the shape clamped as in
    /// [`Estimator::new`].
    ///
    /// ```
    /// use keepcount_limits::rate::Rate;
    /// use std::time::Duration;
    /// let rate = Rate::new_with_estimator_config(Duration::from_millis(100), 2, 64);
    /// assert_eq!(rate.observe(&"k", 2), 2);
    /// ```
    pub fn new_with_estimator_config(interval: Duration, hashes: usize, slots: usize) -> Self {
        let interval_nanos = nanos(interval).max(1);
        Self::build(
            interval_nanos,
            Shape::clamped(hashes, slots),
            random_seed(),
            MonotonicClock::new(),
        )
    }
}

impl<C: Clock> Rate<C> {
    /// A rate over `interval` reading time from `clock`, whose two sketches have
    /// `hashes × slots` counters keyed by `seed`; or why the configuration is refused (zero
    /// interval, bad shape).
    ///
    /// ```
    /// use keepcount_limits::clock::ManualClock;
    /// use keepcount_limits::rate::Rate;
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let rate = Rate::with_clock(Duration::from_secs(1), 4, 1024, 7, &clock).unwrap();
    /// rate.observe(&"k", 5);
    /// clock.advance(Duration::from_secs(1));
    /// assert_eq!(rate.rate(&"k"), 5.0);
    /// assert!(Rate::with_clock(Duration::ZERO, 4, 1024, 7, &clock).is_err());
    /// ```
    pub fn with_clock(
        interval: Duration,
        hashes: usize,
        slots: usize,
        seed: u64,
        clock: C,
    ) -> Result<Self, RateError> {
        let interval_nanos = nanos(interval);
        if interval_nanos == 0 {
            return Err(RateError::ZeroInterval);
        }
        let shape = Shape::new(hashes, slots).map_err(RateError::Shape)?;
        Ok(Self::build(interval_nanos, shape, seed, clock))
    }

    fn build(interval_nanos: u64, shape: Shape, seed: u64, clock: C) -> Self {
        Self {
            // Same seed for both, so one KeyHash addresses the key in either.
            red: Estimator::with_shape(shape, seed),
            blue: Estimator::with_shape(shape, seed),
            rotation: Rotation::new(interval_nanos, clock),
        }
    }

    /// The interval, as used (after any clamping).
    ///
    /// ```
    /// use keepcount_limits::rate::Rate;
    /// use std::time::Duration;
    /// assert_eq!(Rate::new(Duration::from_micros(250)).interval(), Duration::from_micros(250));
    /// ```
    pub fn interval(&self) -> Duration {
        Duration::from_nanos(self.rotation.interval_nanos())
    }

    /// The completed interval's count of `key`, per second, like pingora's. 0 before the first
    /// interval completes and once two intervals have passed without any operation.
    ///
    /// ```
    /// use keepcount_limits::clock::ManualClock;
    /// use keepcount_limits::rate::Rate;
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let rate = Rate::with_clock(Duration::from_millis(500), 4, 1024, 7, &clock).unwrap();
    /// rate.observe(&"k", 5);
    /// clock.advance(Duration::from_millis(500));
    /// assert_eq!(rate.rate(&"k"), 10.0); // 5 events in half a second
    /// ```
    pub fn rate<T: Hash>(&self, key: &T) -> f64 {
        self.rate_hash(self.hash_key(key))
    }

    /// Counts `events` for `key` in the current interval and returns the key's count so far in
    /// it, like pingora's.
    ///
    /// ```
    /// use keepcount_limits::rate::Rate;
    /// use std::time::Duration;
    /// let rate = Rate::new(Duration::from_secs(1));
    /// assert_eq!(rate.observe(&"k", 3), 3);
    /// assert_eq!(rate.observe(&"k", 2), 5);
    /// ```
    pub fn observe<T: Hash>(&self, key: &T, events: isize) -> isize {
        self.observe_hash(self.hash_key(key), events)
    }

    /// Takes back up to `events` of `key`'s count in the current interval, stopping each of its
    /// counters at zero ([`Estimator::refund`]), and returns the key's count there: a refund
    /// (a request that should not count after all) that racing refunds of the same count cannot
    /// take below zero, as `observe` with negative events can. The previous interval is left as
    /// it is.
    ///
    /// ```
    /// use keepcount_limits::rate::Rate;
    /// use std::time::Duration;
    /// let rate = Rate::new(Duration::from_secs(1));
    /// rate.observe(&"k", 3);
    /// assert_eq!(rate.refund(&"k", 2), 1);
    /// assert_eq!(rate.refund(&"k", 2), 0); // stops at zero
    /// ```
    ///
    /// # Thread safety
    /// Refunds racing each other or `observe` never take a counter below zero. One racing the
    /// rotation after two idle intervals, which takes the stale counts out of the sketches while
    /// other threads count on, may take stale counts the rotation then takes out again: the
    /// counter ends below zero by at most that refund, until the interval turns.
    pub fn refund<T: Hash>(&self, key: &T, events: isize) -> isize {
        self.refund_hash(self.hash_key(key), events)
    }

    /// Calls `rate_calc_fn` with the previous and current counts of `key`, the interval and the
    /// elapsed fraction of the current interval, and returns its result, like pingora's:
    /// after two idle intervals both counts are 0; when the current interval has just ended,
    /// the previous count is the interval that just ended and the current count 0.
    ///
    /// ```
    /// use keepcount_limits::clock::ManualClock;
    /// use keepcount_limits::rate::{Rate, RateComponents};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let rate = Rate::with_clock(Duration::from_secs(1), 4, 1024, 7, &clock).unwrap();
    /// rate.observe(&"k", 5);
    /// let weighted = |p: RateComponents| p.prev_samples as f64 * 0.1 + p.curr_samples as f64 * 0.9;
    /// assert_eq!(rate.rate_with(&"k", weighted), 4.5);
    /// ```
    pub fn rate_with<F, T, K>(&self, key: &K, rate_calc_fn: F) -> T
    where
        F: FnMut(RateComponents) -> T,
        K: Hash,
    {
        self.rate_with_hash(self.hash_key(key), rate_calc_fn)
    }

    /// Hashes `key` once for [`observe_hash`](Self::observe_hash),
    /// [`rate_hash`](Self::rate_hash) and [`rate_with_hash`](Self::rate_with_hash). Advanced API.
    ///
    /// ```
    /// use keepcount_limits::rate::Rate;
    /// use std::time::Duration;
    /// let rate = Rate::new(Duration::from_secs(1));
    /// let key = rate.hash_key("k");
    /// rate.observe_hash(key, 2);
    /// assert_eq!(rate.observe(&"k", 1), 3);
    /// ```
    #[inline]
    pub fn hash_key<T: Hash>(&self, key: T) -> KeyHash {
        self.red.hash_key(key)
    }

    /// [`observe`](Self::observe) for a key hashed with [`hash_key`](Self::hash_key).
    ///
    /// ```
    /// use keepcount_limits::rate::Rate;
    /// use std::time::Duration;
    /// let rate = Rate::new(Duration::from_secs(1));
    /// assert_eq!(rate.observe_hash(rate.hash_key(1u32), 4), 4);
    /// ```
    pub fn observe_hash(&self, key: KeyHash, events: isize) -> isize {
        self.maybe_reset();
        self.current(self.red_or_blue()).incr_hash(key, events)
    }

    /// [`observe_hash`](Self::observe_hash) that also returns how far into the current interval
    /// the call was, in the clock's nanoseconds (after any reset it made, so in
    /// `[0, interval)`): a fixed-window quota reports the count and the time until the window
    /// ends from one call instead of a second lookup. A call that lost the reset race to another
    /// thread reports 0, the start of the interval that thread began.
    ///
    /// ```
    /// use keepcount_limits::clock::ManualClock;
    /// use keepcount_limits::rate::Rate;
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let rate = Rate::with_clock(Duration::from_nanos(100), 4, 1024, 7, &clock).unwrap();
    /// let key = rate.hash_key("k");
    /// clock.advance(Duration::from_nanos(30));
    /// assert_eq!(rate.observe_hash_in_interval(key, 2), (2, 30));
    /// clock.advance(Duration::from_nanos(100)); // ends the interval: a new one starts now
    /// assert_eq!(rate.observe_hash_in_interval(key, 1), (1, 0));
    /// ```
    pub fn observe_hash_in_interval(&self, key: KeyHash, events: isize) -> (isize, u64) {
        let past = self.maybe_reset();
        let count = self.current(self.red_or_blue()).incr_hash(key, events);
        (
            count,
            if past < self.rotation.interval_nanos() {
                past
            } else {
                0
            },
        )
    }

    /// [`refund`](Self::refund) for a key hashed with [`hash_key`](Self::hash_key).
    ///
    /// ```
    /// use keepcount_limits::rate::Rate;
    /// use std::time::Duration;
    /// let rate = Rate::new(Duration::from_secs(1));
    /// let key = rate.hash_key(1u32);
    /// rate.observe_hash(key, 4);
    /// assert_eq!(rate.refund_hash(key, 1), 3);
    /// ```
    pub fn refund_hash(&self, key: KeyHash, events: isize) -> isize {
        self.maybe_reset();
        self.current(self.red_or_blue()).refund_hash(key, events)
    }

    /// [`rate`](Self::rate) for a key hashed with [`hash_key`](Self::hash_key).
    ///
    /// ```
    /// use keepcount_limits::rate::Rate;
    /// use std::time::Duration;
    /// let rate = Rate::new(Duration::from_secs(1));
    /// assert_eq!(rate.rate_hash(rate.hash_key(1u32)), 0.0);
    /// ```
    pub fn rate_hash(&self, key: KeyHash) -> f64 {
        let past = self.maybe_reset();
        if past >= self.rotation.interval_nanos().saturating_mul(2) {
            // Two intervals missed: no data, report 0 as a short cut (as pingora does).
            return 0.0;
        }
        self.previous(self.red_or_blue()).get_hash(key) as f64 * NANOS_PER_SEC
            / self.rotation.interval_nanos() as f64
    }

    /// [`rate_with`](Self::rate_with) for a key hashed with [`hash_key`](Self::hash_key).
    ///
    /// ```
    /// use keepcount_limits::rate::Rate;
    /// use std::time::Duration;
    /// let rate = Rate::new(Duration::from_secs(1));
    /// let key = rate.hash_key(1u32);
    /// rate.observe_hash(key, 3);
    /// assert_eq!(rate.rate_with_hash(key, |p| p.curr_samples), 3);
    /// ```
    pub fn rate_with_hash<F, T>(&self, key: KeyHash, mut rate_calc_fn: F) -> T
    where
        F: FnMut(RateComponents) -> T,
    {
        let past = self.maybe_reset();
        let (prev_samples, curr_samples) =
            if past >= self.rotation.interval_nanos().saturating_mul(2) {
                // Two intervals missed: both counts are stale.
                (0, 0)
            } else if past >= self.rotation.interval_nanos() {
                // This call just ended the interval: what was current is now previous.
                (self.previous(self.red_or_blue()).get_hash(key), 0)
            } else {
                let red_or_blue = self.red_or_blue();
                (
                    self.previous(red_or_blue).get_hash(key),
                    self.current(red_or_blue).get_hash(key),
                )
            };
        rate_calc_fn(RateComponents {
            prev_samples,
            curr_samples,
            interval: self.interval(),
            // interval_nanos >= 1: no division or remainder by zero.
            current_interval_fraction: (past % self.rotation.interval_nanos()) as f64
                / self.rotation.interval_nanos() as f64,
        })
    }

    fn current(&self, red_or_blue: bool) -> &Estimator {
        rotation::current(red_or_blue, &self.red, &self.blue)
    }

    fn previous(&self, red_or_blue: bool) -> &Estimator {
        rotation::previous(red_or_blue, &self.red, &self.blue)
    }

    fn red_or_blue(&self) -> bool {
        self.rotation.red_or_blue()
    }

    /// Starts a new interval if the current one has ended; returns the time since the current
    /// interval started as of the call.
    #[inline]
    fn maybe_reset(&self) -> u64 {
        self.rotation.maybe_reset(self)
    }

    fn sketch(&self, red: bool) -> &Estimator {
        if red { &self.red } else { &self.blue }
    }
}

/// After idleness both sketches subtract the copies taken before the rotation was claimed
/// (`estimator/carry.rs`) instead of being cleared, so what threads count meanwhile stays: in
/// the new interval, or in the previous one for a thread that had not yet seen the flip.
impl<C: Clock> Slots for Rate<C> {
    type Baseline = Baseline;

    fn clear(&self, red: bool) {
        self.sketch(red).reset();
    }

    fn baseline(&self, red: bool) -> Baseline {
        self.sketch(red).snapshot()
    }

    fn forget(&self, red: bool, baseline: Baseline, go_on: impl Fn() -> bool) {
        self.sketch(red).forget(&baseline, go_on);
    }
}

impl<C: Clock> fmt::Debug for Rate<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rate")
            .field("interval", &self.interval())
            .field("estimator", &self.red)
            .finish_non_exhaustive()
    }
}

/// Duration in nanoseconds, saturating at `u64::MAX` (584 years).
fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests;
