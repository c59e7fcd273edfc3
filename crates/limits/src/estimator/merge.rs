//! Merging sketches: [`Estimator::merge`], and [`MergeError`] for sketches that cannot be merged.
//!
//! Merging adds counters element-wise, which answers for both streams of increments only when
//! both sketches put every key in the same counters: the same shape and the same seed.

use super::Estimator;
use super::saturating::add_saturating;
use crate::shape::Shape;
use crate::store::CounterStore;
use std::fmt;
use std::sync::atomic::Ordering;

impl<S: CounterStore> Estimator<S> {
    /// Adds `other`'s counters to this sketch's, element-wise (saturating). Afterwards this sketch
    /// answers as if it had seen both streams of increments: merging the sketches of A and B
    /// gives exactly the sketch of A then B. Both must have the same shape and seed.
    ///
    /// ```
    /// use keepcount_limits::estimator::Estimator;
    /// let a = Estimator::with_seed(4, 64, 42).unwrap();
    /// let b = Estimator::with_seed(4, 64, 42).unwrap();
    /// a.incr("x", 2);
    /// b.incr("x", 3);
    /// a.merge(&b).unwrap();
    /// assert_eq!(a.get("x"), 5);
    /// assert!(a.merge(&Estimator::with_seed(4, 64, 43).unwrap()).is_err());
    /// ```
    ///
    /// # Thread safety
    /// Each counter is added atomically, but the merge as a whole is not a snapshot: increments
    /// to either sketch during the merge may or may not be included.
    pub fn merge<S2: CounterStore>(&self, other: &Estimator<S2>) -> Result<(), MergeError> {
        if self.shape != other.shape {
            return Err(MergeError::Shape {
                ours: self.shape,
                theirs: other.shape,
            });
        }
        if self.seed() != other.seed() {
            return Err(MergeError::Seed);
        }
        for (ours, theirs) in self.store.counters().iter().zip(other.store.counters()) {
            // Relaxed: element-wise sums, nothing else is published.
            add_saturating(ours, theirs.load(Ordering::Relaxed));
        }
        Ok(())
    }
}

/// Why two sketches cannot be merged.
///
/// ```
/// use keepcount_limits::estimator::{Estimator, MergeError};
/// let a = Estimator::with_seed(4, 64, 1).unwrap();
/// let err = a.merge(&Estimator::with_seed(4, 64, 2).unwrap()).unwrap_err();
/// assert_eq!(err, MergeError::Seed);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MergeError {
    /// The sketches have different `hashes` or `slots`.
    Shape {
        /// This sketch's shape.
        ours: Shape,
        /// The other sketch's shape.
        theirs: Shape,
    },
    /// The sketches have different seeds, so a key uses different counters in each.
    ///
    /// The seeds themselves are not carried: a seed is the secret that keeps keys' counters
    /// apart (it resists hash flooding), and errors end up in logs and HTTP responses.
    Seed,
}

impl fmt::Display for MergeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Shape { ours, theirs } => write!(
                f,
                "cannot merge sketches of different shapes: {} × {} and {} × {}",
                ours.hashes(),
                ours.slots(),
                theirs.hashes(),
                theirs.slots()
            ),
            Self::Seed => f.write_str(
                "cannot merge sketches with different seeds (seeds are secret: neither is shown)",
            ),
        }
    }
}

impl std::error::Error for MergeError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_refuses_other_shapes_and_seeds() {
        let a = Estimator::with_seed(4, 64, 1).unwrap();
        let shape = a
            .merge(&Estimator::with_seed(4, 65, 1).unwrap())
            .unwrap_err();
        assert!(matches!(shape, MergeError::Shape { .. }));
        assert_eq!(
            shape.to_string(),
            "cannot merge sketches of different shapes: 4 × 64 and 4 × 65"
        );
        let seed = a
            .merge(&Estimator::with_seed(4, 64, 2).unwrap())
            .unwrap_err();
        assert!(seed.to_string().contains("different seeds"));
    }

    #[test]
    fn a_seed_mismatch_shows_neither_seed() {
        let (ours, theirs) = (0x5ec2_e75e_ed00_0001_u64, 0x07e1_5eed_0000_0002_u64);
        let err = Estimator::with_seed(4, 64, ours)
            .unwrap()
            .merge(&Estimator::with_seed(4, 64, theirs).unwrap())
            .unwrap_err();
        let shown = [err.to_string(), format!("{err:?}")];
        for seed in [ours, theirs] {
            for form in [format!("{seed}"), format!("{seed:x}"), format!("{seed:X}")] {
                for text in &shown {
                    assert!(!text.contains(&form), "{text:?} shows seed {form}");
                }
            }
        }
    }

    #[test]
    fn merge_equals_concatenation() {
        let a = Estimator::with_seed(3, 16, 9).unwrap();
        let b = Estimator::with_seed(3, 16, 9).unwrap();
        let both = Estimator::with_seed(3, 16, 9).unwrap();
        for key in 0u32..50 {
            a.incr(key, 1);
            both.incr(key, 1);
        }
        for key in 25u32..80 {
            b.incr(key, 2);
            both.incr(key, 2);
        }
        a.merge(&b).unwrap();
        assert_eq!(a.to_bytes(), both.to_bytes());
    }
}
