//! [`SharedInflight`]: in-flight counts shared by the processes of a host, recovered when a
//! process dies holding some.
//!
//! # Crash recovery
//! Sketches are linear: the total is the sum of what each process added. The segment keeps the
//! total sketch (read by every lookup) and, per attached handle, a **contribution sketch** of
//! the same shape holding what that handle added and has not taken back, in a slot of its own.
//! Every change goes to both. When a process dies (even by `SIGKILL`, holding guards), a
//! survivor's [`reclaim`](SharedInflight::reclaim) finds its slot, sees its holder gone (on Linux
//! by the slot's lock, whatever PID namespace either is in; see "Slot table"), claims the
//! slot with a compare-and-swap, subtracts the contribution from the total counter by counter
//! (each contribution counter is taken with an atomic `swap(0)`, so it is subtracted once even if
//! two survivors sweep), and frees the slot. No process waits for another; a sweeper that dies
//! mid-sweep is replaced by the next survivor that sees it dead, which settles every counter (see
//! Exactness): the dead sweeper may have swapped a contribution counter to zero without taking it
//! from the total, and nothing records which.
//!
//! **Recovery time**: the next `reclaim` after the death. Every open calls it, and the Node
//! binding calls [`reclaim_in_turn`](SharedInflight::reclaim_in_turn) every [`RECLAIM_INTERVAL`]
//! from each handle, which reclaims for the host when it is that handle's turn (below): within
//! about an interval of the death, at most [`TURN_TIMEOUT`] and an interval more when the
//! handle whose turn it is stalls (module docs, "Reclaiming in turn").
//!
//! # Reclaiming in turn
//! A reclaim tries one lock per held slot, and the kernel checks each attempt against every
//! lock on the file: with `N` holders a reclaim costs `O(N²)`, and each holder reclaiming every
//! interval cost `O(N³)` per interval, for nothing while nobody died. So one handle reclaims
//! for the host, in turn: a header word names the slot whose handle holds the turn and when it
//! took it (host monotonic clock, which every process of the host reads alike; the word is in
//! the header's spare bytes, so no layout change). At each call the turn's holder renews the
//! turn and reclaims; any
//! other handle only reads the word, and asks whether the turn's holder lives (one lock attempt
//! on Linux, as a reclaim judges a slot; `kill(pid, 0)` elsewhere). It takes the turn, with a
//! compare-and-swap exactly one of them wins, and reclaims, when that holder is dead or gone
//! (so a holder killed right after taking the turn, or killed holding it, is replaced at the
//! next call of any survivor), when the turn is older than [`TURN_TIMEOUT`] (the holder lives
//! but its event loop stalls), or when it was taken on another clock. So an interval costs one
//! reclaim and one lock attempt per other handle, `O(N²)` in all. Nothing depends on the turn
//! for correctness: any number of reclaims may run at once, as before.
//!
//! Measured with `N` idle `Inflight.openShared` objects in one Node process, each with its own
//! timer as `N` processes would have, CPU over 3 s (2-vCPU VM, 29 Nov 2026): every holder
//! reclaiming took 4.7% of a core for 64, 47% for 256, and all of one for 512 (event-loop delay
//! p99 254 ms); in turn, 2.5%, 3.3% and 4.4% (p99 under 5 ms).
//!
//! **The bound**: a death is taken back at the turn holder's next call, an interval after its
//! last at most; if the dead process held the turn (or closed), at the next call of any
//! survivor, within an interval; if the turn's holder lives but stalls, once the turn is
//! [`TURN_TIMEOUT`] old, at the next call after that: [`TURN_TIMEOUT`] plus an interval, 250
//! ms, plus the event-loop delays of the handle that reclaims in each case.
//!
//! **Exactness**: a change updates the key's counters row by row, the total's and the
//! contribution's of one row together, and those two are not one atomic step: a process killed
//! between them leaves the total off by that change, and nothing in memory can tell afterwards
//! which of the two it reached. So each slot also keeps a **journal**: how many changes its holder
//! began and ended, and the key of the latest one begun (written before the count of changes
//! begun goes up). When a sweep finds a change begun and not ended, it **settles** the counters
//! that change could have touched (that key's, one per row; every counter once threads sharing
//! the handle have had changes in flight together): each such total is set to the sum of every slot's
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
//! whether changes overlapped (1) or a sweep of the slot was cut short (2) (two spare words
//! follow).
//!
//! **Who is alive, on Linux**: by open file description locks (`F_OFD_SETLK`) on one byte per
//! slot of the segment file, slot `i`'s at `2^62 + i` (far past the file's end: a lock there
//! changes nothing of the file, whose length openers check). Each handle opens the file for
//! itself, so each has its own open file description, whose locks conflict with every other's,
//! a handle's in the same process (another worker thread's) included. A handle locks a free
//! slot's byte before it claims the slot (compare-and-swap free → held; a slot that is no longer
//! free lets the lock go) and keeps it while it holds the slot; closing, it frees the slot first
//! and lets the lock go after (its descriptor closes and its mapping goes, both of which hold the
//! open file description). The kernel drops the lock when the description's last reference goes,
//! that is when its process dies, however it dies. So a slot that is not free and whose lock a
//! survivor can take has a dead holder, or a dead sweeper or settler, in whatever PID namespace
//! (containers sharing `/dev/shm` with `--ipc=host` each have their own): the survivor takes the
//! lock, reads the owner word again under it, and sweeps and settles as above, letting the lock
//! go once the slot is free (or left unsettled, for whoever takes the lock next). A slot whose
//! lock is held is alive: never swept, whatever its pid (reused, or another namespace's) and
//! even if its holder is stopped. A process killed between locking and claiming leaves a held
//! slot that holds nothing and whose lock is gone: the next reclaim frees it. Reclaims through
//! one handle take turns (its threads share its locks). The owner word's pids and the namespace
//! are then only informational. A child forked without `exec` (never done by Node) shares its
//! parent's descriptions and would keep its parent's slots alive until it exits.
//!
//! **Elsewhere** (macOS): by pid. A slot is dead when `kill(pid, 0)` finds no process, and a
//! process judges only slots of its own namespace. A pid reused by a new process before a
//! survivor looks delays recovery until that process exits too, and a process killed between
//! claiming a slot and writing its namespace there leaves the slot taken (holding nothing) until
//! the segment is unlinked.

