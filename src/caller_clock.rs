//! [`CallerClock`]: the time JavaScript passes into each call, as a crate [`Clock`].
//!
//! The clock of a `Rate` or heavy-hitter object lives in JavaScript (`lib/` reads the user's
//! `Clock`), so every call passes `nowMs`, whole milliseconds since the object was created. The
//! crate counts its clocks in nanoseconds, but the binding gives it milliseconds in both the clock
//! and the interval: the windowed structures only compare, subtract and divide the two, so the
//! unit cancels, and intervals up to the API's 2^52 ms do not overflow the crate's `u64`
//! nanoseconds (which end at 584 years).
//!
//! Without a user clock (`lib/`'s default, `hostClock`) the object is made with
//! [`CallerClock::host`] instead: it reads the host's monotonic clock itself, in the call that
//! counts, and ignores the `nowMs` passed in. A clock read in JavaScript (`process.hrtime()`, an
//! array per call) cost about 100 ns of `HeavyHitters.incr`'s ~390 (benchmark/RESULTS.md, 2026-11-26);
//! `Instant::now()` here is one vDSO `clock_gettime`, ~20 ns.
//!
//! A caller clock on `Date.now()` (the keepcount stores', `lib/clock.ts` `dateClock`) is made
//! [`with_wall_origin`](CallerClock::with_wall_origin): it takes wall readings, whole milliseconds
//! from that origin on `Date.now()`'s clock, and counts their forward steps only. A clock stepped
//! back (a fake timer set to an earlier date, NTP, a VM snapshot restored) counts as no time
//! passing, and time counts again from the new reading at once: measured from the origin alone,
//! every window would stay open until the clock came back. While `Date.now` is the engine's own,
//! `lib/` passes NaN (`lib/clock.ts` `READ_WALL_CLOCK`) and the call reads the same wall clock here
//! instead of JavaScript calling `Date.now()` (about 70 ns of a Fastify store increment's ~560 on
//! Node 20); a faked `Date.now` is read in JavaScript and its reading passed in. One count of
//! forward steps serves both, so a fake timer installed or removed while the object counts is one
//! more step.

use crate::args;
use crate::error::Result;
use keepcount_limits::clock::Clock;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// 2^53 − 1: the most milliseconds a reading holds, as `lib/`'s `Stopwatch.reading` saturates.
const MAX_SAFE_MS: f64 = 9_007_199_254_740_991.0;

/// The time the current call passed in, in milliseconds (reported to the crate as "nanoseconds"),
/// or, made by [`host`](Self::host), whole milliseconds on the host's monotonic clock since then.
#[derive(Debug, Default, Clone)]
pub(crate) struct CallerClock {
    now: Arc<AtomicU64>,
    /// When a host clock was made: its readings count from here, and [`set`](Self::set) does nothing.
    host: Option<Instant>,
    /// For a caller clock on `Date.now()`: the origin of its wall readings and the last one.
    wall: Option<Arc<Wall>>,
}

/// A wall clock's state beside the forward steps counted so far, which [`CallerClock`]'s `now`
/// holds as whole milliseconds.
#[derive(Debug)]
struct Wall {
    /// A `Date.now()` reading, milliseconds since the Unix epoch, that readings count from.
    origin_ms: f64,
    /// The last reading (whole milliseconds from the origin, as f64 bits): 0, the origin, at first.
    last_ms: AtomicU64,
}

impl CallerClock {
    /// A clock that reads the host's monotonic clock (`CLOCK_MONOTONIC`, as `process.hrtime()`):
    /// whole milliseconds since now, as `lib/`'s `Stopwatch` counts them on `hostClock`.
    pub(crate) fn host() -> Self {
        Self {
            now: Arc::default(),
            host: Some(Instant::now()),
            wall: None,
        }
    }

    /// A caller clock on the wall clock from `origin_ms` (finite, else a `RangeError`): it takes
    /// wall readings from that origin, or NaN to read the wall clock itself (`lib/clock.ts`
    /// `READ_WALL_CLOCK`: no reading is NaN, and any NaN asks), and counts their forward steps.
    pub(crate) fn with_wall_origin(origin_ms: f64) -> Result<Self> {
        if !origin_ms.is_finite() {
            return Err(crate::error::Failure::out_of_range(
                "The \"wallOriginMs\" argument",
                "a finite number",
            ));
        }
        Ok(Self {
            wall: Some(Arc::new(Wall {
                origin_ms,
                last_ms: AtomicU64::new(0.0_f64.to_bits()),
            })),
            ..Self::default()
        })
    }

    /// `true` for a [`host`](Self::host) clock, which takes no readings from the caller.
    pub(crate) fn is_host(&self) -> bool {
        self.host.is_some()
    }

