//! Test vectors for docs/format.md, shared with the TypeScript fallback through `vectors.json`.
//!
//! `vectors_json_is_up_to_date` renders every vector from this crate and compares it with the
//! committed `tests/vectors.json`; after a deliberate format change (a new format version), run
//! `KEEPCOUNT_BLESS=1 cargo test -p keepcount-limits --test vectors` to rewrite it (and
//! `rapidhash_vectors.json`, the long table of the key hash alone that the fallback's port of
//! rapidhash is checked against). The literal values in the other tests were checked against an
//! independent implementation, so the JSON cannot drift along with a bug.

use keepcount_limits::Rows;
use keepcount_limits::Shape;
use keepcount_limits::estimator::Estimator;
use keepcount_limits::hash::{KeyHash, SeededState};
use rapidhash::v3::{RapidSecrets, rapidhash_v3_seeded};
use siphasher::sip::{SipHasher13, SipHasher24};
use std::fmt::Write as _;
use std::hash::{Hash, Hasher};

/// The reference SipHash key 00..0f: `k0` and `k1` little-endian.
const REFERENCE_K0: u64 = 0x0706_0504_0302_0100;
const REFERENCE_K1: u64 = 0x0f0e_0d0c_0b0a_0908;
const OTHER_SEED: u64 = 42;
const SEEDS: [u64; 2] = [REFERENCE_K0, OTHER_SEED];
/// Message lengths for the raw key-hash vectors (bytes 00..n-1): every path of rapidhash V3
/// (under 4, 4..8, 8..=16, 17..=112, one and two 112-byte chunks, past the 224-byte unrolled loop).
const RAW_LENGTHS: [usize; 16] = [0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 33, 112, 113, 240];
/// Seeds of the long key-hash table: zero, small, a bit pattern, all ones, only a high bit.
const TABLE_SEEDS: [u64; 6] = [0, 1, 42, 0xdead_beef_cafe_babe, u64::MAX, 1 << 32];
/// The long table hashes every message length up to this one.
const TABLE_MAX_LENGTH: usize = 300;
/// The vectors' sketch shape.
const HASHES: usize = 4;
const SLOTS: usize = 1000;
const MULTIBYTE: &str = "żółw 🐢";

/// A key as a TypeScript caller passes it, and its Rust equivalent.
#[derive(Clone, Copy)]
enum Key {
    Str(&'static str),
    Bytes(&'static [u8]),
    Int(i64),
}

const KEYS: [Key; 11] = [
    Key::Str(""),
    Key::Str("a"),
    Key::Str("1.2.3.4"),
    Key::Str(MULTIBYTE),
    Key::Bytes(&[]),
    Key::Bytes(&[1, 2, 3]),
    Key::Int(0),
    Key::Int(1),
    Key::Int(-1),
    Key::Int((1 << 53) - 1),
    Key::Int(i64::MIN),
];

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        match self {
            Key::Str(s) => s.hash(state),
            Key::Bytes(b) => b.hash(state),
            Key::Int(i) => i.hash(state),
        }
    }
}

impl Key {
    fn kind(self) -> &'static str {
        match self {
            Key::Str(_) => "string",
            Key::Bytes(_) => "bytes",
            Key::Int(_) => "i64",
        }
    }

    /// The key as JSON: strings as themselves, bytes as hex, integers as decimal strings (i64 does
    /// not fit a JavaScript number).
    fn json(self) -> String {
        match self {
            Key::Str(s) => json_string(s),
            Key::Bytes(b) => format!("\"{}\"", hex(b)),
            Key::Int(i) => format!("\"{i}\""),
        }
    }
}

/// Records the byte stream a key writes, to print it beside the hash.
#[derive(Default)]
struct Stream(Vec<u8>);

