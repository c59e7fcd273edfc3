//! What a heavy-hitter summary answers: [`Count`] bounds with the key's [`Standing`], and
//! [`Talker`] rows of [`top`](super::Summary::top).

/// Where a key stands in a summary, which says what its bounds are made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Standing {
    /// In the exact table: `lower` is every increment since it entered, counted exactly;
    /// `upper - lower` is the slack, the sketch's bound on what came before.
    Tracked,
    /// Not in the table, and its count is below the threshold: `upper` is its sketch estimate,
    /// or `threshold - 1` when other keys raised the estimate to the threshold since the key's
    /// last increment (the table has room, so the key never crossed); `lower` is 0 (a sketch
    /// gives no lower bound).
    BelowThreshold,
    /// Not in the table although its sketch estimate reached the threshold, and the table is
    /// full (it may have been when the key crossed) or the summary merged another (the key's
    /// counts there never passed the threshold here). `upper` is the estimate, `lower` 0. The
    /// summary's [`Stats`](super::Stats) count increments that found the table full.
    Overflow,
}

/// Bounds on a key's true count: `lower ≤ count ≤ upper` (see the module's guarantees).
///
/// ```
/// use keepcount_limits::heavy::{Count, Standing};
/// let count = Count { lower: 7, upper: 9, standing: Standing::Tracked };
/// assert_eq!(count.slack(), 2);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Count {
    /// A count the key has certainly reached.
    pub lower: u64,
    /// A count the key has certainly not exceeded.
    pub upper: u64,
    /// What the bounds are made of.
    pub standing: Standing,
}

impl Count {
    /// `upper - lower`: how far from exact the count is.
    pub fn slack(&self) -> u64 {
        self.upper.saturating_sub(self.lower)
    }

    /// Bounds of the sum of two disjoint parts of a stream (two windows, two merged summaries):
    /// bounds add; the standing is the stronger of the two (tracked, then overflow).
    pub(crate) fn plus(self, other: Count) -> Count {
        let standing = match (self.standing, other.standing) {
            (Standing::Tracked, _) | (_, Standing::Tracked) => Standing::Tracked,
            (Standing::Overflow, _) | (_, Standing::Overflow) => Standing::Overflow,
            _ => Standing::BelowThreshold,
        };
        Count {
            lower: self.lower.saturating_add(other.lower),
            upper: self.upper.saturating_add(other.upper),
            standing,
        }
    }
}

/// One row of [`top`](super::Summary::top): a tracked key and its bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Talker<K> {
    /// The key.
    pub key: K,
    /// Its bounds.
    pub count: Count,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(lower: u64, upper: u64, standing: Standing) -> Count {
        Count {
            lower,
            upper,
            standing,
        }
    }

    #[test]
    fn parts_add_and_tracked_wins() {
        let sum = count(3, 5, Standing::Tracked).plus(count(0, 4, Standing::Overflow));
        assert_eq!(sum, count(3, 9, Standing::Tracked));
        let sum = count(0, 2, Standing::BelowThreshold).plus(count(0, 9, Standing::Overflow));
        assert_eq!(sum.standing, Standing::Overflow);
    }

    #[test]
    fn sums_saturate() {
        let sum = count(u64::MAX, u64::MAX, Standing::Tracked).plus(count(1, 1, Standing::Tracked));
        assert_eq!((sum.lower, sum.upper), (u64::MAX, u64::MAX));
    }
}
