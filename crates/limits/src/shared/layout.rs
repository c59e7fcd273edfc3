//! The segment file's layout: a fixed header, then the counters.
//!
//! ```text
//! offset  size  field
//!      0     8  magic "KCSHARED"
//!      8     4  format version (FORMAT_VERSION)
//!     12     4  kind: 1 estimator, 2 rate, 3 in-flight, 4 limiter
//!     16     4  hashes (1 for a limiter)
//!     20     4  slots (a limiter's key-table entries)
//!     24     8  seed
//!     32     8  interval in nanoseconds (0 for an estimator)
//!     40     8  creation time, nanoseconds since the Unix epoch (informational)
//!     48     8  total file length in bytes
//!     56     4  process slots (in-flight; 0 otherwise)
//!     60     4  CRC-32 (IEEE) of bytes 0..60
//!     64     8  a rate's interval word (crate::shared::rate), 0 otherwise
//!     72     8  a limiter's overflow count: checks sent to the best-effort bucket because the
//!               key table was full (crate::shared::limiter), 0 otherwise
//!     80     8  a limiter's claimed key-table entries, 0 otherwise
//!     88     8  a limiter's entries taken over by new keys (their buckets were full), 0 otherwise
//!     96     8  an in-flight segment's reclaim turn: when it was taken (host monotonic µs) and by
//!               which slot's holder (crate::shared::inflight, "Reclaiming in turn"), 0 otherwise
//!    104    24  zero
//!    128        counters: i64, row-major, one sketch after another: an estimator has one, a
//!               rate two, an in-flight counter 1 + process slots (the total, then each
//!               process's own contribution)
//!      …        in-flight only, from the next multiple of 64: eight u64 words (one cache line)
//!               per process slot (crate::shared::inflight)
//! ```
//!
//! On Linux the holders of an in-flight segment's slots also lock one byte of the file each
//! (open file description locks), slot `i`'s at offset 2^62 + `i`: past the file's end, so no
//! part of its length or contents (crate::shared::inflight, "Slot table"). A build of layout 4
//! knew nothing of these locks.
//!
//! A limiter has no counters; after the header it holds:
//!
//! ```text
//!    128     8  capacity: the most keys the table takes
//!    136    48  the per-key quota: requests (amount, period ns, burst), then units (the same);
//!               period 0 marks an unlimited dimension
//!    184    48  the best-effort quota, the same way
//!    232     4  CRC-32 (IEEE) of bytes 128..232
//!    236    20  zero
//!    256    32  the best-effort bucket: two 16-byte words (requests, units)
//!    288        the key table: `slots` entries of 48 bytes, each the key's 16-byte identity
//!               (0: empty) and its bucket's two 16-byte words
//! ```
//!
//! Bytes 128..256 are written once, like the header, and checksummed on their own.
//!
//! Numbers are little-endian in the checksummed part. The file never leaves its host, but a
//! fixed byte order keeps the checksum independent of it. Bytes 0..64 are written once, before the
//! file gets its name, and never change; every later access to the file is an atomic operation on
//! an aligned 8-byte word.

mod limiter;

use crate::shape::Shape;
use crate::shared::error::CorruptReason;
pub(crate) use limiter::{LimiterLayout, table_entries};

/// The first eight bytes of every segment file.
pub(crate) const MAGIC: [u8; 8] = *b"KCSHARED";
/// The layout version this build reads and writes. Version 1 segments hashed keys as sketch
/// format 2 did (SipHash-1-3): their counters mean nothing to this build's hash; version 2
/// in-flight slots had two words, without the journal of changes in flight that version 3's
/// eight hold; a version 3 limiter's key was always found before the first empty entry of its
/// probe path, where version 4 takes entries over past it (`shared/limiter.rs`, "A full
/// table"), so a version 3 process would miss such keys and give them a second bucket; a
/// version 4 in-flight process on Linux neither takes nor honours the lock of a slot that
/// version 5 holds while it holds the slot (`shared/inflight.rs`, "Slot table"), so each would
/// take the other's slots for dead, or its dead for alive. All are refused
/// ([`Refusal::Version`]: a mismatch of `layout version`) rather than misread.
pub(crate) const FORMAT_VERSION: u32 = 5;

/// Why [`Layout::decode`] refuses a segment's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Damaged, or not a segment: the first check it failed.
    Corrupt(CorruptReason),
    /// A segment of this layout version: another keepcount made it.
    Version(u32),
}

