//! Keyed, stable key hashing: HalfSipHash-1-3 with 64-bit output ([format §1–§3]).
//!
//! Every sketch in this crate hashes a key once with [`KeyHasher`], keyed by the sketch's 64-bit
//! seed, and derives one counter per row from the resulting [`KeyHash`] by double hashing and
//! multiply-shift range reduction. The byte stream, the hash and the row derivation are a
//! compatibility promise shared with the Node binding and its TypeScript fallback.
//!
//! Why HalfSipHash-1-3: it is keyed (without the seed nobody can precompute keys that collide
//! with a victim's key, the hash-flooding defence SipHash is known for), it needs only 32-bit
//! additions, rotations and xors (so JavaScript computes it without `BigInt`), and one 64-bit
//! output feeds every row, where pingora-limits runs a full hash per row.
//!
//! [format §1–§3]: https://github.com/keepcount/keepcount/blob/main/docs/format.md

use std::hash::{BuildHasher, Hash, Hasher};

/// SipHash's initialisation constant for `v2`, 32-bit form: the ASCII bytes `"lyge"` of
/// `"somepseudorandomlygeneratedbytes"`, as in the reference `halfsiphash.c`.
const INIT_V2: u32 = 0x6c79_6765;
/// SipHash's initialisation constant for `v3`: the ASCII bytes `"tedb"`.
const INIT_V3: u32 = 0x7465_6462;
/// Domain separation for the 64-bit output form: xored into `v1` at initialisation and into `v2`
/// before finalisation (the 32-bit output form uses `0` and `0xff` instead).
const OUTPUT_64_MARK: u32 = 0xee;
/// Xored into `v1` between the two finalisations that produce the two output words.
const SECOND_WORD_MARK: u32 = 0xdd;

/// The streaming HalfSipHash-`C`-`D` hasher with 64-bit output: `C` compression rounds per
/// 4-byte message word, `D` finalisation rounds per output word.
///
/// keepcount uses [`KeyHasher`] (`C = 1`, `D = 3`); the round counts are parameters so the
/// permutation can be checked against the reference HalfSipHash-2-4 test vectors.
///
/// Integers are written little-endian whatever the platform (`usize`/`isize` as 8 bytes), so a
/// key hashes to the same value everywhere, as [format §1] requires.
///
/// ```
/// use keepcount_limits::hash::HalfSipHasher;
/// use std::hash::Hasher;
///
/// // Reference HalfSipHash-2-4 vector: key 00..07, empty message.
/// let hasher = HalfSipHasher::<2, 4>::with_seed(0x0706_0504_0302_0100);
/// assert_eq!(hasher.finish().to_le_bytes(), [0x21, 0x8d, 0x1f, 0x59, 0xb9, 0xb8, 0x3c, 0xc8]);
/// ```
///
/// # Performance
/// No allocation; integer writes are merged into a pending word without a per-byte loop. A `u32`
/// key costs `C + C + 2·D` rounds of a few 32-bit operations each (8 rounds for 1-3).
///
/// [format §1]: https://github.com/keepcount/keepcount/blob/main/docs/format.md
#[derive(Debug, Clone)]
pub struct HalfSipHasher<const C: usize, const D: usize> {
    v0: u32,
    v1: u32,
    v2: u32,
    v3: u32,
    /// Bytes written but not yet compressed (fewer than four), little-endian in the low bits.
    tail: u64,
    /// How many bytes `tail` holds: 0..=3.
    ntail: u32,
    /// Total bytes written, modulo 2^32 (only its low byte enters the hash).
    length: u32,
}

/// The hasher every keepcount sketch uses: HalfSipHash-1-3, 64-bit output.
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
pub type KeyHasher = HalfSipHasher<1, 3>;

