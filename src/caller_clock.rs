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
//! [`with_wall_origin`](CallerClock::with_wall_origin): while `Date.now` is the engine's own,
//! `lib/` passes [`READ_WALL_CLOCK`] and the call reads the same wall clock here, from the same
//! origin, instead of JavaScript calling `Date.now()` (about 70 ns of a Fastify store increment's
//! ~560 on Node 20); a faked `Date.now` is still read in JavaScript and passed in.

use crate::args;
use crate::error::Result;
use keepcount_limits::clock::Clock;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// The `nowMs` that asks a clock made [`with_wall_origin`](CallerClock::with_wall_origin) to read
/// the wall clock itself (`lib/clock.ts` `READ_WALL_CLOCK`): readings are never negative.
const READ_WALL_CLOCK: f64 = -1.0;

/// 2^53 − 1: the most milliseconds a reading holds, as `lib/`'s `Stopwatch.reading` saturates.
const MAX_SAFE_MS: f64 = 9_007_199_254_740_991.0;

/// The time the current call passed in, in milliseconds (reported to the crate as "nanoseconds"),
/// or, made by [`host`](Self::host), whole milliseconds on the host's monotonic clock since then.
#[derive(Debug, Default, Clone)]
pub(crate) struct CallerClock {
    now: Arc<AtomicU64>,
    /// When a host clock was made: its readings count from here, and [`set`](Self::set) does nothing.
    host: Option<Instant>,
    /// For a caller clock on `Date.now()`: the origin (a `Date.now()` reading, milliseconds since
    /// the Unix epoch) that [`READ_WALL_CLOCK`] readings count from.
    wall_origin_ms: Option<f64>,
}

impl CallerClock {
    /// A clock that reads the host's monotonic clock (`CLOCK_MONOTONIC`, as `process.hrtime()`):
    /// whole milliseconds since now, as `lib/`'s `Stopwatch` counts them on `hostClock`.
    pub(crate) fn host() -> Self {
        Self {
            now: Arc::default(),
            host: Some(Instant::now()),
            wall_origin_ms: None,
        }
    }

    /// A caller clock that also takes [`READ_WALL_CLOCK`]: whole milliseconds from `origin_ms`
    /// (finite, else a `RangeError`) to the wall clock's present reading.
    pub(crate) fn with_wall_origin(origin_ms: f64) -> Result<Self> {
        if !origin_ms.is_finite() {
            return Err(crate::error::Failure::out_of_range(
                "The \"wallOriginMs\" argument",
                "a finite number",
            ));
        }
        Ok(Self {
            wall_origin_ms: Some(origin_ms),
            ..Self::default()
        })
    }

    /// `true` for a [`host`](Self::host) clock, which takes no readings from the caller.
    pub(crate) fn is_host(&self) -> bool {
        self.host.is_some()
    }

    /// Sets the reading to `now_ms`, which must be whole milliseconds >= 0 (else a `RangeError`),
    /// or, for a clock made [`with_wall_origin`](Self::with_wall_origin), [`READ_WALL_CLOCK`];
    /// nothing for a [`host`](Self::host) clock, whatever `now_ms` is.
    pub(crate) fn set(&self, now_ms: f64) -> Result<()> {
        if self.is_host() {
            return Ok(());
        }
        let now_ms = match self.wall_origin_ms {
            Some(origin) if now_ms == READ_WALL_CLOCK => wall_elapsed_ms(origin),
            _ => now_ms,
        };
        let now = args::millis("The \"nowMs\" argument", now_ms)?;
        // Relaxed: the value is set and read on the one JavaScript thread that owns the object.
        self.now.store(now, Ordering::Relaxed);
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

/// Whole milliseconds from `origin_ms` to the wall clock's reading, as `lib/clock.ts`
/// `wallElapsedMs` counts them from `Date.now()`: `floor(max(0, now − origin))`, at most 2^53 − 1.
/// `Date.now()` is the Unix time in whole milliseconds, rounded down (`CLOCK_REALTIME`, the clock
/// `SystemTime` reads).
fn wall_elapsed_ms(origin_ms: f64) -> f64 {
    let now_ms = match SystemTime::now().duration_since(UNIX_EPOCH) {
        // Whole milliseconds are exact in a double for another 285,000 years.
        Ok(since) => since.as_millis() as f64,
        // Before 1970: rounded down, away from the epoch.
        Err(before) => -((before.duration().as_nanos() as f64) / 1e6).ceil(),
    };
    (now_ms - origin_ms).max(0.0).floor().min(MAX_SAFE_MS)
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

    /// `Date.now()`: whole milliseconds since the Unix epoch.
    fn date_now() -> f64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("the test machine's clock is past 1970")
            .as_millis() as f64
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
        // Any other reading is the caller's, as for a plain caller clock.
        clock.set(7.0).expect("a whole reading");
        assert_eq!(clock.now_nanos(), 7);
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
    fn only_a_wall_clock_reads_itself_and_only_from_a_finite_origin() {
        assert!(CallerClock::default().set(READ_WALL_CLOCK).is_err());
        for origin in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert!(CallerClock::with_wall_origin(origin).is_err());
        }
        // A host clock ignores every reading, this one too.
        assert!(CallerClock::host().set(READ_WALL_CLOCK).is_ok());
    }
}
