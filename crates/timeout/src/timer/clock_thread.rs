//! The clock thread that fires due timers every tick, and the watchdog that (re)starts it.
//!
//! The thread is a detached `std` thread holding only a [`Weak`] reference to its manager: it
//! never keeps the process alive (the process exits when `main` returns, whatever it is doing)
//! and it exits at its next tick once the manager is dropped.
//!
//! It is started lazily by the first registration and restarted by any registration that finds
//! its heartbeat older than the watchdog delay (2 s by default, as pingora): it may have died, or
//! it does not exist because this process is a `fork()` child. Each thread carries a generation
//! number and exits as soon as a newer one has been started, so a thread that was merely stalled
//! (SIGSTOP, a suspended VM) does not keep running beside its replacement, as pingora's does.
//!
//! Rather than sleeping a fixed 10 ms, the thread sleeps until just past the next grid point, so
//! due timers fire about a scheduling delay after their deadline instead of up to a tick later.

use super::Shared;
use super::grid::{RESOLUTION, RESOLUTION_MS, next_tick_after};
use std::fmt;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// Name of every clock thread (Linux truncates thread names to 15 bytes; this is 15).
pub(crate) const THREAD_NAME: &str = "keepcount-clock";

/// Heartbeat value meaning "no clock thread is known to run": the next registration starts one.
const NEVER: u64 = u64::MAX;

/// pingora's watchdog delay: a clock thread silent for this long is considered dead.
pub(crate) const DEFAULT_WATCHDOG_DELAY: Duration = Duration::from_secs(2);

/// The shortest accepted watchdog delay: 5 ticks.
///
/// A live clock thread beats every 10 ms; missing five beats in a row is far outside normal
/// scheduling jitter, so a shorter delay would mostly replace healthy threads.
pub const MIN_WATCHDOG_DELAY: Duration = Duration::from_millis(5 * RESOLUTION_MS);

/// The error of [`TimerManager::with_watchdog_delay`](super::TimerManager::with_watchdog_delay)
/// when the delay is shorter than [`MIN_WATCHDOG_DELAY`].
///
/// ```
/// use keepcount_timeout::timer::TimerManager;
/// use std::time::Duration;
///
/// let err = TimerManager::with_watchdog_delay(Duration::from_millis(1)).unwrap_err();
/// assert_eq!(err.to_string(), "watchdog delay 1ms is shorter than the minimum 50ms");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchdogTooShort {
    requested: Duration,
}

impl fmt::Display for WatchdogTooShort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "watchdog delay {:?} is shorter than the minimum {:?}",
            self.requested, MIN_WATCHDOG_DELAY
        )
    }
}

impl std::error::Error for WatchdogTooShort {}

/// Liveness and identity of the current clock thread.
pub(crate) struct Watchdog {
    /// Manager-clock ms of the thread's last beat, or [`NEVER`].
    heartbeat_ms: AtomicU64,
    /// Silence after which the thread is replaced.
    delay_ms: u64,
    /// Generation of the newest thread started; older threads exit when they see it changed.
    generation: AtomicU64,
    /// Process that started the newest thread: a different pid means we are a fork child.
    pid: AtomicU32,
}

impl Watchdog {
    /// A watchdog with no thread yet, or the error if `delay` is below [`MIN_WATCHDOG_DELAY`].
    pub(crate) fn new(delay: Duration) -> Result<Self, WatchdogTooShort> {
        if delay < MIN_WATCHDOG_DELAY {
            return Err(WatchdogTooShort { requested: delay });
        }
        Ok(Self {
            heartbeat_ms: AtomicU64::new(NEVER),
            delay_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
            generation: AtomicU64::new(0),
            pid: AtomicU32::new(0),
        })
    }

    /// Starts a clock thread for `shared` unless one beat recently. The hot path is one load.
    #[inline]
    pub(crate) fn ensure_running(&self, shared: &Arc<Shared>, now_ms: u64) {
        // Relaxed: the heartbeat guards no data; a stale read at worst sends us to `restart`,
        // whose CAS decides, or skips a restart the next registration will do.
        let beat = self.heartbeat_ms.load(Ordering::Relaxed);
        if beat != NEVER && now_ms.saturating_sub(beat) < self.delay_ms {
            return;
        }
        self.restart(shared, beat, now_ms);
    }

    #[cold]
    fn restart(&self, shared: &Arc<Shared>, beat: u64, now_ms: u64) {
        if shared.is_paused() {
            // Never start threads between pause_for_fork() and fork().
            return;
        }
        // CAS so that exactly one of the registrations that saw the same stale beat starts a
        // thread; the winner's beat (`now_ms`) makes the others see a live clock. Relaxed: the
        // new thread gets everything it needs by value through `spawn`, which synchronizes.
        if self
            .heartbeat_ms
            .compare_exchange(beat, now_ms, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        // Relaxed: only the CAS winner writes; older threads read it at their next tick, and
        // reading it late only lets a stalled thread run one tick longer.
        let generation = self
            .generation
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_add(1);
        self.pid.store(std::process::id(), Ordering::Relaxed);
        let manager = Arc::downgrade(shared);
        let zero = shared.zero;
        let spawned = std::thread::Builder::new()
            .name(THREAD_NAME.into())
            .spawn(move || run(&manager, zero, generation));
        if spawned.is_err() {
            // Out of threads: let the next registration try again rather than panic.
            self.heartbeat_ms.store(NEVER, Ordering::Relaxed);
        }
    }

    /// Called by `unpause`: in a fork child no clock thread exists (threads do not survive
    /// `fork()`), so forget the copied heartbeat and let the next registration start one at once
    /// instead of after the watchdog delay.
    pub(crate) fn forget_if_forked(&self) {
        if self.pid.load(Ordering::Relaxed) != std::process::id() {
            self.heartbeat_ms.store(NEVER, Ordering::Relaxed);
        }
    }

    fn is_current(&self, generation: u64) -> bool {
        self.generation.load(Ordering::Relaxed) == generation
    }

    fn beat(&self, now_ms: u64) {
        self.heartbeat_ms.store(now_ms, Ordering::Relaxed);
    }

    /// Test hook: makes the running clock thread exit at its next tick, as if it had died.
    #[cfg(test)]
    pub(crate) fn stop_thread(&self) {
        self.generation.fetch_add(1, Ordering::Relaxed);
    }

    /// Test hook: whether the heartbeat is fresh at `now_ms`.
    #[cfg(test)]
    pub(crate) fn looks_alive(&self, now_ms: u64) -> bool {
        let beat = self.heartbeat_ms.load(Ordering::Relaxed);
        beat != NEVER && now_ms.saturating_sub(beat) < self.delay_ms
    }
}

/// The clock thread's loop: beat, fire what is due, sleep until the next grid point.
fn run(manager: &Weak<Shared>, zero: Instant, generation: u64) {
    let mut scratch = Vec::new();
    loop {
        let next_tick_ms = {
            // Hold the manager only during the tick, so dropping it never waits for us.
            let Some(shared) = manager.upgrade() else {
                return;
            };
            if !shared.watchdog.is_current(generation) {
                return;
            }
            let now_ms = shared.now_ms();
            shared.watchdog.beat(now_ms);
            if !shared.is_paused() {
                shared.tick(now_ms, &mut scratch);
            }
            next_tick_after(now_ms)
        };
        let sleep = zero
            .checked_add(Duration::from_millis(next_tick_ms))
            .map_or(RESOLUTION, |wake| {
                wake.saturating_duration_since(Instant::now())
            });
        std::thread::sleep(sleep);
    }
}
