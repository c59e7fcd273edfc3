//! Heavy hitters over the current and the previous interval: [`HeavyHitters`], two
//! [`Summary`]s that take turns the way [`Rate`](crate::rate::Rate)'s two sketches do.

use crate::clock::{Clock, MonotonicClock};
use crate::hash::KeyHash;
use crate::rotation::{self, Rotation, Slots};
use std::borrow::Borrow;
use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::time::Duration;

use super::count::{Count, Talker};
use super::heap_bytes::HeapBytes;
use super::settings::{ConfigError, Settings};
use super::summary::{Baseline, MergeError, Summary};
use super::table::{Entry, rank};

/// Which interval a query reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Window {
    /// The interval being counted now (partial).
    Current,
    /// The last completed interval: with a one-minute interval, "the last minute".
    Previous,
    /// Both: bounds on the count since the previous interval began (one to two intervals).
    Both,
}

/// Heavy hitters per interval: who sent the most in the last completed interval, in the current
/// one, or in both, with bounds ([module doc](super)).
///
/// One summary counts the current interval while the other holds the previous one. An interval
/// starts when the first operation after the previous one's end notices it ended (as in
/// [`Rate`](crate::rate::Rate)); after two intervals without any operation both are empty.
///
/// ```
/// use keepcount_limits::clock::ManualClock;
/// use keepcount_limits::heavy::{HeavyHitters, Settings, Window};
/// use keepcount_limits::Shape;
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let settings = Settings::new(Shape::new(4, 1024).unwrap(), 7, 5, 64).unwrap();
/// let heavy = HeavyHitters::<String, _>::with_clock(settings, Duration::from_secs(60), &clock).unwrap();
/// for _ in 0..100 {
///     heavy.incr("10.0.0.1", 1);
/// }
/// heavy.incr("10.0.0.2", 1);
/// clock.advance(Duration::from_secs(60));
/// let top = heavy.top(10, Window::Previous); // the top talkers of the last minute
/// assert_eq!(top.len(), 1);
/// assert_eq!(top[0].key, "10.0.0.1");
/// assert!(top[0].count.lower <= 100 && 100 <= top[0].count.upper);
/// ```
///
/// # Performance
/// A [`Summary`] increment plus a clock read and the interval check (two atomic loads); at
/// interval ends one thread resets a summary (`hashes × slots` stores and the table's clear).
///
/// # Thread safety
/// `Send + Sync` when `K` and `C` are. As in [`Rate`](crate::rate::Rate), an increment racing
/// with an interval change may be counted in either interval, and is counted once. After an
/// idle spell, increments racing with the rotation stay in their summary's sketch; if any had
/// reached the table, that summary lifts its slack cap until its next reset (module doc,
/// *Thread safety*).
pub struct HeavyHitters<K, C: Clock = MonotonicClock> {
    red: Summary<K>,
    blue: Summary<K>,
    /// Which of `red` and `blue` counts the current interval.
    rotation: Rotation<C>,
}

impl<K: Hash + Eq + Clone + HeapBytes> HeavyHitters<K> {
    /// Heavy hitters per `interval` on the real clock; a zero interval is refused.
    pub fn new(settings: Settings, interval: Duration) -> Result<Self, ConfigError> {
        Self::with_clock(settings, interval, MonotonicClock::new())
    }
}

impl<K: Hash + Eq + Clone + HeapBytes, C: Clock> HeavyHitters<K, C> {
    /// Heavy hitters per `interval` reading time from `clock`; a zero interval is refused.
    pub fn with_clock(
        settings: Settings,
        interval: Duration,
        clock: C,
    ) -> Result<Self, ConfigError> {
        let interval_nanos = u64::try_from(interval.as_nanos()).unwrap_or(u64::MAX);
        if interval_nanos == 0 {
            return Err(ConfigError::ZeroInterval);
        }
        Ok(Self {
            // Same settings, so one KeyHash addresses a key in either.
            red: Summary::new(settings),
            blue: Summary::new(settings),
            rotation: Rotation::new(interval_nanos, clock),
        })
    }

