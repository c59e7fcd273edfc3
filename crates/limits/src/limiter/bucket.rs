//! One token bucket: a small mutex around integer token counts and the time of the last refill.
//!
//! Tokens are kept in *units*: one token of a [`Limit`] is `period` units (its period in
//! nanoseconds), so the refill of `amount` tokens per `period` is exactly `amount` units per
//! nanosecond, and no refill ever rounds. A mutex rather than a CAS loop on packed atomics: the
//! state is two `u128` counts and a timestamp (40 bytes), a check touches up to two buckets that
//! must change together or not at all, and an uncontended `parking_lot` lock is one CAS to take
//! and one to release, the same price as a single-word CAS loop.

use parking_lot::{Mutex, MutexGuard};

use super::decision::Wait;
use super::quota::{Limit, Quota};

/// A token bucket shared by every check on its key (or on the best-effort or overall quota).
///
/// # Thread safety
/// All state sits behind one `parking_lot` mutex, held for a few dozen instructions of integer
/// arithmetic and never while calling out of this module.
#[derive(Debug)]
pub(crate) struct Bucket {
    state: Mutex<State>,
}

impl Bucket {
    /// A bucket holding a full burst of every dimension of `quota`, refilled as of `now`.
    pub(crate) fn full(quota: Quota, now: u64) -> Self {
        Self {
            state: Mutex::new(State::full(quota, now)),
        }
    }

    /// Exclusive access to the state.
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }
}

/// The counts of one bucket.
#[derive(Debug)]
pub(crate) struct State {
    quota: Quota,
    /// Held tokens per dimension in units (`tokens × period`), requests first; 0 for an
    /// unlimited dimension. Never above that dimension's capacity.
    tokens: [u128; 2],
    /// Clock reading of the latest refill; never decreases.
    last: u64,
}

impl State {
    fn full(quota: Quota, now: u64) -> Self {
        Self {
            quota,
            tokens: quota.dimensions().map(|d| d.map_or(0, |l| l.capacity())),
            last: now,
        }
    }

    /// The quota in force.
    pub(crate) fn quota(&self) -> Quota {
        self.quota
    }

    /// Adds what accrued since the last refill: `amount × (now − last)` units per dimension,
    /// capped at the capacity. A `now` older than `last` (a caller that read the clock before
    /// another thread refilled) adds nothing and leaves `last` alone, so the total ever added is
    /// at most `amount × (latest reading − creation)`.
    pub(crate) fn refill(&mut self, now: u64) {
        let elapsed = now.saturating_sub(self.last);
        if elapsed == 0 {
            return;
        }
        self.last = now;
        for (tokens, limit) in self.tokens.iter_mut().zip(self.quota.dimensions()) {
            if let Some(limit) = limit {
                // amount < 2^64 and elapsed < 2^64, so the product fits a u128; the sum may not.
                let accrued = limit.units_per_nano() * u128::from(elapsed);
                *tokens = tokens.saturating_add(accrued).min(limit.capacity());
            }
        }
    }

    /// How long until `costs` (requests, units) fit, with no refill beyond the current one.
    pub(crate) fn wait(&self, costs: [u64; 2]) -> Wait {
        let mut wait = Wait::Nanos(0);
        for ((tokens, limit), cost) in self.tokens.iter().zip(self.quota.dimensions()).zip(costs) {
            if let Some(limit) = limit {
                wait = wait.max(dimension_wait(*tokens, limit, cost));
            }
        }
        wait
    }

    /// Takes `costs` (requests, units). Only called after [`wait`](Self::wait) said they fit, so
    /// the subtraction never saturates; saturating keeps it panic-free all the same.
    pub(crate) fn take(&mut self, costs: [u64; 2]) {
        for ((tokens, limit), cost) in self
            .tokens
            .iter_mut()
            .zip(self.quota.dimensions())
            .zip(costs)
        {
            if let Some(limit) = limit {
                *tokens = tokens.saturating_sub(limit.units(cost));
            }
        }
    }

    /// Puts `quota` in force as of `now`: first refills at the old rates up to `now`, then per
    /// dimension keeps the held tokens (converted to the new period, rounding down, and capped at
    /// the new burst); a dimension that was unlimited starts full, one that becomes unlimited
    /// drops its count.
    pub(crate) fn set_quota(&mut self, quota: Quota, now: u64) {
        self.refill(now);
        for ((tokens, old), new) in self
            .tokens
            .iter_mut()
            .zip(self.quota.dimensions())
            .zip(quota.dimensions())
        {
            *tokens = match (old, new) {
                (Some(old), Some(new)) => {
                    convert(*tokens, old.period_nanos(), new.period_nanos()).min(new.capacity())
                }
                (None, Some(new)) => new.capacity(),
                (_, None) => 0,
            };
        }
        self.quota = quota;
    }
}

