//! One token bucket: integer token counts and the time of the last refill, updated under a lock.
//!
//! Tokens are kept in *units*: one token of a [`Limit`] is `period` units (its period in
//! nanoseconds), so the refill of `amount` tokens per `period` is exactly `amount` units per
//! nanosecond, and no refill ever rounds. A lock rather than a CAS loop on packed atomics: the
//! state is two `u128` counts and a timestamp, a check touches up to two buckets that must change
//! together or not at all, and an uncontended `parking_lot` lock is one CAS to take and one to
//! release, the same price as a single-word CAS loop.
//!
//! [`State`] does not hold its quota: a keyed bucket refers to an interned quota by id (see
//! `slots.rs`), so every function here is told the quota in force.

use parking_lot::{Mutex, MutexGuard};

use super::decision::Wait;
use super::quota::{Limit, Quota};

/// The best-effort or the overall bucket: a quota of its own and its state behind one mutex.
///
/// # Thread safety
/// All state sits behind one `parking_lot` mutex, held for a few dozen instructions of integer
/// arithmetic and never while calling out of this module.
#[derive(Debug)]
pub(crate) struct Bucket {
    inner: Mutex<Owned>,
}

/// A quota and the state it governs.
#[derive(Debug)]
pub(crate) struct Owned {
    pub(crate) quota: Quota,
    pub(crate) state: State,
}

impl Bucket {
    /// A bucket holding a full burst of every dimension of `quota`, refilled as of `now`.
    pub(crate) fn full(quota: Quota, now: u64) -> Self {
        Self {
            inner: Mutex::new(Owned {
                quota,
                state: State::full(&quota, now),
            }),
        }
    }

    /// Exclusive access to the quota and state.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Owned> {
        self.inner.lock()
    }
}

impl Owned {
    /// Puts `quota` in force as of `now` (see [`State::set_quota`]).
    pub(crate) fn set_quota(&mut self, quota: Quota, now: u64) {
        self.state.set_quota(&self.quota, &quota, now);
        self.quota = quota;
    }
}

/// The counts of one bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct State {
    /// Held tokens per dimension in units (`tokens × period`), requests first; 0 for an
    /// unlimited dimension. Never above that dimension's capacity.
    pub(crate) tokens: [u128; 2],
    /// Clock reading of the latest refill; never decreases.
    pub(crate) last: u64,
}

impl State {
    /// Full in every limited dimension of `quota`, refilled as of `now`.
    pub(crate) fn full(quota: &Quota, now: u64) -> Self {
        Self {
            tokens: quota.dimensions().map(|d| d.map_or(0, |l| l.capacity())),
            last: now,
        }
    }

    /// Adds what accrued since the last refill: `amount × (now − last)` units per dimension,
    /// capped at the capacity. A `now` older than `last` (a caller that read the clock before
    /// another thread refilled) adds nothing and leaves `last` alone, so the total ever added is
    /// at most `amount × (latest reading − creation)`.
    pub(crate) fn refill(&mut self, quota: &Quota, now: u64) {
        let elapsed = now.saturating_sub(self.last);
        if elapsed == 0 {
            return;
        }
        self.last = now;
        for (tokens, limit) in self.tokens.iter_mut().zip(quota.dimensions()) {
            if let Some(limit) = limit {
                *tokens = refilled(*tokens, limit, elapsed);
            }
        }
    }

    /// How long until `costs` (requests, units) fit, with no refill beyond the current one.
    pub(crate) fn wait(&self, quota: &Quota, costs: [u64; 2]) -> Wait {
        let mut wait = Wait::Nanos(0);
        for ((tokens, limit), cost) in self.tokens.iter().zip(quota.dimensions()).zip(costs) {
            if let Some(limit) = limit {
                wait = wait.max(dimension_wait(*tokens, limit, cost));
            }
        }
        wait
    }

    /// Takes `costs` (requests, units). Only called after [`wait`](Self::wait) said they fit, so
    /// the subtraction never saturates; saturating keeps it panic-free all the same.
    pub(crate) fn take(&mut self, quota: &Quota, costs: [u64; 2]) {
        for ((tokens, limit), cost) in self.tokens.iter_mut().zip(quota.dimensions()).zip(costs) {
            if let Some(limit) = limit {
                *tokens = tokens.saturating_sub(limit.units(cost));
            }
        }
    }

    /// Replaces quota `old` by `new` as of `now`: first refills at the old rates up to `now`, then
    /// per dimension keeps the held tokens (converted to the new period, rounding down, and capped
    /// at the new burst); a dimension that was unlimited starts full, one that becomes unlimited
    /// drops its count.
    pub(crate) fn set_quota(&mut self, old: &Quota, new: &Quota, now: u64) {
        self.refill(old, now);
        for ((tokens, old), new) in self
            .tokens
            .iter_mut()
            .zip(old.dimensions())
            .zip(new.dimensions())
        {
            *tokens = match (old, new) {
                (Some(old), Some(new)) => {
                    convert(*tokens, old.period_nanos(), new.period_nanos()).min(new.capacity())
                }
                (None, Some(new)) => new.capacity(),
                (_, None) => 0,
            };
        }
    }
}

