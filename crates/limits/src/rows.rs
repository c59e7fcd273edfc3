//! From a key's hash to one column per row, with rows that are independent ([format §3]).
//!
//! For the key's 64-bit hash `x = x1·2^32 + x0` and a sketch `slots` wide, every row `i` reads its
//! own function of the whole hash:
//!
//! ```text
//! word_i = ((a_i·x0 + c_i·x1 + b_i) mod 2^64) >> 32     (vector multiply-shift)
//! column = (word_i · slots) >> 32                       (Lemire's range reduction)
//! ```
//!
//! with `a_i`, `c_i`, `b_i` 64-bit words drawn from the seed.
//!
//! # Why the rows are independent
//! Multiply-shift on the vector `(x0, x1)` with 64-bit multipliers and a 64-bit offset, keeping
//! the top 32 bits, is **strongly universal** (Dietzfelbinger 1996; Thorup, "High Speed Hashing
//! for Integers and Strings", 2015): for any two different hashes the pair of words is uniform
//! over all 2^64 pairs, whatever the hashes are. Each row's words are drawn independently, so given
//! two keys with different 64-bit hashes, whether they meet in a row is independent of every other
//! row, and in each row they meet with probability at most `⌈2^32/slots⌉ / 2^32 < 1/slots + 2^-32`
//! (Lemire's reduction gives each column `⌊2^32/slots⌋` or `⌈2^32/slots⌉` words). That is what
//! Cormode and Muthukrishnan's (ε, δ) analysis needs, and it asks nothing of the key hash but that
//! distinct keys rarely share all 64 bits of it ([`crate::hash`]).
//!
//! Format version 2 let rows 0 and 1 read the two halves of the key hash directly, which was sound
//! because its key hash, SipHash-1-3, is a pseudo-random function. rapidhash (version 3) is not,
//! so every row now goes through its own function: one more multiplication on rows 0 and 1, done
//! in parallel with the others, off the hash's dependency chain but before the first counter.
//!
//! Format version 1 derived row `i` by double hashing, `h1 + i·h2`, and reduced with the high
//! bits: keys whose `h1` and `h2` were both close shared a column in every row, so rows behaved
//! like two, and the error bound did not hold (53 pairs of 200,000 keys shared all four counters
//! of a 4 × 8192 sketch where independence predicts 4·10⁻⁶).
//!
//! The row words come from SipHash-1-3 (a pseudo-random function, so the words of different rows
//! are independent) keyed by `(seed, ROW_DOMAIN)`, applied to the 8-byte little-endian message
//! `3·i + j` for row `i` and `j` = 0, 1, 2 for `a_i`, `c_i`, `b_i`. It runs only when a sketch is
//! built.
//!
//! [format §3]: https://github.com/keepcount/keepcount/blob/main/docs/format.md

use crate::hash::KeyHash;
use crate::shape::{MAX_HASHES, Shape};
use siphasher::sip::SipHasher13;
use std::hash::Hasher;

/// The second half of the SipHash key under which the row functions are drawn from the seed.
const ROW_DOMAIN: u64 = 1;

/// One row's strongly universal function: `((a·x0 + c·x1 + b) mod 2^64) >> 32`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct RowFunction {
    a: u64,
    c: u64,
    b: u64,
}

impl RowFunction {
    /// `(a·x0 + c·x1 + b) mod 2^64`, whose high half is the row's word.
    #[inline(always)]
    fn value(self, x0: u64, x1: u64) -> u64 {
        self.a
            .wrapping_mul(x0)
            .wrapping_add(self.c.wrapping_mul(x1))
            .wrapping_add(self.b)
    }

    /// The row's 32-bit word for the key hash's halves.
    #[inline(always)]
    fn word(self, x0: u64, x1: u64) -> u64 {
        self.value(x0, x1) >> 32
    }
}

/// The per-row hash functions of a sketch: which counter a key uses in each row.
///
/// Built once per sketch from its seed and shape (three SipHash calls per row), then used
/// on every operation.
///
/// ```
/// use keepcount_limits::{Rows, Shape};
/// let rows = Rows::new(Shape::new(4, 1000).unwrap(), 42);
/// let key = keepcount_limits::hash::SeededState::new(42).hash_one_key("1.2.3.4");
/// for row in 0..4 {
///     assert!(rows.column(row, key) < 1000);
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rows {
    /// Rows `0..hashes`' functions; the rest stay zero.
    functions: [RowFunction; MAX_HASHES],
    hashes: usize,
    slots: u64,
    /// Which path [`Rows::for_each_index`] takes, decided once here rather than from `hashes`
    /// and `slots` on every call.
    path: Path,
}

