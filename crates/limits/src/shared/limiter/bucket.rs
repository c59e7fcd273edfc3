//! A `SharedLimiter` bucket's words: one 16-byte word per limited dimension (requests, units),
//! its refill time in the high 64 bits and the tokens it lacks in the low 64 (so a zeroed word is
//! a full bucket), changed only by 128-bit compare-and-swap. A check takes from every limited
//! dimension or from none. The arithmetic is the local limiter's; the module docs of
//! `shared/limiter.rs` give the guarantees.

use super::SharedLimiter;
use crate::clock::Clock;
use crate::limiter::{Limit, Quota, Wait, dimension_wait, refilled};
use crate::shared::OTHER_CLOCK_NANOS;
use portable_atomic::AtomicU128;
use std::sync::atomic::Ordering;

/// Bits of a bucket word below its refill time: the tokens the dimension lacks.
const LACK_BITS: u32 = 64;

impl<C: Clock> SharedLimiter<C> {
    /// Admits `costs` (requests, units) against the bucket at `offset` under `quota` at `now`:
    /// all limited dimensions or none.
    pub(super) fn admit(&self, offset: usize, quota: &Quota, now: u64, costs: [u64; 2]) -> Wait {
        let limits = quota.dimensions();
        let word = |dimension: usize| self.segment.wide_word(offset + 16 * dimension);
        // Look first: a refused check writes nothing, so a flood of refusals only reads.
        let mut wait = Wait::Nanos(0);
        for (dimension, limit) in limits.iter().enumerate() {
            if let Some(limit) = *limit {
                // Acquire: pairs with the Release of the CAS that wrote the word.
                let (_, tokens) = refill(word(dimension).load(Ordering::Acquire), limit, now);
                wait = wait.max(dimension_wait(tokens, limit, costs[dimension]));
            }
        }
        if wait != Wait::Nanos(0) {
            return wait;
        }
        for (dimension, limit) in limits.iter().enumerate() {
            if let Some(limit) = *limit
                && let Err(wait) = take(word(dimension), limit, now, costs[dimension])
            {
                // A concurrent check got there first: give back what the earlier dimensions took.
                for (earlier, limit) in limits.iter().enumerate().take(dimension) {
                    if let Some(limit) = *limit {
                        give_back(word(earlier), limit, costs[earlier]);
                    }
                }
                return wait;
            }
        }
        Wait::Nanos(0)
    }
}

impl<C: Clock> SharedLimiter<C> {
    /// Whether every limited dimension of a key's bucket at `offset` holds a full bucket at `now`:
    /// the state a new key's bucket starts in, so the entry may go to another key.
    pub(super) fn is_full(&self, offset: usize, now: u64) -> bool {
        let limits = self.block.quota.dimensions();
        limits.iter().enumerate().all(|(dimension, limit)| {
            (*limit).is_none_or(|limit| {
                // Acquire: as in `admit`.
                let word = self.segment.wide_word(offset + 16 * dimension);
                refill(word.load(Ordering::Acquire), limit, now).1 == limit.capacity()
            })
        })
    }
}

/// A bucket word's refill time and held tokens (units) after refilling to `now`: as the local
/// limiter's `State::refill`, a reading older than the word's counts no time.
///
/// A word more than [`OTHER_CLOCK_NANOS`] ahead was written on another clock: a segment kept
/// from another boot (in a directory that survives reboots), whose monotonic clock had run
/// longer. The time since is unknown, and at least a reboot long: the bucket counts as full from
/// `now`, as a rate's interval from another boot counts as stale. Kept as it was, it would refill
/// nothing until the new clock caught up (the old boot's uptime): a spent client refused all
/// along, and an entry never full enough to go to a new key. (A process stopped for over a second
/// between reading the clock and reaching the word takes it for full too: one burst, once.)
pub(super) fn refill(word: u128, limit: Limit, now: u64) -> (u64, u128) {
    let last = (word >> LACK_BITS) as u64;
    let lack = u128::from(word as u64);
    // A lack above the capacity is impossible (every word written is encoded below); saturating
    // keeps a damaged word from panicking.
    let tokens = limit.capacity().saturating_sub(lack);
    match now.checked_sub(last) {
        Some(0) => (last, tokens),
        Some(elapsed) => (now, refilled(tokens, limit, elapsed)),
        None if last - now > OTHER_CLOCK_NANOS => (now, limit.capacity()),
        None => (last, tokens),
    }
}

/// The word of a dimension refilled at `last` holding `tokens` (at most the capacity, which is
/// below 2^64: checked when the segment is opened).
fn encode(last: u64, tokens: u128, limit: Limit) -> u128 {
    let lack = limit.capacity() - tokens;
    (u128::from(last) << LACK_BITS) | lack
}

/// Takes `cost` from one dimension at `now` by compare-and-swap, or says how long it must wait.
pub(super) fn take(word: &AtomicU128, limit: Limit, now: u64, cost: u64) -> Result<(), Wait> {
    // Acquire: pairs with the Release of the CAS that wrote it.
    let mut seen = word.load(Ordering::Acquire);
    loop {
        let (last, tokens) = refill(seen, limit, now);
        let wait = dimension_wait(tokens, limit, cost);
        if wait != Wait::Nanos(0) {
            return Err(wait);
        }
        let next = encode(last, tokens - limit.units(cost), limit);
        // AcqRel: Release publishes the new state; Acquire (also on failure) reads the state
        // another process wrote, which the next round starts from.
        match word.compare_exchange_weak(seen, next, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Ok(()),
            Err(current) => seen = current,
        }
    }
}

/// Returns `cost` to one dimension that [`take`] took it from, capped at a full bucket; the refill
/// time stays.
pub(super) fn give_back(word: &AtomicU128, limit: Limit, cost: u64) {
    // The cost fit a full bucket, so its units are below 2^64.
    let units = limit.units(cost);
    // AcqRel/Acquire: as in `take`. The closure never declines, so the result is always Ok.
    let _ = word.fetch_update(Ordering::AcqRel, Ordering::Acquire, |seen| {
        let lack = u128::from(seen as u64).saturating_sub(units);
        Some((seen >> LACK_BITS << LACK_BITS) | lack)
    });
}
