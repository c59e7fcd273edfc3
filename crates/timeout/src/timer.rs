//! The timer manager: per-thread trees of shared timers swept by one clock thread.
//!
//! Users of [`timeout`](crate::timeout) and [`sleep`](crate::sleep) don't need this module; it is
//! public, as in pingora-timeout, for callers that manage their own [`TimerManager`] and for the
//! [delivery interface](crate::sink) of non-async callers.
//!
//! # Design
//! - Deadlines are rounded up to the 10 ms grid ([`RESOLUTION`]), so the timeouts a thread creates
//!   within the same tick with the same duration share one timer.
//! - Each thread inserts only into its own `BTreeMap` behind its own mutex (via `thread_local`),
//!   so registrations never contend with each other; the clock thread takes each mutex once per
//!   tick, only long enough to split off the due part.
//! - One clock thread per manager fires due timers; see `clock_thread.rs` for its lifecycle.
//!
//! # Performance
//! `register_timer` + drop of the stub: 40 ns vs pingora-timeout's 44 ns single-threaded, 62 vs
//! 88 ns per thread from two threads (`cargo bench -p keepcount-timeout`, AMD EPYC, 2 shared
//! cores, 2026-11-21; the crate README has the full table).
//!
//! # When not to use it
//! A manager owns a thread waking 100 times a second. Below about 100 timeouts a second that
//! costs more than it saves; use `tokio::time` or [`tokio_timeout`](crate::tokio_timeout).

mod clock_thread;
mod grid;
mod stub;

pub use clock_thread::{MIN_WATCHDOG_DELAY, WatchdogTooShort};
pub use grid::RESOLUTION;
pub use stub::TimerStub;

use grid::{deadline_after, floor_millis};

use crate::sink::SinkShared;
use clock_thread::{DEFAULT_WATCHDOG_DELAY, Watchdog};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use stub::Timer;
use thread_local::ThreadLocal;

/// One thread's pending timers, keyed by deadline (ms on the grid).
type TimerTree = BTreeMap<u64, Arc<Timer>>;

/// The object that holds all the timers registered to it.
///
/// Same API as pingora-timeout's `TimerManager`, plus a clock reading
/// ([`now_ms`](Self::now_ms)), a configurable watchdog and
/// [`deadline_sink`](Self::deadline_sink) for non-async callers. Unlike pingora's, a manager
/// starts its own clock thread on the first registration, and dropping the last handle on it
/// (the manager and its sinks) stops that thread within a tick.
///
/// **Keep the manager alive while you await its stubs.** A [`TimerStub`] does not hold its
/// manager: once the manager and its sinks are dropped, its pending timers never fire, and
/// awaiting their stubs waits forever (wrap that in another timeout if the manager may go away).
/// This is pingora's behaviour too, where a `TimerManager::new()` has no clock thread at all. The
/// process-wide manager behind [`timeout`](crate::timeout) and [`sleep`](crate::sleep) is never
/// dropped. Stubs do not hold the manager because that would put one shared reference count in
/// every registration and drop (the contention the per-thread trees avoid), and firing pending
/// timers when the manager drops would break "never fires early".
///
/// ```
/// use keepcount_timeout::timer::TimerManager;
/// use std::time::Duration;
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let manager = TimerManager::new();
/// let stub = manager.register_timer(Duration::from_millis(20));
/// stub.poll().await; // about 20-30 ms later
/// # });
/// ```
///
/// # Thread safety
/// `Send + Sync`; share it by reference or in an `Arc`. Registrations from different threads go
/// to different trees and never contend.
pub struct TimerManager {
    shared: Arc<Shared>,
}

/// State shared by a manager, its sinks and (weakly) its clock thread.
pub(crate) struct Shared {
    /// Origin of the manager clock.
    pub(crate) zero: Instant,
    /// Each thread's own tree; only the owner inserts, only the clock thread removes.
    trees: ThreadLocal<Mutex<TimerTree>>,
    /// Registered deadline sinks, swept after the trees each tick.
    pub(crate) sinks: Mutex<Vec<Arc<SinkShared>>>,
    pub(crate) watchdog: Watchdog,
    paused: AtomicBool,
}

