//! The second vector group, `corrupt`: serialized summaries edited field by field to fail each
//! check of §6 and §6.1 in the decoder's order, and valid ones (merged, or refused as a mismatch).

use crate::cores::{Config, MAX_SAFE};
use crate::keys::{Key, TAG_INT, TAG_STR, edge_keys, s};
use keepcount_limits::heavy::Summary;

/// The fields of a serialized summary, to write valid and invalid ones at will.
#[derive(Clone)]
struct Parts {
    magic: [u8; 4],
    version: u16,
    flags: u16,
    /// `None`: the real length.
    length: Option<u64>,
    threshold: u64,
    capacity: u32,
    /// `None`: the number of `entries`.
    count: Option<u32>,
    overflow: [u64; 3],
    /// `None`: the length of `sketch`.
    sketch_len: Option<u32>,
    sketch: Vec<u8>,
    entries: Vec<(Vec<u8>, u64, u64)>,
    trailing: Vec<u8>,
    /// `false`: the checksum is left wrong.
    seal: bool,
}

impl Parts {
    /// Splits a summary's bytes into its fields.
    fn of(bytes: &[u8]) -> Self {
        let u16_at = |at: usize| u16::from_le_bytes(bytes[at..at + 2].try_into().unwrap());
        let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
        let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
        let sketch_len = u32_at(56) as usize;
        let mut entries = Vec::new();
        let mut at = 60 + sketch_len;
        for _ in 0..u32_at(28) {
            let len = u32_at(at) as usize;
            let key = bytes[at + 4..at + 4 + len].to_vec();
            at += 4 + len;
            entries.push((key, u64_at(at), u64_at(at + 8)));
            at += 16;
        }
        Self {
            magic: bytes[..4].try_into().unwrap(),
            version: u16_at(4),
            flags: u16_at(6),
            length: None,
            threshold: u64_at(16),
            capacity: u32_at(24),
            count: None,
            overflow: [u64_at(32), u64_at(40), u64_at(48)],
            sketch_len: None,
            sketch: bytes[60..60 + sketch_len].to_vec(),
            entries,
            trailing: Vec::new(),
            seal: true,
        }
    }

    fn bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&self.magic);
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&self.flags.to_le_bytes());
        out.extend_from_slice(&[0; 8]);
        out.extend_from_slice(&self.threshold.to_le_bytes());
        out.extend_from_slice(&self.capacity.to_le_bytes());
        let count = self.count.unwrap_or(self.entries.len() as u32);
        out.extend_from_slice(&count.to_le_bytes());
        for n in self.overflow {
            out.extend_from_slice(&n.to_le_bytes());
        }
        let sketch_len = self.sketch_len.unwrap_or(self.sketch.len() as u32);
        out.extend_from_slice(&sketch_len.to_le_bytes());
        out.extend_from_slice(&self.sketch);
        for (key, exact, slack) in &self.entries {
            out.extend_from_slice(&(key.len() as u32).to_le_bytes());
            out.extend_from_slice(key);
            out.extend_from_slice(&exact.to_le_bytes());
            out.extend_from_slice(&slack.to_le_bytes());
        }
        out.extend_from_slice(&self.trailing);
        let length = self.length.unwrap_or(out.len() as u64 + 4);
        out[8..16].copy_from_slice(&length.to_le_bytes());
        let checksum = crc32fast::hash(&out);
        let checksum = if self.seal { checksum } else { !checksum };
        out.extend_from_slice(&checksum.to_le_bytes());
        out
    }
}

/// Re-seals a §5 sketch after an edit (its CRC-32 is the last four bytes).
fn reseal_sketch(sketch: &mut [u8]) {
    let end = sketch.len() - 4;
    let checksum = crc32fast::hash(&sketch[..end]);
    sketch[end..].copy_from_slice(&checksum.to_le_bytes());
}

