//! The key table of a `SharedLimiter`: a key's identity (its 128-bit SipHash-1-3 keyed by the
//! segment's seed) and the entry that holds its bucket, claimed with one compare-and-swap and
//! probed linearly; once the table is full, an entry whose bucket is full is taken over by a new
//! key with one compare-and-swap too. Why entries are never emptied, why a takeover loses nobody
//! anything, and why a crash costs the table at most one key's place, is in the module docs of
//! `shared/limiter.rs`.

use super::SharedLimiter;
use crate::clock::Clock;
use crate::shared::layout::{
    ENTRY_BYTES, KEYS_WORD_OFFSET, OVERFLOW_WORD_OFFSET, TABLE_OFFSET, TAKEOVERS_WORD_OFFSET,
};
use siphasher::sip128::{Hasher128, SipHasher13};
use std::hash::Hasher;
use std::sync::atomic::Ordering;

/// The second half of the SipHash key of key identities ("keepcnt1"): the first is the seed. A
/// constant, so that the identities are secret exactly as long as the seed is.
const IDENTITY_KEY: u64 = u64::from_le_bytes(*b"keepcnt1");

/// Entries a probe reads at least, past empty ones, once the table has seen a takeover
/// ([`SharedLimiter::entry`]): where a new key looks for a full bucket to take over once the
/// table is full. A new key finds none only if all of them are empty or hold buckets in use.
/// Empty entries cluster under linear probing, so this is longer than independence would ask:
/// simulated at the emptiest full table (3/8 of the entries claimed; fuller ones do better), once
/// every bucket has refilled, 32 leave fewer than 1 in 6,000 new keys without one while the new
/// keys number up to a tenth of the capacity, 1 in 700 up to a quarter, 1 in 70 up to a half
/// (16: 1 in 150, 1 in 40, 1 in 17). Reading 32 entries of 48 bytes costs a new key ~24
/// consecutive cache lines; keys in the table stop where they are found.
const REACH: usize = 32;

impl<C: Clock> SharedLimiter<C> {
    /// `key`'s identity: its 128-bit SipHash-1-3 under the seed, never 0 (the empty entry).
    pub(super) fn identity(&self, key: &[u8]) -> u128 {
        let mut hasher = SipHasher13::new_with_keys(self.seed, IDENTITY_KEY);
        hasher.write(key);
        hasher.finish128().as_u128().max(1)
    }

    /// The offset of `id`'s table entry, claiming one if the key is new and the table has room, or
    /// taking one over ([`take_over`](Self::take_over)) if it is full; `None` (counted as
    /// overflow) if the key is new, the table full and no entry within its reach free to take.
    ///
    /// A key's **reach** is its probe path from its home entry up to the later of [`REACH`]
    /// entries and the first empty one: a key lives within it, so a probe reads all of it before
    /// calling a key absent (a key found stops the probe at once). A taken-over entry may lie past
    /// an empty one, which is why the reach does not end at the first empty entry; it always
    /// includes it, which is where a new key claims. Until the table's first takeover no key lies
    /// past an empty entry, and the reach ends at the first one, as it did before takeovers.
    pub(super) fn entry(&self, id: u128, now: u64) -> Option<usize> {
        let home = id as usize & self.mask;
        // A claim lost to another key scans again: each loss filled an entry for good, so this
        // ends.
        loop {
            let mut empty = None;
            let mut reach = 0;
            // Where the probe may stop once it has met an empty entry: decided then, so that a
            // key found before one (most checks) reads nothing else.
            let mut least = 0;
            let mut index = home;
            // At most 3/4 of the entries are ever claimed (the reservation count caps them), so
            // an empty entry is met within the table's length.
            while reach <= self.mask && (reach < least || empty.is_none()) {
                let offset = TABLE_OFFSET + index * ENTRY_BYTES;
                // Acquire: pairs with the claiming CAS; the bucket words need no ordering (a
                // zeroed bucket is full, and every change to them is a CAS of its own).
                let seen = self.segment.wide_word(offset).load(Ordering::Acquire);
                if seen == id {
                    return Some(offset);
                }
                if seen == 0 && empty.is_none() {
                    empty = Some(offset);
                    least = self.least_reach();
                }
                reach += 1;
                index = (index + 1) & self.mask;
            }
            let claimed = match empty {
                Some(offset) if self.reserve() => offset,
                _ => {
                    // The table's first takeover looks as far as every later one.
                    let reach = reach.max(REACH.min(self.mask + 1));
                    return self.take_over(id, home, reach, now).or_else(|| {
                        // Relaxed: a statistic.
                        self.segment
                            .word(OVERFLOW_WORD_OFFSET)
                            .fetch_add(1, Ordering::Relaxed);
                        None
                    });
                }
            };
            // AcqRel: Release publishes the entry to other probes; Acquire on failure reads the
            // winner's identity.
            match self.segment.wide_word(claimed).compare_exchange(
                0,
                id,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some(claimed),
                Err(winner) => {
                    // Another process claimed this entry first: our reservation is not used.
                    self.segment
                        .word(KEYS_WORD_OFFSET)
                        .fetch_sub(1, Ordering::Relaxed);
                    if winner == id {
                        return Some(claimed);
                    }
                }
            }
        }
    }

