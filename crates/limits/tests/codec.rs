//! The serialized sketch (docs/format.md §5): round trips and every way to corrupt it.

use keepcount_limits::ShapeError;
use keepcount_limits::estimator::Estimator;
use keepcount_limits::{DecodeError, MAGIC, VERSION};

/// Seed 2 keeps "a", "b" and -7 apart in at least one row each, so every estimate is exact.
fn sample() -> Vec<u8> {
    let est = Estimator::with_seed(2, 8, 2).unwrap();
    est.incr("a", 3);
    est.incr("b", 5);
    est.incr(-7i64, 1);
    est.to_bytes()
}

/// A header for `hashes × slots` followed by `body` bytes, checksum not fixed up.
fn header(version: u16, flags: u16, hashes: u32, slots: u32) -> Vec<u8> {
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&MAGIC);
    bytes.extend_from_slice(&version.to_le_bytes());
    bytes.extend_from_slice(&flags.to_le_bytes());
    bytes.extend_from_slice(&hashes.to_le_bytes());
    bytes.extend_from_slice(&slots.to_le_bytes());
    bytes.extend_from_slice(&42u64.to_le_bytes());
    bytes.extend_from_slice(&[0; 4]);
    bytes
}

#[test]
fn round_trips_counters_shape_and_seed() {
    let bytes = sample();
    let est = Estimator::from_bytes(&bytes).unwrap();
    assert_eq!((est.hashes(), est.slots(), est.seed()), (2, 8, 2));
    assert_eq!(est.get("a"), 3);
    assert_eq!(est.get("b"), 5);
    assert_eq!(est.get(-7i64), 1);
    assert_eq!(est.to_bytes(), bytes);
}

#[test]
fn layout_matches_the_spec() {
    let bytes = sample();
    assert_eq!(bytes.len(), 28 + 8 * 2 * 8);
    assert_eq!(&bytes[0..4], b"KCCM");
    assert_eq!(&bytes[4..6], &VERSION.to_le_bytes());
    assert_eq!(&bytes[6..8], &[0, 0]);
    assert_eq!(&bytes[8..12], &2u32.to_le_bytes());
    assert_eq!(&bytes[12..16], &8u32.to_le_bytes());
    assert_eq!(&bytes[16..24], &2u64.to_le_bytes());
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    assert_eq!(crc, crc32fast::hash(body).to_le_bytes());
    let total: i64 = body[24..]
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .sum();
    assert_eq!(total, 2 * (3 + 5 + 1)); // every increment lands once per row
}

#[test]
fn rejects_truncation_at_every_byte() {
    let bytes = sample();
    for len in 0..bytes.len() {
        let err = Estimator::from_bytes(&bytes[..len]).unwrap_err();
        if len < 28 {
            assert_eq!(err, DecodeError::Truncated { len });
        } else {
            assert_eq!(
                err,
                DecodeError::Length {
                    expected: bytes.len(),
                    actual: len
                }
            );
        }
    }
}

#[test]
fn rejects_trailing_bytes() {
    let mut bytes = sample();
    bytes.push(0);
    assert!(matches!(
        Estimator::from_bytes(&bytes),
        Err(DecodeError::Length { .. })
    ));
}

#[test]
fn rejects_wrong_magic_version_and_flags() {
    let mut bytes = sample();
    bytes[3] = b'X';
    assert_eq!(
        Estimator::from_bytes(&bytes).unwrap_err(),
        DecodeError::BadMagic(*b"KCCX")
    );
    let err = Estimator::from_bytes(&header(4, 0, 1, 1)).unwrap_err();
    assert_eq!(err, DecodeError::UnsupportedVersion(4));
    assert_eq!(
        err.to_string(),
        "unsupported sketch format version 4, this build reads version 3"
    );
    let err = Estimator::from_bytes(&header(VERSION, 0x8000, 1, 1)).unwrap_err();
    assert_eq!(err, DecodeError::ReservedFlags(0x8000));
}

#[test]
fn refuses_versions_1_and_2_saying_they_are_no_longer_read() {
    for version in [1u16, 2] {
        let mut bytes = sample();
        bytes[4..6].copy_from_slice(&version.to_le_bytes());
        let err = Estimator::from_bytes(&bytes).unwrap_err();
        assert_eq!(err, DecodeError::UnsupportedVersion(version));
        assert_eq!(
            err.to_string(),
            format!(
                "sketch format version {version} is no longer read: it put keys in other \
                 counters (docs/format.md, version history); this build reads version 3, so \
                 rebuild the sketch"
            )
        );
    }
}

#[test]
fn rejects_absurd_shapes_before_reading_further() {
    let shape = |h, s| Estimator::from_bytes(&header(VERSION, 0, h, s)).unwrap_err();
    assert_eq!(shape(0, 8), DecodeError::Shape(ShapeError::Hashes(0)));
    assert_eq!(shape(33, 8), DecodeError::Shape(ShapeError::Hashes(33)));
    assert_eq!(shape(4, 0), DecodeError::Shape(ShapeError::ZeroSlots));
    assert!(matches!(
        shape(32, u32::MAX),
        DecodeError::Shape(ShapeError::TooManyCounters { .. })
    ));
    // A valid but 1 GiB shape in a 28-byte input: refused by length, before any allocation.
    assert_eq!(
        shape(4, 1 << 25),
        DecodeError::Length {
            expected: 28 + 8 * (1 << 27),
            actual: 28
        }
    );
}

#[test]
fn rejects_every_flipped_bit() {
    let bytes = sample();
    for bit in 0..bytes.len() * 8 {
        let mut corrupt = bytes.clone();
        corrupt[bit / 8] ^= 1 << (bit % 8);
        let err = Estimator::from_bytes(&corrupt).unwrap_err();
        if bit >= 24 * 8 {
            assert!(
                matches!(err, DecodeError::Checksum { .. }),
                "bit {bit}: {err}"
            );
        }
    }
}

#[test]
fn every_error_has_its_own_message() {
    let messages = [
        DecodeError::Truncated { len: 3 },
        DecodeError::BadMagic(*b"ABCD"),
        DecodeError::UnsupportedVersion(9),
        DecodeError::ReservedFlags(1),
        DecodeError::Shape(ShapeError::ZeroSlots),
        DecodeError::Length {
            expected: 1,
            actual: 2,
        },
        DecodeError::Checksum {
            stored: 1,
            computed: 2,
        },
    ]
    .map(|e| e.to_string());
    let prefixes: std::collections::HashSet<_> = messages
        .iter()
        .map(|m| m.split(':').next().unwrap())
        .collect();
    assert_eq!(prefixes.len(), messages.len(), "{messages:#?}");
    assert!(messages[6].contains("checksum mismatch"));
    assert!(messages[0].contains("truncated"));
}

#[test]
fn decode_error_exposes_the_shape_error_as_its_source() {
    use std::error::Error;
    let err = DecodeError::Shape(ShapeError::ZeroSlots);
    assert_eq!(
        err.source().unwrap().to_string(),
        ShapeError::ZeroSlots.to_string()
    );
}