impl Hasher for Stream {
    fn write(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
    }
    fn write_usize(&mut self, i: usize) {
        self.0.extend_from_slice(&(i as u64).to_le_bytes());
    }
    fn write_i64(&mut self, i: i64) {
        self.0.extend_from_slice(&i.to_le_bytes());
    }
    fn finish(&self) -> u64 {
        0
    }
}

fn stream(key: Key) -> Vec<u8> {
    let mut s = Stream::default();
    key.hash(&mut s);
    s.0
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn message(n: usize) -> Vec<u8> {
    (0..n).map(|i| i as u8).collect()
}

/// rapidhash V3 under `RapidSecrets::seed(seed)`, as keepcount hashes keys, of raw bytes: the
/// crate's one-shot function, not keepcount's streaming wrapper.
fn raw_key_hash(seed: u64, bytes: &[u8]) -> u64 {
    rapidhash_v3_seeded(bytes, &RapidSecrets::seed(seed))
}

/// The long table's message of length `n`: a pattern that differs per length, so a port that
/// reads past the end or mixes lengths up gets other bytes.
fn table_message(n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| ((i * 31 + n * 7 + 11) & 0xff) as u8)
        .collect()
}

/// `rapidhash_vectors.json`: the derived secrets of each table seed and the hash of every table
/// message length 0..=300 under it.
fn render_table() -> String {
    let mut j = String::from(
        "{\n  \"comment\": \"rapidhash V3 (rapidhash crate 4.5.1, rapidhash_v3_seeded with RapidSecrets::seed(seed)); message of length n is bytes (i*31 + n*7 + 11) & 0xff for i in 0..n; u64 values as decimal strings\",\n  \"seeds\": [\n",
    );
    let mut seeds = Vec::new();
    for seed in TABLE_SEEDS {
        let secrets = RapidSecrets::seed(seed);
        let words: Vec<String> = secrets.secrets.iter().map(|x| format!("\"{x}\"")).collect();
        let hashes: Vec<String> = (0..=TABLE_MAX_LENGTH)
            .map(|n| format!("\"{}\"", raw_key_hash(seed, &table_message(n))))
            .collect();
        seeds.push(format!(
            "    {{ \"seed\": \"{seed}\", \"premixed\": \"{}\", \"secrets\": [{}], \"hashes\": [{}] }}",
            secrets.seed,
            words.join(", "),
            hashes.join(", ")
        ));
    }
    j.push_str(&seeds.join(",\n"));
    j.push_str("\n  ]\n}\n");
    j
}

fn reference_2_4(bytes: &[u8]) -> u64 {
    let mut hasher = SipHasher24::new_with_keys(REFERENCE_K0, REFERENCE_K1);
    hasher.write(bytes);
    hasher.finish()
}

fn columns(seed: u64, key: KeyHash) -> Vec<usize> {
    let rows = Rows::new(Shape::new(HASHES, SLOTS).unwrap(), seed);
    (0..HASHES).map(|row| rows.column(row, key)).collect()
}

/// Row `row`'s words `a`, `c`, `b` for `seed` (docs/format.md §3): SipHash-1-3 keyed by
/// `(seed, 1)` of the u64 `3·row + j`.
fn row_words(seed: u64, row: u64) -> [u64; 3] {
    [0, 1, 2].map(|j| {
        let mut hasher = SipHasher13::new_with_keys(seed, 1);
        hasher.write_u64(3 * row + j);
        hasher.finish()
    })
}

fn halves(hash: u64) -> (u64, u64) {
    (hash & 0xffff_ffff, hash >> 32)
}

/// The fixed sketch of the vectors: 2 × 8, seed 2, "a" += 3, "b" += 5, -7i64 += 1.
fn small_sketch() -> Estimator {
    let est = Estimator::with_seed(2, 8, 2).unwrap();
    est.incr("a", 3);
    est.incr("b", 5);
    est.incr(-7i64, 1);
    est
}

