//! A shared `Rate`'s host-wide intervals, with two opens of one segment standing for two
//! processes (each its own mapping) on one hand-driven clock.

mod common;

use common::{Dir, SEED, shape};
use keepcount_limits::clock::ManualClock;
use keepcount_limits::shared::SharedRate;
use std::time::Duration;

const SECOND: Duration = Duration::from_secs(1);

/// Two opens of one rate on one clock: as two processes, each with its own mapping.
fn two_rates<'c>(dir: &Dir, clock: &'c ManualClock) -> [SharedRate<&'c ManualClock>; 2] {
    let open =
        || SharedRate::with_clock("rate", SECOND, shape(), SEED, &dir.options(), clock).unwrap();
    [open(), open()]
}

#[test]
fn every_process_sees_one_rotation_per_interval() {
    let dir = Dir::new("rotation");
    let clock = ManualClock::new();
    clock.advance(SECOND * 1000);
    let [a, b] = two_rates(&dir, &clock);
    for interval in 1..=5isize {
        a.observe(&"k", interval);
        assert_eq!(b.observe(&"k", interval), 2 * interval);
        clock.advance(SECOND);
        // Whoever looks first rotates; the other must not rotate again (which would clear the
        // interval that just ended).
        let (first, second) = if interval % 2 == 0 {
            (&a, &b)
        } else {
            (&b, &a)
        };
        assert_eq!(first.rate(&"k"), (2 * interval) as f64);
        assert_eq!(second.rate(&"k"), (2 * interval) as f64);
        assert_eq!(
            second.rate_with(&"k", |p| (p.prev_samples, p.curr_samples)),
            (2 * interval, 0)
        );
    }
}

#[test]
fn idle_intervals_read_as_zero_in_every_process() {
    let dir = Dir::new("idle");
    let clock = ManualClock::new();
    clock.advance(SECOND * 1000);
    let [a, b] = two_rates(&dir, &clock);
    a.observe(&"k", 4);
    clock.advance(SECOND);
    assert_eq!(b.rate(&"k"), 4.0);
    clock.advance(SECOND * 2);
    assert_eq!(a.rate(&"k"), 0.0);
    assert_eq!(
        b.rate_with(&"k", |p| (p.prev_samples, p.curr_samples)),
        (0, 0)
    );
    b.observe(&"k", 1);
    clock.advance(SECOND);
    assert_eq!(a.rate(&"k"), 1.0);
}

#[test]
fn a_segment_from_another_boot_is_rotated_not_trusted() {
    let dir = Dir::new("boot");
    let late = ManualClock::new();
    late.advance(SECOND * 100);
    let before =
        SharedRate::with_clock("rate", SECOND, shape(), SEED, &dir.options(), &late).unwrap();
    before.observe(&"k", 9);
    drop(before);
    // The new boot's clock is behind every time in the segment.
    let early = ManualClock::new();
    let after =
        SharedRate::with_clock("rate", SECOND, shape(), SEED, &dir.options(), &early).unwrap();
    assert_eq!(after.rate(&"k"), 0.0);
    assert_eq!(after.observe(&"k", 1), 1);
    early.advance(SECOND);
    assert_eq!(after.rate(&"k"), 1.0);
}

#[test]
fn concurrent_observers_racing_rotations_never_panic_and_stay_consistent() {
    let dir = Dir::new("race");
    let clock = ManualClock::new();
    let rates = two_rates(&dir, &clock);
    std::thread::scope(|scope| {
        for rate in &rates {
            for _ in 0..2 {
                scope.spawn(move || {
                    for _ in 0..20_000 {
                        rate.observe(&"hot", 1);
                        let _ = rate.rate(&"hot");
                    }
                });
            }
        }
        scope.spawn(|| {
            for _ in 0..500 {
                clock.advance(Duration::from_millis(7));
                std::thread::yield_now();
            }
        });
    });
    // Quiet now: one more interval, and both see the same completed count.
    rates[0].observe(&"hot", 0);
    clock.advance(SECOND);
    let seen = rates[0].rate(&"hot");
    assert_eq!(rates[1].rate(&"hot"), seen);
    clock.advance(SECOND * 2);
    assert_eq!(rates[1].rate(&"hot"), 0.0);
}
