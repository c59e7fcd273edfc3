//! [`SharedRate`]: pingora-limits' `Rate` with its sketches and its interval in a shared segment.
//!
//! # The interval word
//! Which sketch counts the current interval, and when that interval started, live in one 64-bit
//! header word, so every process sees both change together:
//!
//! ```text
//! bits 63..3  the current interval's start, host monotonic nanoseconds (multiple of 8)
//! bit  2      STALE: the interval that ended last holds data older than one interval: read 0
//! bit  1      ROTATING: a process is clearing the sketch that becomes current
//! bit  0      FLAG: 0 the first sketch counts the current interval, 1 the second
//! ```
//!
//! A process that finds the interval over **claims** the rotation with one compare-and-swap from
//! the word it read to `(now, FLAG, ROTATING)`: of all processes that read the same word exactly
//! one succeeds, and a lagging process, whose word is out of date, fails, so an interval ends
//! once. The winner clears the previous sketch and **finishes** with a second compare-and-swap to
//! `(now, !FLAG)`. While ROTATING is set nothing waits: readers report the interval that just
//! ended as previous and 0 as current (never a half-cleared sketch), and writers keep counting
//! into the sketch they were using, which becomes the previous one. If the claimant dies or
//! stalls for a whole interval mid-rotation, the next process takes the rotation over with a
//! compare-and-swap from the stalled word; clearing is idempotent and only the owner of the word
//! can finish. No process ever waits for another.
//!
//! # Rotating after idleness
//! After two or more idle intervals the sketch that ended is stale too; rather than clearing a
//! sketch others may be counting into, the finish sets STALE and readers take the previous count
//! as 0 until the next rotation clears that sketch. The events counted while such a rotation is
//! under way belong to the new interval but go into that stale sketch, mixed with its old
//! counts, so the claimant copies the stale sketch before it claims (nobody counts into it then)
//! and, once finished, **carries** each counter's gain over that copy into the new current sketch
//! (`estimator/carry.rs`). A writer that counted into the stale sketch during the rotation then
//! checks the word: if the rotation has finished, the carry may have passed its counters, so it
//! moves its own events itself: up to what it counted out of each counter, by compare-and-swap,
//! never the whole counter. A `SeqCst` fence on each side (after the writer's count, after the
//! claimant's finish) makes sure that of a writer and the carry at least one sees the other, and
//! every event lands in the new interval exactly once (`estimator/carry.rs` says why).
//!
//! So the new sketch holds only events of the new interval, never a stale count, and the carry
//! only adds to it: a refund there stops each counter at zero for good. A writer used to move its
//! counters whole, stale count included, for the carry to subtract when it reached them; a refund
//! in between took the stale count as the key's and the subtraction left the counter below zero,
//! by as much as the count before the idle spell. (Marking the carry in the word instead, for
//! refunds to take nothing until it ends, would have taken a fourth low bit, so a new layout
//! version; a carrier that died would have left refunds idle until the next rotation, and its
//! stale counts in the new interval.) Until the carry has passed a counter, the events
//! counted into it during the rotation, except a late writer's own, are missing from the new
//! interval: microseconds for the usual shapes. The copy holds the stale sketch's nonzero
//! counters (16 bytes each), briefly, in each process racing to end that interval, and the carry
//! swaps every nonzero counter: on 4 × 8,192 a rotation after idleness took 40–65 µs after 200
//! keys and ~240 µs after 20,000 (a clear took 18–24 µs), medians on a loaded 2-core VM, once
//! per idle spell.
//!
//! # What it does not promise
//! As in pingora's `Rate`, an event racing with a rotation may be counted in either interval. A
//! process descheduled for longer than an interval in the middle of an update may add to a sketch
//! that was cleared meanwhile, or (as a stalled claimant) clear counts others made after the
//! takeover: bounded by what arrives during that stall. A claimant killed mid-rotation is a
//! stalled one that never comes back: nothing tells it from a slow one, so it is taken over an
//! interval after its claim, and until then writers count into the sketch that ended (reads high
//! by its counts; after idleness the takeover's baseline swallows what was counted meanwhile).
//! The count an `observe` returns while a rotation after idleness is under way includes the stale
//! counts of the interval before the idle spell (its events are carried into the new interval all
//! the same). A claimant killed mid-carry (or a worker thread terminated mid-carry on the
//! fallback) leaves the events in the counters it had not reached out of the new interval, except
//! late writers' own: an under-count for one interval. A process of an earlier build, which moved
//! a late writer's counters whole, can share the segment (the layout did not change), and where it
//! moves one, a refund racing with the carry can leave that counter below zero as before.
//!
//! # Time
//! Every process reads [`HostClock`] (`CLOCK_MONOTONIC`): on Linux and macOS one clock per boot
//! for the whole host, so intervals agree across processes. Processes in different Linux time
//! namespaces see different monotonic clocks and must not share a rate. A segment left from
//! another boot (in a directory that survives reboots) has an interval start in the future of the
//! new clock: it is treated as stale and rotated at once. A start less than a second ahead is a
//! reading taken a moment before another process or thread began the interval (over a buffer,
//! the caller reads its clock before the word is loaded), and counts as no time passed.