impl Default for TimerManager {
    fn default() -> Self {
        Self::new()
    }
}

impl TimerManager {
    /// A manager with the default 2 s watchdog. Its clock thread starts on first registration.
    ///
    /// ```
    /// let manager = keepcount_timeout::timer::TimerManager::new();
    /// assert_eq!(manager.now_ms() / 1000, 0);
    /// ```
    pub fn new() -> Self {
        match Self::with_watchdog_delay(DEFAULT_WATCHDOG_DELAY) {
            Ok(manager) => manager,
            // DEFAULT_WATCHDOG_DELAY (2 s) is far above MIN_WATCHDOG_DELAY (50 ms).
            Err(_) => unreachable!("the default watchdog delay is valid"),
        }
    }

    /// A manager whose clock thread is restarted after `delay` without a heartbeat, instead of
    /// pingora's 2 s. Errors if `delay` is below [`MIN_WATCHDOG_DELAY`] (50 ms).
    ///
    /// ```
    /// use keepcount_timeout::timer::TimerManager;
    /// use std::time::Duration;
    ///
    /// assert!(TimerManager::with_watchdog_delay(Duration::from_millis(100)).is_ok());
    /// assert!(TimerManager::with_watchdog_delay(Duration::from_millis(10)).is_err());
    /// ```
    pub fn with_watchdog_delay(delay: Duration) -> Result<Self, WatchdogTooShort> {
        Ok(Self {
            shared: Arc::new(Shared {
                zero: Instant::now(),
                trees: ThreadLocal::new(),
                sinks: Mutex::new(Vec::new()),
                watchdog: Watchdog::new(delay)?,
                paused: AtomicBool::new(false),
            }),
        })
    }

    /// Registers a timer firing `duration` from now, rounded up to the 10 ms grid.
    ///
    /// The timer never fires before `duration` has passed and normally fires within one tick
    /// plus scheduling delay after its deadline. Registrations on one thread whose deadlines
    /// round to the same grid point share one timer. While paused for fork the returned stub is
    /// already fired, as in pingora.
    ///
    /// ```
    /// use keepcount_timeout::timer::TimerManager;
    /// use std::time::Duration;
    ///
    /// let manager = TimerManager::new();
    /// let stub = manager.register_timer(Duration::from_secs(1));
    /// drop(stub); // cancelling is dropping
    /// ```
    ///
    /// # Performance
    /// One clock read, one uncontended mutex, one `BTreeMap` lookup and one `Arc` clone; see the
    /// module docs for measured numbers.
    pub fn register_timer(&self, duration: Duration) -> TimerStub {
        if self.shared.is_paused() {
            return TimerStub(Timer::fired());
        }
        let deadline = self.shared.deadline_after(duration);
        let mut tree = self.shared.trees.get_or(Default::default).lock();
        // No other thread inserts into this tree (the clock thread only removes), so there is
        // no check-then-insert race: this lookup is the whole story.
        let timer = tree.entry(deadline).or_default();
        TimerStub(Arc::clone(timer))
    }

    /// The manager clock: whole milliseconds since the manager was created.
    ///
    /// Deadlines ([`Deadline::as_millis`](crate::sink::Deadline::as_millis)) are on the same
    /// clock, so `deadline - now_ms()` is the time left.
    ///
    /// ```
    /// let manager = keepcount_timeout::timer::TimerManager::new();
    /// let a = manager.now_ms();
    /// assert!(manager.now_ms() >= a);
    /// ```
    pub fn now_ms(&self) -> u64 {
        self.shared.now_ms()
    }

