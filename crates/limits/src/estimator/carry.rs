//! Carrying counts from one sketch into another while other threads (or processes) keep counting
//! into the first: how a shared rate keeps the events that arrive while it rotates after an idle
//! spell (`shared/rate.rs`, "Rotating after idleness"). A process-local `Rate` only subtracts a
//! baseline in place ([`Estimator::forget`], through `rotation.rs`).
//!
//! The source sketch holds counts to drop (a `baseline` copied while nobody counted into it) plus
//! events to keep. Every move empties a source counter with one `swap(0)` and adds what it took to
//! the same counter of the destination; the carrier also subtracts the baseline, once per
//! counter. However carriers and late writers interleave, the destination gains exactly the
//! events: the sum of everything swapped out is the baseline plus the events, less what is still
//! in the source.

use super::Estimator;
use super::saturating::{add_saturating, sub_saturating};
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
    /// [`carry_key_from`](Self::carry_key_from)): either that writer sees the carry started and
    /// moves its own counters, or the swaps here see its increments.
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

    /// Moves `key`'s counters of `from` (same shape and seed) into this sketch whole: what a
    /// writer does when it counted into `from` after the carry began, since
    /// [`carry_from`](Self::carry_from) may have passed its counters. Whatever baseline it moves
    /// with them, the carrier subtracts when it reaches them.
    pub(crate) fn carry_key_from(&self, from: &Self, key: KeyHash) {
        let (to, source) = (self.store.counters(), from.store.counters());
        self.rows.for_each_index(key, |index| {
            if let (Some(to), Some(source)) = (to.get(index), source.get(index)) {
                // Relaxed: the swap is one read-modify-write in the counter's total order, which
                // is all that keeps moves from taking a count twice.
                let taken = source.swap(0, Ordering::Relaxed);
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
        // A late writer moves its counters whole, stale count included, before the carry.
        current.carry_key_from(&stale, current.hash_key("both"));
        current.carry_from(&stale, &baseline, || true);
        assert_eq!(current.get("both"), 3);
        assert_eq!(current.get("new"), 4);
        assert_eq!(current.get("old"), 0);
        assert_eq!(stale.get("old"), 0);
    }
}
