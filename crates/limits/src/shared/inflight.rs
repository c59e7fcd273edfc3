//! [`SharedInflight`]: in-flight counts shared by the processes of a host, recovered when a
//! process dies holding some.
//!
//! # Crash recovery
//! Sketches are linear: the total is the sum of what each process added. The segment keeps the
//! total sketch (read by every lookup) and, per attached process, a **contribution sketch** of
//! the same shape holding what that process added and has not taken back, in a slot owned by its
//! pid. Every change goes to both. When a process dies (even by `SIGKILL`, holding guards), a
//! survivor's [`reclaim`](SharedInflight::reclaim) finds its slot, sees the pid gone, claims the
//! slot with a compare-and-swap, subtracts the contribution from the total counter by counter
//! (each contribution counter is taken with an atomic `swap(0)`, so it is subtracted once even if
//! two survivors sweep), and frees the slot. No process waits for another; a sweeper that dies
//! mid-sweep is replaced by the next survivor that sees it dead.
//!
//! **Recovery time**: the next `reclaim` after the death. The Node binding calls it every
//! [`RECLAIM_INTERVAL`] from each process holding the segment, and every open calls it.
//!
//! **Exactness**: a change updates the key's counters row by row, the total's and the
//! contribution's of one row together, and those two are not one atomic step: a process killed
//! between them leaves the total off by that change, and nothing in memory can tell afterwards
//! which of the two it reached. So each slot also keeps a **journal**: how many changes its holder
//! began and ended, and the key of the latest one begun (written before the count of changes
//! begun goes up). When a sweep finds a change begun and not ended, it **settles** the counters
//! that change could have touched (that key's, one per row; every counter when threads sharing
//! the handle had changes in flight together): each such total is set to the sum of every slot's
//! contribution to it, read while no live process has a change in flight, and written with a
//! compare-and-swap that fails if the total moved meanwhile. A counter that stays busy through
//! [`SETTLE_ATTEMPTS`] tries leaves the slot *unsettled*: still taken, never claimed, and settled
//! by the next reclaim instead. So a kill leaves no counter off once its slot is settled (tested
//! with repeated `SIGKILL`s of a process changing one key in a loop), which takes a moment when no
//! live process has a change in flight or begins one: a server's changes, a request's work apart,
//! leave many; processes changing counts back to back without pause (a tight loop) can put it off,
//! and until then the counter is over by at most the change in doubt (never under).
//!
//! # Slot table
//! After the counters, from the next multiple of 64 bytes, one cache line per slot: the owner
//! word (`state << 62 | sweeper pid << 32 | owner pid`, state 0 free, 1 held, 2 being swept,
//! 3 unsettled), the owner's PID namespace (Linux: the inode of `/proc/self/ns/pid`; 1
//! elsewhere), then the journal: changes begun, changes ended, the latest change's key hash, and
//! whether changes overlapped (two spare words follow). A process judges only slots of its own
//! namespace: containers with separate PID namespaces cannot tell each other's processes apart,
//! so each recovers its own processes' slots. A pid reused by a new process before a survivor
//! looks delays recovery until that process exits too.

use crate::estimator::{Estimator, add_saturating};
use crate::hash::KeyHash;
use crate::shape::Shape;
use crate::shared::error::SharedError;
use crate::shared::layout::{Kind, Layout};
use crate::shared::segment::{Counters, Segment, SharedOptions};
use std::fmt;
use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Most process slots a segment may have: each costs a sketch of the segment's shape (pages of
/// `/dev/shm` are allocated only when touched, so unused slots cost little).
pub const MAX_PROCESSES: u32 = 1024;
/// How often the Node binding reclaims dead processes' contributions.
pub const RECLAIM_INTERVAL: Duration = Duration::from_millis(100);

/// Owner-word states.
const FREE: u64 = 0;
const HELD: u64 = 1;
const SWEEPING: u64 = 2;
/// Swept, but a change its holder had in flight when it died is not settled yet.
const UNSETTLED: u64 = 3;

/// The words of a slot (module docs, "Slot table").
const OWNER: usize = 0;
const NAMESPACE: usize = 1;
/// Changes the holder began (wrapping).
const BEGUN: usize = 2;
/// Changes the holder ended (wrapping).
const ENDED: usize = 3;
/// The key hash of the latest change begun.
const PENDING: usize = 4;
/// Nonzero while a change began with another of the same slot in flight (threads sharing one
/// handle): [`PENDING`] then need not name every change in flight.
const OVERLAP: usize = 5;

/// Tries to find one counter quiet enough to settle before a sweep leaves it to the next reclaim.
pub const SETTLE_ATTEMPTS: u32 = 4096;