use crate::clock::{Clock, HostClock};
#[cfg(test)]
use crate::estimator::Baseline;
use crate::estimator::Estimator;
use crate::hash::KeyHash;
use crate::rate::RateComponents;
use crate::shape::Shape;
use crate::shared::OTHER_CLOCK_NANOS;
use crate::shared::error::SharedError;
use crate::shared::layout::{Kind, Layout, RATE_WORD_OFFSET};
use crate::shared::segment::{Counters, Segment, SharedOptions};
use std::fmt;
use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering, fence};
use std::time::Duration;

/// Bit 0 of the interval word: which sketch counts the current interval.
const FLAG: u64 = 1;
/// Bit 1: a rotation is under way.
const ROTATING: u64 = 2;
/// Bit 2: the previous interval's counts are stale.
const STALE: u64 = 4;
/// The bits that are not the start time.
const LOW_BITS: u64 = 7;
/// Nanoseconds per second, to report rates per second.
const NANOS_PER_SEC: f64 = 1e9;

/// Per-key event rate over fixed intervals, shared by every process that opens the same name.
///
/// The same answers as [`Rate`](crate::rate::Rate) (pingora's semantics), except that an interval
/// is one for the whole host (the module documentation of `shared/rate.rs` says how it rotates).
///
/// ```
/// use keepcount_limits::shared::{SharedOptions, SharedRate, unlink};
/// use keepcount_limits::Shape;
/// use std::time::Duration;
///
/// let options = SharedOptions::new().dir(std::env::temp_dir());
/// # unlink("doc-rate", &options).unwrap();
/// let shape = Shape::new(4, 1024).unwrap();
/// let a = SharedRate::open("doc-rate", Duration::from_secs(60), shape, 42, &options).unwrap();
/// let b = SharedRate::open("doc-rate", Duration::from_secs(60), shape, 42, &options).unwrap();
/// a.observe(&"k", 2);
/// assert_eq!(b.observe(&"k", 1), 3);
/// unlink("doc-rate", &options).unwrap();
/// ```
///
/// # Thread safety
/// `Send + Sync`; lock-free across threads and processes.
pub struct SharedRate<C: Clock = HostClock> {
    sketches: [Estimator<Counters>; 2],
    segment: Arc<Segment>,
    interval_nanos: u64,
    clock: C,
}

/// The layout of a rate segment, and its interval in nanoseconds (never 0, and exact: a longer
/// interval is refused rather than stored as `u64::MAX`, which would make it another's).
fn rate_layout(interval: Duration, shape: Shape, seed: u64) -> Result<(Layout, u64), SharedError> {
    let interval_nanos =
        u64::try_from(interval.as_nanos()).map_err(|_| SharedError::LongInterval)?;
    if interval_nanos == 0 {
        return Err(SharedError::ZeroInterval);
    }
    let layout = Layout {
        kind: Kind::Rate,
        shape,
        seed,
        interval_nanos,
        processes: 0,
        limiter: None,
    };
    Ok((layout, interval_nanos))
}

/// The interval word as one call saw it.
#[derive(Debug, Clone, Copy)]
struct View {
    /// The current sketch's index.
    current: usize,
    rotating: bool,
    stale: bool,
    /// Nanoseconds since the current interval started.
    past: u64,
    /// The interval word itself.
    word: u64,
}

/// The word that finishes the rotation claimed by `claimed`: same start and staleness, no longer
/// rotating, the other sketch current.
fn finished(claimed: u64) -> u64 {
    (claimed & !(ROTATING | FLAG)) | ((claimed & FLAG) ^ FLAG)
}