    /// Sets the reading to `now_ms`, which must be whole milliseconds >= 0 (else a `RangeError`);
    /// nothing for a [`host`](Self::host) clock, whatever `now_ms` is. A clock made
    /// [`with_wall_origin`](Self::with_wall_origin) takes a wall reading instead (see
    /// [`advance_wall`](Self::advance_wall)).
    pub(crate) fn set(&self, now_ms: f64) -> Result<()> {
        if self.is_host() {
            return Ok(());
        }
        if let Some(wall) = &self.wall {
            return self.advance_wall(wall, now_ms);
        }
        let now = args::millis("The \"nowMs\" argument", now_ms)?;
        // Relaxed: the value is set and read on the one JavaScript thread that owns the object.
        self.now.store(now, Ordering::Relaxed);
        Ok(())
    }

    /// Takes the wall reading `reading_ms` (whole milliseconds from the origin within ±(2^53 − 1),
    /// else a `RangeError` and nothing changes; NaN: read the wall clock here) and adds its rise
    /// over the last reading to the time counted, saturating at 2^53 − 1: a reading below the last
    /// counts as no time passing, and time counts again from it. The same operations on the same
    /// doubles as `lib/clock.ts` `ForwardTime`, so both backends count alike to the bit.
    fn advance_wall(&self, wall: &Wall, reading_ms: f64) -> Result<()> {
        let reading = if reading_ms.is_nan() {
            wall_reading_ms(wall.origin_ms)
        } else if reading_ms.abs() <= MAX_SAFE_MS && reading_ms.fract() == 0.0 {
            reading_ms
        } else {
            return Err(crate::error::Failure::out_of_range(
                "The \"nowMs\" argument",
                "whole milliseconds within ±(2^53 − 1), or NaN",
            ));
        };
        // Relaxed, here and below: see `set`.
        let last = f64::from_bits(wall.last_ms.swap(reading.to_bits(), Ordering::Relaxed));
        if reading > last {
            // The time counted so far: whole and at most 2^53 − 1, so exact as a double.
            let counted = self.now.load(Ordering::Relaxed) as f64;
            let counted = (counted + (reading - last)).min(MAX_SAFE_MS);
            // Whole and within [0, 2^53 − 1]: `as` is exact.
            self.now.store(counted as u64, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Sets the reading to `now_ms` (finite, >= 0, fractions kept) as true nanoseconds,
    /// `trunc(now_ms × 10^6)` saturating at `u64::MAX`, as the fallback computes it: for rates
    /// over a `SharedArrayBuffer`, whose interval word holds nanoseconds (`crate::buffer`).
    pub(crate) fn set_nanos_from_ms(&self, now_ms: f64) -> Result<()> {
        if !(now_ms >= 0.0 && now_ms.is_finite()) {
            return Err(crate::error::Failure::out_of_range(
                "The \"nowMs\" argument",
                "a finite number >= 0",
            ));
        }
        // `as` truncates toward zero and saturates at u64::MAX.
        self.now.store((now_ms * 1e6) as u64, Ordering::Relaxed);
        Ok(())
    }
}

/// The wall clock's reading from `origin_ms`, as `lib/clock.ts` `wallReadingMs` makes it from
/// `Date.now()`: `floor(now − origin)`, negative behind the origin, within ±(2^53 − 1).
/// `Date.now()` is the Unix time in whole milliseconds, rounded down (`CLOCK_REALTIME`, the clock
/// `SystemTime` reads).
fn wall_reading_ms(origin_ms: f64) -> f64 {
    let now_ms = match SystemTime::now().duration_since(UNIX_EPOCH) {
        // Whole milliseconds are exact in a double for another 285,000 years.
        Ok(since) => since.as_millis() as f64,
        // Before 1970: rounded down, away from the epoch.
        Err(before) => -((before.duration().as_nanos() as f64) / 1e6).ceil(),
    };
    // Both finite: no NaN for `clamp`, whose bounds are in order.
    (now_ms - origin_ms)
        .floor()
        .clamp(-MAX_SAFE_MS, MAX_SAFE_MS)
}

impl Clock for CallerClock {
    fn now_nanos(&self) -> u64 {
        match self.host {
            // Whole milliseconds, truncated as `Math.floor` does a stopwatch's reading; u64
            // milliseconds outlast any process.
            Some(origin) => u64::try_from(origin.elapsed().as_millis()).unwrap_or(u64::MAX),
            // Relaxed: see `set`.
            None => self.now.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `lib/clock.ts` `READ_WALL_CLOCK`.
    const READ_WALL_CLOCK: f64 = f64::NAN;

    /// `Date.now()`: whole milliseconds since the Unix epoch.
    fn date_now() -> f64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("the test machine's clock is past 1970")
            .as_millis() as f64
    }

    /// The time a wall clock counts after each of `readings` (whole ms from its origin).
    fn counted(readings: &[f64]) -> Vec<u64> {
        let clock = CallerClock::with_wall_origin(0.0).expect("a finite origin");
        readings
            .iter()
            .map(|&reading| {
                clock.set(reading).expect("a wall reading");
                clock.now_nanos()
            })
            .collect()
    }

    #[test]
    fn a_wall_clock_reads_whole_milliseconds_from_its_origin() {
        let origin = date_now() - 5_000.0;
        let clock = CallerClock::with_wall_origin(origin).expect("a finite origin");
        let lo = date_now() - origin;
        clock
            .set(READ_WALL_CLOCK)
            .expect("a wall clock reads itself");
        let hi = date_now() - origin;
        let read = clock.now_nanos() as f64;
        assert!(read >= lo && read <= hi, "{read} not in [{lo}, {hi}]");
    }

    #[test]
    fn a_wall_clock_counts_forward_steps_only() {
        // Stepped back an hour after 30 s: no time passes, and time counts again from there.
        let hour = 3_600_000.0;
        assert_eq!(
            counted(&[
                1_000.0,
                30_000.0,
                30_000.0 - hour,
                30_001.0 - hour,
                60_000.0 - hour
            ]),
            [1_000, 30_000, 30_000, 30_001, 60_000]
        );
        // A first reading behind the origin counts nothing either.
        assert_eq!(counted(&[-5.0, -3.0, 0.0]), [0, 2, 5]);
    }

    #[test]
    fn a_wall_clock_saturates_at_the_largest_safe_integer() {
        let max = MAX_SAFE_MS;
        assert_eq!(
            counted(&[max, -max, max, 0.0]),
            [
                MAX_SAFE_MS as u64,
                MAX_SAFE_MS as u64,
                MAX_SAFE_MS as u64,
                MAX_SAFE_MS as u64
            ]
        );
        assert_eq!(counted(&[-max, max]), [0, MAX_SAFE_MS as u64]);
    }

    #[test]
    fn a_wall_clock_read_behind_a_passed_reading_counts_no_time_then_time() {
        // The fake-timer case the other way round: a reading passed in an hour ahead of the wall
        // clock, then the wall clock read here, then read again later.
        let origin = date_now();
        let clock = CallerClock::with_wall_origin(origin).expect("a finite origin");
        clock.set(3_600_000.0).expect("a wall reading");
        clock
            .set(READ_WALL_CLOCK)
            .expect("a wall clock reads itself");
        assert_eq!(clock.now_nanos(), 3_600_000);
        let start = date_now() - origin;
        std::thread::sleep(std::time::Duration::from_millis(5));
        clock
            .set(READ_WALL_CLOCK)
            .expect("a wall clock reads itself");
        let step = clock.now_nanos() as f64 - 3_600_000.0;
        let most = date_now() - start;
        assert!(
            step >= 1.0 && step <= most,
            "{step} ms counted, at most {most}"
        );
    }

    #[test]
    fn a_wall_clock_behind_its_origin_reads_no_time_passed() {
        let clock = CallerClock::with_wall_origin(date_now() + 60_000.0).expect("a finite origin");
        clock
            .set(READ_WALL_CLOCK)
            .expect("a wall clock reads itself");
        assert_eq!(clock.now_nanos(), 0);
    }

    #[test]
    fn a_wall_clock_refuses_readings_that_are_not_whole_safe_milliseconds() {
        let clock = CallerClock::with_wall_origin(0.0).expect("a finite origin");
        clock.set(10.0).expect("a wall reading");
        for bad in [
            0.5,
            -0.5,
            9_007_199_254_740_992.0,
            -1e300,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ] {
            assert!(clock.set(bad).is_err(), "{bad}");
        }
        // Refused readings leave the count and the last reading as they were.
        clock.set(12.0).expect("a wall reading");
        assert_eq!(clock.now_nanos(), 12);
    }

    #[test]
    fn only_a_wall_clock_reads_itself_and_only_from_a_finite_origin() {
        assert!(CallerClock::default().set(READ_WALL_CLOCK).is_err());
        assert!(CallerClock::default().set(-1.0).is_err());
        for origin in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert!(CallerClock::with_wall_origin(origin).is_err());
        }
        // A host clock ignores every reading, this one too.
        assert!(CallerClock::host().set(READ_WALL_CLOCK).is_ok());
    }
}