use crate::clock::{Clock, HostClock};
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

mod slots;
#[cfg(test)]
mod tests;
mod turn;

pub use slots::SETTLE_ATTEMPTS;
use slots::{
    BEGUN, ENDED, HELD, Holder, Locks, OVERLAP, OWNER, PENDING, SWEEPING, owner_word, pid_namespace,
};
pub use turn::TURN_TIMEOUT;

/// Most process slots a segment may have: each costs a sketch of the segment's shape (pages of
/// `/dev/shm` are allocated only when touched, so unused slots cost little).
pub const MAX_PROCESSES: u32 = 1024;
/// How often the Node binding calls [`SharedInflight::reclaim_in_turn`] from each handle.
pub const RECLAIM_INTERVAL: Duration = Duration::from_millis(100);

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
    /// This handle's own descriptor of the segment file, holding its slot's lock (Linux) until
    /// the slot is free: dropped after [`Drop::drop`] frees it, or closed by the system when the
    /// process dies.
    locks: Locks,
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
        let mut segment = Segment::open(name, layout, options, &|_| {})?;
        // A descriptor of its own: one open file description per handle, so that the locks of
        // handles in one process (worker threads) conflict as those of two processes do.
        let locks = Locks::new(segment.take_file(), &segment)?;
        let segment = Arc::new(segment);
        let pid = std::process::id();
        let namespace = pid_namespace();
        let total = Estimator::with_store(Counters::new(Arc::clone(&segment), 0), shape, seed)?;
        let holder = Holder {
            segment: &segment,
            total: &total,
            pid,
            namespace,
            locks: &locks,
            own: None,
        };
        holder.reclaim();
        let slot = holder.claim()?.ok_or_else(|| SharedError::Full {
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
            locks,
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
        // Another change of this slot in flight (threads sharing the handle): for good, since
        // clearing the mark could race with a third change setting it.
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
        journal[ENDED].fetch_add(1, Ordering::SeqCst);
        // Exact on 64-bit targets.
        min as isize
    }

    /// The host-wide estimate of `key`.
    #[inline]
    pub fn get_hash(&self, key: KeyHash) -> isize {
        self.total.get_hash(key)
    }

    /// Takes back the contributions of processes that have died; returns how many slots it
    /// freed. One load per slot and one system call per held slot (a lock attempt on Linux,
    /// which the kernel checks against every lock on the file, so `O(N²)` for `N` holders;
    /// `kill(pid, 0)` elsewhere): to reclaim periodically from every holder, call
    /// [`reclaim_in_turn`](Self::reclaim_in_turn) instead.
    pub fn reclaim(&self) -> usize {
        self.holder().reclaim()
    }

    /// [`reclaim`](Self::reclaim)s if it is this handle's turn to reclaim for the host, taking
    /// the turn if its holder is dead or closed, or has not renewed it for [`TURN_TIMEOUT`];
    /// returns how many slots it freed (module docs, "Reclaiming in turn"). Called every
    /// [`RECLAIM_INTERVAL`] from every handle, it reclaims once an interval for the host, and
    /// costs any other handle one load and one system call.
    pub fn reclaim_in_turn(&self) -> usize {
        self.reclaim_in_turn_at(HostClock.now_nanos())
    }

    /// [`reclaim_in_turn`](Self::reclaim_in_turn) at `now` (host monotonic nanoseconds).
    fn reclaim_in_turn_at(&self, now: u64) -> usize {
        self.holder().reclaim_in_turn(now)
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
            locks: &self.locks,
            own: Some(self.slot),
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
        // AcqRel: our own contribution is ours; the CAS only keeps a sweeper who wrongly took us
        // for dead (elsewhere than on Linux, where a pid can be reused) from sweeping twice. On
        // Linux the slot's lock, ours until `locks` closes after this, keeps sweepers out.
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

#[cfg(test)]
impl SharedInflight {
    /// Leaves this handle as its process's death would: its descriptor of the segment closed
    /// and its mapping gone (the mapping holds the open file description too, so both must go
    /// before the slot's lock does), its slot still held with whatever it holds.
    fn die(self) {
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: each field is read out once and `this` is never used or dropped again; the
        // rest is plain data.
        unsafe {
            drop(std::ptr::read(&this.total));
            drop(std::ptr::read(&this.own));
            drop(std::ptr::read(&this.segment));
            drop(std::ptr::read(&this.locks));
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