impl SharedRate {
    /// Opens (or creates) the shared rate `name`: two sketches of `shape` keyed by `seed`, over
    /// intervals of `interval`, reading the host's monotonic clock. Fails if the segment exists
    /// with another kind, shape, seed or interval ([`SharedError::Mismatch`]), and for an interval
    /// of zero ([`SharedError::ZeroInterval`]) or longer than `u64::MAX` nanoseconds
    /// ([`SharedError::LongInterval`]).
    pub fn open(
        name: &str,
        interval: Duration,
        shape: Shape,
        seed: u64,
        options: &SharedOptions,
    ) -> Result<Self, SharedError> {
        Self::with_clock(name, interval, shape, seed, options, HostClock)
    }
}

impl<C: Clock> SharedRate<C> {
    /// [`open`](SharedRate::open) reading time from `clock`, which must count from the same origin
    /// in every process that opens `name` (tests share one [`ManualClock`](crate::clock::ManualClock)
    /// between several opens in one process).
    pub fn with_clock(
        name: &str,
        interval: Duration,
        shape: Shape,
        seed: u64,
        options: &SharedOptions,
        clock: C,
    ) -> Result<Self, SharedError> {
        let (layout, interval_nanos) = rate_layout(interval, shape, seed)?;
        // A new segment's interval starts now, counted in the first sketch. Relaxed: the segment
        // is not yet visible to any other process.
        let initialise = |segment: &Segment| {
            let start = clock.now_nanos() & !LOW_BITS;
            segment
                .word(RATE_WORD_OFFSET)
                .store(start, Ordering::Relaxed);
        };
        let segment = Arc::new(Segment::open(name, layout, options, &initialise)?);
        Self::over(segment, interval_nanos, clock)
    }

    /// A rate over `len` bytes at `start` that the caller lends, as
    /// [`lend_estimator`](crate::shared::lend_estimator) lends a sketch: the header must name a
    /// rate of this interval, shape and seed, and time comes from `clock`, which must count from
    /// the same origin for every user of the memory. An interval word of 0 (a fresh buffer) is an
    /// interval that started at the clock's origin, so the first call normally ends it.
    ///
    /// # Safety
    /// As [`lend_estimator`](crate::shared::lend_estimator)'s.
    pub unsafe fn lend(
        start: std::ptr::NonNull<u8>,
        len: usize,
        interval: Duration,
        shape: Shape,
        seed: u64,
        clock: C,
    ) -> Result<Self, SharedError> {
        let (layout, interval_nanos) = rate_layout(interval, shape, seed)?;
        // SAFETY: the caller's contract is Segment::lent's.
        let segment = Arc::new(unsafe { Segment::lent(start, len, layout) }?);
        Self::over(segment, interval_nanos, clock)
    }

    /// The rate whose sketches and interval word are in `segment`.
    fn over(segment: Arc<Segment>, interval_nanos: u64, clock: C) -> Result<Self, SharedError> {
        let layout = *segment.layout();
        let sketch = |index| {
            Estimator::with_store(
                Counters::new(Arc::clone(&segment), index),
                layout.shape,
                layout.seed,
            )
        };
        Ok(Self {
            sketches: [sketch(0)?, sketch(1)?],
            segment,
            interval_nanos,
            clock,
        })
    }

    /// The interval.
    pub fn interval(&self) -> Duration {
        Duration::from_nanos(self.interval_nanos)
    }

    /// Hashes `key` once for the `*_hash` methods.
    #[inline]
    pub fn hash_key<T: Hash>(&self, key: T) -> KeyHash {
        self.sketches[0].hash_key(key)
    }

    /// Counts `events` for `key` in the current interval; returns its count there.
    pub fn observe<T: Hash>(&self, key: &T, events: isize) -> isize {
        self.observe_hash(self.hash_key(key), events)
    }

    /// The completed interval's count of `key`, per second.
    pub fn rate<T: Hash>(&self, key: &T) -> f64 {
        self.rate_hash(self.hash_key(key))
    }

    /// `rate_calc_fn` applied to `key`'s counts, as [`Rate::rate_with`](crate::rate::Rate::rate_with).
    pub fn rate_with<F, T, K>(&self, key: &K, rate_calc_fn: F) -> T
    where
        F: FnMut(RateComponents) -> T,
        K: Hash,
    {
        self.rate_with_hash(self.hash_key(key), rate_calc_fn)
    }

