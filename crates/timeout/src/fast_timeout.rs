//! Timeouts and sleeps on the process-wide [`TimerManager`].
//!
//! The timer of a [`fast_timeout`] is created lazily (on the first pending poll), rounded up to
//! the next 10 ms tick and shared with every timeout of the same thread with the same deadline.
//! Creating and cancelling one takes no global lock.
//!
//! The global manager's clock thread wakes 100 times a second once started; as a general rule
//! (pingora's), that only pays off above about 100 `timeout()` calls a second. Below that, use
//! `tokio::time::timeout` or [`tokio_timeout`](crate::tokio_timeout).

use crate::timer::TimerManager;
use crate::{Timeout, ToTimeout};
use std::future::Future;
use std::pin::Pin;
use std::sync::LazyLock;
use std::time::Duration;

/// The process-wide manager, pingora's `TIMER_MANAGER`. Never dropped, so its clock thread runs
/// (detached, not keeping the process alive) from the first registration until exit.
static TIMER_MANAGER: LazyLock<TimerManager> = LazyLock::new(TimerManager::new);

/// The process-wide manager behind [`fast_timeout`], [`fast_sleep`] and the Node binding's
/// [sinks](crate::sink).
///
/// ```
/// use keepcount_timeout::fast_timeout::timer_manager;
///
/// let sink = timer_manager().deadline_sink(|| {});
/// assert_eq!(sink.pending(), 0);
/// ```
pub fn timer_manager() -> &'static TimerManager {
    &TIMER_MANAGER
}

/// The [`ToTimeout`] of [`fast_timeout`]: a timer on the global manager.
///
/// Users don't need to interact with this object.
pub struct FastTimeout(Duration);

impl ToTimeout for FastTimeout {
    fn timeout(&self) -> Pin<Box<dyn Future<Output = ()> + Send + Sync>> {
        Box::pin(TIMER_MANAGER.register_timer(self.0).poll())
    }

    fn create(d: Duration) -> Self {
        Self(d)
    }
}

/// Like [`tokio::time::timeout`], but much cheaper: see the [module docs](self).
///
/// Needs no tokio time driver, only an executor. Fires no earlier than `duration` after the
/// future first returned `Pending` and about a tick after that.
///
/// ```
/// use keepcount_timeout::fast_timeout::fast_timeout;
/// use std::time::Duration;
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// assert_eq!(fast_timeout(Duration::from_secs(1), async { 1 }).await, Ok(1));
/// # });
/// ```
pub fn fast_timeout<T: Future>(duration: Duration, future: T) -> Timeout<T, FastTimeout> {
    Timeout::new_with_delay(future, duration)
}

/// Like [`tokio::time::sleep`], on the 10 ms grid of the global manager.
///
/// ```
/// use keepcount_timeout::fast_timeout::fast_sleep;
/// use std::time::{Duration, Instant};
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let start = Instant::now();
/// fast_sleep(Duration::from_millis(10)).await;
/// assert!(start.elapsed() >= Duration::from_millis(10));
/// # });
/// ```
pub async fn fast_sleep(duration: Duration) {
    TIMER_MANAGER.register_timer(duration).poll().await;
}

/// Pauses the global manager for `fork()`; see [`TimerManager::pause_for_fork`].
///
/// Call it right before `fork()`.
pub fn pause_for_fork() {
    TIMER_MANAGER.pause_for_fork();
}

/// Unpauses the global manager after `fork()`; see [`TimerManager::unpause`].
///
/// Call it right after `fork()`, in the parent and in the child.
pub fn unpause() {
    TIMER_MANAGER.unpause();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_runtime::block_on;
    use std::time::Instant;

    #[test]
    fn times_out_a_pending_future() {
        let start = Instant::now();
        let never = std::future::pending::<()>();
        assert!(block_on(fast_timeout(Duration::from_millis(20), never)).is_err());
        assert!(start.elapsed() >= Duration::from_millis(20));
    }

    #[test]
    fn returns_a_ready_value_at_once() {
        assert_eq!(
            block_on(fast_timeout(Duration::from_secs(1), async { 1 })),
            Ok(1)
        );
    }

    #[test]
    fn returns_a_delayed_value_before_the_deadline() {
        let slow = async {
            fast_sleep(Duration::from_millis(10)).await;
            1
        };
        assert_eq!(
            block_on(fast_timeout(Duration::from_secs(100), slow)),
            Ok(1)
        );
    }
}