/// How [`Rows::for_each_index`] computes a shape's columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    /// 3 rows `2^k` wide, `k ≥ 1`, in a straight line; the value is `64 − k`: a column is then
    /// the top `k` bits of a 64-bit value whose high half is the row's word.
    ThreeRowsShift(u32),
    /// 4 rows `2^k` wide, as above.
    FourRowsShift(u32),
    /// Any other shape (1 slot included, where the shift would be the whole width): a loop over
    /// the rows with Lemire's multiplication.
    Loop,
}

impl Path {
    fn for_shape(shape: Shape) -> Self {
        let slots = shape.slots();
        if !slots.is_power_of_two() || slots == 1 {
            return Self::Loop;
        }
        let shift = 64 - slots.trailing_zeros();
        match shape.hashes() {
            3 => Self::ThreeRowsShift(shift),
            4 => Self::FourRowsShift(shift),
            _ => Self::Loop,
        }
    }
}

impl Rows {
    /// The row functions of a sketch of `shape` keyed by `seed`.
    pub fn new(shape: Shape, seed: u64) -> Self {
        let mut functions = [RowFunction::default(); MAX_HASHES];
        for (row, function) in functions.iter_mut().take(shape.hashes()).enumerate() {
            // row < 32: the message numbers are tiny.
            let row = row as u64;
            let word = |j: u64| {
                let mut hasher = SipHasher13::new_with_keys(seed, ROW_DOMAIN);
                hasher.write_u64(3 * row + j);
                hasher.finish()
            };
            *function = RowFunction {
                a: word(0),
                c: word(1),
                b: word(2),
            };
        }
        Self {
            functions,
            hashes: shape.hashes(),
            slots: shape.slots() as u64,
            path: Path::for_shape(shape),
        }
    }

    /// The column `key` uses in `row`, always `< slots`. A row past the shape's last reads as
    /// column 0 rather than panicking.
    pub fn column(&self, row: usize, key: KeyHash) -> usize {
        let (x0, x1) = halves(key);
        let word = if row < self.hashes {
            self.functions[row].word(x0, x1)
        } else {
            0
        };
        self.reduce(word)
    }

    /// Calls `f` with the row-major index of the key's counter in each row, row 0 first.
    ///
    /// # Performance
    /// An `incr` waits on the chain hash → columns → atomic adds, so the columns take the
    /// shortest path there is. Sketches of 3 or 4 rows of a power-of-two width (pingora's blog
    /// shape 3 × 1024, the Node API's default 4 × 8192) take a straight line: every row's
    /// multiplications run side by side and every column is computed before the first counter is
    /// touched, and Lemire's `(word · 2^k) >> 32` for `slots = 2^k` is computed as the equal
    /// `word >> (32 − k)`, one shift instead of a 3-cycle multiplication and a shift. Other shapes
    /// loop over the rows with the multiplication; the columns are the same. Measured in a copy of
    /// the crate bench's loop, 3 × 1024, one thread, best of 7 rounds (AMD EPYC, Zen 3,
    /// 2026-11-23): 11.1 ns per `incr` with the loop, 10.1 ns with the straight line.
    #[inline(always)]
    pub fn for_each_index(&self, key: KeyHash, f: impl FnMut(usize)) {
        match self.path {
            Path::ThreeRowsShift(shift) => self.fixed_rows::<3>(key, shift, f),
            Path::FourRowsShift(shift) => self.fixed_rows::<4>(key, shift, f),
            Path::Loop => self.any_rows(key, f),
        }
    }

    /// [`for_each_index`](Self::for_each_index) for `ROWS` rows `2^(64 − shift)` wide: each
    /// row's column is the top bits of the 64-bit value whose high half is the row's word.
    #[inline(always)]
    fn fixed_rows<const ROWS: usize>(&self, key: KeyHash, shift: u32, mut f: impl FnMut(usize)) {
        let (x0, x1) = halves(key);
        let slots = self.slots as usize;
        let mut indexes = [0; ROWS];
        for (row, index) in indexes.iter_mut().enumerate() {
            let value = self.functions[row].value(x0, x1);
            *index = row * slots + (value >> shift) as usize;
        }
        for index in indexes {
            f(index);
        }
    }

    /// [`for_each_index`](Self::for_each_index) for any shape, with Lemire's multiplication.
    #[inline(always)]
    fn any_rows(&self, key: KeyHash, mut f: impl FnMut(usize)) {
        let (x0, x1) = halves(key);
        let slots = self.slots as usize;
        let mut row_start = 0;
        // hashes <= MAX_HASHES, so the range is within the array.
        for function in &self.functions[..self.hashes] {
            f(row_start + self.reduce(function.word(x0, x1)));
            row_start += slots;
        }
    }

