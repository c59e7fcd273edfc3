//! Test vectors for docs/format.md, shared with the TypeScript fallback through `vectors.json`.
//!
//! `vectors_json_is_up_to_date` renders every vector from this crate and compares it with the
//! committed `tests/vectors.json`; after a deliberate format change (a new format version), run
//! `KEEPCOUNT_BLESS=1 cargo test -p keepcount-limits --test vectors` to rewrite it. The literal
//! values in the other tests were checked against an independent implementation, so the JSON
//! cannot drift along with a bug.

use keepcount_limits::estimator::Estimator;
use keepcount_limits::hash::{HalfSipHasher, KeyHash, KeyHasher};
use std::fmt::Write as _;
use std::hash::{Hash, Hasher};

const REFERENCE_SEED: u64 = 0x0706_0504_0302_0100;
const OTHER_SEED: u64 = 42;
const SEEDS: [u64; 2] = [REFERENCE_SEED, OTHER_SEED];
/// Message lengths for the raw HalfSipHash-1-3 vectors (bytes 00..n-1): every tail length, one
/// and several whole words.
const RAW_LENGTHS: [usize; 12] = [0, 1, 2, 3, 4, 5, 7, 8, 11, 12, 16, 33];
const HASHES: u32 = 4;
const SLOTS: u32 = 1000;
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

fn raw_hash<const C: usize, const D: usize>(seed: u64, bytes: &[u8]) -> u64 {
    let mut hasher = HalfSipHasher::<C, D>::with_seed(seed);
    hasher.write(bytes);
    hasher.finish()
}

fn columns(key: KeyHash) -> Vec<u32> {
    (0..HASHES).map(|row| key.column(row, SLOTS)).collect()
}

/// The fixed sketch of the vectors: 2 × 8, seed 42, "a" += 3, "b" += 5, -7i64 += 1.
fn small_sketch() -> Estimator {
    let est = Estimator::with_seed(2, 8, 42).unwrap();
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

    j.push_str("  \"halfsiphash24_reference\": [\n");
    let rows: Vec<String> = (0..7)
        .map(|n| {
            let h = raw_hash::<2, 4>(REFERENCE_SEED, &message(n));
            format!(
                "    {{\"seed\": \"{REFERENCE_SEED}\", \"bytes\": \"{}\", \"hash\": \"{}\"}}",
                hex(&message(n)),
                hex(&h.to_le_bytes())
            )
        })
        .collect();
    j.push_str(&rows.join(",\n"));
    j.push_str("\n  ],\n");

    j.push_str("  \"halfsiphash13\": [\n");
    let mut rows = Vec::new();
    for seed in SEEDS {
        for n in RAW_LENGTHS {
            let h = raw_hash::<1, 3>(seed, &message(n));
            let k = KeyHash::from_u64(h);
            rows.push(format!(
                "    {{\"seed\": \"{seed}\", \"bytes\": \"{}\", \"hash\": \"{}\", \"h1\": {}, \"h2\": {}}}",
                hex(&message(n)),
                hex(&h.to_le_bytes()),
                k.h1(),
                k.h2()
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
            let k = KeyHasher::with_seed(seed).hash_one_key(key);
            rows.push(format!(
                "    {{\"seed\": \"{seed}\", \"type\": \"{}\", \"key\": {}, \"stream\": \"{}\", \"h1\": {}, \"h2\": {}, \"columns\": {:?}}}",
                key.kind(),
                key.json(),
                hex(&stream(key)),
                k.h1(),
                k.h2(),
                columns(k)
            ));
        }
    }
    j.push_str(&rows.join(",\n"));
    j.push_str("\n  ]},\n");

    let est = small_sketch();
    let _ = writeln!(
        j,
        "  \"sketch\": {{\"hashes\": 2, \"slots\": 8, \"seed\": \"42\", \"increments\": [[\"string\", \"a\", 3], [\"string\", \"b\", 5], [\"i64\", \"-7\", 1]],"
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

#[test]
fn vectors_json_is_up_to_date() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vectors.json");
    let rendered = render();
    if std::env::var_os("KEEPCOUNT_BLESS").is_some() {
        std::fs::write(path, &rendered).unwrap();
    }
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        committed == rendered,
        "tests/vectors.json differs from the implementation; rerun with KEEPCOUNT_BLESS=1 only if the format changed on purpose"
    );
    assert!(rendered.len() < 20_000, "vectors.json should stay small");
}

#[test]
fn reference_halfsiphash_2_4() {
    assert_eq!(
        raw_hash::<2, 4>(REFERENCE_SEED, &message(0)).to_le_bytes(),
        [0x21, 0x8d, 0x1f, 0x59, 0xb9, 0xb8, 0x3c, 0xc8]
    );
    assert_eq!(
        raw_hash::<2, 4>(REFERENCE_SEED, &message(6)).to_le_bytes(),
        [0xce, 0x3e, 0x91, 0x35, 0x8a, 0xa2, 0xbc, 0x25]
    );
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

// Literal values below were computed by an independent implementation of docs/format.md.

#[test]
fn halfsiphash_1_3_of_the_empty_message() {
    let h = raw_hash::<1, 3>(REFERENCE_SEED, &[]);
    assert_eq!(
        h.to_le_bytes(),
        [0x76, 0xa5, 0xd0, 0x21, 0x23, 0x20, 0xf7, 0x2a]
    );
}

#[test]
fn string_key_hash_and_columns() {
    let k = KeyHasher::with_seed(OTHER_SEED).hash_one_key("1.2.3.4");
    assert_eq!((k.h1(), k.h2()), (3_424_364_772, 3_821_964_182));
    assert_eq!(columns(k), [797, 687, 577, 466]);
}

#[test]
fn i64_min_key_hash_and_columns() {
    let k = KeyHasher::with_seed(OTHER_SEED).hash_one_key(i64::MIN);
    assert_eq!((k.h1(), k.h2()), (2_656_644_546, 751_370_223));
    assert_eq!(columns(k), [618, 793, 968, 143]);
}

#[test]
fn small_sketch_estimates() {
    let est = small_sketch();
    assert_eq!(
        [est.get("a"), est.get("b"), est.get(-7i64), est.get("c")],
        [3, 5, 1, 0]
    );
}
