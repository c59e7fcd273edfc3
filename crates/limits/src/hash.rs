//! Keyed, stable key hashing: SipHash-1-3 with 64-bit output ([format §1–§2]).
//!
//! Every sketch in this crate hashes a key once with [`KeyHasher`], keyed by the sketch's 64-bit
//! seed, and derives one counter per row from the resulting [`KeyHash`] with per-row hash
//! functions drawn from the same seed ([`Rows`](crate::Rows)). The byte stream and the hash are a
//! compatibility promise shared with the Node binding and its TypeScript fallback.
//!
//! Why SipHash-1-3: it is keyed (without the seed nobody can precompute keys that collide with a
//! victim's key, the hash-flooding defence SipHash was designed for; it is what Rust's own
//! `HashMap` uses), it is a pseudo-random function, so the 64-bit output of distinct keys looks
//! independent and uniform, and it is cheap for short keys: a `u32` key is one compression and
//! three finalisation rounds. Format version 1 used HalfSipHash-1-3 (32-bit words): twice the
//! rounds for the same 64 bits of output in Rust, and no cheaper in JavaScript, where SipHash's
//! 64-bit words cost two 32-bit halves but half the rounds.
//!
//! The permutation is the `siphasher` crate's (the implementation std's own SipHash was extracted
//! into); [`KeyHasher`] only pins the byte stream: integers little-endian on every platform,
//! `usize`/`isize` as 8 bytes.
//!
//! [format §1–§2]: https://github.com/keepcount/keepcount/blob/main/docs/format.md

use siphasher::sip::SipHasher13;
use std::hash::{BuildHasher, Hash, Hasher};

/// The second half of the SipHash key when hashing keys. The seed is the first half; the row
/// functions are derived under another second half ([`crate::rows`]), so the two uses of the
/// seed never share a SipHash key.
pub(crate) const KEY_DOMAIN: u64 = 0;

/// The hasher every keepcount sketch uses: SipHash-1-3, 64-bit output, keyed by `(seed, 0)`.
///
/// ```
/// use keepcount_limits::hash::KeyHasher;
/// use std::hash::{Hash, Hasher};
///
/// let mut hasher = KeyHasher::with_seed(42);
/// "1.2.3.4".hash(&mut hasher);
/// let same = KeyHasher::with_seed(42).hash_one_key("1.2.3.4");
/// assert_eq!(hasher.key_hash(), same);
/// ```
///
/// # Performance
/// No allocation; integer writes are buffered without a per-byte loop. A key of `n` bytes costs
/// `⌊n / 8⌋ + 1` compression rounds and 3 finalisation rounds of 64-bit additions, rotations and
/// xors (4 rounds for a `u32` or `i64` key).
#[derive(Debug, Clone)]
pub struct KeyHasher(SipHasher13);

impl KeyHasher {
    /// A hasher keyed by `seed`: SipHash's 128-bit key is `k0 = seed`, `k1 = 0`.
    ///
    /// ```
    /// use keepcount_limits::hash::KeyHasher;
    /// use std::hash::Hasher;
    /// assert_ne!(KeyHasher::with_seed(1).finish(), KeyHasher::with_seed(2).finish());
    /// ```
    #[inline]
    pub fn with_seed(seed: u64) -> Self {
        Self(SipHasher13::new_with_keys(seed, KEY_DOMAIN))
    }

    /// Hashes `key` with a copy of this hasher (which is left as it was) and returns the result.
    ///
    /// ```
    /// use keepcount_limits::hash::KeyHasher;
    /// let hasher = KeyHasher::with_seed(7);
    /// assert_eq!(hasher.hash_one_key(5u32), hasher.hash_one_key(5u32));
    /// ```
    #[inline]
    pub fn hash_one_key<T: Hash>(&self, key: T) -> KeyHash {
        let mut hasher = self.clone();
        key.hash(&mut hasher);
        hasher.key_hash()
    }

    /// The hash of everything written so far. Same value as [`Hasher::finish`], typed.
    ///
    /// ```
    /// use keepcount_limits::hash::{KeyHash, KeyHasher};
    /// use std::hash::Hasher;
    /// let hasher = KeyHasher::with_seed(3);
    /// assert_eq!(hasher.key_hash(), KeyHash::from_u64(hasher.finish()));
    /// ```
    #[inline]
    pub fn key_hash(&self) -> KeyHash {
        KeyHash::from_u64(self.finish())
    }
}

