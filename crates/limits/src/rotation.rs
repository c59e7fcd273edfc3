//! [`Rotation`]: the two-slot interval clock shared by [`Rate`](crate::rate::Rate)'s sketches and
//! [`HeavyHitters`](crate::heavy::HeavyHitters)' summaries: one slot counts the current interval
//! while the other holds the previous one, and they trade places when an interval ends.
//!
//! pingora-limits' `Rate` rotation, without its panic: an interval starts when the first
//! operation at least one interval after the previous start notices it ended (so intervals are
//! not aligned to the clock), and after two idle intervals both slots are emptied. One
//! compare-and-swap decides which thread ends an interval, so concurrent callers never rotate
//! twice.
//!
//! After idleness pingora clears the slot that becomes current, flips, then clears the one that
//! was current, which wipes what threads that had not yet seen the flip counted into it: events of
//! the new interval. Here both slots hold only stale counts when the rotation is claimed, so the
//! flag flips at once and each slot then [forgets](Slots::forget) what it held at the claim: what
//! threads count meanwhile stays, every row of an event in the same slot (a `Rate`'s sketches
//! subtract copies taken before the claim; a `HeavyHitters`' summaries subtract their sketches'
//! copies and empty their tables, keeping racing increments in the sketch).

use crate::clock::Clock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The two slots a [`Rotation`] turns, red and blue.
pub(crate) trait Slots {
    /// What [`forget`](Self::forget) needs to know of a slot as it was before the rotation.
    type Baseline;

    /// Empties the red slot (`true`) or the blue one.
    fn clear(&self, red: bool);

    /// The red slot (`true`) or the blue one as it is now: read before a rotation after idleness
    /// is claimed, when no thread counts into either slot.
    fn baseline(&self, red: bool) -> Self::Baseline;

    /// Takes `baseline` (stale counts) out of the red slot or the blue one, keeping what threads
    /// added since. Stops early once `go_on` returns `false` (another rotation began: this
    /// thread stalled for an interval).
    fn forget(&self, red: bool, baseline: Self::Baseline, go_on: impl Fn() -> bool);
}

/// Which of two slots (called red and blue) counts the current interval, and since when.
pub(crate) struct Rotation<C> {
    /// `true`: red counts the current interval and blue holds the previous one.
    red_or_blue: AtomicBool,
    clock: C,
    /// The clock's reading at construction; times below are measured from here.
    start: u64,
    /// When the current interval started, in nanoseconds since `start`.
    last_reset: AtomicU64,
    /// The interval in nanoseconds, at least 1.
    interval_nanos: u64,
}

impl<C: Clock> Rotation<C> {
    /// Starts the first interval now on `clock`; `interval_nanos` must be at least 1.
    pub(crate) fn new(interval_nanos: u64, clock: C) -> Self {
        Self {
            red_or_blue: AtomicBool::new(true),
            start: clock.now_nanos(),
            clock,
            last_reset: AtomicU64::new(0),
            interval_nanos,
        }
    }

    /// The interval in nanoseconds.
    pub(crate) fn interval_nanos(&self) -> u64 {
        self.interval_nanos
    }

    /// `true` when red counts the current interval.
    pub(crate) fn red_or_blue(&self) -> bool {
        // SeqCst, as pingora: the flag and last_reset are read and written as one sequence, so
        // a thread that sees the new last_reset also sees the flipped flag.
        self.red_or_blue.load(Ordering::SeqCst)
    }

    /// Starts a new interval if the current one has ended, emptying the slot that counting goes
    /// to next first (after idleness: forgetting the stale counts of both); returns the time since
    /// the current interval started as of the call (before any rotation it made).
    #[inline]
    pub(crate) fn maybe_reset(&self, slots: &impl Slots) -> u64 {
        let now = self.clock.now_nanos().saturating_sub(self.start);
        // SeqCst: pairs with the CAS below; see red_or_blue.
        let last_reset = self.last_reset.load(Ordering::SeqCst);
        // Saturating: another thread may have reset with a later `now` than ours.
        let past = now.saturating_sub(last_reset);
        if past < self.interval_nanos {
            return past;
        }
        let red_or_blue = self.red_or_blue();
        let idle = past >= self.interval_nanos.saturating_mul(2);
        let baselines = idle.then(|| (slots.baseline(red_or_blue), slots.baseline(!red_or_blue)));
        // CAS so exactly one thread ends the interval that `last_reset` started. SeqCst on
        // success so the flag flip below is ordered after it for every thread; SeqCst on failure
        // (stronger than needed) keeps the reasoning to one total order.
        if self
            .last_reset
            .compare_exchange(last_reset, now, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            let go_on = || self.last_reset.load(Ordering::SeqCst) == now;
            if let Some((was_current, becomes_current)) = baselines {
                // Two intervals passed: both slots are stale. Count into the other at once, then
                // take the stale counts out of both; what arrives meanwhile stays where it went.
                self.red_or_blue.store(!red_or_blue, Ordering::SeqCst);
                slots.forget(!red_or_blue, becomes_current, go_on);
                slots.forget(red_or_blue, was_current, go_on);
            } else {
                // First clear the previous slot, which becomes the current one...
                slots.clear(!red_or_blue);
                // ...then flip the flag so that others count into the cleared slot.
                self.red_or_blue.store(!red_or_blue, Ordering::SeqCst);
            }
        }
        // On failure another thread ended the interval; nothing to do (pingora asserts here).
        past
    }
}

/// The slot counting the current interval: `red` when `red_or_blue`.
pub(crate) fn current<'a, T>(red_or_blue: bool, red: &'a T, blue: &'a T) -> &'a T {
    if red_or_blue { red } else { blue }
}

/// The slot holding the previous interval.
pub(crate) fn previous<'a, T>(red_or_blue: bool, red: &'a T, blue: &'a T) -> &'a T {
    if red_or_blue { blue } else { red }
}
