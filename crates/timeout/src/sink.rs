//! Deadline delivery for callers that are not tokio tasks.
//!
//! A [`DeadlineSink`] belongs to one consumer thread (in the Node binding: the main thread or
//! one `worker_thread`). The thread registers deadlines in its sink; once per tick the clock
//! thread moves the sink's due deadlines into an *expired batch* and, if that batch was empty,
//! calls the sink's `notify` callback once. The callback only has to wake the owning thread
//! (the binding calls a napi `ThreadsafeFunction`), which then takes the whole batch with
//! [`drain_expired`](DeadlineSink::drain_expired) on its own thread.
//!
//! # Why this shape
//! - **One callback per batch, not per deadline**: crossing into a JavaScript thread costs
//!   microseconds; a tick that expires a thousand timers should cost one crossing. Notifying
//!   only on the empty → non-empty transition also bounds the queue of pending wake-ups to one
//!   per sink, however long the owner takes to drain.
//! - **Deadlines, not callbacks, cross threads**: the sink stores `u64` grid deadlines. The
//!   owner keeps its own map from deadline to waiters, so no user object is ever touched off its
//!   thread, and registering a deadline that is already pending is one set lookup.
//! - **The sink owns its set**: the clock thread never touches another sink's data, sinks are
//!   independent across threads, and dropping the sink (worker termination) drops everything.
//!
//! # When not to use it
//! Inside async Rust, use [`timeout`](crate::timeout) or [`TimerStub`](crate::timer::TimerStub):
//! they wake tasks directly. For a handful of timers per second a plain OS timer per deadline
//! is simpler than a 100 Hz clock thread.
//!
//! ```
//! use keepcount_timeout::timer::TimerManager;
//! use std::sync::mpsc;
//! use std::time::Duration;
//!
//! let manager = TimerManager::new();
//! let (wake, woken) = mpsc::sync_channel(1);
//! let sink = manager.deadline_sink(move || {
//!     let _ = wake.try_send(()); // only wake the owner; never block here
//! });
//! let deadline = sink.register(Duration::from_millis(20));
//! assert_eq!(sink.register(Duration::from_millis(20)), deadline); // usually the same tick
//! woken.recv().unwrap();
//! assert!(sink.drain_expired().contains(&deadline));
//! assert!(sink.now_ms() >= deadline.as_millis());
//! ```

use crate::timer::{Shared, TimerManager};
use parking_lot::Mutex;
use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// The callback a sink calls, on the clock thread, when its expired batch becomes non-empty.
type Notify = Box<dyn Fn() + Send + Sync>;

/// A deadline on a manager's 10 ms grid: whole milliseconds on the manager clock
/// ([`TimerManager::now_ms`]), always a multiple of 10.
///
/// Deadlines registered on one sink that round to the same grid point are equal, so it doubles
/// as the id under which the owner files its waiters.
///
/// ```
/// use keepcount_timeout::sink::Deadline;
///
/// let d = Deadline::from_millis(120);
/// assert_eq!(d.as_millis(), 120);
/// assert_eq!(u64::from(d), 120);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Deadline(u64);

impl Deadline {
    /// The deadline at `ms` on the manager clock (for handing back one received earlier; values
    /// off the grid are never registered, so [`cancel`](DeadlineSink::cancel) ignores them).
    pub const fn from_millis(ms: u64) -> Self {
        Self(ms)
    }

    /// Milliseconds since the manager's origin, on the same clock as [`TimerManager::now_ms`].
    pub const fn as_millis(self) -> u64 {
        self.0
    }
}

impl From<Deadline> for u64 {
    fn from(deadline: Deadline) -> Self {
        deadline.0
    }
}

/// State of one sink shared with the clock thread.
pub(crate) struct SinkShared {
    state: Mutex<SinkState>,
    /// `None` once the sink is dropped; held by the clock thread while calling it, which is how
    /// `Drop` waits out a call in progress.
    notify: Mutex<Option<Notify>>,
}

