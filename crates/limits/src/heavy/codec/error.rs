//! Why bytes are refused as a serialized summary ([`DecodeError`]) or as one to merge into a
//! summary ([`ReadError`]).

use crate::codec as sketch_codec;
use std::fmt;

use super::super::settings::ConfigError;
use super::super::summary::MergeError;
use super::{MIN_LEN, VERSION};

/// Why bytes are not a valid serialized summary.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum DecodeError {
    /// Shorter than the 64 bytes of header and checksum.
    Truncated {
        /// The input's length.
        len: usize,
    },
    /// The first four bytes are not `KCHH`.
    BadMagic([u8; 4]),
    /// A format version this crate does not read.
    UnsupportedVersion(u16),
    /// Reserved flag bits (any but bit 0) are set.
    ReservedFlags(u16),
    /// The length in the header is not the input's length (truncated or extended input).
    Length {
        /// The length the header declares.
        declared: u64,
        /// The input's length.
        actual: usize,
    },
    /// The CRC-32 does not match the content: the bytes were corrupted.
    Checksum {
        /// The checksum stored in the input.
        stored: u32,
        /// The checksum of the content.
        computed: u32,
    },
    /// The sketch's declared length runs past the end of the input.
    SketchLength {
        /// The declared sketch length.
        sketch_len: usize,
    },
    /// The embedded sketch is invalid.
    Sketch(sketch_codec::DecodeError),
    /// A sketch counter is negative. A summary's sketch only grows (increments and merges add,
    /// saturating at `i64::MAX`; refunds leave it alone), so no summary writes one, and merged in,
    /// it would lower the estimates of the keys sharing the counter below their true counts.
    /// The one exception, in Rust only (Node's summaries are each used by one thread): adds racing
    /// on a counter at `i64::MAX` can leave it wrapped negative, as
    /// [`Estimator`](crate::estimator::Estimator) documents; a summary that counted past 2^63
    /// that way is refused too.
    NegativeCounter {
        /// The counter's position, row-major.
        index: usize,
        /// Its value.
        value: i64,
    },
    /// The threshold or capacity is out of range.
    Config(ConfigError),
    /// More entries than the capacity.
    TooManyEntries {
        /// Entries declared.
        entries: u32,
        /// The capacity declared.
        capacity: usize,
    },
    /// An entry runs past the end of the input.
    EntryTruncated {
        /// The entry's position.
        index: u32,
    },
    /// Bytes remain after the last entry.
    TrailingBytes {
        /// How many.
        extra: usize,
    },
    /// An entry's key is not greater than the previous one's (duplicate or out of order).
    Unordered {
        /// The entry's position.
        index: u32,
    },
    /// An entry's key has a sketch estimate below the threshold, which no summary produces.
    BelowThreshold {
        /// The entry's position.
        index: u32,
    },
}

impl DecodeError {
    /// The name of the check of docs/format.md §6 that failed, in the words bindings report it
    /// with (the Node API's `HeavyCorruptReason`): `short`, `magic`, `version`, `flags`,
    /// `length`, `checksum`, `sketch-length`, `sketch`, `negative-counter`, `config`, `entries`,
    /// `entry`, `trailing`, `order`, `below-threshold`.
    ///
    /// ```
    /// use keepcount_limits::heavy::{Summary, codec::DecodeError};
    /// let err = Summary::from_bytes(b"KCHH").unwrap_err();
    /// assert_eq!(err.check(), "short");
    /// ```
    pub fn check(&self) -> &'static str {
        match self {
            Self::Truncated { .. } => "short",
            Self::BadMagic(_) => "magic",
            Self::UnsupportedVersion(_) => "version",
            Self::ReservedFlags(_) => "flags",
            Self::Length { .. } => "length",
            Self::Checksum { .. } => "checksum",
            Self::SketchLength { .. } => "sketch-length",
            Self::Sketch(_) => "sketch",
            Self::NegativeCounter { .. } => "negative-counter",
            Self::Config(_) => "config",
            Self::TooManyEntries { .. } => "entries",
            Self::EntryTruncated { .. } => "entry",
            Self::TrailingBytes { .. } => "trailing",
            Self::Unordered { .. } => "order",
            Self::BelowThreshold { .. } => "below-threshold",
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated { len } => write!(
                f,
                "truncated heavy-hitter summary: {len} bytes, a summary has at least {MIN_LEN}"
            ),
            Self::BadMagic(magic) => write!(
                f,
                "not a keepcount heavy-hitter summary: magic is {magic:02x?}, expected \"KCHH\""
            ),
            Self::UnsupportedVersion(version) => write!(
                f,
                "unsupported heavy-hitter format version {version}, this build reads version {VERSION}"
            ),
            Self::ReservedFlags(flags) => {
                write!(f, "reserved heavy-hitter flags are set: {flags:#06x}")
            }
            Self::Length { declared, actual } => write!(
                f,
                "heavy-hitter summary length mismatch: the header says {declared} bytes, got {actual}"
            ),
            Self::Checksum { stored, computed } => write!(
                f,
                "heavy-hitter summary checksum mismatch: stored {stored:#010x}, computed {computed:#010x} (corrupted data)"
            ),
            Self::SketchLength { sketch_len } => write!(
                f,
                "the heavy-hitter summary's sketch ({sketch_len} bytes) runs past the end"
            ),
            Self::Sketch(err) => write!(f, "bad heavy-hitter sketch: {err}"),
            Self::NegativeCounter { index, value } => write!(
                f,
                "heavy-hitter sketch counter {index} is negative ({value}), which no summary writes"
            ),
            Self::Config(err) => write!(f, "bad heavy-hitter settings: {err}"),
            Self::TooManyEntries { entries, capacity } => write!(
                f,
                "heavy-hitter summary has {entries} entries, more than its capacity {capacity}"
            ),
            Self::EntryTruncated { index } => {
                write!(f, "heavy-hitter entry {index} runs past the end")
            }
            Self::TrailingBytes { extra } => {
                write!(f, "{extra} bytes after the last heavy-hitter entry")
            }
            Self::Unordered { index } => write!(
                f,
                "heavy-hitter entry {index} is a duplicate or out of order (keys must ascend)"
            ),
            Self::BelowThreshold { index } => write!(
                f,
                "heavy-hitter entry {index}'s key has a sketch estimate below the threshold"
            ),
        }
    }
}

impl std::error::Error for DecodeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Sketch(err) => Some(err),
            Self::Config(err) => Some(err),
            _ => None,
        }
    }
}

/// Why bytes cannot be merged into a summary
/// ([`Summary::from_bytes_for`](crate::heavy::Summary::from_bytes_for)).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ReadError {
    /// The bytes are not a valid serialized summary.
    Corrupt(DecodeError),
    /// A valid summary header, of another threshold, sketch shape or seed.
    Mismatch(MergeError),
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Corrupt(err) => err.fmt(f),
            Self::Mismatch(err) => err.fmt(f),
        }
    }
}

impl std::error::Error for ReadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Corrupt(err) => Some(err),
            Self::Mismatch(err) => Some(err),
        }
    }
}
