//! The segment file's layout: a fixed header, then the counters.
//!
//! ```text
//! offset  size  field
//!      0     8  magic "KCSHARED"
//!      8     4  format version (FORMAT_VERSION)
//!     12     4  kind: 1 estimator, 2 rate, 3 in-flight
//!     16     4  hashes
//!     20     4  slots
//!     24     8  seed
//!     32     8  interval in nanoseconds (0 for an estimator)
//!     40     8  creation time, nanoseconds since the Unix epoch (informational)
//!     48     8  total file length in bytes
//!     56     4  process slots (in-flight; 0 otherwise)
//!     60     4  CRC-32 (IEEE) of bytes 0..60
//!     64     8  a rate's interval word (crate::shared::rate), 0 otherwise
//!     72    56  zero
//!    128        counters: i64, row-major, one sketch after another: an estimator has one, a
//!               rate two, an in-flight counter 1 + process slots (the total, then each
//!               process's own contribution)
//!      …        in-flight only: two u64 words per process slot (crate::shared::inflight)
//! ```
//!
//! Numbers are little-endian in the checksummed part. The file never leaves its host, but a
//! fixed byte order keeps the checksum independent of it. Bytes 0..64 are written once, before the
//! file gets its name, and never change; every later access to the file is an atomic operation on
//! an aligned 8-byte word.

use crate::shape::Shape;
use crate::shared::error::CorruptReason;

/// The first eight bytes of every segment file.
pub(crate) const MAGIC: [u8; 8] = *b"KCSHARED";
/// The layout version this build reads and writes.
pub(crate) const FORMAT_VERSION: u32 = 1;
/// Header bytes before the counters: two 64-byte cache lines, the first immutable, the second
/// the mutable words, so counter traffic and the header never share a line.
pub(crate) const HEADER_BYTES: usize = 128;
/// Bytes of the immutable, checksummed part of the header (including the checksum word).
pub(crate) const FIXED_BYTES: usize = 64;
/// Offset of the checksum: it covers every byte before it.
const CHECKSUM_OFFSET: usize = 60;
/// Offset of a rate's interval word.
pub(crate) const RATE_WORD_OFFSET: usize = 64;
/// Bytes per counter.
const COUNTER_BYTES: usize = 8;

/// What a segment holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// One count-min sketch.
    Estimator,
    /// Two sketches and an interval word.
    Rate,
    /// A total sketch, one contribution sketch per process slot, and the slot table.
    Inflight,
}

impl Kind {
    fn code(self) -> u32 {
        match self {
            Self::Estimator => 1,
            Self::Rate => 2,
            Self::Inflight => 3,
        }
    }

    fn from_code(code: u32) -> Option<Self> {
        match code {
            1 => Some(Self::Estimator),
            2 => Some(Self::Rate),
            3 => Some(Self::Inflight),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Estimator => "estimator",
            Self::Rate => "rate",
            Self::Inflight => "in-flight",
        }
    }
}

/// What a segment is: everything an opener must agree on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Layout {
    pub(crate) kind: Kind,
    pub(crate) shape: Shape,
    pub(crate) seed: u64,
    /// Nanoseconds; 0 unless a rate.
    pub(crate) interval_nanos: u64,
    /// Process slots; 0 unless in-flight.
    pub(crate) processes: u32,
}

