//! Settling by hand-made kills: slot states written as a process killed mid-change leaves them.

use super::slots::{FREE, SWEEPING, UNSETTLED, state, sweeper};
use super::turn::turn_word;
use super::*;
use crate::shared::layout::TURN_WORD_OFFSET;
use crate::shared::scratch::Scratch;

/// A scratch directory for one test's segment.
struct Dir(Scratch);

impl Dir {
    fn new(test: &str) -> Self {
        Self(Scratch::new("inflight", test))
    }

    fn try_open(&self) -> Result<SharedInflight, SharedError> {
        SharedInflight::open(
            "inflight",
            Shape::new(2, 64).unwrap(),
            7,
            4,
            &self.0.options(),
        )
    }

    fn open(&self) -> SharedInflight {
        self.try_open().unwrap()
    }
}

/// A pid no process has: above the largest the systems give (2^22 on Linux, 99,999 on macOS),
/// within the 30 bits a sweeper's pid has. (Not a child run and waited for: a child being
/// spawned holds the descriptors of every handle of the test process until it execs, and with
/// them their slots' locks.)
fn dead_pid() -> u32 {
    0x3fff_fffe
}

/// Leaves `victim` as a process killed in the middle of adding `value` to `key` would: the
/// total's counter of `rows_done` + 1 rows added, its own of `rows_done`, the change begun
/// and not ended; then gives its slot to a dead pid and lets the handle die (its descriptor,
/// and with it its slot's lock, closed).
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
    victim.die();
}

/// The total's counters for `key`, row 0 first.
fn counts(inflight: &SharedInflight, key: KeyHash) -> Vec<i64> {
    let mut counts = Vec::new();
    inflight.total.rows().for_each_index(key, |index| {
        counts.push(inflight.total.counters()[index].load(Ordering::SeqCst));
    });
    counts
}

