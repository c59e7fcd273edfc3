//! Time sources for [`Rate`](crate::rate::Rate) and the token-bucket limiter.
//!
//! Everything in this crate that depends on time reads it through [`Clock`], so tests and replays
//! drive time by hand with [`ManualClock`] instead of sleeping on the real clock (pingora-limits'
//! own tests sleep for seconds). Production code uses [`MonotonicClock`], which never goes back.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A source of monotonic time, in nanoseconds since the clock's own origin.
///
/// # Thread safety
/// Clocks are shared by every thread that uses the structure reading them, so they are
/// `Send + Sync`; [`now_nanos`](Clock::now_nanos) must never return less than an earlier call on
/// any thread observed.
pub trait Clock: Send + Sync {
    /// Nanoseconds elapsed since this clock's origin.
    fn now_nanos(&self) -> u64;
}

/// The real clock, measured from when the clock was created: the CPU's time-stamp counter
/// through the `quanta` crate, scaled to nanoseconds.
///
/// Every check of a [`Limiter`](crate::limiter::Limiter) and every [`Rate`](crate::rate::Rate)
/// observation reads the clock, so its price is on the hot path: `Instant::now()` (a vDSO
/// `clock_gettime`) took about 20 ns of a 47 ns hot-key check, and more on virtual machines whose
/// clock source falls back to a system call; the counter takes a few. `quanta` calibrates the
/// counter against the OS clock once per process, and falls back to the OS clock itself where the
/// counter is not invariant across cores. Its readings are monotonic but local to the process
/// (use [`HostClock`] where processes must agree).
///
/// A `u64` of nanoseconds lasts 584 years from the origin, so the scaled reading cannot overflow
/// in practice.
#[derive(Debug, Clone)]
pub struct MonotonicClock {
    clock: quanta::Clock,
    /// The counter's raw reading at creation: readings are scaled from it in one
    /// multiply-and-shift ([`quanta::Clock::delta_as_nanos`]), where going through `Instant` and
    /// `Duration` divided by 10^9 and multiplied back on every reading (about a sixth of a
    /// hot-key check).
    origin: u64,
}

impl MonotonicClock {
    /// A clock whose origin is now. The first clock of a process calibrates the counter (a few
    /// milliseconds, once).
    pub fn new() -> Self {
        let clock = quanta::Clock::new();
        let origin = clock.raw();
        Self { clock, origin }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        // 0 for a reading at or before the origin (a counter behind on another core).
        self.clock.delta_as_nanos(self.origin, self.clock.raw())
    }
}

/// The host's monotonic clock: nanoseconds since boot (`CLOCK_MONOTONIC`), the same reading in
/// every process of the host, which is what [`SharedRate`](crate::shared::SharedRate) needs.
///
/// [`MonotonicClock`] is cheaper (the time-stamp counter, calibrated per process), but its
/// readings cannot leave their process; this clock's numbers can. It is per boot and does not
/// count time suspended. Linux time namespaces (`unshare --time`) may offset it for the
/// processes inside them: those must not share a rate with the others. On systems without
/// `clock_gettime` (Windows) it counts from the first reading in the process instead, which is
/// enough for in-process use and is why shared segments are Unix-only.
///
/// ```
/// use keepcount_limits::clock::{Clock, HostClock};
/// assert!(HostClock.now_nanos() <= HostClock.now_nanos());
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct HostClock;

impl Clock for HostClock {
    #[cfg(unix)]
    #[inline]
    fn now_nanos(&self) -> u64 {
        let mut now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid out-pointer; CLOCK_MONOTONIC exists on every Unix we build for, and
        // cannot fail with it (were it to, `now` stays 0 and time stands still).
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
        // Both fields are non-negative for this clock.
        (now.tv_sec as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(now.tv_nsec as u64)
    }

    #[cfg(not(unix))]
    fn now_nanos(&self) -> u64 {
        use std::time::Instant;
        static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        u64::try_from(ORIGIN.get_or_init(Instant::now).elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// A clock that only moves when told to: for tests, simulations and replaying recorded traffic.
///
/// ```
/// use keepcount_limits::clock::{Clock, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// assert_eq!(clock.now_nanos(), 0);
/// clock.advance(Duration::from_millis(1500));
/// assert_eq!(clock.now_nanos(), 1_500_000_000);
/// ```
#[derive(Debug, Default)]
pub struct ManualClock {
    nanos: AtomicU64,
}

impl ManualClock {
    /// A clock standing at zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves the clock forward by `by` (saturating at `u64::MAX` nanoseconds).
    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        // Relaxed: the clock carries no other data; readers only need a value that never
        // decreases, which a single atomic location guarantees in every ordering.
        let mut current = self.nanos.load(Ordering::Relaxed);
        loop {
            let next = current.saturating_add(by);
            // CAS rather than fetch_add so that saturation is exact under concurrent advances.
            match self.nanos.compare_exchange_weak(
                current,
                next,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(seen) => current = seen,
            }
        }
    }
}

impl Clock for ManualClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        self.nanos.load(Ordering::Relaxed)
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    #[inline]
    fn now_nanos(&self) -> u64 {
        (**self).now_nanos()
    }
}

impl<C: Clock + ?Sized> Clock for &C {
    #[inline]
    fn now_nanos(&self) -> u64 {
        (**self).now_nanos()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_clock_never_goes_back() {
        let clock = MonotonicClock::new();
        let mut last = clock.now_nanos();
        for _ in 0..10_000 {
            let now = clock.now_nanos();
            assert!(now >= last);
            last = now;
        }
    }

    #[test]
    fn host_clock_moves_with_real_time() {
        let clock = HostClock;
        let before = clock.now_nanos();
        std::thread::sleep(Duration::from_millis(5));
        let elapsed = clock.now_nanos() - before;
        assert!(elapsed >= 5_000_000, "{elapsed}");
    }

    #[test]
    fn manual_clock_moves_only_when_advanced() {
        let clock = ManualClock::new();
        assert_eq!(clock.now_nanos(), 0);
        clock.advance(Duration::from_nanos(5));
        clock.advance(Duration::from_secs(1));
        assert_eq!(clock.now_nanos(), 1_000_000_005);
    }

    #[test]
    fn manual_clock_saturates_instead_of_wrapping() {
        let clock = ManualClock::new();
        clock.advance(Duration::MAX);
        clock.advance(Duration::from_secs(1));
        assert_eq!(clock.now_nanos(), u64::MAX);
    }

    #[test]
    fn shared_clock_is_seen_through_arc() {
        let clock = Arc::new(ManualClock::new());
        let reader: Arc<dyn Clock> = clock.clone();
        clock.advance(Duration::from_millis(3));
        assert_eq!(reader.now_nanos(), 3_000_000);
    }
}