impl<const C: usize, const D: usize> HalfSipHasher<C, D> {
    /// A hasher keyed by `seed`: `k0` is its low 32 bits, `k1` its high 32 bits (the 8-byte key,
    /// little-endian).
    ///
    /// ```
    /// use keepcount_limits::hash::KeyHasher;
    /// use std::hash::Hasher;
    /// assert_ne!(KeyHasher::with_seed(1).finish(), KeyHasher::with_seed(2).finish());
    /// ```
    #[inline]
    pub const fn with_seed(seed: u64) -> Self {
        // Truncations intended: the seed is split into its two 32-bit halves.
        let k0 = seed as u32;
        let k1 = (seed >> 32) as u32;
        Self {
            v0: k0,
            v1: k1 ^ OUTPUT_64_MARK,
            v2: INIT_V2 ^ k0,
            v3: INIT_V3 ^ k1,
            tail: 0,
            ntail: 0,
            length: 0,
        }
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

    /// The hash of everything written so far, as the two 32-bit words rows are derived from.
    /// Same value as [`Hasher::finish`], split.
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

    #[inline(always)]
    fn round(&mut self) {
        self.v0 = self.v0.wrapping_add(self.v1);
        self.v1 = self.v1.rotate_left(5);
        self.v1 ^= self.v0;
        self.v0 = self.v0.rotate_left(16);
        self.v2 = self.v2.wrapping_add(self.v3);
        self.v3 = self.v3.rotate_left(8);
        self.v3 ^= self.v2;
        self.v0 = self.v0.wrapping_add(self.v3);
        self.v3 = self.v3.rotate_left(7);
        self.v3 ^= self.v0;
        self.v2 = self.v2.wrapping_add(self.v1);
        self.v1 = self.v1.rotate_left(13);
        self.v1 ^= self.v2;
        self.v2 = self.v2.rotate_left(16);
    }

    #[inline(always)]
    fn compress(&mut self, word: u32) {
        self.v3 ^= word;
        for _ in 0..C {
            self.round();
        }
        self.v0 ^= word;
    }

    /// Appends the low `n` bytes of `bytes` (`n <= 4`, higher bytes zero), little-endian.
    #[inline(always)]
    fn short_write(&mut self, bytes: u32, n: u32) {
        self.length = self.length.wrapping_add(n);
        // ntail <= 3 and n <= 4, so the combined stream holds at most 7 bytes: fits in a u64.
        let combined = self.tail | (u64::from(bytes) << (8 * self.ntail));
        let total = self.ntail + n;
        if total >= 4 {
            // Truncation intended: the first four pending bytes form the next word.
            self.compress(combined as u32);
            self.tail = combined >> 32;
            self.ntail = total - 4;
        } else {
            self.tail = combined;
            self.ntail = total;
        }
    }
}

impl<const C: usize, const D: usize> Hasher for HalfSipHasher<C, D> {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        // Only the low byte of the length enters the hash, so counting modulo 2^32 is exact.
        self.length = self.length.wrapping_add(bytes.len() as u32);
        let mut rest = bytes;
        while self.ntail != 0 {
            let Some((&byte, after)) = rest.split_first() else {
                return;
            };
            self.tail |= u64::from(byte) << (8 * self.ntail);
            self.ntail += 1;
            rest = after;
            if self.ntail == 4 {
                // Truncation intended: tail holds exactly four bytes here.
                self.compress(self.tail as u32);
                self.tail = 0;
                self.ntail = 0;
            }
        }
        let mut words = rest.chunks_exact(4);
        for word in &mut words {
            self.compress(u32::from_le_bytes([word[0], word[1], word[2], word[3]]));
        }
        for &byte in words.remainder() {
            self.tail |= u64::from(byte) << (8 * self.ntail);
            self.ntail += 1;
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.short_write(u32::from(i), 1);
    }

    #[inline]
    fn write_u16(&mut self, i: u16) {
        self.short_write(u32::from(i), 2);
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.short_write(i, 4);
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        // Truncations intended: low word first, little-endian.
        self.short_write(i as u32, 4);
        self.short_write((i >> 32) as u32, 4);
    }

    #[inline]
    fn write_u128(&mut self, i: u128) {
        // Truncations intended: low half first, little-endian.
        self.write_u64(i as u64);
        self.write_u64((i >> 64) as u64);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        // usize is at most 64 bits on every supported target: lossless, written as 8 bytes.
        self.write_u64(i as u64);
    }

    #[inline]
    fn write_i8(&mut self, i: i8) {
        self.write_u8(i as u8);
    }

    #[inline]
    fn write_i16(&mut self, i: i16) {
        self.write_u16(i as u16);
    }

    #[inline]
    fn write_i32(&mut self, i: i32) {
        self.write_u32(i as u32);
    }

    #[inline]
    fn write_i64(&mut self, i: i64) {
        self.write_u64(i as u64);
    }

    #[inline]
    fn write_i128(&mut self, i: i128) {
        self.write_u128(i as u128);
    }

    #[inline]
    fn write_isize(&mut self, i: isize) {
        // Sign-extended to 8 bytes, two's complement, on every target.
        self.write_u64(i as i64 as u64);
    }