    /// Lemire's reduction of a 32-bit word to `0..slots`: `word < 2^32` and `slots <= 2^27`, so
    /// the product fits in 64 bits and the result is `< slots`.
    #[inline(always)]
    fn reduce(&self, word: u64) -> usize {
        ((word * self.slots) >> 32) as usize
    }
}

/// The key hash's low and high 32 bits.
#[inline(always)]
fn halves(key: KeyHash) -> (u64, u64) {
    let x = key.to_u64();
    (x & 0xffff_ffff, x >> 32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::SeededState;

    #[test]
    fn columns_stay_below_slots_for_extreme_hashes() {
        for slots in [1usize, 2, 7, 1000, 1 << 27] {
            let rows = Rows::new(Shape::new(1, slots).unwrap(), 3);
            for x in [0u64, 1, u64::MAX, 0x8000_0000_0000_0000, 0xffff_ffff] {
                assert!(rows.column(0, KeyHash::from_u64(x)) < slots);
            }
        }
    }

    #[test]
    fn every_row_reads_its_own_function_of_the_whole_hash() {
        // Two hashes with the same low half and the same high half in turn: a row that read one
        // half directly would give both the same column; every row must tell them apart for some
        // of these pairs.
        let rows = Rows::new(Shape::new(4, 1 << 16).unwrap(), 5);
        for row in 0..4 {
            let differs = (1u64..64).any(|i| {
                let low = KeyHash::from_u64(0x1234_5678 | (i << 32));
                let high = KeyHash::from_u64(0x1234_5678_0000_0000 | i);
                rows.column(row, low) != rows.column(row, KeyHash::from_u64(0x1234_5678))
                    && rows.column(row, high)
                        != rows.column(row, KeyHash::from_u64(0x1234_5678_0000_0000))
            });
            assert!(differs, "row {row}");
        }
        assert_eq!(rows.column(4, KeyHash::from_u64(7)), 0);
    }

    #[test]
    fn indexes_are_row_major() {
        let shape = Shape::new(4, 10).unwrap();
        let rows = Rows::new(shape, 9);
        let key = SeededState::new(9).hash_one_key("k");
        let mut seen = Vec::new();
        rows.for_each_index(key, |i| seen.push(i));
        let expected: Vec<usize> = (0..4).map(|r| r * 10 + rows.column(r, key)).collect();
        assert_eq!(seen, expected);
    }

    #[test]
    fn the_straight_line_paths_pick_the_columns_of_lemires_reduction() {
        // 3 and 4 rows of a power-of-two width take the shift path, down to 2 slots and up to
        // the largest width a 4-row shape allows; 1 slot and other widths take the loop. Every
        // index must be what `column`, which always multiplies, says.
        let shapes = [
            (3, 1024),
            (4, 8192),
            (3, 2),
            (4, 2),
            (4, 1 << 25),
            (3, 1),
            (4, 1000),
        ];
        for (hashes, slots) in shapes {
            let shape = Shape::new(hashes, slots).unwrap();
            let rows = Rows::new(shape, 0xfeed);
            let hasher = SeededState::new(0xfeed);
            let extremes = [0, 1, u64::MAX, 0xffff_ffff, 0xffff_ffff_0000_0000];
            let keys = (0u32..2000)
                .map(|k| hasher.hash_one_key(k))
                .chain(extremes.map(KeyHash::from_u64));
            for key in keys {
                let mut seen = Vec::new();
                rows.for_each_index(key, |i| seen.push(i));
                let expected: Vec<usize> = (0..hashes)
                    .map(|r| r * slots + rows.column(r, key))
                    .collect();
                assert_eq!(seen, expected, "{hashes} × {slots}, {key:?}");
            }
        }
    }

    #[test]
    fn rows_get_different_functions_and_seeds_different_rows() {
        let shape = Shape::new(32, 8).unwrap();
        let a = Rows::new(shape, 1);
        let b = Rows::new(shape, 2);
        assert_ne!(a, b);
        for i in 0..32 {
            for j in 0..i {
                assert_ne!(a.functions[i], a.functions[j]);
            }
        }
    }

    #[test]
    fn the_word_is_the_top_half_of_the_64_bit_sum() {
        let f = RowFunction {
            a: u64::MAX,
            c: 1 << 32,
            b: 5,
        };
        // a·2 + c·3 + b = 2^65 - 2 + 3·2^32 + 5 ≡ 3·2^32 + 3 (mod 2^64).
        assert_eq!(f.word(2, 3), 3);
    }
}