/// One dimension holding `tokens` units after `elapsed` nanoseconds of refill under `limit`:
/// `amount × elapsed` units more, capped at the capacity. Shared with the shared-memory limiter
/// (`crate::shared::limiter`), which keeps each dimension in a word of its own.
pub(crate) fn refilled(tokens: u128, limit: Limit, elapsed: u64) -> u128 {
    // amount < 2^64 and elapsed < 2^64, so the product fits a u128; the sum may not.
    let accrued = limit.units_per_nano() * u128::from(elapsed);
    tokens.saturating_add(accrued).min(limit.capacity())
}

/// The wait of one dimension holding `tokens` units for a cost of `cost` tokens:
/// never if `cost > burst`, none if `cost × period ≤ tokens`, never if `amount` is 0, otherwise
/// `⌈(cost × period − tokens) / amount⌉` nanoseconds, capped at `u64::MAX`.
pub(crate) fn dimension_wait(tokens: u128, limit: Limit, cost: u64) -> Wait {
    if cost > limit.burst() {
        return Wait::Never;
    }
    let need = limit.units(cost);
    if need <= tokens {
        return Wait::Nanos(0);
    }
    let rate = limit.units_per_nano();
    if rate == 0 {
        return Wait::Never;
    }
    let nanos = (need - tokens).div_ceil(rate);
    Wait::Nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

/// `⌊tokens × to / from⌋`, without overflowing: whole tokens and the remainder converted apart.
fn convert(tokens: u128, from: u64, to: u64) -> u128 {
    let (from, to) = (u128::from(from), u128::from(to));
    // tokens < 2^128 holds at most u64::MAX whole tokens of `from` units (it never exceeds a
    // capacity), so whole × to < 2^128; rem < from < 2^64, so rem × to < 2^128.
    let whole = tokens / from;
    let rem = tokens % from;
    whole.saturating_mul(to).saturating_add(rem * to / from)
}

/// A [`Limit`] whose full bucket fits 64 bits of units (`burst × period < 2^64`), with the
/// figures a check needs precomputed: what [`admit_narrow`] works with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Narrow {
    amount: u64,
    period: u64,
    burst: u64,
    capacity: u64,
}

impl Narrow {
    /// `limit`'s figures, if its full bucket fits 64 bits of units.
    pub(crate) const fn of(limit: Limit) -> Option<Self> {
        let capacity = limit.capacity();
        if capacity > u64::MAX as u128 {
            return None;
        }
        Some(Self {
            amount: limit.amount(),
            period: limit.period_nanos(),
            burst: limit.burst(),
            // Lossless: checked just above.
            capacity: capacity as u64,
        })
    }

    /// Each dimension of `quota` as [`Narrow`]: `None` where it is unlimited, or too wide.
    pub(crate) const fn dimensions(quota: &Quota) -> [Option<Self>; 2] {
        let [requests, units] = quota.dimensions();
        [Self::of_dimension(requests), Self::of_dimension(units)]
    }

    /// [`of`](Self::of) a dimension that may be unlimited.
    const fn of_dimension(limit: Option<Limit>) -> Option<Self> {
        match limit {
            Some(limit) => Self::of(limit),
            None => None,
        }
    }

    /// [`refilled`] in 64 bits: the same count. If `amount × elapsed` overflows, the exact sum
    /// exceeds 2^64 and so the capacity, which is what both give.
    #[inline(always)]
    fn refilled(self, tokens: u64, elapsed: u64) -> u64 {
        tokens
            .saturating_add(self.amount.saturating_mul(elapsed))
            .min(self.capacity)
    }

    /// [`dimension_wait`] in 64 bits: the same wait. `cost ≤ burst` makes `cost × period` at most
    /// the capacity, so it fits, and so does the quotient.
    #[inline(always)]
    fn wait(self, tokens: u64, cost: u64) -> Wait {
        if cost > self.burst {
            return Wait::Never;
        }
        let need = cost.saturating_mul(self.period);
        if need <= tokens {
            return Wait::Nanos(0);
        }
        if self.amount == 0 {
            return Wait::Never;
        }
        Wait::Nanos((need - tokens).div_ceil(self.amount))
    }
}

