//! The reclaim turn of a [`SharedInflight`](super::SharedInflight) segment (module docs of
//! `inflight.rs`, "Reclaiming in turn"): which handle reclaims for the whole host, and since
//! when, in one header word.

use super::slots::{FREE, Holder, OWNER, state};
use crate::shared::OTHER_CLOCK_NANOS;
use crate::shared::layout::TURN_WORD_OFFSET;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// How old a turn may grow before another handle takes it from a holder that lives: one
/// [`RECLAIM_INTERVAL`](super::RECLAIM_INTERVAL), when the holder's next call is due, and half
/// of one more for its event loop's delays. Taking over sooner costs only a second reclaim in
/// that interval; later, a stalled holder holds back every recovery that much longer.
pub const TURN_TIMEOUT: Duration = Duration::from_millis(150);

/// Bits of the turn word below its time: the slot of the handle whose turn it is (fewer than
/// 2^10 slots, `MAX_PROCESSES`). The time above them is in microseconds since the host's boot,
/// which 54 bits hold for 570 years.
const SLOT_BITS: u32 = 10;
/// Nanoseconds per microsecond of the turn word's time.
const NANOS_PER_MICRO: u64 = 1_000;

/// The turn word of a turn that slot `slot`'s handle took at `now` (host monotonic nanoseconds).
pub(super) fn turn_word(now: u64, slot: usize) -> u64 {
    // slot < 1024 (MAX_PROCESSES): it fits its bits.
    (now / NANOS_PER_MICRO) << SLOT_BITS | slot as u64
}

/// When the turn in `word` was taken, in nanoseconds (to the microsecond).
fn taken_at(word: u64) -> u64 {
    (word >> SLOT_BITS).saturating_mul(NANOS_PER_MICRO)
}

/// The slot whose handle holds the turn in `word`.
fn holder_slot(word: u64) -> usize {
    // Below 2^10: fits any usize.
    (word & ((1 << SLOT_BITS) - 1)) as usize
}

impl Holder<'_> {
    /// Reclaims, as [`reclaim`](Holder::reclaim), if the turn is this handle's at `now` (host
    /// monotonic nanoseconds), or free to take: its holder dead or gone, its turn older than
    /// [`TURN_TIMEOUT`], or taken on another clock (more than [`OTHER_CLOCK_NANOS`] ahead: a
    /// segment kept from another boot). Takes (or renews) the turn first, with a compare-and-swap
    /// that exactly one of the handles reading the same word wins; returns how many slots it freed.
    pub(super) fn reclaim_in_turn(&self, now: u64) -> usize {
        let Some(own) = self.own else {
            return 0;
        };
        // Judging the holder takes its slot's lock, as a reclaim does.
        let _one_at_a_time = self.one_at_a_time();
        let word = self.segment.word(TURN_WORD_OFFSET);
        // Relaxed, here and in the CAS: the turn only spares reclaims. Any number of handles may
        // reclaim at once (each slot is swept under its lock, each unit taken back by a swap), so
        // nothing is published through this word.
        let seen = word.load(Ordering::Relaxed);
        let (since, holder) = (taken_at(seen), holder_slot(seen));
        // 150 ms in nanoseconds: fits a u64.
        let timeout = TURN_TIMEOUT.as_nanos() as u64;
        let take = holder == own
            || now.saturating_sub(since) >= timeout
            || since.saturating_sub(now) > OTHER_CLOCK_NANOS
            || !self.lives(holder);
        if !take
            || word
                .compare_exchange(
                    seen,
                    turn_word(now, own),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_err()
        {
            return 0;
        }
        self.sweep_dead()
    }

    /// Whether slot `slot` has a live holder: taken, and judged alive as a reclaim judges it (on
    /// Linux its lock held by another handle). The caller holds `one_at_a_time`.
    fn lives(&self, slot: usize) -> bool {
        if slot >= self.slots() {
            return false;
        }
        // Acquire: as a reclaim reads it.
        let seen = self.segment.slot_words(slot)[OWNER].load(Ordering::Acquire);
        if state(seen) == FREE {
            return false;
        }
        match self.dead(slot, seen) {
            Some(_) => {
                // Judged only: its sweep is the reclaim's, which takes the lock again.
                self.let_go(slot);
                false
            }
            None => true,
        }
    }
}
