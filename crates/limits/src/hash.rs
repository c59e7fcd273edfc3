//! Keyed, stable key hashing: rapidhash V3 with 64-bit output ([format §1–§2]).
//!
//! Every sketch in this crate hashes a key once with a [`KeyHasher`] built from its
//! [`SeededState`] (the 64-bit seed and the secrets derived from it), and derives one counter per
//! row from the resulting [`KeyHash`] with per-row hash functions drawn from the same seed
//! ([`Rows`](crate::Rows)). The byte stream and the hash are a compatibility promise shared with
//! the Node binding and its TypeScript fallback.
//!
//! Why rapidhash V3: it is the `rapidhash` crate's portable function, whose output that crate
//! promises never to change between versions or platforms; it is keyed here by the seed *and*
//! seven secrets derived from it (`RapidSecrets::seed`), so every multiplicand an input meets is
//! unknown to an outsider without the seed; and a key of up to 16 bytes costs two 64 × 64 → 128-bit
//! multiplications. An `incr` waits on the hash before its first atomic add, and SipHash-1-3
//! (format version 2) spent four dependent rounds there: on pingora's blog shape (3 × 1024) that
//! made keepcount 1.1× slower than pingora-limits, with rapidhash it is faster
//! (`cargo bench -p keepcount-limits --bench estimator`).
//!
//! What keying buys, and what it does not: rapidhash is not a cryptographic pseudo-random function
//! (its authors call it "minimally DoS resistant", like foldhash). The sketch's error bound does not
//! rest on it: every row reads the key hash through its own strongly universal function
//! ([`crate::Rows`]), so rows are independent for any two keys whose 64-bit hashes differ. What
//! rests on rapidhash is only that an outsider who does not know the seed cannot choose two keys
//! with the same 64-bit hash. The seed-independent collisions published against its predecessor
//! wyhash come from an input that zeroes a multiplicand by matching a public constant; here every
//! multiplicand is an input word xored with a secret derived from the seed.
//!
//! [`KeyHasher`] only pins the byte stream: integers little-endian on every platform,
//! `usize`/`isize` as 8 bytes; the bytes go to rapidhash's streaming hasher, whose output equals
//! the one-shot function over the whole stream.
//!
//! [format §1–§2]: https://github.com/keepcount/keepcount/blob/main/docs/format.md

use rapidhash::v3::{RapidSecrets, RapidStreamHasherV3};
use std::hash::{BuildHasher, Hash, Hasher};

/// A seed and the rapidhash secrets derived from it: what every key hash under that seed needs.
///
/// Deriving the secrets costs eight multiplications, so a sketch builds its state once and makes
/// a [`KeyHasher`] from it per key.
///
/// ```
/// use keepcount_limits::hash::SeededState;
/// let state = SeededState::new(9);
/// assert_eq!(state.hash_one_key("a"), state.hash_one_key("a"));
/// assert_ne!(state.hash_one_key("a"), SeededState::new(10).hash_one_key("a"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeededState {
    seed: u64,
    secrets: RapidSecrets,
}

impl SeededState {
    /// The state for `seed`: rapidhash's `RapidSecrets::seed(seed)`.
    pub const fn new(seed: u64) -> Self {
        Self {
            seed,
            secrets: RapidSecrets::seed(seed),
        }
    }

    /// The seed the secrets were derived from.
    ///
    /// ```
    /// assert_eq!(keepcount_limits::hash::SeededState::new(9).seed(), 9);
    /// ```
    pub const fn seed(&self) -> u64 {
        self.seed
    }

    /// A hasher for one key under this seed.
    ///
    /// ```
    /// use keepcount_limits::hash::SeededState;
    /// use std::hash::Hash;
    /// let state = SeededState::new(42);
    /// let mut hasher = state.hasher();
    /// "1.2.3.4".hash(&mut hasher);
    /// assert_eq!(hasher.key_hash(), state.hash_one_key("1.2.3.4"));
    /// ```
    #[inline]
    pub fn hasher(&self) -> KeyHasher<'_> {
        KeyHasher(RapidStreamHasherV3::new(&self.secrets))
    }

    /// Hashes `key` under this seed.
    #[inline]
    pub fn hash_one_key<T: Hash>(&self, key: T) -> KeyHash {
        let mut hasher = self.hasher();
        key.hash(&mut hasher);
        hasher.key_hash()
    }
}

/// The hasher every keepcount sketch uses: rapidhash V3, 64-bit output, keyed by a
/// [`SeededState`].
///
/// # Performance
/// No allocation: bytes are buffered in a 112-byte chunk and mixed a chunk at a time. A key of up
/// to 16 bytes (a `u32`, an `i64`, an IPv4 address as text) costs two 64 × 64 → 128-bit
/// multiplications; longer keys one more per 16 bytes, spread over seven independent lanes past
/// 112 bytes.
pub struct KeyHasher<'a>(RapidStreamHasherV3<'a>);

impl KeyHasher<'_> {
    /// The hash of everything written so far. Same value as [`Hasher::finish`], typed.
    ///
    /// ```
    /// use keepcount_limits::hash::{KeyHash, SeededState};
    /// use std::hash::Hasher;
    /// let state = SeededState::new(3);
    /// let hasher = state.hasher();
    /// assert_eq!(hasher.key_hash(), KeyHash::from_u64(hasher.finish()));
    /// ```
    #[inline]
    pub fn key_hash(&self) -> KeyHash {
        KeyHash::from_u64(self.finish())
    }
}