#[derive(Default)]
struct SinkState {
    /// Deadlines not yet due.
    pending: BTreeSet<u64>,
    /// Deadlines due but not yet drained; disjoint from `pending`.
    expired: Vec<u64>,
}

impl SinkShared {
    /// Moves the deadlines due at `now_ms` into the batch; notifies if the batch was empty.
    fn expire(&self, now_ms: u64) {
        let became_ready = {
            let mut state = self.state.lock();
            match state.pending.first() {
                Some(&first) if first <= now_ms => {}
                _ => return,
            }
            // split_off keeps the keys < now_ms + 1 (the due ones) in `pending`.
            let later = state.pending.split_off(&now_ms.saturating_add(1));
            let due = std::mem::replace(&mut state.pending, later);
            let was_empty = state.expired.is_empty();
            state.expired.extend(due);
            was_empty
        };
        if became_ready {
            self.call_notify();
        }
    }

    fn call_notify(&self) {
        // Called without the state lock, so the callback may call any sink method. Holding the
        // notify lock during the call is what lets `Drop` guarantee no call after it returns.
        if let Some(notify) = self.notify.lock().as_ref() {
            notify();
        }
    }
}

/// One tick of delivery: expire every registered sink.
pub(crate) fn deliver(manager: &Shared, now_ms: u64, scratch: &mut Vec<Arc<SinkShared>>) {
    // Copy the list (a few `Arc`s, into a buffer reused every tick) so that creating or dropping
    // sinks never waits for a callback.
    scratch.extend(manager.sinks.lock().iter().cloned());
    for sink in scratch.drain(..) {
        sink.expire(now_ms);
    }
}

/// A set of pending deadlines owned by one consumer thread, delivered in batches per tick.
///
/// Created by [`TimerManager::deadline_sink`]; see the [module docs](self) for the protocol.
///
/// # Guarantees
/// - A deadline is delivered no earlier than the `duration` it was registered with, and
///   normally within a tick plus scheduling delay after it. While the manager is paused for
///   fork nothing is delivered; deadlines due by then are delivered by the first tick after
///   `unpause` (pingora's timers fire at once instead).
/// - `notify` is called on the clock thread, at most once per tick, and only when the expired
///   batch goes from empty to non-empty; it can also be spurious (the owner drained between the
///   move and the call), so draining an empty batch must be harmless.
/// - Once `drop` returns, `notify` is never called again (a call in progress is waited for).
///
/// # Thread safety
/// `Send + Sync`; every method may be called from any thread, but the intended owner is one
/// thread. `notify` runs on the clock thread while the clock holds the sink's callback lock: it
/// must not block (use a non-blocking `ThreadsafeFunction` call) and must not drop the sink.
pub struct DeadlineSink {
    manager: Arc<Shared>,
    shared: Arc<SinkShared>,
}

impl TimerManager {
    /// Creates a sink whose expired deadlines are announced by calling `notify` on the clock
    /// thread. The sink keeps the manager (and its clock thread) alive until dropped.
    ///
    /// ```
    /// let manager = keepcount_timeout::timer::TimerManager::new();
    /// let sink = manager.deadline_sink(|| {});
    /// assert_eq!(sink.pending(), 0);
    /// ```
    pub fn deadline_sink<F>(&self, notify: F) -> DeadlineSink
    where
        F: Fn() + Send + Sync + 'static,
    {
        let shared = Arc::new(SinkShared {
            state: Mutex::new(SinkState::default()),
            notify: Mutex::new(Some(Box::new(notify))),
        });
        self.shared().sinks.lock().push(Arc::clone(&shared));
        DeadlineSink {
            manager: Arc::clone(self.shared()),
            shared,
        }
    }
}

