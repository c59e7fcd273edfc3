//! The key table of a `SharedLimiter`: a key's identity (its 128-bit SipHash-1-3 keyed by the
//! segment's seed) and the entry that holds its bucket, claimed with one compare-and-swap and
//! probed linearly. Why keys are never removed, and why a crash costs the table at most one key's
//! place, is in the module docs of `shared/limiter.rs`.

use super::SharedLimiter;
use crate::clock::Clock;
use crate::shared::layout::{ENTRY_BYTES, KEYS_WORD_OFFSET, OVERFLOW_WORD_OFFSET, TABLE_OFFSET};
use siphasher::sip128::{Hasher128, SipHasher13};
use std::hash::Hasher;
use std::sync::atomic::Ordering;

/// The second half of the SipHash key of key identities ("keepcnt1"): the first is the seed. A
/// constant, so that the identities are secret exactly as long as the seed is.
const IDENTITY_KEY: u64 = u64::from_le_bytes(*b"keepcnt1");

impl<C: Clock> SharedLimiter<C> {
    /// `key`'s identity: its 128-bit SipHash-1-3 under the seed, never 0 (the empty entry).
    pub(super) fn identity(&self, key: &[u8]) -> u128 {
        let mut hasher = SipHasher13::new_with_keys(self.seed, IDENTITY_KEY);
        hasher.write(key);
        hasher.finish128().as_u128().max(1)
    }

    /// The offset of `id`'s table entry, claiming one if the key is new and the table has room;
    /// `None` (counted as overflow) if it is new and the table is full.
    pub(super) fn entry(&self, id: u128) -> Option<usize> {
        let keys = self.segment.word(KEYS_WORD_OFFSET);
        // The table is a power of two long: the low bits of the identity pick the start.
        let mut index = id as usize & self.mask;
        // At most 3/4 of the entries are ever claimed (the reservation count caps them), so an
        // empty entry is met within the table's length.
        for _ in 0..=self.mask {
            let offset = TABLE_OFFSET + index * ENTRY_BYTES;
            let word = self.segment.wide_word(offset);
            // Acquire: pairs with the claiming CAS; the bucket words need no ordering (a zeroed
            // bucket is full, and every change to them is a CAS of its own).
            let seen = word.load(Ordering::Acquire);
            if seen == id {
                return Some(offset);
            }
            if seen == 0 {
                // Relaxed: the count is only a cap; the claim below is what publishes an entry.
                // Loaded first so that a full table costs its flood of new keys no write here.
                let capacity = u64::from(self.block.capacity);
                let full = keys.load(Ordering::Relaxed) >= capacity || {
                    let reserved = keys.fetch_add(1, Ordering::Relaxed) < capacity;
                    if !reserved {
                        // Another process took the last place first: give the reservation back.
                        keys.fetch_sub(1, Ordering::Relaxed);
                    }
                    !reserved
                };
                if full {
                    self.segment
                        .word(OVERFLOW_WORD_OFFSET)
                        .fetch_add(1, Ordering::Relaxed);
                    return None;
                }
                // AcqRel: Release publishes the entry to other probes; Acquire on failure reads
                // the winner's identity.
                match word.compare_exchange(0, id, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => return Some(offset),
                    Err(winner) => {
                        // Another process claimed this entry first: our reservation is not used.
                        keys.fetch_sub(1, Ordering::Relaxed);
                        if winner == id {
                            return Some(offset);
                        }
                    }
                }
            }
            index = (index + 1) & self.mask;
        }
        None
    }
}
