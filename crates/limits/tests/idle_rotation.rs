//! A rate's first interval after an idle spell, with threads racing the rotation: pingora's `Rate`
//! clears the sketch that was current after flipping to the new one, wiping what threads that had
//! not seen the flip counted meanwhile, and a shared rate used to count those events into a sketch
//! read as stale. Both must count every event once and none of the stale ones.
//!
//! Each round moves a shared manual clock three intervals on (so both sketches hold stale counts
//! and the next call rotates after idleness), then several threads count one key at once: the
//! first call claims the rotation and works through a sketch large enough that the others count
//! while it does. With the clock standing still during a round nothing stalls for an interval, so
//! the total must be exact. Keys and seeds are fixed, so the collisions among the other keys are
//! the same on every run: no false-failure probability.

use keepcount_limits::Shape;
use keepcount_limits::clock::ManualClock;
use keepcount_limits::rate::{Rate, RateComponents};
use keepcount_limits::shared::{SharedOptions, SharedRate};
use std::hash::Hash;
use std::sync::Barrier;
use std::time::Duration;

const SECOND: Duration = Duration::from_secs(1);
const THREADS: usize = 4;
const PER_THREAD: isize = 2_000;
const ROUNDS: isize = 12;
/// 4 x 65,536 counters a sketch: a rotation takes long enough for the other threads to count.
const HASHES: usize = 4;
const SLOTS: usize = 65_536;

/// What the race needs of a rate.
trait Observed: Sync {
    fn observe<T: Hash>(&self, key: &T);
    /// `"k"`'s (previous, current) counts.
    fn samples(&self) -> (isize, isize);
}

impl Observed for Rate<&ManualClock> {
    fn observe<T: Hash>(&self, key: &T) {
        Rate::observe(self, key, 1);
    }
    fn samples(&self) -> (isize, isize) {
        self.rate_with(&"k", |c: RateComponents| (c.prev_samples, c.curr_samples))
    }
}

impl Observed for SharedRate<&ManualClock> {
    fn observe<T: Hash>(&self, key: &T) {
        SharedRate::observe(self, key, 1);
    }
    fn samples(&self) -> (isize, isize) {
        self.rate_with(&"k", |c: RateComponents| (c.prev_samples, c.curr_samples))
    }
}

/// Runs the rounds; each round's (previous, current) counts of `"k"`.
fn race(rate: &impl Observed, clock: &ManualClock) -> Vec<(isize, isize)> {
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
                            rate.observe(&"k");
                            // Other keys spread the stale counts over the whole sketch.
                            rate.observe(&(round, thread, i));
                        }
                    });
                }
            });
            rate.samples()
        })
        .collect()
}

#[test]
fn a_local_rate_counts_every_event_of_a_rotation_after_idleness_once() {
    let clock = ManualClock::new();
    let rate = Rate::with_clock(SECOND, HASHES, SLOTS, 7, &clock).unwrap();
    for (round, (previous, current)) in race(&rate, &clock).into_iter().enumerate() {
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
    for (round, samples) in race(&rate, &clock).into_iter().enumerate() {
        // The previous interval is stale; the current one holds every event once.
        assert_eq!(samples, (0, THREADS as isize * PER_THREAD), "round {round}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