fn owner_word(state: u64, sweeper: u32, owner: u32) -> u64 {
    state << 62 | u64::from(sweeper & 0x3fff_ffff) << 32 | u64::from(owner)
}

fn state(word: u64) -> u64 {
    word >> 62
}

fn owner(word: u64) -> u32 {
    word as u32
}

fn sweeper(word: u64) -> u32 {
    (word >> 32) as u32 & 0x3fff_ffff
}

/// Per-key counts of operations in progress across the processes of a host.
///
/// ```
/// use keepcount_limits::shared::{SharedInflight, SharedOptions, unlink};
/// use keepcount_limits::Shape;
///
/// let options = SharedOptions::new().dir(std::env::temp_dir());
/// # unlink("doc-inflight", &options).unwrap();
/// let shape = Shape::new(4, 1024).unwrap();
/// let a = SharedInflight::open("doc-inflight", shape, 42, 8, &options).unwrap();
/// let b = SharedInflight::open("doc-inflight", shape, 42, 8, &options).unwrap();
/// let key = a.hash_key("origin");
/// a.incr_hash(key, 1);
/// assert_eq!(b.incr_hash(key, 1), 2);
/// drop(b); // a closing handle takes back what it still holds
/// assert_eq!(a.get_hash(key), 1);
/// # drop(a);
/// unlink("doc-inflight", &options).unwrap();
/// ```
///
/// # Thread safety
/// `Send + Sync`; lock-free across threads and processes.
pub struct SharedInflight {
    total: Estimator<Counters>,
    own: Estimator<Counters>,
    segment: Arc<Segment>,
    slot: usize,
    pid: u32,
    namespace: u64,
}

impl SharedInflight {
    /// Opens (or creates) the shared in-flight counter `name`: a total sketch of `shape` keyed by
    /// `seed` and `processes` slots for the processes attached at once. Reclaims dead processes'
    /// slots, then takes one; [`SharedError::Full`] if every slot is held by a live process.
    pub fn open(
        name: &str,
        shape: Shape,
        seed: u64,
        processes: u32,
        options: &SharedOptions,
    ) -> Result<Self, SharedError> {
        if processes == 0 || processes > MAX_PROCESSES {
            return Err(SharedError::Processes(processes));
        }
        let layout = Layout {
            kind: Kind::Inflight,
            shape,
            seed,
            interval_nanos: 0,
            processes,
            limiter: None,
        };
        let segment = Arc::new(Segment::open(name, layout, options, &|_| {})?);
        let pid = std::process::id();
        let namespace = pid_namespace();
        let total = Estimator::with_store(Counters::new(Arc::clone(&segment), 0), shape, seed)?;
        let holder = Holder {
            segment: &segment,
            total: &total,
            pid,
            namespace,
        };
        holder.reclaim();
        let slot = holder.claim().ok_or_else(|| SharedError::Full {
            path: segment.path().into(),
            processes,
        })?;
        let own =
            Estimator::with_store(Counters::new(Arc::clone(&segment), 1 + slot), shape, seed)?;
        Ok(Self {
            total,
            own,
            segment,
            slot,
            pid,
            namespace,
        })
    }

    /// Hashes `key` once for the `*_hash` methods.
    #[inline]
    pub fn hash_key<T: Hash>(&self, key: T) -> KeyHash {
        self.total.hash_key(key)
    }

    /// Adds `value` (negative to take back) to `key` for this process; returns the host-wide
    /// estimate after it.
    pub fn incr_hash(&self, key: KeyHash, value: isize) -> isize {
        // isize is at most 64 bits on every supported target: lossless.
        let value = value as i64;
        let (total, own) = (self.total.counters(), self.own.counters());
        let journal = self.segment.slot_words(self.slot);
        // The journal first (module docs): the key, then that a change began. SeqCst, here and
        // below, for a settler's reading of the journal against the counters.
        journal[PENDING].store(key.to_u64(), Ordering::Relaxed);
        let begun = journal[BEGUN].fetch_add(1, Ordering::SeqCst);
        if begun != journal[ENDED].load(Ordering::SeqCst) {
            journal[OVERLAP].store(1, Ordering::SeqCst);
        }
        let mut min = i64::MAX;
        // Increments add to the total first, decrements take from the contribution first: a
        // total is then never below the contributions while a change is in flight.
        self.total.rows().for_each_index(key, |index| {
            let (Some(total), Some(own)) = (total.get(index), own.get(index)) else {
                return;
            };
            if value >= 0 {
                min = min.min(add_saturating(total, value));
                own.fetch_add(value, Ordering::SeqCst);
            } else {
                own.fetch_add(value, Ordering::SeqCst);
                min = min.min(add_saturating(total, value));
            }
        });
        let ended = journal[ENDED]
            .fetch_add(1, Ordering::SeqCst)
            .wrapping_add(1);
        // The last of overlapping changes to end clears the mark (a change beginning meanwhile
        // sees this one's end, or this one sees its beginning: never both unseen).
        if journal[OVERLAP].load(Ordering::SeqCst) != 0
            && ended == journal[BEGUN].load(Ordering::SeqCst)
        {
            journal[OVERLAP].store(0, Ordering::SeqCst);
        }
        // Exact on 64-bit targets.
        min as isize
    }