/// The first field in which two layouts differ, as `(field, existing, requested)`.
pub(crate) type Difference = (&'static str, String, String);

impl Layout {
    /// Sketches of the segment's shape it holds.
    pub(crate) fn sketches(&self) -> usize {
        match self.kind {
            Kind::Estimator => 1,
            Kind::Rate => 2,
            Kind::Inflight => 1 + self.processes as usize,
        }
    }

    /// Byte offset of the in-flight slot table, just after the counters.
    pub(crate) fn slots_offset(&self) -> usize {
        HEADER_BYTES + self.sketches() * self.shape.counters() * COUNTER_BYTES
    }

    /// The file's length: sketches at most 2^27 × 8 bytes each, and at most 1 + 2^10 of them
    /// (crate::shared::inflight's limit), so well within `u64` (and `usize` on 64-bit targets).
    pub(crate) fn total_bytes(&self) -> usize {
        self.slots_offset() + self.processes as usize * 2 * COUNTER_BYTES
    }

    /// The immutable header of a segment created at `created_unix_nanos`.
    pub(crate) fn encode(&self, created_unix_nanos: u64) -> [u8; FIXED_BYTES] {
        let mut bytes = [0u8; FIXED_BYTES];
        bytes[0..8].copy_from_slice(&MAGIC);
        bytes[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        bytes[12..16].copy_from_slice(&self.kind.code().to_le_bytes());
        // Shape limits keep both below 2^27: they fit in u32.
        bytes[16..20].copy_from_slice(&(self.shape.hashes() as u32).to_le_bytes());
        bytes[20..24].copy_from_slice(&(self.shape.slots() as u32).to_le_bytes());
        bytes[24..32].copy_from_slice(&self.seed.to_le_bytes());
        bytes[32..40].copy_from_slice(&self.interval_nanos.to_le_bytes());
        bytes[40..48].copy_from_slice(&created_unix_nanos.to_le_bytes());
        bytes[48..56].copy_from_slice(&(self.total_bytes() as u64).to_le_bytes());
        bytes[56..60].copy_from_slice(&self.processes.to_le_bytes());
        let checksum = crc32fast::hash(&bytes[..CHECKSUM_OFFSET]);
        bytes[CHECKSUM_OFFSET..CHECKSUM_OFFSET + 4].copy_from_slice(&checksum.to_le_bytes());
        bytes
    }

    /// The layout and creation time a header describes, or the first check it fails.
    /// `file_bytes` is the file's length.
    pub(crate) fn decode(
        bytes: &[u8; FIXED_BYTES],
        file_bytes: u64,
    ) -> Result<(Self, u64), CorruptReason> {
        let u32_at = |at: usize| {
            u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
        };
        let u64_at = |at: usize| {
            let mut word = [0u8; 8];
            word.copy_from_slice(&bytes[at..at + 8]);
            u64::from_le_bytes(word)
        };
        if bytes[0..8] != MAGIC {
            return Err(CorruptReason::Magic);
        }
        if u32_at(8) != FORMAT_VERSION {
            return Err(CorruptReason::Version);
        }
        if u32_at(CHECKSUM_OFFSET) != crc32fast::hash(&bytes[..CHECKSUM_OFFSET]) {
            return Err(CorruptReason::Checksum);
        }
        let kind = Kind::from_code(u32_at(12)).ok_or(CorruptReason::Layout)?;
        let shape = Shape::new(u32_at(16) as usize, u32_at(20) as usize)
            .map_err(|_| CorruptReason::Layout)?;
        let interval_nanos = u64_at(32);
        let processes = u32_at(56);
        if (kind == Kind::Rate) != (interval_nanos != 0)
            || (kind == Kind::Inflight) != (processes != 0)
            || processes > crate::shared::inflight::MAX_PROCESSES
        {
            return Err(CorruptReason::Layout);
        }
        let layout = Self {
            kind,
            shape,
            seed: u64_at(24),
            interval_nanos,
            processes,
        };
        let total = layout.total_bytes() as u64;
        if u64_at(48) != total || file_bytes != total {
            return Err(CorruptReason::Length);
        }
        Ok((layout, u64_at(40)))
    }

    /// The first field in which the segment's layout (`self`) differs from `requested`.
    pub(crate) fn difference(&self, requested: &Self) -> Option<Difference> {
        let (a, b) = (self, requested);
        if a.kind != b.kind {
            return Some(("kind", a.kind.name().into(), b.kind.name().into()));
        }
        if a.shape.hashes() != b.shape.hashes() {
            return Some((
                "hashes",
                a.shape.hashes().to_string(),
                b.shape.hashes().to_string(),
            ));
        }
        if a.shape.slots() != b.shape.slots() {
            return Some((
                "slots",
                a.shape.slots().to_string(),
                b.shape.slots().to_string(),
            ));
        }
        if a.seed != b.seed {
            return Some(("seed", a.seed.to_string(), b.seed.to_string()));
        }
        if a.interval_nanos != b.interval_nanos {
            let ns = |n: u64| format!("{n} ns");
            return Some(("interval", ns(a.interval_nanos), ns(b.interval_nanos)));
        }
        if a.processes != b.processes {
            return Some((
                "processes",
                a.processes.to_string(),
                b.processes.to_string(),
            ));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate() -> Layout {
        Layout {
            kind: Kind::Rate,
            shape: Shape::new(4, 1024).unwrap(),
            seed: 7,
            interval_nanos: 1_000_000_000,
            processes: 0,
        }
    }

    #[test]
    fn headers_round_trip() {
        let layout = rate();
        let bytes = layout.encode(123);
        assert_eq!(
            Layout::decode(&bytes, layout.total_bytes() as u64),
            Ok((layout, 123))
        );
        assert_eq!(layout.total_bytes(), 128 + 2 * 4 * 1024 * 8);
    }

    #[test]
    fn every_damaged_header_is_refused() {
        let layout = rate();
        let total = layout.total_bytes() as u64;
        let good = layout.encode(1);
        for at in 0..CHECKSUM_OFFSET + 4 {
            let mut bytes = good;
            bytes[at] ^= 0x10;
            assert!(Layout::decode(&bytes, total).is_err(), "byte {at}");
        }
        assert_eq!(Layout::decode(&good, total - 8), Err(CorruptReason::Length));
        let mut magic = good;
        magic[0] = b'X';
        assert_eq!(Layout::decode(&magic, total), Err(CorruptReason::Magic));
    }

    #[test]
    fn differences_name_the_first_field() {
        let a = rate();
        let mut b = a;
        assert_eq!(a.difference(&b), None);
        b.seed = 8;
        assert_eq!(a.difference(&b), Some(("seed", "7".into(), "8".into())));
        b.kind = Kind::Estimator;
        assert_eq!(a.difference(&b).unwrap().0, "kind");
    }
}
