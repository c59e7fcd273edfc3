//! [`CallerClock`]: the time JavaScript passes into each call, as a crate [`Clock`].
//!
//! The clock of a `Rate` or heavy-hitter object lives in JavaScript (`lib/` reads the user's
//! `Clock`), so every call passes `nowMs`, whole milliseconds since the object was created. The
//! crate counts its clocks in nanoseconds, but the binding gives it milliseconds in both the clock
//! and the interval: the windowed structures only compare, subtract and divide the two, so the
//! unit cancels, and intervals up to the API's 2^52 ms do not overflow the crate's `u64`
//! nanoseconds (which end at 584 years).

use crate::args;
use crate::error::Result;
use keepcount_limits::clock::Clock;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The time the current call passed in, in milliseconds (reported to the crate as "nanoseconds").
#[derive(Debug, Default, Clone)]
pub(crate) struct CallerClock(Arc<AtomicU64>);

impl CallerClock {
    /// Sets the reading to `now_ms`, which must be whole milliseconds >= 0 (else a `RangeError`).
    pub(crate) fn set(&self, now_ms: f64) -> Result<()> {
        let now = args::millis("The \"nowMs\" argument", now_ms)?;
        // Relaxed: the value is set and read on the one JavaScript thread that owns the object.
        self.0.store(now, Ordering::Relaxed);
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
        self.0.store((now_ms * 1e6) as u64, Ordering::Relaxed);
        Ok(())
    }
}

impl Clock for CallerClock {
    fn now_nanos(&self) -> u64 {
        // Relaxed: see `set`.
        self.0.load(Ordering::Relaxed)
    }
}
