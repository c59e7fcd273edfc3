//! Carrying counts from one sketch into another while other threads (or processes) keep counting
//! into the first: how a rate keeps the events that arrive while it rotates after an idle spell
//! (`shared/rate.rs`, "Rotating after idleness"; `rate.rs` through `rotation.rs`).
//!
//! The source sketch holds counts to drop (a `baseline` copied while nobody counted into it) plus
//! events to keep. Every move empties a source counter with one `swap(0)` and adds what it took to
//! the same counter of the destination; the carrier also subtracts the baseline, once per
//! counter. However carriers and late writers interleave, the destination gains exactly the
//! events: the sum of everything swapped out is the baseline plus the events, less what is still
//! in the source.

use super::Estimator;
use super::saturating::add_saturating;
use crate::hash::KeyHash;
use crate::store::CounterStore;
use std::sync::atomic::Ordering;

impl<S: CounterStore> Estimator<S> {
    /// Every counter's value, in counter order: the baseline of a later
    /// [`carry_from`](Self::carry_from). Meant for a sketch nobody counts into meanwhile.
    pub(crate) fn snapshot(&self) -> Box<[i64]> {
        // Relaxed: the caller reads a sketch at rest; the claim that follows orders the rest.
        self.store
            .counters()
            .iter()
            .map(|counter| counter.load(Ordering::Relaxed))
            .collect()
    }

    /// Moves into this sketch what `from` (same shape and seed) gained over `baseline`, emptying
    /// `from`; stops early, at a counter boundary, once `go_on` returns `false`.
    ///
    /// Where writers check afterwards whether the carry started (a shared rate's, which read a
    /// stale sketch as 0), the caller issues a `SeqCst` fence before, pairing with the fence of a
    /// writer that counted into `from` and then checked (see
    /// [`carry_key_from`](Self::carry_key_from)): either that writer sees the carry started and
    /// moves its own counters, or the swaps here see its increments. Where they do not (a
    /// process-local `Rate`, which reads the previous sketch as it is), what they add after the
    /// carry passed stays in `from` and counts in the previous interval.
    pub(crate) fn carry_from(&self, from: &Self, baseline: &[i64], go_on: impl Fn() -> bool) {
        let counters = self.store.counters().iter().zip(from.store.counters());
        for ((to, source), &base) in counters.zip(baseline) {
            if !go_on() {
                return;
            }
            // A counter that was and is 0 has nothing to move; a writer who adds to it after this
            // load moves its own count. Any other counter is swapped even if unchanged, so that
            // the baseline is subtracted exactly once whoever emptied it first.
            if base == 0 && source.load(Ordering::SeqCst) == 0 {
                continue;
            }
            let taken = source.swap(0, Ordering::SeqCst);
            let gained = taken.saturating_sub(base);
            if gained != 0 {
                add_saturating(to, gained);
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