/// [`admit`] of one bucket under a quota whose limited dimensions are all [`Narrow`] (`limits`,
/// `None` where unlimited), with no overall bucket: the same wait and the same counts, in 64-bit
/// arithmetic on the bucket's packed counts (`tokens`, `last`) in place. This is every check of
/// a keyed bucket unless its quota is wide or an overall quota is set; the `u128` path it skips
/// was a fifth of a hot-key check's instructions.
#[inline(always)]
pub(crate) fn admit_narrow(
    tokens: &mut [u64; 2],
    last: &mut u64,
    limits: &[Option<Narrow>; 2],
    now: u64,
    costs: [u64; 2],
) -> Wait {
    let elapsed = now.saturating_sub(*last);
    if elapsed > 0 {
        *last = now;
        for (tokens, limit) in tokens.iter_mut().zip(limits) {
            if let Some(limit) = limit {
                *tokens = limit.refilled(*tokens, elapsed);
            }
        }
    }
    let mut wait = Wait::Nanos(0);
    for ((tokens, limit), cost) in tokens.iter().zip(limits).zip(costs) {
        if let Some(limit) = limit {
            wait = wait.max(limit.wait(*tokens, cost));
        }
    }
    if wait == Wait::Nanos(0) {
        for ((tokens, limit), cost) in tokens.iter_mut().zip(limits).zip(costs) {
            if let Some(limit) = limit {
                // Fits (see `Narrow::wait`), and never saturates: the wait said it fits.
                *tokens = tokens.saturating_sub(cost.saturating_mul(limit.period));
            }
        }
    }
    wait
}

/// A bucket's state and the quota in force for it, for one [`admit`].
pub(crate) type Governed<'a> = (&'a mut State, &'a Quota);