impl DeadlineSink {
    /// Registers the deadline `duration` from now, rounded up to the 10 ms grid, and returns it.
    ///
    /// Registering a deadline that is already pending or expired-but-undrained changes nothing
    /// and returns the same [`Deadline`]; it is delivered once.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let manager = keepcount_timeout::timer::TimerManager::new();
    /// let sink = manager.deadline_sink(|| {});
    /// let d = sink.register(Duration::from_millis(35));
    /// assert_eq!(d.as_millis() % 10, 0);
    /// assert!(d.as_millis() >= sink.now_ms() + 25);
    /// ```
    ///
    /// # Performance
    /// One clock read, one uncontended mutex and one `BTreeSet` lookup: the cost of
    /// [`TimerManager::register_timer`] without the `Arc` clone.
    pub fn register(&self, duration: Duration) -> Deadline {
        let deadline = self.manager.deadline_after(duration);
        // Paused for fork, the clock thread is stopped: the deadline waits in `pending` and is
        // delivered by the first tick after `unpause`. pingora fires timers at once instead, but a
        // sink belongs to one consumer (a JavaScript realm) that did not necessarily pause: firing
        // at once made another thread's loop of short sleeps spin for the whole pause. Taking the
        // sink's own lock here is fork-safe: the forking thread never uses another thread's sink.
        let mut state = self.shared.state.lock();
        if !state.pending.contains(&deadline) && !state.expired.contains(&deadline) {
            state.pending.insert(deadline);
        }
        Deadline(deadline)
    }

    /// Removes a pending deadline, e.g. when its last waiter is gone. Returns whether it was
    /// pending; an expired-but-undrained deadline is not removed (it will still be drained).
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let manager = keepcount_timeout::timer::TimerManager::new();
    /// let sink = manager.deadline_sink(|| {});
    /// let d = sink.register(Duration::from_secs(60));
    /// assert!(sink.cancel(d));
    /// assert!(!sink.cancel(d));
    /// assert_eq!(sink.pending(), 0);
    /// ```
    pub fn cancel(&self, deadline: Deadline) -> bool {
        self.shared.state.lock().pending.remove(&deadline.0)
    }

    /// Takes the expired batch: every deadline that came due since the last drain, ascending and
    /// distinct. Empty if nothing is due (e.g. after a spurious notify).
    ///
    /// ```
    /// let manager = keepcount_timeout::timer::TimerManager::new();
    /// let sink = manager.deadline_sink(|| {});
    /// assert!(sink.drain_expired().is_empty());
    /// ```
    pub fn drain_expired(&self) -> Vec<Deadline> {
        let mut batch = std::mem::take(&mut self.shared.state.lock().expired);
        batch.sort_unstable();
        batch.into_iter().map(Deadline).collect()
    }

    /// Deadlines registered and not yet drained (pending or expired in the batch).
    ///
    /// The Node binding keeps the event loop alive exactly while this is non-zero.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let manager = keepcount_timeout::timer::TimerManager::new();
    /// let sink = manager.deadline_sink(|| {});
    /// sink.register(Duration::from_secs(60));
    /// assert_eq!(sink.pending(), 1);
    /// ```
    pub fn pending(&self) -> usize {
        let state = self.shared.state.lock();
        state.pending.len() + state.expired.len()
    }

    /// The manager clock in whole milliseconds, the clock [`Deadline`]s are on.
    pub fn now_ms(&self) -> u64 {
        self.manager.now_ms()
    }
}

impl fmt::Debug for DeadlineSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeadlineSink")
            .field("pending", &self.pending())
            .finish_non_exhaustive()
    }
}

