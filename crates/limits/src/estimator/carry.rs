//! Carrying counts from one sketch into another while other threads (or processes) keep counting
//! into the first: how a shared rate keeps the events that arrive while it rotates after an idle
//! spell (`shared/rate.rs`, "Rotating after idleness"). A process-local `Rate` only subtracts a
//! baseline in place ([`Estimator::forget`], through `rotation.rs`).
//!
//! The source sketch holds counts to drop (a `baseline` copied while nobody counted into it) plus
//! events to keep. Two kinds of move take them out, each adding what it took from a source
//! counter to the same counter of the destination:
//!
//! * the **carrier** empties each source counter with one `swap(0)`, once per counter (one the
//!   baseline names is swapped even if unchanged), and adds what it took less the baseline;
//! * a **late writer**, one that counted `events` into the source and then found that the carry
//!   may have passed its counters, takes up to `events` out of each of them by compare-and-swap,
//!   never past zero ([`carry_events_from`](Estimator::carry_events_from)).
//!
//! However they interleave, the destination gains exactly the events: what all moves took is the
//! baseline plus the events, less what is still in the source. And nothing stays in the source
//! once every late writer has moved: after the carrier's swap, a counter holds only what was
//! counted after it, never more than the late writers' events not yet moved (each takes its own
//! events or all that is left), so the last one empties it. A late writer cannot tell whether the
//! swap already took its events; when it did, the writer takes another's, who then finds them
//! gone: each event moves once.
//!
//! Before the swap a counter holds its baseline plus what was counted since, and a late writer
//! takes at most its own events from it: the swap still finds at least the baseline, so (counts
//! being positive) the carrier adds nothing negative and the destination never holds a stale
//! count. Its counters only grow while the carry runs, which is what lets a refund stop them at
//! zero. A late writer used to move its counters whole, baseline included, for the carrier to
//! subtract when it reached them: a refund in between took the stale count as the key's, and the
//! subtraction then left the counter below zero (and a carrier that died first left the stale
//! count in the new interval). Negative counts (a negative `observe`) move the same way, toward
//! zero from below; mixed with positive ones, the destination may hold more or less than the
//! events while the carry runs, and exactly them once the carrier and every late writer are done.

use super::Estimator;
use super::saturating::{add_saturating, sub_saturating, take_toward_zero};
use crate::hash::KeyHash;
use crate::store::CounterStore;
use std::sync::atomic::Ordering;

/// A sketch's counters that were not 0, as (index, value) in index order: the usual stale sketch
/// is mostly zeros, and a dense copy of a large one is a fresh mapping to fault in (measured on
/// 4 × 8,192 after 200 keys, a rotation after idleness took 78 µs with a dense copy).
pub(crate) type Baseline = Vec<(usize, i64)>;

impl<S: CounterStore> Estimator<S> {
    /// The counters that are not 0: the baseline of a later [`carry_from`](Self::carry_from).
    /// Meant for a sketch nobody counts into meanwhile.
    pub(crate) fn snapshot(&self) -> Baseline {
        // Relaxed: the caller reads a sketch at rest; the claim that follows orders the rest.
        self.store
            .counters()
            .iter()
            .map(|counter| counter.load(Ordering::Relaxed))
            .enumerate()
            .filter(|&(_, value)| value != 0)
            .collect()
    }

    /// Moves into this sketch what `from` (same shape and seed) gained over `baseline`, emptying
    /// `from`; stops early, at a counter boundary, once `go_on` returns `false`.
    ///
    /// The caller issues a `SeqCst` fence before, pairing with the fence of a writer that counted
    /// into `from` and then checked whether the carry had started (see
    /// [`carry_events_from`](Self::carry_events_from)): either that writer sees the carry started
    /// and moves its own events, or the swaps here see its increments.
    pub(crate) fn carry_from(
        &self,
        from: &Self,
        baseline: &[(usize, i64)],
        go_on: impl Fn() -> bool,
    ) {
        let (to, source) = (self.store.counters(), from.store.counters());
        // First the counters the baseline names: each is swapped, even if unchanged, so that its
        // baseline is subtracted exactly once whoever emptied it first.
        for &(index, base) in baseline {
            if !go_on() {
                return;
            }
            if let (Some(to), Some(source)) = (to.get(index), source.get(index)) {
                let gained = source.swap(0, Ordering::SeqCst).saturating_sub(base);
                if gained != 0 {
                    add_saturating(to, gained);
                }
            }
        }
        // Then whatever any counter holds now: counts the baseline never had, or counted after
        // the first pass swapped (what a writer adds after this load is its own to move, or stays).
        for (to, source) in to.iter().zip(source) {
            if source.load(Ordering::SeqCst) == 0 {
                continue;
            }
            if !go_on() {
                return;
            }
            let taken = source.swap(0, Ordering::SeqCst);
            if taken != 0 {
                add_saturating(to, taken);
            }
        }
    }

    /// Takes `baseline` out of this sketch, counter by counter, keeping whatever was added since it
    /// was taken; stops early, at a counter boundary, once `go_on` returns `false`. Every row of
    /// an event counted meanwhile stays in this sketch, so its estimate sees it whole.
    pub(crate) fn forget(&self, baseline: &[(usize, i64)], go_on: impl Fn() -> bool) {
        let counters = self.store.counters();
        for &(index, base) in baseline {
            if !go_on() {
                return;
            }
            if let Some(counter) = counters.get(index) {
                sub_saturating(counter, base);
            }
        }
    }

    /// Moves up to `events` of `key`'s counts in `from` (same shape and seed) into this sketch,
    /// each of its counters giving up to `events` toward zero by compare-and-swap: what a writer
    /// does when it counted `events` into `from` after the carry began, since
    /// [`carry_from`](Self::carry_from) may have passed its counters. Its own events, never the
    /// whole counter, whose baseline the carrier would then have to take back out of this sketch
    /// (the module documentation says why that matters and why each event still moves once).
    pub(crate) fn carry_events_from(&self, from: &Self, key: KeyHash, events: isize) {
        // isize is at most 64 bits on every supported target: lossless.
        let events = events as i64;
        let (to, source) = (self.store.counters(), from.store.counters());
        self.rows.for_each_index(key, |index| {
            if let (Some(to), Some(source)) = (to.get(index), source.get(index)) {
                // Relaxed: the compare-and-swap is one read-modify-write in the counter's total
                // order, which is all that keeps moves from taking a count twice.
                let (_, taken) = take_toward_zero(source, events);
                if taken != 0 {
                    add_saturating(to, taken);
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use crate::estimator::Estimator;

    // Seed and keys fixed: the collisions between the three keys are the same on every run.
    #[test]
    fn a_carry_moves_each_gain_once_whoever_empties_a_counter_first() {
        let (stale, current) = (
            Estimator::with_seed(2, 16, 3).unwrap(),
            Estimator::with_seed(2, 16, 3).unwrap(),
        );
        stale.incr("old", 5);
        stale.incr("both", 2);
        let baseline = stale.snapshot();
        // Counted after the baseline: on a counter it names, and on counters it does not.
        stale.incr("both", 3);
        stale.incr("new", 4);
        // A late writer moves its own 3 before the carry, not the stale 2 under them...
        current.carry_events_from(&stale, current.hash_key("both"), 3);
        assert_eq!(current.get("both"), 3);
        // ...and the carry adds the rest of the gain, never taking anything back.
        current.carry_from(&stale, &baseline, || true);
        assert_eq!(current.get("both"), 3);
        assert_eq!(current.get("new"), 4);
        assert_eq!(current.get("old"), 0);
        assert_eq!(stale.get("old"), 0);
    }
}