/// Every counter of the total, added up.
fn sum(inflight: &SharedInflight) -> i64 {
    inflight
        .total
        .counters()
        .iter()
        .map(|c| c.load(Ordering::SeqCst))
        .sum()
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
    assert_eq!(sum(&here), 4, "only this handle's 2 in each of 2 rows");
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

#[test]
fn a_sweep_cut_in_two_by_a_kill_is_settled_on_every_counter() {
    let dir = Dir::new("swept");
    let here = dir.open();
    let (a, b) = (here.hash_key("a"), here.hash_key("b"));
    here.incr_hash(a, 1);
    let victim = dir.open();
    victim.incr_hash(a, 3);
    victim.incr_hash(b, 2);
    let slot = victim.slot;
    let words = victim.segment.slot_words(slot);
    // The holder died idle; its sweeper swapped `b`'s contribution to zero in every row and was
    // killed before taking it from the total (and before reaching `a`'s).
    let own = victim.segment.sketch(1 + slot);
    victim.total.rows().for_each_index(b, |index| {
        own[index].swap(0, Ordering::SeqCst);
    });
    words[OWNER].store(
        owner_word(SWEEPING, dead_pid(), dead_pid()),
        Ordering::SeqCst,
    );
    victim.die();
    let words = here.segment.slot_words(slot);
    assert_eq!(here.reclaim(), 1);
    assert_eq!((here.get_hash(a), here.get_hash(b)), (1, 0));
    assert_eq!(sum(&here), 2, "only this handle's 1 in each of 2 rows");
    assert_eq!(words[OWNER].load(Ordering::SeqCst), FREE);
    // The mark went with the slot: the next holder starts clean.
    assert_eq!(words[OVERLAP].load(Ordering::SeqCst), 0);
}

/// Leaves `victim`'s slot as a process of another PID namespace would: its namespace word not
/// ours, and its pid one that lives here (this process's own: a container's pid 1, say).
#[cfg(target_os = "linux")]
fn from_another_namespace(victim: &SharedInflight) {
    let words = victim.segment.slot_words(victim.slot);
    words[slots::NAMESPACE].store(pid_namespace() ^ 0x5a5a, Ordering::SeqCst);
    words[OWNER].store(owner_word(HELD, 0, std::process::id()), Ordering::SeqCst);
}

#[cfg(target_os = "linux")]
#[test]
fn a_holder_whose_descriptor_closed_is_reclaimed_whatever_its_namespace_or_pid() {
    let dir = Dir::new("namespace");
    let here = dir.open();
    let key = here.hash_key("api");
    here.incr_hash(key, 1);
    // Restarts of a container that shares the directory: each dies holding counts, in a PID
    // namespace of its own, with a pid that means something else here.
    for restart in 0..6 {
        let victim = dir.open();
        assert_eq!(victim.incr_hash(key, 3), 4, "restart {restart}");
        let slot = victim.slot;
        from_another_namespace(&victim);
        victim.die();
        assert_eq!(here.reclaim(), 1, "restart {restart}");
        assert_eq!(here.get_hash(key), 1, "restart {restart}: its count back");
        assert_eq!(
            here.segment.slot_words(slot)[OWNER].load(Ordering::SeqCst),
            FREE
        );
    }
    // Four slots, six restarts: every dead one's slot came back.
    let others: Vec<_> = (0..3).map(|_| dir.open()).collect();
    assert!(matches!(dir.try_open(), Err(SharedError::Full { .. })));
    drop(others);
}

#[cfg(target_os = "linux")]
#[test]
fn a_slot_whose_lock_is_held_is_never_reclaimed() {
    let dir = Dir::new("alive");
    let here = dir.open();
    let key = here.hash_key("api");
    let live = dir.open();
    live.incr_hash(key, 2);
    let words = live.segment.slot_words(live.slot);
    // Whatever its words say (a dead pid, as a reused or foreign one would look; a sweep under
    // way by a dead sweeper): its holder still has the slot's lock.
    let held = words[OWNER].load(Ordering::SeqCst);
    for word in [
        owner_word(HELD, 0, dead_pid()),
        owner_word(SWEEPING, dead_pid(), dead_pid()),
        owner_word(UNSETTLED, 0, dead_pid()),
    ] {
        words[OWNER].store(word, Ordering::SeqCst);
        assert_eq!(here.reclaim(), 0);
        // Nor by a handle opened meanwhile, in this process like every handle here.
        drop(dir.open());
        assert_eq!(words[OWNER].load(Ordering::SeqCst), word);
        assert_eq!(here.get_hash(key), 2);
    }
    words[OWNER].store(held, Ordering::SeqCst);
    // Closed, it gives its count back and frees its slot itself.
    let slot = live.slot;
    drop(live);
    assert_eq!(here.get_hash(key), 0);
    assert_eq!(
        here.segment.slot_words(slot)[OWNER].load(Ordering::SeqCst),
        FREE
    );
}

#[cfg(target_os = "linux")]
#[test]
fn a_handle_killed_while_sweeping_a_dead_slot_is_taken_over() {
    let dir = Dir::new("sweeper");
    let here = dir.open();
    let key = here.hash_key("api");
    let victim = dir.open();
    let sweeper = dir.open();
    victim.incr_hash(key, 3);
    let slot = victim.slot;
    victim.die();
    // Another handle takes the dead slot's lock and starts sweeping it, then dies too.
    assert!(sweeper.locks.try_lock(slot).unwrap());
    let words = here.segment.slot_words(slot);
    let seen = words[OWNER].load(Ordering::SeqCst);
    words[OWNER].store(
        owner_word(SWEEPING, sweeper.pid, slots::owner(seen)),
        Ordering::SeqCst,
    );
    assert_eq!(here.reclaim(), 0, "its sweeper lives");
    sweeper.die();
    assert_eq!(
        here.reclaim(),
        2,
        "the dead slot and the dead sweeper's own"
    );
    assert_eq!(here.get_hash(key), 0);
    assert_eq!(words[OWNER].load(Ordering::SeqCst), FREE);
}

#[cfg(target_os = "linux")]
#[test]
fn threads_reclaiming_through_one_handle_sweep_each_dead_slot_once() {
    let dir = Dir::new("threads");
    let here = dir.open();
    let key = here.hash_key("api");
    here.incr_hash(key, 1);
    for _ in 0..20 {
        let victims: Vec<_> = (0..3).map(|_| dir.open()).collect();
        for victim in victims {
            victim.incr_hash(key, 2);
            victim.die();
        }
        let freed: usize = std::thread::scope(|scope| {
            let reclaims: Vec<_> = (0..4).map(|_| scope.spawn(|| here.reclaim())).collect();
            reclaims.into_iter().map(|r| r.join().unwrap()).sum()
        });
        assert_eq!(freed, 3);
        assert_eq!(counts(&here, key), [1, 1]);
    }
}

/// Milliseconds as host-clock nanoseconds, for the turn's tests (their times are made up: the
/// turn only compares readings).
fn ms(ms: u64) -> u64 {
    ms * 1_000_000
}

#[test]
fn only_the_handle_whose_turn_it_is_reclaims_while_it_lives() {
    let dir = Dir::new("turn");
    let (a, b) = (dir.open(), dir.open());
    let key = a.hash_key("api");
    let start = ms(10_000);
    assert_eq!(a.reclaim_in_turn_at(start), 0, "a takes the turn");
    let victim = dir.open();
    victim.incr_hash(key, 3);
    let slot = victim.slot;
    victim.die();
    // Every other holder's tick in that interval leaves the dead slot to the turn's holder: one
    // reclaim per interval for the host, where each holder reclaimed at each of its ticks.
    for tick in [1, 40, 99] {
        assert_eq!(b.reclaim_in_turn_at(start + ms(tick)), 0, "b at +{tick} ms");
    }
    assert_ne!(
        a.segment.slot_words(slot)[OWNER].load(Ordering::SeqCst),
        FREE
    );
    assert_eq!(a.get_hash(key), 3);
    // The turn's holder, at its next tick.
    assert_eq!(a.reclaim_in_turn_at(start + ms(100)), 1);
    assert_eq!(a.get_hash(key), 0);
    assert_eq!(b.reclaim_in_turn_at(start + ms(150)), 0, "still a's turn");
}

#[test]
fn a_turn_holder_that_dies_is_taken_over_at_the_next_tick() {
    let dir = Dir::new("turn-died");
    let (a, b) = (dir.open(), dir.open());
    let key = a.hash_key("api");
    let start = ms(10_000);
    assert_eq!(a.reclaim_in_turn_at(start), 0);
    // It dies right after taking the turn, holding a count: nothing waits for the turn to age.
    a.incr_hash(key, 2);
    a.die();
    assert_eq!(b.reclaim_in_turn_at(start + ms(1)), 1);
    assert_eq!(b.get_hash(key), 0);
    // A turn holder that closed is gone too.
    let c = dir.open();
    assert_eq!(b.reclaim_in_turn_at(start + ms(100)), 0, "b's turn");
    drop(b);
    let victim = dir.open();
    victim.incr_hash(key, 5);
    victim.die();
    assert_eq!(c.reclaim_in_turn_at(start + ms(101)), 1);
    assert_eq!(c.get_hash(key), 0);
}

#[test]
fn a_turn_holder_that_stalls_is_taken_over_once_its_turn_is_stale() {
    let dir = Dir::new("turn-stalled");
    let (a, b) = (dir.open(), dir.open());
    let key = a.hash_key("api");
    let start = ms(10_000);
    assert_eq!(a.reclaim_in_turn_at(start), 0);
    let victim = dir.open();
    victim.incr_hash(key, 1);
    victim.die();
    // `a` lives but ticks no more (its event loop blocked): its turn is someone else's once
    // TURN_TIMEOUT old.
    let stale = u64::try_from(TURN_TIMEOUT.as_nanos()).unwrap();
    assert_eq!(b.reclaim_in_turn_at(start + stale - 1), 0);
    assert_eq!(b.reclaim_in_turn_at(start + stale), 1);
    assert_eq!(a.get_hash(key), 0);
    // `a`, back, finds the turn taken: nothing to do until b stalls or dies in turn.
    assert_eq!(a.reclaim_in_turn_at(start + stale + ms(1)), 0);
    assert_eq!(
        b.reclaim_in_turn_at(start + stale + ms(100)),
        0,
        "b keeps it"
    );
    // A turn taken on another clock (a segment kept from another boot) is taken at once.
    let now = start + stale + ms(101);
    let far = now + crate::shared::OTHER_CLOCK_NANOS + ms(1);
    a.segment
        .word(TURN_WORD_OFFSET)
        .store(turn_word(far, b.slot), Ordering::SeqCst);
    let victim = dir.open();
    victim.incr_hash(key, 1);
    victim.die();
    assert_eq!(a.reclaim_in_turn_at(now), 1);
}

#[cfg(target_os = "linux")]
#[test]
fn idle_holders_try_one_lock_a_tick_and_the_turn_holder_one_a_slot() {
    // Each holder used to reclaim at each tick: one lock attempt per held slot, each of which
    // the kernel checks against every lock on the file, so N idle holders cost O(N^3) a period.
    let dir = Dir::new("turn-cost");
    let holders: Vec<_> = (0..4).map(|_| dir.open()).collect();
    let start = ms(10_000);
    let attempts = |holders: &[SharedInflight]| -> usize {
        holders
            .iter()
            .map(|h| h.locks.attempts.load(Ordering::Relaxed))
            .sum()
    };
    let before = attempts(&holders);
    for (n, holder) in holders.iter().enumerate() {
        holder.reclaim_in_turn_at(start + ms(n as u64));
    }
    // The first reclaims (a lock attempt on each of the 3 others' slots); the 3 others each ask
    // whether it lives (one attempt).
    assert_eq!(attempts(&holders) - before, 3 + 3);
}