/// The wait of one dimension holding `tokens` units for a cost of `cost` tokens:
/// never if `cost > burst`, none if `cost × period ≤ tokens`, never if `amount` is 0, otherwise
/// `⌈(cost × period − tokens) / amount⌉` nanoseconds, capped at `u64::MAX`.
fn dimension_wait(tokens: u128, limit: Limit, cost: u64) -> Wait {
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

/// Admits `costs` against `own` and, when given, `overall`, both refilled to `now`: all or
/// nothing. The wait is the longest over every limited dimension of both buckets.
pub(crate) fn admit(
    own: &mut State,
    overall: Option<&mut State>,
    now: u64,
    costs: [u64; 2],
) -> Wait {
    own.refill(now);
    match overall {
        None => {
            let wait = own.wait(costs);
            if wait == Wait::Nanos(0) {
                own.take(costs);
            }
            wait
        }
        Some(overall) => {
            overall.refill(now);
            let wait = own.wait(costs).max(overall.wait(costs));
            if wait == Wait::Nanos(0) {
                own.take(costs);
                overall.take(costs);
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

    #[test]
    fn refills_exactly_amount_per_nanosecond() {
        let mut state = State::full(requests(3, 3), 0);
        for _ in 0..3 {
            assert_eq!(admit(&mut state, None, 0, [1, 0]), Wait::Nanos(0));
        }
        // 1 token = 1e9 units, refilled at 3 units/ns: ⌈1e9 / 3⌉ = 333_333_334 ns.
        assert_eq!(admit(&mut state, None, 0, [1, 0]), Wait::Nanos(333_333_334));
        assert_eq!(admit(&mut state, None, 333_333_333, [1, 0]), Wait::Nanos(1));
        assert_eq!(admit(&mut state, None, 333_333_334, [1, 0]), Wait::Nanos(0));
    }

    #[test]
    fn a_stale_clock_reading_adds_nothing() {
        let mut state = State::full(requests(1, 1), 0);
        assert_eq!(admit(&mut state, None, 5 * SEC, [1, 0]), Wait::Nanos(0));
        assert_eq!(admit(&mut state, None, 4 * SEC, [1, 0]), Wait::Nanos(SEC));
        assert_eq!(state.last, 5 * SEC);
    }

    #[test]
    fn cost_above_burst_is_never() {
        let state = State::full(Quota::new(None, Some(Limit::per_second(10, 5))), 0);
        assert_eq!(state.wait([1, 6]), Wait::Never);
        assert_eq!(state.wait([1, 5]), Wait::Nanos(0));
    }

    #[test]
    fn zero_rate_short_of_tokens_is_never() {
        let mut state = State::full(requests(0, 1), 0);
        assert_eq!(admit(&mut state, None, 0, [1, 0]), Wait::Nanos(0));
        assert_eq!(admit(&mut state, None, u64::MAX, [1, 0]), Wait::Never);
    }

    #[test]
    fn huge_waits_saturate() {
        let limit = Limit::new(1, Duration::from_nanos(u64::MAX), 2).unwrap();
        let mut state = State::full(Quota::new(Some(limit), None), 0);
        state.take([2, 0]);
        assert_eq!(state.wait([2, 0]), Wait::Nanos(u64::MAX));
    }

    #[test]
    fn refusal_by_overall_takes_nothing_from_own() {
        let mut own = State::full(requests(1, 5), 0);
        let mut overall = State::full(requests(1, 1), 0);
        assert_eq!(
            admit(&mut own, Some(&mut overall), 0, [1, 0]),
            Wait::Nanos(0)
        );
        assert_eq!(
            admit(&mut own, Some(&mut overall), 0, [1, 0]),
            Wait::Nanos(SEC)
        );
        assert_eq!(own.tokens[0], 4 * u128::from(SEC));
    }

    #[test]
    fn new_quota_converts_and_caps_held_tokens() {
        let mut state = State::full(requests(1, 10), 0);
        state.take([3, 0]);
        // 7 tokens held; a burst of 5 caps them.
        state.set_quota(requests(1, 5), 0);
        assert_eq!(state.tokens[0], 5 * u128::from(SEC));
        // Same 5 tokens in a period of 3 ns: 15 units.
        let limit = Limit::new(1, Duration::from_nanos(3), 100).unwrap();
        state.set_quota(Quota::new(Some(limit), None), 0);
        assert_eq!(state.tokens[0], 15);
        // Back to 1 s: ⌊15 × 1e9 / 3⌋.
        state.set_quota(requests(1, 100), 0);
        assert_eq!(state.tokens[0], 5 * u128::from(SEC));
    }

    #[test]
    fn newly_limited_dimension_starts_full() {
        let mut state = State::full(Quota::UNLIMITED, 0);
        state.set_quota(requests(1, 4), 0);
        assert_eq!(state.wait([4, 0]), Wait::Nanos(0));
    }

    #[test]
    fn conversion_rounds_down_without_overflow() {
        assert_eq!(convert(10, 3, 2), 6);
        assert_eq!(convert(u128::MAX, u64::MAX, u64::MAX), u128::MAX);
        assert_eq!(convert(7, 7, 1), 1);
    }
}