impl Hasher for KeyHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        self.0.write(bytes);
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.0.write_u8(i);
    }
    #[inline]
    fn write_u16(&mut self, i: u16) {
        // siphasher writes integers little-endian (`to_le`) on every platform.
        self.0.write_u16(i);
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.0.write_u32(i);
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.0.write_u64(i);
    }
    #[inline]
    fn write_u128(&mut self, i: u128) {
        // std's default writes native-endian bytes: pin little-endian, low half first.
        // Truncations intended: the two halves.
        self.write_u64(i as u64);
        self.write_u64((i >> 64) as u64);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        // usize is at most 64 bits on every supported target: lossless, always written as 8
        // bytes so 32- and 64-bit platforms hash alike.
        self.write_u64(i as u64);
    }
    #[inline]
    fn write_isize(&mut self, i: isize) {
        // Sign-extended to 8 bytes, two's complement, on every target.
        self.write_u64(i as i64 as u64);
    }
    /// The 64-bit SipHash-1-3 output.
    #[inline]
    fn finish(&self) -> u64 {
        self.0.finish()
    }
}

/// A [`BuildHasher`] for keepcount's hash with a fixed seed, so it can key std collections too.
///
/// ```
/// use keepcount_limits::hash::SeededState;
/// use std::hash::BuildHasher;
/// let state = SeededState::new(9);
/// assert_eq!(state.hash_one("a"), state.hash_one("a"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeededState {
    seed: u64,
}

impl SeededState {
    /// Hashers keyed by `seed`.
    pub const fn new(seed: u64) -> Self {
        Self { seed }
    }

    /// The seed every hasher built here is keyed by.
    ///
    /// ```
    /// assert_eq!(keepcount_limits::hash::SeededState::new(9).seed(), 9);
    /// ```
    pub const fn seed(&self) -> u64 {
        self.seed
    }
}

impl BuildHasher for SeededState {
    type Hasher = KeyHasher;

    #[inline]
    fn build_hasher(&self) -> KeyHasher {
        KeyHasher::with_seed(self.seed)
    }
}

/// A key's 64-bit hash, the input of every row's column ([format §2–§3]).
///
/// This is the advanced API: hash a key once with
/// [`Estimator::hash_key`](crate::estimator::Estimator::hash_key) and reuse the `KeyHash` for
/// several operations on sketches with the same seed. A `KeyHash` from a sketch with a different
/// seed addresses unrelated counters (no error, no panic, just wrong answers).
///
/// ```
/// use keepcount_limits::hash::KeyHash;
/// let key = KeyHash::from_u64(0x0000_0002_0000_0001);
/// assert_eq!(key.to_u64(), 0x0000_0002_0000_0001);
/// ```
///
/// [format §2–§3]: https://github.com/keepcount/keepcount/blob/main/docs/format.md
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyHash(u64);

impl KeyHash {
    /// A hash from the 64-bit output of [`Hasher::finish`].
    #[inline]
    pub const fn from_u64(hash: u64) -> Self {
        Self(hash)
    }

    /// The 64-bit hash.
    #[inline]
    pub const fn to_u64(self) -> u64 {
        self.0
    }
}

