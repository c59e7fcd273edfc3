//! The one error type of the limiter: what a caller got wrong in a quota or an update.

use std::fmt;

/// Why a quota could not be built or a [`Limiter`](super::Limiter) update was refused.
///
/// Every variant is the caller's mistake, found before anything changed: an update that returns
/// an error has not touched the limiter.
///
/// ```
/// use keepcount_limits::limiter::{Limit, LimiterError};
/// use std::time::Duration;
///
/// let err = Limit::new(10, Duration::ZERO, 10).unwrap_err();
/// assert_eq!(err, LimiterError::ZeroPeriod);
/// assert_eq!(err.to_string(), "a limit's period must be longer than zero");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LimiterError {
    /// A [`Limit`](super::Limit) was given a period of zero: its rate would be infinite.
    ZeroPeriod,
    /// A [`Limit`](super::Limit) was given a period longer than `u64::MAX` nanoseconds
    /// (about 584 years), which the integer arithmetic does not represent.
    PeriodTooLong,
    /// An update named a key that is not in the limiter's table.
    UnknownKey,
    /// A new key table named the same key twice, so its quota would be ambiguous.
    DuplicateKey,
    /// The table would hold more than `u32::MAX − 1` keys (slots are numbered by `u32`).
    TooManyKeys,
}

impl LimiterError {
    /// A stable, machine-readable name for the error, for bindings that expose error codes.
    ///
    /// ```
    /// use keepcount_limits::limiter::LimiterError;
    ///
    /// assert_eq!(LimiterError::UnknownKey.code(), "ERR_LIMITER_UNKNOWN_KEY");
    /// ```
    pub const fn code(self) -> &'static str {
        match self {
            Self::ZeroPeriod => "ERR_LIMITER_ZERO_PERIOD",
            Self::PeriodTooLong => "ERR_LIMITER_PERIOD_TOO_LONG",
            Self::UnknownKey => "ERR_LIMITER_UNKNOWN_KEY",
            Self::DuplicateKey => "ERR_LIMITER_DUPLICATE_KEY",
            Self::TooManyKeys => "ERR_LIMITER_TOO_MANY_KEYS",
        }
    }
}

impl fmt::Display for LimiterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::ZeroPeriod => "a limit's period must be longer than zero",
            Self::PeriodTooLong => "a limit's period must be at most u64::MAX nanoseconds",
            Self::UnknownKey => "the key is not in the limiter's table",
            Self::DuplicateKey => "the key table names the same key more than once",
            Self::TooManyKeys => "the key table would hold more than u32::MAX - 1 keys",
        })
    }
}

impl std::error::Error for LimiterError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_has_a_distinct_code_and_message() {
        let all = [
            LimiterError::ZeroPeriod,
            LimiterError::PeriodTooLong,
            LimiterError::UnknownKey,
            LimiterError::DuplicateKey,
            LimiterError::TooManyKeys,
        ];
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                assert_ne!(a.code(), b.code());
                assert_ne!(a.to_string(), b.to_string());
            }
        }
    }
}