impl Drop for DeadlineSink {
    fn drop(&mut self) {
        // Taking the callback waits for a call in progress; the clock thread checks for `None`
        // under the same lock, so no call starts after this line.
        drop(self.shared.notify.lock().take());
        self.manager
            .sinks
            .lock()
            .retain(|sink| !Arc::ptr_eq(sink, &self.shared));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::mpsc;
    use std::time::Instant;

    /// A sink whose notify counts calls and sends a wake-up on a channel.
    fn counted(manager: &TimerManager) -> (DeadlineSink, Arc<AtomicUsize>, mpsc::Receiver<()>) {
        let calls = Arc::new(AtomicUsize::new(0));
        let (wake, woken) = mpsc::channel();
        let counter = Arc::clone(&calls);
        let sink = manager.deadline_sink(move || {
            counter.fetch_add(1, Ordering::SeqCst);
            let _ = wake.send(());
        });
        (sink, calls, woken)
    }

    #[test]
    fn registering_a_pending_deadline_is_a_lookup() {
        let manager = TimerManager::new();
        let sink = manager.deadline_sink(|| {});
        let same = (0..10).any(|_| {
            let a = sink.register(Duration::from_secs(1));
            a == sink.register(Duration::from_secs(1))
        });
        assert!(same);
        let before = sink.pending();
        let d = sink.register(Duration::from_secs(3));
        sink.register(Duration::from_secs(3));
        assert!(sink.pending() <= before + 2);
        assert!(sink.cancel(d) || sink.pending() == before + 1);
    }

    #[test]
    fn many_deadlines_arrive_in_one_batch_with_one_notify() {
        let manager = TimerManager::new();
        let (sink, calls, woken) = counted(&manager);
        let start = Instant::now();
        let mut registered: Vec<Deadline> = (0..200)
            .map(|i| sink.register(Duration::from_micros(i * 150)))
            .collect();
        registered.sort_unstable();
        registered.dedup();
        assert_eq!(sink.pending(), registered.len());
        woken.recv().expect("notify");
        // Deadlines spread over ~30 ms expire over several ticks, but until the owner drains,
        // the batch stays non-empty and no further notify is sent. Waits for the clock thread
        // to have expired them all rather than guessing how long its ticks take under load.
        let until = Instant::now() + Duration::from_secs(5);
        while !sink.shared.state.lock().pending.is_empty() {
            assert!(Instant::now() < until, "deadlines never expired");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        let batch = sink.drain_expired();
        assert_eq!(batch, registered);
        assert_eq!(sink.pending(), 0);
        for d in &batch {
            // Never early: each deadline is at or before the moment we drained it.
            assert!(d.as_millis() <= sink.now_ms());
        }
        assert!(start.elapsed() >= Duration::from_micros(199 * 150));
    }

    #[test]
    fn a_deadline_is_delivered_no_earlier_than_its_duration() {
        let manager = TimerManager::new();
        let (sink, _, woken) = counted(&manager);
        for ms in [0, 1, 9, 10, 11, 25] {
            let start = Instant::now();
            let d = sink.register(Duration::from_millis(ms));
            woken.recv_timeout(Duration::from_secs(5)).expect("notify");
            assert_eq!(sink.drain_expired(), vec![d]);
            let waited = start.elapsed();
            assert!(waited >= Duration::from_millis(ms), "{ms} ms: {waited:?}");
            // Delivery within a tick is "normally" (the sink's guarantees); this catches a
            // deadline left for the 2 s watchdog, not a wake-up a loaded machine made late
            // (CI saw 240 ms for 1 ms).
            assert!(
                waited < Duration::from_millis(ms + 10) + Duration::from_secs(2),
                "{ms} ms: {waited:?}"
            );
        }
    }

    #[test]
    fn each_notify_follows_a_drain() {
        let manager = TimerManager::new();
        let (sink, calls, woken) = counted(&manager);
        for round in 1..=3 {
            sink.register(Duration::from_millis(5));
            woken.recv().expect("notify");
            assert_eq!(sink.drain_expired().len(), 1);
            assert_eq!(calls.load(Ordering::SeqCst), round);
        }
    }

    #[test]
    fn sinks_on_different_threads_are_isolated() {
        let manager = TimerManager::new();
        std::thread::scope(|s| {
            for t in 0..3u64 {
                let manager = &manager;
                s.spawn(move || {
                    let (sink, calls, woken) = counted(manager);
                    let mine: Vec<Deadline> = (0..50)
                        .map(|i| sink.register(Duration::from_millis(10 * t + i % 7)))
                        .collect();
                    let mut got = Vec::new();
                    while sink.pending() > 0 {
                        woken
                            .recv_timeout(Duration::from_secs(2))
                            .expect("notify on time");
                        got.extend(sink.drain_expired());
                    }
                    // Only this sink's deadlines, each once.
                    let mut expected = mine;
                    expected.sort_unstable();
                    expected.dedup();
                    got.sort_unstable();
                    assert_eq!(got, expected);
                    assert!(calls.load(Ordering::SeqCst) >= 1);
                });
            }
        });
    }

    #[test]
    fn cancelled_deadlines_are_not_delivered() {
        let manager = TimerManager::new();
        let (sink, calls, _woken) = counted(&manager);
        // Long enough not to expire before the cancel even if this thread is preempted.
        let d = sink.register(Duration::from_millis(200));
        assert!(sink.cancel(d));
        assert_eq!(sink.pending(), 0);
        std::thread::sleep(Duration::from_millis(250));
        assert!(sink.drain_expired().is_empty());
        assert_eq!(calls.load(Ordering::SeqCst), 0);
        assert!(!sink.cancel(Deadline::from_millis(3)));
    }

    #[test]
    fn dropping_a_sink_unregisters_it() {
        let manager = TimerManager::new();
        let (sink, calls, _woken) = counted(&manager);
        // Long enough not to expire before the drop even if this thread is preempted.
        sink.register(Duration::from_millis(200));
        assert_eq!(manager.shared().sinks.lock().len(), 1);
        drop(sink);
        assert!(manager.shared().sinks.lock().is_empty());
        std::thread::sleep(Duration::from_millis(250));
        assert_eq!(calls.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn notify_never_runs_after_drop_returns() {
        // Stress: drop sinks while the clock thread is delivering to them.
        let manager = TimerManager::new();
        let violations = Arc::new(AtomicUsize::new(0));
        for round in 0..100u64 {
            let dropped = Arc::new(AtomicBool::new(false));
            let (seen, bad) = (Arc::clone(&dropped), Arc::clone(&violations));
            let sink = manager.deadline_sink(move || {
                // Widen the race window, then check the sink was not dropped meanwhile.
                std::thread::sleep(Duration::from_micros(200));
                if seen.load(Ordering::SeqCst) {
                    bad.fetch_add(1, Ordering::SeqCst);
                }
            });
            for i in 0..20 {
                sink.register(Duration::from_micros(i * 500));
            }
            std::thread::sleep(Duration::from_micros(round * 100 % 12_000));
            drop(sink);
            dropped.store(true, Ordering::SeqCst);
        }
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(violations.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn registrations_while_paused_wait_for_unpause() {
        let manager = TimerManager::new();
        let (sink, calls, _woken) = counted(&manager);
        manager.pause_for_fork();
        let d = sink.register(Duration::ZERO);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(
            calls.load(Ordering::SeqCst),
            0,
            "nothing fires while paused"
        );
        assert_eq!(sink.pending(), 1);
        manager.unpause();
        let start = std::time::Instant::now();
        while calls.load(Ordering::SeqCst) == 0 && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(sink.drain_expired(), vec![d]);
    }

    #[test]
    fn deadlines_are_on_the_manager_clock() {
        let manager = TimerManager::new();
        let sink = manager.deadline_sink(|| {});
        let now = manager.now_ms();
        let d = sink.register(Duration::from_millis(100)).as_millis();
        assert_eq!(d % 10, 0);
        assert!(d >= now + 100 && d <= sink.now_ms() + 110, "{now} {d}");
    }
}
