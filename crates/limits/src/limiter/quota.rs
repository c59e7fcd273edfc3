//! Quotas: how much one bucket admits, in whole tokens per period, with no floating point.
//!
//! A [`Limit`] is one dimension (`amount` tokens every `period`, at most `burst` held); a
//! [`Quota`] pairs a limit on requests with a limit on cost units (bytes, say), either of which
//! may be absent (unlimited). Everything is an integer so that the TypeScript port reproduces
//! every decision bit for bit; the arithmetic is described on [`Limiter`](super::Limiter).

use std::num::NonZeroU64;
use std::time::Duration;

use super::LimiterError;

/// Nanoseconds in one second: the period of [`Limit::per_second`].
const NANOS_PER_SEC: NonZeroU64 = NonZeroU64::new(1_000_000_000).unwrap();

/// One dimension of a quota: `amount` tokens are added every `period`, continuously (one
/// `amount`-th of a token every `period / amount`), and at most `burst` tokens are held.
///
/// Over any window of length `t` a bucket with this limit admits at most
/// `burst + amount × t / period` tokens. `amount` 0 never refills; `amount` 0 with `burst` 0
/// admits nothing that costs anything.
///
/// ```
/// use keepcount_limits::limiter::Limit;
/// use std::time::Duration;
///
/// // 10 requests a second, bursts of 20.
/// let per_second = Limit::per_second(10, 20);
/// // One request every two seconds, bursts of 5: rates below one per second need a period.
/// let slow = Limit::new(1, Duration::from_secs(2), 5).unwrap();
/// assert_eq!(slow.period(), Duration::from_secs(2));
/// assert_eq!(per_second.burst(), 20);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Limit {
    amount: u64,
    period_nanos: NonZeroU64,
    burst: u64,
}

impl Limit {
    /// `rate` tokens a second, at most `burst` held.
    pub const fn per_second(rate: u64, burst: u64) -> Self {
        Self {
            amount: rate,
            period_nanos: NANOS_PER_SEC,
            burst,
        }
    }

    /// `amount` tokens every `period`, at most `burst` held.
    ///
    /// # Errors
    /// [`LimiterError::ZeroPeriod`] if `period` is zero, [`LimiterError::PeriodTooLong`] if it is
    /// longer than `u64::MAX` nanoseconds.
    pub fn new(amount: u64, period: Duration, burst: u64) -> Result<Self, LimiterError> {
        let nanos = u64::try_from(period.as_nanos()).map_err(|_| LimiterError::PeriodTooLong)?;
        let period_nanos = NonZeroU64::new(nanos).ok_or(LimiterError::ZeroPeriod)?;
        Ok(Self {
            amount,
            period_nanos,
            burst,
        })
    }

    /// Tokens added per [`period`](Self::period).
    pub const fn amount(&self) -> u64 {
        self.amount
    }

    /// The period over which [`amount`](Self::amount) tokens are added.
    pub const fn period(&self) -> Duration {
        Duration::from_nanos(self.period_nanos.get())
    }

    /// The most tokens the bucket holds, and so the largest cost it can ever admit.
    pub const fn burst(&self) -> u64 {
        self.burst
    }

    /// The period in nanoseconds: also the number of internal units in one token.
    pub(crate) const fn period_nanos(&self) -> u64 {
        self.period_nanos.get()
    }

    /// Internal units added per nanosecond (`amount` tokens per `period` nanoseconds, with one
    /// token worth `period` units, is exactly `amount` units per nanosecond).
    pub(crate) const fn units_per_nano(&self) -> u128 {
        self.amount as u128
    }

    /// `units` tokens expressed in internal units: `tokens × period`. Cannot overflow: both
    /// factors are below 2^64.
    pub(crate) const fn units(&self, tokens: u64) -> u128 {
        tokens as u128 * self.period_nanos.get() as u128
    }

    /// A full bucket, in internal units.
    pub(crate) const fn capacity(&self) -> u128 {
        self.units(self.burst)
    }

