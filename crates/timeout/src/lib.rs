//! keepcount-timeout: fast timeouts on a shared 10 ms tick, API-compatible with
//! [pingora-timeout](https://docs.rs/pingora-timeout) 0.8.
//!
//! A drop-in replacement for `tokio::time::timeout` where timeouts are created and cancelled
//! very often (a proxy arms several per request and almost none fire):
//! - the timer of a [`timeout`] is created only once its future is pending;
//! - deadlines are rounded up to a 10 ms grid and timers with the same deadline on the same
//!   thread are shared;
//! - each thread inserts into its own tree, so there is no global lock; one clock thread per
//!   manager fires due timers every tick.
//!
//! Non-async callers (the Node binding) register deadlines in a [`DeadlineSink`] and receive the
//! expired ones in one batch per tick on their own thread.
//!
//! # Performance
//! `timeout()` over a ready future: 2.7 ns vs 28.8 ns for `tokio::time::timeout` (10.6×; 21×
//! net of the 1.4 ns benchmark loop) and 26.3 ns for pingora-timeout's. `register_timer` + drop:
//! 40 ns vs pingora-timeout's 44 ns; an unpolled `tokio::time::sleep` costs 37 ns because tokio
//! defers registering it until it is polled. Measured with `cargo bench -p keepcount-timeout`
//! on an AMD EPYC (2 shared cores), 2026-11-21; the README has the whole table.
//!
//! # When not to use it
//! Below about 100 timeouts a second, the clock thread (100 wake-ups a second) costs more than
//! it saves: use `tokio::time` or [`tokio_timeout`]. Timers that need better than 10 ms
//! precision should not use it either.
//!
//! ```
//! use keepcount_timeout::{sleep, timeout};
//! use std::time::Duration;
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let slow = async {
//!     sleep(Duration::from_millis(50)).await;
//!     "done"
//! };
//! assert!(timeout(Duration::from_millis(10), slow).await.is_err());
//! # });
//! ```

mod elapsed;
pub mod fast_timeout;
pub mod sink;
#[cfg(test)]
mod test_runtime;
mod timeout_future;
pub mod timer;
mod tokio_timeout;

pub use elapsed::Elapsed;
pub use fast_timeout::{fast_sleep as sleep, fast_timeout as timeout};
pub use sink::{Deadline, DeadlineSink};
pub use timeout_future::{Timeout, ToTimeout};
pub use tokio_timeout::{TokioTimeout, tokio_timeout};
