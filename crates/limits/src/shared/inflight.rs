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
//! contribution's of one row together, and those two are not one atomic step (nor can a record of
//! which was done be one with either). Increments add to the total first, decrements take from the
//! contribution first, so a process killed between the two leaves that one row over by at most
//! that change, never under, for as long as the segment lives: the key's estimate, the minimum
//! over rows, stays exact while one of its rows is untouched, but kills that land there add up
//! (unlinking the segment before the processes start clears them).
//!
//! # Slot table
//! After the counters, two words per slot: the owner word (`state << 62 | sweeper pid << 32 |
//! owner pid`, state 0 free, 1 held, 2 being swept) and the owner's PID namespace (Linux: the
//! inode of `/proc/self/ns/pid`; 1 elsewhere). A process judges only slots of its own namespace:
//! containers with separate PID namespaces cannot tell each other's processes apart, so each
//! recovers its own processes' slots. A pid reused by a new process before a survivor looks delays
//! recovery until that process exits too.

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
        let mut min = i64::MAX;
        // Row by row, so that a process killed mid-change leaves at most one row of this key off
        // (module docs); the order within a row keeps that row an over-count.
        self.total.rows().for_each_index(key, |index| {
            let (Some(total), Some(own)) = (total.get(index), own.get(index)) else {
                return;
            };
            // Relaxed: as the estimator's counters; the contribution is this process's alone.
            if value >= 0 {
                min = min.min(add_saturating(total, value));
                own.fetch_add(value, Ordering::Relaxed);
            } else {
                own.fetch_add(value, Ordering::Relaxed);
                min = min.min(add_saturating(total, value));
            }
        });
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
        if words[0]
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
            let claimed = words[0]
                .compare_exchange(
                    FREE,
                    owner_word(HELD, 0, self.pid),
                    Ordering::Acquire,
                    Ordering::Relaxed,
                )
                .is_ok();
            if claimed {
                words[1].store(self.namespace, Ordering::Release);
            }
            claimed
        })
    }

    fn reclaim(&self) -> usize {
        let mut freed = 0;
        for slot in 0..self.slots() {
            let words = self.segment.slot_words(slot);
            // Acquire: pairs with the claim's Release of the namespace.
            let seen = words[0].load(Ordering::Acquire);
            if words[1].load(Ordering::Acquire) != self.namespace {
                continue;
            }
            let dead = match state(seen) {
                HELD => owner(seen) != self.pid && !alive(owner(seen)),
                SWEEPING => sweeper(seen) != self.pid && !alive(sweeper(seen)),
                _ => false,
            };
            if !dead {
                continue;
            }
            let mine = owner_word(SWEEPING, self.pid, owner(seen));
            // AcqRel: one survivor wins the slot; the loser moves on.
            if words[0]
                .compare_exchange(seen, mine, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                self.sweep(slot, mine);
                freed += 1;
            }
        }
        freed
    }

    /// Subtracts slot `slot`'s contribution from the total and frees the slot, whose owner word
    /// is `mine`.
    fn sweep(&self, slot: usize, mine: u64) {
        let contribution = self.segment.sketch(1 + slot);
        let total = self.total.counters();
        for (own, sum) in contribution.iter().zip(total) {
            // swap: each unit of contribution is taken exactly once, even by two sweepers.
            // Relaxed: counters are independent; the freeing store below publishes the zeros.
            let value = own.swap(0, Ordering::Relaxed);
            if value != 0 {
                sum.fetch_sub(value, Ordering::Relaxed);
            }
        }
        let words = self.segment.slot_words(slot);
        words[1].store(0, Ordering::Relaxed);
        // Release: the zeroed contribution is visible to the next claimant (its Acquire). A CAS,
        // so a sweeper that was taken over frees nothing.
        let _ = words[0].compare_exchange(mine, FREE, Ordering::Release, Ordering::Relaxed);
    }
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
