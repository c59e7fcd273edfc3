//! What a heavy-hitter summary is built from: [`Settings`], validated once, and
//! [`ConfigError`].

use crate::shape::Shape;
use std::fmt;

/// The most entries a table may hold: 2^24. At 40 bytes or more per entry (key hash, key, exact
/// count, slack, control byte) that is already over 640 MiB; beyond it, an exact `HashMap` costs
/// no more and has no error at all. It also keeps every count of entries within the u32 of the
/// serialized format.
pub const MAX_CAPACITY: usize = 1 << 24;

/// A validated configuration: the sketch's shape and seed, the entry threshold and the table's
/// capacity.
///
/// ```
/// use keepcount_limits::heavy::Settings;
/// use keepcount_limits::Shape;
/// let settings = Settings::new(Shape::new(4, 1024).unwrap(), 42, 5, 4096).unwrap();
/// assert_eq!((settings.threshold(), settings.capacity()), (5, 4096));
/// assert!(Settings::new(Shape::new(4, 1024).unwrap(), 42, 0, 4096).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    shape: Shape,
    seed: u64,
    threshold: u64,
    capacity: usize,
}

impl Settings {
    /// A configuration, or why it is refused: `threshold` must be at least 1 (with 0 every key
    /// would be tracked from its first increment, and the sketch would serve no purpose) and
    /// `capacity` between 1 and [`MAX_CAPACITY`].
    pub fn new(
        shape: Shape,
        seed: u64,
        threshold: u64,
        capacity: usize,
    ) -> Result<Self, ConfigError> {
        if threshold == 0 {
            return Err(ConfigError::ZeroThreshold);
        }
        if !(1..=MAX_CAPACITY).contains(&capacity) {
            return Err(ConfigError::Capacity(capacity));
        }
        Ok(Self {
            shape,
            seed,
            threshold,
            capacity,
        })
    }

    /// The sketch's rows and columns.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// The hash seed of the sketch (and of the table's key hashes).
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The sketch estimate at which a key enters the table.
    pub fn threshold(&self) -> u64 {
        self.threshold
    }

    /// The most keys the table holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

/// Why a heavy-hitter configuration was refused.
///
/// ```
/// use keepcount_limits::heavy::{ConfigError, Settings};
/// use keepcount_limits::Shape;
/// let err = Settings::new(Shape::new(4, 64).unwrap(), 1, 5, 0).unwrap_err();
/// assert_eq!(err, ConfigError::Capacity(0));
/// assert_eq!(err.to_string(), "the table capacity must be between 1 and 16777216, got 0");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// The threshold is zero.
    ZeroThreshold,
    /// The capacity is zero or more than [`MAX_CAPACITY`].
    Capacity(usize),
    /// The window's interval is zero.
    ZeroInterval,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ZeroThreshold => f.write_str("the heavy-hitter threshold must be at least 1"),
            Self::Capacity(capacity) => write!(
                f,
                "the table capacity must be between 1 and {MAX_CAPACITY}, got {capacity}"
            ),
            Self::ZeroInterval => f.write_str("the heavy-hitter interval must be longer than zero"),
        }
    }
}

impl std::error::Error for ConfigError {}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> Shape {
        Shape::new(2, 8).unwrap()
    }

    #[test]
    fn accepts_the_limits_exactly() {
        assert!(Settings::new(shape(), 0, 1, 1).is_ok());
        assert!(Settings::new(shape(), 0, u64::MAX, MAX_CAPACITY).is_ok());
    }

    #[test]
    fn refuses_zero_threshold_and_out_of_range_capacity() {
        assert_eq!(
            Settings::new(shape(), 0, 0, 1),
            Err(ConfigError::ZeroThreshold)
        );
        assert_eq!(
            Settings::new(shape(), 0, 1, 0),
            Err(ConfigError::Capacity(0))
        );
        assert_eq!(
            Settings::new(shape(), 0, 1, MAX_CAPACITY + 1),
            Err(ConfigError::Capacity(MAX_CAPACITY + 1))
        );
    }

    #[test]
    fn every_error_has_its_own_message() {
        let messages: std::collections::HashSet<String> = [
            ConfigError::ZeroThreshold,
            ConfigError::Capacity(0),
            ConfigError::ZeroInterval,
        ]
        .iter()
        .map(ToString::to_string)
        .collect();
        assert_eq!(messages.len(), 3);
    }
}
