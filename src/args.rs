//! Numeric arguments from JavaScript to Rust, validated: JavaScript numbers are `f64`, so a
//! size, count or time arrives as a double that may be fractional, negative, NaN or huge.
//! napi's own integer getters would wrap or truncate those silently.

use crate::error::{Failure, Result};
use keepcount_limits::Shape;
use napi::bindgen_prelude::BigInt;

/// The largest integer a `number` represents exactly (`Number.MAX_SAFE_INTEGER`).
const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

/// An integer in `[min, max]` (both at most 2^53), or a `RangeError` naming `what`.
#[inline]
pub(crate) fn integer(what: &str, value: f64, min: u64, max: u64) -> Result<u64> {
    // NaN fails the comparisons; within [0, 2^53] a double is an integer exactly when it survives
    // a round trip through u64 (`fract()` calls libm's `trunc`, this is two instructions).
    if value >= min as f64 && value <= max as f64 && value as u64 as f64 == value {
        // Exact: an integer within [0, 2^53].
        Ok(value as u64)
    } else {
        Err(not_in_range(what, min, max))
    }
}

/// The error of [`integer`], out of line: formatting it is no part of the hot path.
#[cold]
fn not_in_range(what: &str, min: u64, max: u64) -> Failure {
    Failure::out_of_range(what, &format!("an integer in [{min}, {max}]"))
}

/// A sketch dimension (`hashes` or `slots`) as a `usize`; `Shape` checks the limits.
pub(crate) fn dimension(what: &str, value: f64) -> Result<usize> {
    // u32::MAX bounds it on every target; the shape limits are far lower.
    integer(what, value, 1, u64::from(u32::MAX)).map(|n| n as usize)
}

/// The sketch shape of the `hashes` and `slots` arguments: each a dimension, then the pair within
/// the format's limits (docs/format.md §4).
pub(crate) fn shape(hashes: f64, slots: f64) -> Result<Shape> {
    let hashes = dimension("The \"hashes\" argument", hashes)?;
    let slots = dimension("The \"slots\" argument", slots)?;
    Ok(Shape::new(hashes, slots)?)
}

/// A count (`value`, `events`): a safe integer, negative allowed, as `isize`.
#[inline]
pub(crate) fn count(what: &str, value: f64) -> Result<isize> {
    // Integral exactly when it survives a round trip through i64 (see `integer`).
    if value.abs() <= MAX_SAFE_INTEGER && value as i64 as f64 == value {
        // Exact on 64-bit targets; isize is 64 bits on every target the package ships for.
        Ok(value as isize)
    } else {
        Err(Failure::out_of_range(what, "a safe integer"))
    }
}

/// A refund's events: a safe integer >= 0 (what `count` takes, but not below zero).
pub(crate) fn refund(what: &str, value: f64) -> Result<isize> {
    // NaN fails the comparisons; integral exactly when it survives a round trip (see `integer`).
    if (0.0..=MAX_SAFE_INTEGER).contains(&value) && value as i64 as f64 == value {
        // Exact: an integer within [0, 2^53), and isize is 64 bits on every target shipped.
        Ok(value as isize)
    } else {
        Err(Failure::out_of_range(what, "a safe integer >= 0"))
    }
}

/// Elapsed whole milliseconds (`nowMs`): a safe integer >= 0.
#[inline]
pub(crate) fn millis(what: &str, value: f64) -> Result<u64> {
    integer(what, value, 0, MAX_SAFE_INTEGER as u64)
}

/// A seed: a bigint in `[0, 2^64)`.
pub(crate) fn seed(value: &BigInt) -> Result<u64> {
    match value.get_u64() {
        (false, seed, true) => Ok(seed),
        _ => Err(Failure::out_of_range(
            "The \"seed\" argument",
            "a bigint in [0, 2^64)",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_are_range_checked_and_whole() {
        assert_eq!(integer("n", 3.0, 1, 5).ok(), Some(3));
        for bad in [0.0, 6.0, 2.5, -1.0, 4.000001, f64::NAN, f64::INFINITY] {
            assert!(integer("n", bad, 1, 5).is_err());
        }
    }

    #[test]
    fn counts_are_safe_integers_of_either_sign() {
        assert_eq!(count("v", -5.0).ok(), Some(-5));
        assert!(count("v", 1e300).is_err());
        assert!(count("v", f64::NAN).is_err());
        assert!(count("v", -0.5).is_err());
        assert_eq!(count("v", -0.0).ok(), Some(0));
    }

    #[test]
    fn seeds_are_u64() {
        let ok = BigInt {
            sign_bit: false,
            words: vec![u64::MAX],
        };
        assert_eq!(seed(&ok).ok(), Some(u64::MAX));
        let negative = BigInt {
            sign_bit: true,
            words: vec![1],
        };
        assert!(seed(&negative).is_err());
        let wide = BigInt {
            sign_bit: false,
            words: vec![0, 1],
        };
        assert!(seed(&wide).is_err());
    }
}