impl From<CorruptReason> for Refusal {
    fn from(reason: CorruptReason) -> Self {
        Self::Corrupt(reason)
    }
}

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
/// Bytes per in-flight process slot: one cache line, so that one process's journal of its changes
/// never shares a line with another's.
pub(crate) const SLOT_BYTES: usize = 64;
/// Offset of a limiter's overflow count.
pub(crate) const OVERFLOW_WORD_OFFSET: usize = 72;
/// Offset of a limiter's count of claimed table entries.
pub(crate) const KEYS_WORD_OFFSET: usize = 80;
/// Offset of a limiter's count of entries taken over by new keys. Zero in a segment made before
/// takeovers existed, which stays readable: a build that never takes over only ever leaves it so.
pub(crate) const TAKEOVERS_WORD_OFFSET: usize = 88;
/// Offset of an in-flight segment's reclaim turn. Zero in a segment made before turns existed,
/// which stays readable: a zero turn is one long stale, taken at the first call; and a build that
/// knows no turn only reclaims more often than its turn would have it, which is safe.
pub(crate) const TURN_WORD_OFFSET: usize = 96;
/// Where a limiter's immutable block (capacity and quotas) starts: just after the header.
pub(crate) const LIMITER_BLOCK_OFFSET: usize = HEADER_BYTES;
/// Bytes of that block, checksum and padding included: two cache lines.
pub(crate) const LIMITER_BLOCK_BYTES: usize = 128;
/// Offset of the best-effort bucket (16-byte aligned, as every 16-byte word must be).
pub(crate) const BEST_EFFORT_OFFSET: usize = LIMITER_BLOCK_OFFSET + LIMITER_BLOCK_BYTES;
/// Bytes of one bucket: a 16-byte word per dimension.
pub(crate) const BUCKET_BYTES: usize = 32;
/// Offset of the key table.
pub(crate) const TABLE_OFFSET: usize = BEST_EFFORT_OFFSET + BUCKET_BYTES;
/// Bytes of one table entry: the key's identity, then its bucket.
pub(crate) const ENTRY_BYTES: usize = 16 + BUCKET_BYTES;

/// What a segment holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// One count-min sketch.
    Estimator,
    /// Two sketches and an interval word.
    Rate,
    /// A total sketch, one contribution sketch per process slot, and the slot table.
    Inflight,
    /// Token buckets: a best-effort bucket and a key table (crate::shared::limiter).
    Limiter,
}

impl Kind {
    fn code(self) -> u32 {
        match self {
            Self::Estimator => 1,
            Self::Rate => 2,
            Self::Inflight => 3,
            Self::Limiter => 4,
        }
    }

    fn from_code(code: u32) -> Option<Self> {
        match code {
            1 => Some(Self::Estimator),
            2 => Some(Self::Rate),
            3 => Some(Self::Inflight),
            4 => Some(Self::Limiter),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Estimator => "estimator",
            Self::Rate => "rate",
            Self::Inflight => "in-flight",
            Self::Limiter => "limiter",
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
    /// A limiter's capacity and quotas; `None` unless a limiter, whose `shape` is one row of
    /// key-table entries.
    pub(crate) limiter: Option<LimiterLayout>,
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
            Kind::Limiter => 0,
        }
    }

    /// Where the counters end.
    fn counters_end(&self) -> usize {
        HEADER_BYTES + self.sketches() * self.shape.counters() * COUNTER_BYTES
    }

    /// Byte offset of the in-flight slot table: the first cache line after the counters.
    pub(crate) fn slots_offset(&self) -> usize {
        self.counters_end().next_multiple_of(SLOT_BYTES)
    }

