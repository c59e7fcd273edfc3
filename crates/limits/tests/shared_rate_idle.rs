//! A shared rate's first interval after an idle spell: threads that count while another thread
//! is rotating must neither lose their events nor see the counts from before the idle spell.
//!
//! Each round moves a shared manual clock three intervals on (so both sketches hold stale
//! counts and the next call rotates with STALE), then several threads count one key at once:
//! the first call claims the rotation and clears a sketch large enough that the others count
//! while it does. With the clock standing still during a round nothing can stall for an
//! interval, so the count afterwards must be exact: no false-failure probability.

use keepcount_limits::Shape;
use keepcount_limits::clock::ManualClock;
use keepcount_limits::shared::{SharedOptions, SharedRate};
use std::sync::Barrier;
use std::time::Duration;

const SECOND: Duration = Duration::from_secs(1);
const THREADS: usize = 4;
const PER_THREAD: isize = 2_000;
const ROUNDS: isize = 12;

#[test]
fn events_counted_during_a_rotation_after_idleness_all_land_in_the_new_interval() {
    let dir = std::env::temp_dir().join(format!("keepcount-rate-idle-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let options = SharedOptions::new().dir(&dir);
    // 4 x 65,536 counters a sketch: a clear takes long enough for the other threads to count.
    let shape = Shape::new(4, 65_536).unwrap();
    let clock = ManualClock::new();
    clock.advance(SECOND * 100);
    let rate = SharedRate::with_clock("idle", SECOND, shape, 7, &options, &clock).unwrap();
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
            (previous, current),
            (0, THREADS as isize * PER_THREAD),
            "round {round}: the previous interval is stale, the current holds every event once"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