    /// The interval.
    pub fn interval(&self) -> Duration {
        Duration::from_nanos(self.rotation.interval_nanos())
    }

    /// The configuration both summaries share.
    pub fn settings(&self) -> Settings {
        self.red.settings()
    }

    /// Hashes `key` once for the pre-hashed API. Advanced API.
    #[inline]
    pub fn hash_key<Q: Hash + ?Sized>(&self, key: &Q) -> KeyHash {
        self.red.hash_key(key)
    }

    /// Counts `value` for `key` in the current interval; returns its bounds in that interval.
    #[inline]
    pub fn incr<Q>(&self, key: &Q, value: u32) -> Count
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.incr_hash(self.hash_key(key), key, value)
    }

    /// [`incr`](Self::incr) for a key hashed with [`hash_key`](Self::hash_key). Advanced API.
    #[inline]
    pub fn incr_hash<Q>(&self, hash: KeyHash, key: &Q, value: u32) -> Count
    where
        K: Borrow<Q>,
        Q: Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.maybe_reset();
        self.current_of(self.red_or_blue())
            .incr_hash(hash, key, value)
    }

    /// [`incr_hash`](Self::incr_hash), also returning how far the current interval has run (in
    /// the clock's nanoseconds; 0 when this call started it): what a fixed-window quota reports
    /// as the time to its reset, from the same clock reading as the count. Advanced API.
    ///
    /// ```
    /// use keepcount_limits::clock::ManualClock;
    /// use keepcount_limits::heavy::{HeavyHitters, Settings};
    /// use keepcount_limits::Shape;
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let settings = Settings::new(Shape::new(4, 64).unwrap(), 7, 5, 8).unwrap();
    /// let heavy = HeavyHitters::<String, _>::with_clock(settings, Duration::from_nanos(100), &clock).unwrap();
    /// let hash = heavy.hash_key("k");
    /// clock.advance(Duration::from_nanos(30));
    /// assert_eq!(heavy.incr_hash_in_interval(hash, "k", 2).1, 30);
    /// clock.advance(Duration::from_nanos(100)); // ends the interval: a new one starts now
    /// assert_eq!(heavy.incr_hash_in_interval(hash, "k", 1).1, 0);
    /// ```
    pub fn incr_hash_in_interval<Q>(&self, hash: KeyHash, key: &Q, value: u32) -> (Count, u64)
    where
        K: Borrow<Q>,
        Q: Eq + ToOwned<Owned = K> + ?Sized,
    {
        let past = self.maybe_reset();
        let count = self
            .current_of(self.red_or_blue())
            .incr_hash(hash, key, value);
        (count, self.in_interval(past))
    }

    /// How far the current interval has run (0 when this call started it), starting a new
    /// interval if the current one ended, as every call does.
    pub fn interval_elapsed(&self) -> Duration {
        Duration::from_nanos(self.in_interval(self.maybe_reset()))
    }

    /// Takes back `value` counted for `key` in the current interval ([`Summary::decr`]); returns
    /// its bounds there.
    pub fn decr<Q>(&self, key: &Q, value: u32) -> Count
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.decr_hash(self.hash_key(key), key, value)
    }

    /// [`decr`](Self::decr) for a key hashed with [`hash_key`](Self::hash_key). Advanced API.
    pub fn decr_hash<Q>(&self, hash: KeyHash, key: &Q, value: u32) -> Count
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        self.maybe_reset();
        self.current_of(self.red_or_blue())
            .decr_hash(hash, key, value)
    }

    /// The bounds of `key`'s count in `window`.
    pub fn count<Q>(&self, key: &Q, window: Window) -> Count
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.count_hash(self.hash_key(key), key, window)
    }

    /// [`count`](Self::count) for a key hashed with [`hash_key`](Self::hash_key). Advanced API.
    pub fn count_hash<Q>(&self, hash: KeyHash, key: &Q, window: Window) -> Count
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let (current, previous) = self.summaries();
        match window {
            Window::Current => current.count_hash(hash, key),
            Window::Previous => previous.count_hash(hash, key),
            Window::Both => previous
                .count_hash(hash, key)
                .plus(current.count_hash(hash, key)),
        }
    }

    /// The `n` keys with the largest upper bounds in `window`, largest first. With
    /// [`Window::Both`], a key tracked in one interval only gets the other interval's sketch
    /// estimate added to its upper bound.
    pub fn top(&self, n: usize, window: Window) -> Vec<Talker<K>> {
        let (current, previous) = self.summaries();
        match window {
            Window::Current => current.top(n),
            Window::Previous => previous.top(n),
            Window::Both => top_of_both(previous, current, n),
        }
    }

    /// The summary counting the current interval. Its content is reset when the interval after
    /// next begins.
    pub fn current(&self) -> &Summary<K> {
        self.summaries().0
    }

    /// The summary of the last completed interval (empty after two idle intervals).
    pub fn previous(&self) -> &Summary<K> {
        self.summaries().1
    }

    /// What the keys tracked in both intervals own on the heap ([`Summary::key_bytes`]): two
    /// atomic loads, and no interval check, since a summary holds its keys until a rotation
    /// clears it. For callers that report native memory; it changes as keys enter, at each
    /// rotation (which drops one interval's keys) and with merges.
    #[inline]
    pub fn key_bytes(&self) -> usize {
        self.red.key_bytes().saturating_add(self.blue.key_bytes())
    }

    /// Merges `other` interval by interval: its current summary into this current one, its
    /// previous into this previous one. Meant for summaries of the same interval on several
    /// machines whose intervals are aligned; the bounds hold for the union of what each interval
    /// counted.
    pub fn merge<C2: Clock>(&self, other: &HeavyHitters<K, C2>) -> Result<(), MergeError> {
        let (current, previous) = self.summaries();
        let (their_current, their_previous) = other.summaries();
        current.merge(their_current)?;
        previous.merge(their_previous)
    }

    /// (current, previous), after starting a new interval if the current one ended.
    fn summaries(&self) -> (&Summary<K>, &Summary<K>) {
        self.maybe_reset();
        let red_or_blue = self.red_or_blue();
        (self.current_of(red_or_blue), self.previous_of(red_or_blue))
    }

    fn current_of(&self, red_or_blue: bool) -> &Summary<K> {
        rotation::current(red_or_blue, &self.red, &self.blue)
    }

    fn previous_of(&self, red_or_blue: bool) -> &Summary<K> {
        rotation::previous(red_or_blue, &self.red, &self.blue)
    }

    fn red_or_blue(&self) -> bool {
        self.rotation.red_or_blue()
    }

    fn summary(&self, red: bool) -> &Summary<K> {
        if red { &self.red } else { &self.blue }
    }

    /// Starts a new interval if the current one has ended; returns the time since the current
    /// interval started as of the call (before any rotation it made).
    #[inline]
    fn maybe_reset(&self) -> u64 {
        self.rotation.maybe_reset(self)
    }

    /// The time into the current interval after a [`maybe_reset`](Self::maybe_reset) that
    /// returned `past`: a call that ended the interval started the next one.
    fn in_interval(&self, past: u64) -> u64 {
        if past < self.rotation.interval_nanos() {
            past
        } else {
            0
        }
    }
}