    /// The manager clock before it is floored to [`now_ms`](Self::now_ms): the time since the
    /// manager was created, whose whole multiples of 10 ms are its grid points. A caller that
    /// rounds deadlines itself onto that grid (the Node binding's JavaScript side, on its own
    /// clock) aligns with it through this reading, so a deadline is not rounded up twice.
    ///
    /// ```
    /// let manager = keepcount_timeout::timer::TimerManager::new();
    /// assert!(manager.elapsed().as_millis() as u64 >= manager.now_ms());
    /// ```
    pub fn elapsed(&self) -> Duration {
        self.shared.zero.elapsed()
    }

    /// Pauses the timer for `fork()`.
    ///
    /// Because locks held across `fork()` are undefined behaviour, this stops the clock thread
    /// from taking any lock and waits two ticks for everyone to leave theirs. Until
    /// [`unpause`](Self::unpause), timers registered complete immediately (their stubs are
    /// already fired), as in pingora; deadlines registered with a [`DeadlineSink`] wait and are
    /// delivered by the first tick after `unpause` (see its guarantees).
    ///
    /// [`DeadlineSink`]: crate::sink::DeadlineSink
    ///
    /// Call it right before `fork()`.
    pub fn pause_for_fork(&self) {
        // Relaxed: the flag guards no data; the grace sleep below, not memory ordering, is what
        // lets in-flight registrations and the current tick finish.
        self.shared.paused.store(true, Ordering::Relaxed);
        std::thread::sleep(RESOLUTION * 2);
    }

    /// Unpauses the timer after `fork()`; call it right after `fork()` in parent and child.
    ///
    /// In the child, where no clock thread survived the fork, the next registration starts one
    /// immediately (pingora's child waits for the 2 s watchdog).
    pub fn unpause(&self) {
        self.shared.watchdog.forget_if_forked();
        // Relaxed: see `pause_for_fork`.
        self.shared.paused.store(false, Ordering::Relaxed);
        // Deadlines registered with a sink while paused wait for a tick; if none was running (the
        // first registration came during the pause, or this is a fork child), start one now.
        self.shared.ensure_clock();
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
}

impl std::fmt::Debug for TimerManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimerManager")
            .field("now_ms", &self.now_ms())
            .field("paused", &self.shared.is_paused())
            .finish_non_exhaustive()
    }
}

impl Shared {
    pub(crate) fn now_ms(&self) -> u64 {
        floor_millis(grid::saturating_nanos(self.zero.elapsed()))
    }

    pub(crate) fn is_paused(&self) -> bool {
        // Relaxed: see `TimerManager::pause_for_fork`.
        self.paused.load(Ordering::Relaxed)
    }

    /// The grid deadline `duration` from now, making sure a clock thread will fire it.
    #[inline]
    pub(crate) fn deadline_after(self: &Arc<Self>, duration: Duration) -> u64 {
        let now = grid::saturating_nanos(self.zero.elapsed());
        self.watchdog.ensure_running(self, floor_millis(now));
        deadline_after(now, duration)
    }

    /// Starts a clock thread if none is running (and the manager is not paused).
    pub(crate) fn ensure_clock(self: &Arc<Self>) {
        let now = grid::saturating_nanos(self.zero.elapsed());
        self.watchdog.ensure_running(self, floor_millis(now));
    }

    /// One tick of the clock thread: fire every timer due at `now_ms`, then deliver sinks.
    pub(crate) fn tick(&self, now_ms: u64, scratch: &mut Vec<Arc<SinkShared>>) {
        for tree in self.trees.iter() {
            let due = {
                let mut tree = tree.lock();
                match tree.first_key_value() {
                    Some((&first, _)) if first <= now_ms => {}
                    _ => continue,
                }
                // split_off keeps keys < now_ms + 1 (the due ones) in `tree`.
                let later = tree.split_off(&now_ms.saturating_add(1));
                std::mem::replace(&mut *tree, later)
            };
            // Fire outside the lock, so waking tasks never delays the owner's registrations.
            for timer in due.into_values() {
                timer.fire();
            }
        }
        crate::sink::deliver(self, now_ms, scratch);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    /// How late a timer may be here: catches one that never fires or waits for the 2 s
    /// watchdog. Lateness is not a guarantee (`register_timer` promises "normally within a
    /// tick"), and on a loaded 2-core CI machine a wake-up came 430–490 ms late.
    const SLACK: Duration = Duration::from_secs(2);

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .expect("runtime")
    }

