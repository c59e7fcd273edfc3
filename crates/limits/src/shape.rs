//! The shape of a count-min sketch: `hashes` rows × `slots` columns, within the limits of
//! [format §4].
//!
//! [format §4]: https://github.com/keepcount/keepcount/blob/main/docs/format.md

use std::fmt;

/// Most rows a sketch may have. 32 rows push the failure probability to `e^-32` ≈ 1.3e-14;
/// more only cost lookups.
pub const MAX_HASHES: usize = 32;

/// Most counters (`hashes × slots`) a sketch may have: 2^27 counters of 8 bytes = 1 GiB.
pub const MAX_COUNTERS: usize = 1 << 27;

/// A validated sketch shape: `1 <= hashes <= 32`, `1 <= slots`, `hashes × slots <= 2^27`.
///
/// ```
/// use keepcount_limits::Shape;
/// let shape = Shape::new(4, 8192).unwrap();
/// assert_eq!(shape.counters(), 32768);
/// assert!(Shape::new(0, 8).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shape {
    hashes: u32,
    slots: u32,
}

impl Shape {
    /// A shape of `hashes` rows × `slots` columns, or why it is outside the limits.
    ///
    /// ```
    /// use keepcount_limits::{Shape, ShapeError};
    /// assert_eq!(Shape::new(4, 0), Err(ShapeError::ZeroSlots));
    /// assert_eq!(Shape::new(33, 1), Err(ShapeError::Hashes(33)));
    /// assert!(matches!(Shape::new(32, 1 << 23), Err(ShapeError::TooManyCounters { .. })));
    /// ```
    pub fn new(hashes: usize, slots: usize) -> Result<Self, ShapeError> {
        if !(1..=MAX_HASHES).contains(&hashes) {
            return Err(ShapeError::Hashes(hashes));
        }
        if slots == 0 {
            return Err(ShapeError::ZeroSlots);
        }
        match hashes.checked_mul(slots) {
            Some(counters) if counters <= MAX_COUNTERS => Ok(Self {
                // Both fit in u32: hashes <= 32 and slots <= counters <= 2^27.
                hashes: hashes as u32,
                slots: slots as u32,
            }),
            _ => Err(ShapeError::TooManyCounters { hashes, slots }),
        }
    }

    /// The nearest valid shape: `hashes` clamped to `1..=32`, then `slots` clamped to
    /// `1..=2^27 / hashes`. This is what the pingora-compatible infallible constructors use.
    ///
    /// ```
    /// use keepcount_limits::Shape;
    /// assert_eq!(Shape::clamped(0, 0), Shape::new(1, 1).unwrap());
    /// assert_eq!(Shape::clamped(100, usize::MAX), Shape::new(32, 1 << 22).unwrap());
    /// ```
    pub fn clamped(hashes: usize, slots: usize) -> Self {
        let hashes = hashes.clamp(1, MAX_HASHES);
        let slots = slots.clamp(1, MAX_COUNTERS / hashes);
        Self {
            // Both fit in u32 after clamping.
            hashes: hashes as u32,
            slots: slots as u32,
        }
    }

    /// The shape whose estimates exceed the true count by more than `epsilon × N` (N = total of
    /// all increments) with probability at most `delta` (Cormode & Muthukrishnan):
    /// `slots = ⌈e / epsilon⌉`, `hashes = ⌈ln(1 / delta)⌉`.
    ///
    /// Both bounds must be finite and strictly between 0 and 1, and the result within the limits.
    ///
    /// ```
    /// use keepcount_limits::Shape;
    /// let shape = Shape::from_error_bounds(0.001, 0.01).unwrap();
    /// assert_eq!((shape.hashes(), shape.slots()), (5, 2719));
    /// assert!(Shape::from_error_bounds(0.0, 0.01).is_err());
    /// assert!(Shape::from_error_bounds(0.1, f64::NAN).is_err());
    /// ```
    pub fn from_error_bounds(epsilon: f64, delta: f64) -> Result<Self, ShapeError> {
        // Written so that NaN fails the test too.
        if !(epsilon > 0.0 && epsilon < 1.0) {
            return Err(ShapeError::Epsilon(epsilon));
        }
        if !(delta > 0.0 && delta < 1.0) {
            return Err(ShapeError::Delta(delta));
        }
        let slots = (std::f64::consts::E / epsilon).ceil();
        let hashes = (1.0 / delta).ln().ceil();
        // Float-to-int `as` saturates, so absurd values become usize::MAX and are refused below.
        Self::new(hashes as usize, slots as usize)
    }

    /// Rows: how many counters each operation touches.
    ///
    /// ```
    /// assert_eq!(keepcount_limits::Shape::new(4, 8).unwrap().hashes(), 4);
    /// ```
    #[inline]
    pub const fn hashes(self) -> usize {
        self.hashes as usize
    }

    /// Columns per row.
    ///
    /// ```
    /// assert_eq!(keepcount_limits::Shape::new(4, 8).unwrap().slots(), 8);
    /// ```
    #[inline]
    pub const fn slots(self) -> usize {
        self.slots as usize
    }

    /// `hashes × slots`, at most [`MAX_COUNTERS`].
    ///
    /// ```
    /// assert_eq!(keepcount_limits::Shape::new(4, 8).unwrap().counters(), 32);
    /// ```
    #[inline]
    pub const fn counters(self) -> usize {
        self.hashes as usize * self.slots as usize
    }
}

