//! Property tests of the token-bucket limiter: for random sequences of clock advances and costs,
//! what is admitted never exceeds `burst + rate × elapsed`, and every `retry_after` is exact.

use std::sync::Arc;
use std::time::Duration;

use keepcount_limits::clock::ManualClock;
use keepcount_limits::limiter::{Decision, Limit, Limiter, Quota};
use proptest::prelude::*;

/// One step: advance the clock by `advance` ns, then check `cost` units; on a refusal, when
/// `probe` is set, verify the promised wait to the nanosecond.
#[derive(Debug, Clone)]
struct Step {
    advance: u64,
    cost: u64,
    probe: bool,
}

fn steps(max_cost: u64) -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(
        (
            prop_oneof![Just(0u64), 0..1_000u64, 0..3_000_000_000u64],
            0..=max_cost,
            any::<bool>(),
        )
            .prop_map(|(advance, cost, probe)| Step {
                advance,
                cost,
                probe,
            }),
        1..80,
    )
}

fn limit() -> impl Strategy<Value = Limit> {
    (
        0..2_000u64,
        prop_oneof![Just(1_000_000_000u64), 1..5_000_000_000u64],
        0..40u64,
    )
        .prop_map(|(amount, period, burst)| {
            Limit::new(amount, Duration::from_nanos(period), burst).unwrap()
        })
}

proptest! {
    #[test]
    fn admitted_never_exceeds_burst_plus_rate_times_window(limit in limit(), steps in steps(45)) {
        let clock = Arc::new(ManualClock::new());
        let limiter: Limiter<u8, _> =
            Limiter::with_clock(Quota::new(None, Some(limit)), clock.clone());
        let mut now = 0u64;
        // (time, cost) of every admitted check.
        let mut admitted: Vec<(u64, u64)> = Vec::new();
        for step in &steps {
            clock.advance(Duration::from_nanos(step.advance));
            now += step.advance;
            match limiter.check(&0, step.cost) {
                Decision::Allowed => admitted.push((now, step.cost)),
                Decision::Never => {
                    prop_assert!(step.cost > limit.burst() || limit.amount() == 0);
                }
                Decision::Refused { retry_after } => {
                    prop_assert!(step.cost <= limit.burst() && limit.amount() > 0);
                    let wait = u64::try_from(retry_after.as_nanos()).unwrap();
                    prop_assert!(wait > 0);
                    if step.probe {
                        clock.advance(Duration::from_nanos(wait - 1));
                        now += wait - 1;
                        if wait > 1 {
                            prop_assert_eq!(
                                limiter.check(&0, step.cost),
                                Decision::Refused { retry_after: Duration::from_nanos(1) }
                            );
                        }
                        clock.advance(Duration::from_nanos(1));
                        now += 1;
                        prop_assert_eq!(limiter.check(&0, step.cost), Decision::Allowed);
                        admitted.push((now, step.cost));
                    }
                }
            }
        }
        // Every window [a, b] between admitted checks: Σ cost × period ≤ burst × period
        // + amount × (b − a), all in exact integers.
        let period = limit.period().as_nanos();
        for i in 0..admitted.len() {
            let mut sum = 0u128;
            for &(t, cost) in &admitted[i..] {
                sum += u128::from(cost);
                let window = u128::from(t - admitted[i].0);
                prop_assert!(
                    sum * period <= u128::from(limit.burst()) * period
                        + u128::from(limit.amount()) * window
                );
            }
        }
    }

    #[test]
    fn refusals_never_consume(limit in limit(), overall in limit(), steps in steps(45)) {
        // Two limiters see the same steps; the second also gets extra checks that the overall
        // quota refuses. Those must leave the key's bucket as if they never happened.
        let clock = Arc::new(ManualClock::new());
        let plain: Limiter<u8, _> = Limiter::with_clock(Quota::DENY_ALL, clock.clone());
        let noisy: Limiter<u8, _> = Limiter::with_clock(Quota::DENY_ALL, clock.clone());
        let quota = Quota::new(None, Some(limit));
        plain.replace_keys([(0, quota)]).unwrap();
        noisy.replace_keys([(0, quota)]).unwrap();
        noisy.set_overall(Some(Quota::new(None, Some(overall))));
        for step in &steps {
            clock.advance(Duration::from_nanos(step.advance));
            let was_refused = !noisy.check(&0, step.cost).is_allowed();
            if was_refused {
                continue;
            }
            // Admitted by both buckets in `noisy`, so `plain` (key bucket only) must agree.
            prop_assert_eq!(plain.check(&0, step.cost), Decision::Allowed);
        }
    }
}