/// After idleness both summaries take out what they held at the claim ([`Summary::forget`])
/// instead of being cleared, so what threads count meanwhile stays: in the new interval, or in
/// the previous one for a thread that had not yet seen the flip.
impl<K: Hash + Eq + Clone + HeapBytes, C: Clock> Slots for HeavyHitters<K, C> {
    type Baseline = Baseline<K>;

    fn clear(&self, red: bool) {
        self.summary(red).reset();
    }

    fn baseline(&self, red: bool) -> Baseline<K> {
        self.summary(red).baseline()
    }

    fn forget(&self, red: bool, baseline: Baseline<K>, go_on: impl Fn() -> bool) {
        self.summary(red).forget(baseline, go_on);
    }
}

/// The top `n` over two intervals: each key tracked in either gets the sum of its bounds in
/// both (an interval where it is untracked contributes its sketch estimate to the upper bound).
fn top_of_both<K: Hash + Eq + Clone + HeapBytes>(
    previous: &Summary<K>,
    current: &Summary<K>,
    n: usize,
) -> Vec<Talker<K>> {
    let mut keys: HashMap<K, KeyHash> = HashMap::new();
    for entry in previous.entries().into_iter().chain(current.entries()) {
        keys.entry(entry.key).or_insert(entry.hash);
    }
    let mut entries: Vec<Entry<K>> = keys
        .into_iter()
        .map(|(key, hash)| {
            let count = previous
                .count_hash(hash, &key)
                .plus(current.count_hash(hash, &key));
            Entry {
                hash,
                key,
                exact: count.lower,
                slack: count.slack(),
            }
        })
        .collect();
    entries.sort_unstable_by(rank);
    entries.truncate(n);
    entries
        .into_iter()
        .map(|entry| Talker {
            count: entry.count(),
            key: entry.key,
        })
        .collect()
}

