//! One shared timer and the stubs that wait on it.
//!
//! Every registration whose deadline rounds to the same grid point on the same thread gets a
//! [`TimerStub`] on the same [`Timer`]: one allocation, one `Arc` clone per waiter, and one
//! `notify_waiters` wakes them all. pingora keeps the flag and the `Notify` in two `Arc`s (two
//! reference-count updates per create and per drop); one suffices.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::Notify;

/// The state shared by all stubs of one deadline.
#[derive(Default)]
pub(crate) struct Timer {
    notify: Notify,
    fired: AtomicBool,
}

impl Timer {
    /// A timer that has already fired: what registrations get while paused for fork.
    pub(crate) fn fired() -> Arc<Self> {
        Arc::new(Self {
            notify: Notify::new(),
            fired: AtomicBool::new(true),
        })
    }

    /// Marks the timer fired and wakes every waiter.
    pub(crate) fn fire(&self) {
        // SeqCst pairs with the SeqCst load in `TimerStub::poll`; see the argument there.
        self.fired.store(true, Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    /// Test hook: whether the timer has fired.
    #[cfg(test)]
    pub(crate) fn has_fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }
}

/// A handle on a registered timer: await [`poll`](TimerStub::poll) to wait until it fires.
///
/// Dropping the stub is how a timeout is cancelled: it costs one reference-count decrement, and
/// the shared timer is freed once it fired and every stub is gone.
///
/// The stub does not keep its [`TimerManager`](super::TimerManager) alive: if the manager (and
/// its sinks) are dropped before the timer fires, it never fires and [`poll`](Self::poll) waits
/// forever, as with pingora's.
///
/// ```
/// use keepcount_timeout::timer::TimerManager;
/// use std::time::{Duration, Instant};
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let manager = TimerManager::new();
/// let start = Instant::now();
/// manager.register_timer(Duration::from_millis(15)).poll().await;
/// assert!(start.elapsed() >= Duration::from_millis(15));
/// # });
/// ```
pub struct TimerStub(pub(crate) Arc<Timer>);

impl std::fmt::Debug for TimerStub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimerStub")
            .field("fired", &self.0.fired.load(Ordering::Relaxed))
            .finish()
    }
}

impl TimerStub {
    /// Waits until the timer fires; returns at once if it already has. Never returns if the
    /// manager was dropped before the timer fired (see the type's documentation).
    ///
    /// # Thread safety
    /// The future is `Send + Sync`, so it can be boxed as `dyn Future + Send + Sync` like
    /// pingora's.
    pub async fn poll(self) {
        // Create the `Notified` *before* reading the flag. tokio documents that a `Notified`
        // receives every `notify_waiters()` issued after it was created, even if not yet polled.
        // `fire` stores the flag (SeqCst) before calling `notify_waiters`; if our SeqCst load
        // below still sees `false`, the store and hence the notification come later, and the
        // `Notified` we already hold catches it. pingora creates the `Notified` after the check,
        // leaving a window in which a fire is missed and the waiter sleeps forever.
        let notified = self.0.notify.notified();
        if self.0.fired.load(Ordering::SeqCst) {
            return;
        }
        notified.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block_on<F: Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(future)
    }

    #[test]
    fn a_fired_timer_is_ready_at_once() {
        block_on(TimerStub(Timer::fired()).poll());
    }

    #[test]
    fn fire_wakes_every_subscriber() {
        let timer = Arc::new(Timer::default());
        let stubs: Vec<_> = (0..3).map(|_| TimerStub(Arc::clone(&timer))).collect();
        let firer = Arc::clone(&timer);
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(5));
            firer.fire();
        });
        block_on(async {
            for stub in stubs {
                stub.poll().await;
            }
        });
    }

    #[test]
    fn a_fire_racing_with_poll_is_never_lost() {
        // Many short races between `fire` on another thread and the flag check in `poll`.
        for _ in 0..200 {
            let timer = Arc::new(Timer::default());
            let stub = TimerStub(Arc::clone(&timer));
            let firer = std::thread::spawn(move || timer.fire());
            block_on(stub.poll());
            firer.join().expect("firer");
        }
    }
}
