//! The [`Timeout`] future: poll a future, and only start a timer once it is pending.
//!
//! Most timeouts in a busy server wrap I/O that is already ready (data sitting in the receive
//! buffer). Creating the timer lazily, on the first `Pending`, makes those timeouts cost one
//! extra branch; the timer is created by the [`ToTimeout`] the future was built with.

use crate::Elapsed;
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// How a [`Timeout`] creates its timer: implemented by [`FastTimeout`](crate::fast_timeout::FastTimeout)
/// and [`TokioTimeout`](crate::TokioTimeout).
///
/// Users don't need to interact with this trait; it exists (as in pingora-timeout) so that
/// [`Timeout`] is one type for both timer kinds.
pub trait ToTimeout {
    /// The timer future, created on the first pending poll.
    fn timeout(&self) -> Pin<Box<dyn Future<Output = ()> + Send + Sync>>;
    /// A timer factory for `d`.
    fn create(d: Duration) -> Self;
}

pin_project! {
    /// The timeout future returned by [`timeout`](crate::timeout),
    /// [`fast_timeout`](crate::fast_timeout::fast_timeout) and [`tokio_timeout`](crate::tokio_timeout).
    ///
    /// Resolves to `Ok(output)` if the future completes first, `Err(Elapsed)` if the timer does.
    ///
    /// ```
    /// use keepcount_timeout::timeout;
    /// use std::time::Duration;
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// assert_eq!(timeout(Duration::from_secs(1), async { 1 }).await, Ok(1));
    /// let never = std::future::pending::<()>();
    /// assert!(timeout(Duration::from_millis(10), never).await.is_err());
    /// # });
    /// ```
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct Timeout<T, F> {
        #[pin]
        value: T,
        delay: Option<Pin<Box<dyn Future<Output = ()> + Send + Sync>>>,
        callback: F,
    }
}

impl<T, F: ToTimeout> Timeout<T, F> {
    pub(crate) fn new_with_delay(value: T, d: Duration) -> Self {
        Self {
            value,
            delay: None,
            callback: F::create(d),
        }
    }
}

impl<T: Future, F: ToTimeout> Future for Timeout<T, F> {
    type Output = Result<T::Output, Elapsed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let me = self.project();
        if let Poll::Ready(v) = me.value.poll(cx) {
            return Poll::Ready(Ok(v));
        }
        let callback = &*me.callback;
        let delay = me.delay.get_or_insert_with(|| callback.timeout());
        match delay.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(()) => Poll::Ready(Err(Elapsed)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_runtime::block_on;
    use std::sync::atomic::{AtomicUsize, Ordering};

    static CREATED: AtomicUsize = AtomicUsize::new(0);

    /// Counts timer creations; its timer never fires.
    struct Counting;

    impl ToTimeout for Counting {
        fn timeout(&self) -> Pin<Box<dyn Future<Output = ()> + Send + Sync>> {
            CREATED.fetch_add(1, Ordering::Relaxed);
            Box::pin(std::future::pending())
        }
        fn create(_: Duration) -> Self {
            Counting
        }
    }

    #[test]
    fn a_ready_future_never_creates_a_timer() {
        let before = CREATED.load(Ordering::Relaxed);
        let t = Timeout::<_, Counting>::new_with_delay(async { 7 }, Duration::from_secs(1));
        assert_eq!(block_on(t), Ok(7));
        assert_eq!(CREATED.load(Ordering::Relaxed), before);
    }

    #[test]
    fn the_timer_is_created_once_on_the_first_pending_poll() {
        let before = CREATED.load(Ordering::Relaxed);
        let slow = async {
            tokio::time::sleep(Duration::from_millis(5)).await;
            tokio::time::sleep(Duration::from_millis(5)).await;
            2
        };
        let t = Timeout::<_, Counting>::new_with_delay(slow, Duration::from_secs(1));
        assert_eq!(block_on(t), Ok(2));
        assert_eq!(CREATED.load(Ordering::Relaxed), before + 1);
    }
}