/// A fresh random seed from the operating system's generator.
///
/// If the OS generator fails (it essentially never does), the seed falls back to the keys of
/// std's `RandomState`, which are themselves randomly initialised per process; this function
/// never panics.
///
/// ```
/// let a = keepcount_limits::hash::random_seed();
/// let b = keepcount_limits::hash::random_seed();
/// assert_ne!(a, b); // 2^-64 chance of a false failure
/// ```
pub fn random_seed() -> u64 {
    getrandom::u64()
        .unwrap_or_else(|_| std::collections::hash_map::RandomState::new().hash_one(0u8))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reference SipHash-2-4, 64-bit output, key 00..0f, message 00..n-1 (`vectors.h` of the
    /// reference implementation), checked here against the permutation keepcount uses.
    const REFERENCE_2_4: [u64; 8] = [
        0x726f_db47_dd0e_0e31,
        0x74f8_39c5_93dc_67fd,
        0x0d6c_8009_d9a9_4f5a,
        0x8567_6696_d7fb_7e2d,
        0xcf27_94e0_2771_87b7,
        0x1876_5564_cd99_a68d,
        0xcbc9_466e_58fe_e3ce,
        0xab02_00f5_8b01_d137,
    ];

    fn message(n: usize) -> Vec<u8> {
        (0..n).map(|i| i as u8).collect()
    }

    #[test]
    fn the_permutation_matches_the_reference_siphash_2_4_vectors() {
        for (n, &expected) in REFERENCE_2_4.iter().enumerate() {
            let mut hasher = siphasher::sip::SipHasher24::new_with_keys(
                0x0706_0504_0302_0100,
                0x0f0e_0d0c_0b0a_0908,
            );
            hasher.write(&message(n));
            assert_eq!(hasher.finish(), expected, "n = {n}");
        }
    }

    #[test]
    fn split_writes_hash_like_one_write() {
        let bytes = message(23);
        let whole = {
            let mut h = KeyHasher::with_seed(5);
            h.write(&bytes);
            h.finish()
        };
        for split in 0..bytes.len() {
            let mut h = KeyHasher::with_seed(5);
            h.write(&bytes[..split]);
            h.write(&bytes[split..]);
            assert_eq!(h.finish(), whole, "split at {split}");
        }
    }

    #[test]
    fn integer_writes_are_little_endian_bytes() {
        let as_bytes = |bytes: &[u8]| {
            let mut h = KeyHasher::with_seed(11);
            h.write(bytes);
            h.finish()
        };
        let with = |f: &dyn Fn(&mut KeyHasher)| {
            let mut h = KeyHasher::with_seed(11);
            f(&mut h);
            h.finish()
        };
        assert_eq!(with(&|h| h.write_u16(0x0201)), as_bytes(&[1, 2]));
        assert_eq!(with(&|h| h.write_u32(0x0403_0201)), as_bytes(&[1, 2, 3, 4]));
        assert_eq!(
            with(&|h| h.write_u64(0x0807_0605_0403_0201)),
            as_bytes(&[1, 2, 3, 4, 5, 6, 7, 8])
        );
        assert_eq!(
            with(&|h| h.write_u128(0x100f_0e0d_0c0b_0a09_0807_0605_0403_0201)),
            as_bytes(&message(17)[1..])
        );
        assert_eq!(
            with(&|h| h.write_usize(1)),
            as_bytes(&[1, 0, 0, 0, 0, 0, 0, 0])
        );
        assert_eq!(with(&|h| h.write_isize(-1)), as_bytes(&[0xff; 8]));
        assert_eq!(with(&|h| h.write_i64(-2)), as_bytes(&(-2i64).to_le_bytes()));
    }

    #[test]
    fn strings_hash_as_utf8_then_ff() {
        let h = KeyHasher::with_seed(1);
        let mut manual = KeyHasher::with_seed(1);
        manual.write("ż1".as_bytes());
        manual.write_u8(0xff);
        assert_eq!(h.hash_one_key("ż1"), manual.key_hash());
    }

    #[test]
    fn byte_slices_hash_as_length_then_bytes() {
        let h = KeyHasher::with_seed(1);
        let mut manual = KeyHasher::with_seed(1);
        manual.write(&3u64.to_le_bytes());
        manual.write(&[7, 8, 9]);
        assert_eq!(h.hash_one_key([7u8, 8, 9].as_slice()), manual.key_hash());
    }

    #[test]
    fn seeded_state_uses_the_key_hasher() {
        let state = SeededState::new(77);
        assert_eq!(
            state.hash_one("k"),
            KeyHasher::with_seed(77).hash_one_key("k").to_u64()
        );
    }

    #[test]
    fn the_key_hasher_is_siphash_1_3_keyed_by_seed_and_zero() {
        let mut reference = SipHasher13::new_with_keys(99, 0);
        reference.write(b"abc");
        let mut ours = KeyHasher::with_seed(99);
        ours.write(b"abc");
        assert_eq!(ours.finish(), reference.finish());
    }
}
