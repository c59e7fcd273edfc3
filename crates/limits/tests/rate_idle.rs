//! A process-local `Rate`'s first interval after an idle spell, with threads racing the rotation:
//! pingora clears the sketch that was current after flipping to the new one, wiping what threads
//! that had not seen the flip counted meanwhile; keepcount carries it into the new interval.
//!
//! As in `shared_rate_idle.rs`: the shared manual clock moves three intervals between rounds and
//! stands still during one, so no thread stalls for an interval and the total must be exact. What
//! a thread adds after the carry passed its counters stays in the previous sketch, where
//! `prev_samples` reads it, so the check is on the sum. Keys and seed are fixed, so the collisions
//! among the other keys are the same on every run: no false-failure probability.

use keepcount_limits::clock::ManualClock;
use keepcount_limits::rate::Rate;
use std::sync::Barrier;
use std::time::Duration;

const SECOND: Duration = Duration::from_secs(1);
const THREADS: usize = 4;
const PER_THREAD: isize = 2_000;
const ROUNDS: isize = 12;

#[test]
fn events_counted_during_a_rotation_after_idleness_are_all_counted_once() {
    let clock = ManualClock::new();
    // 4 x 65,536 counters a sketch: a clear takes long enough for the other threads to count.
    let rate = Rate::with_clock(SECOND, 4, 65_536, 7, &clock).unwrap();
    let barrier = Barrier::new(THREADS);
    for round in 1..=ROUNDS {
        clock.advance(SECOND * 3);
        std::thread::scope(|scope| {
            for thread in 0..THREADS {
                let (rate, barrier) = (&rate, &barrier);
                scope.spawn(move || {
                    barrier.wait();
                    for i in 0..PER_THREAD {
                        rate.observe(&"k", 1);
                        // Other keys spread the stale counts over the whole sketch.
                        rate.observe(&(round, thread, i), 1);
                    }
                });
            }
        });
        let (previous, current) = rate.rate_with(&"k", |c| (c.prev_samples, c.curr_samples));
        assert_eq!(
            previous + current,
            THREADS as isize * PER_THREAD,
            "round {round}: ({previous}, {current}), every event once and no stale count"
        );
    }
}
