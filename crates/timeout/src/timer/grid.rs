//! The 10 ms grid every deadline is rounded up to.
//!
//! Deadlines are whole milliseconds since the manager's origin, always a multiple of
//! [`RESOLUTION`]. Rounding goes *up* from the exact nanosecond end of the wait, so a deadline is
//! never before `registration instant + duration`, and the clock thread compares it with the
//! *floored* current millisecond, so it never fires early either.
//!
//! All arithmetic is on `u64` nanoseconds: `u128` division (what pingora's `as_millis` and
//! `round_to` compile to) is a libcall costing tens of nanoseconds on the registration path.

use std::time::Duration;

/// Milliseconds between two ticks of the clock thread, and the spacing of deadlines.
///
/// 10 ms is pingora's choice: coarse enough that the timeouts of a busy server share timers
/// (every timeout created within the same 10 ms with the same duration shares one), fine enough
/// that no network timeout cares about the rounding.
pub(crate) const RESOLUTION_MS: u64 = 10;

/// The tick of the clock thread: deadlines are rounded up to a multiple of this.
///
/// ```
/// assert_eq!(keepcount_timeout::timer::RESOLUTION.as_millis(), 10);
/// ```
pub const RESOLUTION: std::time::Duration = Duration::from_millis(RESOLUTION_MS);

/// Nanoseconds in one tick: `10 ms × 1_000_000 ns/ms`.
const NANOS_PER_TICK: u64 = RESOLUTION_MS * 1_000_000;

/// `duration` in nanoseconds, saturating at `u64::MAX` (584 years: "never" for a timer).
#[inline]
pub(crate) fn saturating_nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// The first grid point (ms since origin) at or after `now_nanos + duration`.
///
/// Saturates rather than overflowing: `Duration::MAX` gives a deadline 584 years away.
#[inline]
pub(crate) fn deadline_after(now_nanos: u64, duration: Duration) -> u64 {
    let end = now_nanos.saturating_add(saturating_nanos(duration));
    // `div_ceil` by a constant compiles to a multiply-high; the product cannot overflow because
    // `u64::MAX / NANOS_PER_TICK * RESOLUTION_MS` is about 1.8e12.
    end.div_ceil(NANOS_PER_TICK) * RESOLUTION_MS
}

/// Whole milliseconds in `nanos`, floored: the clock reading deadlines are compared with.
#[inline]
pub(crate) fn floor_millis(nanos: u64) -> u64 {
    nanos / 1_000_000
}

/// The next grid point strictly after `now_ms`: when the clock thread should wake next.
#[inline]
pub(crate) fn next_tick_after(now_ms: u64) -> u64 {
    (now_ms / RESOLUTION_MS).saturating_add(1) * RESOLUTION_MS
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn rounds_up_to_the_next_grid_point() {
        // pingora's round_to cases: 30 -> 30, 31 -> 40, 29 -> 30.
        assert_eq!(deadline_after(0, Duration::from_millis(30)), 30);
        assert_eq!(deadline_after(0, Duration::from_millis(31)), 40);
        assert_eq!(deadline_after(0, Duration::from_millis(29)), 30);
        assert_eq!(deadline_after(128 * MS, Duration::ZERO), 130);
    }

    #[test]
    fn zero_at_origin_does_not_underflow() {
        // pingora computes `raw - 1` and panics (debug) or wraps (release) here.
        assert_eq!(deadline_after(0, Duration::ZERO), 0);
    }

    #[test]
    fn a_sub_millisecond_remainder_still_rounds_up() {
        // 10.5 ms + 9.6 ms = 20.1 ms: flooring to 20 ms first (as pingora does) would fire
        // 0.1 ms early; the exact end rounds to 30.
        let now = 10 * MS + MS / 2;
        let d = Duration::from_micros(9_600);
        assert_eq!(deadline_after(now, d), 30);
        assert!(deadline_after(now, d) * MS >= now + 9_600_000);
    }

    #[test]
    fn huge_durations_saturate_instead_of_panicking() {
        let d = deadline_after(u64::MAX, Duration::MAX);
        assert_eq!(d % RESOLUTION_MS, 0);
        assert!(d >= u64::MAX / MS);
    }

    #[test]
    fn deadlines_are_never_before_the_exact_end() {
        for now in (0..50 * MS).step_by(333_333) {
            for micros in (0..40_000).step_by(777) {
                let d = Duration::from_micros(micros);
                let deadline = deadline_after(now, d);
                assert_eq!(deadline % RESOLUTION_MS, 0);
                assert!(deadline * MS >= now + micros * 1_000);
                assert!(deadline * MS < now + micros * 1_000 + NANOS_PER_TICK);
            }
        }
    }

    #[test]
    fn next_tick_is_strictly_later() {
        assert_eq!(next_tick_after(0), 10);
        assert_eq!(next_tick_after(9), 10);
        assert_eq!(next_tick_after(10), 20);
        assert_eq!(floor_millis(19_999_999), 19);
    }
}
