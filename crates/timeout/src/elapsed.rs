//! The error of a timeout that expired.

use std::fmt;

/// The error returned when a [`Timeout`](crate::Timeout) expires before its future completes.
///
/// ```
/// let e = keepcount_timeout::Elapsed;
/// assert_eq!(e.to_string(), "Timeout Elapsed");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Elapsed;

impl fmt::Display for Elapsed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // pingora's exact message, for logs and tests that match on it.
        f.write_str("Timeout Elapsed")
    }
}

impl std::error::Error for Elapsed {}
