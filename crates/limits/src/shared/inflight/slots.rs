//! The slot table of a [`SharedInflight`](super::SharedInflight) segment (module docs of
//! `inflight.rs`, "Slot table"): claiming a slot, finding the dead, taking their contributions
//! back and settling a change one of them left in flight.

use crate::estimator::Estimator;
use crate::hash::KeyHash;
use crate::shared::error::SharedError;
use crate::shared::segment::{Counters, Segment};
#[cfg(test)]
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;
use std::sync::{Mutex, MutexGuard};

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

/// The sweeper's pid (judged by pid elsewhere than on Linux; tests).
#[cfg(any(test, not(target_os = "linux")))]
pub(super) fn sweeper(word: u64) -> u32 {
    (word >> 32) as u32 & 0x3fff_ffff
}

/// Where slot `i`'s lock byte lies in the segment file: `LOCK_BASE + i`, far past the end of any
/// segment (at most about 2^40 bytes, `Layout::total_bytes`). A lock past a file's end is allowed
/// and changes nothing of the file: its length, which openers check, stays the layout's.
#[cfg(target_os = "linux")]
const LOCK_BASE: i64 = 1 << 62;

/// A handle's own open file description of its segment file (Linux), through which it locks its
/// slot's byte while it holds the slot, and a dead one's while it sweeps it: module docs of
/// `inflight.rs`, "Slot table". Elsewhere only the serialisation of reclaims.
pub(super) struct Locks {
    #[cfg(target_os = "linux")]
    file: std::fs::File,
    /// One reclaim at a time per handle: locks belong to the open file description, so two
    /// threads of one handle would both take a dead slot's lock, and the one that lost the slot
    /// would let go of the lock the winner sweeps under.
    reclaiming: Mutex<()>,
    /// Lock attempts made through this handle, for tests of what a reclaim costs.
    #[cfg(test)]
    pub(super) attempts: AtomicUsize,
}

impl Locks {
    /// The locks of a handle over `file`, the segment file opened for it alone.
    pub(super) fn new(file: Option<std::fs::File>, segment: &Segment) -> Result<Self, SharedError> {
        #[cfg(target_os = "linux")]
        let file = file.ok_or_else(|| {
            SharedError::io(
                segment.path(),
                std::io::Error::other("an in-flight segment without its file"),
            )
        })?;
        #[cfg(not(target_os = "linux"))]
        let _ = (file, segment);
        Ok(Self {
            #[cfg(target_os = "linux")]
            file,
            reclaiming: Mutex::new(()),
            #[cfg(test)]
            attempts: AtomicUsize::new(0),
        })
    }

    /// Takes slot `slot`'s lock for this handle: `Ok(false)` if another open file description
    /// (a live holder or sweeper, in whatever process or PID namespace) holds it. Taking a lock
    /// this handle holds already succeeds.
    #[cfg(target_os = "linux")]
    pub(super) fn try_lock(&self, slot: usize) -> std::io::Result<bool> {
        #[cfg(test)]
        self.attempts.fetch_add(1, Ordering::Relaxed);
        match self.fcntl(slot, libc::F_WRLCK) {
            Ok(()) => Ok(true),
            Err(err) if matches!(err.raw_os_error(), Some(libc::EAGAIN | libc::EACCES)) => {
                Ok(false)
            }
            Err(err) => Err(err),
        }
    }

    /// Lets slot `slot`'s lock go, if this handle holds it.
    #[cfg(target_os = "linux")]
    fn unlock(&self, slot: usize) {
        // Cannot fail for a valid descriptor and range; nothing to do if it did.
        let _ = self.fcntl(slot, libc::F_UNLCK);
    }

    /// `F_OFD_SETLK` of `kind` on slot `slot`'s byte, retried if a signal interrupts it.
    #[cfg(target_os = "linux")]
    fn fcntl(&self, slot: usize, kind: libc::c_int) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        // SAFETY: a plain C struct, all zeroes valid (l_pid must be 0 for an OFD lock).
        let mut lock: libc::flock = unsafe { std::mem::zeroed() };
        // Both fit their fields' types (small constants).
        lock.l_type = kind as _;
        lock.l_whence = libc::SEEK_SET as _;
        // slot < 1024 (MAX_PROCESSES): no overflow.
        lock.l_start = LOCK_BASE + slot as i64;
        lock.l_len = 1;
        loop {
            // SAFETY: the descriptor is open while `self` lives; the kernel reads `lock` only.
            if unsafe { libc::fcntl(self.file.as_raw_fd(), libc::F_OFD_SETLK, &raw const lock) }
                == 0
            {
                return Ok(());
            }
            let err = std::io::Error::last_os_error();
            if err.kind() != std::io::ErrorKind::Interrupted {
                return Err(err);
            }
        }
    }
}

/// What claiming, reclaiming and sweeping slots need, without a slot of one's own.
pub(super) struct Holder<'a> {
    pub(super) segment: &'a Segment,
    pub(super) total: &'a Estimator<Counters>,
    pub(super) pid: u32,
    pub(super) namespace: u64,
    pub(super) locks: &'a Locks,
    /// The slot the handle holds, if it holds one yet: never judged dead (its lock, taken
    /// through the same open file description, would be granted again).
    pub(super) own: Option<usize>,
}

