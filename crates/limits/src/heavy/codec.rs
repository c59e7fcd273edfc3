//! The serialized heavy-hitter summary, version 1 ([format §6]): [`Summary::to_bytes`] and
//! [`Summary::from_bytes`] for byte-string keys (`Summary<Vec<u8>>`, the keys the Node binding
//! has once it encoded them).
//!
//! ```text
//! offset      size    field
//! 0           4       magic "KCHH"
//! 4           2       version, u16 LE = 1
//! 6           2       flags, u16 LE: bit 0 = merged, the others reserved (0)
//! 8           8       total length in bytes, checksum included, u64 LE
//! 16          8       threshold, u64 LE (≥ 1)
//! 24          4       capacity, u32 LE (1 ..= 2^24)
//! 28          4       entries, u32 LE (≤ capacity)
//! 32          8       overflow events, u64 LE
//! 40          8       overflow weight, u64 LE
//! 48          8       entries dropped by merges, u64 LE
//! 56          4       sketch length s, u32 LE
//! 60          s       the sketch, format version 3 (§5), with its own CRC-32
//! 60+s        …       entries in ascending byte order of their keys, each:
//!                     key length u32 LE, key bytes, exact u64 LE, slack u64 LE
//! length−4    4       CRC-32 (IEEE, as zlib's crc32) of every byte before it
//! ```
//!
//! [format §6]: https://github.com/keepcount/keepcount/blob/main/docs/format.md

use crate::codec as sketch_codec;
use crate::estimator::{self, Estimator};
use std::sync::atomic::Ordering;

use super::settings::Settings;
use super::summary::{MergeError, Summary, as_count};
use super::table::{Entry, OverflowCounts};

mod error;

pub use error::{DecodeError, ReadError};

/// The first four bytes of every serialized summary.
pub const MAGIC: [u8; 4] = *b"KCHH";
/// The format version this crate writes and reads.
pub const VERSION: u16 = 1;
/// Flag bit 0: the summary has merged another since its last reset (or increments raced with a
/// rotation after idleness), so entering keys' slack is not capped at `threshold - 1`.
const FLAG_MERGED: u16 = 1;
/// Magic (4) + version (2) + flags (2) + length (8) + threshold (8) + capacity (4) + entries (4)
/// + three overflow counters (24) + sketch length (4).
const HEADER_LEN: usize = 60;
/// The CRC-32 at the end.
const CHECKSUM_LEN: usize = 4;
/// The shortest input the decoder reads fields from: a header and a checksum.
const MIN_LEN: usize = HEADER_LEN + CHECKSUM_LEN;
/// Key length (4) + exact (8) + slack (8): the least an entry occupies, which bounds how many
/// entries an input can hold before anything is allocated for them.
const ENTRY_MIN_LEN: usize = 20;