    /// The host-wide estimate of `key`.
    #[inline]
    pub fn get_hash(&self, key: KeyHash) -> isize {
        self.total.get_hash(key)
    }

    /// Takes back the contributions of processes that have died; returns how many slots it
    /// freed. Cheap when nobody died: one load per slot and one `kill(pid, 0)` per held slot.
    pub fn reclaim(&self) -> usize {
        self.holder().reclaim()
    }

    /// The sketch's shape.
    pub fn shape(&self) -> Shape {
        self.total.shape()
    }

    /// The seed.
    pub fn seed(&self) -> u64 {
        self.total.seed()
    }

    /// The segment file.
    pub fn path(&self) -> &std::path::Path {
        self.segment.path()
    }

    fn holder(&self) -> Holder<'_> {
        Holder {
            segment: &self.segment,
            total: &self.total,
            pid: self.pid,
            namespace: self.namespace,
        }
    }
}

impl Drop for SharedInflight {
    /// Takes back what this handle still holds (guards forgotten or outliving it) and frees its
    /// slot.
    fn drop(&mut self) {
        let holder = self.holder();
        let words = self.segment.slot_words(self.slot);
        let held = owner_word(HELD, 0, self.pid);
        // AcqRel: our own contribution is ours; the CAS only keeps a sweeper (who wrongly took
        // us for dead, e.g. after a pid namespace change) from sweeping twice.
        if words[OWNER]
            .compare_exchange(
                held,
                owner_word(SWEEPING, self.pid, self.pid),
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok()
        {
            holder.sweep(self.slot, owner_word(SWEEPING, self.pid, self.pid));
        }
    }
}

impl fmt::Debug for SharedInflight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedInflight")
            .field("path", &self.path())
            .field("slot", &self.slot)
            .finish_non_exhaustive()
    }
}

/// What claiming, reclaiming and sweeping slots need, without a slot of one's own.
struct Holder<'a> {
    segment: &'a Segment,
    total: &'a Estimator<Counters>,
    pid: u32,
    namespace: u64,
}

