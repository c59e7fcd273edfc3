//! A shared limiter's block: what its openers must agree on beyond the header (bytes 128..256 of
//! the segment, written once and checksummed on their own; see the layout table in the parent).

use super::{Difference, LIMITER_BLOCK_BYTES};
use crate::limiter::{Limit, Quota};
use crate::shared::error::CorruptReason;
use std::time::Duration;

/// Offset of the block's checksum: it covers every block byte before it.
const LIMITER_CHECKSUM_OFFSET: usize = 104;

/// What a shared limiter's openers must agree on beyond the header: bytes 128..256.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LimiterLayout {
    /// The most keys the table takes.
    pub(crate) capacity: u32,
    /// Every key's quota.
    pub(crate) quota: Quota,
    /// The best-effort bucket's quota.
    pub(crate) best_effort: Quota,
}

impl LimiterLayout {
    /// The block a limiter of `capacity` keys under `quota` and `best_effort` creates: each limit
    /// as written when its full bucket fits the 64 bits a bucket word gives it, else in lowest
    /// terms ([`Limit::in_lowest_terms`]: the same decisions, a smaller full bucket). Written forms
    /// are kept where they fit so that a segment any earlier build could make is made byte for
    /// byte as it made it, and opens in either build; [`fits`](Self::fits) says whether this one
    /// can be made at all.
    pub(crate) fn new(capacity: u32, quota: Quota, best_effort: Quota) -> Self {
        let stored = |quota: Quota| {
            let [requests, units] = quota.dimensions().map(|limit| {
                limit.map(|limit| {
                    if fits(limit) {
                        limit
                    } else {
                        limit.in_lowest_terms()
                    }
                })
            });
            Quota::new(requests, units)
        };
        Self {
            capacity,
            quota: stored(quota),
            best_effort: stored(best_effort),
        }
    }

    /// The block's bytes, checksum included.
    pub(crate) fn encode(&self) -> [u8; LIMITER_BLOCK_BYTES] {
        let mut bytes = [0u8; LIMITER_BLOCK_BYTES];
        bytes[0..8].copy_from_slice(&u64::from(self.capacity).to_le_bytes());
        let mut at = 8;
        for quota in [self.quota, self.best_effort] {
            for limit in quota.dimensions() {
                let words = limit.map_or([0; 3], |l| [l.amount(), l.period_nanos(), l.burst()]);
                for word in words {
                    bytes[at..at + 8].copy_from_slice(&word.to_le_bytes());
                    at += 8;
                }
            }
        }
        let checksum = crc32fast::hash(&bytes[..LIMITER_CHECKSUM_OFFSET]);
        bytes[LIMITER_CHECKSUM_OFFSET..LIMITER_CHECKSUM_OFFSET + 4]
            .copy_from_slice(&checksum.to_le_bytes());
        bytes
    }

    /// The block `bytes` describes for a table of `entries`, or the first check it fails.
    pub(crate) fn decode(
        bytes: &[u8; LIMITER_BLOCK_BYTES],
        entries: usize,
    ) -> Result<Self, CorruptReason> {
        let u64_at = |at: usize| {
            let mut word = [0u8; 8];
            word.copy_from_slice(&bytes[at..at + 8]);
            u64::from_le_bytes(word)
        };
        let stored = u32::from_le_bytes([
            bytes[LIMITER_CHECKSUM_OFFSET],
            bytes[LIMITER_CHECKSUM_OFFSET + 1],
            bytes[LIMITER_CHECKSUM_OFFSET + 2],
            bytes[LIMITER_CHECKSUM_OFFSET + 3],
        ]);
        if stored != crc32fast::hash(&bytes[..LIMITER_CHECKSUM_OFFSET]) {
            return Err(CorruptReason::Checksum);
        }
        let capacity = u32::try_from(u64_at(0)).map_err(|_| CorruptReason::Layout)?;
        let limit = |at: usize| -> Result<Option<Limit>, CorruptReason> {
            let (amount, period, burst) = (u64_at(at), u64_at(at + 8), u64_at(at + 16));
            if period == 0 {
                return Ok(None);
            }
            let limit = Limit::new(amount, Duration::from_nanos(period), burst)
                .map_err(|_| CorruptReason::Layout)?;
            Ok(Some(limit))
        };
        let layout = Self {
            capacity,
            quota: Quota::new(limit(8)?, limit(32)?),
            best_effort: Quota::new(limit(56)?, limit(80)?),
        };
        if capacity == 0 || table_entries(capacity) != entries || !layout.fits() {
            return Err(CorruptReason::Layout);
        }
        Ok(layout)
    }