impl Summary<Vec<u8>> {
    /// The summary in format version 1 (docs/format.md §6). Canonical: equal summaries give
    /// equal bytes (entries are sorted by key).
    ///
    /// ```
    /// use keepcount_limits::heavy::{Settings, Summary};
    /// use keepcount_limits::Shape;
    /// let summary = Summary::new(Settings::new(Shape::new(2, 8).unwrap(), 1, 2, 4).unwrap());
    /// summary.incr(&b"k"[..], 3);
    /// let bytes = summary.to_bytes();
    /// assert_eq!(&bytes[..4], b"KCHH");
    /// let copy = Summary::from_bytes(&bytes).unwrap();
    /// assert_eq!(copy.count(&b"k"[..]), summary.count(&b"k"[..]));
    /// assert_eq!(copy.to_bytes(), bytes);
    /// ```
    ///
    /// # Thread safety
    /// The table is copied under its shared lock, then the sketch is read counter by counter:
    /// increments racing with the call may be partly included.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut entries = self.entries();
        entries.sort_unstable_by(|a, b| a.key.cmp(&b.key));
        let sketch = self.sketch().to_bytes();
        let settings = self.settings();
        let overflow = self.overflow();
        let entries_len: usize = entries.iter().map(|e| ENTRY_MIN_LEN + e.key.len()).sum();
        let len = MIN_LEN + sketch.len() + entries_len;
        let mut bytes = Vec::with_capacity(len);
        bytes.extend_from_slice(&MAGIC);
        bytes.extend_from_slice(&VERSION.to_le_bytes());
        let flags = if self.merged() { FLAG_MERGED } else { 0 };
        bytes.extend_from_slice(&flags.to_le_bytes());
        bytes.extend_from_slice(&(len as u64).to_le_bytes());
        bytes.extend_from_slice(&settings.threshold().to_le_bytes());
        // Capacity and entries are at most MAX_CAPACITY = 2^24; a sketch at most 28 + 8·2^27
        // bytes: all fit in u32.
        bytes.extend_from_slice(&(settings.capacity() as u32).to_le_bytes());
        bytes.extend_from_slice(&(entries.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&overflow.events.to_le_bytes());
        bytes.extend_from_slice(&overflow.weight.to_le_bytes());
        bytes.extend_from_slice(&overflow.merge_dropped.to_le_bytes());
        bytes.extend_from_slice(&(sketch.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&sketch);
        for entry in &entries {
            // A key longer than 4 GiB cannot be encoded: its length saturates and the decoder
            // refuses the result (keepcount's `HeavyHitters` refuses byte keys over 512 MiB).
            let key_len = u32::try_from(entry.key.len()).unwrap_or(u32::MAX);
            bytes.extend_from_slice(&key_len.to_le_bytes());
            bytes.extend_from_slice(&entry.key);
            bytes.extend_from_slice(&entry.exact.to_le_bytes());
            bytes.extend_from_slice(&entry.slack.to_le_bytes());
        }
        let checksum = crc32fast::hash(&bytes);
        bytes.extend_from_slice(&checksum.to_le_bytes());
        bytes
    }

    /// Reads a summary written by [`to_bytes`](Self::to_bytes).
    ///
    /// Checks, in this order: length ≥ 64, magic, version, flags, declared length = actual
    /// length, checksum, the sketch (every check of §5), no negative sketch counter (a summary
    /// only ever adds to its sketch, so one would be forged, and merged in it would pull other
    /// keys' estimates below their counts), threshold and capacity, entry count ≤
    /// capacity, each entry within the input, no trailing bytes, keys in strictly ascending
    /// order (so no duplicates), and every key's sketch estimate at least the threshold (a
    /// tracked key below it would stop being counted). Each failure is its own
    /// [`DecodeError`]. Never panics; allocates only after the length and checksum checks, and
    /// never more than the input's length allows.
    ///
    /// ```
    /// use keepcount_limits::heavy::{Summary, codec::DecodeError};
    /// assert_eq!(Summary::from_bytes(b"KCHH").unwrap_err(), DecodeError::Truncated { len: 4 });
    /// ```
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, DecodeError> {
        let flags = check_integrity(bytes)?;
        decode_checked(bytes, flags)
    }

    /// [`from_bytes`](Self::from_bytes) for merging into a summary of `settings`: after the
    /// checksum, and before anything else is decoded or allocated, a summary whose threshold or
    /// sketch shape or seed differs from `settings`' is refused as [`ReadError::Mismatch`] (the
    /// [`MergeError`] [`merge`](Summary::merge) would give), so that a summary of another
    /// configuration costs one pass of CRC-32 over it, whatever its size. The threshold and
    /// the sketch's header are compared only when they are valid (threshold ≥ 1; the sketch
    /// inside the input and passing §5's checks before its checksum); otherwise the decoder
    /// names the fault. Capacities may differ: the merge keeps the receiver's.
    ///
    /// The checks are therefore those of `from_bytes` with the mismatch between the checksum and
    /// the sketch's checks, and a summary decoded by it merges into one of `settings` without
    /// a [`MergeError`].
    ///
    /// ```
    /// use keepcount_limits::heavy::{MergeError, Settings, Summary, codec::ReadError};
    /// use keepcount_limits::Shape;
    /// let ours = Settings::new(Shape::new(2, 8).unwrap(), 1, 2, 4).unwrap();
    /// let theirs = Settings::new(Shape::new(2, 8).unwrap(), 1, 3, 4).unwrap();
    /// let bytes = Summary::new(theirs).to_bytes();
    /// assert_eq!(
    ///     Summary::from_bytes_for(&bytes, ours).unwrap_err(),
    ///     ReadError::Mismatch(MergeError::Threshold { ours: 2, theirs: 3 })
    /// );
    /// assert!(Summary::from_bytes_for(&bytes, theirs).is_ok());
    /// ```
    pub fn from_bytes_for(bytes: &[u8], settings: Settings) -> Result<Self, ReadError> {
        let flags = check_integrity(bytes).map_err(ReadError::Corrupt)?;
        if let Some(err) = mismatch(bytes, settings) {
            return Err(ReadError::Mismatch(err));
        }
        decode_checked(bytes, flags).map_err(ReadError::Corrupt)
    }
}

/// The checks of the whole input (§6's first six: length ≥ 64, magic, version, flags, declared
/// length, checksum), which read no field past the header; returns the flags.
fn check_integrity(bytes: &[u8]) -> Result<u16, DecodeError> {
    let mut reader = Reader { bytes, at: 0 };
    if bytes.len() < MIN_LEN {
        return Err(DecodeError::Truncated { len: bytes.len() });
    }
    let magic = reader
        .array::<4>()
        .ok_or(DecodeError::Truncated { len: 0 })?;
    if magic != MAGIC {
        return Err(DecodeError::BadMagic(magic));
    }
    let version = u16::from_le_bytes(reader.array().unwrap_or_default());
    if version != VERSION {
        return Err(DecodeError::UnsupportedVersion(version));
    }
    let flags = u16::from_le_bytes(reader.array().unwrap_or_default());
    if flags & !FLAG_MERGED != 0 {
        return Err(DecodeError::ReservedFlags(flags));
    }
    let declared = reader.u64();
    if usize::try_from(declared).ok() != Some(bytes.len()) {
        return Err(DecodeError::Length {
            declared,
            actual: bytes.len(),
        });
    }
    let (body, checksum) = bytes.split_at(bytes.len() - CHECKSUM_LEN);
    let stored = u32::from_le_bytes([checksum[0], checksum[1], checksum[2], checksum[3]]);
    let computed = crc32fast::hash(body);
    if stored != computed {
        return Err(DecodeError::Checksum { stored, computed });
    }
    Ok(flags)
}

/// How the settings of `bytes`, which passed [`check_integrity`], differ from `settings`, in the
/// order [`Summary::merge`] compares them; `None` when they are equal or not valid (the decoder
/// then refuses the summary for that). Reads the threshold and the sketch's 24-byte header.
fn mismatch(bytes: &[u8], settings: Settings) -> Option<MergeError> {
    let body = &bytes[..bytes.len() - CHECKSUM_LEN];
    let mut reader = Reader {
        bytes: body,
        at: 16,
    };
    let threshold = reader.u64();
    reader.at = 56;
    let sketch_len = reader.u32() as usize;
    let (shape, seed) = sketch_codec::header(reader.take(sketch_len)?).ok()?;
    if threshold == 0 {
        None
    } else if threshold != settings.threshold() {
        Some(MergeError::Threshold {
            ours: settings.threshold(),
            theirs: threshold,
        })
    } else if shape != settings.shape() {
        Some(MergeError::Sketch(estimator::MergeError::Shape {
            ours: settings.shape(),
            theirs: shape,
        }))
    } else if seed != settings.seed() {
        Some(MergeError::Sketch(estimator::MergeError::Seed))
    } else {
        None
    }
}

/// The rest of [`Summary::from_bytes`], on input that passed [`check_integrity`] with `flags`.
fn decode_checked(bytes: &[u8], flags: u16) -> Result<Summary<Vec<u8>>, DecodeError> {
    let body = &bytes[..bytes.len() - CHECKSUM_LEN];
    let mut reader = Reader {
        bytes: body,
        at: 16,
    };
    let threshold = reader.u64();
    let capacity = reader.u32();
    let entries = reader.u32();
    let overflow = OverflowCounts {
        events: reader.u64(),
        weight: reader.u64(),
        merge_dropped: reader.u64(),
    };
    let sketch_len = reader.u32() as usize;
    let sketch = reader
        .take(sketch_len)
        .ok_or(DecodeError::SketchLength { sketch_len })?;
    let sketch = Estimator::from_bytes(sketch).map_err(DecodeError::Sketch)?;
    // Relaxed: the sketch is this thread's own, just built.
    if let Some((index, value)) = sketch
        .counters()
        .iter()
        .map(|counter| counter.load(Ordering::Relaxed))
        .enumerate()
        .find(|&(_, value)| value < 0)
    {
        return Err(DecodeError::NegativeCounter { index, value });
    }
    // u32 fits in usize on every supported target.
    let settings = Settings::new(sketch.shape(), sketch.seed(), threshold, capacity as usize)
        .map_err(DecodeError::Config)?;
    if entries as usize > settings.capacity() {
        return Err(DecodeError::TooManyEntries {
            entries,
            capacity: settings.capacity(),
        });
    }
    if entries as usize > reader.remaining() / ENTRY_MIN_LEN {
        return Err(DecodeError::EntryTruncated { index: 0 });
    }
    let mut decoded: Vec<Entry<Vec<u8>>> = Vec::with_capacity(entries as usize);
    for index in 0..entries {
        let entry = reader
            .entry()
            .ok_or(DecodeError::EntryTruncated { index })?;
        if decoded
            .last()
            .is_some_and(|last| last.key.as_slice() >= entry.0)
        {
            return Err(DecodeError::Unordered { index });
        }
        let hash = sketch.hash_key(entry.0);
        if as_count(sketch.get_hash(hash)) < threshold {
            return Err(DecodeError::BelowThreshold { index });
        }
        decoded.push(Entry {
            hash,
            key: entry.0.to_vec(),
            exact: entry.1,
            slack: entry.2,
        });
    }
    if reader.remaining() != 0 {
        return Err(DecodeError::TrailingBytes {
            extra: reader.remaining(),
        });
    }
    Ok(Summary::from_parts(
        sketch,
        settings,
        decoded,
        overflow,
        flags & FLAG_MERGED != 0,
    ))
}

/// Reads little-endian fields from a slice; every read is bounds-checked.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(len)?;
        let slice = self.bytes.get(self.at..end)?;
        self.at = end;
        Some(slice)
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }

    /// Header fields: the callers checked the header is there, so a missing one reads as 0
    /// (unreachable, and harmless).
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.array().unwrap_or_default())
    }

    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.array().unwrap_or_default())
    }

    fn remaining(&self) -> usize {
        self.bytes.len().saturating_sub(self.at)
    }

    /// One entry: (key, exact, slack).
    fn entry(&mut self) -> Option<(&'a [u8], u64, u64)> {
        let key_len = u32::from_le_bytes(self.array()?) as usize;
        let key = self.take(key_len)?;
        let exact = u64::from_le_bytes(self.array()?);
        let slack = u64::from_le_bytes(self.array()?);
        Some((key, exact, slack))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::heavy::ConfigError;
    use crate::shape::Shape;

    /// A summary's bytes with sketch counter `index` set to `value`, both CRC-32s recomputed so
    /// that only the counter check can refuse them.
    fn with_counter(bytes: &[u8], index: usize, value: i64) -> Vec<u8> {
        let mut bytes = bytes.to_vec();
        let sketch_len = u32::from_le_bytes(bytes[56..60].try_into().unwrap()) as usize;
        let sketch = &mut bytes[HEADER_LEN..HEADER_LEN + sketch_len];
        // The sketch's own header (§5) is 24 bytes, its counters 8 each.
        let at = 24 + 8 * index;
        sketch[at..at + 8].copy_from_slice(&value.to_le_bytes());
        let crc = crc32fast::hash(&sketch[..sketch_len - CHECKSUM_LEN]);
        sketch[sketch_len - CHECKSUM_LEN..].copy_from_slice(&crc.to_le_bytes());
        let body = bytes.len() - CHECKSUM_LEN;
        let crc = crc32fast::hash(&bytes[..body]);
        bytes[body..].copy_from_slice(&crc.to_le_bytes());
        bytes
    }

    fn sample() -> Vec<u8> {
        let settings = Settings::new(Shape::new(2, 8).unwrap(), 1, 2, 4).unwrap();
        let summary = Summary::<Vec<u8>>::new(settings);
        summary.incr(&b"k"[..], 200);
        summary.to_bytes()
    }

    #[test]
    fn refuses_a_negative_sketch_counter() {
        let bytes = with_counter(&sample(), 9, -190);
        let err = Summary::<Vec<u8>>::from_bytes(&bytes).unwrap_err();
        assert_eq!(
            err,
            DecodeError::NegativeCounter {
                index: 9,
                value: -190
            }
        );
        assert_eq!(err.check(), "negative-counter");
        assert_eq!(
            err.to_string(),
            "heavy-hitter sketch counter 9 is negative (-190), which no summary writes"
        );
        let err = Summary::<Vec<u8>>::from_bytes(&with_counter(&bytes, 9, i64::MIN)).unwrap_err();
        assert_eq!(err.check(), "negative-counter");
    }

    /// `bytes` (a summary's) with its entries replaced by `body` declaring `entries` of them,
    /// the largest capacity, and the length and CRC-32 to match (or the CRC-32 left wrong).
    fn with_entries(bytes: &[u8], entries: u32, body: &[u8], seal: bool) -> Vec<u8> {
        let sketch_len = u32::from_le_bytes(bytes[56..60].try_into().unwrap()) as usize;
        let mut out = bytes[..HEADER_LEN + sketch_len].to_vec();
        out.extend_from_slice(body);
        let len = (out.len() + CHECKSUM_LEN) as u64;
        out[8..16].copy_from_slice(&len.to_le_bytes());
        out[24..28].copy_from_slice(&(1u32 << 24).to_le_bytes());
        out[28..32].copy_from_slice(&entries.to_le_bytes());
        let crc = crc32fast::hash(&out) ^ u32::from(!seal);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    #[test]
    fn refuses_other_settings_before_reading_the_entries() {
        let ours = Settings::new(Shape::new(2, 8).unwrap(), 1, 2, 4).unwrap();
        // 1 MiB of 0xff: a first key length past the end, so decoding the entries fails.
        let garbage = vec![0xff; 1 << 20];
        let entries = (garbage.len() / ENTRY_MIN_LEN) as u32;
        let theirs = |shape: (usize, usize), seed: u64, threshold: u64| {
            let shape = Shape::new(shape.0, shape.1).unwrap();
            let settings = Settings::new(shape, seed, threshold, 4).unwrap();
            Summary::<Vec<u8>>::new(settings).to_bytes()
        };
        let mismatches = [
            (
                theirs((2, 8), 9, 2),
                MergeError::Sketch(estimator::MergeError::Seed),
            ),
            (
                theirs((2, 8), 1, 3),
                MergeError::Threshold { ours: 2, theirs: 3 },
            ),
            (
                theirs((2, 9), 1, 2),
                MergeError::Sketch(estimator::MergeError::Shape {
                    ours: ours.shape(),
                    theirs: Shape::new(2, 9).unwrap(),
                }),
            ),
        ];
        for (bytes, expected) in mismatches {
            let garbled = with_entries(&bytes, entries, &garbage, true);
            assert_eq!(
                Summary::from_bytes(&garbled).unwrap_err(),
                DecodeError::EntryTruncated { index: 0 }
            );
            assert_eq!(
                Summary::from_bytes_for(&garbled, ours).unwrap_err(),
                ReadError::Mismatch(expected)
            );
            // The checksum comes first: a flipped bit is corruption, not other settings.
            let unsealed = with_entries(&bytes, entries, &garbage, false);
            assert!(matches!(
                Summary::from_bytes_for(&unsealed, ours),
                Err(ReadError::Corrupt(DecodeError::Checksum { .. }))
            ));
        }
        // Our own settings: the entries are read, and refused.
        let garbled = with_entries(&theirs((2, 8), 1, 2), entries, &garbage, true);
        assert_eq!(
            Summary::from_bytes_for(&garbled, ours).unwrap_err(),
            ReadError::Corrupt(DecodeError::EntryTruncated { index: 0 })
        );
    }

    #[test]
    fn compares_only_valid_settings() {
        let ours = Settings::new(Shape::new(2, 8).unwrap(), 1, 2, 4).unwrap();
        let reseal = |mut bytes: Vec<u8>| {
            let body = bytes.len() - CHECKSUM_LEN;
            let crc = crc32fast::hash(&bytes[..body]);
            bytes[body..].copy_from_slice(&crc.to_le_bytes());
            bytes
        };
        let other_seed = Settings::new(ours.shape(), 9, 2, 4).unwrap();
        let mut zero_threshold = Summary::<Vec<u8>>::new(other_seed).to_bytes();
        zero_threshold[16..24].copy_from_slice(&0u64.to_le_bytes());
        assert!(matches!(
            Summary::from_bytes_for(&reseal(zero_threshold), ours),
            Err(ReadError::Corrupt(DecodeError::Config(
                ConfigError::ZeroThreshold
            )))
        ));
        // A sketch header of no rows (its own CRC-32 left as it was): the sketch is at fault.
        let mut no_rows = Summary::<Vec<u8>>::new(other_seed).to_bytes();
        no_rows[HEADER_LEN + 8..HEADER_LEN + 12].copy_from_slice(&0u32.to_le_bytes());
        assert!(matches!(
            Summary::from_bytes_for(&reseal(no_rows), ours),
            Err(ReadError::Corrupt(DecodeError::Sketch(_)))
        ));
        let bytes = sample();
        assert_eq!(
            Summary::from_bytes_for(&bytes, ours).unwrap().to_bytes(),
            bytes
        );
    }

    #[test]
    fn accepts_zero_and_saturated_counters() {
        for value in [0, i64::MAX] {
            let bytes = with_counter(&sample(), 9, value);
            assert!(Summary::<Vec<u8>>::from_bytes(&bytes).is_ok(), "{value}");
        }
    }
}
