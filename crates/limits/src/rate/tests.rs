//! `Rate`'s unit tests: intervals and rates, the estimates, refunds, constructors, threads.

use super::*;
use crate::clock::ManualClock;
use crate::shape::ShapeError;
use std::sync::Arc;

const SECOND: Duration = Duration::from_secs(1);

fn rate(clock: &ManualClock) -> Rate<&ManualClock> {
    Rate::with_clock(SECOND, HASHES, SLOTS, 42, clock).unwrap()
}

// pingora-limits' test_observe_rate, on a manual clock.
#[test]
fn reports_the_last_completed_interval_then_zero_after_two_idle_ones() {
    let clock = ManualClock::new();
    let r = rate(&clock);
    let key = 1;
    assert_eq!(r.observe(&key, 3), 3);
    assert_eq!(r.observe(&key, 2), 5);
    assert_eq!(r.rate(&key), 0.0);

    clock.advance(SECOND);
    assert_eq!(r.observe(&key, 4), 4);
    assert_eq!(r.rate(&key), 5.0);

    clock.advance(SECOND);
    assert_eq!(r.rate(&key), 4.0);

    clock.advance(SECOND);
    assert_eq!(r.rate(&key), 0.0);
}

// pingora-limits' test_observe_rate_custom_90_10.
#[test]
fn rate_with_gets_previous_and_current_counts() {
    let clock = ManualClock::new();
    let r = rate(&clock);
    let key = 1;
    let f = |p: RateComponents| {
        (p.prev_samples as f64 * 0.1 + p.curr_samples as f64 * 0.9) / p.interval.as_secs_f64()
    };
    r.observe(&key, 3);
    r.observe(&key, 2);
    assert_eq!(r.rate_with(&key, f), 5. * 0.9);

    clock.advance(SECOND);
    assert_eq!(r.observe(&key, 4), 4);
    assert_eq!(r.rate_with(&key, f), 5. * 0.1 + 4. * 0.9);

    clock.advance(SECOND);
    assert_eq!(r.rate_with(&key, f), 4. * 0.1);

    clock.advance(SECOND);
    assert_eq!(r.rate_with(&key, f), 0.0);
}

// pingora-limits' test_observe_rate_custom_proportional, exact instead of approximate.
#[test]
fn proportional_estimate_slides_across_intervals() {
    let clock = ManualClock::new();
    let r = rate(&clock);
    let key = 1;
    let f = PROPORTIONAL_RATE_ESTIMATE_CALC_FN;
    r.observe(&key, 3);
    r.observe(&key, 2);
    assert_eq!(r.rate_with(&key, f), 5.);

    clock.advance(SECOND / 2);
    assert_eq!(r.rate_with(&key, f), 5.);
    assert_eq!(r.rate(&key), 0.);

    clock.advance(SECOND / 2);
    assert_eq!(r.observe(&key, 4), 4);
    assert_eq!(r.rate_with(&key, f), 9.);

    clock.advance(SECOND * 3 / 4);
    assert_eq!(r.rate_with(&key, f), 5. * 0.25 + 4.);

    clock.advance(SECOND / 4);
    assert_eq!(r.rate_with(&key, f), 4.);
    assert_eq!(r.rate(&key), 4.);

    clock.advance(SECOND / 2);
    assert_eq!(r.rate_with(&key, f), 4. / 2.);
    assert_eq!(r.rate(&key), 4.);

    clock.advance(SECOND);
    assert_eq!(r.rate_with(&key, f), 0.);
}

#[test]
fn the_call_that_ends_an_interval_sees_it_as_previous() {
    let clock = ManualClock::new();
    let r = rate(&clock);
    r.observe(&"k", 6);
    clock.advance(SECOND + SECOND / 4);
    let parts = r.rate_with(&"k", |p| p);
    assert_eq!((parts.prev_samples, parts.curr_samples), (6, 0));
    assert_eq!(parts.current_interval_fraction, 0.25);
}