/// Why a sketch shape (or the bounds it is computed from) was refused.
///
/// ```
/// use keepcount_limits::{Shape, ShapeError};
/// let err = Shape::new(0, 8).unwrap_err();
/// assert_eq!(err.to_string(), "hashes must be between 1 and 32, got 0");
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum ShapeError {
    /// `hashes` is 0 or more than [`MAX_HASHES`].
    Hashes(usize),
    /// `slots` is 0.
    ZeroSlots,
    /// `hashes × slots` is more than [`MAX_COUNTERS`].
    TooManyCounters {
        /// The rows asked for.
        hashes: usize,
        /// The columns asked for.
        slots: usize,
    },
    /// `epsilon` is not a finite number strictly between 0 and 1.
    Epsilon(f64),
    /// `delta` is not a finite number strictly between 0 and 1.
    Delta(f64),
    /// A caller-provided counter store does not hold exactly `hashes × slots` counters.
    StoreLength {
        /// `hashes × slots`.
        expected: usize,
        /// What the store holds.
        actual: usize,
    },
}

impl fmt::Display for ShapeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Hashes(hashes) => {
                write!(f, "hashes must be between 1 and {MAX_HASHES}, got {hashes}")
            }
            Self::ZeroSlots => f.write_str("slots must be at least 1, got 0"),
            Self::TooManyCounters { hashes, slots } => write!(
                f,
                "hashes × slots must be at most {MAX_COUNTERS} counters, got {hashes} × {slots}"
            ),
            Self::Epsilon(epsilon) => {
                write!(f, "epsilon must be strictly between 0 and 1, got {epsilon}")
            }
            Self::Delta(delta) => write!(f, "delta must be strictly between 0 and 1, got {delta}"),
            Self::StoreLength { expected, actual } => write!(
                f,
                "the counter store must hold hashes × slots = {expected} counters, it holds {actual}"
            ),
        }
    }
}

impl std::error::Error for ShapeError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_limits_exactly() {
        assert!(Shape::new(1, 1).is_ok());
        assert!(Shape::new(MAX_HASHES, MAX_COUNTERS / MAX_HASHES).is_ok());
        assert!(Shape::new(1, MAX_COUNTERS).is_ok());
    }

    #[test]
    fn rejects_out_of_range_shapes() {
        assert_eq!(Shape::new(0, 1), Err(ShapeError::Hashes(0)));
        assert_eq!(Shape::new(33, 1), Err(ShapeError::Hashes(33)));
        assert_eq!(Shape::new(1, 0), Err(ShapeError::ZeroSlots));
        assert_eq!(
            Shape::new(1, MAX_COUNTERS + 1),
            Err(ShapeError::TooManyCounters {
                hashes: 1,
                slots: MAX_COUNTERS + 1
            })
        );
        assert!(Shape::new(2, usize::MAX).is_err());
    }

    #[test]
    fn clamps_into_the_limits() {
        assert_eq!(Shape::clamped(0, 5), Shape::new(1, 5).unwrap());
        assert_eq!(Shape::clamped(4, 0), Shape::new(4, 1).unwrap());
        assert_eq!(Shape::clamped(4, usize::MAX).counters(), MAX_COUNTERS);
        assert_eq!(Shape::clamped(3, 8), Shape::new(3, 8).unwrap());
    }

    #[test]
    fn sizes_from_error_bounds() {
        let shape = Shape::from_error_bounds(0.01, 0.05).unwrap();
        assert_eq!(shape.slots(), 272); // ⌈2.71828… / 0.01⌉
        assert_eq!(shape.hashes(), 3); // ⌈ln 20⌉ = ⌈2.9957…⌉
        let loose = Shape::from_error_bounds(0.99, 0.99).unwrap();
        assert_eq!((loose.hashes(), loose.slots()), (1, 3));
    }

    #[test]
    fn rejects_bad_error_bounds() {
        for bad in [0.0, 1.0, -0.5, 2.0, f64::NAN, f64::INFINITY] {
            assert!(matches!(
                Shape::from_error_bounds(bad, 0.1),
                Err(ShapeError::Epsilon(_))
            ));
            assert!(matches!(
                Shape::from_error_bounds(0.1, bad),
                Err(ShapeError::Delta(_))
            ));
        }
        assert!(matches!(
            Shape::from_error_bounds(1e-300, 0.1),
            Err(ShapeError::TooManyCounters { .. })
        ));
        assert!(matches!(
            Shape::from_error_bounds(0.1, 1e-300),
            Err(ShapeError::Hashes(_))
        ));
    }

    #[test]
    fn every_error_has_its_own_message() {
        let errors = [
            ShapeError::Hashes(0),
            ShapeError::ZeroSlots,
            ShapeError::TooManyCounters {
                hashes: 2,
                slots: usize::MAX,
            },
            ShapeError::Epsilon(2.0),
            ShapeError::Delta(-1.0),
            ShapeError::StoreLength {
                expected: 4,
                actual: 3,
            },
        ];
        let messages: std::collections::HashSet<String> =
            errors.iter().map(ToString::to_string).collect();
        assert_eq!(messages.len(), errors.len());
    }
}