impl Holder<'_> {
    pub(super) fn slots(&self) -> usize {
        self.segment.layout().processes as usize
    }

    /// The handle's reclaims one at a time: [`sweep_dead`](Self::sweep_dead), and anything else
    /// that takes slot locks to judge their holders, runs under it.
    pub(super) fn one_at_a_time(&self) -> MutexGuard<'_, ()> {
        // A poisoned lock guards nothing but the order of reclaims: go on.
        self.locks
            .reclaiming
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes a free slot for this handle, or `None` if every slot is held. On Linux its lock
    /// first, then the slot: a slot held by a live handle always has its lock held. An error if
    /// the system would not lock the file (no OFD locks on its filesystem).
    pub(super) fn claim(&self) -> Result<Option<usize>, SharedError> {
        for slot in 0..self.slots() {
            let words = self.segment.slot_words(slot);
            if words[OWNER].load(Ordering::Relaxed) != FREE {
                continue;
            }
            #[cfg(target_os = "linux")]
            if !self
                .locks
                .try_lock(slot)
                .map_err(|err| SharedError::io(self.segment.path(), err))?
            {
                // Being freed, or just claimed: its holder or sweeper still has it.
                continue;
            }
            // Acquire on success: the contribution sketch was zeroed by the sweep that freed the
            // slot (its Release store). The namespace word is written after: elsewhere than on
            // Linux, a reclaimer that reads the old 0 skips the slot until it is set.
            if words[OWNER]
                .compare_exchange(
                    FREE,
                    owner_word(HELD, 0, self.pid),
                    Ordering::Acquire,
                    Ordering::Relaxed,
                )
                .is_ok()
            {
                words[NAMESPACE].store(self.namespace, Ordering::Release);
                return Ok(Some(slot));
            }
            #[cfg(target_os = "linux")]
            self.locks.unlock(slot);
        }
        Ok(None)
    }

    /// Sweeps every dead holder's slot; returns how many it freed.
    pub(super) fn reclaim(&self) -> usize {
        let _one_at_a_time = self.one_at_a_time();
        self.sweep_dead()
    }

    /// [`reclaim`](Self::reclaim) for a caller holding [`one_at_a_time`](Self::one_at_a_time).
    pub(super) fn sweep_dead(&self) -> usize {
        let mut freed = 0;
        for slot in 0..self.slots() {
            if self.own == Some(slot) {
                continue;
            }
            let words = self.segment.slot_words(slot);
            // Acquire: pairs with the claim's Release of the namespace.
            let seen = words[OWNER].load(Ordering::Acquire);
            if state(seen) == FREE {
                continue;
            }
            let Some(seen) = self.dead(slot, seen) else {
                continue;
            };
            let mine = owner_word(SWEEPING, self.pid, owner(seen));
            // AcqRel: one survivor wins the slot; the loser moves on.
            if words[OWNER]
                .compare_exchange(seen, mine, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
            {
                self.let_go(slot);
                continue;
            }
            if state(seen) == SWEEPING {
                // Before the sweep: a kill of this one too still leaves the mark.
                words[OVERLAP].store(INTERRUPTED, Ordering::SeqCst);
            }
            if self.sweep(slot, mine) {
                freed += 1;
            }
            // Freed, or left unsettled for whoever takes its lock next.
            self.let_go(slot);
        }
        freed
    }

    /// Slot `slot`'s owner word if its holder (or its sweeper, or its settler) is dead, `seen`
    /// having been read not free; `None` if it lives. On Linux: if this handle can take the
    /// slot's lock, which it then holds (the word read again under it); a slot its holder freed
    /// meanwhile lets the lock go.
    #[cfg(target_os = "linux")]
    pub(super) fn dead(&self, slot: usize, _seen: u64) -> Option<u64> {
        // An error is a lock this handle cannot judge: take the holder for alive.
        if !self.locks.try_lock(slot).unwrap_or(false) {
            return None;
        }
        // Acquire: the holder's or the sweeper's writes before it died.
        let seen = self.segment.slot_words(slot)[OWNER].load(Ordering::Acquire);
        if state(seen) == FREE {
            self.locks.unlock(slot);
            return None;
        }
        Some(seen)
    }

    /// Elsewhere: by its pid, for slots of this PID namespace only.
    #[cfg(not(target_os = "linux"))]
    pub(super) fn dead(&self, slot: usize, seen: u64) -> Option<u64> {
        let words = self.segment.slot_words(slot);
        if words[NAMESPACE].load(Ordering::Acquire) != self.namespace {
            return None;
        }
        let dead = match state(seen) {
            HELD => owner(seen) != self.pid && !alive(owner(seen)),
            SWEEPING => sweeper(seen) != self.pid && !alive(sweeper(seen)),
            // Its holder is dead and its contribution taken back: anyone may settle it
            // whom no live process is settling.
            UNSETTLED => sweeper(seen) == 0 || (sweeper(seen) != self.pid && !alive(sweeper(seen))),
            _ => false,
        };
        dead.then_some(seen)
    }

    /// Lets go of slot `slot`'s lock, taken by [`dead`](Self::dead) (Linux).
    pub(super) fn let_go(&self, slot: usize) {
        #[cfg(target_os = "linux")]
        self.locks.unlock(slot);
        #[cfg(not(target_os = "linux"))]
        let _ = slot;
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
#[cfg(all(unix, not(target_os = "linux")))]
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