/// Sets the sketch's counter `index` (row-major, after its 24-byte header) to `value`.
fn set_counter(parts: &mut Parts, index: usize, value: i64) {
    let at = 24 + 8 * index;
    parts.sketch[at..at + 8].copy_from_slice(&value.to_le_bytes());
    reseal_sketch(&mut parts.sketch);
}

/// A summary of `config` tracking each of `keys` (stored forms or not), serialized.
fn tracking(config: Config, keys: &[Vec<u8>]) -> Vec<u8> {
    let summary = Summary::<Vec<u8>>::new(config.settings());
    for key in keys {
        summary.incr(&key[..], config.threshold as u32);
    }
    summary.to_bytes()
}

/// Adds an entry for `key` where the key order puts it.
fn insert(parts: &mut Parts, key: Vec<u8>) {
    parts.entries.push((key, 1, 0));
    parts.entries.sort();
}

/// Invalid summaries, one or more per check of §6 and §6.1 in the decoder's order, and valid
/// ones (merged, or refused as a mismatch), each with what absorbing it into an empty summary of
/// `config` gives.
pub(crate) fn corrupt_cases(config: Config) -> Vec<(&'static str, Vec<u8>)> {
    let source = Summary::<Vec<u8>>::new(config.settings());
    for (i, key) in edge_keys().iter().enumerate().step_by(3) {
        source.incr(&key.stored()[..], 2 + i as u32);
    }
    source.incr(&s("below").stored()[..], 1);
    let good = Parts::of(&source.to_bytes());
    assert_eq!(
        good.bytes(),
        source.to_bytes(),
        "Parts reads what it writes"
    );
    let edit = |f: &dyn Fn(&mut Parts)| {
        let mut parts = good.clone();
        f(&mut parts);
        parts.bytes()
    };
    let full = good.bytes();
    // The first entry's key length, set past the end of the input.
    let mut long_key = full.clone();
    let first_entry = 60 + good.sketch.len();
    long_key[first_entry..first_entry + 4].copy_from_slice(&1000u32.to_le_bytes());
    let end = long_key.len() - 4;
    let checksum = crc32fast::hash(&long_key[..end]);
    long_key[end..].copy_from_slice(&checksum.to_le_bytes());
    let mut cases: Vec<(&'static str, Vec<u8>)> = vec![
        ("valid", full.clone()),
        ("empty input", Vec::new()),
        ("63 bytes", full[..63].to_vec()),
        ("magic", edit(&|p| p.magic = *b"KCCM")),
        ("version 2", edit(&|p| p.version = 2)),
        ("version 0", edit(&|p| p.version = 0)),
        ("reserved flag", edit(&|p| p.flags = 2)),
        ("merged flag", edit(&|p| p.flags = 1)),
        (
            "declared one byte longer",
            edit(&|p| p.length = Some(full.len() as u64 + 1)),
        ),
        ("declared 2^64 - 1", edit(&|p| p.length = Some(u64::MAX))),
        ("one byte cut", full[..full.len() - 1].to_vec()),
        ("checksum", edit(&|p| p.seal = false)),
        (
            "sketch past the end",
            edit(&|p| p.sketch_len = Some(u32::MAX)),
        ),
        ("sketch magic", edit(&|p| p.sketch[0] ^= 1)),
        ("sketch checksum", edit(&|p| p.sketch[30] ^= 1)),
        (
            "sketch one byte short",
            edit(&|p| p.sketch_len = Some(p.sketch.len() as u32 - 1)),
        ),
        ("sketch counter -1", edit(&|p| set_counter(p, 0, -1))),
        (
            "sketch counter i64::MIN",
            edit(&|p| set_counter(p, 5, i64::MIN)),
        ),
        (
            "sketch counter -1 and threshold 0",
            edit(&|p| {
                set_counter(p, 0, -1);
                p.threshold = 0;
            }),
        ),
        (
            "sketch counter i64::MAX",
            edit(&|p| set_counter(p, 0, i64::MAX)),
        ),
        ("threshold 0", edit(&|p| p.threshold = 0)),
        ("capacity 0", edit(&|p| p.capacity = 0)),
        ("capacity 2^24 + 1", edit(&|p| p.capacity = (1 << 24) + 1)),
        ("more entries than capacity", edit(&|p| p.capacity = 2)),
        (
            "entry count past the input",
            edit(&|p| {
                p.capacity = 1 << 24;
                p.count = Some(p.entries.len() as u32 + 40);
            }),
        ),
        (
            "one entry more",
            edit(&|p| p.count = Some(p.entries.len() as u32 + 1)),
        ),
        ("key length past the input", long_key),
        (
            "entry count one short",
            edit(&|p| p.count = Some(p.entries.len() as u32 - 1)),
        ),
        ("trailing byte", edit(&|p| p.trailing = vec![0])),
        (
            "duplicate key",
            edit(&|p| p.entries[1] = p.entries[0].clone()),
        ),
        ("keys descending", edit(&|p| p.entries.swap(0, 1))),
        ("untracked key", edit(&|p| insert(p, s("never").stored()))),
        (
            "key below the threshold",
            edit(&|p| insert(p, s("below").stored())),
        ),
        ("empty key", tracking(config, &[vec![]])),
        ("unknown tag", tracking(config, &[vec![3, 1]])),
        (
            "integer of 7 bytes",
            tracking(config, &[vec![TAG_INT, 1, 2, 3, 4, 5, 6, 7]]),
        ),
        ("string not UTF-8", tracking(config, &[vec![TAG_STR, 0xc3]])),
        (
            "every kind of key",
            tracking(
                config,
                &edge_keys().iter().map(Key::stored).collect::<Vec<_>>(),
            ),
        ),
        ("exact 2^53", edit(&|p| p.entries[0].1 = 1 << 53)),
        ("exact 2^53 - 1", edit(&|p| p.entries[0].1 = MAX_SAFE)),
        ("slack 2^64 - 1", edit(&|p| p.entries[0].2 = u64::MAX)),
        ("overflow weight 2^53", edit(&|p| p.overflow[1] = 1 << 53)),
        (
            "merge-dropped 2^53 - 1",
            edit(&|p| p.overflow[2] = MAX_SAFE),
        ),
        ("another threshold", edit(&|p| p.threshold -= 1)),
    ];
    let other_seed = Summary::<Vec<u8>>::new(Config { seed: 8, ..config }.settings());
    cases.push(("another seed", other_seed.to_bytes()));
    // Other settings are refused right after the checksum, before the entries are read: these
    // would fail later checks under the receiver's settings. A threshold of 0 is not compared.
    for (i, key) in edge_keys().iter().enumerate().step_by(3) {
        other_seed.incr(&key.stored()[..], 2 + i as u32);
    }
    let other = Parts::of(&other_seed.to_bytes());
    let edit_other = |f: &dyn Fn(&mut Parts)| {
        let mut parts = other.clone();
        f(&mut parts);
        parts.bytes()
    };
    cases.extend([
        (
            "another seed, keys descending",
            edit_other(&|p| p.entries.swap(0, 1)),
        ),
        (
            "another seed, entry count past the input",
            edit_other(&|p| {
                p.capacity = 1 << 24;
                p.count = Some(p.entries.len() as u32 + 40);
            }),
        ),
        ("another seed, checksum", edit_other(&|p| p.seal = false)),
        (
            "another seed, threshold 0",
            edit_other(&|p| p.threshold = 0),
        ),
    ]);
    let other_shape = Summary::<Vec<u8>>::new(
        Config {
            slots: config.slots + 1,
            ..config
        }
        .settings(),
    );
    cases.push(("another shape", other_shape.to_bytes()));
    let mut resealed = good.clone();
    resealed.sketch[8] = 0;
    reseal_sketch(&mut resealed.sketch);
    cases.push(("sketch of no rows", resealed.bytes()));
    cases
}