    #[test]
    fn same_deadline_on_one_thread_shares_one_timer() {
        let manager = TimerManager::new();
        // Retry in the rare case the two registrations straddle a grid point.
        let shared = (0..10).any(|_| {
            let a = manager.register_timer(Duration::from_secs(1));
            let b = manager.register_timer(Duration::from_secs(1));
            Arc::ptr_eq(&a.0, &b.0)
        });
        assert!(shared);
        let far = manager.register_timer(Duration::from_secs(5));
        let near = manager.register_timer(Duration::from_secs(1));
        assert!(!Arc::ptr_eq(&far.0, &near.0));
    }

    #[test]
    fn other_threads_get_their_own_timers() {
        let manager = TimerManager::new();
        let here = manager.register_timer(Duration::from_secs(10));
        let there = std::thread::scope(|s| {
            s.spawn(|| manager.register_timer(Duration::from_secs(10)))
                .join()
                .expect("thread")
        });
        assert!(!Arc::ptr_eq(&here.0, &there.0));
    }

    #[test]
    fn a_timer_fires_after_its_duration_within_a_tick() {
        let manager = TimerManager::new();
        runtime().block_on(async {
            let start = Instant::now();
            let t1 = manager.register_timer(Duration::from_millis(30));
            let t2 = manager.register_timer(Duration::from_millis(30));
            let shared = Arc::ptr_eq(&t1.0, &t2.0);
            t1.poll().await;
            let waited = start.elapsed();
            assert!(waited >= Duration::from_millis(30), "{waited:?}");
            assert!(waited < Duration::from_millis(40) + SLACK, "{waited:?}");
            // t2 fired with t1 when they share a timer (unless the two registrations straddled
            // a grid point): no extra wait, whatever the scheduler does meanwhile.
            if shared {
                assert!(t2.0.has_fired());
            }
            t2.poll().await;
        });
    }

    #[test]
    fn never_fires_early_over_random_durations() {
        let manager = Arc::new(TimerManager::new());
        let mut rng = rand::rng();
        let durations: Vec<Duration> = (0..300)
            .map(|_| Duration::from_micros(rng.random_range(0..60_000)))
            .collect();
        runtime().block_on(async {
            let tasks: Vec<_> = durations
                .into_iter()
                .map(|d| {
                    let manager = Arc::clone(&manager);
                    tokio::spawn(async move {
                        let start = Instant::now();
                        manager.register_timer(d).poll().await;
                        (d, start.elapsed())
                    })
                })
                .collect();
            for task in tasks {
                let (asked, waited) = task.await.expect("task");
                assert!(
                    waited >= asked,
                    "fired early: asked {asked:?}, waited {waited:?}"
                );
                assert!(
                    waited < asked + RESOLUTION + SLACK,
                    "late: {asked:?} {waited:?}"
                );
            }
        });
    }