    /// [`observe`](Self::observe) for a key hashed with [`hash_key`](Self::hash_key).
    pub fn observe_hash(&self, key: KeyHash, events: isize) -> isize {
        self.count(key, events, self.view())
    }

    /// [`observe_hash`](Self::observe_hash), also returning the nanoseconds elapsed in the
    /// interval it counted in (in [0, interval)), so a window quota learns both from one read of
    /// the interval word, as [`Rate::observe_hash_in_interval`](crate::rate::Rate::observe_hash_in_interval).
    pub fn observe_hash_in_interval(&self, key: KeyHash, events: isize) -> (isize, u64) {
        let view = self.view();
        let count = self.count(key, events, view);
        // interval_nanos >= 1: no remainder by zero.
        (count, view.past % self.interval_nanos)
    }

    /// Takes back up to `events` of `key`'s count in the current interval, stopping each of its
    /// counters at zero, as [`Rate::refund`](crate::rate::Rate::refund) does: however many
    /// processes race to take back one count, they take it once between them. Returns the key's
    /// count there.
    ///
    /// While a rotation is under way it takes nothing and returns 0, the count readers report for
    /// the new interval then: what is counted meanwhile goes into the sketch that ended, and after
    /// idleness is carried into the new interval by its gain over a copy taken before the claim, so
    /// a refund there could take stale counts the carry then takes again (an over-count until the
    /// interval turns, rather than a count below zero). Once the rotation has finished, a refund
    /// works on the new sketch, which holds no stale count and which that carry only adds to: no
    /// counter a refund stopped at zero goes below it later, though events counted during the
    /// rotation that the carry has not moved yet (microseconds) are not there to take: they count
    /// after the refund. What still takes a counter below zero: a negative `observe`; a process
    /// stalled for more than an interval between reading the word and refunding, which can lower
    /// the sketch a rotation after idleness is carrying from, as it can add to one; a process of
    /// an earlier build moving a late writer's counters whole (the module documentation).
    pub fn refund<T: Hash>(&self, key: &T, events: isize) -> isize {
        self.refund_hash(self.hash_key(key), events)
    }

    /// [`refund`](Self::refund) for a key hashed with [`hash_key`](Self::hash_key).
    pub fn refund_hash(&self, key: KeyHash, events: isize) -> isize {
        let view = self.view();
        if view.rotating {
            return 0;
        }
        self.sketches[view.current].refund_hash(key, events)
    }

    /// [`rate`](Self::rate) for a key hashed with [`hash_key`](Self::hash_key).
    pub fn rate_hash(&self, key: KeyHash) -> f64 {
        let (previous, _) = self.counts(key, self.view());
        previous as f64 * NANOS_PER_SEC / self.interval_nanos as f64
    }

    /// [`rate_with`](Self::rate_with) for a key hashed with [`hash_key`](Self::hash_key).
    pub fn rate_with_hash<F, T>(&self, key: KeyHash, mut rate_calc_fn: F) -> T
    where
        F: FnMut(RateComponents) -> T,
    {
        let view = self.view();
        let (prev_samples, curr_samples) = self.counts(key, view);
        rate_calc_fn(RateComponents {
            prev_samples,
            curr_samples,
            interval: self.interval(),
            // interval_nanos >= 1: no division or remainder by zero.
            current_interval_fraction: (view.past % self.interval_nanos) as f64
                / self.interval_nanos as f64,
        })
    }

    /// The segment file.
    pub fn path(&self) -> &std::path::Path {
        self.segment.path()
    }

    /// `key`'s (previous, current) counts in `view`.
    fn counts(&self, key: KeyHash, view: View) -> (isize, isize) {
        if view.rotating {
            // The interval that just ended is still in the sketch `current` names; the new one
            // has seen nothing yet.
            let ended = if view.stale {
                0
            } else {
                self.sketches[view.current].get_hash(key)
            };
            return (ended, 0);
        }
        let previous = if view.stale {
            0
        } else {
            self.sketches[1 - view.current].get_hash(key)
        };
        (previous, self.sketches[view.current].get_hash(key))
    }

    /// Counts `events` for `key` in the sketch `view` names as current.
    #[inline]
    fn count(&self, key: KeyHash, events: isize, view: View) -> isize {
        let count = self.sketches[view.current].incr_hash(key, events);
        // Counting nothing (a read) leaves nothing of ours to move.
        if view.rotating && view.stale && events != 0 {
            self.carry_late(key, events, view);
        }
        count
    }