impl Holder<'_> {
    fn slots(&self) -> usize {
        self.segment.layout().processes as usize
    }

    /// Takes a free slot for this process, or `None` if every slot is held.
    fn claim(&self) -> Option<usize> {
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

    fn reclaim(&self) -> usize {
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
                .is_ok()
                && self.sweep(slot, mine)
            {
                freed += 1;
            }
        }
        freed
    }

    /// Subtracts slot `slot`'s contribution from the total, settles a change its holder left in
    /// flight, and frees the slot, whose owner word is `mine`; returns whether it freed it (a
    /// change not settled yet leaves it unsettled, for the next reclaim).
    fn sweep(&self, slot: usize, mine: u64) -> bool {
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
    /// flight, if any (module docs, "Exactness"); false if some counter stayed busy.
    fn settle(&self, slot: usize) -> bool {
        let journal = self.segment.slot_words(slot);
        let begun = journal[BEGUN].load(Ordering::SeqCst);
        let ended = journal[ENDED].load(Ordering::SeqCst);
        if begun == ended {
            return true;
        }
        let settle = |index: usize| settle_counter(self, slot, index);
        if begun.wrapping_sub(ended) == 1 && journal[OVERLAP].load(Ordering::SeqCst) == 0 {
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
fn pid_namespace() -> u64 {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::MetadataExt;
        if let Ok(meta) = std::fs::metadata("/proc/self/ns/pid") {
            return meta.ino().max(1);
        }
    }
    1
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// A scratch directory for one test's segment, removed when dropped.
    struct Dir(PathBuf);

    impl Dir {
        fn new(test: &str) -> Self {
            let path = std::env::temp_dir()
                .join(format!("keepcount-inflight-{}-{test}", std::process::id()));
            let _ = std::fs::remove_dir_all(&path);
            std::fs::create_dir_all(&path).unwrap();
            Self(path)
        }

        fn try_open(&self) -> Result<SharedInflight, SharedError> {
            let options = SharedOptions::new().dir(&self.0);
            SharedInflight::open("inflight", Shape::new(2, 64).unwrap(), 7, 4, &options)
        }

        fn open(&self) -> SharedInflight {
            self.try_open().unwrap()
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// The pid of a process that has exited.
    fn dead_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    }

    /// Leaves `victim` as a process killed in the middle of adding `value` to `key` would: the
    /// total's counter of `rows_done` + 1 rows added, its own of `rows_done`, the change begun
    /// and not ended; then gives its slot to a dead pid and forgets the handle.
    fn kill_mid_change(victim: SharedInflight, key: KeyHash, value: i64, rows_done: usize) {
        let journal = victim.segment.slot_words(victim.slot);
        journal[PENDING].store(key.to_u64(), Ordering::SeqCst);
        journal[BEGUN].fetch_add(1, Ordering::SeqCst);
        let mut row = 0;
        victim.total.rows().for_each_index(key, |index| {
            if row <= rows_done {
                victim.total.counters()[index].fetch_add(value, Ordering::SeqCst);
            }
            if row < rows_done {
                victim.own.counters()[index].fetch_add(value, Ordering::SeqCst);
            }
            row += 1;
        });
        journal[OWNER].store(owner_word(HELD, 0, dead_pid()), Ordering::SeqCst);
        std::mem::forget(victim);
    }

    /// The total's counters for `key`, row 0 first.
    fn counts(inflight: &SharedInflight, key: KeyHash) -> Vec<i64> {
        let mut counts = Vec::new();
        inflight.total.rows().for_each_index(key, |index| {
            counts.push(inflight.total.counters()[index].load(Ordering::SeqCst));
        });
        counts
    }

    #[test]
    fn a_change_cut_in_two_by_a_kill_is_settled_to_the_contributions() {
        let dir = Dir::new("cut");
        let here = dir.open();
        let key = here.hash_key("api");
        here.incr_hash(key, 1);
        for rows_done in 0..2 {
            let victim = dir.open();
            victim.incr_hash(key, 3);
            kill_mid_change(victim, key, 1, rows_done);
            assert_eq!(here.reclaim(), 1);
            assert_eq!(
                counts(&here, key),
                [1, 1],
                "rows done {rows_done}: every row exact"
            );
        }
    }

    #[test]
    fn overlapping_changes_settle_every_counter() {
        let dir = Dir::new("overlap");
        let here = dir.open();
        let (a, b) = (here.hash_key("a"), here.hash_key("b"));
        here.incr_hash(a, 2);
        let victim = dir.open();
        let journal = victim.segment.slot_words(victim.slot);
        // Another thread's change to `b` in flight, its key overwritten by the one to `a`.
        journal[BEGUN].fetch_add(1, Ordering::SeqCst);
        journal[OVERLAP].store(1, Ordering::SeqCst);
        victim.total.rows().for_each_index(b, |index| {
            victim.total.counters()[index].fetch_add(5, Ordering::SeqCst);
        });
        kill_mid_change(victim, a, 1, 0);
        assert_eq!(here.reclaim(), 1);
        assert_eq!((here.get_hash(a), here.get_hash(b)), (2, 0));
        let total: i64 = here
            .total
            .counters()
            .iter()
            .map(|c| c.load(Ordering::SeqCst))
            .sum();
        assert_eq!(total, 4, "only this handle's 2 in each of 2 rows");
    }

    #[test]
    fn a_busy_counter_leaves_the_slot_unsettled_until_a_later_reclaim() {
        let dir = Dir::new("busy");
        let here = dir.open();
        let key = here.hash_key("api");
        let busy = dir.open();
        // A live process in the middle of a change: nothing can be settled meanwhile.
        let journal = busy.segment.slot_words(busy.slot);
        journal[BEGUN].fetch_add(1, Ordering::SeqCst);
        let victim = dir.open();
        let slot = victim.slot;
        kill_mid_change(victim, key, 1, 0);
        assert_eq!(here.reclaim(), 0, "not settled while busy");
        let word = here.segment.slot_words(slot)[OWNER].load(Ordering::SeqCst);
        assert_eq!((state(word), sweeper(word)), (UNSETTLED, 0));
        assert_eq!(
            counts(&here, key),
            [1, 0],
            "over by the change in doubt, never under"
        );
        // here, busy, the unsettled slot, and one free: opening takes it, then none is left.
        let fourth = dir.open();
        assert!(matches!(dir.try_open(), Err(SharedError::Full { .. })));
        drop(fourth);
        journal[ENDED].fetch_add(1, Ordering::SeqCst);
        assert_eq!(here.reclaim(), 1);
        assert_eq!(counts(&here, key), [0, 0]);
        assert_eq!(
            here.segment.slot_words(slot)[OWNER].load(Ordering::SeqCst),
            FREE
        );
        drop(busy);
    }
}