/// Admits `costs` against `own` and, when given, `overall`, both refilled to `now`: all or
/// nothing. The wait is the longest over every limited dimension of both buckets.
///
/// Always inlined: it is the body of every check (see `Limiter::admit_with_overall`).
#[inline(always)]
pub(crate) fn admit(
    own: Governed<'_>,
    overall: Option<Governed<'_>>,
    now: u64,
    costs: [u64; 2],
) -> Wait {
    let (own, own_quota) = own;
    own.refill(own_quota, now);
    match overall {
        None => {
            let wait = own.wait(own_quota, costs);
            if wait == Wait::Nanos(0) {
                own.take(own_quota, costs);
            }
            wait
        }
        Some((overall, overall_quota)) => {
            overall.refill(overall_quota, now);
            let wait = own
                .wait(own_quota, costs)
                .max(overall.wait(overall_quota, costs));
            if wait == Wait::Nanos(0) {
                own.take(own_quota, costs);
                overall.take(overall_quota, costs);
            }
            wait
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const SEC: u64 = 1_000_000_000;

    fn requests(rate: u64, burst: u64) -> Quota {
        Quota::new(Some(Limit::per_second(rate, burst)), None)
    }

    /// Admits against one bucket of `quota`.
    fn one(state: &mut State, quota: &Quota, now: u64, costs: [u64; 2]) -> Wait {
        admit((state, quota), None, now, costs)
    }

    #[test]
    fn refills_exactly_amount_per_nanosecond() {
        let q = requests(3, 3);
        let mut state = State::full(&q, 0);
        for _ in 0..3 {
            assert_eq!(one(&mut state, &q, 0, [1, 0]), Wait::Nanos(0));
        }
        // 1 token = 1e9 units, refilled at 3 units/ns: ⌈1e9 / 3⌉ = 333_333_334 ns.
        assert_eq!(one(&mut state, &q, 0, [1, 0]), Wait::Nanos(333_333_334));
        assert_eq!(one(&mut state, &q, 333_333_333, [1, 0]), Wait::Nanos(1));
        assert_eq!(one(&mut state, &q, 333_333_334, [1, 0]), Wait::Nanos(0));
    }

    #[test]
    fn a_stale_clock_reading_adds_nothing() {
        let q = requests(1, 1);
        let mut state = State::full(&q, 0);
        assert_eq!(one(&mut state, &q, 5 * SEC, [1, 0]), Wait::Nanos(0));
        assert_eq!(one(&mut state, &q, 4 * SEC, [1, 0]), Wait::Nanos(SEC));
        assert_eq!(state.last, 5 * SEC);
    }

    #[test]
    fn cost_above_burst_is_never() {
        let q = Quota::new(None, Some(Limit::per_second(10, 5)));
        let state = State::full(&q, 0);
        assert_eq!(state.wait(&q, [1, 6]), Wait::Never);
        assert_eq!(state.wait(&q, [1, 5]), Wait::Nanos(0));
    }

    #[test]
    fn zero_rate_short_of_tokens_is_never() {
        let q = requests(0, 1);
        let mut state = State::full(&q, 0);
        assert_eq!(one(&mut state, &q, 0, [1, 0]), Wait::Nanos(0));
        assert_eq!(one(&mut state, &q, u64::MAX, [1, 0]), Wait::Never);
    }

    #[test]
    fn huge_waits_saturate() {
        let limit = Limit::new(1, Duration::from_nanos(u64::MAX), 2).unwrap();
        let q = Quota::new(Some(limit), None);
        let mut state = State::full(&q, 0);
        state.take(&q, [2, 0]);
        assert_eq!(state.wait(&q, [2, 0]), Wait::Nanos(u64::MAX));
    }

    #[test]
    fn refusal_by_overall_takes_nothing_from_own() {
        let (own_q, overall_q) = (requests(1, 5), requests(1, 1));
        let mut own = State::full(&own_q, 0);
        let mut overall = State::full(&overall_q, 0);
        let mut check = || {
            admit(
                (&mut own, &own_q),
                Some((&mut overall, &overall_q)),
                0,
                [1, 0],
            )
        };
        assert_eq!(check(), Wait::Nanos(0));
        assert_eq!(check(), Wait::Nanos(SEC));
        assert_eq!(own.tokens[0], 4 * u128::from(SEC));
    }

    #[test]
    fn new_quota_converts_and_caps_held_tokens() {
        let mut owned = Owned {
            quota: requests(1, 10),
            state: State::full(&requests(1, 10), 0),
        };
        owned.state.take(&owned.quota, [3, 0]);
        // 7 tokens held; a burst of 5 caps them.
        owned.set_quota(requests(1, 5), 0);
        assert_eq!(owned.state.tokens[0], 5 * u128::from(SEC));
        // Same 5 tokens in a period of 3 ns: 15 units.
        let limit = Limit::new(1, Duration::from_nanos(3), 100).unwrap();
        owned.set_quota(Quota::new(Some(limit), None), 0);
        assert_eq!(owned.state.tokens[0], 15);
        // Back to 1 s: ⌊15 × 1e9 / 3⌋.
        owned.set_quota(requests(1, 100), 0);
        assert_eq!(owned.state.tokens[0], 5 * u128::from(SEC));
    }

    #[test]
    fn newly_limited_dimension_starts_full() {
        let mut state = State::full(&Quota::UNLIMITED, 0);
        state.set_quota(&Quota::UNLIMITED, &requests(1, 4), 0);
        assert_eq!(state.wait(&requests(1, 4), [4, 0]), Wait::Nanos(0));
    }

    proptest::proptest! {
        /// The 64-bit path decides and counts exactly as the general one, wherever it applies.
        #[test]
        fn the_narrow_path_is_the_general_one(
            dims in proptest::collection::vec(
                proptest::option::of((0u64..=u64::MAX, 1u64..=u64::MAX, 0u64..=u64::MAX)), 2),
            fill in proptest::collection::vec(0u64..=u64::MAX, 2),
            last in 0u64..=u64::MAX,
            now in 0u64..=u64::MAX,
            costs in proptest::collection::vec(proptest::prop_oneof![0u64..4, 0u64..=u64::MAX], 2),
        ) {
            let limit = |d: Option<(u64, u64, u64)>| d.map(|(amount, period, burst)| {
                // Small bursts and periods as often as large ones: most of these fit 64 bits.
                let burst = burst % 1_000_000;
                let period = period % 4_000_000_000 + 1;
                Limit::new(amount % 1_000_000, Duration::from_nanos(period), burst).unwrap()
            });
            let quota = Quota::new(limit(dims[0]), limit(dims[1]));
            let limits = quota.dimensions().map(|d| d.and_then(Narrow::of));
            let all_narrow = quota.dimensions().iter().zip(&limits).all(|(d, n)| d.is_some() == n.is_some());
            proptest::prop_assume!(all_narrow);
            let capacities = quota.dimensions().map(|d| d.map_or(0, |l| l.capacity()));
            let start = [0, 1].map(|i| u128::from(fill[i]).min(capacities[i]));
            let mut state = State { tokens: start, last };
            let mut tokens = start.map(|t| t as u64);
            let mut narrow_last = last;
            let costs = [costs[0], costs[1]];
            let general = admit((&mut state, &quota), None, now, costs);
            let narrow = admit_narrow(&mut tokens, &mut narrow_last, &limits, now, costs);
            proptest::prop_assert_eq!(general, narrow);
            proptest::prop_assert_eq!(state.tokens, tokens.map(u128::from));
            proptest::prop_assert_eq!(state.last, narrow_last);
        }
    }

    #[test]
    fn conversion_rounds_down_without_overflow() {
        assert_eq!(convert(10, 3, 2), 6);
        assert_eq!(convert(u128::MAX, u64::MAX, u64::MAX), u128::MAX);
        assert_eq!(convert(7, 7, 1), 1);
    }
}
