//! Merging summaries: [`Summary::merge`], and [`MergeError`] for summaries that cannot be merged.
//! The bounds a merge keeps are stated in the [module doc](crate::heavy#merging).

use crate::estimator;
use std::fmt;
use std::hash::Hash;
use std::sync::atomic::Ordering;

use super::{Summary, as_count};
use crate::heavy::heap_bytes::HeapBytes;
use crate::heavy::table::{Entry, OverflowCounts};

impl<K: Hash + Eq + Clone + HeapBytes> Summary<K> {
    /// Adds `other`'s stream to this summary: the sketches add element-wise (the result is the
    /// sketch of both streams), and the tables merge as the [module doc](crate::heavy#merging) states,
    /// keeping the bounds valid, truncated to this summary's capacity.
    ///
    /// ```
    /// use keepcount_limits::heavy::{Settings, Summary};
    /// use keepcount_limits::Shape;
    /// let settings = Settings::new(Shape::new(4, 256).unwrap(), 9, 2, 8).unwrap();
    /// let (a, b) = (Summary::new(settings), Summary::new(settings));
    /// for _ in 0..5 { a.incr("k", 1); }
    /// for _ in 0..3 { b.incr("k", 1); }
    /// a.merge(&b).unwrap();
    /// let count = a.count("k");
    /// assert!(count.lower <= 8 && 8 <= count.upper);
    /// ```
    ///
    /// # Thread safety
    /// `other`'s table is copied first, then this summary's table is rebuilt under its exclusive
    /// lock (so `a.merge(&a)` doubles `a` rather than deadlocking). Increments racing with a merge
    /// are counted, but a key entering through the merge may miss, in its upper bound, increments
    /// made to `self` between the estimate's read and the sketch merge: merge quiescent
    /// summaries when the bounds must hold exactly.
    pub fn merge(&self, other: &Summary<K>) -> Result<(), MergeError> {
        if self.settings.threshold() != other.settings.threshold() {
            return Err(MergeError::Threshold {
                ours: self.settings.threshold(),
                theirs: other.settings.threshold(),
            });
        }
        let (ours, theirs) = (&self.sketch, &other.sketch);
        if ours.shape() != theirs.shape() {
            return Err(MergeError::Sketch(estimator::MergeError::Shape {
                ours: ours.shape(),
                theirs: theirs.shape(),
            }));
        }
        if ours.seed() != theirs.seed() {
            return Err(MergeError::Sketch(estimator::MergeError::Seed));
        }
        let theirs = other.table.entries();
        let their_overflow = other.table.overflow();
        self.table.replace_with(|ours| {
            let mut merged = Vec::with_capacity(ours.len() + theirs.len());
            let mut theirs: std::collections::HashMap<&K, &Entry<K>> =
                theirs.iter().map(|e| (&e.key, e)).collect();
            for mut entry in ours {
                match theirs.remove(&entry.key) {
                    Some(their) => {
                        entry.exact = entry.exact.saturating_add(their.exact);
                        entry.slack = entry.slack.saturating_add(their.slack);
                    }
                    // Untracked there: its sketch estimate bounds what that stream held.
                    None => {
                        let estimate = as_count(other.sketch.get_hash(entry.hash));
                        entry.slack = entry.slack.saturating_add(estimate);
                    }
                }
                merged.push(entry);
            }
            for their in theirs.into_values() {
                let estimate = as_count(self.sketch.get_hash(their.hash));
                merged.push(Entry {
                    slack: their.slack.saturating_add(estimate),
                    ..their.clone()
                });
            }
            // Still under the table's lock, so no key enters between the estimates above and
            // the sketch they describe growing. Checked above: cannot fail.
            let _ = self.sketch.merge(&other.sketch);
            // Relaxed: a flag that publishes nothing else; an increment racing with the merge
            // may read it stale, one of the races documented above.
            self.merged.store(true, Ordering::Relaxed);
            self.merges.fetch_add(1, Ordering::Relaxed);
            merged
        });
        let ours = self.table.overflow();
        self.table.set_overflow(OverflowCounts {
            events: ours.events.saturating_add(their_overflow.events),
            weight: ours.weight.saturating_add(their_overflow.weight),
            merge_dropped: ours
                .merge_dropped
                .saturating_add(their_overflow.merge_dropped),
        });
        Ok(())
    }
}