    /// The same limit with `amount` and `period` divided by their greatest common divisor `g`
    /// (`amount` 0: a period of 1 ns, since `g` is the period). Every decision is the same: each
    /// count of units the arithmetic makes (a full bucket `burst × period`, a cost `cost × period`,
    /// a refill `amount × elapsed`, and their sums, differences and minima) is a multiple of `g`
    /// in the written form and exactly that count divided by `g` in this one, so every comparison
    /// goes the same way and every wait `⌈(need − tokens) / amount⌉` is the same quotient. A full
    /// bucket is `g` times smaller: a shared limiter stores a limit so when written it would not
    /// fit its 64-bit bucket word (a day's quota in nanoseconds, say).
    pub(crate) fn in_lowest_terms(self) -> Self {
        let period = self.period_nanos.get();
        // Euclid's: `gcd` ends as gcd(amount, period), at least 1 since the period is not 0.
        let (mut rest, mut gcd) = (self.amount, period);
        while rest != 0 {
            (rest, gcd) = (gcd % rest, rest);
        }
        Self {
            amount: self.amount / gcd,
            // `gcd` divides the period: the quotient is at least 1 (`MIN` is never taken).
            period_nanos: NonZeroU64::new(period / gcd).unwrap_or(NonZeroU64::MIN),
            burst: self.burst,
        }
    }
}

/// What one bucket admits: a [`Limit`] on requests (each check is one request) and a [`Limit`]
/// on cost units (each check costs the `cost` it is given). `None` leaves a dimension unlimited.
///
/// ```
/// use keepcount_limits::limiter::{Limit, Quota};
///
/// // 100 requests and 1 MB a second; bursts of 200 requests and 4 MB.
/// let quota = Quota::new(
///     Some(Limit::per_second(100, 200)),
///     Some(Limit::per_second(1_000_000, 4_000_000)),
/// );
/// assert_eq!(quota.requests().unwrap().burst(), 200);
/// assert_eq!(Quota::UNLIMITED.units(), None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Quota {
    requests: Option<Limit>,
    units: Option<Limit>,
}

impl Quota {
    /// A quota that limits nothing.
    pub const UNLIMITED: Self = Self::new(None, None);

    /// A quota that admits nothing: no requests, no refill.
    pub const DENY_ALL: Self = Self::new(Some(Limit::per_second(0, 0)), None);

    /// A quota limiting requests and cost units at once; `None` leaves that dimension unlimited.
    pub const fn new(requests: Option<Limit>, units: Option<Limit>) -> Self {
        Self { requests, units }
    }

    /// The limit on requests, if any.
    pub const fn requests(&self) -> Option<Limit> {
        self.requests
    }

    /// The limit on cost units, if any.
    pub const fn units(&self) -> Option<Limit> {
        self.units
    }

    /// Both dimensions, requests first: the order the bucket stores them in.
    pub(crate) const fn dimensions(&self) -> [Option<Limit>; 2] {
        [self.requests, self.units]
    }

    /// Whether at least one dimension is limited.
    pub(crate) const fn is_limited(&self) -> bool {
        self.requests.is_some() || self.units.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_a_zero_period() {
        assert_eq!(
            Limit::new(1, Duration::ZERO, 1),
            Err(LimiterError::ZeroPeriod)
        );
    }

    #[test]
    fn rejects_a_period_beyond_u64_nanos() {
        assert_eq!(
            Limit::new(1, Duration::MAX, 1),
            Err(LimiterError::PeriodTooLong)
        );
        assert!(Limit::new(1, Duration::from_nanos(u64::MAX), 1).is_ok());
    }

    #[test]
    fn internal_units_are_tokens_times_period() {
        let limit = Limit::new(3, Duration::from_millis(250), 7).unwrap();
        assert_eq!(limit.units(2), 500_000_000);
        assert_eq!(limit.capacity(), 7 * 250_000_000);
        assert_eq!(limit.units_per_nano(), 3);
    }

    #[test]
    fn largest_values_do_not_overflow() {
        let limit = Limit::new(u64::MAX, Duration::from_nanos(u64::MAX), u64::MAX).unwrap();
        assert_eq!(limit.capacity(), u64::MAX as u128 * u64::MAX as u128);
    }

    #[test]
    fn lowest_terms_divide_amount_and_period_by_their_gcd() {
        let lowest = |amount, nanos| {
            let limit = Limit::new(amount, Duration::from_nanos(nanos), 7).unwrap();
            let l = limit.in_lowest_terms();
            (l.amount(), l.period_nanos(), l.burst())
        };
        assert_eq!(lowest(1_000_000, 86_400_000_000_000), (1, 86_400_000, 7));
        assert_eq!(lowest(6, 4), (3, 2, 7));
        assert_eq!(lowest(7, 5), (7, 5, 7));
        assert_eq!(lowest(0, 1_000), (0, 1, 7));
        assert_eq!(lowest(u64::MAX, u64::MAX), (1, 1, 7));
    }

    #[test]
    fn deny_all_is_limited_and_unlimited_is_not() {
        assert!(Quota::DENY_ALL.is_limited());
        assert!(!Quota::UNLIMITED.is_limited());
    }
}
