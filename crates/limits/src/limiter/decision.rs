//! The answer to one [`Limiter::check`](super::Limiter::check).

use std::time::Duration;

/// Whether a check was admitted and, if not, when the same check would be.
///
/// A refused check consumed nothing, in any bucket.
///
/// ```
/// use keepcount_limits::limiter::Decision;
/// use std::time::Duration;
///
/// let refused = Decision::Refused { retry_after: Duration::from_millis(500) };
/// assert!(!refused.is_allowed());
/// assert_eq!(refused.retry_after(), Some(Duration::from_millis(500)));
/// assert_eq!(Decision::Never.retry_after(), None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[must_use = "a check that is not acted upon limits nothing"]
pub enum Decision {
    /// Admitted: the cost was taken from every bucket that applies.
    Allowed,
    /// Refused for now. Had no other check run meanwhile, the same check would be refused until
    /// exactly `retry_after` has passed and admitted from then on (to the nanosecond; see the
    /// rounding rules on [`Limiter`](super::Limiter)). Never more than `u64::MAX` nanoseconds.
    Refused {
        /// How long until the same check would be admitted.
        retry_after: Duration,
    },
    /// Refused, and no amount of waiting helps under the current quotas: the cost exceeds a
    /// burst, or a bucket short of tokens never refills (its amount is 0).
    Never,
}

impl Decision {
    /// Whether the check was admitted.
    pub const fn is_allowed(&self) -> bool {
        matches!(self, Self::Allowed)
    }

    /// The wait before retrying, for a `Retry-After` header: `Some` only for
    /// [`Refused`](Self::Refused).
    pub const fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Refused { retry_after } => Some(*retry_after),
            Self::Allowed | Self::Never => None,
        }
    }
}

/// How long one bucket dimension, or the combination of several, needs before a cost fits.
/// Ordered so that the combination of several is their maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Wait {
    /// Waiting this many nanoseconds (0: fits now).
    Nanos(u64),
    /// Waiting never helps.
    Never,
}

impl Wait {
    /// The decision this wait amounts to.
    pub(crate) fn decision(self) -> Decision {
        match self {
            Self::Nanos(0) => Decision::Allowed,
            Self::Nanos(nanos) => Decision::Refused {
                retry_after: Duration::from_nanos(nanos),
            },
            Self::Never => Decision::Never,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_wait_wins_and_never_beats_all() {
        assert_eq!(Wait::Nanos(3).max(Wait::Nanos(5)), Wait::Nanos(5));
        assert_eq!(Wait::Nanos(u64::MAX).max(Wait::Never), Wait::Never);
    }

    #[test]
    fn zero_wait_is_allowed() {
        assert_eq!(Wait::Nanos(0).decision(), Decision::Allowed);
        assert_eq!(Wait::Never.decision(), Decision::Never);
        assert_eq!(
            Wait::Nanos(7).decision().retry_after(),
            Some(Duration::from_nanos(7))
        );
    }
}