    /// After counting `events` into the stale sketch during a rotation after idleness: if that
    /// rotation has finished meanwhile, its carry may have passed our counters, so we move our
    /// events, and only ours (module documentation).
    #[cold]
    fn carry_late(&self, key: KeyHash, events: isize, view: View) {
        // SeqCst: pairs with the fence after the claimant's finish (module documentation).
        fence(Ordering::SeqCst);
        if self.word().load(Ordering::Relaxed) == finished(view.word) {
            self.sketches[1 - view.current].carry_events_from(
                &self.sketches[view.current],
                key,
                events,
            );
        }
    }

    fn word(&self) -> &AtomicU64 {
        self.segment.word(RATE_WORD_OFFSET)
    }

    /// The interval word after ending the current interval if it is over (and taking over a
    /// rotation stalled for an interval); never waits for another process.
    fn view(&self) -> View {
        let word = self.word();
        loop {
            // Acquire: pairs with the Release of the finishing CAS, so a process that sees the
            // new word also sees the cleared sketch. Loaded before the clock is read, so `now`
            // is not older than the start it is compared with (within one boot).
            let seen = word.load(Ordering::Acquire);
            let now = self.clock.now_nanos();
            let start = seen & !LOW_BITS;
            let view = View {
                current: (seen & FLAG) as usize,
                rotating: seen & ROTATING != 0,
                stale: seen & STALE != 0,
                past: match now.checked_sub(start) {
                    Some(past) => past,
                    // A start a moment ahead: a caller's reading (a buffer's clock is read before
                    // the word is loaded) taken just before another thread began the interval.
                    // No time passed; taken for long past, it cleared the interval that had just
                    // ended and marked it stale.
                    None if start - now <= OTHER_CLOCK_NANOS => 0,
                    // Far ahead: another boot's clock (or another clock's origin).
                    None => u64::MAX,
                },
                word: seen,
            };
            if view.past < self.interval_nanos {
                return view;
            }
            let claimed = if view.rotating {
                // Stalled for a whole interval: take the rotation over, same sketches, same staleness.
                (now & !LOW_BITS) | (seen & LOW_BITS)
            } else {
                let stale = if view.past >= self.interval_nanos.saturating_mul(2) {
                    STALE
                } else {
                    0
                };
                (now & !LOW_BITS) | (seen & FLAG) | ROTATING | stale
            };
            // The stale sketch as it is before the claim, while nobody counts into it, so that
            // the events counted during the rotation can be told from its old counts.
            let baseline = (claimed & STALE != 0).then(|| self.sketches[view.current].snapshot());
            // AcqRel on success: Acquire so that the clearing below is ordered after what the
            // previous finisher published; Release is not needed by anyone but keeps the single
            // total order simple. Acquire on failure: we loop and read the winner's word.
            if word
                .compare_exchange(seen, claimed, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                self.rotate(claimed, baseline.as_deref());
            }
        }
    }

    /// Clears the sketch that becomes current and publishes the new interval, as the owner of
    /// the `claimed` word; after idleness, then carries the events counted meanwhile from the
    /// stale sketch, whose counts before the claim are `baseline`.
    fn rotate(&self, claimed: u64, baseline: Option<&[(usize, i64)]>) {
        let current = (claimed & FLAG) as usize;
        self.sketches[1 - current].reset();
        // Release: publishes the cleared sketch with the new word. A failure means another
        // process took the rotation over (we stalled): it finishes instead.
        let finished = finished(claimed);
        if self
            .word()
            .compare_exchange(claimed, finished, Ordering::Release, Ordering::Relaxed)
            .is_ok()
            && let Some(baseline) = baseline
        {
            self.carry(current, baseline, finished);
        }
    }

    /// Carries what sketch `stale` gained over `baseline` into the other, the current one, while
    /// the word is still `finished` (a later rotation, after a stall of an interval, ends it).
    fn carry(&self, stale: usize, baseline: &[(usize, i64)], finished: u64) {
        // SeqCst: pairs with the fence of a writer's carry_late (module documentation).
        fence(Ordering::SeqCst);
        let word = self.word();
        self.sketches[1 - stale].carry_from(&self.sketches[stale], baseline, || {
            word.load(Ordering::Relaxed) == finished
        });
    }
}

impl<C: Clock> fmt::Debug for SharedRate<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedRate")
            .field("path", &self.path())
            .field("interval", &self.interval())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests;
