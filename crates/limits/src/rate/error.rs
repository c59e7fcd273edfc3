//! [`RateError`]: why a [`Rate`](super::Rate) configuration was refused.

use crate::shape::ShapeError;
use std::fmt;

/// Why a [`Rate`](super::Rate) configuration was refused.
///
/// ```
/// use keepcount_limits::clock::MonotonicClock;
/// use keepcount_limits::rate::{Rate, RateError};
/// use std::time::Duration;
/// let err = Rate::with_clock(Duration::ZERO, 4, 8, 0, MonotonicClock::new()).unwrap_err();
/// assert_eq!(err, RateError::ZeroInterval);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum RateError {
    /// The interval is zero.
    ZeroInterval,
    /// The sketches' shape is outside the limits.
    Shape(ShapeError),
}

impl fmt::Display for RateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ZeroInterval => f.write_str("the rate interval must be longer than zero"),
            Self::Shape(err) => write!(f, "bad rate sketch shape: {err}"),
        }
    }
}

impl std::error::Error for RateError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Shape(err) => Some(err),
            Self::ZeroInterval => None,
        }
    }
}
