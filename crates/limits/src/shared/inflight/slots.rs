//! The slot table of a [`SharedInflight`](super::SharedInflight) segment (module docs of
//! `inflight.rs`, "Slot table"): claiming a slot, finding the dead, taking their contributions
//! back and settling a change one of them left in flight.

use crate::estimator::Estimator;
use crate::hash::KeyHash;
use crate::shared::segment::{Counters, Segment};
use std::sync::atomic::Ordering;

/// Owner-word states.
pub(super) const FREE: u64 = 0;
pub(super) const HELD: u64 = 1;
pub(super) const SWEEPING: u64 = 2;
/// Swept, but a change its holder had in flight when it died is not settled yet.
pub(super) const UNSETTLED: u64 = 3;

/// The words of a slot (module docs, "Slot table").
pub(super) const OWNER: usize = 0;
pub(super) const NAMESPACE: usize = 1;
/// Changes the holder began (wrapping).
pub(super) const BEGUN: usize = 2;
/// Changes the holder ended (wrapping).
pub(super) const ENDED: usize = 3;
/// The key hash of the latest change begun.
pub(super) const PENDING: usize = 4;
/// Nonzero once a change began with another of the same slot in flight (threads sharing one
/// handle): [`PENDING`] then need not name every change in flight, so a sweep settles every
/// counter. Never cleared while the slot is held. [`INTERRUPTED`] once a sweep of the slot died.
pub(super) const OVERLAP: usize = 5;

/// [`OVERLAP`]'s value once a sweeper of the slot died mid-sweep: it may have swapped a counter's
/// contribution to zero and died before taking it from the total, which no journal records, so
/// every counter is settled whatever the dead holder had in flight.
pub(super) const INTERRUPTED: u64 = 2;

/// Tries to find one counter quiet enough to settle before a sweep leaves it to the next reclaim.
pub const SETTLE_ATTEMPTS: u32 = 4096;

pub(super) fn owner_word(state: u64, sweeper: u32, owner: u32) -> u64 {
    state << 62 | u64::from(sweeper & 0x3fff_ffff) << 32 | u64::from(owner)
}

pub(super) fn state(word: u64) -> u64 {
    word >> 62
}

pub(super) fn owner(word: u64) -> u32 {
    word as u32
}

pub(super) fn sweeper(word: u64) -> u32 {
    (word >> 32) as u32 & 0x3fff_ffff
}

/// What claiming, reclaiming and sweeping slots need, without a slot of one's own.
pub(super) struct Holder<'a> {
    pub(super) segment: &'a Segment,
    pub(super) total: &'a Estimator<Counters>,
    pub(super) pid: u32,
    pub(super) namespace: u64,
}

