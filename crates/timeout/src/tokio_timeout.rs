//! [`tokio::time::timeout`] with only the lazy timer creation of [`Timeout`].
//!
//! For the low-rate case where a 10 ms clock thread is not worth it.

use crate::{Timeout, ToTimeout};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// The [`ToTimeout`] of [`tokio_timeout`]: a `tokio::time::sleep`.
///
/// Users don't need to interact with this object.
pub struct TokioTimeout(Duration);

impl ToTimeout for TokioTimeout {
    fn timeout(&self) -> Pin<Box<dyn Future<Output = ()> + Send + Sync>> {
        Box::pin(tokio::time::sleep(self.0))
    }

    fn create(d: Duration) -> Self {
        Self(d)
    }
}

/// [`tokio::time::timeout`] with lazy timer creation: the timer is created the first time
/// `future` is pending, so futures that are ready at once never touch tokio's timer wheel.
///
/// Needs a tokio runtime with the time driver enabled once the future is pending.
///
/// ```
/// use keepcount_timeout::tokio_timeout;
/// use std::time::Duration;
///
/// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
/// assert_eq!(tokio_timeout(Duration::from_secs(1), async { 1 }).await, Ok(1));
/// # });
/// ```
pub fn tokio_timeout<T: Future>(duration: Duration, future: T) -> Timeout<T, TokioTimeout> {
    Timeout::new_with_delay(future, duration)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_runtime::block_on;

    #[test]
    fn times_out_a_pending_future() {
        let never = std::future::pending::<()>();
        assert!(block_on(tokio_timeout(Duration::from_millis(5), never)).is_err());
    }

    #[test]
    fn returns_a_delayed_value_before_the_deadline() {
        let slow = async {
            tokio::time::sleep(Duration::from_millis(5)).await;
            1
        };
        assert_eq!(
            block_on(tokio_timeout(Duration::from_secs(10), slow)),
            Ok(1)
        );
    }
}