#[test]
fn refunds_take_back_current_counts_down_to_zero_only() {
    let clock = ManualClock::new();
    let r = rate(&clock);
    r.observe(&"k", 5);
    clock.advance(SECOND);
    r.observe(&"k", 4);
    assert_eq!(r.refund(&"k", 3), 1);
    assert_eq!(r.refund(&"k", 3), 0);
    assert_eq!(r.rate(&"k"), 5.0, "the previous interval is not refunded");
    assert_eq!(r.observe(&"k", 1), 1);
}

#[test]
fn sub_millisecond_intervals_work() {
    let clock = ManualClock::new();
    let r = Rate::with_clock(Duration::from_micros(100), 4, 64, 1, &clock).unwrap();
    r.observe(&"k", 2);
    clock.advance(Duration::from_micros(100));
    assert_eq!(r.rate(&"k"), 20_000.0);
    let fraction = r.rate_with(&"k", |p| p.current_interval_fraction);
    assert_eq!(fraction, 0.0);
}

#[test]
fn infallible_constructors_clamp_instead_of_panicking() {
    let r = Rate::new_with_estimator_config(Duration::ZERO, 0, 0);
    assert_eq!(r.interval(), Duration::from_nanos(1));
    r.observe(&"k", 1);
    let _ = r.rate(&"k");
    let _ = r.rate_with(&"k", PROPORTIONAL_RATE_ESTIMATE_CALC_FN);
    assert_eq!(
        Rate::new(Duration::MAX).interval().as_nanos(),
        u128::from(u64::MAX)
    );
}

#[test]
fn fallible_constructor_refuses_bad_configuration() {
    let clock = ManualClock::new();
    assert_eq!(
        Rate::with_clock(Duration::ZERO, 4, 8, 0, &clock).unwrap_err(),
        RateError::ZeroInterval
    );
    let shape = Rate::with_clock(SECOND, 4, 0, 0, &clock).unwrap_err();
    assert_eq!(shape, RateError::Shape(ShapeError::ZeroSlots));
    assert_eq!(
        shape.to_string(),
        "bad rate sketch shape: slots must be at least 1, got 0"
    );
}

#[test]
fn time_is_measured_from_construction() {
    let clock = ManualClock::new();
    clock.advance(SECOND * 10);
    let r = rate(&clock);
    r.observe(&"k", 1);
    assert_eq!(r.rate(&"k"), 0.0);
    clock.advance(SECOND);
    assert_eq!(r.rate(&"k"), 1.0);
}

#[test]
fn concurrent_observations_in_one_interval_are_exact_and_resets_never_panic() {
    const THREADS: usize = 4;
    const PER_THREAD: isize = 5_000;
    let clock = Arc::new(ManualClock::new());
    let r = Arc::new(Rate::with_clock(SECOND, 4, 1024, 3, Arc::clone(&clock)).unwrap());
    let run = |r: &Arc<Rate<Arc<ManualClock>>>| {
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                let r = Arc::clone(r);
                std::thread::spawn(move || {
                    for _ in 0..PER_THREAD {
                        r.observe(&"hot", 1);
                        let _ = r.rate(&"hot");
                    }
                })
            })
            .collect();
        for handle in handles {
            handle.join().unwrap();
        }
    };
    run(&r);
    assert_eq!(r.observe(&"hot", 0), THREADS as isize * PER_THREAD);
    clock.advance(SECOND);
    assert_eq!(r.rate(&"hot"), (THREADS as isize * PER_THREAD) as f64);

    // Now race interval changes against observations: no panic, no lost reset.
    let ticker = {
        let clock = Arc::clone(&clock);
        std::thread::spawn(move || {
            for _ in 0..1000 {
                clock.advance(Duration::from_millis(7));
                std::thread::yield_now();
            }
        })
    };
    run(&r);
    ticker.join().unwrap();
    clock.advance(SECOND * 3);
    assert_eq!(r.rate(&"hot"), 0.0);
}