    /// The 64-bit HalfSipHash output, its 8 bytes read little-endian.
    #[inline]
    fn finish(&self) -> u64 {
        let mut s = self.clone();
        // Truncation intended: the reference puts the length's low byte in the top byte.
        let last = (self.length << 24) | (self.tail as u32);
        s.v3 ^= last;
        for _ in 0..C {
            s.round();
        }
        s.v0 ^= last;
        s.v2 ^= OUTPUT_64_MARK;
        for _ in 0..D {
            s.round();
        }
        let low = s.v1 ^ s.v3;
        s.v1 ^= SECOND_WORD_MARK;
        for _ in 0..D {
            s.round();
        }
        let high = s.v1 ^ s.v3;
        u64::from(low) | (u64::from(high) << 32)
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

/// A key's hash, split into the two 32-bit words rows are derived from ([format §2–§3]).
///
/// This is the advanced API: hash a key once with
/// [`Estimator::hash_key`](crate::estimator::Estimator::hash_key) and reuse the `KeyHash` for
/// several operations on sketches with the same seed. A `KeyHash` from a sketch with a different
/// seed addresses unrelated counters (no error, no panic, just wrong answers).
///
/// ```
/// use keepcount_limits::hash::KeyHash;
/// let key = KeyHash::from_parts(0x8000_0000, 1);
/// assert_eq!(key.column(0, 1000), 500);
/// assert_eq!(key.column(1, 1000), 500); // 0x8000_0001 * 1000 >> 32
/// ```
///
/// [format §2–§3]: https://github.com/keepcount/keepcount/blob/main/docs/format.md
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyHash {
    h1: u32,
    h2: u32,
}

impl KeyHash {
    /// A hash from its two words: `h1` = the first four output bytes, `h2` = the last four,
    /// each read little-endian.
    ///
    /// ```
    /// use keepcount_limits::hash::KeyHash;
    /// assert_eq!(KeyHash::from_parts(1, 2).h2(), 2);
    /// ```
    #[inline]
    pub const fn from_parts(h1: u32, h2: u32) -> Self {
        Self { h1, h2 }
    }

    /// A hash from the 64-bit output of [`Hasher::finish`]: `h1` is its low half.
    ///
    /// ```
    /// use keepcount_limits::hash::KeyHash;
    /// assert_eq!(KeyHash::from_u64(0x0000_0002_0000_0001), KeyHash::from_parts(1, 2));
    /// ```
    #[inline]
    pub const fn from_u64(hash: u64) -> Self {
        // Truncations intended: the two halves.
        Self {
            h1: hash as u32,
            h2: (hash >> 32) as u32,
        }
    }

    /// The first word: the row-0 position before range reduction.
    ///
    /// ```
    /// assert_eq!(keepcount_limits::hash::KeyHash::from_parts(1, 2).h1(), 1);
    /// ```
    #[inline]
    pub const fn h1(self) -> u32 {
        self.h1
    }

    /// The second word: the step between rows in double hashing.
    ///
    /// ```
    /// assert_eq!(keepcount_limits::hash::KeyHash::from_parts(1, 2).h2(), 2);
    /// ```
    #[inline]
    pub const fn h2(self) -> u32 {
        self.h2
    }

    /// The 64-bit hash the two words came from.
    ///
    /// ```
    /// use keepcount_limits::hash::KeyHash;
    /// assert_eq!(KeyHash::from_u64(12345).to_u64(), 12345);
    /// ```
    #[inline]
    pub const fn to_u64(self) -> u64 {
        (self.h1 as u64) | ((self.h2 as u64) << 32)
    }

    /// The column this key uses in `row` of a sketch `slots` wide ([format §3]):
    /// `g = h1 + row·h2 (mod 2^32)`, `column = ⌊g · slots / 2^32⌋`, always `< slots` when
    /// `slots > 0` (and `0` when `slots` is `0`).
    ///
    /// ```
    /// use keepcount_limits::hash::KeyHash;
    /// let key = KeyHash::from_parts(u32::MAX, u32::MAX);
    /// assert_eq!(key.column(0, 8), 7);
    /// assert_eq!(key.column(1, 8), 7); // u32::MAX + u32::MAX wraps to u32::MAX - 1
    /// ```
    ///
    /// [format §3]: https://github.com/keepcount/keepcount/blob/main/docs/format.md
    #[inline]
    pub const fn column(self, row: u32, slots: u32) -> u32 {
        let g = self.h1.wrapping_add(row.wrapping_mul(self.h2));
        // g < 2^32 and slots < 2^32, so the product fits in 64 bits and the result is < slots.
        ((g as u64 * slots as u64) >> 32) as u32
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

    /// Reference HalfSipHash-2-4, 64-bit output, key 00..07, message 00..n-1.
    const REFERENCE_2_4: [[u8; 8]; 7] = [
        [0x21, 0x8d, 0x1f, 0x59, 0xb9, 0xb8, 0x3c, 0xc8],
        [0xbe, 0x55, 0x24, 0x12, 0xf8, 0x38, 0x73, 0x15],
        [0x06, 0x4f, 0x39, 0xef, 0x7c, 0x50, 0xeb, 0x57],
        [0xce, 0x0f, 0x1a, 0x45, 0xf7, 0x06, 0x06, 0x79],
        [0xd5, 0xe7, 0x8a, 0x17, 0x5b, 0xe5, 0x2e, 0xa1],
        [0xcb, 0x9d, 0x7c, 0x3f, 0x2f, 0x3d, 0xb5, 0x80],
        [0xce, 0x3e, 0x91, 0x35, 0x8a, 0xa2, 0xbc, 0x25],
    ];
    const REFERENCE_KEY: u64 = 0x0706_0504_0302_0100;

    fn message(n: usize) -> Vec<u8> {
        (0..n).map(|i| i as u8).collect()
    }

    #[test]
    fn matches_reference_halfsiphash_2_4_vectors() {
        for (n, expected) in REFERENCE_2_4.iter().enumerate() {
            let mut hasher = HalfSipHasher::<2, 4>::with_seed(REFERENCE_KEY);
            hasher.write(&message(n));
            assert_eq!(&hasher.finish().to_le_bytes(), expected, "n = {n}");
        }
    }

    #[test]
    fn split_writes_hash_like_one_write() {
        let bytes = message(23);
        let whole = {
            let mut h = KeyHasher::with_seed(REFERENCE_KEY);
            h.write(&bytes);
            h.finish()
        };
        for split in 0..=bytes.len() {
            for second in split..=bytes.len() {
                let mut h = KeyHasher::with_seed(REFERENCE_KEY);
                h.write(&bytes[..split]);
                h.write(&bytes[split..second]);
                h.write(&bytes[second..]);
                assert_eq!(h.finish(), whole, "split at {split}, {second}");
            }
        }
    }

    #[test]
    fn integer_writes_are_little_endian_bytes() {
        let via_bytes = |bytes: &[u8]| {
            let mut h = KeyHasher::with_seed(5);
            h.write(&[9]);
            h.write(bytes);
            h.finish()
        };
        let via = |f: &dyn Fn(&mut KeyHasher)| {
            let mut h = KeyHasher::with_seed(5);
            h.write_u8(9);
            f(&mut h);
            h.finish()
        };
        assert_eq!(via(&|h| h.write_u16(0x0102)), via_bytes(&[2, 1]));
        assert_eq!(via(&|h| h.write_u32(0x0102_0304)), via_bytes(&[4, 3, 2, 1]));
        let x = 0x0102_0304_0506_0708u64;
        assert_eq!(via(&|h| h.write_u64(x)), via_bytes(&x.to_le_bytes()));
        assert_eq!(via(&|h| h.write_usize(7)), via_bytes(&7u64.to_le_bytes()));
        assert_eq!(via(&|h| h.write_isize(-1)), via_bytes(&[0xff; 8]));
        assert_eq!(via(&|h| h.write_i64(-2)), via_bytes(&(-2i64).to_le_bytes()));
        let y = u128::MAX / 3;
        assert_eq!(via(&|h| h.write_u128(y)), via_bytes(&y.to_le_bytes()));
        assert_eq!(via(&|h| h.write_i8(-1)), via_bytes(&[0xff]));
        assert_eq!(via(&|h| h.write_i16(-1)), via_bytes(&[0xff; 2]));
        assert_eq!(via(&|h| h.write_i32(-1)), via_bytes(&[0xff; 4]));
        assert_eq!(via(&|h| h.write_i128(-1)), via_bytes(&[0xff; 16]));
    }

    #[test]
    fn strings_hash_as_utf8_then_ff() {
        let mut h = KeyHasher::with_seed(1);
        h.write(b"abc\xff");
        assert_eq!(
            KeyHasher::with_seed(1).hash_one_key("abc").to_u64(),
            h.finish()
        );
    }

    #[test]
    fn byte_slices_hash_as_length_then_bytes() {
        let mut h = KeyHasher::with_seed(1);
        h.write(&3u64.to_le_bytes());
        h.write(&[1, 2, 3]);
        let key: &[u8] = &[1, 2, 3];
        assert_eq!(
            KeyHasher::with_seed(1).hash_one_key(key).to_u64(),
            h.finish()
        );
    }

    #[test]
    fn seeded_state_uses_the_key_hasher() {
        let state = SeededState::new(11);
        assert_eq!(
            state.hash_one(17u32),
            KeyHasher::with_seed(11).hash_one_key(17u32).to_u64()
        );
    }

    #[test]
    fn column_is_always_below_slots() {
        for slots in [0u32, 1, 2, 7, 1000, u32::MAX] {
            for h in [0u32, 1, 0x7fff_ffff, u32::MAX] {
                let key = KeyHash::from_parts(h, h.rotate_left(7));
                for row in 0..32 {
                    let column = key.column(row, slots);
                    assert!(column < slots.max(1), "{slots} {h} {row}");
                }
            }
        }
    }

    #[test]
    fn key_hash_round_trips_through_u64() {
        let key = KeyHash::from_parts(0xdead_beef, 0x0123_4567);
        assert_eq!(KeyHash::from_u64(key.to_u64()), key);
        assert_eq!(key.h1(), 0xdead_beef);
        assert_eq!(key.h2(), 0x0123_4567);
    }
}