    /// How many entries a probe reads at least: [`REACH`] once the table has seen a takeover,
    /// else none past the first empty one.
    fn least_reach(&self) -> usize {
        // Relaxed: a takeover racing this check is one of the races of the module docs; every
        // later check sees it (the count never goes back to 0). The word shares a cache line with
        // the overflow count, which a flood writes: read only by probes that met an empty entry.
        let takeovers = self
            .segment
            .word(TAKEOVERS_WORD_OFFSET)
            .load(Ordering::Relaxed);
        if takeovers == 0 { 0 } else { REACH }
    }

    /// Reserves one of the table's `capacity` places for a claim; `false` if the table is full.
    fn reserve(&self) -> bool {
        let keys = self.segment.word(KEYS_WORD_OFFSET);
        let capacity = u64::from(self.block.capacity);
        // Relaxed: the count is only a cap; the claim is what publishes an entry. Loaded first so
        // that a full table costs its flood of new keys no write here.
        if keys.load(Ordering::Relaxed) >= capacity {
            return false;
        }
        let reserved = keys.fetch_add(1, Ordering::Relaxed) < capacity;
        if !reserved {
            // Another process took the last place first: give the reservation back.
            keys.fetch_sub(1, Ordering::Relaxed);
        }
        reserved
    }

    /// Gives the new key `id` the first of the `len` entries from `home` on (its reach) whose
    /// bucket is full at `now`, by swapping the identity in place; `None` if every one of them is
    /// empty or holds a bucket in use. A full bucket is what a new key starts with, so neither key
    /// is owed anything: the old one, if it comes back, starts full again. The entry never becomes
    /// empty, so no other key's probe path is cut short.
    fn take_over(&self, id: u128, home: usize, len: usize, now: u64) -> Option<usize> {
        let mut index = home;
        for _ in 0..len {
            let offset = TABLE_OFFSET + index * ENTRY_BYTES;
            let word = self.segment.wide_word(offset);
            // Acquire: as in `entry`.
            let seen = word.load(Ordering::Acquire);
            if seen == id {
                // Another process gave this key an entry meanwhile.
                return Some(offset);
            }
            if seen != 0 && self.is_full(offset + 16, now) {
                // AcqRel/Acquire: as the claiming CAS in `entry`.
                match word.compare_exchange(seen, id, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => {
                        // Relaxed: a statistic, and the switch of `least_reach`.
                        self.segment
                            .word(TAKEOVERS_WORD_OFFSET)
                            .fetch_add(1, Ordering::Relaxed);
                        return Some(offset);
                    }
                    Err(winner) if winner == id => return Some(offset),
                    // Another new key took it over first: look further.
                    Err(_) => {}
                }
            }
            index = (index + 1) & self.mask;
        }
        None
    }
}
