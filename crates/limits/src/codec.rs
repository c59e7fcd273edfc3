//! The serialized sketch, format version 3 ([format §5]): [`Estimator::to_bytes`] and
//! [`Estimator::from_bytes`].
//!
//! ```text
//! offset      size        field
//! 0           4           magic "KCCM"
//! 4           2           version, u16 LE = 3
//! 6           2           flags, u16 LE = 0 (reserved)
//! 8           4           hashes, u32 LE
//! 12          4           slots, u32 LE
//! 16          8           seed, u64 LE
//! 24          8·h·s       counters, i64 LE, row-major
//! 24+8·h·s    4           CRC-32 (IEEE, as zlib's crc32) of every byte before it
//! ```
//!
//! [format §5]: https://github.com/keepcount/keepcount/blob/main/docs/format.md

use crate::estimator::Estimator;
use crate::shape::{Shape, ShapeError};
use crate::store::CounterStore;
use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};

/// The first four bytes of every serialized sketch.
pub const MAGIC: [u8; 4] = *b"KCCM";
/// The format version this crate writes and reads.
///
/// Versions 1 and 2 had the same layout but put keys in other counters (version 1: double hashing
/// from HalfSipHash-1-3; version 2: SipHash-1-3 with rows 0 and 1 reading its halves), so their
/// counters mean nothing under version 3's hash and rows: they are refused with a message that
/// says so.
pub const VERSION: u16 = 3;
/// The versions earlier builds wrote and this one no longer reads.
const RETIRED_VERSIONS: std::ops::RangeInclusive<u16> = 1..=2;
/// Magic (4) + version (2) + flags (2) + hashes (4) + slots (4) + seed (8).
const HEADER_LEN: usize = 24;
/// The CRC-32 after the counters.
const CHECKSUM_LEN: usize = 4;
/// The shortest valid input would be a header and a checksum (no valid shape is that small, but
/// the decoder checks this first so that every later read is in bounds).
const MIN_LEN: usize = HEADER_LEN + CHECKSUM_LEN;
/// Bytes per counter.
const COUNTER_LEN: usize = 8;

impl<S: CounterStore> Estimator<S> {
    /// The sketch in format version 3: `28 + 8 × hashes × slots` bytes, readable by
    /// [`from_bytes`](Estimator::from_bytes) here and by the Node binding and its fallback.
    ///
    /// ```
    /// use keepcount_limits::estimator::Estimator;
    /// let est = Estimator::with_seed(2, 8, 42).unwrap();
    /// est.incr("a", 3);
    /// let bytes = est.to_bytes();
    /// assert_eq!(bytes.len(), 28 + 8 * 2 * 8);
    /// assert_eq!(&bytes[..4], b"KCCM");
    /// assert_eq!(Estimator::from_bytes(&bytes).unwrap().get("a"), 3);
    /// ```
    ///
    /// # Thread safety
    /// Counters are read one at a time; increments racing with the call may be partly included.
    pub fn to_bytes(&self) -> Vec<u8> {
        let counters = self.counters();
        let mut bytes = Vec::with_capacity(MIN_LEN + counters.len() * COUNTER_LEN);
        bytes.extend_from_slice(&MAGIC);
        bytes.extend_from_slice(&VERSION.to_le_bytes());
        bytes.extend_from_slice(&0u16.to_le_bytes());
        // Shapes are validated: both fit in u32.
        bytes.extend_from_slice(&(self.hashes() as u32).to_le_bytes());
        bytes.extend_from_slice(&(self.slots() as u32).to_le_bytes());
        bytes.extend_from_slice(&self.seed().to_le_bytes());
        for counter in counters {
            // Relaxed: each counter's own latest value; there is no cross-counter snapshot.
            bytes.extend_from_slice(&counter.load(Ordering::Relaxed).to_le_bytes());
        }
        let checksum = crc32fast::hash(&bytes);
        bytes.extend_from_slice(&checksum.to_le_bytes());
        bytes
    }
}

impl Estimator {
    /// Reads a sketch written by [`to_bytes`](Estimator::to_bytes) (format version 3).
    ///
    /// Checks, in this order: length ≥ 28, magic, version, flags, shape within the limits, exact
    /// total length, checksum; each failure is its own [`DecodeError`]. Never panics, and
    /// allocates nothing before the length and checksum checks, so memory is bounded by the input.
    ///
    /// ```
    /// use keepcount_limits::DecodeError;
    /// use keepcount_limits::estimator::Estimator;
    /// assert_eq!(
    ///     Estimator::from_bytes(b"KCCM").unwrap_err(),
    ///     DecodeError::Truncated { len: 4 }
    /// );
    /// ```
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, DecodeError> {
        let (shape, seed) = header(bytes)?;
        // At most 28 + 8 · 2^27: no overflow; `header` checked the input is this long.
        let expected = MIN_LEN + shape.counters() * COUNTER_LEN;
        let (body, checksum) = bytes.split_at(expected - CHECKSUM_LEN);
        let stored = u32::from_le_bytes([checksum[0], checksum[1], checksum[2], checksum[3]]);
        let computed = crc32fast::hash(body);
        if stored != computed {
            return Err(DecodeError::Checksum { stored, computed });
        }
        let store: Box<[AtomicI64]> = body[HEADER_LEN..]
            .chunks_exact(COUNTER_LEN)
            .map(|c| {
                let mut counter = [0; COUNTER_LEN];
                counter.copy_from_slice(c);
                AtomicI64::new(i64::from_le_bytes(counter))
            })
            .collect();
        Estimator::with_store(store, shape, seed).map_err(DecodeError::Shape)
    }
}