impl std::fmt::Debug for KeyHasher<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The buffered bytes and the secrets stay out of logs.
        f.debug_struct("KeyHasher").finish_non_exhaustive()
    }
}

impl Hasher for KeyHasher<'_> {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        self.0.write(bytes);
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.write(&[i]);
    }
    #[inline]
    fn write_u16(&mut self, i: u16) {
        // std's default writes native-endian bytes: pin little-endian.
        self.write(&i.to_le_bytes());
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.write(&i.to_le_bytes());
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.write(&i.to_le_bytes());
    }
    #[inline]
    fn write_u128(&mut self, i: u128) {
        self.write(&i.to_le_bytes());
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
    /// The 64-bit rapidhash V3 output.
    #[inline]
    fn finish(&self) -> u64 {
        self.0.finish()
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
    use rapidhash::v3::rapidhash_v3_seeded;

    fn message(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 31 + 7) as u8).collect()
    }

    #[test]
    fn the_hash_is_the_portable_rapidhash_v3_of_the_stream() {
        // Every length path of rapidhash (<= 16, 17..=112, > 112 with full chunks) and chunk
        // boundaries on either side of 112.
        let state = SeededState::new(0xdead_beef);
        for n in [0, 1, 3, 4, 7, 8, 16, 17, 48, 112, 113, 224, 225, 300] {
            let bytes = message(n);
            let mut h = state.hasher();
            h.write(&bytes);
            assert_eq!(
                h.finish(),
                rapidhash_v3_seeded(&bytes, &RapidSecrets::seed(0xdead_beef)),
                "n = {n}"
            );
        }
    }

    #[test]
    fn split_writes_hash_like_one_write() {
        let state = SeededState::new(5);
        for n in [23, 130, 250] {
            let bytes = message(n);
            let whole = {
                let mut h = state.hasher();
                h.write(&bytes);
                h.finish()
            };
            for split in 0..bytes.len() {
                let mut h = state.hasher();
                h.write(&bytes[..split]);
                h.write(&bytes[split..]);
                assert_eq!(h.finish(), whole, "n = {n}, split at {split}");
            }
        }
    }

    #[test]
    fn integer_writes_are_little_endian_bytes() {
        let state = SeededState::new(11);
        let as_bytes = |bytes: &[u8]| {
            let mut h = state.hasher();
            h.write(bytes);
            h.finish()
        };
        let with = |f: &dyn Fn(&mut KeyHasher)| {
            let mut h = state.hasher();
            f(&mut h);
            h.finish()
        };
        let counting: Vec<u8> = (0u8..17).collect();
        assert_eq!(with(&|h| h.write_u16(0x0201)), as_bytes(&[1, 2]));
        assert_eq!(with(&|h| h.write_u32(0x0403_0201)), as_bytes(&[1, 2, 3, 4]));
        assert_eq!(
            with(&|h| h.write_u64(0x0807_0605_0403_0201)),
            as_bytes(&[1, 2, 3, 4, 5, 6, 7, 8])
        );
        assert_eq!(
            with(&|h| h.write_u128(0x100f_0e0d_0c0b_0a09_0807_0605_0403_0201)),
            as_bytes(&counting[1..])
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
        let state = SeededState::new(1);
        let mut manual = state.hasher();
        manual.write("ż1".as_bytes());
        manual.write_u8(0xff);
        assert_eq!(state.hash_one_key("ż1"), manual.key_hash());
    }

    #[test]
    fn byte_slices_hash_as_length_then_bytes() {
        let state = SeededState::new(1);
        let mut manual = state.hasher();
        manual.write(&3u64.to_le_bytes());
        manual.write(&[7, 8, 9]);
        assert_eq!(
            state.hash_one_key([7u8, 8, 9].as_slice()),
            manual.key_hash()
        );
    }

    #[test]
    fn inputs_that_zero_a_product_under_the_public_secrets_do_not_collide_under_a_seed() {
        // rapidhash's public default secret 1. Under the public secrets (`seed_cpp`, what the C++
        // API uses) a 16-byte message that starts with it zeroes the first product, so every such
        // message hashes alike, whatever its last 8 bytes: the seed-independent multicollision of
        // wyhash-style hashes. keepcount derives all secrets from the seed, so the same messages
        // must spread. (False failure: 1000 random 64-bit hashes collide with probability < 2^-44.)
        const PUBLIC_SECRET_1: u64 = 0x8bb8_4b93_962e_acc9;
        let message = |tail: u64| {
            let mut bytes = PUBLIC_SECRET_1.to_le_bytes().to_vec();
            bytes.extend_from_slice(&tail.to_le_bytes());
            bytes
        };
        let public = RapidSecrets::seed_cpp(0);
        let first = rapidhash_v3_seeded(&message(0), &public);
        assert!((1..1000).all(|t| rapidhash_v3_seeded(&message(t), &public) == first));
        for seed in [0, 1, 0xdead_beef] {
            let state = SeededState::new(seed);
            let hashes: std::collections::HashSet<u64> = (0..1000)
                .map(|t| {
                    let mut h = state.hasher();
                    h.write(&message(t));
                    h.finish()
                })
                .collect();
            assert_eq!(hashes.len(), 1000, "seed {seed}");
        }
    }

    #[test]
    fn the_debug_output_hides_the_secrets() {
        let state = SeededState::new(77);
        assert_eq!(format!("{:?}", state.hasher()), "KeyHasher { .. }");
    }
}