impl<K, C: Clock> fmt::Debug for HeavyHitters<K, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeavyHitters")
            .field(
                "interval",
                &Duration::from_nanos(self.rotation.interval_nanos()),
            )
            .field("summary", &self.red)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::heavy::Standing;
    use crate::shape::Shape;
    use std::sync::Arc;

    const MINUTE: Duration = Duration::from_secs(60);

    fn heavy(clock: &ManualClock) -> HeavyHitters<u64, &ManualClock> {
        let settings = Settings::new(Shape::new(4, 1024).unwrap(), 5, 3, 16).unwrap();
        HeavyHitters::with_clock(settings, MINUTE, clock).unwrap()
    }

    #[test]
    fn key_bytes_follow_entries_rotations_merges_and_idle_spells() {
        let clock = ManualClock::new();
        let settings = Settings::new(Shape::new(4, 1024).unwrap(), 5, 1, 16).unwrap();
        let h = HeavyHitters::<Vec<u8>, _>::with_clock(settings, MINUTE, &clock).unwrap();
        let key = |byte: u8, len: usize| vec![byte; len];
        h.incr(&key(b'a', 100)[..], 1);
        h.incr(&key(b'a', 100)[..], 1); // tracked already: no new bytes
        h.incr(&key(b'b', 50)[..], 1);
        assert_eq!(h.key_bytes(), 150);
        clock.advance(MINUTE);
        h.incr(&key(b'c', 10)[..], 1);
        // The previous interval keeps its keys: both count.
        assert_eq!(h.key_bytes(), 160);
        let other = HeavyHitters::<Vec<u8>, _>::with_clock(settings, MINUTE, &clock).unwrap();
        other.incr(&key(b'c', 10)[..], 1);
        other.incr(&key(b'd', 1000)[..], 1);
        h.merge(&other).unwrap();
        assert_eq!(h.current().key_bytes(), 1010); // c once, and d
        assert_eq!(h.key_bytes(), 1160);
        clock.advance(MINUTE);
        // The rotation clears the interval before last (a and b), at the next operation.
        assert_eq!(h.interval_elapsed(), Duration::ZERO);
        assert_eq!(h.key_bytes(), 1010);
        // After an idle spell the rotation takes out what both held.
        clock.advance(MINUTE * 3);
        assert_eq!(h.interval_elapsed(), Duration::ZERO);
        assert_eq!(h.key_bytes(), 0);
    }

    #[test]
    fn interval_elapsed_follows_the_rotation() {
        let clock = ManualClock::new();
        let h = heavy(&clock);
        clock.advance(Duration::from_secs(20));
        assert_eq!(h.interval_elapsed(), Duration::from_secs(20));
        let key = h.hash_key(&1);
        assert_eq!(h.incr_hash_in_interval(key, &1, 1).1, 20_000_000_000);
        // Past the end: this call starts the next interval, counted from its own reading.
        clock.advance(Duration::from_secs(50));
        assert_eq!(h.interval_elapsed(), Duration::ZERO);
        clock.advance(Duration::from_secs(5));
        let (count, past) = h.incr_hash_in_interval(key, &1, 1);
        assert_eq!((count.upper, past), (1, 5_000_000_000));
    }

    #[test]
    fn the_previous_window_holds_the_last_completed_interval() {
        let clock = ManualClock::new();
        let h = heavy(&clock);
        for _ in 0..10 {
            h.incr(&1, 1);
        }
        assert_eq!(h.top(5, Window::Previous), []);
        clock.advance(MINUTE);
        h.incr(&2, 4);
        let previous = h.top(5, Window::Previous);
        assert_eq!(previous.len(), 1);
        assert_eq!(previous[0].key, 1);
        assert_eq!(h.top(5, Window::Current)[0].key, 2);
        let count = h.count(&1, Window::Both);
        assert!(count.lower <= 10 && 10 <= count.upper);
        clock.advance(MINUTE * 2);
        assert_eq!(h.top(5, Window::Both), []);
        assert_eq!(h.count(&1, Window::Both).upper, 0);
    }

    #[test]
    fn both_windows_add_a_keys_parts() {
        let clock = ManualClock::new();
        let h = heavy(&clock);
        for _ in 0..5 {
            h.incr(&1, 1);
        }
        h.incr(&2, 1);
        clock.advance(MINUTE);
        for _ in 0..7 {
            h.incr(&1, 1);
        }
        for _ in 0..6 {
            h.incr(&2, 1);
        }
        let top = h.top(2, Window::Both);
        assert_eq!(top[0].key, 1);
        assert!(top[0].count.lower <= 12 && 12 <= top[0].count.upper);
        assert!(top[1].count.lower <= 7 && 7 <= top[1].count.upper);
        assert_eq!(top[1].count.standing, Standing::Tracked);
    }

    #[test]
    fn zero_interval_is_refused() {
        let settings = Settings::new(Shape::new(1, 1).unwrap(), 0, 1, 1).unwrap();
        let err = HeavyHitters::<u64>::new(settings, Duration::ZERO).unwrap_err();
        assert_eq!(err, ConfigError::ZeroInterval);
    }

    #[test]
    fn merge_goes_window_by_window() {
        let clock = ManualClock::new();
        let (a, b) = (heavy(&clock), heavy(&clock));
        for _ in 0..4 {
            a.incr(&1, 1);
            b.incr(&1, 1);
        }
        clock.advance(MINUTE);
        b.incr(&1, 1);
        a.merge(&b).unwrap();
        let previous = a.count(&1, Window::Previous);
        assert!(previous.lower <= 8 && 8 <= previous.upper);
        assert_eq!(a.count(&1, Window::Current).upper, 1);
    }

    #[test]
    fn racing_interval_changes_never_panic_and_leave_nothing_stale() {
        let clock = Arc::new(ManualClock::new());
        let settings = Settings::new(Shape::new(4, 256).unwrap(), 1, 2, 32).unwrap();
        let h = Arc::new(
            HeavyHitters::<u64, _>::with_clock(
                settings,
                Duration::from_millis(10),
                Arc::clone(&clock),
            )
            .unwrap(),
        );
        let workers: Vec<_> = (0..3)
            .map(|t| {
                let h = Arc::clone(&h);
                std::thread::spawn(move || {
                    for i in 0..20_000u64 {
                        h.incr(&(i % 50 + t), 1);
                        if i % 1000 == 0 {
                            let _ = h.top(10, Window::Both);
                        }
                    }
                })
            })
            .collect();
        for _ in 0..500 {
            clock.advance(Duration::from_millis(3));
            std::thread::yield_now();
        }
        for worker in workers {
            worker.join().unwrap();
        }
        clock.advance(Duration::from_millis(30));
        assert_eq!(h.top(10, Window::Both), []);
    }
}