fn render() -> String {
    let mut j = String::new();
    j.push_str("{\n  \"spec\": \"docs/format.md\",\n");
    j.push_str("  \"generator\": \"crates/limits/tests/vectors.rs\",\n");
    j.push_str("  \"notes\": \"seeds and i64 keys are decimal strings; bytes and hashes are hex; hash is the 8 output bytes, h1 = first four read LE, h2 = last four\",\n");

    j.push_str("  \"siphash24_reference\": [\n");
    let rows: Vec<String> = (0..8)
        .map(|n| {
            format!(
                "    {{\"k0\": \"{REFERENCE_K0}\", \"k1\": \"{REFERENCE_K1}\", \"bytes\": \"{}\", \"hash\": \"{}\"}}",
                hex(&message(n)),
                hex(&reference_2_4(&message(n)).to_le_bytes())
            )
        })
        .collect();
    j.push_str(&rows.join(",\n"));
    j.push_str("\n  ],\n");

    j.push_str("  \"rapidhash_v3\": [\n");
    let mut rows = Vec::new();
    for seed in SEEDS {
        for n in RAW_LENGTHS {
            let h = raw_key_hash(seed, &message(n));
            let (h1, h2) = halves(h);
            rows.push(format!(
                "    {{\"seed\": \"{seed}\", \"bytes\": \"{}\", \"hash\": \"{}\", \"h1\": {h1}, \"h2\": {h2}}}",
                hex(&message(n)),
                hex(&h.to_le_bytes()),
            ));
        }
    }
    j.push_str(&rows.join(",\n"));
    j.push_str("\n  ],\n");

    j.push_str("  \"row_words\": [\n");
    let mut rows = Vec::new();
    for seed in SEEDS {
        for row in [0u64, 1, 2, 31] {
            let [a, c, b] = row_words(seed, row);
            rows.push(format!(
                "    {{\"seed\": \"{seed}\", \"row\": {row}, \"a\": \"{a}\", \"c\": \"{c}\", \"b\": \"{b}\"}}"
            ));
        }
    }
    j.push_str(&rows.join(",\n"));
    j.push_str("\n  ],\n");

    let _ = writeln!(
        j,
        "  \"keys\": {{\"hashes\": {HASHES}, \"slots\": {SLOTS}, \"vectors\": ["
    );
    let mut rows = Vec::new();
    for seed in SEEDS {
        for key in KEYS {
            let k = SeededState::new(seed).hash_one_key(key);
            let (h1, h2) = halves(k.to_u64());
            rows.push(format!(
                "    {{\"seed\": \"{seed}\", \"type\": \"{}\", \"key\": {}, \"stream\": \"{}\", \"h1\": {h1}, \"h2\": {h2}, \"columns\": {:?}}}",
                key.kind(),
                key.json(),
                hex(&stream(key)),
                columns(seed, k)
            ));
        }
    }
    j.push_str(&rows.join(",\n"));
    j.push_str("\n  ]},\n");

    let est = small_sketch();
    let _ = writeln!(
        j,
        "  \"sketch\": {{\"hashes\": 2, \"slots\": 8, \"seed\": \"2\", \"increments\": [[\"string\", \"a\", 3], [\"string\", \"b\", 5], [\"i64\", \"-7\", 1]],"
    );
    let _ = writeln!(
        j,
        "    \"estimates\": [[\"string\", \"a\", {}], [\"string\", \"b\", {}], [\"i64\", \"-7\", {}], [\"string\", \"c\", {}]],",
        est.get("a"),
        est.get("b"),
        est.get(-7i64),
        est.get("c")
    );
    let _ = writeln!(j, "    \"bytes\": \"{}\"}}", hex(&est.to_bytes()));
    j.push_str("}\n");
    j
}

/// Compares `rendered` with the committed `tests/<name>`, rewriting it first under
/// `KEEPCOUNT_BLESS`.
fn check_committed(name: &str, rendered: &str) {
    let path = format!("{}/tests/{name}", env!("CARGO_MANIFEST_DIR"));
    if std::env::var_os("KEEPCOUNT_BLESS").is_some() {
        std::fs::write(&path, rendered).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == rendered,
        "tests/{name} differs from the implementation; rerun with KEEPCOUNT_BLESS=1 only if the format changed on purpose"
    );
}