/// The shape and seed of serialized sketch `bytes`, after every check of
/// [`Estimator::from_bytes`] before the checksum (length ≥ 28, magic, version, flags, shape,
/// exact length): what a heavy-hitter summary's decoder compares with the summary it merges into
/// before decoding anything. Reads the 24-byte header only.
pub(crate) fn header(bytes: &[u8]) -> Result<(Shape, u64), DecodeError> {
    let header = match bytes.first_chunk::<HEADER_LEN>() {
        Some(header) if bytes.len() >= MIN_LEN => header,
        _ => return Err(DecodeError::Truncated { len: bytes.len() }),
    };
    let magic = [header[0], header[1], header[2], header[3]];
    if magic != MAGIC {
        return Err(DecodeError::BadMagic(magic));
    }
    let version = u16::from_le_bytes([header[4], header[5]]);
    if version != VERSION {
        return Err(DecodeError::UnsupportedVersion(version));
    }
    let flags = u16::from_le_bytes([header[6], header[7]]);
    if flags != 0 {
        return Err(DecodeError::ReservedFlags(flags));
    }
    let hashes = u32::from_le_bytes([header[8], header[9], header[10], header[11]]);
    let slots = u32::from_le_bytes([header[12], header[13], header[14], header[15]]);
    let mut seed = [0; 8];
    seed.copy_from_slice(&header[16..24]);
    let seed = u64::from_le_bytes(seed);
    // u32 fits in usize on every supported target.
    let shape = Shape::new(hashes as usize, slots as usize).map_err(DecodeError::Shape)?;
    // At most 28 + 8 · 2^27: no overflow.
    let expected = MIN_LEN + shape.counters() * COUNTER_LEN;
    if bytes.len() != expected {
        return Err(DecodeError::Length {
            expected,
            actual: bytes.len(),
        });
    }
    Ok((shape, seed))
}

/// Why bytes are not a valid serialized sketch.
///
/// ```
/// use keepcount_limits::DecodeError;
/// use keepcount_limits::estimator::Estimator;
/// let mut bytes = Estimator::with_seed(1, 1, 0).unwrap().to_bytes();
/// bytes[0] = b'X';
/// assert!(matches!(Estimator::from_bytes(&bytes), Err(DecodeError::BadMagic(_))));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum DecodeError {
    /// Shorter than the 28 bytes of header and checksum.
    Truncated {
        /// The input's length.
        len: usize,
    },
    /// The first four bytes are not `KCCM`.
    BadMagic([u8; 4]),
    /// A format version this crate does not read.
    UnsupportedVersion(u16),
    /// Reserved flag bits are set.
    ReservedFlags(u16),
    /// The header's shape is outside the limits.
    Shape(ShapeError),
    /// The length does not match the header's shape.
    Length {
        /// `28 + 8 × hashes × slots`.
        expected: usize,
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
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated { len } => write!(
                f,
                "truncated sketch: {len} bytes, a sketch has at least {MIN_LEN}"
            ),
            Self::BadMagic(magic) => write!(
                f,
                "not a keepcount sketch: magic is {magic:02x?}, expected \"KCCM\""
            ),
            Self::UnsupportedVersion(version) if RETIRED_VERSIONS.contains(version) => write!(
                f,
                "sketch format version {version} is no longer read: it put keys in other counters \
                 (docs/format.md, version history); this build reads version {VERSION}, so \
                 rebuild the sketch"
            ),
            Self::UnsupportedVersion(version) => write!(
                f,
                "unsupported sketch format version {version}, this build reads version {VERSION}"
            ),
            Self::ReservedFlags(flags) => {
                write!(f, "reserved sketch flags are set: {flags:#06x}")
            }
            Self::Shape(err) => write!(f, "bad sketch shape: {err}"),
            Self::Length { expected, actual } => write!(
                f,
                "sketch length mismatch: the header's shape needs {expected} bytes, got {actual}"
            ),
            Self::Checksum { stored, computed } => write!(
                f,
                "sketch checksum mismatch: stored {stored:#010x}, computed {computed:#010x} (corrupted data)"
            ),
        }
    }
}

impl std::error::Error for DecodeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Shape(err) => Some(err),
            _ => None,
        }
    }
}
