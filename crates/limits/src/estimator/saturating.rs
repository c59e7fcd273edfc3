//! Saturating atomic counter arithmetic: a counter stops at `i64::MIN` or `i64::MAX` instead of
//! wrapping, the rule the Node binding and its TypeScript fallback share (the fallback's doubles
//! clamp to ±2^63).

use std::sync::atomic::{AtomicI64, Ordering};

/// Adds `value` to `counter`, saturating at the `i64` bounds; returns the new value.
///
/// The common case is one wrapping `fetch_add`. When that overflowed, it is undone (a wrapping
/// subtraction takes back exactly this add, whatever other threads added meanwhile) and redone
/// as a saturating compare-and-swap loop. In between, the counter holds the wrapped value: other
/// threads may read it, and another thread's `fetch_add` landing there sees no overflow of its
/// own, so the counter can stay wrapped. `Estimator`'s documentation states this limit; only a
/// compare-and-swap on every add would close it, and a load checked before the `fetch_add` would
/// only narrow it, at the cost of a second access to a contended line.
#[inline(always)]
pub(crate) fn add_saturating(counter: &AtomicI64, value: i64) -> i64 {
    // Relaxed: the add itself is atomic (no lost updates) and returns this counter's value;
    // nothing else is published through it.
    let old = counter.fetch_add(value, Ordering::Relaxed);
    match old.checked_add(value) {
        Some(new) => new,
        None => {
            counter.fetch_sub(value, Ordering::Relaxed);
            saturate(counter, |c| c.saturating_add(value))
        }
    }
}

/// Subtracts `value` from `counter`, saturating at the `i64` bounds, as [`add_saturating`] adds.
#[inline(always)]
pub(super) fn sub_saturating(counter: &AtomicI64, value: i64) {
    // Relaxed: as in add_saturating.
    let old = counter.fetch_sub(value, Ordering::Relaxed);
    if old.checked_sub(value).is_none() {
        counter.fetch_add(value, Ordering::Relaxed);
        saturate(counter, |c| c.saturating_sub(value));
    }
}

/// Subtracts up to `value` from `counter`, stopping at zero: a counter above zero drops by
/// `value` or to zero, whichever is less far; one at or below zero (a negative increment took it
/// there) is left as it is, as is every counter when `value` is not positive. Returns the value
/// the counter holds after the call.
///
/// A compare-and-swap loop ([`take_toward_zero`]), not a `fetch_sub`: the subtraction depends on
/// the value it replaces, so two refunds racing for one count take it once between them, where a
/// read followed by a subtraction took it twice and left the counter below zero.
#[inline]
pub(super) fn refund_to_zero(counter: &AtomicI64, value: i64) -> i64 {
    // A value that is not positive takes nothing; a positive one, only from a counter above zero.
    let (previous, taken) = take_toward_zero(counter, value.max(0));
    previous - taken
}

/// Takes up to `value` out of `counter` toward zero, never past it: a positive `value` from a
/// counter above zero, a negative one from a counter below zero, nothing when their signs differ.
/// Returns the value the counter held before and what was taken, so that the counter holds the
/// difference.
///
/// A compare-and-swap loop: what is taken depends on the value it replaces, so threads racing to
/// take from one counter never take more than it held between them.
#[inline]
pub(super) fn take_toward_zero(counter: &AtomicI64, value: i64) -> (i64, i64) {
    // `value` clamped between 0 and `c`: `c - taken` lies between 0 and `c`, so cannot overflow.
    let taken = |c: i64| value.clamp(c.min(0), c.max(0));
    // Relaxed both ways, as in add_saturating: each step updates this counter alone and publishes
    // nothing else. `fetch_update` retries on the value another thread stored meanwhile, so each
    // step takes from what it replaces; `Err` carries a counter left as it was.
    match counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| {
        Some(c - taken(c)).filter(|&after| after != c)
    }) {
        Ok(previous) => (previous, taken(previous)),
        Err(unchanged) => (unchanged, 0),
    }
}

/// Applies `f` to `counter` in a compare-and-swap loop; returns the value stored.
#[cold]
fn saturate(counter: &AtomicI64, f: impl Fn(i64) -> i64) -> i64 {
    // Relaxed both ways: each step is a plain counter update, as in add_saturating. The closure
    // always returns `Some`, so the update cannot fail; both arms carry the previous value.
    let (Ok(previous) | Err(previous)) =
        counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| Some(f(c)));
    f(previous)
}

#[cfg(test)]
mod tests {
    use super::take_toward_zero;
    use crate::estimator::Estimator;
    use std::sync::atomic::{AtomicI64, Ordering};

    #[test]
    fn taking_toward_zero_never_passes_it_from_either_side() {
        // (counter, value) -> (counter after, taken)
        for (start, value, after, taken) in [
            (5, 3, 2, 3),
            (5, 9, 0, 5),
            (5, -3, 5, 0),
            (-5, -3, -2, -3),
            (-5, -9, 0, -5),
            (-5, 3, -5, 0),
            (0, 4, 0, 0),
            (i64::MIN, i64::MIN, 0, i64::MIN),
            (i64::MAX, i64::MIN, i64::MAX, 0),
        ] {
            let counter = AtomicI64::new(start);
            assert_eq!(take_toward_zero(&counter, value), (start, taken));
            assert_eq!(
                counter.load(Ordering::Relaxed),
                after,
                "{start} take {value}"
            );
        }
    }

    #[test]
    fn counters_saturate_instead_of_wrapping() {
        let sketch = || Estimator::with_seed(2, 4, 0).unwrap();
        let up = sketch();
        up.incr("a", isize::MAX);
        assert_eq!(up.incr("a", 1), isize::MAX);
        assert_eq!(up.incr("a", -1), isize::MAX - 1);
        let down = sketch();
        down.decr("b", isize::MAX);
        down.decr("b", isize::MAX);
        assert_eq!(down.get("b"), isize::MIN);
        let negated = sketch();
        negated.decr("c", isize::MIN);
        assert_eq!(negated.get("c"), isize::MAX);
        let merged = sketch();
        merged.incr("a", isize::MAX - 1);
        let other = sketch();
        other.incr("a", 5);
        merged.merge(&other).unwrap();
        assert_eq!(merged.get("a"), isize::MAX);
    }

    #[test]
    fn refunds_stop_each_counter_at_zero_and_leave_negative_ones() {
        // Four keys in 4 × 1024 counters, none sharing all its counters with another (seed 0).
        let sketch = Estimator::with_seed(4, 1024, 0).unwrap();
        sketch.incr("a", 5);
        assert_eq!(sketch.refund("a", 3), 2);
        assert_eq!(sketch.refund("a", 10), 0);
        assert_eq!(sketch.get("a"), 0);
        sketch.incr("b", -4);
        assert_eq!(sketch.refund("b", 2), -4);
        sketch.incr("c", isize::MAX);
        assert_eq!(sketch.refund("c", isize::MAX), 0);
        sketch.incr("d", 3);
        assert_eq!(sketch.refund("d", 0), 3);
        assert_eq!(sketch.refund("d", -7), 3, "a negative refund takes nothing");
    }
}