    /// The file's length: sketches at most 2^27 × 8 bytes each, and at most 1 + 2^10 of them
    /// (crate::shared::inflight's limit), so well within `u64` (and `usize` on 64-bit targets).
    pub(crate) fn total_bytes(&self) -> usize {
        if self.kind == Kind::Limiter {
            // At most 2^27 entries (a shape's limit) of 48 bytes.
            return TABLE_OFFSET + self.shape.slots() * ENTRY_BYTES;
        }
        if self.kind == Kind::Inflight {
            return self.slots_offset() + self.processes as usize * SLOT_BYTES;
        }
        // Nothing after the counters: an estimator's or a rate's length is a shared buffer's
        // too (lib/shared-buffer.ts), which has no padding.
        self.counters_end()
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

    /// The layout and creation time a header describes, or why it is refused: the first check it
    /// fails, or another layout version. `file_bytes` is the file's length.
    pub(crate) fn decode(
        bytes: &[u8; FIXED_BYTES],
        file_bytes: u64,
    ) -> Result<(Self, u64), Refusal> {
        let u32_at = |at: usize| {
            u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
        };
        let u64_at = |at: usize| {
            let mut word = [0u8; 8];
            word.copy_from_slice(&bytes[at..at + 8]);
            u64::from_le_bytes(word)
        };
        if bytes[0..8] != MAGIC {
            return Err(CorruptReason::Magic.into());
        }
        // Before the checksum: another version may checksum another header, and what the user
        // must hear is that another keepcount made the file, not that it is damaged.
        let version = u32_at(8);
        if version != FORMAT_VERSION {
            return Err(Refusal::Version(version));
        }
        if u32_at(CHECKSUM_OFFSET) != crc32fast::hash(&bytes[..CHECKSUM_OFFSET]) {
            return Err(CorruptReason::Checksum.into());
        }
        let kind = Kind::from_code(u32_at(12)).ok_or(CorruptReason::Layout)?;
        let shape = Shape::new(u32_at(16) as usize, u32_at(20) as usize)
            .map_err(|_| CorruptReason::Layout)?;
        let interval_nanos = u64_at(32);
        let processes = u32_at(56);
        if (kind == Kind::Rate) != (interval_nanos != 0)
            || (kind == Kind::Inflight) != (processes != 0)
            || (kind == Kind::Limiter && shape.hashes() != 1)
            || processes > crate::shared::inflight::MAX_PROCESSES
        {
            return Err(CorruptReason::Layout.into());
        }
        let layout = Self {
            kind,
            shape,
            seed: u64_at(24),
            interval_nanos,
            processes,
            // Read from its own block once the header is known good (Segment::open_existing).
            limiter: None,
        };
        let total = layout.total_bytes() as u64;
        if u64_at(48) != total || file_bytes != total {
            return Err(CorruptReason::Length.into());
        }
        Ok((layout, u64_at(40)))
    }

    /// The first field in which the segment's layout (`self`) differs from `requested`.
    pub(crate) fn difference(&self, requested: &Self) -> Option<Difference> {
        let (a, b) = (self, requested);
        if a.kind != b.kind {
            return Some(("kind", a.kind.name().into(), b.kind.name().into()));
        }
        if let (Some(a), Some(b)) = (&a.limiter, &b.limiter) {
            // The table's size follows from the capacity: name the capacity, not the slots.
            if let Some(difference) = a.difference(b) {
                return Some(difference);
            }
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
            // The seed is the secret that keeps keys' counters apart: never put it in a message.
            return Some(("seed", String::new(), String::new()));
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
            limiter: None,
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
    fn only_in_flight_slots_start_on_a_cache_line() {
        // An estimator's or a rate's length is a shared buffer's too: no padding after counters
        // that end off a cache line (3 counters: 152 bytes).
        let odd = Shape::new(1, 3).unwrap();
        let estimator = Layout {
            kind: Kind::Estimator,
            shape: odd,
            interval_nanos: 0,
            ..rate()
        };
        assert_eq!(estimator.total_bytes(), 128 + 3 * 8);
        let inflight = Layout {
            kind: Kind::Inflight,
            shape: odd,
            interval_nanos: 0,
            processes: 2,
            ..rate()
        };
        // The total and two contributions end at byte 200, padded to 256; then two 64-byte slots.
        assert_eq!(inflight.slots_offset(), 256);
        assert_eq!(inflight.total_bytes(), 256 + 2 * 64);
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
        assert_eq!(
            Layout::decode(&good, total - 8),
            Err(CorruptReason::Length.into())
        );
        let mut magic = good;
        magic[0] = b'X';
        assert_eq!(
            Layout::decode(&magic, total),
            Err(CorruptReason::Magic.into())
        );
    }

    #[test]
    fn another_layout_version_is_told_apart_from_damage() {
        let layout = rate();
        let total = layout.total_bytes() as u64;
        // Version 2's header, checksum and all, as that build wrote it.
        let mut older = layout.encode(1);
        older[8..12].copy_from_slice(&2u32.to_le_bytes());
        let checksum = crc32fast::hash(&older[..CHECKSUM_OFFSET]);
        older[CHECKSUM_OFFSET..CHECKSUM_OFFSET + 4].copy_from_slice(&checksum.to_le_bytes());
        assert_eq!(Layout::decode(&older, total), Err(Refusal::Version(2)));
        // Whatever else differs: the version is what a reader of this build can tell.
        let mut newer = layout.encode(1);
        newer[8..12].copy_from_slice(&6u32.to_le_bytes());
        assert_eq!(Layout::decode(&newer, total - 8), Err(Refusal::Version(6)));
    }

    #[test]
    fn differences_name_the_first_field() {
        let a = rate();
        let mut b = a;
        assert_eq!(a.difference(&b), None);
        b.seed = 8;
        assert_eq!(
            a.difference(&b),
            Some(("seed", String::new(), String::new()))
        );
        b.kind = Kind::Estimator;
        assert_eq!(a.difference(&b).unwrap().0, "kind");
    }
}
