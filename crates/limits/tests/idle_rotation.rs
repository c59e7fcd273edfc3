//! A rate's (and heavy hitters') first interval after an idle spell, with threads racing the
//! rotation: pingora's `Rate` clears the sketch that was current after flipping to the new one,
//! wiping what threads that had not seen the flip counted meanwhile, a shared rate used to count
//! those events into a sketch read as stale, and `HeavyHitters` cleared both summaries the same
//! way. All must count every event once and none of the stale ones.
//!
//! Each round moves a shared manual clock three intervals on (so both sketches hold stale counts
//! and the next call rotates after idleness), then several threads count one key at once: the
//! first call claims the rotation and works through a sketch large enough that the others count
//! while it does. With the clock standing still during a round nothing stalls for an interval, so
//! the total must be exact; a heavy hitter's upper bound may still miss the few increments other
//! threads had in flight as it entered the table (the race `heavy`'s module doc states), which the
//! check allows. Keys and seeds are fixed, so the collisions among the other keys are the same on
//! every run: no false-failure probability.

use keepcount_limits::Shape;
use keepcount_limits::clock::ManualClock;
use keepcount_limits::heavy::{HeavyHitters, Settings, Window};
use keepcount_limits::rate::{Rate, RateComponents};
use keepcount_limits::shared::{SharedOptions, SharedRate};
use std::sync::Barrier;
use std::time::Duration;

const SECOND: Duration = Duration::from_secs(1);
const THREADS: usize = 4;
const PER_THREAD: isize = 2_000;
const ROUNDS: isize = 12;
/// 4 x 65,536 counters a sketch: a rotation takes long enough for the other threads to count.
const HASHES: usize = 4;
const SLOTS: usize = 65_536;

/// The key every thread counts; the others are unique to a round, a thread and an event.
const K: u64 = 0;

/// What the race needs of a rate.
trait Observed: Sync {
    fn observe(&self, key: u64);
}

impl Observed for Rate<&ManualClock> {
    fn observe(&self, key: u64) {
        Rate::observe(self, &key, 1);
    }
}

impl Observed for SharedRate<&ManualClock> {
    fn observe(&self, key: u64) {
        SharedRate::observe(self, &key, 1);
    }
}

impl Observed for HeavyHitters<u64, &ManualClock> {
    fn observe(&self, key: u64) {
        self.incr(&key, 1);
    }
}

/// A rate's (previous, current) counts of `K`.
fn samples(components: RateComponents) -> (isize, isize) {
    (components.prev_samples, components.curr_samples)
}

/// Runs the rounds; what `after` reads once each round's threads are done.
fn race<R: Observed, T>(rate: &R, clock: &ManualClock, after: impl Fn(&R) -> T) -> Vec<T> {
    let barrier = Barrier::new(THREADS);
    (1..=ROUNDS)
        .map(|round| {
            clock.advance(SECOND * 3);
            std::thread::scope(|scope| {
                for thread in 0..THREADS {
                    let barrier = &barrier;
                    scope.spawn(move || {
                        barrier.wait();
                        for i in 0..PER_THREAD {
                            rate.observe(K);
                            // Other keys spread the stale counts over the whole sketch.
                            rate.observe(unique(round, thread, i));
                        }
                    });
                }
            });
            after(rate)
        })
        .collect()
}

/// A key no other event of the test uses.
fn unique(round: isize, thread: usize, i: isize) -> u64 {
    1 + ((round as u64) << 40) + ((thread as u64) << 20) + i as u64
}

#[test]
fn a_local_rate_counts_every_event_of_a_rotation_after_idleness_once() {
    let clock = ManualClock::new();
    let rate = Rate::with_clock(SECOND, HASHES, SLOTS, 7, &clock).unwrap();
    for (round, (previous, current)) in race(&rate, &clock, |r| r.rate_with(&K, samples))
        .into_iter()
        .enumerate()
    {
        // A thread that had not yet seen the flip counts in the previous interval: the sum.
        assert_eq!(
            previous + current,
            THREADS as isize * PER_THREAD,
            "round {round}: ({previous}, {current})"
        );
    }
}

#[test]
fn a_shared_rate_counts_every_event_of_a_rotation_after_idleness_in_the_new_interval() {
    let dir = std::env::temp_dir().join(format!("keepcount-rate-idle-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let options = SharedOptions::new().dir(&dir);
    let clock = ManualClock::new();
    clock.advance(SECOND * 100);
    let shape = Shape::new(HASHES, SLOTS).unwrap();
    let rate = SharedRate::with_clock("idle", SECOND, shape, 7, &options, &clock).unwrap();
    let rounds = race(&rate, &clock, |r| r.rate_with(&K, samples));
    for (round, samples) in rounds.into_iter().enumerate() {
        // The previous interval is stale; the current one holds every event once.
        assert_eq!(samples, (0, THREADS as isize * PER_THREAD), "round {round}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn heavy_hitters_count_every_event_of_a_rotation_after_idleness_once() {
    let clock = ManualClock::new();
    // Threshold 64, room for every key that crosses: K crosses, the unique keys do not.
    let settings = Settings::new(Shape::new(HASHES, SLOTS).unwrap(), 7, 64, 1024).unwrap();
    let heavy = HeavyHitters::<u64, _>::with_clock(settings, SECOND, &clock).unwrap();
    let events = THREADS as u64 * PER_THREAD as u64;
    let rounds = race(&heavy, &clock, |heavy| {
        let total = heavy.previous().stats().total + heavy.current().stats().total;
        (total, heavy.count(&K, Window::Both))
    });
    for (round, (total, k)) in rounds.into_iter().enumerate() {
        // Row 0 of a sketch adds every increment once: the two summaries hold this round's
        // events, K's and the unique keys', none lost and none of the stale ones.
        assert_eq!(total, 2 * events, "round {round}");
        // K's upper bound may miss the increments other threads had in flight when K entered a
        // summary's table (the race the module doc states: at most `THREADS - 1` per summary,
        // and K can enter both); a rotation losing K's counts would miss thousands.
        let race = 2 * (THREADS as u64 - 1);
        assert!(
            k.lower <= events && events <= k.upper + race,
            "round {round}: {k:?}"
        );
    }
}