/// Why two summaries cannot be merged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MergeError {
    /// The sketches differ in shape or seed.
    Sketch(estimator::MergeError),
    /// The thresholds differ, so "tracked" does not mean the same in both.
    Threshold {
        /// This summary's threshold.
        ours: u64,
        /// The other summary's threshold.
        theirs: u64,
    },
}

impl fmt::Display for MergeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Sketch(err) => write!(f, "cannot merge heavy-hitter summaries: {err}"),
            Self::Threshold { ours, theirs } => write!(
                f,
                "cannot merge heavy-hitter summaries with different thresholds: {ours} and {theirs}"
            ),
        }
    }
}

impl std::error::Error for MergeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Sketch(err) => Some(err),
            Self::Threshold { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::heavy::count::Standing;
    use crate::heavy::settings::Settings;
    use crate::shape::Shape;

    fn summary(threshold: u64, capacity: usize) -> Summary<u64> {
        Summary::new(Settings::new(Shape::new(4, 1024).unwrap(), 3, threshold, capacity).unwrap())
    }

    #[test]
    fn merge_adds_exact_parts_and_bounds_one_sided_keys() {
        let (a, b, both) = (summary(3, 8), summary(3, 8), summary(3, 8));
        for _ in 0..10 {
            a.incr(&1, 1);
            both.incr(&1, 1);
        }
        for _ in 0..7 {
            b.incr(&1, 1);
            b.incr(&2, 1);
            both.incr(&1, 1);
            both.incr(&2, 1);
        }
        a.incr(&2, 1);
        both.incr(&2, 1);
        a.merge(&b).unwrap();
        assert_eq!(a.sketch().to_bytes(), both.sketch().to_bytes());
        let one = a.count(&1);
        assert!(one.lower <= 17 && 17 <= one.upper && one.slack() <= 2 * 2);
        let two = a.count(&2);
        assert!(two.lower <= 8 && 8 <= two.upper);
        assert_eq!(two.standing, Standing::Tracked);
    }

    #[test]
    fn merge_truncates_to_capacity_keeping_the_largest() {
        let (a, b) = (summary(1, 2), summary(1, 2));
        a.incr(&1, 5);
        a.incr(&2, 1);
        b.incr(&3, 9);
        b.incr(&4, 2);
        a.merge(&b).unwrap();
        let keys: Vec<u64> = a.top(10).into_iter().map(|t| t.key).collect();
        assert_eq!(keys, [3, 1]);
        assert_eq!(a.stats().merge_dropped, 2);
        assert_eq!(a.count(&4).standing, Standing::Overflow);
    }

    #[test]
    fn merge_with_itself_doubles() {
        let s = summary(2, 4);
        for _ in 0..5 {
            s.incr(&1, 1);
        }
        s.merge(&s).unwrap();
        let count = s.count(&1);
        assert!(count.lower <= 10 && 10 <= count.upper);
        assert_eq!(count.lower, 8);
    }

    #[test]
    fn merge_refuses_other_thresholds_shapes_and_seeds() {
        let a = summary(2, 4);
        let err = a.merge(&summary(3, 4)).unwrap_err();
        assert_eq!(err, MergeError::Threshold { ours: 2, theirs: 3 });
        assert_eq!(
            err.to_string(),
            "cannot merge heavy-hitter summaries with different thresholds: 2 and 3"
        );
        let other_seed =
            Summary::<u64>::new(Settings::new(Shape::new(4, 1024).unwrap(), 4, 2, 4).unwrap());
        assert!(matches!(
            a.merge(&other_seed),
            Err(MergeError::Sketch(estimator::MergeError::Seed))
        ));
        let other_shape =
            Summary::<u64>::new(Settings::new(Shape::new(4, 512).unwrap(), 3, 2, 4).unwrap());
        let err = a.merge(&other_shape).unwrap_err();
        assert!(err.to_string().contains("different shapes"));
    }
}