    /// Whether every full bucket fits the 64 bits a bucket word gives its count.
    pub(crate) fn fits(&self) -> bool {
        [self.quota, self.best_effort]
            .iter()
            .flat_map(|quota| quota.dimensions())
            .flatten()
            .all(fits)
    }

    /// The first field in which the segment's block (`self`) differs from `requested`. Quotas
    /// differ only if their decisions can: compared in lowest terms, so a process asking for 20
    /// requests every 2 s opens a segment made for 10 a second, and one asking for a day's quota
    /// as written opens the segment that stores it in lowest terms. The segment's own form is
    /// then the one its buckets are counted in, by every process.
    pub(super) fn difference(&self, requested: &Self) -> Option<Difference> {
        let (a, b) = (self, requested);
        if a.capacity != b.capacity {
            return Some(("capacity", a.capacity.to_string(), b.capacity.to_string()));
        }
        for (field, a, b) in [
            ("quota", a.quota, b.quota),
            ("bestEffort", a.best_effort, b.best_effort),
        ] {
            if lowest_terms(a) != lowest_terms(b) {
                return Some((field, describe(&a), describe(&b)));
            }
        }
        None
    }
}

/// Whether `limit`'s full bucket fits the 64 bits a bucket word gives its count.
fn fits(limit: Limit) -> bool {
    limit.capacity() <= u128::from(u64::MAX)
}

/// `quota` with each limit in lowest terms: equal for quotas that decide alike.
fn lowest_terms(quota: Quota) -> Quota {
    let [requests, units] = quota
        .dimensions()
        .map(|limit| limit.map(Limit::in_lowest_terms));
    Quota::new(requests, units)
}

/// Table entries for `capacity` keys: the power of two that keeps the table at most 3/4 full, so
/// a probe for an absent key stops at an empty entry after a few steps. At most 2^26 for a
/// capacity below 2^25 (`crate::shared::limiter::MAX_CAPACITY`).
pub(crate) fn table_entries(capacity: u32) -> usize {
    (capacity as usize * 4).div_ceil(3).next_power_of_two()
}

/// A quota as a mismatch error shows it.
fn describe(quota: &Quota) -> String {
    let limit = |limit: Option<Limit>| {
        limit.map_or("unlimited".to_string(), |l| {
            format!(
                "{} per {} ns, burst {}",
                l.amount(),
                l.period_nanos(),
                l.burst()
            )
        })
    };
    format!(
        "(requests {}; units {})",
        limit(quota.requests()),
        limit(quota.units())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter_block() -> LimiterLayout {
        LimiterLayout {
            capacity: 100,
            quota: Quota::new(Some(Limit::per_second(10, 20)), None),
            best_effort: Quota::new(None, Some(Limit::per_second(5, 5))),
        }
    }

    #[test]
    fn limiter_blocks_round_trip_and_refuse_damage() {
        let block = limiter_block();
        let bytes = block.encode();
        assert_eq!(LimiterLayout::decode(&bytes, 256), Ok(block));
        assert_eq!(table_entries(100), 256);
        assert_eq!(
            LimiterLayout::decode(&bytes, 128),
            Err(CorruptReason::Layout)
        );
        for at in 0..LIMITER_CHECKSUM_OFFSET + 4 {
            let mut damaged = bytes;
            damaged[at] ^= 0x10;
            assert!(LimiterLayout::decode(&damaged, 256).is_err(), "byte {at}");
        }
    }

    #[test]
    fn limiter_differences_name_the_quota_field() {
        let a = limiter_block();
        let mut b = a;
        b.quota = Quota::new(Some(Limit::per_second(10, 21)), None);
        let (field, existing, requested) = a.difference(&b).unwrap();
        assert_eq!(field, "quota");
        assert_eq!(
            existing,
            "(requests 10 per 1000000000 ns, burst 20; units unlimited)"
        );
        assert!(requested.contains("burst 21"));
        b.capacity = 7;
        assert_eq!(a.difference(&b).unwrap().0, "capacity");
    }
}
