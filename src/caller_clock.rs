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

use crate::args;
use crate::error::Result;
use keepcount_limits::clock::Clock;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// The time the current call passed in, in milliseconds (reported to the crate as "nanoseconds"),
/// or, made by [`host`](Self::host), whole milliseconds on the host's monotonic clock since then.
#[derive(Debug, Default, Clone)]
pub(crate) struct CallerClock {
    now: Arc<AtomicU64>,
    /// When a host clock was made: its readings count from here, and [`set`](Self::set) does nothing.
    host: Option<Instant>,
}

impl CallerClock {
    /// A clock that reads the host's monotonic clock (`CLOCK_MONOTONIC`, as `process.hrtime()`):
    /// whole milliseconds since now, as `lib/`'s `Stopwatch` counts them on `hostClock`.
    pub(crate) fn host() -> Self {
        Self {
            now: Arc::default(),
            host: Some(Instant::now()),
        }
    }

    /// `true` for a [`host`](Self::host) clock, which takes no readings from the caller.
    pub(crate) fn is_host(&self) -> bool {
        self.host.is_some()
    }

    /// Sets the reading to `now_ms`, which must be whole milliseconds >= 0 (else a `RangeError`);
    /// nothing for a [`host`](Self::host) clock, whatever `now_ms` is.
    pub(crate) fn set(&self, now_ms: f64) -> Result<()> {
        if self.is_host() {
            return Ok(());
        }
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