    #[test]
    fn timers_from_many_threads_all_fire_on_time() {
        // Stress: 4 threads register interleaved timers while the clock thread sweeps.
        let manager = TimerManager::new();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .build()
                        .expect("runtime");
                    let mut rng = rand::rng();
                    let mut stubs = Vec::new();
                    for _ in 0..2_000 {
                        let d = Duration::from_micros(rng.random_range(0..40_000));
                        stubs.push((Instant::now(), d, manager.register_timer(d)));
                    }
                    rt.block_on(async {
                        for (start, d, stub) in stubs {
                            stub.poll().await;
                            assert!(start.elapsed() >= d);
                        }
                    });
                });
            }
        });
    }

    #[test]
    fn the_clock_thread_starts_on_first_registration() {
        let manager = TimerManager::new();
        assert!(!manager.shared.watchdog.looks_alive(manager.now_ms()));
        drop(manager.register_timer(Duration::from_secs(1)));
        assert!(manager.shared.watchdog.looks_alive(manager.now_ms()));
    }

    #[test]
    fn a_stale_watchdog_restarts_the_clock_thread() {
        // Long enough that a preempted test thread still registers the orphan within the delay
        // of the stopped thread's last beat.
        let delay = Duration::from_millis(300);
        let manager = TimerManager::with_watchdog_delay(delay).expect("valid delay");
        runtime().block_on(async {
            manager.register_timer(Duration::ZERO).poll().await;
            manager.shared.watchdog.stop_thread();
            // The registration right after the stop sees a fresh heartbeat: nothing restarts
            // the clock, and this timer waits.
            let orphan = manager.register_timer(Duration::from_millis(10));
            std::thread::sleep(delay + Duration::from_millis(100));
            assert!(!manager.shared.watchdog.looks_alive(manager.now_ms()));
            // This registration finds the heartbeat stale and starts a new thread, which also
            // fires the orphan.
            let start = Instant::now();
            let rescuer = manager.register_timer(Duration::from_millis(10));
            orphan.poll().await;
            rescuer.poll().await;
            assert!(start.elapsed() < Duration::from_millis(20) + SLACK);
            assert!(manager.shared.watchdog.looks_alive(manager.now_ms()));
        });
    }

    #[test]
    fn stubs_of_a_dropped_manager_never_fire() {
        let manager = TimerManager::new();
        // Long enough not to fire before the drop even if this thread is preempted meanwhile.
        let stub = manager.register_timer(Duration::from_millis(200));
        drop(manager);
        // Well past the deadline and its tick: a live manager would have fired it by now.
        std::thread::sleep(Duration::from_millis(400));
        assert!(!stub.0.has_fired());
        let waited = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime")
            .block_on(async { tokio::time::timeout(Duration::from_millis(50), stub.poll()).await });
        assert!(waited.is_err(), "the stub of a dropped manager completed");
    }

    #[test]
    fn the_default_watchdog_is_pingoras_two_seconds() {
        assert_eq!(DEFAULT_WATCHDOG_DELAY, Duration::from_secs(2));
        assert!(TimerManager::with_watchdog_delay(MIN_WATCHDOG_DELAY).is_ok());
        let err = TimerManager::with_watchdog_delay(MIN_WATCHDOG_DELAY - Duration::from_nanos(1));
        assert!(err.is_err());
    }

    #[test]
    fn paused_registrations_complete_at_once_and_older_timers_survive() {
        let manager = TimerManager::new();
        runtime().block_on(async {
            let start = Instant::now();
            let before = manager.register_timer(Duration::from_millis(60));
            manager.pause_for_fork();
            let during = manager.register_timer(Duration::from_secs(100));
            during.poll().await;
            manager.unpause();
            before.poll().await;
            let waited = start.elapsed();
            assert!(waited >= Duration::from_millis(60), "{waited:?}");
            assert!(waited < Duration::from_millis(70) + SLACK, "{waited:?}");
        });
    }

    #[test]
    fn nothing_fires_while_paused() {
        let manager = TimerManager::new();
        // Long enough not to fire normally even if this thread is preempted before the pause.
        let stub = manager.register_timer(Duration::from_millis(300));
        manager.pause_for_fork();
        let during = manager.register_timer(Duration::from_secs(100));
        assert!(during.0.has_fired());
        std::thread::sleep(Duration::from_millis(350));
        // The deadline has passed, but a paused clock thread takes no locks and fires nothing.
        assert!(!stub.0.has_fired());
        manager.unpause();
        runtime().block_on(stub.poll());
    }
}