impl Holder<'_> {
    fn slots(&self) -> usize {
        self.segment.layout().processes as usize
    }

    /// Takes a free slot for this process, or `None` if every slot is held.
    pub(super) fn claim(&self) -> Option<usize> {
        (0..self.slots()).find(|&slot| {
            let words = self.segment.slot_words(slot);
            // Acquire on success: the contribution sketch was zeroed by the sweep that freed the
            // slot (its Release store). The namespace word is written after: a reclaimer that
            // reads the old 0 skips the slot until it is set.
            let claimed = words[OWNER]
                .compare_exchange(
                    FREE,
                    owner_word(HELD, 0, self.pid),
                    Ordering::Acquire,
                    Ordering::Relaxed,
                )
                .is_ok();
            if claimed {
                words[NAMESPACE].store(self.namespace, Ordering::Release);
            }
            claimed
        })
    }

    pub(super) fn reclaim(&self) -> usize {
        let mut freed = 0;
        for slot in 0..self.slots() {
            let words = self.segment.slot_words(slot);
            // Acquire: pairs with the claim's Release of the namespace.
            let seen = words[OWNER].load(Ordering::Acquire);
            if words[NAMESPACE].load(Ordering::Acquire) != self.namespace {
                continue;
            }
            let dead = match state(seen) {
                HELD => owner(seen) != self.pid && !alive(owner(seen)),
                SWEEPING => sweeper(seen) != self.pid && !alive(sweeper(seen)),
                // Its holder is dead and its contribution taken back: anyone may settle it
                // whom no live process is settling.
                UNSETTLED => {
                    sweeper(seen) == 0 || (sweeper(seen) != self.pid && !alive(sweeper(seen)))
                }
                _ => false,
            };
            if !dead {
                continue;
            }
            let mine = owner_word(SWEEPING, self.pid, owner(seen));
            // AcqRel: one survivor wins the slot; the loser moves on.
            if words[OWNER]
                .compare_exchange(seen, mine, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
            {
                continue;
            }
            if state(seen) == SWEEPING {
                // Before the sweep: a kill of this one too still leaves the mark.
                words[OVERLAP].store(INTERRUPTED, Ordering::SeqCst);
            }
            if self.sweep(slot, mine) {
                freed += 1;
            }
        }
        freed
    }

    /// Subtracts slot `slot`'s contribution from the total, settles a change its holder left in
    /// flight, and frees the slot, whose owner word is `mine`; returns whether it freed it (a
    /// change not settled yet leaves it unsettled, for the next reclaim).
    pub(super) fn sweep(&self, slot: usize, mine: u64) -> bool {
        let contribution = self.segment.sketch(1 + slot);
        let total = self.total.counters();
        for (own, sum) in contribution.iter().zip(total) {
            // swap: each unit of contribution is taken exactly once, even by two sweepers.
            // SeqCst: a settler reads contributions and totals against the owner words.
            let value = own.swap(0, Ordering::SeqCst);
            if value != 0 {
                sum.fetch_sub(value, Ordering::SeqCst);
            }
        }
        // Taken back: settlers elsewhere need not wait for this slot any more (a sweep under way
        // blocks them), and it stays ours while we settle it. A CAS, so a sweeper that was taken
        // over goes no further.
        let words = self.segment.slot_words(slot);
        let settling = owner_word(UNSETTLED, self.pid, owner(mine));
        if words[OWNER]
            .compare_exchange(mine, settling, Ordering::SeqCst, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        if !self.settle(slot) {
            let left = owner_word(UNSETTLED, 0, owner(mine));
            let _ =
                words[OWNER].compare_exchange(settling, left, Ordering::SeqCst, Ordering::Relaxed);
            return false;
        }
        for word in &words[NAMESPACE..] {
            word.store(0, Ordering::Relaxed);
        }
        // Release: the zeroed contribution and journal are visible to the next claimant (its
        // Acquire).
        words[OWNER]
            .compare_exchange(settling, FREE, Ordering::Release, Ordering::Relaxed)
            .is_ok()
    }

    /// Settles the change slot `slot`'s holder (dead, its contribution taken back) left in
    /// flight, if any (module docs, "Exactness"), and every counter after an interrupted sweep
    /// ([`INTERRUPTED`]); false if some counter stayed busy.
    fn settle(&self, slot: usize) -> bool {
        let journal = self.segment.slot_words(slot);
        let begun = journal[BEGUN].load(Ordering::SeqCst);
        let ended = journal[ENDED].load(Ordering::SeqCst);
        let overlap = journal[OVERLAP].load(Ordering::SeqCst);
        if begun == ended && overlap != INTERRUPTED {
            return true;
        }
        let settle = |index: usize| settle_counter(self, slot, index);
        if begun.wrapping_sub(ended) == 1 && overlap == 0 {
            let key = KeyHash::from_u64(journal[PENDING].load(Ordering::SeqCst));
            let mut indexes = Vec::with_capacity(self.total.shape().hashes());
            self.total
                .rows()
                .for_each_index(key, |index| indexes.push(index));
            indexes.into_iter().all(settle)
        } else {
            (0..self.total.counters().len()).all(settle)
        }
    }
}

/// Sets total counter `index` to the sum of every slot's contribution to it, read while no live
/// holder had a change in flight and no change began, for [`Holder::settle`] of slot `slot`;
/// false after [`SETTLE_ATTEMPTS`] tries without such a moment.
///
/// Why that is enough: a change in flight at the first reading of the journals blocks the
/// attempt, and a change begun after it moves its slot's count of changes begun, which the second
/// reading sees. A change begun after the second reading touches the total first (which fails the
/// compare-and-swap) or, a decrement, first the contribution, and then takes from the settled
/// total too. A sweep's subtraction under way blocks the attempt; one that starts after the first
/// reading changes its slot's owner word, which the second reading sees.
fn settle_counter(holder: &Holder<'_>, slot: usize, index: usize) -> bool {
    let total = &holder.total.counters()[index];
    let mut first = Vec::with_capacity(holder.slots());
    for attempt in 0..SETTLE_ATTEMPTS {
        if attempt > 0 {
            if attempt % 64 == 0 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        first.clear();
        if !journals(holder, slot, |seen| first.push(seen)) {
            continue;
        }
        let before = total.load(Ordering::SeqCst);
        let sum = (0..holder.slots())
            .map(|other| holder.segment.sketch(1 + other)[index].load(Ordering::SeqCst))
            .fold(0i64, i64::wrapping_add);
        let mut same = true;
        let mut at = 0;
        let quiet = journals(holder, slot, |seen| {
            same &= first.get(at) == Some(&seen);
            at += 1;
        });
        if quiet
            && same
            && total
                .compare_exchange(before, sum, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        {
            return true;
        }
    }
    false
}

/// Reads every slot's owner word and count of changes begun but slot `skip`'s, in slot order,
/// into `seen`; false (stopping early) if a live holder has a change in flight or a sweep is
/// taking a contribution back.
fn journals(holder: &Holder<'_>, skip: usize, mut seen: impl FnMut((u64, u64))) -> bool {
    for slot in (0..holder.slots()).filter(|&slot| slot != skip) {
        let words = holder.segment.slot_words(slot);
        let owner = words[OWNER].load(Ordering::SeqCst);
        let begun = words[BEGUN].load(Ordering::SeqCst);
        match state(owner) {
            HELD if begun != words[ENDED].load(Ordering::SeqCst) => return false,
            SWEEPING => return false,
            // Free, held and idle, or unsettled (its contribution is zero: what settling is for).
            _ => seen((owner, begun)),
        }
    }
    true
}

/// Whether process `pid` exists (in this PID namespace).
#[cfg(unix)]
fn alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 only checks that the process exists and may be signalled.
    if unsafe { libc::kill(pid, 0) } == 0 {
        return true;
    }
    // EPERM: it exists but belongs to another user.
    std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

#[cfg(not(unix))]
fn alive(_pid: u32) -> bool {
    true
}

/// This process's PID namespace: the inode of `/proc/self/ns/pid` on Linux, 1 elsewhere (or if
/// it cannot be read).
pub(super) fn pid_namespace() -> u64 {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::MetadataExt;
        if let Ok(meta) = std::fs::metadata("/proc/self/ns/pid") {
            return meta.ino().max(1);
        }
    }
    1
}
