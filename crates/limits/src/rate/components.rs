//! What a rate function is given, [`RateComponents`], and the sliding-window estimate
//! pingora-limits ships, [`PROPORTIONAL_RATE_ESTIMATE_CALC_FN`]: the seam between
//! [`Rate::rate_with`](super::Rate::rate_with) and the functions callers pass it.

use std::time::Duration;

/// What a rate function gets: the counts of the current (partial) and previous (completed)
/// intervals, the interval, and how far into the current interval the sample was taken.
///
/// E.g. with a 10 s interval, sampled 2 s into the current interval,
/// `current_interval_fraction` is `0.2`.
///
/// ```
/// use keepcount_limits::rate::{Rate, RateComponents};
/// use std::time::Duration;
/// let rate = Rate::new(Duration::from_secs(1));
/// let parts: RateComponents = rate.rate_with(&"k", |parts| parts);
/// assert_eq!(parts.interval, Duration::from_secs(1));
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct RateComponents {
    /// Events counted in the previous, completed interval (0 once two intervals passed idle).
    pub prev_samples: isize,
    /// Events counted so far in the current interval.
    pub curr_samples: isize,
    /// The interval's length.
    pub interval: Duration,
    /// Elapsed fraction of the current interval, in `[0, 1)`.
    pub current_interval_fraction: f64,
}

/// The sliding-window estimate of events per second over the last `interval`: the previous
/// interval's count weighted by the part of it still inside the window, plus the current count,
/// divided by the interval in seconds. See
/// <https://blog.cloudflare.com/counting-things-a-lot-of-different-things/>.
///
/// ```
/// use keepcount_limits::clock::ManualClock;
/// use keepcount_limits::rate::{Rate, PROPORTIONAL_RATE_ESTIMATE_CALC_FN};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let rate = Rate::with_clock(Duration::from_secs(1), 4, 1024, 1, &clock).unwrap();
/// rate.observe(&"k", 10);
/// clock.advance(Duration::from_millis(1000));
/// rate.observe(&"k", 4);
/// clock.advance(Duration::from_millis(250));
/// // 10 × (1 − 0.25) + 4
/// assert_eq!(rate.rate_with(&"k", PROPORTIONAL_RATE_ESTIMATE_CALC_FN), 11.5);
/// ```
pub static PROPORTIONAL_RATE_ESTIMATE_CALC_FN: fn(RateComponents) -> f64 =
    |parts: RateComponents| {
        let prev = parts.prev_samples as f64;
        let curr = parts.curr_samples as f64;
        let weighted = prev * (1.0 - parts.current_interval_fraction) + curr;
        weighted / parts.interval.as_secs_f64()
    };