#[test]
fn vectors_json_is_up_to_date() {
    let rendered = render();
    check_committed("vectors.json", &rendered);
    assert!(rendered.len() < 20_000, "vectors.json should stay small");
}

#[test]
fn rapidhash_vectors_json_is_up_to_date() {
    check_committed("rapidhash_vectors.json", &render_table());
}

#[test]
fn reference_siphash_2_4() {
    assert_eq!(
        reference_2_4(&message(0)).to_le_bytes(),
        [0x31, 0x0e, 0x0e, 0xdd, 0x47, 0xdb, 0x6f, 0x72]
    );
    assert_eq!(
        reference_2_4(&message(7)).to_le_bytes(),
        [0x37, 0xd1, 0x01, 0x8b, 0xf5, 0x00, 0x02, 0xab]
    );
}

#[test]
fn the_key_hash_is_rapidhash_v3_of_the_stream() {
    for seed in SEEDS {
        for key in KEYS {
            assert_eq!(
                SeededState::new(seed).hash_one_key(key).to_u64(),
                raw_key_hash(seed, &stream(key))
            );
        }
    }
}

#[test]
fn byte_streams_follow_the_spec() {
    assert_eq!(stream(Key::Str("a")), b"a\xff");
    assert_eq!(
        stream(Key::Bytes(&[1, 2, 3])),
        [3, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3]
    );
    assert_eq!(stream(Key::Int(-1)), [0xff; 8]);
    assert_eq!(stream(Key::Str(MULTIBYTE)).len(), MULTIBYTE.len() + 1);
}

// Literal values below were computed by an independent implementation of docs/format.md
// (a few lines of Python with arbitrary-precision integers: rapidhash V3 and its seed derivation
// from the rapidhash specification, SipHash-1-3, the rows), not by this crate.

#[test]
fn siphash_1_3_of_the_empty_message() {
    let mut hasher = SipHasher13::new_with_keys(REFERENCE_K0, 0);
    hasher.write(&[]);
    assert_eq!(
        hasher.finish().to_le_bytes(),
        [0xdc, 0x81, 0xa2, 0x2e, 0xfe, 0x3b, 0x6d, 0xf4]
    );
}

#[test]
fn rapidhash_secrets_of_seed_0() {
    let secrets = RapidSecrets::seed(0);
    assert_eq!(secrets.seed, 4_053_791_697_709_505_004);
    assert_eq!(secrets.secrets[0], 12_380_781_832_452_113_485);
    assert_eq!(secrets.secrets[6], 17_959_291_465_568_670_760);
}

#[test]
fn string_key_hash_and_columns() {
    let k = SeededState::new(OTHER_SEED).hash_one_key("1.2.3.4");
    assert_eq!(halves(k.to_u64()), (3_508_883_402, 1_348_489_107));
    assert_eq!(columns(OTHER_SEED, k), [28, 198, 688, 577]);
}

#[test]
fn i64_min_key_hash_and_columns() {
    let k = SeededState::new(OTHER_SEED).hash_one_key(i64::MIN);
    assert_eq!(halves(k.to_u64()), (2_069_233_217, 640_969_168));
    assert_eq!(columns(OTHER_SEED, k), [267, 406, 449, 369]);
}

#[test]
fn derived_row_words() {
    assert_eq!(
        row_words(OTHER_SEED, 2),
        [
            2_077_680_511_501_634_204,
            1_178_441_771_473_512_141,
            15_068_423_887_621_685_588
        ]
    );
}

#[test]
fn small_sketch_estimates() {
    let est = small_sketch();
    assert_eq!(
        [est.get("a"), est.get("b"), est.get(-7i64), est.get("c")],
        [3, 5, 1, 0]
    );
}
